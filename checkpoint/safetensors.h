// checkpoint/safetensors.h: Hugging Face's safetensors format, read strictly and written exactly.
//
// The format (huggingface/safetensors, docs "Format"): 8 bytes, a little-endian uint64 N;
// N bytes of UTF-8 JSON, an object mapping each tensor's name to {"dtype", "shape",
// "data_offsets": [begin, end]} (byte offsets into the buffer that follows the header), plus
// an optional "__metadata__" object of string to string; then the buffer. Row-major,
// little-endian, no strides. The header may end in spaces (0x20): writers pad it so that the
// buffer starts 8-byte aligned.
//
// paralab writes it for Hugging Face exports (checkpoint/hugging_face.h) and for the shards of
// its own checkpoints (checkpoint/checkpoint.h), and reads both back. A file from elsewhere may be
// hostile, so the reader enforces every rule before any tensor is read (tests/fuzz):
//   the file holds at least the 8-byte length; N <= 100,000,000 (the format's limit) and
//   8 + N <= the file's size; the header is a JSON object (starts with '{', model/
//   json_document.h's strict rules); every entry has exactly a known dtype, a shape of
//   non-negative integers and two data_offsets; names are unique and not empty;
//   end - begin == numel x the dtype's size (no overflow); sorted by begin, the tensors are
//   contiguous from 0 and cover the buffer exactly (the last end == file size - 8 - N);
//   __metadata__ values are strings.
// Anything else throws SafetensorsError("PATH: <the rule broken>"), which the trainer prints
// as one line with exit status 2.
//
// defines: SafeDType, SafeTensor, SafetensorsHeader, SafetensorsError,
//          parse_safetensors_header, SafetensorsReader, SafetensorsStream, SafetensorsWriter
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>
#include "model/data.h"  // InputError
#include "checkpoint/file_io.h"  // AtomicFile

namespace paralab {

// The format's dtypes (its docs' list). paralab computes with F32, BF16 and F16 and stores
// integers as I32 / I64; the reader accepts every known one.
enum class SafeDType { BOOL, U8, I8, F8_E5M2, F8_E4M3, I16, U16, F16, BF16, I32, U32, F32,
                       F64, I64, U64 };
size_t dtype_bytes(SafeDType d);
const char* dtype_name(SafeDType d);            // "F32", "BF16", ...
bool parse_dtype(const std::string& name, SafeDType* out);  // false: not a known dtype

struct SafetensorsError : InputError {
  using InputError::InputError;
};

struct SafeTensor {
  std::string name;
  SafeDType dtype = SafeDType::F32;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // bytes, relative to the buffer's start
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
};

struct SafetensorsHeader {
  std::vector<SafeTensor> tensors;  // in buffer order (by begin)
  std::vector<std::pair<std::string, std::string>> metadata;  // __metadata__, file order
  uint64_t data_start = 0;  // 8 + N: where the buffer starts in the file
  const SafeTensor* find(const std::string& name) const;  // nullptr when absent
  const std::string* meta(const std::string& key) const;  // nullptr when absent
};

// Checks the first `available` bytes of a file of `file_size` bytes (available >= 8 + N, or
// the whole file) against every rule above. Throws SafetensorsError("<rule>") without a file
// name (the reader adds it). The fuzz target calls this on arbitrary bytes.
SafetensorsHeader parse_safetensors_header(const uint8_t* bytes, size_t available,
                                           uint64_t file_size);

// Opens PATH and checks its header; tensors are then read on demand (pread, no copy of the
// whole file). Every error throws SafetensorsError naming PATH.
class SafetensorsReader {
 public:
  explicit SafetensorsReader(const std::string& path);
  ~SafetensorsReader();
  SafetensorsReader(const SafetensorsReader&) = delete;
  SafetensorsReader& operator=(const SafetensorsReader&) = delete;
  const std::string& path() const { return path_; }
  const SafetensorsHeader& header() const { return header_; }
  // Bytes [offset, offset + n) of tensor t's data.
  void read(const SafeTensor& t, uint64_t offset, uint64_t n, void* out) const;
  // The whole tensor widened to float: F32, BF16, F16 (exact); else SafetensorsError naming
  // PATH and the tensor.
  std::vector<float> read_floats(const SafeTensor& t) const;

 private:
  std::string path_;
  int fd_ = -1;
  SafetensorsHeader header_;
};

// Writes one file as a stream, atomically (checkpoint/file_io.h AtomicFile): the tensors are
// declared up front (their sizes fix the header), then their bytes follow in that order, in
// pieces of any size, so that nothing is staged in memory (a checkpoint shard goes from the
// device to the file through one bounded buffer). commit() checks that exactly the declared
// bytes came.
class SafetensorsStream {
 public:
  struct Tensor {
    std::string name;
    SafeDType dtype = SafeDType::F32;
    std::vector<int64_t> shape;
  };
  // Writes the header; std::invalid_argument on a bad or repeated name or shape.
  SafetensorsStream(const std::string& path, const std::vector<Tensor>& tensors,
                    const std::vector<std::pair<std::string, std::string>>& metadata = {});
  void write(const void* data, size_t bytes);  // the buffer's next bytes
  // Floats as the next tensor's values (F32, or BF16 or F16 rounded to nearest even).
  void write_floats(const float* values, size_t count, SafeDType as = SafeDType::F32);
  struct Written {
    uint64_t file_bytes = 0, payload_bytes = 0;
    uint32_t crc32c = 0;  // of the whole file
  };
  Written commit();

 private:
  AtomicFile file_;
  uint64_t payload_ = 0, written_ = 0;
};

// Collects tensors and writes one file, atomically (checkpoint/file_io.h AtomicFile): header
// padded with spaces to a multiple of 8 bytes, tensors in the order added, contiguous.
class SafetensorsWriter {
 public:
  // Raw little-endian bytes (copied): bytes == numel x dtype_bytes(dtype), else
  // std::invalid_argument naming the tensor. Names must be unique.
  void add(const std::string& name, SafeDType dtype, const std::vector<int64_t>& shape,
           const void* data, size_t bytes);
  // Floats stored as F32, or rounded to BF16 or F16 (round to nearest even, kernels/float16.h:
  // the trainer's own rounding, so a 16-bit parameter stores exactly).
  void add_floats(const std::string& name, const std::vector<int64_t>& shape,
                  const std::vector<float>& values, SafeDType as = SafeDType::F32);
  void set_metadata(const std::string& key, const std::string& value);
  size_t count() const { return tensors_.size(); }
  uint64_t payload_bytes() const;  // the buffer's size (tensor data only)
  using Written = SafetensorsStream::Written;
  Written write(const std::string& path) const;  // through a SafetensorsStream

 private:
  struct Entry {
    std::string name;
    SafeDType dtype;
    std::vector<int64_t> shape;
    std::vector<uint8_t> data;
  };
  std::vector<Entry> tensors_;
  std::vector<std::pair<std::string, std::string>> metadata_;
};

}  // namespace paralab
