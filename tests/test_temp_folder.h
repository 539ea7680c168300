// tests/test_temp_folder.h: TempFolder, a fresh folder under /tmp for a test's files, removed
// with them at the end (the Hugging Face and file tests).
#pragma once
#include <dirent.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <set>
#include <string>

namespace paralab {

// A fresh folder under /tmp, removed with its files at the end of the test.
class TempFolder {
 public:
  TempFolder() {
    char name[] = "/tmp/paralab_test_XXXXXX";
    path_ = mkdtemp(name);
  }
  ~TempFolder() {
    for (const std::string& f : files()) std::remove((path_ + "/" + f).c_str());
    rmdir(path_.c_str());
  }
  const std::string& path() const { return path_; }
  std::set<std::string> files() const {
    std::set<std::string> names;
    DIR* d = opendir(path_.c_str());
    if (!d) return names;
    while (const dirent* e = readdir(d))
      if (std::string(e->d_name) != "." && std::string(e->d_name) != "..") names.insert(e->d_name);
    closedir(d);
    return names;
  }

 private:
  std::string path_;
};

}  // namespace paralab
