// tests/fuzz/fuzz_safetensors.cpp: libFuzzer target for the safetensors header checks
// (checkpoint/safetensors.h parse_safetensors_header), the bytes taken as a whole file. They
// either pass or throw SafetensorsError; when they pass, every tensor must lie inside the
// buffer with exactly numel x dtype bytes (else abort: the checks let a hostile file by).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include "checkpoint/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  paralab::SafetensorsHeader h;
  try {
    h = paralab::parse_safetensors_header(data, size, size);
  } catch (const paralab::SafetensorsError&) {
    return 0;
  }
  if (h.data_start > size) std::abort();
  const uint64_t buffer = size - h.data_start;
  uint64_t covered = 0;
  for (const paralab::SafeTensor& t : h.tensors) {
    if (t.begin != covered || t.end < t.begin || t.end > buffer) std::abort();
    uint64_t bytes = paralab::dtype_bytes(t.dtype);
    for (int64_t d : t.shape)
      if (d < 0 || __builtin_mul_overflow(bytes, static_cast<uint64_t>(d), &bytes)) std::abort();
    if (bytes != t.end - t.begin) std::abort();
    covered = t.end;
  }
  if (covered != buffer) std::abort();
  return 0;
}
