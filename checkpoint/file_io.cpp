// checkpoint/file_io.cpp: CRC32C and the write-rename-fsync dance (the why is in file_io.h).
//
// CRC32C is computed slicing-by-8 (Kounavis & Berry 2005): eight 256-entry tables, where
// table k maps a byte to its CRC contribution k bytes further on, so the inner loop folds
// eight input bytes per step with eight look-ups instead of one byte per look-up.
#include "checkpoint/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <fstream>
#include <vector>

#include "checkpoint/checkpoint_manifest.h"  // CheckpointError

namespace paralab {

namespace {

constexpr uint32_t kCastagnoli = 0x82F63B78u;  // 0x1EDC6F41, bits reversed

struct Crc32cTables {
  uint32_t t[8][256];
  Crc32cTables() {
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int bit = 0; bit < 8; ++bit) c = (c & 1) ? (c >> 1) ^ kCastagnoli : c >> 1;
      t[0][i] = c;
    }
    // t[k][i]: byte i followed by k zero bytes
    for (int k = 1; k < 8; ++k)
      for (uint32_t i = 0; i < 256; ++i) t[k][i] = (t[k - 1][i] >> 8) ^ t[0][t[k - 1][i] & 0xff];
  }
};

const Crc32cTables& tables() {
  static const Crc32cTables tables;
  return tables;
}

// Bytes assembled one by one, so the result does not depend on the host's byte order.
uint32_t load_le32(const unsigned char* p) {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}

std::string reason() { return std::strerror(errno); }

// The folder holding path: what must be fsync'ed for a rename in it to be durable.
std::string folder_of(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

}  // namespace

uint32_t crc32c(const void* data, size_t n, uint32_t crc) {
  const uint32_t(&t)[8][256] = tables().t;
  const unsigned char* p = static_cast<const unsigned char*>(data);
  crc = ~crc;  // the register starts at all ones; the result is inverted (so chaining inverts back)
  for (; n >= 8; n -= 8, p += 8) {
    const uint32_t lo = crc ^ load_le32(p), hi = load_le32(p + 4);
    crc = t[7][lo & 0xff] ^ t[6][(lo >> 8) & 0xff] ^ t[5][(lo >> 16) & 0xff] ^ t[4][lo >> 24] ^
          t[3][hi & 0xff] ^ t[2][(hi >> 8) & 0xff] ^ t[1][(hi >> 16) & 0xff] ^ t[0][hi >> 24];
  }
  for (; n > 0; --n, ++p) crc = t[0][(crc ^ *p) & 0xff] ^ (crc >> 8);
  return ~crc;
}

uint32_t crc32c_file(const std::string& path, uint64_t* bytes) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw std::runtime_error(path + ": cannot read (" + reason() + ")");
  std::vector<unsigned char> chunk(1 << 20);
  uint32_t crc = 0;
  uint64_t total = 0;
  for (;;) {
    const ssize_t got = ::read(fd, chunk.data(), chunk.size());
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      const std::string why = reason();
      close(fd);
      throw std::runtime_error(path + ": cannot read (" + why + ")");
    }
    if (got == 0) break;
    crc = crc32c(chunk.data(), static_cast<size_t>(got), crc);
    total += static_cast<uint64_t>(got);
  }
  close(fd);
  if (bytes) *bytes = total;
  return crc;
}

AtomicFile::AtomicFile(const std::string& path)
    : path_(path), temporary_(path + ".tmp." + std::to_string(getpid())) {
  const int flags = O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC;
  fd_ = open(temporary_.c_str(), flags, 0644);
  // A live process with our pid is us, so an existing NAME.tmp.<pid> was left by a process
  // that died mid-save (a container's trainer is often pid 1 run after run): it is garbage.
  if (fd_ < 0 && errno == EEXIST && unlink(temporary_.c_str()) == 0)
    fd_ = open(temporary_.c_str(), flags, 0644);
  if (fd_ < 0)
    throw std::runtime_error(path_ + ": cannot create " + temporary_ + " (" + reason() + ")");
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) close(fd_);
  if (!committed_) unlink(temporary_.c_str());
}

void AtomicFile::write(const void* data, size_t n) {
  if (fd_ < 0) throw std::runtime_error(path_ + ": write after commit");
  const char* p = static_cast<const char*>(data);
  // In chunks of 8 MiB, each checksummed right after it is written, while it is still in
  // the CPU's cache. write(2) may write less than asked (a signal, a full pipe) or be
  // interrupted: loop.
  constexpr size_t kChunk = size_t(8) << 20;
  for (size_t done = 0; done < n;) {
    const size_t want = std::min(kChunk, n - done);
    const ssize_t put = ::write(fd_, p + done, want);
    if (put < 0 && errno == EINTR) continue;
    if (put < 0) throw std::runtime_error(path_ + ": write failed (" + reason() + ")");
    crc_ = crc32c(p + done, static_cast<size_t>(put), crc_);
    done += static_cast<size_t>(put);
  }
  bytes_ += n;
}

void AtomicFile::commit() {
  if (fd_ < 0) throw std::runtime_error(path_ + ": committed twice");
  int rc;
  do rc = fsync(fd_);
  while (rc != 0 && errno == EINTR);
  if (rc != 0) throw std::runtime_error(path_ + ": fsync failed (" + reason() + ")");
  // close is not retried on EINTR: Linux has released the descriptor either way.
  rc = close(fd_);
  fd_ = -1;
  if (rc != 0) throw std::runtime_error(path_ + ": close failed (" + reason() + ")");
  if (rename(temporary_.c_str(), path_.c_str()) != 0)
    throw std::runtime_error(path_ + ": cannot rename " + temporary_ + " onto it (" + reason() +
                             ")");
  committed_ = true;
  fsync_folder(folder_of(path_));
}

void fsync_folder(const std::string& folder) {
  const int fd = open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0)
    throw std::runtime_error(folder + ": cannot open the folder to fsync it (" + reason() + ")");
  int rc;
  do rc = fsync(fd);
  while (rc != 0 && errno == EINTR);
  // EINVAL: a file system that cannot sync a folder (some network and FUSE ones); the
  // rename is then as durable as that file system makes it, and nothing more can be done.
  const bool failed = rc != 0 && errno != EINVAL;
  const std::string why = failed ? reason() : "";
  close(fd);
  if (failed) throw std::runtime_error(folder + ": fsync of the folder failed (" + why + ")");
}

void make_folders(const std::string& path) {
  if (path.empty()) throw std::runtime_error("cannot make a folder with an empty path");
  // Each prefix ending before a '/', then the whole path: mkdir -p, one level at a time.
  for (size_t end = path.find('/', 1);; end = path.find('/', end + 1)) {
    const std::string prefix = path.substr(0, end);
    if (mkdir(prefix.c_str(), 0755) != 0 && errno != EEXIST)
      throw std::runtime_error(prefix + ": cannot make the folder (" + reason() + ")");
    if (end == std::string::npos) break;
  }
  struct stat st;
  if (stat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    throw std::runtime_error(path + ": cannot make the folder (a file of that name exists)");
}

std::string read_small_file(const std::string& path, size_t limit) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw CheckpointError(path + ": cannot read");
  std::string text;
  char buf[65536];
  while (in.read(buf, sizeof buf) || in.gcount() > 0) {
    text.append(buf, (size_t)in.gcount());
    if (text.size() > limit) throw CheckpointError(path + ": larger than " + std::to_string(limit) + " bytes");
  }
  return text;
}

}  // namespace paralab
