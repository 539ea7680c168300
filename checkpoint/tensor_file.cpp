// checkpoint/tensor_file.cpp: see tensor_file.h for the layout.
//
// Numbers are encoded byte by byte (not by copying host memory), so the file is
// little-endian whatever the host is, and a float's bits travel through a uint32.
#include "checkpoint/tensor_file.h"
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <stdexcept>

namespace paralab {

namespace {

constexpr char kMagic[4] = {'P', 'L', 'T', 'F'};
constexpr uint32_t kVersion = 1;
constexpr uint32_t kMaxDims = 8;  // a sanity bound; the model never needs more than 3

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw std::runtime_error("tensor file " + path + ": " + what);
}

void put_u32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void put_u64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// A bounds-checked cursor over the file's bytes.
class Reader {
 public:
  Reader(const std::string& path, std::string bytes) : path_(path), bytes_(std::move(bytes)) {}
  size_t remaining() const { return bytes_.size() - pos_; }
  void need(size_t n, const char* what) const {
    if (n > remaining())
      fail(path_, std::string("truncated while reading ") + what + " at byte " +
                      std::to_string(pos_));
  }
  uint64_t uint(int nbytes, const char* what) {
    need(nbytes, what);
    uint64_t v = 0;
    for (int i = 0; i < nbytes; ++i)
      v |= static_cast<uint64_t>(static_cast<unsigned char>(bytes_[pos_ + i])) << (8 * i);
    pos_ += nbytes;
    return v;
  }
  std::string text(size_t n, const char* what) {
    need(n, what);
    std::string s = bytes_.substr(pos_, n);
    pos_ += n;
    return s;
  }

 private:
  std::string path_;
  std::string bytes_;
  size_t pos_ = 0;
};

}  // namespace

NamedTensor NamedTensor::floats(std::string name, std::vector<int64_t> shape,
                                std::vector<float> data) {
  NamedTensor t;
  t.name = std::move(name);
  t.dtype = TensorType::F32;
  t.shape = std::move(shape);
  t.f32 = std::move(data);
  return t;
}

NamedTensor NamedTensor::ints(std::string name, std::vector<int64_t> shape,
                              std::vector<int32_t> data) {
  NamedTensor t;
  t.name = std::move(name);
  t.dtype = TensorType::I32;
  t.shape = std::move(shape);
  t.i32 = std::move(data);
  return t;
}

void write_tensor_file(const std::string& path, const std::vector<NamedTensor>& tensors) {
  std::string out(kMagic, 4);
  put_u32(out, kVersion);
  put_u64(out, tensors.size());
  for (const NamedTensor& t : tensors) {
    const size_t have = t.dtype == TensorType::F32 ? t.f32.size() : t.i32.size();
    if (t.shape.size() > kMaxDims) fail(path, "tensor " + t.name + " has too many dims");
    for (int64_t d : t.shape)
      if (d < 0) fail(path, "tensor " + t.name + " has a negative dim");
    if (static_cast<int64_t>(have) != t.numel())
      fail(path, "tensor " + t.name + " holds " + std::to_string(have) +
                     " values but its shape needs " + std::to_string(t.numel()));
    put_u32(out, static_cast<uint32_t>(t.name.size()));
    out += t.name;
    put_u32(out, static_cast<uint32_t>(t.dtype));
    put_u32(out, static_cast<uint32_t>(t.shape.size()));
    for (int64_t d : t.shape) put_u64(out, static_cast<uint64_t>(d));
    if (t.dtype == TensorType::F32)
      for (float f : t.f32) put_u32(out, float_bits(f));
    else
      for (int32_t i : t.i32) put_u32(out, static_cast<uint32_t>(i));
  }
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) fail(path, "cannot open for writing");
  f.write(out.data(), static_cast<std::streamsize>(out.size()));
  if (!f) fail(path, "write failed");
}

std::map<std::string, NamedTensor> read_tensor_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail(path, "cannot open for reading");
  Reader r(path, std::string(std::istreambuf_iterator<char>(f), {}));

  if (r.text(4, "magic") != std::string(kMagic, 4)) fail(path, "not a PLTF file (bad magic)");
  const uint64_t version = r.uint(4, "version");
  if (version != kVersion) fail(path, "unsupported version " + std::to_string(version));
  const uint64_t count = r.uint(8, "tensor count");

  std::map<std::string, NamedTensor> tensors;
  for (uint64_t k = 0; k < count; ++k) {
    NamedTensor t;
    t.name = r.text(r.uint(4, "name length"), "name");
    const uint64_t dtype = r.uint(4, "dtype");
    if (dtype > 1) fail(path, "tensor " + t.name + " has unknown dtype " + std::to_string(dtype));
    t.dtype = static_cast<TensorType>(dtype);
    const uint64_t ndim = r.uint(4, "ndim");
    if (ndim > kMaxDims) fail(path, "tensor " + t.name + " has " + std::to_string(ndim) + " dims");
    for (uint64_t i = 0; i < ndim; ++i) {
      const uint64_t d = r.uint(8, "dims");
      if (d > static_cast<uint64_t>(INT64_MAX))
        fail(path, "tensor " + t.name + " has a negative dim");
      t.shape.push_back(static_cast<int64_t>(d));
    }
    // A shape whose product exceeds the bytes left is caught before the product overflows.
    const uint64_t limit = r.remaining() / 4;
    uint64_t numel = 1;
    for (int64_t d : t.shape)
      if (d == 0) numel = 0;
    for (int64_t d : t.shape) {
      if (numel == 0) break;
      if (numel > limit / static_cast<uint64_t>(d))
        fail(path, "truncated: tensor " + t.name + " needs more data than the file holds");
      numel *= static_cast<uint64_t>(d);
    }
    if (t.dtype == TensorType::F32) {
      t.f32.resize(numel);
      for (float& x : t.f32) {
        const uint32_t u = static_cast<uint32_t>(r.uint(4, "data"));
        std::memcpy(&x, &u, 4);
      }
    } else {
      t.i32.resize(numel);
      for (int32_t& x : t.i32) x = static_cast<int32_t>(static_cast<uint32_t>(r.uint(4, "data")));
    }
    std::string name = t.name;
    if (!tensors.emplace(name, std::move(t)).second) fail(path, "tensor " + name + " repeated");
  }
  if (r.remaining() != 0)
    fail(path, std::to_string(r.remaining()) + " trailing bytes after the last tensor");
  return tensors;
}

}  // namespace paralab
