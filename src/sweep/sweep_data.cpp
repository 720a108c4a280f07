// The data sets a sweep can train on (sweep_data.hpp).
#include "sweep/sweep_data.hpp"

#include <algorithm>
#include <map>
#include <optional>
#include <string>
#include <tuple>

#include "sweep/run_template.hpp"

namespace dnnlab::sweep {

namespace {

constexpr std::size_t kMaxDataCombos = 4096;

auto files(const nn::DataSpec& d) {
  return std::tie(d.path, d.labels, d.test_path, d.test_labels);
}

// The template's data under `params`; nullopt where the template gives no
// run for them (such a trial never starts, so reads nothing).
std::optional<nn::DataSpec> data_of(const SweepSpec& sweep, const nlohmann::json& params) {
  try {
    return sweep.instantiate(params).data;
  } catch (const SpecError&) {
    return std::nullopt;
  }
}

}  // namespace

std::vector<nn::DataSpec> data_specs(const SweepSpec& sweep) {
  nlohmann::json base = nlohmann::json::object();
  for (const ParamSpec& p : sweep.search.parameters) base[p.name] = p.check_values().front();
  const std::optional<nn::DataSpec> base_data = data_of(sweep, base);
  // The parameters some data file's name depends on.
  std::vector<const ParamSpec*> naming;
  std::size_t product = 1;
  for (const ParamSpec& p : sweep.search.parameters) {
    // Only a placeholder in the data section can name a file: the others
    // are not tried (a sweep of 12,000 widths would be parsed 12,000 times more).
    const auto& phs = sweep.run_template().placeholders();
    if (std::none_of(phs.begin(), phs.end(), [&p](const Placeholder& ph) {
          return ph.name == p.name && ph.field.starts_with("template.data");
        }))
      continue;
    const auto values = p.check_values();
    for (std::size_t i = 1; i < values.size(); ++i) {
      nlohmann::json n = base;
      n[p.name] = values[i];
      const auto d = data_of(sweep, n);
      if (d.has_value() != base_data.has_value() || (d && files(*d) != files(*base_data))) {
        naming.push_back(&p);
        product *= values.size();
        break;
      }
    }
    if (product > kMaxDataCombos)
      throw SpecError(p.where, "search.parameters." + p.name,
                      "the data files' names depend on more than " +
                          std::to_string(kMaxDataCombos) +
                          " combinations of parameter values: too many to check");
  }
  std::vector<nlohmann::json> combos = {base};
  for (const ParamSpec* p : naming) {
    std::vector<nlohmann::json> grown;
    for (const auto& c : combos)
      for (const auto& v : p->check_values()) {
        nlohmann::json n = c;
        n[p->name] = v;
        grown.push_back(std::move(n));
      }
    combos = std::move(grown);
  }
  std::map<std::string, nn::DataSpec> distinct;
  for (const auto& c : combos)
    if (auto d = data_of(sweep, c)) distinct.emplace(d->key(), std::move(*d));
  std::vector<nn::DataSpec> out;
  for (auto& [k, d] : distinct) out.push_back(std::move(d));
  return out;
}

}  // namespace dnnlab::sweep
