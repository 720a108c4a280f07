#include "hybrid/parts.hpp"

#include <cstring>
#include <map>
#include <stdexcept>
#include <string>

namespace dnnlab::hybrid {

void check_hybrid_spec(const nn::ModelSpec& model) {
  const auto& p = model.parts;
  if (p.size() != 2 || p[0].name != "features" || p[1].name != "classifier") {
    std::string got;
    for (const auto& part : p) got += (got.empty() ? "" : ", ") + part.name;
    throw SpecError(model.where, "model.parts",
                    "distributed training needs the model as two parts, `features` (trained "
                    "on the clients) then `classifier` (on the server); the spec has " +
                        (p.empty() ? std::string("`layers:` without parts") : got));
  }
  // An empty classifier is allowed (data-parallel: the server computes only
  // the loss); an empty features part would leave the clients nothing to do.
  if (p[0].end == p[0].begin)
    throw SpecError(model.where, "model.parts.features",
                    "the clients' part has no layers; for data-parallel training put every "
                    "layer in `features` and write `classifier: []`");
}

void assemble_whole(nn::Model& whole, nn::Model& features, nn::Model& classifier) {
  std::map<std::string, nn::Param*> by_name;
  for (nn::Param* p : features.saved_tensors()) by_name[p->name] = p;
  for (nn::Param* p : classifier.saved_tensors()) by_name[p->name] = p;
  for (nn::Param* p : whole.saved_tensors()) {
    auto it = by_name.find(p->name);
    if (it == by_name.end() || !(it->second->value.shape() == p->value.shape()))
      throw std::logic_error("hybrid: the parts do not hold the whole model's " + p->name);
    std::memcpy(p->value.data(), it->second->value.data(), sizeof(float) * p->value.numel());
  }
}

}  // namespace dnnlab::hybrid
