// cli/flags_deepspeed_read.h: what the readers of a DeepSpeed config's blocks share
// (cli/flags_deepspeed.cpp, which reads the config; cli/flags_deepspeed_precision.cpp, its
// fp16 and bf16 blocks): the checked reader of one JSON file, the effective values --plan
// prints, and the read in progress.
//
// defines: deepspeed_read::{Reader, Effective, num, ConfigRead, read_precision}
#pragma once
#include <CLI/CLI.hpp>
#include <cmath>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "checkpoint/json_document.h"
#include "cli/flags_impl.h"  // defines: RawFlags, fail; cli/flags.h Options

namespace paralab {
namespace deepspeed_read {

// Reads one config: each value checked where it is, messages "FILE:LINE:COL: ...".
class Reader {
 public:
  Reader(std::string path, const std::string& text) : path_(std::move(path)), doc_(text) {}
  const Json& root() const { return doc_.root(); }
  [[noreturn]] void refuse(const std::string& at, const std::string& what) const {
    std::string where = doc_.where(at);  // "line L, column C"
    fail("--deepspeed_config ", path_, ":", where.substr(5, where.find(',') - 5), ":",
         where.substr(where.rfind(' ') + 1), ": ", what);
  }
  // A block: an object whose keys are all in `known` (DeepSpeed's extra="forbid").
  const Json* block(const std::string& name, const std::set<std::string>& known) const {
    const Json* b = json_find(root(), name);
    if (!b) return nullptr;
    check_block(b, "/" + name, name, known);
    return b;
  }
  void check_block(const Json* b, const std::string& at, const std::string& name,
                   const std::set<std::string>& known) const {
    if (!b->is_object()) refuse(at, name + " must be an object, got " + json_kind(*b));
    for (const auto& item : b->items())
      if (!known.count(item.key()))
        refuse(at + "/" + item.key(), "unknown key \"" + item.key() + "\" in " + name +
                                          " (DeepSpeed's config refuses it: extra fields not "
                                          "permitted)");
  }
  // A number that is whole (2e9 is), >= lo; "auto" gives nullopt when allowed.
  std::optional<int64_t> whole(const Json& v, const std::string& at, const std::string& key,
                               int64_t lo, bool auto_ok = false) const {
    if (auto_ok && v.is_string() && v.get<std::string>() == "auto") return std::nullopt;
    if (!v.is_number() || v.get<double>() != std::floor(v.get<double>()) ||
        !(std::fabs(v.get<double>()) < 9.2e18))
      refuse(at, key + " must be a whole number" + (auto_ok ? " or \"auto\"" : "") + ", got " +
                     v.dump());
    const int64_t n = v.is_number_integer() ? v.get<int64_t>() : static_cast<int64_t>(v.get<double>());
    if (n < lo) refuse(at, key + " must be >= " + std::to_string(lo) + ", got " + v.dump());
    return n;
  }
  double number(const Json& v, const std::string& at, const std::string& key) const {
    if (!v.is_number()) refuse(at, key + " must be a number, got " + v.dump());
    return v.get<double>();
  }
  bool boolean(const Json& v, const std::string& at, const std::string& key) const {
    if (!v.is_boolean()) refuse(at, key + " must be true or false, got " + v.dump());
    return v.get<bool>();
  }
  std::string text(const Json& v, const std::string& at, const std::string& key) const {
    if (!v.is_string()) refuse(at, key + " must be a string, got " + v.dump());
    return v.get<std::string>();
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  JsonDocument doc_;
};

struct Effective {  // what --plan prints: key, value, where it came from
  std::vector<std::vector<std::string>> rows;
  void add(const std::string& key, const std::string& value, const std::string& from) {
    rows.push_back({key, value, from});
  }
};

inline std::string num(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

// One config being read into the flags: the reader, the flags, and what --plan and the
// warning line will say.
struct ConfigRead {
  Reader& r;
  Options& o;
  RawFlags& raw;
  const CLI::App& app;
  Effective eff;
  std::vector<std::string>& no_effect;
  bool given(const char* flag) const { return app.count(flag) > 0; }
  // The JSON and a flag disagree: DeepSpeed's engine runs the config.
  void won(const std::string& key, const std::string& flag, const std::string& flag_value,
           const std::string& json_value) {
    o.warnings.push_back("--deepspeed_config " + key + " " + json_value + " overrides " + flag +
                         " " + flag_value + " (DeepSpeed's engine runs the config)");
  }
};

// fp16 into --fp16 and its loss scale, bf16 into --bf16 (cli/flags_deepspeed_precision.cpp).
void read_precision(ConfigRead& c);

}  // namespace deepspeed_read
}  // namespace paralab
