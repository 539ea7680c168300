// checkpoint/checkpoint_location.cpp: where --load points (locate_checkpoint), DIR/latest and the
// iteration folders (the design is in checkpoint/checkpoint.h).
#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cstdio>

#include "checkpoint/checkpoint.h"
#include "checkpoint/file_io.h"

namespace paralab {

std::string iteration_folder(const std::string& dir, int iteration) {
  char name[32];
  std::snprintf(name, sizeof name, "iter_%07d", iteration);
  return dir + "/" + name;
}

int read_latest(const std::string& dir) {
  const std::string latest = dir + "/latest";
  struct stat st;
  if (stat(latest.c_str(), &st) != 0) return 0;
  const std::string text = read_small_file(latest, 64);
  int iteration = 0;
  size_t used = 0;
  try {
    iteration = std::stoi(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || iteration < 1 || text.find_first_not_of("0123456789\n", 0) != std::string::npos)
    throw CheckpointError(latest + ": not an iteration number");
  return iteration;
}

namespace {
// "iter_0000200" -> 200; -1 for any other name.
int iteration_of_name(const std::string& name) {
  if (name.size() != 12 || name.compare(0, 5, "iter_") != 0) return -1;
  for (size_t i = 5; i < name.size(); ++i)
    if (!std::isdigit(static_cast<unsigned char>(name[i]))) return -1;
  return std::stoi(name.substr(5));
}
bool is_folder(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}
std::string listed(const std::vector<int>& iterations) {
  std::string s;
  const size_t n = iterations.size(), shown = std::min<size_t>(n, 6);
  for (size_t i = n - shown; i < n; ++i) s += (s.empty() ? "" : ", ") + std::to_string(iterations[i]);
  return n > shown ? "..., " + s : s;
}
std::string there(const std::string& dir) {
  const std::vector<int> its = saved_iterations(dir);
  return its.empty() ? "no iteration folders there" : "iterations there: " + listed(its);
}
}  // namespace

std::vector<int> saved_iterations(const std::string& dir) {
  std::vector<int> out;
  DIR* d = opendir(dir.c_str());
  if (!d) return out;
  while (const dirent* e = readdir(d)) {
    const int it = iteration_of_name(e->d_name);
    if (it >= 0 && is_folder(dir + "/" + e->d_name)) out.push_back(it);
  }
  closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

CheckpointLocation locate_checkpoint(const std::string& load, int ckpt_step) {
  CheckpointLocation at;
  std::string path = load;
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  at.dir = path;
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return at;  // nothing there (the caller decides)
  if (!S_ISDIR(st.st_mode))
    throw CheckpointError(load + " is a file, not a checkpoint folder (one holding latest and "
                                 "iter_NNNNNNN/ folders)");
  const size_t slash = path.rfind('/');
  const std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
  const int named = iteration_of_name(name);
  if (named >= 0) {  // an iteration folder: that iteration (Megatron's users type it so)
    if (ckpt_step > 0 && ckpt_step != named)
      throw CheckpointError(load + " is iteration " + std::to_string(named) + "'s folder, but "
                            "--ckpt-step asks for " + std::to_string(ckpt_step));
    at.dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
    at.found = true, at.folder = path, at.iteration = named, at.chosen_by = "--load";
    return at;
  }
  if (ckpt_step > 0) {
    at.folder = iteration_folder(path, ckpt_step);
    if (!is_folder(at.folder))
      throw CheckpointError("--ckpt-step " + std::to_string(ckpt_step) + ": no " + at.folder +
                            " (" + there(path) + ")");
    at.found = true, at.iteration = ckpt_step;
    at.chosen_by = "--ckpt-step " + std::to_string(ckpt_step);
    return at;
  }
  const int latest = read_latest(path);
  if (latest > 0) {
    at.folder = iteration_folder(path, latest);
    if (!is_folder(at.folder))
      throw CheckpointError(path + "/latest names iteration " + std::to_string(latest) + ", but " +
                            at.folder + " is missing (" + there(path) +
                            "; choose one with --ckpt-step N)");
    at.found = true, at.iteration = latest, at.chosen_by = path + "/latest";
    return at;
  }
  const std::vector<int> iterations = saved_iterations(path);
  if (!iterations.empty())
    throw CheckpointError(path + " has no latest, but iterations " + listed(iterations) +
                          ": choose one with --ckpt-step N (or write N into " + path + "/latest)");
  return at;  // a folder without checkpoints
}

}  // namespace paralab
