// tests/test_file_io.cpp: CRC32C (checkpoint/file_io.h) gives the standard check value, chains
// across pieces, and reads a file to the same value as its bytes; an AtomicFile makes its
// file only on commit, and one dropped without commit leaves the old file and no temporary.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <set>
#include <string>
#include <vector>
#include "checkpoint/file_io.h"
#include "tests/test_temp_folder.h"  // TempFolder

namespace paralab {
namespace {

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

// Bytes with every value and a length that is no multiple of 8 (the table's tail loop).
std::string pattern(size_t n) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>((i * 131 + 7) % 256);
  return s;
}

TEST(Crc32c, StandardCheckValue) {
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);
  EXPECT_EQ(crc32c("", 0), 0u);
  // RFC 3720 (iSCSI) B.4: 32 bytes of zeros, and of 0xFF
  const std::string zeros(32, '\0'), ones(32, '\xff');
  EXPECT_EQ(crc32c(zeros.data(), 32), 0x8A9136AAu);
  EXPECT_EQ(crc32c(ones.data(), 32), 0x62A8AB43u);
}

TEST(Crc32c, ChainsAcrossPieces) {
  const std::string b = pattern(1001);
  const uint32_t whole = crc32c(b.data(), b.size());
  for (size_t m : {0, 1, 7, 8, 9, 500, 1000, 1001})
    EXPECT_EQ(crc32c(b.data() + m, b.size() - m, crc32c(b.data(), m)), whole) << "split at " << m;
}

TEST(Crc32c, FileEqualsItsBytes) {
  TempFolder dir;
  const std::string path = dir.path() + "/data";
  const std::string b = pattern(3u << 20 | 5);  // more than one 1 MiB read
  std::ofstream(path, std::ios::binary) << b;
  uint64_t bytes = 0;
  EXPECT_EQ(crc32c_file(path, &bytes), crc32c(b.data(), b.size()));
  EXPECT_EQ(bytes, b.size());
  try {
    crc32c_file(dir.path() + "/absent");
    FAIL() << "crc32c_file read a file that does not exist";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()).find(dir.path() + "/absent: cannot read"), 0u) << e.what();
  }
}

TEST(AtomicFile, CommitMakesTheFile) {
  TempFolder dir;
  const std::string path = dir.path() + "/out.bin";
  {
    AtomicFile f(path);
    f.write("hello, ");
    f.write(std::string("world"));
    EXPECT_EQ(f.bytes(), 12u);
    EXPECT_EQ(f.crc(), crc32c("hello, world", 12));
    EXPECT_NE(access(path.c_str(), F_OK), 0) << "the file appeared before commit";
    f.commit();
  }
  EXPECT_EQ(slurp(path), "hello, world");
  EXPECT_EQ(dir.files(), std::set<std::string>{"out.bin"});
}

TEST(AtomicFile, WithoutCommitLeavesTheOldFile) {
  TempFolder dir;
  const std::string path = dir.path() + "/out.bin";
  std::ofstream(path) << "old";
  try {
    AtomicFile f(path);
    f.write("new contents, half written");
    throw std::runtime_error("a failure in the middle of a save");
  } catch (const std::runtime_error&) {
  }
  EXPECT_EQ(slurp(path), "old");
  EXPECT_EQ(dir.files(), std::set<std::string>{"out.bin"}) << "a temporary file was left";
}

TEST(AtomicFile, ReplacesAnExistingFileAndALeftoverTemporary) {
  TempFolder dir;
  const std::string path = dir.path() + "/out.bin";
  std::ofstream(path) << "old";
  // what a process with our pid that died mid-save left behind
  std::ofstream(path + ".tmp." + std::to_string(getpid())) << "garbage";
  AtomicFile f(path);
  f.write("new");
  f.commit();
  EXPECT_EQ(slurp(path), "new");
  EXPECT_EQ(dir.files(), std::set<std::string>{"out.bin"});
}

TEST(AtomicFile, ErrorsNameThePath) {
  const std::string path = "/tmp/paralab_no_such_folder_/x/out.bin";
  try {
    AtomicFile f(path);
    FAIL() << "made a file in a folder that does not exist";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()).find(path + ": cannot create"), 0u) << e.what();
  }
}

TEST(MakeFolders, MakesEveryLevel) {
  TempFolder dir;
  const std::string deep = dir.path() + "/a/b/c";
  make_folders(deep);
  make_folders(deep + "/");  // already there: nothing to do
  struct stat st;
  ASSERT_EQ(stat(deep.c_str(), &st), 0);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  fsync_folder(deep);
  std::ofstream(dir.path() + "/a/file") << "x";
  try {
    make_folders(dir.path() + "/a/file/d");
    FAIL() << "made a folder below a file";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(dir.path() + "/a/file"), std::string::npos) << e.what();
  }
  for (const char* p : {"/a/b/c", "/a/b", "/a/file", "/a"}) std::remove((dir.path() + p).c_str());
}

}  // namespace
}  // namespace paralab
