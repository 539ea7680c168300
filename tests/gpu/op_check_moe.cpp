// tests/gpu/op_check_moe.cpp: op_check's rows for the mixture-of-experts ops, grouped GEMM and
// RoPE alone (see op_check.cpp for the metric and the bounds):
//   check_moe_router()  fp32 only (the router is fp32 whatever the storage): top-k in its four
//                       forms (experts must match exactly: 0 mismatches; gates elementwise),
//                       its backward, the balancing scores, the weighted sum and z loss (double
//                       sums: 1e-9 relative), their backward;
//   check_moe<T>()      per storage type: grouped GEMM (reduction bound) and grouped == the
//                       per-group gemm calls on CUDA, permute / unpermute (fused and unfused;
//                       copies and fixed-order fp32 sums: 0 mismatches, and unfused == fused
//                       bit for bit on the GPU), the gated activations with their fp32 dgates,
//                       the shared gate, RoPE at the whole sequence's and at a cp rank's
//                       positions (and split(theta 0) + rope == split(theta) on CUDA).
//   check_moe_dispatch() the dispatch's counting sort pass by pass (integer maps: bound 0), the
//                       allgather dispatcher's local maps, the expert bias's update.
// main (op_check.cpp) calls check_moe_router(), check_moe_dispatch(), check_moe<float>() and
// check_moe<bf16>().
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "tests/gpu/op_check.h"  // defines: Twin, written, Precision, err, worst, check, ...

namespace op_check {

void check_moe_router();
void check_moe_dispatch();
template <typename T>
void check_moe();

namespace {

double rel_diff(double a, double b) { return std::fabs(a - b) / std::max(std::fabs(b), 1e-30); }

// Permuted layout of N tokens' k pairs: kept pairs in a fixed shuffle, padding rows, every
// `drop`-th pair dropped. row_pair (M), slots (N k).
struct Routing {
  std::vector<int> row_pair, slots;
  int M = 0;
};
Routing make_routing(int N, int k, int padding, int drop) {
  Routing r;
  std::vector<int> kept;
  for (int p = 0; p < N * k; p++)
    if (drop == 0 || p % drop != drop - 1) kept.push_back(p);
  r.M = (int)kept.size() + padding;
  r.row_pair.assign(r.M, -1);
  r.slots.assign(N * k, -1);
  std::vector<int> rows(r.M);
  for (int j = 0; j < r.M; j++) rows[j] = j;
  std::shuffle(rows.begin(), rows.end(), rng);
  for (size_t i = 0; i < kept.size(); i++) {
    r.row_pair[rows[i]] = kept[i];
    r.slots[kept[i]] = rows[i];
  }
  return r;
}

}  // namespace

void check_moe_router() {
  const int N = 301, E = 64;
  Twin<float> logits(random_floats((size_t)N * E, -3.0f, 3.0f)),
      bias(random_floats(E, -0.2f, 0.2f));
  struct Case {
    const char* name;
    int k, score;
    bool pre;
    float scaling;
    bool bias;
  };
  const Case cases[] = {{"softmax k=2", 2, 0, false, 0.0f, false},
                        {"pre_softmax k=4 scaled", 4, 0, true, 2.5f, false},
                        {"sigmoid k=1 scaled", 1, 1, false, 1.5f, false},
                        {"sigmoid k=8 bias", 8, 1, false, 0.0f, true}};
  for (const Case& c : cases) {
    const size_t nk = (size_t)N * c.k;
    std::unique_ptr<Twin<float>> gates(written(nk));
    Twin<int> experts(std::vector<int>(nk, -1), std::vector<int>(nk, -2));
    const float* bias_c = c.bias ? bias.c() : nullptr;
    const float* bias_g = c.bias ? bias.g() : nullptr;
    check(std::string("moe_router_topk experts ") + c.name, 0.0, [&] {
      kernels::moe_router_topk(Device::CPU, gates->c(), experts.c(), logits.c(), bias_c, N, E, c.k,
                               c.score, c.pre, c.scaling);
      kernels::moe_router_topk(Device::CUDA, gates->g(), experts.g(), logits.g(), bias_g, N, E, c.k,
                               c.score, c.pre, c.scaling);
      return mismatches(experts);
    });
    check(std::string("moe_router_topk gates ") + c.name, Precision<float>::elementwise,
          [&] { return err(*gates); });
    // The backward from the CPU's picks on both sides (a GPU pick that differed fails above).
    Twin<int> picks(experts.cpu);
    Twin<float> dgates(random_floats(nk));
    check(std::string("moe_router_topk_backward ") + c.name, Precision<float>::elementwise, [&] {
      std::unique_ptr<Twin<float>> dl(written((size_t)N * E));
      kernels::moe_router_topk_backward(Device::CPU, dl->c(), dgates.c(), logits.c(), picks.c(), N,
                                        E, c.k, c.score, c.pre, c.scaling);
      kernels::moe_router_topk_backward(Device::CUDA, dl->g(), dgates.g(), logits.g(), picks.g(), N,
                                        E, c.k, c.score, c.pre, c.scaling);
      return err(*dl);
    });
  }
  Twin<float> dscores(random_floats((size_t)N * E));
  for (int score : {0, 1}) {
    const std::string tag = score ? " sigmoid" : " softmax";
    check("moe_balancing_scores" + tag, Precision<float>::elementwise, [&] {
      std::unique_ptr<Twin<float>> s(written((size_t)N * E));
      kernels::moe_balancing_scores(Device::CPU, s->c(), logits.c(), N, E, score);
      kernels::moe_balancing_scores(Device::CUDA, s->g(), logits.g(), N, E, score);
      return err(*s);
    });
    check("moe_balancing_scores_backward (+=)" + tag, Precision<float>::elementwise, [&] {
      Twin<float> dl(random_floats((size_t)N * E));
      kernels::moe_balancing_scores_backward(Device::CPU, dl.c(), dscores.c(), logits.c(), N, E,
                                             score);
      kernels::moe_balancing_scores_backward(Device::CUDA, dl.g(), dscores.g(), logits.g(), N, E,
                                             score);
      return err(dl);
    });
  }
  const int S = 43;  // N = 301 = 7 sequences of 43
  Twin<int> aux_counts(random_ints((size_t)(N / S) * E, 0, 40));
  for (int group : {N, S}) {
    const std::string tag = group == N ? " (aux)" : " (seq aux)";
    check("moe_weighted_sum" + tag, 1e-9, [&] {
      return rel_diff(kernels::moe_weighted_sum(Device::CUDA, dscores.g(), aux_counts.g(),
                                                3.7e-4, N, E, group),
                      kernels::moe_weighted_sum(Device::CPU, dscores.c(), aux_counts.c(),
                                                3.7e-4, N, E, group));
    });
    check("moe_weighted_sum_backward" + tag, 0.0, [&] {
      std::unique_ptr<Twin<float>> g(written((size_t)N * E));
      kernels::moe_weighted_sum_backward(Device::CPU, g->c(), aux_counts.c(), 3.7e-4, 0.125f, N,
                                         E, group);
      kernels::moe_weighted_sum_backward(Device::CUDA, g->g(), aux_counts.g(), 3.7e-4, 0.125f,
                                         N, E, group);
      return mismatches(*g);
    });
  }
  check("moe_z_loss_sum", Precision<float>::elementwise, [&] {
    return rel_diff(kernels::moe_z_loss_sum(Device::CUDA, logits.g(), N, E),
                    kernels::moe_z_loss_sum(Device::CPU, logits.c(), N, E));
  });
  check("moe_z_loss_backward (+=)", Precision<float>::elementwise, [&] {
    Twin<float> dl(random_floats((size_t)N * E));
    kernels::moe_z_loss_backward(Device::CPU, dl.c(), logits.c(), N, E, 1e-3f);
    kernels::moe_z_loss_backward(Device::CUDA, dl.g(), logits.g(), N, E, 1e-3f);
    return err(dl);
  });
}

// The dispatch's counting sort (kernels/ops/moe_dispatch.h), pass by pass, each pass fed the
// CPU twin's previous output on both sides (so a row names the pass that differs): integer
// maps, bound 0. Routings: dropless, capacity by position and by gate (gates from 8 values:
// ties inside an expert), padded; E 128 with most experts empty; odd N; and a scan over more
// experts than its block.
void check_moe_dispatch() {
  struct Case {
    const char* name;
    int N, k, E, used, capacity, padded;
    bool probs;
  };
  const Case cases[] = {{"dropless N 4097 k 8 E 128 (40 used)", 4097, 8, 128, 40, -1, -1, false},
                        {"position C 200 E 64", 1531, 4, 64, 64, 200, -1, false},
                        {"probs C 60 E 64", 1531, 4, 64, 64, 60, -1, true},
                        {"probs C 300 padded E 128 (40 used)", 999, 8, 128, 40, 300, 300, true},
                        {"position C 3 padded E 2 N 1", 1, 1, 2, 2, 3, 1, false}};
  for (const Case& c : cases) {
    const int P = c.N * c.k, E = c.E;
    std::vector<int> ex((size_t)P);
    std::vector<float> gv((size_t)P);
    for (int t = 0; t < c.N; t++)  // k distinct experts per token, skewed to the low ones
      for (int s = 0; s < c.k; s++) {
        int e;
        bool taken;
        do {
          e = (int)(rng() % c.used) * (int)(rng() % c.used) / c.used;
          taken = false;
          for (int j = 0; j < s; j++) taken = taken || ex[(size_t)t * c.k + j] == e;
        } while (taken);
        ex[(size_t)t * c.k + s] = e;
        gv[(size_t)t * c.k + s] = (float)(rng() % 8) / 8.0f;
      }
    Twin<int> experts(ex);
    Twin<float> gates(gv);
    const std::string tag = std::string(" ") + c.name;
    Twin<int> counts(std::vector<int>(E, -1), std::vector<int>(E, -2));
    check("moe_expert_counts" + tag, 0.0, [&] {
      kernels::moe_expert_counts(Device::CPU, counts.c(), experts.c(), c.N, c.k, E, c.N);
      kernels::moe_expert_counts(Device::CUDA, counts.g(), experts.g(), c.N, c.k, E, c.N);
      return mismatches(counts);
    });
    Twin<int> counts_in(counts.cpu);
    Twin<int> rows(std::vector<int>(E, -1), std::vector<int>(E, -2));
    Twin<int> offset(std::vector<int>(E + 1, -1), std::vector<int>(E + 1, -2));
    Twin<int> routed(random_ints(E, 0, 9)), kept(random_ints(E, 0, 9));
    check("moe_dispatch_offsets (statistics +=)" + tag, 0.0, [&] {
      kernels::moe_dispatch_offsets(Device::CPU, rows.c(), offset.c(), routed.c(), kept.c(),
                                    counts_in.c(), E, c.capacity, c.padded, true);
      kernels::moe_dispatch_offsets(Device::CUDA, rows.g(), offset.g(), routed.g(), kept.g(),
                                    counts_in.g(), E, c.capacity, c.padded, true);
      return mismatches(rows) + mismatches(offset) + mismatches(routed) + mismatches(kept);
    });
    Twin<int> rank(std::vector<int>(P, -1), std::vector<int>(P, -2));
    if (c.probs)
      check("moe_gate_rank" + tag, 0.0, [&] {
        kernels::moe_gate_rank(Device::CPU, rank.c(), experts.c(), gates.c(), c.N, c.k, E);
        kernels::moe_gate_rank(Device::CUDA, rank.g(), experts.g(), gates.g(), c.N, c.k, E);
        return mismatches(rank);
      });
    Twin<int> rank_in(rank.cpu), offset_in(offset.cpu);
    const int M = offset.cpu[E];
    Twin<int> row_pair(std::vector<int>(std::max(M, 1), -7), std::vector<int>(std::max(M, 1), -8));
    Twin<int> slots(std::vector<int>(P, -7), std::vector<int>(P, -8));
    check("moe_dispatch_scatter" + tag, 0.0, [&] {
      const int* rc = c.probs ? rank_in.c() : nullptr;
      const int* rg = c.probs ? rank_in.g() : nullptr;
      kernels::moe_dispatch_scatter(Device::CPU, row_pair.c(), slots.c(), experts.c(), rc,
                                    offset_in.c(), c.N, c.k, E, M, c.capacity);
      kernels::moe_dispatch_scatter(Device::CUDA, row_pair.g(), slots.g(), experts.g(), rg,
                                    offset_in.g(), c.N, c.k, E, M, c.capacity);
      return mismatches(row_pair) + mismatches(slots);
    });
    // the allgather dispatcher's local maps: two sources with this routing gathered, this
    // rank's experts the upper half
    const int L = E / 2, first = E - L, sources = 2, per_rank = E + P;
    std::vector<int> map((size_t)sources * per_rank);
    std::vector<int> first_row((size_t)sources * (L + 1)), local_base((size_t)sources * L);
    int R = 0;
    for (int j = 0; j < sources; ++j) {
      std::copy(rows.cpu.begin(), rows.cpu.end(), map.begin() + j * per_rank);
      std::copy(slots.cpu.begin(), slots.cpu.end(), map.begin() + j * per_rank + E);
      for (int e = 0; e <= L; ++e) first_row[(size_t)j * (L + 1) + e] = offset.cpu[first + e];
    }
    for (int e = 0; e < L; ++e)
      for (int j = 0; j < sources; ++j) {
        local_base[(size_t)j * L + e] = R;
        R += rows.cpu[first + e];
      }
    Twin<int> gathered(map);
    // R entries seeded differently on each side (each must be written), and one past them the
    // same on both, which neither twin may touch (with no local pair, R is 0: that one alone).
    std::vector<int> pair_cpu(R + 1, -7), pair_gpu(R + 1, -8);
    pair_cpu[R] = pair_gpu[R] = -9;
    Twin<int> source_pair(pair_cpu, pair_gpu);
    Twin<int> local_slots(std::vector<int>(sources * P, -7), std::vector<int>(sources * P, -8));
    check("moe_local_maps" + tag, 0.0, [&] {
      kernels::moe_local_maps(Device::CPU, source_pair.c(), local_slots.c(), gathered.c() + E,
                              per_rank, sources, P, L, first_row.data(), local_base.data(), R);
      kernels::moe_local_maps(Device::CUDA, source_pair.g(), local_slots.g(), gathered.g() + E,
                              per_rank, sources, P, L, first_row.data(), local_base.data(), R);
      return mismatches(source_pair) + mismatches(local_slots);
    });
  }
  check("moe_dispatch_offsets E 2500 (the scan's chunks)", 0.0, [&] {
    const int E = 2500;
    Twin<int> counts(random_ints(E, 0, 30));
    Twin<int> rows(std::vector<int>(E, -1), std::vector<int>(E, -2));
    Twin<int> offset(std::vector<int>(E + 1, -1), std::vector<int>(E + 1, -2));
    kernels::moe_dispatch_offsets(Device::CPU, rows.c(), offset.c(), nullptr, nullptr,
                                  counts.c(), E, 17, -1, false);
    kernels::moe_dispatch_offsets(Device::CUDA, rows.g(), offset.g(), nullptr, nullptr,
                                  counts.g(), E, 17, -1, false);
    return mismatches(rows) + mismatches(offset);
  });
  check("moe_expert_bias_update", 0.0, [&] {
    const int E = 160;
    Twin<float> bias(random_floats(E, -0.1f, 0.1f));
    Twin<int> counts(random_ints(E, 0, 50));
    kernels::moe_expert_bias_update(Device::CPU, bias.c(), counts.c(), E, 1e-3f);
    kernels::moe_expert_bias_update(Device::CUDA, bias.g(), counts.g(), E, 1e-3f);
    return mismatches(bias);
  });
}

// The grouped GEMM's cases that would have caught issue 27's misaligned address: every
// transpose pair, E groups of random row counts (zeros and odd counts among them) laid out as
// the experts' blocks are (row offsets: aligned when K and N are multiples of 8; with a
// transposed A, column offsets: odd, so cuBLAS's grouped call is not taken), a single group, a
// call whose every group is empty; against the CPU twin and against one CUDA gemm per group.
template <typename T>
void grouped_gemm_case(const std::string& name, bool ta, bool tb, int K, int Nn,
                       const std::vector<int>& rows_of) {
  using P = Precision<T>;
  std::vector<kernels::GemmGroup> groups;
  int rows = 0;
  for (size_t i = 0; i < rows_of.size(); i++) {
    kernels::GemmGroup g;
    g.m = rows_of[i];
    g.n = Nn;
    g.k = K;
    g.a_offset = ta ? rows : (long long)rows * K;
    g.b_offset = (long long)i * K * Nn;
    g.c_offset = (long long)rows * Nn;
    rows += g.m;
    groups.push_back(g);
  }
  const int lda = ta ? std::max(rows, 1) : K, ldb = tb ? K : Nn, ldc = Nn;
  const int count = (int)groups.size();
  Twin<T> A(random_values<T>((size_t)std::max(rows, 1) * K));
  Twin<T> B(random_values<T>(rows_of.size() * K * Nn));
  const std::vector<T> c0 = random_values<T>((size_t)std::max(rows, 1) * Nn);
  Twin<T> C(c0), C2(c0);
  const std::string tag = name + " " + (ta ? "T" : "N") + (tb ? "T" : "N") + P::tag;
  check("gemm_grouped " + tag, P::reduction, [&] {
    kernels::gemm_grouped(Device::CPU, ta, tb, 0.9f, A.c(), lda, B.c(), ldb, 0.5f, C.c(), ldc,
                          groups.data(), count);
    kernels::gemm_grouped(Device::CUDA, ta, tb, 0.9f, A.g(), lda, B.g(), ldb, 0.5f, C.g(), ldc,
                          groups.data(), count);
    kernels::synchronize(Device::CUDA);
    return err(C);
  });
  check("gemm_grouped vs per-group gemm (cuda) " + tag, P::reduction, [&] {
    for (const kernels::GemmGroup& g : groups)
      if (g.m > 0)
        kernels::gemm(Device::CUDA, ta, tb, g.m, g.n, g.k, 0.9f, A.g() + g.a_offset, lda,
                      B.g() + g.b_offset, ldb, 0.5f, C2.g() + g.c_offset, ldc);
    return rel_err(widen(C2.fetch()), widen(C.fetch()));
  });
}

template <typename T>
void grouped_gemm_cases() {
  std::vector<int> e128(128);
  for (int& r : e128) r = (int)(rng() % 10);  // 0-9 rows: empty experts and odd counts
  e128[0] = 0;
  e128[1] = 1;
  e128[2] = 7;
  for (int t = 0; t < 4; t++) {
    const bool ta = t & 1, tb = t & 2;
    grouped_gemm_case<T>("E 128", ta, tb, 64, 96, e128);
    grouped_gemm_case<T>("one group", ta, tb, 64, 96, {13});
    grouped_gemm_case<T>("every group empty", ta, tb, 64, 96, {0, 0, 0});
    grouped_gemm_case<T>("K 36 N 20 (unaligned)", ta, tb, 36, 20, {3, 0, 8, 5});
  }
}

void check_gemm_grouped_cases() {
  grouped_gemm_cases<float>();
  grouped_gemm_cases<bf16>();
}

template <typename T>
void check_moe() {
  using P = Precision<T>;
  const std::string tag = P::tag;

  // ---- grouped GEMM: experts' token blocks, one empty, against cuBLAS's per-group gemm too
  for (int t = 0; t < 4; t++)
    grouped_gemm_case<T>("experts", t & 1, t & 2, 96, 80, {37, 0, 128, 5, 64});

  // ---- permute / unpermute
  const int N = 257, C = 96, k = 4;
  const Routing r = make_routing(N, k, 37, 7);
  Twin<int> row_pair(r.row_pair), slots(r.slots);
  Twin<T> x(random_values<T>((size_t)N * C)), y(random_values<T>((size_t)r.M * C));
  Twin<float> gates(random_floats((size_t)N * k));
  for (bool fused : {true, false}) {
    const std::string f = fused ? " fused" : " unfused";
    check("moe_permute" + f + tag, 0.0, [&] {
      std::unique_ptr<Twin<T>> out(written<T>((size_t)r.M * C));
      std::unique_ptr<Twin<float>> og(written(r.M));
      kernels::moe_permute(Device::CPU, out->c(), og->c(), x.c(), gates.c(), row_pair.c(), r.M, C,
                           k, fused);
      kernels::moe_permute(Device::CUDA, out->g(), og->g(), x.g(), gates.g(), row_pair.g(), r.M, C,
                           k, fused);
      return mismatches(*out) + mismatches(*og);
    });
    check("moe_unpermute" + f + tag, 0.0, [&] {
      std::unique_ptr<Twin<T>> out(written<T>((size_t)N * C));
      kernels::moe_unpermute(Device::CPU, out->c(), y.c(), slots.c(), N, C, k, fused);
      kernels::moe_unpermute(Device::CUDA, out->g(), y.g(), slots.g(), N, C, k, fused);
      return mismatches(*out);
    });
  }
  check("moe_unpermute unfused == fused (cuda)" + tag, 0.0, [&] {
    std::unique_ptr<Twin<T>> a(written<T>((size_t)N * C)), b(written<T>((size_t)N * C));
    kernels::moe_unpermute(Device::CUDA, a->g(), y.g(), slots.g(), N, C, k, true);
    kernels::moe_unpermute(Device::CUDA, b->g(), y.g(), slots.g(), N, C, k, false);
    a->cpu = b->fetch();
    return mismatches(*a);
  });
  if constexpr (std::is_same<T, float>::value) {
    check("moe_unpermute_gates", 0.0, [&] {
      Twin<float> dperm(random_floats(r.M));
      std::unique_ptr<Twin<float>> dg(written((size_t)N * k));
      kernels::moe_unpermute_gates(Device::CPU, dg->c(), dperm.c(), slots.c(), N * k);
      kernels::moe_unpermute_gates(Device::CUDA, dg->g(), dperm.g(), slots.g(), N * k);
      return mismatches(*dg);
    });
  }

  // ---- gated expert activations (F > the block size: threads loop over the row)
  const int M = 173, F = 300;
  Twin<float> eg(random_floats(M, 0.0f, 1.0f));
  Twin<T> dout(random_values<T>((size_t)M * F));
  for (bool swiglu : {true, false}) {
    const std::string act = swiglu ? "moe_swiglu" : "moe_gelu";
    const int W = swiglu ? 2 * F : F;
    Twin<T> in(random_values<T>((size_t)M * W, -3.0f, 3.0f));
    check(act + "_forward" + tag, P::elementwise, [&] {
      std::unique_ptr<Twin<T>> out(written<T>((size_t)M * F));
      if (swiglu) {
        kernels::moe_swiglu_forward(Device::CPU, out->c(), in.c(), eg.c(), M, F);
        kernels::moe_swiglu_forward(Device::CUDA, out->g(), in.g(), eg.g(), M, F);
      } else {
        kernels::moe_gelu_forward(Device::CPU, out->c(), in.c(), eg.c(), M, F);
        kernels::moe_gelu_forward(Device::CUDA, out->g(), in.g(), eg.g(), M, F);
      }
      return err(*out);
    });
    check(act + "_backward (din, dgates)" + tag, P::reduction, [&] {
      std::unique_ptr<Twin<T>> din(written<T>((size_t)M * W));
      std::unique_ptr<Twin<float>> dg(written(M));
      if (swiglu) {
        kernels::moe_swiglu_backward(Device::CPU, din->c(), dg->c(), dout.c(), in.c(), eg.c(), M,
                                     F);
        kernels::moe_swiglu_backward(Device::CUDA, din->g(), dg->g(), dout.g(), in.g(), eg.g(), M,
                                     F);
      } else {
        kernels::moe_gelu_backward(Device::CPU, din->c(), dg->c(), dout.c(), in.c(), eg.c(), M, F);
        kernels::moe_gelu_backward(Device::CUDA, din->g(), dg->g(), dout.g(), in.g(), eg.g(), M, F);
      }
      return worst({err(*din), err(*dg)});
    });
  }

  // ---- shared-expert gate
  Twin<T> sy(random_values<T>((size_t)N * C)), sz(random_values<T>(N, -3.0f, 3.0f)),
      sd(random_values<T>((size_t)N * C));
  check("moe_shared_gate_forward (+=)" + tag, P::elementwise, [&] {
    Twin<T> out(random_values<T>((size_t)N * C));
    kernels::moe_shared_gate_forward(Device::CPU, out.c(), sy.c(), sz.c(), N, C);
    kernels::moe_shared_gate_forward(Device::CUDA, out.g(), sy.g(), sz.g(), N, C);
    return err(out);
  });
  check("moe_shared_gate_backward (dy, dz)" + tag, P::reduction, [&] {
    std::unique_ptr<Twin<T>> dy(written<T>((size_t)N * C)), dz(written<T>(N));
    kernels::moe_shared_gate_backward(Device::CPU, dy->c(), dz->c(), sd.c(), sy.c(), sz.c(), N, C);
    kernels::moe_shared_gate_backward(Device::CUDA, dy->g(), dz->g(), sd.g(), sy.g(), sz.g(), N, C);
    return worst({err(*dy), err(*dz)});
  });

  // ---- RoPE alone: the whole sequence (odd S), and rank 1 of cp 2 (local rows at positions
  // [19, 57) of 76)
  const int B = 2, H = 6, D = 16;
  struct Rows {
    int S;
    kernels::TokenPositions pos;
    const char* name;
  };
  for (const Rows& r : {Rows{37, kernels::TokenPositions(), ""},
                        Rows{38, cp_positions(19, 1, 2), " cp"}}) {
    const int S = r.S;
    const std::string rtag = r.name + tag;
    const std::vector<T> v = random_values<T>((size_t)B * H * S * D);
    check("rope_forward" + rtag, P::elementwise, [&] {
      Twin<T> t(v);
      kernels::rope_forward(Device::CPU, t.c(), B, H, S, D, 10000.0f, r.pos);
      kernels::rope_forward(Device::CUDA, t.g(), B, H, S, D, 10000.0f, r.pos);
      return err(t);
    });
    check("rope_backward" + rtag, P::elementwise, [&] {
      Twin<T> t(v);
      kernels::rope_backward(Device::CPU, t.c(), B, H, S, D, 10000.0f, r.pos);
      kernels::rope_backward(Device::CUDA, t.g(), B, H, S, D, 10000.0f, r.pos);
      return err(t);
    });
    check("split(theta 0) + rope == split(theta) (cuda)" + rtag, 0.0, [&] {
      const int A = H, G = 2, Wq = (A + 2 * G) * D;
      Twin<T> qkv(random_values<T>((size_t)B * S * Wq));
      const size_t nq = (size_t)B * A * S * D, nk = (size_t)B * G * S * D;
      Twin<T> q1(random_values<T>(nq)), k1(random_values<T>(nk)), v1(random_values<T>(nk));
      Twin<T> q2(random_values<T>(nq)), k2(random_values<T>(nk)), v2(random_values<T>(nk));
      kernels::qkv_split_forward(Device::CUDA, q1.g(), k1.g(), v1.g(), qkv.g(), B, S, A, G, D,
                                 10000.0f, r.pos);
      kernels::qkv_split_forward(Device::CUDA, q2.g(), k2.g(), v2.g(), qkv.g(), B, S, A, G, D,
                                 0.0f, r.pos);
      kernels::rope_forward(Device::CUDA, q2.g(), B, A, S, D, 10000.0f, r.pos);
      kernels::rope_forward(Device::CUDA, k2.g(), B, G, S, D, 10000.0f, r.pos);
      q1.cpu = q2.fetch();
      k1.cpu = k2.fetch();
      return mismatches(q1) + mismatches(k1);
    });
  }
}

template void check_moe<float>();
template void check_moe<bf16>();

}  // namespace op_check
