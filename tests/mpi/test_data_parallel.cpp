// tests/mpi/test_data_parallel.cpp: DataParallel (DDP, ZeRO 1-3) under mpirun, held to the
// plan byte for byte (tests/mpi/run_mpi_tests.sh runs it at 1, 2 and 4 ranks).
//
// A synthetic model drives DataParallel through the exact calls the real model makes
// (parallel/zero_schedule.h), on the real parameter units of tiny gpt and llama configs
// whose units dp does not divide, so buckets get padded. Gradients are small multiples of
// 1/8 that depend on (rank, step, microbatch, call, element), parameters multiples of 1/4,
// the update p -= g / 2: every sum is exact in float, whatever order the ranks add in,
// so values are compared with ==. The same holds in bf16 (8 significant bits: multiples
// of 2^-q are exact up to 2^(8-q)): a summed gradient is at most 4 ranks x 3 microbatches
// x 2 writes x 1/2 = 12, i.e. 96 eighths < 256, and a parameter after two steps at most
// 5/4 + 12 in sixteenths, 212 < 256; every partial sum too, in any order. So the --bf16
// cases compare with == as well, and Bf16RoundsOnLoad checks the rounding separately.
// Per step it checks:
//   - every acquired unit holds the expected current parameters (gathers, prefetches,
//     --overlap-param-gather waits);
//   - gather_grads() = the sum over ranks and microbatches; grad_sum_squares() = its
//     exact sum of squares; owned segments cover every element exactly once over dp;
//   - after the update on owned segments and after_optimizer_step(), gather_params() on
//     every rank = the expected full parameters;
//   - the Ledger's per-category peaks and the CommStats of the step (every group and
//     operation) equal plan/'s prediction exactly.
// Every rank runs every case in the same order and checks use EXPECT, never ASSERT, so no
// rank skips a collective; rank 0 prints GoogleTest's report, others only their failures.
#include <gtest/gtest.h>
#include <cstdio>
#include <string>
#include <vector>
#include "measure/ledger.h"
#include "plan/plan.h"
#include "kernels/math.h"  // to_float, to_bf16: reading and writing bf16 buffers
#include "model/param_table.h"
#include "parallel/data_parallel.h"
#include "parallel/topology.h"
#include "parallel/zero_schedule.h"

using namespace paralab;
using kernels::Device;

namespace {

Topology* g_topo = nullptr;

ModelConfig tiny_gpt() {  // units 108, 510, 510, 12: fused loss writes grads(0) in forward
  ModelConfig m;
  m.arch = Arch::GPT;
  m.num_layers = 2;
  m.hidden_size = 6;
  m.num_attention_heads = 2;
  m.seq_length = 5;
  m.vocab_size = 13;
  return m;
}

ModelConfig tiny_llama() {  // untied head, unfused loss: head gradients in backward only
  ModelConfig m = tiny_gpt();
  m.arch = Arch::LLAMA;
  m.num_layers = 3;
  m.num_query_groups = 1;
  m.ffn_hidden_size = 7;
  m.fused_cross_entropy = false;
  return m;
}

float grad_value(int rank, int step, int mb, int call, int64_t e) {
  return float((rank * 7 + step * 5 + mb * 3 + call * 2 + e) % 9 - 4) * 0.125f;
}
float initial_param(int64_t e) { return float((e * 5) % 11 - 5) * 0.25f; }
constexpr float kLr = 0.5f;

struct Case {
  ModelConfig model;
  int stage = 0;
  bool overlap = false;  // --overlap-grad-reduce, and --overlap-param-gather at stages 1-2
  int64_t bucket = 0;
  int prefetch = 1;
  int microbatches = 1;
  bool null_comm = false;  // DataParallel(…, nullptr, …) instead of a dp group of 1
  bool bf16 = false;       // bf16 storage and communication
  std::string name() const {
    return std::string(model.is_gpt() ? "gpt" : "llama") + (bf16 ? " bf16" : "") +
           " stage " + std::to_string(stage) +
           (overlap ? " overlap" : "") + " bucket " + std::to_string(bucket) + " prefetch " +
           std::to_string(prefetch) + " k " + std::to_string(microbatches) +
           (null_comm ? " (no communicator)" : "");
  }
};

void expect_comm_equals_plan(const CommStats& measured, const Plan& plan) {
  for (int g = 0; g < kNumCommGroups; ++g)
    for (int op = 0; op < kNumCommOps; ++op) {
      CommPlanEntry want;
      for (const CommPlanEntry& e : plan.comm)
        if (e.group == CommGroup(g) && e.op == CommOp(op)) want = e;
      const CommRecord& got = measured.get(CommGroup(g), CommOp(op));
      const std::string what = std::string(group_name(CommGroup(g))) + " " + op_name(CommOp(op));
      EXPECT_EQ(got.calls, (uint64_t)want.calls) << what;
      EXPECT_EQ(got.payload_bytes, (uint64_t)want.payload_bytes) << what;
      EXPECT_DOUBLE_EQ(got.bus_bytes, want.bus_bytes) << what;
    }
}

// Element e of a DataParallel buffer of float or bf16 elements, as a float.
float load(const void* p, int64_t e, bool bf16) {
  if (bf16) return kernels::to_float(static_cast<const kernels::bf16*>(p)[e]);
  return static_cast<const float*>(p)[e];
}
// p[e] = v, rounded to the storage type.
void store(void* p, int64_t e, float v, bool bf16) {
  if (bf16)
    static_cast<kernels::bf16*>(p)[e] = kernels::to_bf16(v);
  else
    static_cast<float*>(p)[e] = v;
}

void run_case(const Case& c) {
  SCOPED_TRACE(c.name());
  Communicator& dpg = g_topo->dp();
  const int dp = dpg.size(), rank = dpg.rank();
  const ModelConfig& m = c.model;
  const std::vector<int64_t> units = param_units(m);
  const int64_t psi = units.back();
  const std::vector<DpCall> calls = microbatch_calls(m.num_layers, m.tied_embeddings(),
                                                     m.fused_cross_entropy);

  DataParallelOptions o;
  o.storage = (c.bf16) ? paralab::DType::BF16 : paralab::DType::F32;
  o.zero_stage = c.stage;
  o.overlap_grad_reduce = c.overlap;
  o.overlap_param_gather = c.overlap && (c.stage == 1 || c.stage == 2);
  o.bucket_size = c.bucket;
  o.prefetch_units = c.prefetch;
  PlanOptions po;
  po.overlap_grad_reduce = o.overlap_grad_reduce;
  po.overlap_param_gather = o.overlap_param_gather;
  po.ddp_bucket_size = c.bucket;
  po.zero3_prefetch_layers = c.prefetch;
  ParallelConfig pc;
  pc.world_size = g_topo->layout().world();
  pc.zero_stage = c.stage;
  TrainConfig tc;
  tc.micro_batch_size = 1;
  tc.global_batch_size = c.microbatches * dp;
  tc.bf16 = c.bf16;
  const int es = c.bf16 ? 2 : 4;
  const Plan plan = make_plan(m, tc, pc, po);
  const MemoryPlan& want = plan.ranks.at(g_topo->rank()).memory;

  DataParallel d(units, c.null_comm ? nullptr : &dpg, o, Device::CPU);
  EXPECT_EQ(d.num_units(), (int)units.size() - 1);
  EXPECT_EQ(d.dp_size(), dp);
  EXPECT_EQ(d.state_numel(), plan.data_parallel.state_numel);
  EXPECT_EQ(d.layout().padded_total, plan.data_parallel.layout.padded_total);
  // Adam's m and v, and with bf16 the fp32 master weights, as the optimizer holds them.
  Buffer<float> adam(Device::CPU, 2 * d.state_numel(), Category::OPTIMIZER_STATES);
  Buffer<float> master(Device::CPU, c.bf16 ? d.state_numel() : 0, Category::MASTER_PARAMS);

  std::vector<float> params(psi);
  for (int64_t e = 0; e < psi; ++e) params[e] = initial_param(e);
  d.load_params(params);
  // before_grad_reduce (the model's tp sum): once per unit each time its bucket is handed to
  // the dp reduction, every microbatch at ZeRO 2-3, once a step at 0-1, on exactly the rank's
  // own gradients of the unit since the last hand-over (fp32: the same float sums)
  std::vector<float> mine(psi, 0.0f);
  std::vector<int> handed(units.size() - 1, 0);
  int64_t not_mine = 0;
  d.before_grad_reduce([&](int u, void* g) {
    ++handed[u];
    for (int64_t e = 0; e < units[u + 1] - units[u]; ++e) {
      not_mine += !c.bf16 && load(g, e, false) != mine[units[u] + e];
      mine[units[u] + e] = 0.0f;
    }
  });

  const int steps = 2;
  for (int step = 0; step < steps; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    Ledger::instance().reset_peaks();
    CommStats::instance().reset();
    d.zero_grads();
    std::vector<float> sum(psi, 0.0f);  // the expected gradient, summed over dp
    int64_t stale = 0, first_stale = -1;
    for (int mb = 0; mb < c.microbatches; ++mb) {
      d.begin_microbatch(mb == c.microbatches - 1);
      for (size_t i = 0; i < calls.size(); ++i) {
        const DpCall& call = calls[i];
        const int u = call.unit;
        const int64_t lo = units[u], n = units[u + 1] - lo;
        switch (call.kind) {
          case DpCall::ACQUIRE: {
            const void* p = d.acquire_params(u, call.forward);
            for (int64_t e = 0; e < n; ++e)
              if (load(p, e, c.bf16) != params[lo + e] && stale++ == 0) first_stale = lo + e;
            break;
          }
          case DpCall::RELEASE: d.release_params(u); break;
          case DpCall::BEGIN_MICROBATCH: break;  // per-microbatch lists have none
          case DpCall::GRADS: {
            void* g = d.grads(u);
            for (int64_t e = 0; e < n; ++e) {
              store(g, e, load(g, e, c.bf16) + grad_value(rank, step, mb, (int)i, lo + e), c.bf16);
              mine[lo + e] += grad_value(rank, step, mb, (int)i, lo + e);
              for (int r = 0; r < dp; ++r) sum[lo + e] += grad_value(r, step, mb, (int)i, lo + e);
            }
            break;
          }
          case DpCall::BACKWARD_DONE: d.backward_done(u); break;
        }
      }
    }
    d.finish_gradients();
    EXPECT_EQ(stale, 0) << "acquired parameters differ, first at flat element " << first_stale;
    EXPECT_EQ(handed, std::vector<int>(handed.size(), c.stage >= 2 ? c.microbatches : 1));
    EXPECT_EQ(not_mine, 0) << "before_grad_reduce saw other gradients than the rank's own";
    EXPECT_EQ(mine, std::vector<float>(psi, 0.0f)) << "gradients never handed over";
    handed.assign(handed.size(), 0);
    const double ss = d.grad_sum_squares();

    // SGD on the owned segments; mark the optimizer state each one uses.
    float* state = adam.data();
    for (const OwnedSegment& s : d.owned_segments()) {
      EXPECT_LE(s.state_offset + s.count, d.state_numel());
      for (int64_t i = 0; i < s.count; ++i) {
        store(s.param, i, load(s.param, i, c.bf16) - kLr * load(s.grad, i, c.bf16), c.bf16);
        state[s.state_offset + i] += 1;
      }
    }
    d.after_optimizer_step();
    if (g_topo->layout().world() > 1) {  // the trainer's loss average and stop flag
      Buffer<float> loss(kernels::Device::CPU, 2, Category::COMM_BUFFERS);
      g_topo->world().all_reduce(loss.data(), 2);
    }

    // The step is over: its memory and communication against the plan.
    const Ledger& led = Ledger::instance();
    EXPECT_EQ((int64_t)led.peak(Category::PARAMS), want.params);
    EXPECT_EQ((int64_t)led.peak(Category::GRADS), want.grads);
    EXPECT_EQ((int64_t)led.peak(Category::MASTER_PARAMS), want.master_params);
    EXPECT_EQ((int64_t)led.peak(Category::OPTIMIZER_STATES), want.optimizer_states);
    EXPECT_EQ((int64_t)led.peak(Category::COMM_BUFFERS), want.comm_buffers);
    EXPECT_EQ((int64_t)led.current(Category::PARAMS), plan.data_parallel.params_resident * es);
    EXPECT_EQ((int64_t)led.current(Category::GRADS), plan.data_parallel.grads_resident * es);
    expect_comm_equals_plan(CommStats::instance(), plan);

    // Test-only views, after the window.
    double want_ss = 0;
    for (int64_t e = 0; e < psi; ++e) want_ss += double(sum[e]) * sum[e];
    EXPECT_NEAR(ss, want_ss, 1e-6 * want_ss);
    EXPECT_EQ(d.gather_grads(), sum);
    for (int64_t e = 0; e < psi; ++e) params[e] -= kLr * sum[e];
    // Every element is updated by exactly one rank (stage 0: by every rank, its own copy).
    std::vector<int> covered(psi, 0);
    for (const OwnedSegment& s : d.owned_segments())
      for (int64_t i = 0; i < s.count; ++i) covered[s.flat_begin + i] += 1;
    if (c.stage >= 1 && dp > 1) dpg.all_reduce(covered.data(), psi, ReduceOp::SUM, DType::I32);
    int64_t wrong = 0;
    for (int v : covered) wrong += v != 1;
    EXPECT_EQ(wrong, 0);
  }
  // The last step's all-gathers (maybe still in flight) land before gather_params returns.
  EXPECT_EQ(d.gather_params(), params);
  d.drain();
}

std::vector<Case> cases(int stage) {
  std::vector<Case> v;
  for (bool bf16 : {false, true})
    for (const ModelConfig& m : {tiny_gpt(), tiny_llama()})
      for (bool overlap : {false, true})
        for (int k : {1, 3}) {
          Case c;
          c.model = m;
          c.stage = stage;
          c.overlap = overlap;
          c.microbatches = k;
          c.bf16 = bf16;
          if (stage < 3) {
            for (int64_t bucket : {int64_t(0), int64_t(1), int64_t(600)}) {
              c.bucket = bucket;
              v.push_back(c);
            }
          } else {
            for (int prefetch : {0, 1, 2}) {
              c.prefetch = prefetch;
              v.push_back(c);
            }
          }
        }
  return v;
}

TEST(DataParallel, Stage0) { for (const Case& c : cases(0)) run_case(c); }
TEST(DataParallel, Stage1) { for (const Case& c : cases(1)) run_case(c); }
TEST(DataParallel, Stage2) { for (const Case& c : cases(2)) run_case(c); }
TEST(DataParallel, Stage3) { for (const Case& c : cases(3)) run_case(c); }

// A single rank without a communicator behaves as a dp group of 1 (memory = plan at dp 1).
TEST(DataParallel, NoCommunicator) {
  if (g_topo->dp().size() != 1) GTEST_SKIP() << "single-rank case";
  for (int z = 0; z <= 3; ++z) {
    Case c;
    c.model = tiny_gpt();
    c.stage = z;
    c.overlap = true;
    c.microbatches = 2;
    c.null_comm = true;
    for (bool bf16 : {false, true}) {
      c.bf16 = bf16;
      run_case(c);
    }
  }
}

// bf16: load_params rounds to nearest even, gather_params widens exactly, at every stage.
// Values 1 + i 2^-10 sit between bf16 neighbours 2^-7 apart, ties included.
TEST(DataParallel, Bf16RoundsOnLoad) {
  const std::vector<int64_t> units = param_units(tiny_llama());
  std::vector<float> full(units.back()), want(full.size());
  for (size_t e = 0; e < full.size(); ++e) {
    full[e] = (e % 2 ? -1.f : 1.f) * (1.0f + float(e % 64) * 0x1p-10f);
    want[e] = kernels::to_float(kernels::to_bf16(full[e]));
  }
  EXPECT_EQ(kernels::to_float(kernels::to_bf16(1.0f + 0x1p-8f)), 1.0f);  // tie: to even
  EXPECT_EQ(kernels::to_float(kernels::to_bf16(1.0f + 3 * 0x1p-8f)), 1.0f + 0x1p-6f);
  for (int z = 0; z <= 3; ++z) {
    SCOPED_TRACE("stage " + std::to_string(z));
    DataParallelOptions o;
    o.storage = (true) ? paralab::DType::BF16 : paralab::DType::F32;
    o.zero_stage = z;
    o.bucket_size = 600;
    DataParallel d(units, &g_topo->dp(), o, Device::CPU);
    d.load_params(full);
    EXPECT_EQ(d.gather_params(), want);
    d.drain();
  }
}

// API misuse: one clear exception, no communication (a private single-rank instance).
TEST(DataParallel, Misuse) {
  const std::vector<int64_t> units = param_units(tiny_gpt());
  for (int z = 0; z <= 3; ++z) {
    DataParallelOptions o;
    o.zero_stage = z;
    o.overlap_grad_reduce = true;  // stages 0-1 then post a bucket at its backward_done
    o.bucket_size = 1;             // one unit per bucket
    DataParallel d(units, nullptr, o, Device::CPU);
    EXPECT_THROW(d.release_params(1), std::runtime_error);
    EXPECT_THROW(d.acquire_params(7, true), std::runtime_error);
    d.zero_grads();
    d.begin_microbatch(true);
    d.acquire_params(1, true);
    EXPECT_THROW(d.begin_microbatch(true), std::runtime_error);  // unit 1 still held
    d.release_params(1);
    d.grads(3);
    d.backward_done(3);
    EXPECT_THROW(d.grads(3), std::runtime_error);  // its bucket is already being reduced
    // A bucket written but not reduced keeps accumulating into the next microbatch (a
    // pipeline's forwards write the fused head's gradient before its backward);
    // finish_gradients reduces it.
    d.grads(1);
    d.begin_microbatch(false);
    d.finish_gradients();
    EXPECT_THROW(d.load_params(std::vector<float>(3)), std::runtime_error);
  }
}

// On ranks other than 0: print failed assertions only, prefixed with the rank.
class FailurePrinter : public testing::EmptyTestEventListener {
 public:
  explicit FailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const testing::TestPartResult& r) override {
    if (r.failed())
      std::fprintf(stderr, "rank %d: %s:%d: %s\n", rank_, r.file_name() ? r.file_name() : "?",
                   r.line_number(), r.summary());
  }

 private:
  int rank_;
};

}  // namespace

int main(int argc, char** argv) {
  const World w = init_world(argc, argv);
  testing::InitGoogleTest(&argc, argv);
  if (w.rank != 0) {
    testing::TestEventListeners& l = testing::UnitTest::GetInstance()->listeners();
    delete l.Release(l.default_result_printer());
    l.Append(new FailurePrinter(w.rank));
  }
  int failed = 0;
  run_main([&] {
    GridSpec s;
    s.world = w.size;
    Topology topo(s, CommBackend::MPI, Device::CPU);
    g_topo = &topo;
    failed = RUN_ALL_TESTS() != 0;
    topo.world().all_reduce(&failed, 1, ReduceOp::MAX, DType::I32);
    g_topo = nullptr;
    return 0;
  });
  if (w.rank == 0)
    std::printf("test_data_parallel: %d ranks: %s\n", w.size, failed ? "FAILED" : "passed");
  finalize_world();
  return failed;
}
