// checkpoint/tensor_file.h: a tiny binary file of named float32 / int32 tensors.
//
// Used for the golden files that scripts/reference.py writes (tests/data/golden_*.bin) and
// for checkpoints. Simple enough to write from Python with `struct` alone:
//
//   "PLTF"                      4 bytes, magic
//   version                     uint32 (1)
//   count                       uint64, number of tensors
//   count times:
//     name_length               uint32, then name_length bytes of name (no terminator)
//     dtype                     uint32: 0 float32, 1 int32
//     ndim                      uint32 (0 is a scalar: one element)
//     dims                      ndim x int64
//     data                      numel x 4 bytes, row-major
//
// Every number is little-endian. No padding or alignment anywhere.
//
// defines: TensorType, NamedTensor, write_tensor_file, read_tensor_file
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace paralab {

enum class TensorType : uint32_t { F32 = 0, I32 = 1 };

struct NamedTensor {
  std::string name;
  TensorType dtype = TensorType::F32;
  std::vector<int64_t> shape;  // empty: a scalar
  std::vector<float> f32;      // the data when dtype == F32
  std::vector<int32_t> i32;    // the data when dtype == I32

  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
  static NamedTensor floats(std::string name, std::vector<int64_t> shape,
                            std::vector<float> data);
  static NamedTensor ints(std::string name, std::vector<int64_t> shape,
                          std::vector<int32_t> data);
};

// Writes the tensors in the given order. Throws std::runtime_error (one line naming the
// file and the problem) when a tensor's data does not match its shape or writing fails.
void write_tensor_file(const std::string& path, const std::vector<NamedTensor>& tensors);

// Reads a whole file. Throws std::runtime_error naming the file and the problem on a bad
// magic, an unknown version or dtype, a truncated file, trailing bytes or a repeated name.
std::map<std::string, NamedTensor> read_tensor_file(const std::string& path);

}  // namespace paralab
