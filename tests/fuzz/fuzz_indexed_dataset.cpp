// tests/fuzz/fuzz_indexed_dataset.cpp: libFuzzer target for Megatron's indexed-dataset reader
// (model/indexed_dataset.h). The input is [n: 2 bytes, little-endian] [n bytes of PREFIX.idx]
// [the rest: PREFIX.bin], written to a scratch prefix; the reader either opens it (then every
// sequence's every token is read back) or throws DataError. Another exception, a crash or a
// sanitizer's report ends the run (a bug).
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include "model/data.h"  // DataError
#include "model/indexed_dataset.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string prefix = "/tmp/paralab_fuzz_idx_" + std::to_string(getpid());
  const size_t n = size >= 2 ? std::min<size_t>(size - 2, data[0] | data[1] << 8) : 0;
  const uint8_t* idx = data + (size >= 2 ? 2 : size);
  FILE* f = std::fopen((prefix + ".idx").c_str(), "wb");
  std::fwrite(idx, 1, n, f);
  std::fclose(f);
  f = std::fopen((prefix + ".bin").c_str(), "wb");
  std::fwrite(idx + n, 1, size - (idx - data) - n, f);
  std::fclose(f);
  try {
    const paralab::IndexedDataset d(prefix, 1000, "--data-path");
    int64_t sum = 0;
    for (size_t i = 0; i < d.sequences(); ++i)
      for (int32_t k = 0; k < d.length(i); ++k) sum += d.token(i, static_cast<size_t>(k));
    if (sum < 0) std::abort();  // token ids were checked to be in [0, 1000)
  } catch (const paralab::DataError&) {
  }
  return 0;
}
