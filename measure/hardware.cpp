// measure/hardware.cpp: see hardware.h. The profile files are a flat TOML subset read one
// line at a time; one table of the numeric keys (kNumbers) serves the parser, the writer
// and the check of `assumed`, so a new field is one row there.
//
// The GEMM curve, rewritten: with eff(F) = g x F / (F + H), F / (peak x eff(F)) =
// (F + H) / (g x peak), so a GEMM costs as if it did H = gemm_half_gflop x 1e9 extra FLOPs
// at g = gemm_efficiency of the peak: tiny GEMMs are dominated by H, large ones approach
// F / (g x peak).
#include "measure/hardware.h"
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace paralab {

namespace {

// The numeric keys, in the order write_hardware_profile writes them. `fraction`: the value
// must lie in (0, 1] (an achieved fraction of a peak; 75 for 0.75 is an error, not a guess).
struct NumberKey {
  const char* key;
  double HardwareProfile::*field;
  bool fraction;
};
const NumberKey kNumbers[] = {
    {"bf16_tflops", &HardwareProfile::bf16_tflops, false},
    {"fp16_tflops", &HardwareProfile::fp16_tflops, false},
    {"fp8_tflops", &HardwareProfile::fp8_tflops, false},
    {"fp32_tflops", &HardwareProfile::fp32_tflops, false},
    {"memory_gib", &HardwareProfile::memory_gib, false},
    {"memory_bandwidth_gbs", &HardwareProfile::memory_bandwidth_gbs, false},
    {"intra_node_gbs", &HardwareProfile::intra_node_gbs, false},
    {"inter_node_gbs", &HardwareProfile::inter_node_gbs, false},
    {"launch_overhead_us", &HardwareProfile::launch_overhead_us, false},
    {"collective_latency_us", &HardwareProfile::collective_latency_us, false},
    {"inter_node_latency_us", &HardwareProfile::inter_node_latency_us, false},
    {"gemm_efficiency", &HardwareProfile::gemm_efficiency, true},
    {"gemm_half_gflop", &HardwareProfile::gemm_half_gflop, false},
    {"attention_efficiency", &HardwareProfile::attention_efficiency, true},
    {"memory_efficiency", &HardwareProfile::memory_efficiency, true},
    {"storage_write_gbs", &HardwareProfile::storage_write_gbs, false},
    {"pcie_gbs", &HardwareProfile::pcie_gbs, false},
    {"pcie_latency_us", &HardwareProfile::pcie_latency_us, false},
    {"host_memory_gib", &HardwareProfile::host_memory_gib, false},
    {"host_cores", &HardwareProfile::host_cores, false},
    {"host_adam_params_per_s", &HardwareProfile::host_adam_params_per_s, false},
    {"sm_count", &HardwareProfile::sm_count, false},
    {"sm_clock_ghz", &HardwareProfile::sm_clock_ghz, false},
    {"mma_sync_tflops", &HardwareProfile::mma_sync_tflops, false},
    {"compute_capability", &HardwareProfile::compute_capability, false},
};

// The keys `assumed` may name: every figure (the numbers, the node size, the link), not the
// descriptive keys (name, match, confirmed, source) nor `assumed` itself.
std::vector<std::string> assumable_keys() {
  std::vector<std::string> keys;
  for (const auto& n : kNumbers) keys.push_back(n.key);
  keys.push_back("gpus_per_node");
  keys.push_back("intra_node_link");
  return keys;
}

std::string trim(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// The line without its comment: '#' outside a "string" starts one (a string may hold '#').
std::string strip_comment(const std::string& line) {
  bool in_string = false;
  for (size_t i = 0; i < line.size(); ++i) {
    if (in_string && line[i] == '\\') ++i;  // skip the escaped character
    else if (line[i] == '"') in_string = !in_string;
    else if (line[i] == '#' && !in_string) return line.substr(0, i);
  }
  return line;
}

// A TOML basic string starting at v[pos] == '"', with the escapes \" \\ \n \t. Returns the
// text; pos ends just past the closing quote.
std::string read_string(const std::string& v, size_t& pos, const std::string& where) {
  if (pos >= v.size() || v[pos] != '"')
    throw std::runtime_error(where + ": expected a \"quoted string\", got " + v);
  std::string out;
  for (++pos; pos < v.size(); ++pos) {
    const char c = v[pos];
    if (c == '"') {
      ++pos;
      return out;
    }
    if (c != '\\') {
      out += c;
      continue;
    }
    if (++pos == v.size()) break;
    switch (v[pos]) {
      case '"': out += '"'; break;
      case '\\': out += '\\'; break;
      case 'n': out += '\n'; break;
      case 't': out += '\t'; break;
      default: throw std::runtime_error(where + ": unknown escape \\" + v[pos] + " in " + v);
    }
  }
  throw std::runtime_error(where + ": unterminated string " + v);
}

std::string parse_string(const std::string& v, const std::string& where) {
  size_t pos = 0;
  std::string s = read_string(v, pos, where);
  if (pos != v.size()) throw std::runtime_error(where + ": text after the string: " + v);
  return s;
}

// ["a", "b"] on one line; [] is an empty array; a trailing comma is allowed (as in TOML).
std::vector<std::string> parse_string_array(const std::string& v, const std::string& where) {
  if (v.size() < 2 || v.front() != '[' || v.back() != ']')
    throw std::runtime_error(where + ": expected a one-line array of strings [\"a\", \"b\"], got " +
                             v);
  std::vector<std::string> out;
  const std::string inner = v.substr(1, v.size() - 2);
  size_t pos = 0;
  auto skip_space = [&] {
    while (pos < inner.size() && std::isspace(static_cast<unsigned char>(inner[pos]))) ++pos;
  };
  for (skip_space(); pos < inner.size(); skip_space()) {
    out.push_back(read_string(inner, pos, where));
    skip_space();
    if (pos < inner.size() && inner[pos] != ',')
      throw std::runtime_error(where + ": expected ',' between the strings of " + v);
    ++pos;  // past the comma (or the end)
  }
  return out;
}

double parse_number(const std::string& v, const std::string& where) {
  char* end = nullptr;
  const double x = v.empty() ? 0 : std::strtod(v.c_str(), &end);
  if (v.empty() || end != v.c_str() + v.size() || !std::isfinite(x))
    throw std::runtime_error(where + ": expected a number, got " + v);
  return x;
}

// The shortest %g form that reads back to exactly x (989 -> "989", 0.1 -> "0.1"; 17
// significant digits always do, since a double has at most 17). An exponent only for the
// very small or large: 1500 stays "1500", not "1.5e+03".
std::string format_number(double x) {
  const bool plain = x == 0 || (std::fabs(x) >= 1e-4 && std::fabs(x) < 1e15);
  char buf[40];
  for (int digits = 1; digits <= 17; ++digits) {
    std::snprintf(buf, sizeof buf, "%.*g", digits, x);
    if (plain && std::strchr(buf, 'e')) continue;
    if (std::strtod(buf, nullptr) == x) break;
  }
  return buf;
}

std::string quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\', out += c;
    else if (c == '\n') out += "\\n";
    else if (c == '\t') out += "\\t";
    else out += c;
  }
  return out + "\"";
}

std::string quote_array(const std::vector<std::string>& items) {
  std::string out = "[";
  for (size_t i = 0; i < items.size(); ++i) out += (i ? ", " : "") + quote(items[i]);
  return out + "]";
}

std::string read_text(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw std::runtime_error(path + ": cannot read the hardware profile");
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// "configs/hardware/h100-sxm.toml" -> "h100-sxm"
std::string file_stem(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
  if (base.size() > 5 && base.compare(base.size() - 5, 5, ".toml") == 0)
    base.resize(base.size() - 5);
  return base;
}

// pattern occurs in name, case-insensitively, not preceded or followed by a letter or
// digit: device names are like "NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-40GB".
bool word_match(const std::string& name, const std::string& pattern) {
  const std::string n = lower(name), p = lower(pattern);
  auto alnum = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; };
  for (size_t i = n.find(p); i != std::string::npos; i = n.find(p, i + 1)) {
    const bool left_ok = i == 0 || !alnum(n[i - 1]);
    const bool right_ok = i + p.size() == n.size() || !alnum(n[i + p.size()]);
    if (left_ok && right_ok) return true;
  }
  return false;
}

}  // namespace

bool HardwareProfile::is_assumed(const std::string& key) const {
  return std::find(assumed.begin(), assumed.end(), key) != assumed.end();
}

// bf16 training: the bf16 tensor figure, else fp16's (the same tensor cores), else fp32 (a
// profile with only fp32, such as the CPU benchmark's). fp32 training: the fp32 figure, else
// bf16's, else fp16's. peak_from_profile (measure/peak.h) names which one it was.
const char* precision_name(Precision p) {
  return p == Precision::BF16 ? "bf16" : p == Precision::FP16 ? "fp16" : "fp32";
}

double HardwareProfile::peak_tflops(Precision p) const {
  const double own = p == Precision::FP16 ? fp16_tflops : bf16_tflops;
  const double half_precision = own > 0 ? own : std::max(bf16_tflops, fp16_tflops);
  if (p != Precision::FP32) return half_precision > 0 ? half_precision : fp32_tflops;
  return fp32_tflops > 0 ? fp32_tflops : half_precision;
}

const char* HardwareProfile::peak_figure(Precision p) const {
  if (p == Precision::BF16)
    return bf16_tflops > 0   ? "bf16 dense"
           : fp16_tflops > 0 ? "fp16 dense (no bf16 figure)"
                             : "fp32 dense (no bf16 figure)";
  if (p == Precision::FP16)
    return fp16_tflops > 0   ? "fp16 dense"
           : bf16_tflops > 0 ? "bf16 dense (no fp16 figure)"
                             : "fp32 dense (no fp16 figure)";
  return fp32_tflops > 0   ? "fp32 dense"
         : bf16_tflops > 0 ? "bf16 dense (no fp32 figure)"
                           : "fp16 dense (no fp32 figure)";
}

// time = max(F / (peak x eff(F)), bytes / HBM) + launch, eff(F) = g x F / (F + H) (header);
// the first term is (F + H) / (g x peak), see the top of this file. No memory bandwidth in
// the profile: the bytes term is skipped.
double HardwareProfile::gemm_seconds(double flops, double bytes, Precision p) const {
  return gemm_seconds_at(peak_tflops(p), flops, bytes);
}

double HardwareProfile::gemm_seconds_at(double peak, double flops, double bytes) const {
  const double peak_flops_per_s = peak * 1e12;
  if (peak_flops_per_s <= 0 || gemm_efficiency <= 0)
    throw std::runtime_error("hardware profile '" + name +
                             "': gemm_seconds needs a peak and a gemm_efficiency above 0");
  const double compute_s =
      flops > 0 ? (flops + gemm_half_gflop * 1e9) / (gemm_efficiency * peak_flops_per_s) : 0;
  const double memory_s = memory_bandwidth_gbs > 0 ? bytes / (memory_bandwidth_gbs * 1e9) : 0;
  return std::max(compute_s, memory_s) + launch_overhead_us * 1e-6;
}

double HardwareProfile::memory_seconds(double bytes, double launches) const {
  const double bw = memory_bandwidth_gbs * 1e9 * memory_efficiency;
  return (bw > 0 ? bytes / bw : 0) + launches * launch_overhead_us * 1e-6;
}

HardwareProfile parse_hardware_profile(const std::string& text, const std::string& file) {
  HardwareProfile p;
  p.file = file;
  const std::vector<std::string> assumable = assumable_keys();
  std::vector<std::string> seen;  // keys already set: TOML forbids setting one twice
  std::istringstream in(text);
  std::string raw;
  for (int lineno = 1; std::getline(in, raw); ++lineno) {
    const std::string where = file + ":" + std::to_string(lineno);
    const std::string line = trim(strip_comment(raw));
    if (line.empty()) continue;
    const size_t eq = line.find('=');
    if (eq == std::string::npos) throw std::runtime_error(where + ": expected key = value");
    const std::string key = trim(line.substr(0, eq)), val = trim(line.substr(eq + 1));
    if (std::find(seen.begin(), seen.end(), key) != seen.end())
      throw std::runtime_error(where + ": " + key + " is set twice");
    seen.push_back(key);

    const NumberKey* number = nullptr;
    for (const auto& n : kNumbers)
      if (key == n.key) number = &n;
    if (number) {
      const double x = parse_number(val, where);
      if (number->fraction ? !(x > 0 && x <= 1) : x < 0)
        throw std::runtime_error(where + ": " + key + " = " + val + ": must be " +
                                 (number->fraction ? "a fraction in (0, 1]" : "0 or more"));
      p.*(number->field) = x;
    } else if (key == "name") {
      p.name = parse_string(val, where);
    } else if (key == "match") {
      p.match = parse_string_array(val, where);
    } else if (key == "confirmed") {
      if (val != "true" && val != "false")
        throw std::runtime_error(where + ": confirmed must be true or false, got " + val);
      p.confirmed = val == "true";
    } else if (key == "source") {
      p.source = parse_string(val, where);
    } else if (key == "gpus_per_node") {
      const double x = parse_number(val, where);
      if (x < 1 || x != std::floor(x) || x > 1e6)
        throw std::runtime_error(where + ": gpus_per_node must be a whole number of 1 or more");
      p.gpus_per_node = static_cast<int>(x);
    } else if (key == "intra_node_link") {
      p.intra_node_link = parse_string(val, where);
    } else if (key == "assumed") {
      p.assumed = parse_string_array(val, where);
      for (const auto& a : p.assumed)
        if (std::find(assumable.begin(), assumable.end(), a) == assumable.end()) {
          std::string known;
          for (const auto& k : assumable) known += (known.empty() ? "" : ", ") + k;
          throw std::runtime_error(where + ": assumed names '" + a +
                                   "', which is not a figure of a profile (" + known + ")");
        }
    } else {
      throw std::runtime_error(where + ": unknown key " + key);
    }
  }
  // `match` must be written even when empty: match = [] says on purpose that the profile is
  // never picked by device name, only through --hardware FILE (the CPU benchmark's file).
  if (p.name.empty()) throw std::runtime_error(file + ": a profile needs a name");
  if (std::find(seen.begin(), seen.end(), "match") == seen.end())
    throw std::runtime_error(file + ": a profile needs match (the words of the CUDA device "
                                    "name; match = [] for one used only through --hardware)");
  if (p.bf16_tflops <= 0 && p.fp16_tflops <= 0 && p.fp8_tflops <= 0 && p.fp32_tflops <= 0)
    throw std::runtime_error(file + ": a profile needs a peak (bf16_tflops, fp16_tflops, "
                                    "fp8_tflops or fp32_tflops above 0)");
  return p;
}

std::string write_hardware_profile(const HardwareProfile& p, const std::string& comment) {
  std::string out;
  if (!comment.empty()) {
    std::istringstream lines(comment);
    std::string line;
    while (std::getline(lines, line)) out += line.empty() ? "#\n" : "# " + line + "\n";
  }
  out += "name = " + quote(p.name) + "\n";
  out += "match = " + quote_array(p.match) + "\n";
  out += std::string("confirmed = ") + (p.confirmed ? "true" : "false") + "\n";
  out += "source = " + quote(p.source) + "\n";
  out += "gpus_per_node = " + std::to_string(p.gpus_per_node) + "\n";
  out += "intra_node_link = " + quote(p.intra_node_link) + "\n";
  for (const auto& n : kNumbers)
    out += std::string(n.key) + " = " + format_number(p.*(n.field)) + "\n";
  out += "assumed = " + quote_array(p.assumed) + "\n";
  return out;
}

std::vector<HardwareProfile> load_hardware_profiles(const std::string& dir) {
  std::vector<std::string> files;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      const std::string n = e->d_name;
      if (n.size() > 5 && n.compare(n.size() - 5, 5, ".toml") == 0) files.push_back(n);
    }
    closedir(d);
  }
  std::sort(files.begin(), files.end());
  const std::string prefix = !dir.empty() && dir.back() == '/' ? dir : dir + "/";
  std::vector<HardwareProfile> out;
  for (const auto& n : files)
    out.push_back(parse_hardware_profile(read_text(prefix + n), prefix + n));
  return out;
}

HardwareProfile find_hardware_profile(const std::string& value, const std::string& dir) {
  const bool is_path = value.find('/') != std::string::npos ||
                       (value.size() > 5 && value.compare(value.size() - 5, 5, ".toml") == 0);
  if (is_path) return parse_hardware_profile(read_text(value), value);
  const std::vector<HardwareProfile> profiles = load_hardware_profiles(dir);
  for (const auto& p : profiles)
    if (lower(file_stem(p.file)) == lower(value) || lower(p.name) == lower(value)) return p;
  if (profiles.empty())
    throw std::runtime_error("--hardware " + value + ": no profiles in " + dir +
                             " (run from the repository root, or pass a .toml file)");
  std::string names;
  for (const auto& p : profiles)
    names += (names.empty() ? "" : ", ") + file_stem(p.file) + " (" + p.name + ")";
  throw std::runtime_error("--hardware " + value + ": no profile in " + dir +
                           " has that file name or name; the profiles: " + names +
                           "; or pass a .toml file");
}

const HardwareProfile* match_hardware_profile(const std::vector<HardwareProfile>& profiles,
                                              const std::string& gpu_name) {
  const HardwareProfile* best = nullptr;
  size_t best_len = 0;
  for (const auto& p : profiles)
    for (const auto& pat : p.match)
      if (pat.size() > best_len && word_match(gpu_name, pat)) {
        best = &p;
        best_len = pat.size();
      }
  return best;
}

}  // namespace paralab
