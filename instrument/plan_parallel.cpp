// instrument/plan_parallel.cpp: the tensor-parallel group's communication of one step, and
// Korthikanti et al.'s activation closed forms with the check that holds the plan to them
// (plan.h declares both; notes/model.md, "Tensor parallelism", is the spec).
#include <algorithm>
#include <cstdio>
#include "instrument/plan.h"
#include "model/param_table.h"

namespace paralab {

// ---- tensor parallelism: communication ------------------------------------------------
std::vector<CommPlanEntry> tensor_parallel_comm(const ModelConfig& m, int B, int tp, bool sp,
                                                int e, int64_t microbatches, int zero_stage) {
  std::vector<CommPlanEntry> out;
  if (tp == 1) return out;
  const int64_t L = m.num_layers, N = (int64_t)B * m.seq_length, Nh = N * m.hidden_size;
  // Vocabulary-parallel loss: per chunk of c rows an all-reduce MAX of c floats and a SUM
  // of 2c (sum of exponentials, target logit), fp32; the chunks cover the N rows once.
  const int64_t rows = std::min<int64_t>(N, m.cross_entropy_chunk);
  const int64_t chunks = (N + rows - 1) / rows;
  int64_t ar_calls = 2 * chunks, ar_bytes = 4 * N + 4 * 2 * N;
  int64_t rs_calls = 0, rs_bytes = 0, ag_calls = 0, ag_bytes = 0;
  int64_t replicated_calls = 0, replicated_bytes = 0;
  if (!sp) {
    // g after proj and fc2 (forward), f before qkv and fc1 (backward); the embedding's g;
    // the head's input gradient d(xf), reduced once the loss has run.
    ar_calls += 4 * L + 2;
    ar_bytes += (4 * L + 2) * Nh * e;
  } else {
    // Per layer: forward gathers before qkv and fc1, scatters after proj and fc2; backward
    // gathers proj's and fc2's output gradients and (again) qkv's and fc1's inputs, and
    // scatters qkv's and fc1's input gradients. The embedding scatters x0 and gathers
    // d(x0); the head gathers xf and scatters d(xf).
    ag_calls = 6 * L + 2;
    ag_bytes = ag_calls * Nh * e;
    rs_calls = 4 * L + 2;
    rs_bytes = rs_calls * Nh * e;
    // Replicated parameters saw only the rank's tokens: one all-reduce of their gradients
    // per unit that has any (each layer; gpt's position embedding; the final norm), sized
    // from the parameter table (gpt 6h per layer, llama 2h; S h; gpt 2h, llama h). Under
    // ZeRO 0-1 the gradient buffer accumulates over the microbatches, so this happens once,
    // on the step's last; ZeRO 2-3 hand a unit's gradients over every microbatch.
    std::vector<int64_t> replicated(L + 2, 0);
    for (const ParamSpec& p : param_table(m)) {
      if (p.split != TpSplit::REPLICATED) continue;
      int unit = (int)L + 1;
      if (p.name.compare(0, 10, "embedding.") == 0) unit = 0;
      else if (p.name.compare(0, 7, "layers.") == 0) unit = 1 + std::stoi(p.name.substr(7));
      replicated[unit] += p.numel();
    }
    for (int64_t n : replicated)
      if (n > 0) {
        ++replicated_calls;
        replicated_bytes += n * e;
      }
  }
  auto add = [&](CommOp op, int64_t calls, int64_t payload) {
    if (calls > 0)
      out.push_back({CommGroup::TP, op, calls, payload, bus_factor(op, tp) * (double)payload});
  };
  // Per step: every microbatch, plus the gradient norm's one fp32 (replicated parameters
  // counted on tp rank 0 only).
  const int64_t replicated_times = zero_stage >= 2 ? microbatches : 1;
  add(CommOp::ALL_REDUCE, ar_calls * microbatches + replicated_calls * replicated_times + 1,
      ar_bytes * microbatches + replicated_bytes * replicated_times + 4);
  add(CommOp::REDUCE_SCATTER, rs_calls * microbatches, rs_bytes * microbatches);
  add(CommOp::ALL_GATHER, ag_calls * microbatches, ag_bytes * microbatches);
  return out;
}

// ---- Korthikanti Table 2 -------------------------------------------------------------
// Multiplied out, sbh(10 + 24/t + 5as/(ht)) = 10sbh + 24sbh/t + 5as^2b/t: every term is an
// integer product divided once, so the double is exact whenever the bytes are whole.
double korthikanti_layer_bytes(double s, double b, double h, double a) {
  return 34 * s * b * h + 5 * a * s * s * b;
}
double korthikanti_tp_bytes(double s, double b, double h, double a, double t) {
  return 10 * s * b * h + 24 * s * b * h / t + 5 * a * s * s * b / t;
}
double korthikanti_tp_sp_bytes(double s, double b, double h, double a, double t) {
  return 34 * s * b * h / t + 5 * a * s * s * b / t;
}
double korthikanti_tp_selective_bytes(double s, double b, double h, double t) {
  return 10 * s * b * h + 24 * s * b * h / t;
}
double korthikanti_tp_sp_selective_bytes(double s, double b, double h, double t) {
  return 34 * s * b * h / t;
}
double korthikanti_full_recompute_bytes(double s, double b, double h) { return 2 * s * b * h; }

KorthikantiCheck korthikanti_check(const Plan& plan) {
  const ModelConfig& m = plan.model;
  const double s = m.seq_length, b = plan.train.micro_batch_size, h = m.hidden_size,
               a = m.num_attention_heads, t = plan.tp;
  const bool sp = plan.sequence_parallel, naive = m.attention == AttentionImpl::NAIVE;
  KorthikantiCheck c;
  c.plan_bytes = sum_bytes(plan.layer_activations, false);
  c.norm_statistics_bytes = sum_bytes(plan.layer_activations) - c.plan_bytes;
  // Table 2's rows; flash keeps no a s s tensor, which leaves the selective-recompute rows.
  if (naive) {
    c.closed_form_bytes = sp ? korthikanti_tp_sp_bytes(s, b, h, a, t)
                             : korthikanti_tp_bytes(s, b, h, a, t);
    c.formula = plan.tp == 1 ? "sbh(34 + 5as/h)"
                : sp         ? "sbh(34/t + 5as/(ht))"
                             : "sbh(10 + 24/t + 5as/(ht))";
  } else {
    c.closed_form_bytes = sp ? korthikanti_tp_sp_selective_bytes(s, b, h, t)
                             : korthikanti_tp_selective_bytes(s, b, h, t);
    c.formula = plan.tp == 1 ? "34sbh" : sp ? "34sbh/t" : "sbh(10 + 24/t)";
  }
  auto differs = [&](bool cond, std::string what) {
    if (cond) c.differences.push_back(std::move(what));
  };
  char buf[160];
  differs(!m.is_gpt(), "llama: RMSNorm, SwiGLU fc1 of 2f, no dropout (the paper's layer is GPT)");
  std::snprintf(buf, sizeof buf, "ffn %d, not 4h = %d", m.ffn(), 4 * m.hidden_size);
  differs(m.ffn() != 4 * m.hidden_size, buf);
  std::snprintf(buf, sizeof buf, "GQA: %d query groups for %d heads (k, v smaller)", m.groups(),
                m.num_attention_heads);
  differs(m.groups() != m.num_attention_heads, buf);
  differs(m.head_dim() * m.num_attention_heads != m.hidden_size, "head dim x heads != h");
  differs(!plan.train.bf16, "fp32: 4-byte activations (the paper's are 16-bit)");
  std::snprintf(buf, sizeof buf, "%d-byte dropout masks (the paper's are 1 byte)",
                plan.options.mask_bytes);
  differs(plan.options.mask_bytes != 1, buf);
  differs(m.hidden_dropout <= 0, "no hidden dropout: no masks after proj and fc2");
  differs(naive && m.attention_dropout <= 0,
          "no attention dropout: no mask nor dropped P (3as/(ht) of the 5as/(ht))");
  differs(!naive, "flash attention: no 5as/(ht) term; an fp32 log-sum-exp of 4bas/t instead");
  return c;
}

}  // namespace paralab
