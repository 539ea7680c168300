// model/indexed_dataset.h: Megatron's indexed dataset, the PREFIX.bin / PREFIX.idx pair that
// tools/preprocess_data.py writes (megatron/core/datasets/indexed_dataset.py, IndexedDataset and
// IndexedDatasetBuilder), read through mmap.
//
// PREFIX.bin is the tokens of every sequence back to back, in one dtype, no header.
// PREFIX.idx, little-endian:
//   offset 0   9 bytes  "MMIDIDX\x00\x00"                      (_INDEX_HEADER)
//          9   8        version, uint64 = 1
//         17   1        dtype code: 1 uint8, 2 int8, 3 int16, 4 int32, 5 int64, 6 float64,
//                       7 float32, 8 uint16                      (DType)
//         18   8        S, the sequence count, uint64
//         26   8        D, the document count + 1, uint64
//         34   4 S      sequence_lengths, int32: tokens per sequence
//              8 S      sequence_pointers, int64: each sequence's byte offset in .bin
//              8 D      document_indices, int64: sequence bounds of the documents (0 first,
//                       S last)
//              1 S      sequence_modes, int8: only in multimodal files (read and ignored)
// A document holds one sequence unless the text was split into sentences; GPTDataset (and
// so paralab) samples by sequence. Every rule a later read would trip on is checked at open
// and refused with one line naming the file (DataError): a foreign or truncated .idx, a
// pointer past the .bin, a dtype that cannot hold the vocabulary, a token id >= vocabulary.
//
// defines: IndexedDataset, kIndexedDatasetMagic
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>
#include "model/gpt_dataset.h"  // LowLevelDataset

namespace paralab {

constexpr char kIndexedDatasetMagic[] = "MMIDIDX\x00\x00";  // 9 bytes with the two NULs

class IndexedDataset : public LowLevelDataset {
 public:
  // Opens PREFIX.idx and PREFIX.bin and checks them (a token id check needs vocab_size > 0:
  // every token of the .bin is read once). `flag` names the flag in messages.
  IndexedDataset(const std::string& prefix, int vocab_size, const std::string& flag);
  ~IndexedDataset() override;
  IndexedDataset(const IndexedDataset&) = delete;
  IndexedDataset& operator=(const IndexedDataset&) = delete;

  size_t sequences() const override { return lengths_.size(); }
  size_t documents() const { return documents_.size() - 1; }
  int32_t length(size_t sequence) const { return lengths_[sequence]; }
  const std::vector<int32_t>& lengths() const override { return lengths_; }
  // Token `offset` of sequence `sequence`, widened to int32.
  int32_t token(size_t sequence, size_t offset) const override;
  int dtype_code() const { return dtype_; }
  const std::string& prefix() const { return prefix_; }

  // The largest token id a dtype code can hold (2^63 - 1 for int64 and the floats' whole range
  // counted as int64's), and its name: "uint16".
  static int64_t dtype_max(int code);
  static const char* dtype_name(int code);

 private:
  std::string prefix_;
  int dtype_ = 0;
  size_t itemsize_ = 0;
  std::vector<int32_t> lengths_;
  std::vector<int64_t> pointers_, documents_;
  const uint8_t* bin_ = nullptr;
  size_t bin_bytes_ = 0;
};

}  // namespace paralab
