// checkpoint/file_io.h: files that are either whole or absent, and the checksum that proves it.
//
// A checkpoint must survive a crash or a kill in the middle of a save: the previous one stays
// loadable. So every file is written under a temporary name beside its final one
// (NAME.tmp.PID), fsync'ed, renamed over NAME (rename is atomic within a file system), and
// the folder fsync'ed so that the rename itself is durable. A reader never sees half a file.
// CRC32C (Castagnoli, the polynomial 0x1EDC6F41 reflected: 0x82F63B78, as in iSCSI, ext4 and
// the safetensors-adjacent tooling) is the per-file checksum the manifest records.
//
// defines: crc32c, crc32c_file, AtomicFile, fsync_folder, make_folders, read_small_file
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace paralab {

// CRC32C of n bytes, continuing from crc (0 to start): crc32c(b, m + n) ==
// crc32c(b + m, n, crc32c(b, m)). Standard check value: crc32c("123456789") == 0xE3069283.
uint32_t crc32c(const void* data, size_t n, uint32_t crc = 0);
// The CRC32C of a whole file, read in chunks (no copy of the file in memory); its size in
// *bytes. Throws std::runtime_error("PATH: cannot read") when it cannot be read.
uint32_t crc32c_file(const std::string& path, uint64_t* bytes = nullptr);

// A file written under PATH.tmp.<pid> and renamed onto PATH by commit(). Destroyed without
// commit (an exception, an early return), it removes the temporary file: PATH keeps whatever
// it held before. Every error throws std::runtime_error naming PATH and what failed.
class AtomicFile {
 public:
  explicit AtomicFile(const std::string& path);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  void write(const void* data, size_t n);  // appends; the CRC32C and size follow along
  void write(const std::string& s) { write(s.data(), s.size()); }
  uint32_t crc() const { return crc_; }    // of everything written so far
  uint64_t bytes() const { return bytes_; }
  // fsync the file, close it, rename it onto PATH, fsync PATH's folder.
  void commit();

 private:
  std::string path_, temporary_;
  int fd_ = -1;
  uint32_t crc_ = 0;
  uint64_t bytes_ = 0;
  bool committed_ = false;
};

// fsync a folder (after a rename or a new entry in it). Throws naming the folder.
void fsync_folder(const std::string& folder);
// mkdir -p; throws naming the path that could not be made.
void make_folders(const std::string& path);
// A whole small file (a manifest, `latest`): throws CheckpointError naming the path when it
// cannot be read or is larger than `limit` bytes.
std::string read_small_file(const std::string& path, size_t limit);

}  // namespace paralab
