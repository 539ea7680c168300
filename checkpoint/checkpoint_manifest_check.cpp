// checkpoint/checkpoint_manifest_check.cpp: a manifest checked against the run's model: the same
// sizes, the same tensors, and every element of every tensor saved by exactly one piece
// (check_manifest; the format is in checkpoint_manifest.h, read by checkpoint_manifest.cpp).
#include "checkpoint/checkpoint_manifest.h"

#include <cstdint>
#include <string>
#include <vector>

namespace paralab {

namespace {

// A refusal as the reader words it (checkpoint_manifest.cpp): CheckpointError("PATH: <rule>").
[[noreturn]] void refuse(const std::string& path, const std::string& rule) {
  throw CheckpointError(path + ": " + rule);
}

}  // namespace

ParamSpec saved_spec(const Manifest& m, const ParamSpec& run) {
  ParamSpec saved = run;
  if (saved.split == TpSplit::VOCAB) saved.vocab_multiple = m.model.vocab_divisible_by;
  return saved;
}

void check_manifest(const Manifest& m, const ModelConfig& run, const std::string& path) {
  if ((m.model.arch == Arch::LLAMA) != (run.arch == Arch::LLAMA))
    refuse(path, std::string("arch is ") + (m.model.arch == Arch::LLAMA ? "llama" : "gpt") +
                     ", the run has " + (run.arch == Arch::LLAMA ? "llama" : "gpt") + " (--arch)");
  for (const ManifestIntField& f : kManifestIntFields)
    if (f.shape && f.get(m.model) != f.get(run))
      refuse(path, std::string(f.key) + " is " + std::to_string(f.get(m.model)) +
                       ", the run has " + std::to_string(f.get(run)) + " (" + f.flag + ")");
  for (int l = 0; l < run.num_layers && run.moe.enabled(); ++l)
    if (m.model.moe.is_moe_layer(l) != run.moe.is_moe_layer(l))
      refuse(path, "layer " + std::to_string(l) + " is " +
                       (m.model.moe.is_moe_layer(l) ? "MoE" : "dense") +
                       ", the run's is not (--moe-layer-freq)");
  const std::vector<ParamSpec> table = param_table(run);
  if (table.size() != m.tensors.size())
    refuse(path, std::to_string(m.tensors.size()) + " tensors, the model has " +
                     std::to_string(table.size()));
  for (size_t i = 0; i < table.size(); ++i)
    if (table[i].name != m.tensors[i] || table[i].shape != m.shapes[i])
      refuse(path, "tensor " + std::to_string(i) + " is " + m.tensors[i] + ", the model's is " +
                       table[i].name + " of another shape");
  // Coverage: every element of every tensor saved exactly once, over all ranks' pieces.
  for (const ParamSpec& run_spec : table) {
    const ParamSpec spec = saved_spec(m, run_spec);
    // what several ranks hold alike (tp-replicated tensors, gpt's tied copy) each saves
    const bool shared = (spec.split == TpSplit::REPLICATED && !spec.expert) ||
                        (spec.name == "embedding.word" && run.tied_embeddings());
    std::vector<char> held(spec.numel(), 0);
    for (const ManifestShard& s : m.shards)
      for (const ManifestPiece& p : s.pieces) {
        if (p.tensor != spec.name) continue;
        const TensorSlice& c = p.slice;
        const auto divides = [](int64_t n, int k) { return k >= 1 && n % k == 0; };
        bool valid;
        if (c.expert) {
          const int64_t E = spec.shape[0];
          valid = spec.expert && spec.shape.size() == 3 && divides(E, c.ep) &&
                  divides(spec.shape[spec.etp_split == TpSplit::COLUMNS ? 2 : 1] /
                              (spec.etp_split == TpSplit::HALVES ? 2 : 1),
                          c.etp);
        } else {
          switch (spec.split) {
            case TpSplit::ROWS: valid = divides(spec.shape[0], c.tp); break;
            case TpSplit::HALVES:
              valid = spec.shape[0] % 2 == 0 && divides(spec.shape[0] / 2, c.tp);
              break;
            case TpSplit::COLUMNS:
              valid = spec.shape.size() == 2 && divides(spec.shape[1], c.tp);
              break;
            default: valid = true;
          }
        }
        if (!valid) refuse(path, "a piece of " + spec.name + " has a slice the tensor cannot have");
        const std::vector<int64_t> index = shard_indices(spec, c);
        if (p.end > (int64_t)index.size())
          refuse(path, "a piece of " + spec.name + " ends past its slice");
        for (int64_t i = p.begin; i < p.end; ++i) {
          if (index[i] < 0) continue;  // vocabulary padding
          if (held[index[i]] && !shared)
            refuse(path, spec.name + ": element " + std::to_string(index[i]) + " saved twice");
          held[index[i]] = 1;
        }
      }
    for (size_t i = 0; i < held.size(); ++i)
      if (!held[i])
        refuse(path, spec.name + ": element " + std::to_string(i) + " saved by no rank");
  }
}

}  // namespace paralab
