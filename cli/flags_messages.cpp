// cli/flags_messages.cpp: what the parse says besides the checks: CLI11's errors rewritten as one
// line in the checks' style, the manual's layout, the validators with their messages, and
// --verbose's table of the resolved options (design in cli/flags.h).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "cli/flags_impl.h"  // defines: ConfigEntry, the declarations below; cli/flags.h Options

namespace paralab {

namespace {

bool all_digits(const std::string& t, size_t from) {
  if (from >= t.size()) return false;
  for (size_t i = from; i < t.size(); ++i)
    if (!std::isdigit(static_cast<unsigned char>(t[i]))) return false;
  return true;
}
bool looks_integer(const std::string& t) {
  return all_digits(t, !t.empty() && (t[0] == '-' || t[0] == '+') ? 1 : 0);
}

// The last entry of the --config files that set opt: the one CLI11 applied.
const ConfigEntry* config_source(const std::vector<ConfigEntry>& config, const CLI::Option* opt) {
  const ConfigEntry* found = nullptr;
  for (const ConfigEntry& e : config)
    if (e.option == opt) found = &e;
  return found;
}

std::string where(const ConfigEntry& e) { return e.file + ":" + std::to_string(e.line); }

}  // namespace

bool typed_on_command_line(const CLI::Option& opt, int argc, const char* const* argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--") break;
    if (a.size() < 2 || a[0] != '-') continue;
    const std::string name = a.substr(0, a.find('='));
    if (opt.check_name(name) || (name.rfind("--", 0) == 0 && opt.check_fname(name.substr(2))))
      return true;
  }
  return false;
}

std::string cli11_error_message(const CLI::App& app, const CLI::Error& e, int argc,
                                const char* const* argv, const std::vector<ConfigEntry>& config) {
  std::string msg = e.what();
  for (char& c : msg)
    if (c == '\n' || c == '\r') c = ' ';
  while (!msg.empty() && msg.back() == ' ') msg.pop_back();
  // The flag the message is about: "Could not convert: --x = a,b" or "--x: ...".
  const std::string convert = "Could not convert: ";
  const bool conversion = msg.rfind(convert, 0) == 0;
  std::string name;
  if (conversion)
    name = msg.substr(convert.size(), msg.find(" = ") - convert.size());
  else if (msg.rfind("-", 0) == 0 && msg.find(": ") != std::string::npos)
    name = msg.substr(0, msg.find(": "));
  const CLI::Option* opt = name.empty() ? nullptr : app.get_option_no_throw(name);
  if (opt == nullptr) return msg;
  const std::string rest = conversion ? "" : msg.substr(name.size() + 2);
  const std::string type = opt->get_type_name();
  const bool integer = type.rfind("INT", 0) == 0 || type.rfind("UINT", 0) == 0;
  const bool number = type.rfind("FLOAT", 0) == 0;
  if (conversion) {
    // A flag given twice takes the last value: that is the one that did not convert.
    const std::string bad = opt->results().empty() ? "" : opt->results().back();
    if (opt->get_expected_max() == 0)  // a switch
      msg = name + " is a switch: give it alone (or =true / =false), got " + bad;
    else if (integer)
      msg = name + (looks_integer(bad) ? " is out of range, got " : " must be an integer, got ") +
            bad;
    else if (number)
      msg = name + " must be a number, got " + bad;
    else
      msg = name + ": cannot read " + bad;
  } else if (rest.rfind("must be ", 0) == 0) {
    msg = name + " " + rest;  // one_of, seed_range
  } else if (rest.find(" required ") != std::string::npos &&
             rest.size() > 8 && rest.compare(rest.size() - 8, 8, " missing") == 0) {
    msg = name + " needs a value" +
          (integer ? " (an integer)" : number ? " (a number)" : "");
  }
  if (!typed_on_command_line(*opt, argc, argv))
    if (const ConfigEntry* src = config_source(config, opt))
      msg = "--config " + where(*src) + ": " + msg;
  return msg;
}

namespace {
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] != b[j - 1])});
      diagonal = up;
    }
  }
  return row[b.size()];
}
}  // namespace

std::string closest_flag(const CLI::App& app, const std::string& typed) {
  std::string bare = typed.substr(0, typed.find('='));
  bare = bare.substr(std::min(bare.find_first_not_of('-'), bare.size()));
  for (char& c : bare)
    if (c == '_') c = '-';
  if (bare.empty()) return "";
  std::string best;
  size_t best_distance = std::max<size_t>(1, bare.size() / 4) + 1;  // the limit, exclusive
  for (const CLI::Option* opt : app.get_options()) {
    if (opt == app.get_help_ptr()) continue;
    for (const std::string& name : opt->get_lnames()) {
      const size_t d = edit_distance(bare, name);
      if (d < best_distance) best_distance = d, best = "--" + name;
    }
  }
  return best;
}

std::string ManualFormatter::make_option_name(const CLI::Option* opt, bool positional) const {
  // CLI11 shows a switch and its negation as "--x,--no-x{false}"; the manual documents the
  // one that changes the default (the other still works, as does either TOML key).
  if (positional || opt->get_fnames().empty())
    return CLI::Formatter::make_option_name(opt, positional);
  std::string names;
  for (const std::string& f : opt->get_fnames()) names += (names.empty() ? "--" : ",--") + f;
  return names;
}

CLI::Validator one_of(const std::vector<std::string>& names) {
  std::string list, shown;
  for (const std::string& n : names) {
    list += (list.empty() ? "" : ", ") + n;
    shown += (shown.empty() ? "{" : ",") + n;
  }
  CLI::Validator v(
      [names, list](std::string& s) -> std::string {
        for (const std::string& n : names)
          if (s == n) return "";
        return "must be one of " + list + ", got " + s;
      },
      shown + "}");
  // Index 0 is the last value given: the earlier ones of a repeated flag do not count.
  return v.application_index(0);
}

CLI::Validator whole_number() {
  CLI::Validator v(
      [](std::string& s) -> std::string {
        if (s.find_first_of(".eE") == std::string::npos) return "";  // an integer as it is
        char* end = nullptr;
        const double d = std::strtod(s.c_str(), &end);
        if (end == s.c_str() + s.size() && std::isfinite(d) && d == std::floor(d) &&
            std::fabs(d) < 9.2e18)
          s = std::to_string(static_cast<long long>(d));
        return "";  // anything else: CLI11's own conversion error names it
      },
      "");
  return v.application_index(0);
}

CLI::Validator seed_range() {
  CLI::Validator v(
      [](std::string& s) -> std::string {
        errno = 0;
        if (all_digits(s, s.rfind('+', 0) == 0 ? 1 : 0)) {
          (void)std::strtoull(s.c_str(), nullptr, 10);
          if (errno != ERANGE) return "";
        }
        return "must be an integer from 0 to 18446744073709551615, got " + s;
      },
      "");
  return v.application_index(0);
}

std::string resolved_options_text(CLI::App& app, int argc, const char* const* argv,
                                  const std::vector<ConfigEntry>& config,
                                  const std::vector<std::string>& given, bool show_moe) {
  std::ostringstream out;
  out << "resolved options (the value each flag ends with, and where it came from):\n";
  size_t i = 0;
  for (CLI::Option* opt : app.get_options()) {
    const size_t k = i++;
    if (opt == app.get_help_ptr() || opt == app.get_config_ptr()) continue;
    if (!show_moe && opt->get_name().rfind("--moe-", 0) == 0) continue;  // a dense model
    opt->capture_default_str();
    std::string value = opt->get_default_str();
    if (value.empty() || value == "[]") value = "(none)";  // "[]": an empty list
    const ConfigEntry* src = config_source(config, opt);
    std::string from;
    if (typed_on_command_line(*opt, argc, argv))
      from = src ? "command line (over " + where(*src) + ")" : "command line";
    else
      from = src ? where(*src) : "default";
    if (k < given.size() && given[k] != opt->get_default_str())
      from += ", resolved from " +
              (given[k].empty() || given[k] == "[]" ? std::string("(none)") : given[k]);
    char line[512];
    std::snprintf(line, sizeof line, "  %-44s %-14s %s\n", opt->get_name().c_str(),
                  value.c_str(), from.c_str());
    out << line;
  }
  const std::vector<std::string>& files = app.get_config_ptr()->results();
  if (!files.empty()) {
    out << "  --config";
    for (const std::string& f : files) out << " " << f;
    out << " (a later file overrides an earlier one)\n";
  }
  return out.str();
}

void print_resolved_options(const Options& o, int rank) {
  if (!o.verbose || rank != 0 || o.resolved_options.empty()) return;
  // --plan --json keeps stdout for the JSON
  std::fputs(o.resolved_options.c_str(), o.plan && o.json ? stderr : stdout);
  std::fflush(o.plan && o.json ? stderr : stdout);
}

}  // namespace paralab
