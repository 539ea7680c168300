// cli/flags_toml.cpp: the --config files. toml++ (Debian's libtomlplusplus-dev) parses them as
// full TOML, with the line of every key; CLI11 applies their values (the command line overrides
// a file, a later file an earlier one) through toml_config_for_cli11, which hands it what
// toml++ read. paralab keeps its own rules on top, each refused as "--config FILE:LINE: ...":
//  - every key is a flag's long name without the dashes (num-layers = 4), at the top level:
//    no tables (an unknown key gets "did you mean");
//  - every value has the flag's type: a switch true or false, an integer flag an integer, a
//    number flag a number, any other a string; an array only for a flag that takes a list;
//  - a flag is set once per file, under any of its names (tp and tensor-model-parallel-size).
#include <sys/stat.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <toml++/toml.h>
#include <vector>

#include "cli/flags_impl.h"  // defines: ConfigEntry, check_config_files, and through cli/flags.h FlagError

namespace paralab {

namespace {

// A value as CLI11 reads it from the command line: "true", "42", "0.001", the string itself.
std::string as_text(const toml::node& v) {
  if (const auto* s = v.as_string()) return s->get();
  if (const auto* i = v.as_integer()) return std::to_string(i->get());
  if (const auto* b = v.as_boolean()) return b->get() ? "true" : "false";
  if (const auto* f = v.as_floating_point()) {
    // the shortest %.Ng that reads back as the same double
    char buf[32];
    for (int digits = 15; digits <= 17; ++digits) {
      std::snprintf(buf, sizeof buf, "%.*g", digits, f->get());
      if (std::strtod(buf, nullptr) == f->get()) break;
    }
    return buf;
  }
  return "a date or time";  // not a flag's value: named in the message only
}

// The value as written, for the messages: strings quoted, like the file.
std::string shown(const toml::node& v) {
  if (v.is_string()) return "\"" + as_text(v) + "\"";
  if (v.is_array()) return "an array";
  if (v.is_table()) return "a table";
  return as_text(v);
}

// The items of each top-level key, in the file's order (toml++ keeps a table sorted by key).
std::vector<std::pair<const toml::key*, const toml::node*>> in_file_order(const toml::table& t) {
  std::vector<std::pair<const toml::key*, const toml::node*>> items;
  for (auto&& [k, v] : t) items.push_back({&k, &v});
  std::sort(items.begin(), items.end(), [](const auto& a, const auto& b) {
    const auto &x = a.first->source().begin, &y = b.first->source().begin;
    return x.line != y.line ? x.line < y.line : x.column < y.column;
  });
  return items;
}

// CLI11 reads the files through this: toml++ parses, CLI11 gets each key's values as text. A
// file toml++ refuses gives CLI11 nothing; check_config_files, run after CLI11, names the line.
class TomlForCli11 : public CLI::Config {
 public:
  std::string to_config(const CLI::App*, bool, bool, std::string) const override { return ""; }
  std::vector<CLI::ConfigItem> from_config(std::istream& input) const override {
    std::stringstream text;
    text << input.rdbuf();
    toml::table t;
    try {
      t = toml::parse(text.str());
    } catch (const toml::parse_error&) {
      return {};
    }
    std::vector<CLI::ConfigItem> items;
    for (const auto& [k, v] : in_file_order(t)) {
      CLI::ConfigItem item;
      item.name = std::string(k->str());
      if (const toml::array* a = v->as_array())
        for (const toml::node& x : *a) item.inputs.push_back(as_text(x));
      else
        item.inputs.push_back(as_text(*v));
      items.push_back(item);
    }
    return items;
  }
};

enum class Kind { BOOLEAN, INTEGER, NUMBER, STRING, INT_OR_STRING };

// The kind of value an option takes: a switch expects no value on the command line; else
// CLI11's type names INT, UINT, FLOAT; else text.
const char* expected(const CLI::Option& opt, Kind* kind) {
  const std::string t = opt.get_type_name();
  if (opt.get_expected_max() == 0) return *kind = Kind::BOOLEAN, "true or false";  // a switch
  if (t == kIntOrList) return *kind = Kind::INT_OR_STRING, "an integer or a quoted string";
  if (t.rfind("INT", 0) == 0 || t.rfind("UINT", 0) == 0) return *kind = Kind::INTEGER, "an integer";
  if (t.rfind("FLOAT", 0) == 0) return *kind = Kind::NUMBER, "a number";
  return *kind = Kind::STRING, "a quoted string";
}

bool fits(Kind want, const toml::node& v) {
  switch (want) {
    case Kind::BOOLEAN: return v.is_boolean();
    case Kind::INTEGER: return v.is_integer();
    case Kind::NUMBER: return v.is_integer() || v.is_floating_point();
    case Kind::STRING: return v.is_string();
    case Kind::INT_OR_STRING: return v.is_integer() || v.is_string();
  }
  return false;
}

void check_type(const std::string& where, const std::string& key, const CLI::Option& opt,
                const toml::node& v) {
  auto refuse = [&](const std::string& what) { throw FlagError(where + what); };
  Kind want;
  const std::string what = expected(opt, &want);
  if (want == Kind::INT_OR_STRING && v.is_array())
    refuse(key + " takes an integer or a quoted string; write a list as a string, e.g. " + key +
           " = \"[1,0,1,0]\"");
  if (const toml::array* a = v.as_array()) {
    if (opt.get_expected_max() <= 1) refuse(key + " takes one value, got an array");
    for (const toml::node& item : *a)
      if (!fits(want, item))
        refuse(key + " takes a list of " + (want == Kind::STRING ? "quoted strings" : what) +
               ", got " + shown(item));
    return;
  }
  if (!fits(want, v)) refuse(key + " must be " + what + ", got " + shown(v));
}

toml::table parse_file(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) throw FlagError("--config " + path + ": no such file");
  if (!S_ISREG(st.st_mode)) throw FlagError("--config " + path + ": not a regular file");
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  if (!in) throw FlagError("--config " + path + ": cannot read");
  try {
    return toml::parse(text.str(), path);
  } catch (const toml::parse_error& e) {
    throw FlagError("--config " + path + ":" + std::to_string(e.source().begin.line) + ": " +
                    std::string(e.description()));
  }
}

}  // namespace

std::shared_ptr<CLI::Config> toml_config_for_cli11() { return std::make_shared<TomlForCli11>(); }

std::vector<ConfigEntry> check_config_files(const CLI::App& app,
                                            const std::vector<std::string>& files) {
  std::vector<ConfigEntry> entries;
  for (const std::string& path : files) {
    const toml::table t = parse_file(path);
    std::map<const CLI::Option*, int> first_line;  // a flag may be set once per file
    for (const auto& [k, v] : in_file_order(t)) {
      const std::string key(k->str());
      const int line = static_cast<int>(k->source().begin.line);
      const std::string where = "--config " + path + ":" + std::to_string(line) + ": ";
      if (v->is_table())
        throw FlagError(where + key + " is a table; tables are not read, every key is a "
                        "top-level flag name (num-layers = 4)");
      const CLI::Option* opt = app.get_option_no_throw((key.size() == 1 ? "-" : "--") + key);
      if (opt == nullptr) {
        const std::string meant = closest_flag(app, key);
        throw FlagError(where + "unknown key '" + key + "' (" +
                        (meant.empty() ? "keys are long flag names without the dashes, e.g. "
                                         "num-layers = 4"
                                       : "did you mean " + meant.substr(2) + "?") + ")");
      }
      if (opt == app.get_config_ptr() || opt == app.get_help_ptr())
        throw FlagError(where + key + " cannot be set in a config file");
      if (first_line.count(opt))
        throw FlagError(where + key + " sets " + opt->get_name() + " again (first at line " +
                        std::to_string(first_line[opt]) + ")");
      first_line[opt] = line;
      check_type(where, key, *opt, *v);
      entries.push_back({path, line, key, opt});
    }
  }
  return entries;
}

}  // namespace paralab
