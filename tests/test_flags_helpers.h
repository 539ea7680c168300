// tests/test_flags_helpers.h: parsing a command line as the trainer would, for the flag
// tests (test_flags.cpp, test_flags_parallel.cpp, test_flags_moe.cpp).
#pragma once
#include <unistd.h>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>
#include "cli/flags.h"

namespace paralab {
namespace flags_test {

// Parses args as the trainer would, on a machine with `gpus` GPUs and `world` ranks.
inline Options parse(std::vector<std::string> args, int world = 1, int gpus = 0) {
  args.insert(args.begin(), "trainer");
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  return parse_flags(static_cast<int>(argv.size()), argv.data(), world, gpus);
}

// The message of the InputError that parsing args throws ("" when it does not throw).
inline std::string error_of(const std::vector<std::string>& args, int world = 1, int gpus = 0) {
  try {
    parse(args, world, gpus);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}


// A file of the repository by its path from the root (presets live beside tests/'s folder).
inline std::string repo_path(const std::string& rel) {
  const std::string here = __FILE__;
  const size_t cut = here.rfind("tests/");
  return (cut == std::string::npos ? std::string() : here.substr(0, cut)) + rel;
}

// Each bad input and the exact line it must produce.
struct BadInput {
  std::vector<std::string> args;
  int world;
  const char* message;
};


// A file under /tmp with the given text, removed at the end of the test.
class TempFile {
 public:
  explicit TempFile(const std::string& text, const std::string& suffix = ".toml") {
    char name[] = "/tmp/paralab_test_XXXXXX";
    int fd = mkstemp(name);
    close(fd);
    std::remove(name);
    path_ = std::string(name) + suffix;
    std::ofstream(path_) << text;
  }
  ~TempFile() { std::remove(path_.c_str()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace flags_test
}  // namespace paralab
