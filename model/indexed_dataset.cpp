// model/indexed_dataset.cpp: the .idx read and checked, the .bin mapped (layout in the header).
#include "model/indexed_dataset.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>

#include "model/data.h"  // DataError

namespace paralab {

namespace {

constexpr size_t kHeaderBytes = 34;  // 9 + 8 + 1 + 8 + 8 (indexed_dataset.py's own sum)

size_t itemsize_of(int code) {
  switch (code) {
    case 1: case 2: return 1;
    case 3: case 8: return 2;
    case 4: case 7: return 4;
    case 5: case 6: return 8;
  }
  return 0;
}

template <class T>
T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// The token at p as int64, or false when it is no whole number (a float dtype's fraction, NaN).
bool token_at(const uint8_t* p, int code, int64_t* out) {
  switch (code) {
    case 1: *out = load<uint8_t>(p); return true;
    case 2: *out = load<int8_t>(p); return true;
    case 3: *out = load<int16_t>(p); return true;
    case 4: *out = load<int32_t>(p); return true;
    case 5: *out = load<int64_t>(p); return true;
    case 8: *out = load<uint16_t>(p); return true;
    case 6: case 7: {
      const double d = code == 6 ? load<double>(p) : load<float>(p);
      if (!(std::fabs(d) < 9.2e18) || d != std::floor(d)) return false;
      *out = static_cast<int64_t>(d);
      return true;
    }
  }
  return false;
}

}  // namespace

int64_t IndexedDataset::dtype_max(int code) {
  switch (code) {
    case 1: return std::numeric_limits<uint8_t>::max();
    case 2: return std::numeric_limits<int8_t>::max();
    case 3: return std::numeric_limits<int16_t>::max();
    case 4: return std::numeric_limits<int32_t>::max();
    case 8: return std::numeric_limits<uint16_t>::max();
  }
  return std::numeric_limits<int64_t>::max();
}

const char* IndexedDataset::dtype_name(int code) {
  static const char* names[] = {"?", "uint8", "int8", "int16", "int32", "int64", "float64",
                                "float32", "uint16"};
  return code >= 1 && code <= 8 ? names[code] : "?";
}

IndexedDataset::IndexedDataset(const std::string& prefix, int vocab_size, const std::string& flag)
    : prefix_(prefix) {
  const std::string idx = prefix + ".idx", bin = prefix + ".bin";
  auto refuse = [&](const std::string& file, const std::string& why) {
    throw DataError(flag + " " + prefix + ": " + file + " " + why);
  };
  struct stat st;
  if (stat(idx.c_str(), &st) != 0 || !S_ISREG(st.st_mode))
    refuse(idx, stat(idx.c_str(), &st) != 0 ? "does not exist (an indexed dataset is PREFIX.bin "
                                              "and PREFIX.idx)" : "is not a regular file");
  std::ifstream in(idx, std::ios::binary);
  std::vector<uint8_t> head(kHeaderBytes);
  const uint64_t idx_bytes = static_cast<uint64_t>(st.st_size);
  if (idx_bytes < kHeaderBytes)
    refuse(idx, "is truncated: " + std::to_string(idx_bytes) + " bytes, the header alone is 34");
  in.read(reinterpret_cast<char*>(head.data()), kHeaderBytes);
  if (std::memcmp(head.data(), kIndexedDatasetMagic, 9) != 0)
    refuse(idx, "is not a Megatron index (it does not start with MMIDIDX\\x00\\x00)");
  const uint64_t version = load<uint64_t>(&head[9]);
  if (version != 1) refuse(idx, "has version " + std::to_string(version) + ", Megatron's is 1");
  dtype_ = head[17];
  itemsize_ = itemsize_of(dtype_);
  if (itemsize_ == 0) refuse(idx, "has dtype code " + std::to_string(dtype_) + " (1 to 8 exist)");
  const uint64_t S = load<uint64_t>(&head[18]), D = load<uint64_t>(&head[26]);
  if (S > (uint64_t(1) << 40) || D > (uint64_t(1) << 40) || D < 1)
    refuse(idx, "is not an index: " + std::to_string(S) + " sequences, " + std::to_string(D) +
                    " document bounds");
  const uint64_t want = kHeaderBytes + 12 * S + 8 * D;
  if (idx_bytes != want && idx_bytes != want + S)  // + S: a multimodal file's modes
    refuse(idx, "is " + std::string(idx_bytes < want ? "truncated" : "too long") + ": " +
                    std::to_string(idx_bytes) + " bytes, its header's " + std::to_string(S) +
                    " sequences and " + std::to_string(D) + " document bounds need " +
                    std::to_string(want));
  lengths_.resize(S);
  pointers_.resize(S);
  documents_.resize(D);
  in.read(reinterpret_cast<char*>(lengths_.data()), 4 * S);
  in.read(reinterpret_cast<char*>(pointers_.data()), 8 * S);
  in.read(reinterpret_cast<char*>(documents_.data()), 8 * D);
  if (!in) refuse(idx, "cannot be read");
  if (documents_[0] != 0 || documents_[D - 1] != static_cast<int64_t>(S))
    refuse(idx, "has document bounds from " + std::to_string(documents_[0]) + " to " +
                    std::to_string(documents_[D - 1]) + ", not from 0 to its " +
                    std::to_string(S) + " sequences");
  for (uint64_t d = 1; d < D; ++d)
    if (documents_[d] < documents_[d - 1])
      refuse(idx, "has document bounds that go back (" + std::to_string(documents_[d - 1]) +
                      " then " + std::to_string(documents_[d]) + ")");

  if (stat(bin.c_str(), &st) != 0 || !S_ISREG(st.st_mode))
    refuse(bin, "does not exist (an indexed dataset is PREFIX.bin and PREFIX.idx)");
  bin_bytes_ = static_cast<size_t>(st.st_size);
  for (uint64_t i = 0; i < S; ++i) {
    const int64_t p = pointers_[i], n = lengths_[i];
    if (n < 0 || p < 0 || static_cast<uint64_t>(p) + static_cast<uint64_t>(n) * itemsize_ >
                              bin_bytes_)
      refuse(bin, "is shorter than its index says: sequence " + std::to_string(i) + " (" +
                      std::to_string(n) + " tokens at byte " + std::to_string(p) +
                      ") runs past its " + std::to_string(bin_bytes_) + " bytes");
  }
  if (vocab_size > 0 && dtype_max(dtype_) < static_cast<int64_t>(vocab_size) - 1)
    refuse(idx, "holds " + std::string(dtype_name(dtype_)) + " tokens (at most " +
                    std::to_string(dtype_max(dtype_)) + "), too narrow for --vocab-size (" +
                    std::to_string(vocab_size) + "): its tokenizer had a smaller vocabulary");
  if (bin_bytes_ > 0) {
    const int fd = open(bin.c_str(), O_RDONLY);
    if (fd < 0) refuse(bin, std::string("cannot be opened (") + std::strerror(errno) + ")");
    void* m = mmap(nullptr, bin_bytes_, PROT_READ, MAP_PRIVATE, fd, 0);
    const int err = errno;
    close(fd);
    if (m == MAP_FAILED) refuse(bin, std::string("cannot be mapped (") + std::strerror(err) + ")");
    bin_ = static_cast<const uint8_t*>(m);
  }
  // Every token once: an id outside [0, vocab) would index past the embedding.
  for (uint64_t i = 0; i < S && vocab_size > 0; ++i)
    for (int64_t k = 0; k < lengths_[i]; ++k) {
      int64_t t;
      if (!token_at(bin_ + pointers_[i] + k * itemsize_, dtype_, &t) || t < 0 || t >= vocab_size)
        refuse(bin, "holds token " + (token_at(bin_ + pointers_[i] + k * itemsize_, dtype_, &t)
                                          ? std::to_string(t) : std::string("that is no integer")) +
                        " at sequence " + std::to_string(i) + ", position " + std::to_string(k) +
                        ": token ids must be in [0, --vocab-size " + std::to_string(vocab_size) +
                        ")");
    }
}

IndexedDataset::~IndexedDataset() {
  if (bin_) munmap(const_cast<uint8_t*>(bin_), bin_bytes_);
}

int32_t IndexedDataset::token(size_t sequence, size_t offset) const {
  int64_t t = 0;
  token_at(bin_ + pointers_[sequence] + offset * itemsize_, dtype_, &t);
  return static_cast<int32_t>(t);
}

}  // namespace paralab
