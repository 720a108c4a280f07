// `dnnlab help-man` (hidden): the man pages and the bash completion, written
// from the CLI11 app itself so that they cannot drift from `--help`. The
// build runs it (src/cli/CMakeLists.txt) and `cmake --install` installs what
// it wrote.
#include <filesystem>
#include <fstream>
#include <iostream>

#include "cli/commands.hpp"
#include "dnnlab/build_info.hpp"

namespace dnnlab::cli {

namespace {

// Text as roff reads it: backslashes escaped, '-' as a hyphen-minus, and no
// line starting with a control character.
std::string roff(const std::string& text) {
  std::string out;
  bool line_start = true;
  for (char ch : text) {
    if (line_start && (ch == '.' || ch == '\'')) out += "\\&";
    if (ch == '\\')
      out += "\\e";
    else if (ch == '-')
      out += "\\-";
    else
      out += ch;
    line_start = ch == '\n';
  }
  return out;
}

// The subcommands `dnnlab --help` lists (not the hidden ones, this one included).
std::vector<const CLI::App*> visible_subcommands(const CLI::App& app) {
  std::vector<const CLI::App*> subs;
  for (const CLI::App* s : app.get_subcommands([](const CLI::App*) { return true; }))
    if (!s->get_group().empty()) subs.push_back(s);
  return subs;
}

std::vector<const CLI::Option*> visible_options(const CLI::App& sub) {
  std::vector<const CLI::Option*> opts;
  for (const CLI::Option* o : sub.get_options())
    if (!o->get_group().empty()) opts.push_back(o);
  return opts;
}

std::string header(const std::string& name) {
  std::string upper;
  for (char ch : name) upper += static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  // No date: the same sources make the same page.
  return ".TH " + upper + " 1 \"\" \"dnnlab " + build::kVersion + "\" \"dnnlab manual\"\n";
}

std::string option_entry(const CLI::Option& o) {
  std::string names;
  for (const auto& s : o.get_snames())
    names += (names.empty() ? "" : ", ") + ("\\fB\\-" + s + "\\fR");
  for (const auto& l : o.get_lnames())
    names += (names.empty() ? "" : ", ") + ("\\fB\\-\\-" + roff(l) + "\\fR");
  if (o.get_positional()) names = "\\fI" + roff(o.get_name(true)) + "\\fR";
  std::string type = o.get_type_name();
  if (!o.get_positional() && o.get_expected_max() > 0 && !type.empty())
    names += " \\fI" + roff(type) + "\\fR";
  std::string text = o.get_description();
  if (!o.get_default_str().empty()) text += " (default: " + o.get_default_str() + ")";
  return ".TP\n" + names + "\n" + roff(text) + "\n";
}

}  // namespace

std::string man_page(const CLI::App& app, const CLI::App* sub) {
  std::string page;
  if (!sub) {
    page += header("dnnlab");
    std::string about = app.get_description();  // "dnnlab: train and ..."
    if (about.rfind("dnnlab: ", 0) == 0) about.erase(0, 8);
    page += ".SH NAME\ndnnlab \\- " + roff(about) + "\n";
    page +=
        ".SH SYNOPSIS\n\\fBdnnlab\\fR \\fICOMMAND\\fR [\\fIOPTIONS\\fR]\n.br\n"
        "\\fBdnnlab \\-\\-version\\fR\n";
    page += ".SH COMMANDS\n";
    for (const CLI::App* s : visible_subcommands(app))
      page += ".TP\n\\fBdnnlab\\-" + roff(s->get_name()) + "\\fR(1)\n" +
              roff(s->get_description()) + "\n";
    page +=
        ".SH OPTIONS\n.TP\n\\fB\\-\\-version\\fR\nThe version, build id, compiler and kernel "
        "targets of this binary (the same object as /api/stats' \"build\").\n";
    page +=
        ".SH EXIT STATUS\n0 success; 2 bad spec or usage; 3 bad or missing data; 4 training "
        "diverged; 5 rerun differs; 6 a sweep ended with failed trials; 1 any other error.\n";
    page +=
        ".SH FILES\n.TP\n\\fI../share/dnnlab/web\\fR\nThe dashboard, join page and wasm "
        "cores, found beside the binary (or named by \\fB\\-\\-web\\fR or "
        "\\fBDNNLAB_WEB_DIR\\fR).\n";
    page += ".SH SEE ALSO\n";
    std::string sep;
    for (const CLI::App* s : visible_subcommands(app)) {
      page += sep + "\\fBdnnlab\\-" + roff(s->get_name()) + "\\fR(1)";
      sep = ",\n";
    }
    page += "\n";
    return page;
  }
  const std::string name = "dnnlab-" + sub->get_name();
  page += header(name);
  page += ".SH NAME\n" + roff(name) + " \\- " + roff(sub->get_description()) + "\n";
  page += ".SH SYNOPSIS\n\\fBdnnlab " + roff(sub->get_name()) + "\\fR [\\fIOPTIONS\\fR]";
  for (const CLI::Option* o : visible_options(*sub))
    if (o->get_positional()) page += " \\fI" + roff(o->get_name(true)) + "\\fR";
  page += "\n";
  std::string arguments, options;
  for (const CLI::Option* o : visible_options(*sub))
    (o->get_positional() ? arguments : options) += option_entry(*o);
  if (!arguments.empty()) page += ".SH ARGUMENTS\n" + arguments;
  page += ".SH OPTIONS\n" + options;
  if (!sub->get_footer().empty()) page += ".SH NOTES\n" + roff(sub->get_footer()) + "\n";
  page += ".SH SEE ALSO\n\\fBdnnlab\\fR(1)\n";
  return page;
}

std::string bash_completion(const CLI::App& app) {
  std::string subs, cases;
  for (const CLI::App* s : visible_subcommands(app)) {
    subs += (subs.empty() ? "" : " ") + s->get_name();
    std::string opts;
    for (const CLI::Option* o : visible_options(*s)) {
      for (const auto& sn : o->get_snames()) opts += " -" + sn;
      for (const auto& ln : o->get_lnames()) opts += " --" + ln;
    }
    cases += "    " + s->get_name() + ") opts=\"" + opts.substr(opts.empty() ? 0 : 1) + "\" ;;\n";
  }
  return "# bash completion for dnnlab; generated by `dnnlab help-man --bash-completion`.\n"
         "_dnnlab() {\n"
         "  local cur=${COMP_WORDS[COMP_CWORD]} opts=\"\"\n"
         "  if ((COMP_CWORD == 1)); then\n"
         "    COMPREPLY=($(compgen -W \"" +
         subs +
         " --help --version\" -- \"$cur\"))\n"
         "    return\n"
         "  fi\n"
         "  case ${COMP_WORDS[1]} in\n" +
         cases +
         "  esac\n"
         "  if [[ $cur == -* ]]; then\n"
         "    COMPREPLY=($(compgen -W \"$opts\" -- \"$cur\"))\n"
         "  else\n"
         "    COMPREPLY=($(compgen -f -- \"$cur\"))\n"
         "  fi\n"
         "}\n"
         "complete -o filenames -F _dnnlab dnnlab\n";
}

Command add_help_man(CLI::App& app) {
  struct Options {
    std::string subcommand;
    std::string outdir;
    bool completion = false;
  };
  auto o = std::make_shared<Options>();
  CLI::App* c = app.add_subcommand("help-man", "Write the man pages and the bash completion");
  c->group("");  // for the build, not for users: hidden from --help
  c->add_option("subcommand", o->subcommand, "The page of one subcommand (default: dnnlab(1))");
  c->add_option("--outdir", o->outdir,
                "Write every page (man1/dnnlab*.1) and bash-completion/dnnlab into this directory");
  c->add_flag("--bash-completion", o->completion, "The bash completion script instead");
  return [o, &app] {
    if (!o->outdir.empty()) {
      namespace fs = std::filesystem;
      fs::create_directories(fs::path(o->outdir) / "man1");
      fs::create_directories(fs::path(o->outdir) / "bash-completion");
      std::ofstream(fs::path(o->outdir) / "man1" / "dnnlab.1") << man_page(app, nullptr);
      for (const CLI::App* s : visible_subcommands(app))
        std::ofstream(fs::path(o->outdir) / "man1" / ("dnnlab-" + s->get_name() + ".1"))
            << man_page(app, s);
      std::ofstream(fs::path(o->outdir) / "bash-completion" / "dnnlab") << bash_completion(app);
      return 0;
    }
    if (o->completion) {
      std::cout << bash_completion(app);
      return 0;
    }
    const CLI::App* sub = nullptr;
    if (!o->subcommand.empty()) {
      for (const CLI::App* s : visible_subcommands(app))
        if (s->get_name() == o->subcommand) sub = s;
      if (!sub) throw UsageError("help-man: no subcommand '" + o->subcommand + "'");
    }
    std::cout << man_page(app, sub);
    return 0;
  };
}

}  // namespace dnnlab::cli
