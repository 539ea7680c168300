// measure/peak.cpp: see peak.h.
#include "measure/peak.h"
#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <dirent.h>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace paralab {

static std::string trim(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

// A "quoted" TOML basic string without escapes (profile names need none).
static std::string unquote(const std::string& v, const std::string& where) {
  if (v.size() < 2 || v.front() != '"' || v.back() != '"')
    throw std::runtime_error(where + ": expected a quoted string, got " + v);
  return v.substr(1, v.size() - 2);
}

static double number(const std::string& v, const std::string& where) {
  try {
    size_t used = 0;
    const double x = std::stod(v, &used);
    if (used == v.size()) return x;
  } catch (const std::exception&) {
  }
  throw std::runtime_error(where + ": expected a number, got " + v);
}

HardwareProfile parse_hardware_profile(const std::string& text, const std::string& file) {
  HardwareProfile p;
  p.file = file;
  std::istringstream in(text);
  std::string line;
  for (int lineno = 1; std::getline(in, line); ++lineno) {
    const std::string where = file + ":" + std::to_string(lineno);
    // '#' starts a comment outside strings; profile strings contain no '#'.
    line = trim(line.substr(0, line.find('#')));
    if (line.empty()) continue;
    const size_t eq = line.find('=');
    if (eq == std::string::npos) throw std::runtime_error(where + ": expected key = value");
    const std::string key = trim(line.substr(0, eq)), val = trim(line.substr(eq + 1));
    if (key == "name") {
      p.name = unquote(val, where);
    } else if (key == "match") {
      if (val.size() < 2 || val.front() != '[' || val.back() != ']')
        throw std::runtime_error(where + ": match must be a one-line array of strings");
      std::stringstream items(val.substr(1, val.size() - 2));
      std::string item;
      while (std::getline(items, item, ','))
        if (!trim(item).empty()) p.match.push_back(unquote(trim(item), where));
    } else if (key == "bf16_tflops") {
      p.bf16_tflops = number(val, where);
    } else if (key == "fp32_tflops") {
      p.fp32_tflops = number(val, where);
    } else if (key == "memory_bandwidth_gbs") {
      p.memory_bandwidth_gbs = number(val, where);
    } else if (key == "confirmed") {
      if (val != "true" && val != "false")
        throw std::runtime_error(where + ": confirmed must be true or false");
      p.confirmed = val == "true";
    } else if (key != "source" && key != "notes") {
      throw std::runtime_error(where + ": unknown key " + key);
    }
  }
  if (p.name.empty() || p.match.empty() || p.bf16_tflops <= 0)
    throw std::runtime_error(file + ": a profile needs name, match and bf16_tflops");
  return p;
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
  std::vector<HardwareProfile> out;
  for (const auto& n : files) {
    const std::string path = dir + "/" + n;
    std::ifstream f(path);
    std::stringstream ss;
    ss << f.rdbuf();
    out.push_back(parse_hardware_profile(ss.str(), path));
  }
  return out;
}

// pattern occurs in name, case-insensitively, not preceded or followed by a letter or
// digit: device names are like "NVIDIA H100 80GB HBM3", "NVIDIA GeForce RTX 4090".
static bool word_match(const std::string& name, const std::string& pattern) {
  auto lower = [](std::string s) {
    for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s;
  };
  const std::string n = lower(name), p = lower(pattern);
  auto alnum = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; };
  for (size_t i = n.find(p); i != std::string::npos; i = n.find(p, i + 1)) {
    const bool left_ok = i == 0 || !alnum(n[i - 1]);
    const bool right_ok = i + p.size() == n.size() || !alnum(n[i + p.size()]);
    if (left_ok && right_ok) return true;
  }
  return false;
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

double measure_peak_tflops(const std::function<void()>& gemm, double flops_per_call,
                           double trial_seconds, int trials, double* worst) {
  using clock = std::chrono::steady_clock;
  gemm();  // warm-up: thread pool start, page faults, caches
  double best = 0, slowest = 1e300;
  for (int t = 0; t < std::max(1, trials); ++t) {
    const auto t0 = clock::now();
    double spent = 0;
    int calls = 0;
    while (calls == 0 || spent < trial_seconds) {
      gemm();
      ++calls;
      spent = std::chrono::duration<double>(clock::now() - t0).count();
    }
    const double rate = flops_per_call * calls / spent / 1e12;
    best = std::max(best, rate);
    slowest = std::min(slowest, rate);
  }
  if (worst) *worst = slowest;
  return best;
}

Peak resolve_peak(double flag_tflops, const std::string& gpu_name, bool bf16,
                  const std::string& hardware_dir, const std::function<double()>& measure) {
  if (flag_tflops > 0) return {flag_tflops, "flag"};
  std::string why_not;
  if (!gpu_name.empty()) {
    const auto profiles = load_hardware_profiles(hardware_dir);
    if (const HardwareProfile* p = match_hardware_profile(profiles, gpu_name)) {
      Peak peak;
      if (bf16 || p->fp32_tflops <= 0) {
        peak.tflops = p->bf16_tflops;
        peak.source = p->file + (bf16 ? ", bf16 dense" : ", bf16 dense (no fp32 figure)");
      } else {
        peak.tflops = p->fp32_tflops;
        peak.source = p->file + ", fp32 dense";
      }
      if (!p->confirmed) peak.source += ", unconfirmed";
      return peak;
    }
    why_not = "no profile in " + hardware_dir + " matches '" + gpu_name + "'";
  }
  if (measure) {
    char how[64];
    std::snprintf(how, sizeof how, "measured sgemm, best of %d trials of %.0f ms", kPeakTrials,
                  kPeakTrialSeconds * 1e3);
    Peak peak{measure(), how};
    if (!why_not.empty()) peak.source += "; " + why_not;
    return peak;
  }
  return {0, why_not.empty() ? "unknown: pass --peak-tflops" : why_not + ": pass --peak-tflops"};
}

std::string describe_peak(const Peak& p) {
  if (p.tflops <= 0) return "unknown (" + p.source + ")";
  char buf[160];
  // CPU peaks are small: three significant digits, not two decimals
  std::snprintf(buf, sizeof buf, p.tflops < 10 ? "%.3g TFLOP/s/rank" : "%.2f TFLOP/s/rank",
                p.tflops);
  std::string s = std::string(buf) + " (" + p.source;
  if (p.source.rfind("measured", 0) == 0) {
    std::snprintf(buf, sizeof buf,
                  "; it varies between runs: pass --peak-tflops %.3g to compare MFU across runs",
                  p.tflops);
    s += buf;
  }
  return s + ")";
}

}  // namespace paralab
