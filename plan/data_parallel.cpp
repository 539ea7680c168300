// plan/data_parallel.cpp: data parallelism and ZeRO predicted: the paper's model-state
// formulas, the shard sizes, the replay of parallel/data_parallel.cpp's calls over a step
// (what ZeRO-2/3 buffers are alive when), and the dp group's communication.
#include <algorithm>
#include <stdexcept>
#include "plan/plan.h"

namespace paralab {

// ---- ZeRO ---------------------------------------------------------------------------
int64_t zero_shard_numel(int64_t psi, int dp) { return (psi + dp - 1) / dp; }
int64_t zero_padded_numel(int64_t psi, int dp) { return zero_shard_numel(psi, dp) * dp; }

double zero_model_state_bytes(int stage, double psi, double N) {
  const double K = 12;  // fp32 master 4 + Adam m 4 + v 4
  switch (stage) {
    case 0: return (2 + 2 + K) * psi;          // DDP: 16Ψ
    case 1: return 4 * psi + K * psi / N;      // P_os: 4Ψ + 12Ψ/N
    case 2: return 2 * psi + (2 + K) * psi / N;  // P_os+g: 2Ψ + 14Ψ/N
    case 3: return (2 + 2 + K) * psi / N;      // P_os+g+p: 16Ψ/N
    default: throw std::invalid_argument("zero stage must be 0..3");
  }
}

double zero_resident_bytes(int stage, double psi, double N, int pb, int gb, int mb, int ob) {
  const double all = pb + gb + mb + ob;
  switch (stage) {
    case 0: return all * psi;
    case 1: return (pb + gb) * psi + (mb + ob) * psi / N;
    case 2: return pb * psi + (gb + mb + ob) * psi / N;
    case 3: return all * psi / N;
    default: throw std::invalid_argument("zero stage must be 0..3");
  }
}

std::string zero_resident_formula(int stage, int pb, int gb, int mb, int ob) {
  const int all = pb + gb + mb + ob;
  switch (stage) {
    case 0: return std::to_string(all) + "Ψ";
    case 1: return std::to_string(pb + gb) + "Ψ + " + std::to_string(mb + ob) + "Ψ/N";
    case 2: return std::to_string(pb) + "Ψ + " + std::to_string(gb + mb + ob) + "Ψ/N";
    case 3: return std::to_string(all) + "Ψ/N";
    default: throw std::invalid_argument("zero stage must be 0..3");
  }
}

// ---- data parallelism: replaying data_parallel.cpp -------------------------------------------
ZeroStepSimulation simulate_zero_step(const BucketLayout& l, const std::vector<DpCall>& calls,
                                      int z, bool overlap, int prefetch, int64_t microbatches,
                                      const std::vector<int>& unit_chunk,
                                      const std::vector<int>& deferred_units,
                                      std::vector<std::array<int64_t, 2>>* trace) {
  ZeroStepSimulation r;
  if (trace) trace->clear();
  if (z < 2) return r;
  const int U = (int)l.bucket_of.size(), nb = (int)l.buckets.size();
  std::vector<bool> deferred(nb, false);
  for (int u : deferred_units) deferred[l.bucket_of.at(u)] = true;
  auto fail = [](const std::string& what) { throw std::invalid_argument("plan: " + what); };
  // Stage 3 parameters: resident (gathered or in flight) units and their references.
  std::vector<bool> resident(U, false);
  std::vector<int> refs(U, 0);
  int held = 0;
  int64_t params_alive = 0;
  r.gathers_of.assign(U, 0);
  auto gather = [&](int u) {
    resident[u] = true;
    r.gathers_of[u] += 1;
    const int64_t n = l.buckets[l.bucket_of[u]].padded;
    params_alive += n;
    r.params_transient_peak = std::max(r.params_transient_peak, params_alive);
    r.gathers += n > 0;  // an empty unit's bucket never communicates
    r.gathered_elements += n;
  };
  // Gradient bucket buffers: alive from their first grads() to their reduction's completion.
  std::vector<bool> alive(nb, false), reduced(nb, false);
  int in_flight = -1;
  int64_t grads_alive = 0;
  auto allocate = [&](int j) {
    if (alive[j]) return;
    alive[j] = true;
    grads_alive += l.buckets[j].padded;
    r.grads_transient_peak = std::max(r.grads_transient_peak, grads_alive);
  };
  auto complete = [&](int j) {
    alive[j] = false;
    grads_alive -= l.buckets[j].padded;
    if (in_flight == j) in_flight = -1;
  };
  r.reductions_of.assign(nb, 0);
  auto post = [&](int j) {
    allocate(j);
    reduced[j] = true;
    r.reductions_of[j] += 1;
    r.grad_reductions += l.buckets[j].padded > 0;
    r.grad_reduced_elements += l.buckets[j].padded;
  };

  for (int64_t mb = 0; mb < microbatches; ++mb) {
    std::fill(reduced.begin(), reduced.end(), false);
    for (const DpCall& c : calls) {
      if (c.kind == DpCall::BEGIN_MICROBATCH) {
        std::fill(reduced.begin(), reduced.end(), false);
        if (trace) trace->push_back({params_alive, grads_alive});
        continue;
      }
      const int u = c.unit, j = l.bucket_of.at(u);
      switch (c.kind) {
        case DpCall::ACQUIRE: {
          if (z < 3) break;
          const bool sweep_step = held == 0;
          if (!resident[u]) gather(u);
          ++refs[u];
          ++held;
          if (sweep_step)
            for (int v : prefetch_window(u, c.forward, U, prefetch, unit_chunk))
              if (!resident[v]) gather(v);
          break;
        }
        case DpCall::RELEASE:
          if (z < 3) break;
          if (refs[u] == 0) fail("release without acquire of unit " + std::to_string(u));
          --held;
          if (--refs[u] == 0) {
            resident[u] = false;
            params_alive -= l.buckets[j].padded;
          }
          break;
        case DpCall::GRADS:
          if (reduced[j]) fail("grads of unit " + std::to_string(u) + " after its reduction");
          allocate(j);
          break;
        case DpCall::BEGIN_MICROBATCH:
          break;
        case DpCall::BACKWARD_DONE:
          if (l.buckets[j].unit_lo != u) break;
          if (deferred[j]) {  // reduced at finish; the chunk's sweep still ends here
            if (overlap && in_flight >= 0 && u == chunk_first_unit(unit_chunk, u))
              complete(in_flight);
            break;
          }
          if (!overlap) {
            post(j);
            complete(j);
          } else {
            if (in_flight >= 0) complete(in_flight);
            post(j);
            in_flight = j;
            if (u == chunk_first_unit(unit_chunk, u)) complete(j);
          }
          break;
      }
      if (trace) trace->push_back({params_alive, grads_alive});
    }
    if (held) fail("a microbatch ends with parameters still acquired");
  }
  // finish_gradients completes the reduction in flight, then reduces what was written but
  // never declared done (or deferred).
  if (in_flight >= 0) complete(in_flight);
  for (int j = 0; j < nb; ++j)
    if (alive[j]) {
      post(j);
      complete(j);
    }
  return r;
}

// ---- data parallelism of one flat vector -----------------------------------------------------
DataParallelPlan data_parallel_plan(const std::vector<int64_t>& unit_begin,
                                    std::vector<DpCall> calls, int z, int dp,
                                    const PlanOptions& o, int64_t microbatches,
                                    const std::vector<int>& unit_chunk,
                                    const std::vector<int>& deferred_units,
                                    const OffloadConfig& offload) {
  DataParallelPlan d;
  const int64_t psi = unit_begin.back();
  d.layout = make_bucket_layout(unit_begin, o.ddp_bucket_size, dp, z == 3, unit_chunk);
  d.microbatch = std::move(calls);
  d.sim = simulate_zero_step(d.layout, d.microbatch, z, o.overlap_grad_reduce,
                             o.zero3_prefetch_layers, microbatches, unit_chunk, deferred_units,
                             &d.trace);
  const int64_t full = z == 0 ? psi : d.layout.padded_total, shard = d.layout.shard_numel;
  d.state_numel = z == 0 ? psi : shard;
  d.params_resident = z == 3 ? shard : full;
  d.grads_resident = z >= 2 ? shard : full;
  // CPU offload (parallel/offload.h): the host buckets' H state elements on the host; at
  // ZeRO-2/3 their gradient too (the device shard holds the rest), landing in one host slice
  d.host_numel = host_buckets_elements(d.layout, z, offload.host_fraction());
  d.copies = offload_copies(d.layout, z, d.host_numel);
  for (const OffloadCopy& c : d.copies)
    if (z >= 2) d.host_landing = std::max(d.host_landing, c.count);
  if (z >= 2) d.grads_resident -= d.host_numel;
  d.params_on_host = offload.params && z == 3;
  if (d.params_on_host) d.params_resident = 0;  // the gathers start from the host shard
  return d;
}

void offload_comm(std::vector<CommPlanEntry>& comm, const DataParallelPlan& d, int dp, int e) {
  int64_t elements = 0, down_calls = 0, down_elements = 0;
  const bool every_reduction = !d.sim.reductions_of.empty();  // ZeRO-2/3
  for (const OffloadCopy& c : d.copies) {
    elements += c.count;
    const int64_t k = every_reduction ? d.sim.reductions_of.at(c.bucket) : 1;
    down_calls += k, down_elements += k * c.count;
  }
  const int64_t calls = (int64_t)d.copies.size();
  add_comm(comm, CommGroup::PCIE, CommOp::DEVICE_TO_HOST, 1, down_calls, down_elements * e);
  if (!d.params_on_host)
    add_comm(comm, CommGroup::PCIE, CommOp::HOST_TO_DEVICE, 1, calls, elements * e);
  else  // every gather: the rank's slice, padded / dp of the unit
    add_comm(comm, CommGroup::PCIE, CommOp::HOST_TO_DEVICE, 1, d.sim.gathers,
             d.sim.gathered_elements / dp * e);
}

void fill_model_states(MemoryPlan& mem, const DataParallelPlan& d, const TrainConfig& t,
                       const DataParallelPlan* experts) {
  const int act = storage_bytes(t);
  // Adam's m and v: 4 + 4, or 2 for each stored in bf16 (--exp-avg-dtype, --exp-avg-sq-dtype
  // bf16: DeepSeek-V3 §3.3.3 keeps both in bf16, 2 + 2 + 8 = 12 bytes where mixed precision
  // takes 16)
  const int param_b = act, grad_b = act, master_b = t.half() ? 4 : 0;
  const int optim_b = t.exp_avg_bytes() + t.exp_avg_sq_bytes();
  int64_t params_peak = d.sim.params_transient_peak, grads_peak = d.sim.grads_transient_peak;
  int64_t params = d.params_resident, grads = d.grads_resident, states = d.state_numel;
  int64_t host = d.host_numel;  // CPU offload: of the states, on the host
  int64_t landing = d.host_landing;
  if (experts) {
    // the two mirror each other's calls: their transient buffers peak together, call by call
    params += experts->params_resident;
    grads += experts->grads_resident;
    states += experts->state_numel;
    host += experts->host_numel;
    landing += experts->host_landing;
    params_peak = std::max(params_peak, experts->sim.params_transient_peak);
    grads_peak = std::max(grads_peak, experts->sim.grads_transient_peak);
    for (size_t k = 0; k < d.trace.size() && k < experts->trace.size(); ++k) {
      params_peak = std::max(params_peak, d.trace[k][0] + experts->trace[k][0]);
      grads_peak = std::max(grads_peak, d.trace[k][1] + experts->trace[k][1]);
    }
  }
  mem.params = (params + params_peak) * param_b;
  mem.grads = (grads + grads_peak) * grad_b;
  mem.master_params = (states - host) * master_b;
  mem.optimizer_states = (states - host) * optim_b;
  mem.resident_params = params * param_b;
  mem.resident_grads = grads * grad_b;
  // the host column: each offloaded element's gradient and parameter copies, master, m, v
  mem.host = HostMemoryPlan{host * param_b, (host + landing) * grad_b, host * master_b,
                            host * optim_b};
}

std::vector<CommPlanEntry> data_parallel_comm(const DataParallelPlan& d, int z, int dp,
                                              int grad_b, int param_b, CommGroup group) {
  std::vector<CommPlanEntry> out;
  auto add = [&](CommOp op, int64_t calls, int64_t payload) {
    if (calls > 0)
      out.push_back({group, op, calls, payload, bus_factor(op, dp) * (double)payload});
  };
  if (dp == 1) return out;
  const BucketLayout& l = d.layout;
  int64_t nb = 0;  // buckets that communicate: empty ones (the expert vector's) do not
  for (const Bucket& b : l.buckets) nb += b.numel() > 0;
  // one all-gather of bucket j: its padded elements, or with --fp8-param-gather and FP8
  // weights in it dp messages of M_j bytes (plan/fp8.h)
  auto gathered_bytes = [&](size_t j) {
    const int64_t m = d.fp8_message.empty() ? 0 : d.fp8_message[j];
    return m > 0 ? dp * m : l.buckets[j].padded * param_b;
  };
  int64_t step_gather = 0;  // ZeRO-1/2: every bucket once
  for (size_t j = 0; j < l.buckets.size(); ++j)
    if (l.buckets[j].numel() > 0) step_gather += gathered_bytes(j);
  switch (z) {
    case 0:
      add(CommOp::ALL_REDUCE, nb, l.total * grad_b);
      break;
    case 1:
      add(CommOp::REDUCE_SCATTER, nb, l.padded_total * grad_b);
      add(CommOp::ALL_GATHER, nb, step_gather);
      break;
    case 2:  // nb k without pipelining; a pipeline's accumulated or deferred buckets fewer
      add(CommOp::REDUCE_SCATTER, d.sim.grad_reductions, d.sim.grad_reduced_elements * grad_b);
      add(CommOp::ALL_GATHER, nb, step_gather);
      break;
    case 3: {
      add(CommOp::REDUCE_SCATTER, d.sim.grad_reductions, d.sim.grad_reduced_elements * grad_b);
      int64_t bytes = 0;  // each unit's gathers (an empty unit's never communicate: padded 0)
      for (size_t u = 0; u < d.sim.gathers_of.size(); ++u)
        bytes += d.sim.gathers_of[u] * gathered_bytes(l.bucket_of[u]);
      add(CommOp::ALL_GATHER, d.sim.gathers, bytes);
      break;
    }
  }
  if (z >= 1) add(CommOp::ALL_REDUCE, 1, 4);  // the gradient norm
  return out;
}

}  // namespace paralab

namespace paralab {

// The expert bias's update (model/transformer.cpp update_expert_bias): one all-reduce per
// step over dp (dp x cp under context parallelism: the cp ranks routed parts of the same
// sequences) of E int32 counts per MoE layer the rank holds, merged into that group's
// all-reduce row (calls and payload add).
void expert_bias_comm(std::vector<CommPlanEntry>& comm, const ModelConfig& m, int dp,
                      int moe_layers_here) {
  const int cp = m.context_parallel.size, n = dp * cp;
  const CommGroup group = cp > 1 ? CommGroup::DP_CP : CommGroup::DP;
  if (!m.moe.enabled() || !m.moe.expert_bias || n <= 1 || moe_layers_here == 0) return;
  const int64_t payload = 4 * (int64_t)m.moe.num_experts * moe_layers_here;
  for (CommPlanEntry& e : comm)
    if (e.group == group && e.op == CommOp::ALL_REDUCE) {
      e.calls += 1;
      e.payload_bytes += payload;
      e.bus_bytes += bus_factor(CommOp::ALL_REDUCE, n) * (double)payload;
      return;
    }
  comm.push_back({group, CommOp::ALL_REDUCE, 1, payload,
                  bus_factor(CommOp::ALL_REDUCE, n) * (double)payload});
}

}  // namespace paralab
