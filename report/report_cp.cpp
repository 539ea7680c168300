// report/report_cp.cpp: see report_cp.h.
#include "report/report_cp.h"
#include "plan/context_parallel.h"
#include "report/text.h"

namespace paralab {

namespace {

const char* phase_name(CpExchange::Phase p) {
  return p == CpExchange::FORWARD ? "forward" : p == CpExchange::OUTPUT ? "forward (out)"
                                                                        : "backward";
}

// The model as cp rank `rank` of the same layout holds it, with comm type `type`.
ModelConfig as_rank(const Plan& plan, int rank, CpCommType type) {
  ModelConfig m = plan.model;
  m.context_parallel.rank = rank;
  m.context_parallel.type = type;
  return m;
}

// One layer's attention FLOPs on a cp rank, one microbatch, forward and backward as the
// kernels run them: flash 4 + 10 products of 2d per causal pair (fwd QK^T, PV; bwd QK^T
// again, dP, dV, dQ, dK), naive 2 + 4 per scored pair (its GEMMs).
double attention_flops(const Plan& plan, int rank) {
  const ModelConfig m = as_rank(plan, rank, plan.model.context_parallel.type);
  const AttentionPairs p = cp_attention_pairs(m, plan.tp);
  const double B = plan.train.micro_batch_size, a = m.num_attention_heads / plan.tp,
               d = m.head_dim();
  return m.attention == AttentionImpl::FLASH ? 14 * d * B * a * p.causal
                                             : 12 * d * B * a * p.scored;
}

// Bus bytes of one layer and microbatch, forward + backward, for comm type `type`.
double layer_bus_bytes(const Plan& plan, CpCommType type) {
  const ModelConfig m = as_rank(plan, 0, type);
  double bus = 0;
  for (const CpExchange& x :
       cp_layer_exchanges(m, plan.train.micro_batch_size, storage_bytes(plan.train), plan.tp))
    bus += bus_factor(x.op, m.context_parallel.size) * (double)x.payload_bytes;
  return bus;
}

bool a2a_fits(const Plan& plan) {
  const int c = plan.cp, t = plan.tp;
  return (plan.model.num_attention_heads / t) % c == 0 && (plan.model.groups() / t) % c == 0;
}

// The p2p ring's overlap condition: a step's attention (forward, an off-diagonal half block:
// 4 d b a (s/2cp)(s/cp) FLOPs) against its K, V transfer (2 b g (s/cp) d e bytes).
struct Overlap {
  double step_flops = 0, bytes = 0, seconds = 0, needed_gbs = 0;
};
Overlap ring_overlap(const Plan& plan, const Peak* peak) {
  const ModelConfig& m = plan.model;
  const double B = plan.train.micro_batch_size, a = m.num_attention_heads / plan.tp,
               g = m.groups() / plan.tp, d = m.head_dim(), S = m.seq_length / plan.cp;
  const double half = plan.model.context_parallel.layout == CpLayout::ZIGZAG ? S / 2 : S;
  Overlap o;
  o.step_flops = 4 * d * B * a * half * S;
  o.bytes = 2 * B * g * S * d * storage_bytes(plan.train);
  if (peak && peak->tflops > 0) {
    o.seconds = o.step_flops / (peak->tflops * 1e12);
    o.needed_gbs = o.bytes / o.seconds / 1e9;
  }
  return o;
}

}  // namespace

std::string cp_plan_text(const Plan& plan, const Peak* peak) {
  const ModelConfig& m = plan.model;
  const CpSpec& cp = m.context_parallel;
  if (cp.size == 1) return "";
  const int S = m.seq_length, c = cp.size;
  std::string t = strprintf(
      "\ncontext parallelism: cp %d, %s, %s layout: each rank holds s/cp = %d of the %d tokens "
      "of every sequence\n",
      c, cp_comm_type_name(cp.type), cp_layout_name(cp.layout), S / c, S);
  for (int r = 0; r < c; ++r) {
    const kernels::TokenPositions p = cp_positions(S, c, r, cp.layout);
    const int chunk = std::min(p.chunk, S / c);
    t += strprintf("  rank %d: positions [%d, %d)", r, p.start[0], p.start[0] + chunk);
    if (chunk < S / c) t += strprintf(" + [%d, %d)", p.start[1], p.start[1] + chunk);
    t += "\n";
  }
  const int e = storage_bytes(plan.train);
  t += strprintf("  exchanges of one layer and microbatch (cp group, %d-byte elements):\n", e);
  t += strprintf("    %-14s %-15s %-24s %6s %12s %12s\n", "phase", "operation", "what", "calls",
                 "payload MiB", "bus MiB");
  for (const CpExchange& x : cp_layer_exchanges(m, plan.train.micro_batch_size, e, plan.tp))
    t += strprintf("    %-14s %-15s %-24s %6lld %12s %12s\n", phase_name(x.phase),
                   op_name(x.op), x.what, (long long)x.calls,
                   format_mib((double)x.payload_bytes).c_str(),
                   format_mib(bus_factor(x.op, c) * (double)x.payload_bytes).c_str());
  t += "  bus MiB per layer and microbatch, forward + backward, by comm type:";
  for (CpCommType type : {CpCommType::P2P, CpCommType::ALL_GATHER, CpCommType::A2A}) {
    if (type == CpCommType::A2A && !a2a_fits(plan)) {
      t += " a2a n/a (heads or groups per tp rank not divisible by cp)";
      continue;
    }
    t += strprintf(" %s %s%s", cp_comm_type_name(type),
                   format_mib(layer_bus_bytes(plan, type)).c_str(),
                   type == CpCommType::A2A ? "" : ",");
  }
  t += "\n  attention FLOPs of one layer and microbatch per cp rank (forward + backward, as run):";
  const double first = attention_flops(plan, 0);
  for (int r = 0; r < c; ++r) {
    const double f = attention_flops(plan, r);
    t += strprintf(" rank %d %s (x%.2f)%s", r, format_si(f).c_str(), first > 0 ? f / first : 0,
                   r + 1 < c ? "," : "\n");
  }
  if (cp.type == CpCommType::P2P) {
    const Overlap o = ring_overlap(plan, peak);
    t += strprintf("  overlap (p2p): a ring step attends %s FLOPs (4 d b a (s/%s)(s/cp), "
                   "forward) while %s MiB of K, V travel",
                   format_si(o.step_flops).c_str(),
                   cp.layout == CpLayout::ZIGZAG ? "2cp" : "cp", format_mib(o.bytes).c_str());
    if (o.seconds > 0)
      t += strprintf("; at %.4g TFLOP/s that is %.3g us, hidden when the link moves >= %.3g "
                     "GB/s (the backward has 2.5x the FLOPs for 2x the bytes)\n",
                     peak->tflops, o.seconds * 1e6, o.needed_gbs);
    else
      t += "; hidden when the link's bandwidth >= bytes / (FLOPs / peak FLOP/s)\n";
  }
  return t;
}

void cp_plan_json(JsonWriter& j, const Plan& plan, const Peak* peak) {
  const ModelConfig& m = plan.model;
  const CpSpec& cp = m.context_parallel;
  if (cp.size == 1) return;
  const int e = storage_bytes(plan.train);
  j.key("context_parallel").begin_object();
  j.field("size", cp.size).field("comm_type", cp_comm_type_name(cp.type));
  j.field("layout", cp_layout_name(cp.layout)).field("tokens_per_rank", m.seq_length / cp.size);
  j.key("exchanges_per_layer").begin_array();
  for (const CpExchange& x : cp_layer_exchanges(m, plan.train.micro_batch_size, e, plan.tp)) {
    j.begin_object().field("phase", phase_name(x.phase)).field("op", op_name(x.op));
    j.field("what", x.what).field("calls", (double)x.calls);
    j.field("payload_bytes", (double)x.payload_bytes);
    j.field("bus_bytes", bus_factor(x.op, cp.size) * (double)x.payload_bytes).end_object();
  }
  j.end_array();
  j.key("bus_bytes_per_layer_by_type").begin_object();
  for (CpCommType type : {CpCommType::P2P, CpCommType::ALL_GATHER, CpCommType::A2A})
    if (type != CpCommType::A2A || a2a_fits(plan))
      j.field(cp_comm_type_name(type), layer_bus_bytes(plan, type));
  j.end_object();
  j.key("attention_flops_per_rank").begin_array();
  for (int r = 0; r < cp.size; ++r) j.value(attention_flops(plan, r));
  j.end_array();
  if (cp.type == CpCommType::P2P) {
    const Overlap o = ring_overlap(plan, peak);
    j.key("overlap").begin_object().field("step_flops", o.step_flops).field("bytes", o.bytes);
    if (o.seconds > 0) j.field("step_seconds", o.seconds).field("needed_gbs", o.needed_gbs);
    j.end_object();
  }
  j.end_object();
}

}  // namespace paralab
