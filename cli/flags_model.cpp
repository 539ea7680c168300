// cli/flags_model.cpp: the model's flags (Megatron's names: --num-layers, --hidden-size,
// --num-attention-heads, --num-query-groups, ...; paralab's --arch picks the family) and their
// checks: every size >= 1, the head dim (--kv-channels, or h/a when a divides h), the defaults
// derived from the others (ffn 4h, query groups a), RoPE's even head dim, the norms' epsilon,
// the dropout probabilities. What the parallel layout asks of these sizes is checked with the
// layout (cli/flags_parallel.cpp).
#include <CLI/CLI.hpp>
#include <cmath>
#include <string>

#include "cli/flags_impl.h"  // defines: RawFlags, add_switch, one_of, check_at_least; cli/flags.h Options

namespace paralab {

void add_model_flags(CLI::App& app, Options& o, RawFlags& raw) {
  ModelConfig& m = o.model;
  const char* kModel = "Model";
  app.add_option("--arch", raw.arch,
                 "gpt: LayerNorm, learned positions, GeLU MLP, biases, tied embeddings; "
                 "llama: RMSNorm, RoPE, SwiGLU MLP, no biases, untied output layer")
      ->check(one_of({"gpt", "llama"}))->capture_default_str()->group(kModel);
  app.add_option("--num-layers,--layers", m.num_layers,
                 "transformer layers L; --pp must divide it")
      ->capture_default_str()->group(kModel);
  app.add_option("--hidden-size,--hidden", m.hidden_size,
                 "model width h; --num-attention-heads must divide it (unless --kv-channels "
                 "gives the head dim)")
      ->capture_default_str()->group(kModel);
  app.add_option("--ffn-hidden-size,--ffn", m.ffn_hidden_size,
                 "MLP inner width f (llama: width of each of gate and up); 0: 4h, llama "
                 "Megatron's SwiGLU int(8h/3/64) x 64; "
                 "--tp must divide it")
      ->capture_default_str()->group(kModel);
  app.add_option("--num-attention-heads,--heads", m.num_attention_heads,
                 "query heads a; must divide h unless --kv-channels gives the head dim (default "
                 "h/a; even for llama's RoPE); --tp must divide it")
      ->capture_default_str()->group(kModel);
  app.add_option("--num-query-groups,--query-groups", m.num_query_groups,
                 "key/value heads g for grouped-query attention; 0 means a (multi-head); "
                 "must divide a; --tp must divide it")
      ->capture_default_str()->group(kModel);
  app.add_option("--kv-channels", m.kv_channels,
                 "head dim d of every query, key and value head; >= 1, even for llama's RoPE; "
                 "default h/a (then a must divide h); given, a x d need not equal h: the QKV "
                 "projection is h -> (a + 2g) d and the output projection a d -> h")
      ->group(kModel);
  add_switch(app, "--qk-layernorm", m.qk_layernorm,
             "normalise each head's query and key before RoPE and the scores (RMSNorm for llama, "
             "LayerNorm for gpt; one weight of d entries shared by the heads), as Qwen3 and OLMo 2 "
             "do; with --tp > 1 it needs --sequence-parallel")
      ->group(kModel);
  app.add_option("--rotary-base", m.rope_theta,
                 "llama only: RoPE's base theta (dimension pair i of a head turns by position x "
                 "theta^(-2i/d)); > 0; gpt's learned positions ignore it")
      ->capture_default_str()->group(kModel);
  app.add_option("--norm-epsilon", m.norm_epsilon,
                 "epsilon of every LayerNorm / RMSNorm, 1/sqrt(var + eps) or 1/sqrt(mean(x^2) + "
                 "eps); > 0")
      ->capture_default_str()->group(kModel);
  app.add_option("--seq-length,--seq", m.seq_length,
                 "tokens per sample s (also the learned-position table size for gpt)")
      ->capture_default_str()->group(kModel);
  app.add_option("--vocab-size,--vocab", m.vocab_size,
                 "vocabulary V: embedding rows and logits per token; every token id of "
                 "--data-path must be below it (plain text needs >= 256)")
      ->capture_default_str()->group(kModel);
  app.add_option("--make-vocab-size-divisible-by", m.vocab_divisible_by,
                 "pad the embedding and output layer to a multiple of this x tp rows "
                 "(Megatron's; 128: GPT-2's 50257 -> 50304) so the output layer's GEMMs take "
                 "the fast kernels; the padding is masked out of the loss; >= 1")
      ->capture_default_str()->group(kModel);
  app.add_option("--hidden-dropout", m.hidden_dropout,
                 "dropout probability after the attention projection and after the MLP, "
                 "in [0, 1); saves a 1-byte mask per element for backward")
      ->capture_default_str()->group(kModel);
  app.add_option("--attention-dropout", m.attention_dropout,
                 "dropout probability on the attention probabilities, in [0, 1)")
      ->capture_default_str()->group(kModel);
  app.add_option("--attention", raw.attention,
                 "flash: tiled online softmax, saves only the log-sum-exp (B a s floats); "
                 "naive: materialises and saves the B a s s probabilities")
      ->check(one_of({"flash", "naive"}))->capture_default_str()->group(kModel);
  add_switch(app, "--fused-ce,!--no-fused-ce", m.fused_cross_entropy,
             "materialise the full (B s, V) logits for the loss (ledger category logits) "
             "instead of the default fused, chunked softmax cross-entropy that never holds "
             "them; in a --config file no-fused-ce = true (or fused-ce = false)")
      ->group(kModel);
}

void check_model(Options& o, const RawFlags& raw) {
  ModelConfig& m = o.model;
  m.arch = raw.arch == "llama" ? Arch::LLAMA : Arch::GPT;
  m.attention = raw.attention == "naive" ? AttentionImpl::NAIVE : AttentionImpl::FLASH;
  check_at_least("--num-layers", m.num_layers, 1);
  check_at_least("--hidden-size", m.hidden_size, 1);
  check_at_least("--ffn-hidden-size", m.ffn_hidden_size, 0);
  check_at_least("--num-attention-heads", m.num_attention_heads, 1);
  check_at_least("--num-query-groups", m.num_query_groups, 0);
  check_at_least("--seq-length", m.seq_length, 1);
  check_at_least("--vocab-size", m.vocab_size, 1);
  check_at_least("--make-vocab-size-divisible-by", m.vocab_divisible_by, 1);

  // Attention shapes. The head dim is --kv-channels, or h/a when it is not given.
  if (raw.kv_channels_given)
    check_at_least("--kv-channels", m.kv_channels, 1);
  else if (m.hidden_size % m.num_attention_heads != 0)
    fail("--num-attention-heads (", m.num_attention_heads, ") must divide --hidden-size (",
         m.hidden_size, ")");
  if (m.ffn_hidden_size == 0 && m.arch == Arch::LLAMA) {
    // Megatron's SwiGLU width (megatron/training/arguments.py: "int((4 * args.hidden_size * 2
    // / 3) / 64) * 64"): two projections of 8h/3 keep 4h's parameter count, a multiple of 64
    m.ffn_hidden_size = static_cast<int>((4.0 * m.hidden_size * 2 / 3) / 64) * 64;
    if (m.ffn_hidden_size == 0)
      fail("--arch llama with --hidden-size ", m.hidden_size, ": Megatron's SwiGLU width "
           "int(8h/3/64) x 64 is 0; give --ffn-hidden-size");
  }
  if (m.ffn_hidden_size == 0) m.ffn_hidden_size = 4 * m.hidden_size;
  if (m.num_query_groups == 0) m.num_query_groups = m.num_attention_heads;
  if (m.num_attention_heads % m.num_query_groups != 0)
    fail("--num-query-groups (", m.num_query_groups, ") must divide --num-attention-heads (",
         m.num_attention_heads, ")");
  if (m.arch == Arch::LLAMA && m.head_dim() % 2 != 0) {
    if (raw.kv_channels_given)
      fail("--arch llama needs an even head dim for RoPE, got --kv-channels ", m.kv_channels);
    fail("--arch llama needs an even head dim for RoPE, got --hidden-size (", m.hidden_size,
         ") / --num-attention-heads (", m.num_attention_heads, ") = ", m.head_dim());
  }
  m.kv_channels = m.head_dim();
  if (!(m.norm_epsilon > 0)) fail("--norm-epsilon must be > 0, got ", m.norm_epsilon);
  check_finite("--norm-epsilon", m.norm_epsilon);
  if (!(m.rope_theta > 0)) fail("--rotary-base must be > 0, got ", m.rope_theta);
  check_finite("--rotary-base", m.rope_theta);
  if (m.is_gpt() && raw.rotary_base_given)
    o.warnings.push_back("--rotary-base has no effect with --arch gpt (learned positions)");
  check_unit_interval("--hidden-dropout", m.hidden_dropout);
  check_unit_interval("--attention-dropout", m.attention_dropout);
}

}  // namespace paralab
