// tests/tools/hf_logits.cpp: paralab's logits of a fixed batch, for scripts/hf_check.py to
// compare with transformers' on the same Hugging Face export.
//
//   hf_logits <trainer flags> --export-hf DIR --out FILE   initialise the model (--seed),
//                                                          export it to DIR, run the batch
//   hf_logits <trainer flags> --load-hf DIR --out FILE     check DIR/config.json against the
//                                                          flags, import DIR, run the batch
// --random-weights (with --export-hf): after the initialisation every tensor is redrawn at
// a scale where each one shows in the logits: Megatron's initial norms (weights 1, biases 0)
// would hide a swapped norm or bias, and its 0.02 weights give near-uniform attention, which
// hides a permuted query or key. 2-D weights U(-a, a), a = sqrt(3 / fan_in) (variance
// 1 / fan_in), norm weights 1 + U(-0.5, 0.5), biases U(-0.5, 0.5).
// The model is built from the trainer's own flags (parse_flags) on one CPU rank. The batch:
// B = 2 sequences of --seq-length tokens, token i of sequence b = (7 i + 13 b + 3) % V, each
// target the next token of that formula. FILE (safetensors) holds "tokens" I32 [B, S] and
// "logits" F32 [B S, V], the forward's logits in evaluation mode (no dropout).
// Exit 0, or 2 with one line on a bad flag or a bad folder.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>
#include "cli/flags.h"                // parse_flags
#include "kernels/math.h"         // mix64
#include "checkpoint/hugging_face.h"   // export_hugging_face, import_hugging_face
#include "checkpoint/safetensors.h"    // SafetensorsWriter
#include "model/transformer.h"    // Transformer

namespace {

constexpr int kBatch = 2;

int token(int b, int i, int vocab) { return (7 * i + 13 * b + 3) % vocab; }

// Uniform in [-1, 1), element i of tensor number k.
float uniform(uint64_t k, int64_t i) {
  return (float)(kernels::mix64(kernels::mix64(k) ^ (uint64_t)i) >> 40) / (1 << 23) - 1.0f;
}

std::vector<float> random_weights(const paralab::ParamSpec& p, uint64_t k) {
  std::vector<float> v(p.numel());
  const bool bias = p.name.size() > 5 && p.name.compare(p.name.size() - 5, 5, ".bias") == 0;
  const float a = std::sqrt(3.0f / (float)p.shape.back());
  for (int64_t i = 0; i < p.numel(); ++i) {
    const float u = uniform(k, i);
    v[i] = p.shape.size() > 1 ? a * u : bias ? 0.5f * u : 1.0f + 0.5f * u;
  }
  return v;
}

int run(int argc, char** argv) {
  // --out is this tool's; every other flag is the trainer's
  std::string out;
  bool random = false;
  std::vector<const char*> args = {argv[0]};
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--out" && i + 1 < argc)
      out = argv[++i];
    else if (std::string(argv[i]) == "--random-weights")
      random = true;
    else
      args.push_back(argv[i]);
  }
  const paralab::Options o = paralab::parse_flags((int)args.size(), args.data(), 1, 0);
  if (out.empty() || o.load_hf.empty() == o.export_hf.empty() || (random && o.export_hf.empty()))
    throw paralab::InputError("usage: hf_logits <trainer flags> (--export-hf DIR "
                              "[--random-weights] | --load-hf DIR) --out FILE");
  const paralab::ModelConfig& m = o.model;
  paralab::Transformer model(m, kernels::Device::CPU);
  if (!o.export_hf.empty()) {
    model.init_parameters(o.train.seed);
    paralab::LogicalTensors tensors;
    uint64_t k = o.train.seed;
    // full tensors (a VOCAB one has V rows; the model's local table pads them)
    for (const paralab::ParamSpec& p : paralab::param_table(m)) {
      if (random) model.set_param(p.name, random_weights(p, ++k));
      tensors[p.name] = model.get_param(p.name);
    }
    export_hugging_face(o.export_hf, m, tensors);
  } else {
    paralab::check_hugging_face_config(o.load_hf, m);
    for (const auto& [name, values] : paralab::import_hugging_face(o.load_hf, m))
      model.set_param(name, values);
  }

  const int S = m.seq_length, V = m.vocab_size;
  std::vector<int> tokens, targets;
  for (int b = 0; b < kBatch; ++b)
    for (int i = 0; i < S; ++i) {
      tokens.push_back(token(b, i, V));
      targets.push_back(token(b, i + 1, V));
    }
  model.keep_logits(true);
  paralab::Transformer::Microbatch batch;
  batch.tokens = tokens.data();
  batch.targets = targets.data();
  batch.B = kBatch;
  batch.forward_only = true;
  const float loss = model.forward(0, 0, batch);
  model.discard(0, 0);

  paralab::SafetensorsWriter w;
  w.add("tokens", paralab::SafeDType::I32, {kBatch, S}, tokens.data(),
        tokens.size() * sizeof(int));
  w.add_floats("logits", {(int64_t)kBatch * S, V}, model.last_logits());
  w.write(out);
  const std::string source = o.export_hf.empty() ? "loaded " + o.load_hf
                                                  : "exported " + o.export_hf;
  std::printf("hf_logits: %s, %d x %d tokens, loss %.6f -> %s\n", source.c_str(), kBatch, S,
              loss, out.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const paralab::HelpRequested& h) {
    std::printf("%s", h.text.c_str());
    return 0;
  } catch (const paralab::InputError& e) {
    std::fprintf(stderr, "hf_logits: error: %s\n", e.what());
    return 2;
  }
}
