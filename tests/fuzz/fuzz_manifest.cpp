// tests/fuzz/fuzz_manifest.cpp: libFuzzer target for a checkpoint's manifest reader
// (checkpoint/checkpoint_manifest.h). parse_manifest either passes or throws CheckpointError; a
// manifest that passes and describes a small model is also checked against that model
// (check_manifest: every piece's slice and range, the coverage of every tensor), which
// must pass or throw CheckpointError too. Anything else (another exception, a crash, a
// sanitizer report, an allocation out of bounds) is a bug.
#include <cstddef>
#include <cstdint>
#include <string>
#include "checkpoint/checkpoint_manifest.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const paralab::Manifest m = paralab::parse_manifest(text, "manifest.json");
    const paralab::ModelConfig& c = m.model;
    // keep the model small: the coverage check allocates one flag per element
    if (c.num_layers <= 4 && c.hidden_size <= 64 && c.ffn() <= 256 && c.vocab_size <= 512 &&
        c.seq_length <= 64 && c.num_attention_heads <= 8 && c.head_dim() <= 64 &&
        c.moe.num_experts <= 8 && c.moe_ffn() <= 256 && c.moe.shared_expert_size <= 256 &&
        c.hidden_size % c.num_attention_heads == 0)
      paralab::check_manifest(m, c, "manifest.json");
  } catch (const paralab::CheckpointError&) {
  }
  return 0;
}
