// kernels/math.h: the per-element and per-row arithmetic that every CUDA kernel shares
// with its CPU twin (notes/design.md, "Two backends, one code path").
//
// defines: exp_simd, normal_cdf, gelu, gelu_grad,
//          silu, silu_grad, rope_inv_freq, counter_uniform (init's RNG), dropout_key,
//          dropout_keep_keyed, dropout_keep (dropout's), init_normal_value,
//          TokenPositions,
//          AttentionRows, AttentionBlock, whole_sequence, visible_pairs,
//          attention_merge_weights, attention_merge_value, adamw_step, load_moment, store_moment,
//          adamw_step_stored, and the MoE router rows:
//          moe_topk_row, moe_topk_backward_row, moe_balancing_row, moe_balancing_backward_row,
//          moe_logsumexp_row, moe_z_loss_backward_row, moe_aux_weight; the dispatch's rules: moe_kept_pairs,
//          moe_expert_rows, moe_pair_beats, moe_bias_step
#pragma once
#include <cmath>
#include "kernels/common.h"
#include "kernels/float16.h"  // bits_to_float, to_float, to_bf16, to_fp16, store

namespace kernels {

// ---- exp and the normal CDF without libm, so that loops over them vectorise on the CPU
// (libm's expf and erff are calls the compiler cannot vectorise; notes/performance.md) and
// the CUDA kernels compute the very same values.
// e^x, at most 1.3 ulp from the exact value (glibc's expf: 0.5 ulp), checked on every float
// in [-87, 88]. Below -87 it returns 0, where expf returns numbers under 2^-125 (nothing next
// to a softmax denominator, which is at least 1); above 88 it returns e^88.
HD float exp_simd(float x) {
  // e^x = 2^k e^r, k = round(x / ln 2), r = x - k ln 2 in [-ln2/2, ln2/2].
  const float xc = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);  // min/max, vectorisable
  const float kRound = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  const float k = (xc * 1.44269504088896341f + kRound) - kRound;
  // ln 2 in two parts, the first with few enough bits that k * kLn2Hi is exact, so r keeps
  // full precision although x - k ln 2 cancels most of x.
  const float kLn2Hi = 0.693145751953125f, kLn2Lo = 1.42860682030941723e-6f;
  const float r = (xc - k * kLn2Hi) - k * kLn2Lo;
  // e^r by its Taylor series to r^7: the first omitted term, r^8/8! < 6e-9, is a tenth of an
  // ulp of e^r. Horner's form, highest power first.
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  // 2^k as a float: exponent field k + 127, mantissa 0 (k is in [-126, 127] after the clamp).
  const float two_k = bits_to_float((uint32_t)((int32_t)k + 127) << 23);
  return x < -87.0f ? 0.0f : p * two_k;
}

// Phi(x) = P(X <= x) for a standard normal X = (1 + erf(x / sqrt 2)) / 2, GeLU's gate.
//
// Through the tail E = P(X > |x|) = erfc(z) / 2, z = |x| / sqrt 2, as Phi = E for x < 0 and
// 1 - E for x >= 0, so the left tail keeps its relative precision (1 + erf(x / sqrt 2) loses
// it all to cancellation once x < -3). erfc(z) = t e^(-z^2 + Q) with t = 1 / (1 + z/2),
// which maps z in [0, 10] onto t in [1/6, 1], where Q = ln(erfc(z) / t) + z^2 is smooth;
// beyond z = 10, erfc(z) < 2e-45 underflows a float anyway. Q is a polynomial in u, t mapped
// onto [-1, 1]: the degree-10 Chebyshev interpolant of Q (relative error 1e-8 in erfc,
// computed in long double: notes/performance.md) written in powers of u.
// Measured against long double on every 61st float in [-14, 14]: within 6 ulp for x > -1;
// below, the rounding of z^2 costs z^2 2^-24 more, as in any float evaluation from a float x.
HD float normal_cdf(float x) {
  const float za = fabsf(x) * 0.70710678118654752f;
  const float z = za > 10.0f ? 10.0f : za;  // a compare, not fminf: it vectorises
  const float t = 1.0f / (1.0f + 0.5f * z);
  const float u = (2.0f * t - (1.0f + 1.0f / 6.0f)) / (1.0f - 1.0f / 6.0f);  // [1/6, 1] -> [-1, 1]
  float q = -2.413217408e-05f;  // Horner's form, highest power first
  q = q * u + 5.488488750e-05f;
  q = q * u + 1.330719306e-04f;
  q = q * u - 5.343771873e-04f;
  q = q * u - 2.787787663e-04f;
  q = q * u + 3.707520235e-03f;
  q = q * u - 1.044538645e-03f;
  q = q * u - 2.947035019e-02f;
  q = q * u + 1.574494611e-02f;
  q = q * u + 5.703070983e-01f;
  q = q * u - 5.585953440e-01f;
  const float tail = 0.5f * t * exp_simd(q - z * z);
  return x < 0.0f ? tail : 1.0f - tail;
}

// GeLU, exact (erf) form, Megatron's default: gelu(x) = x * Phi(x) = 0.5 x (1 + erf(x/sqrt2)).
HD float gelu(float x) { return x * normal_cdf(x); }
// d/dx [x Phi(x)] = Phi(x) + x phi(x), phi(x) = exp(-x^2/2)/sqrt(2 pi).
HD float gelu_grad(float x) {
  return normal_cdf(x) + x * 0.39894228040143268f * exp_simd(-0.5f * x * x);
}

// SiLU (swish): silu(x) = x * sigmoid(x); SwiGLU(g, u) = silu(g) * u (Shazeer 2020).
HD float sigmoid(float x) { return 1.0f / (1.0f + exp_simd(-x)); }
HD float silu(float x) { return x * sigmoid(x); }
// d/dx silu = s + x s (1 - s), s = sigmoid(x).
HD float silu_grad(float x) {
  float s = sigmoid(x);
  return s + x * s * (1.0f - s);
}

// RoPE (Su et al. 2021), rotate-half (GPT-NeoX / Megatron) form. For head dim d, pair i
// (0 <= i < d/2) rotates (x[i], x[i + d/2]) by angle pos * theta^(-2i/d).
HD float rope_inv_freq(int i, int head_dim, float theta) {
  return powf(theta, -2.0f * (float)i / (float)head_dim);
}

// Counter-based random numbers (a 64-bit mix, splitmix64 finaliser): the value depends
// only on (seed, stream, index), so the GPU and the CPU, a naive and a flash attention,
// a forward and its recompute all draw the same dropout mask without storing state.
HD uint64_t mix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
// Uniform in [0, 1) with 24 random bits.
HD float counter_uniform(uint64_t seed, uint64_t stream, uint64_t index) {
  uint64_t r = mix64(seed ^ mix64(stream ^ mix64(index)));
  return (float)(r >> 40) * (1.0f / 16777216.0f);
}
// Megatron's initialisation, N(0, sigma), of element `index` of a full tensor: Box-Muller on two
// counter uniforms, z = sqrt(-2 ln(u1 + 1e-7)) cos(2 pi u2), u1 from `stream`, u2 from
// stream + 1 (kernels/ops/init.h). The value depends on (seed, stream, index) alone.
HD float init_normal_value(uint64_t seed, uint64_t stream, uint64_t index, float sigma) {
  const float u1 = counter_uniform(seed, stream, index) + 1e-7f;
  const float u2 = counter_uniform(seed, stream + 1, index);
  return sqrtf(-2.0f * logf(u1)) * cosf(6.28318530718f * u2) * sigma;
}
// Dropout keeps an element when its uniform is >= p; kept values are scaled by 1/(1-p).
// Dropout's keep bit of element `index` of stream (seed, stream): the uniform of one 64-bit mix
// of the stream's key and the index, kept when >= p. The key is a function of (seed, stream)
// alone, so a kernel hashes it once (dropout_key) and each element costs one mix64
// (dropout_keep_keyed), not three: the flash kernels draw 32 bits a lane per tile.
HD uint64_t dropout_key(uint64_t seed, uint64_t stream) { return mix64(seed ^ mix64(stream)); }
HD bool dropout_keep_keyed(uint64_t key, uint64_t index, float p) {
  return (float)(mix64(key ^ index) >> 40) * (1.0f / 16777216.0f) >= p;
}
HD bool dropout_keep(uint64_t seed, uint64_t stream, uint64_t index, float p) {
  return dropout_keep_keyed(dropout_key(seed, stream), index, p);
}

// ---- where a rank's tokens sit in the sequence (context parallelism) ------------------------
// Local row i of a sequence slice is at global position start[i / chunk] + i % chunk: at most
// two chunks, Megatron's load-balanced layout (rank r of cp holds chunks r and 2cp-1-r of
// 2cp). The default is the whole sequence (one chunk from 0; local == length == 0 means
// "no slicing": element() is the identity).
struct TokenPositions {
  int chunk = 1 << 30;        // rows per chunk
  int start[2] = {0, 0};      // global position of each chunk's first row
  int local = 0, length = 0;  // rows per sequence here, and in the full sequence (0: whole)
  // A select, not start[i / chunk]: no division, and no array indexed at run time (which puts
  // the whole struct in a GPU thread's local memory). Rows past the view get a finite position.
  HD int at(int i) const { return i < chunk ? start[0] + i : start[1] + (i - chunk); }
  // How many of rows 0..rows-1 sit at a position <= p, when positions increase with the row
  // (start[1] >= start[0] + chunk): the causal mask keeps a prefix of keys for each query.
  HD int count_upto(int p, int rows) const {
    const int first = rows < chunk ? rows : chunk;
    int n0 = p - start[0] + 1;
    n0 = n0 < 0 ? 0 : (n0 > first ? first : n0);
    if (rows <= chunk) return n0;
    int n1 = p - start[1] + 1;
    n1 = n1 < 0 ? 0 : (n1 > rows - chunk ? rows - chunk : n1);
    return n0 + n1;
  }
  // The single-rank index of element e of a (B * local, width) tensor of tokens (the hidden
  // dropout's index, so that a context-parallel run draws the single-rank masks).
  HD uint64_t element(uint64_t e, int width) const {
    if (length == 0) return e;
    const uint64_t row = e / (uint64_t)width, b = row / (uint64_t)local;
    const int s = (int)(row % (uint64_t)local);
    return (b * (uint64_t)length + (uint64_t)at(s)) * (uint64_t)width + e % (uint64_t)width;
  }
};

// One pass of attention: a set of query rows against a set of key rows of every (b, head).
// The whole sequence is one causal pass; ring attention (parallel/context_parallel.cpp) makes
// one pass per step, on the local chunks or half of them. Rows of head (b, h) start at
// (b*H + h) * head_stride elements and are D apart (q, o, dout, dq: H = A query heads, the q
// view; k, v, dk, dv: H = G groups, the k view); the log-sum-exp and the softmax's row terms
// (lse, delta) use the q view with head_stride / D.
struct AttentionRows {
  int rows = 0;
  long long head_stride = 0;
  TokenPositions pos;
};
struct AttentionBlock {
  AttentionRows q, k;
  bool causal = true;  // key j hidden from query i when k.pos.at(j) > q.pos.at(i)
  // Attention dropout's index of probability (b, h, i, j), the naive single-rank P's element:
  // ((b*dropout_heads + dropout_head0 + h)*dropout_length + q.pos.at(i))*dropout_length
  //   + k.pos.at(j)
  int dropout_heads = 0, dropout_head0 = 0, dropout_length = 0;
  HD uint64_t dropout_index(int b, int h, int i, int j) const {
    return dropout_row(b, h, i) + (uint64_t)k.pos.at(j);
  }
  // The index of (b, h, i, key position 0): a kernel computes it once per row.
  HD uint64_t dropout_row(int b, int h, int i) const {
    const uint64_t L = (uint64_t)dropout_length;
    const uint64_t head = (uint64_t)b * dropout_heads + dropout_head0 + h;
    return (head * L + (uint64_t)q.pos.at(i)) * L;
  }
  // keys 0..visible(i)-1 are the ones query i sees (a prefix: positions increase)
  HD int visible(int i) const { return causal ? k.pos.count_upto(q.pos.at(i), k.rows) : k.rows; }
};
// The whole causal sequence of S rows, A query heads of D channels, as one pass.
inline AttentionBlock whole_sequence(int S, int A, int D) {
  AttentionBlock b;
  b.q = AttentionRows{S, (long long)S * D, TokenPositions()};
  b.k = AttentionRows{S, (long long)S * D, TokenPositions()};
  b.dropout_heads = A;
  b.dropout_length = S;
  return b;
}
// The (query, key) pairs of one (b, head) that the block computes: sum_i visible(i), the
// attention kernels' FLOP count (S(S+1)/2 for the whole causal sequence).
inline long long visible_pairs(const AttentionBlock& blk) {
  long long pairs = 0;
  for (int i = 0; i < blk.q.rows; i++) pairs += blk.visible(i);
  return pairs;
}

// Ring attention's log-sum-exp merge of one row (ops/attention.h attention_merge): the merged
//   lse' = log(e^lse + e^lse_pass) = hi + log1p(e^(lo - hi))   (hi, lo: the larger, smaller)
// which never overflows, and the weights of the two partial outputs, w = e^(lse - lse'),
// w_pass = e^(lse_pass - lse'), so that o' = o w + o_pass w_pass. Returns false when the pass
// saw no key (lse_pass = -inf): the row stays as it is. When nothing was merged yet
// (lse = -inf) w = 0 and w_pass = 1: the caller writes o' = o_pass, whatever o held.
HD bool attention_merge_weights(float lse, float lse_pass, float* w, float* w_pass,
                                float* lse_new) {
  if (lse_pass == -INFINITY) return false;
  if (lse == -INFINITY) {
    *w = 0.0f;
    *w_pass = 1.0f;
    *lse_new = lse_pass;
    return true;
  }
  const float hi = fmaxf(lse, lse_pass), lo = fminf(lse, lse_pass);
  *lse_new = hi + log1pf(expf(lo - hi));
  *w = expf(lse - *lse_new);
  *w_pass = expf(lse_pass - *lse_new);
  return true;
}
// One merged element, o' = o w + o_pass w_pass, where w = 0 drops o (which, before the first
// merge, may be anything, even NaN).
HD float attention_merge_value(float o, float o_pass, float w, float w_pass) {
  return (w == 0.0f ? 0.0f : o * w) + o_pass * w_pass;
}

// One AdamW step on one element (Loshchilov & Hutter 2019; PyTorch AdamW semantics):
//   m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
//   p -= lr * ( m / (1-b1^t) / (sqrt(v / (1-b2^t)) + eps) + wd * p )
// bias1 = 1 - b1^t and bias2 = 1 - b2^t are computed once per step by the caller.
HD void adamw_step(float& p, float& m, float& v, float g, float lr, float b1, float b2,
                   float eps, float wd, float bias1, float bias2) {
  m = b1 * m + (1.0f - b1) * g;
  v = b2 * v + (1.0f - b2) * g * g;
  float mhat = m / bias1;
  float vhat = v / bias2;
  p -= lr * (mhat / (sqrtf(vhat) + eps) + wd * p);
}

// An Adam moment as stored (kernels/ops/loss_optimizer.h AdamRun::m, v): fp32, or bf16 with
// Megatron's --use-precision-aware-optimizer --exp-avg-dtype / --exp-avg-sq-dtype bf16. As
// Transformer Engine's FusedAdam keeps it (common/multi_tensor/adam.cu: MATH_T float, the
// moment loaded with static_cast<float> and stored with static_cast<bf16>, no scale): widened
// exactly, updated in fp32, rounded to nearest even on the store.
HD float load_moment(const void* p, int64_t i, bool stored_bf16) {
  return stored_bf16 ? to_float(static_cast<const bf16*>(p)[i]) : static_cast<const float*>(p)[i];
}
HD void store_moment(void* p, int64_t i, float x, bool stored_bf16) {
  if (stored_bf16) static_cast<bf16*>(p)[i] = to_bf16(x);
  else static_cast<float*>(p)[i] = x;
}
// adamw_step on element i of moments stored as above (m_bf16, v_bf16: their dtypes): the very
// fp32 arithmetic, between the widening load and the rounding store.
HD void adamw_step_stored(float& p, void* m, void* v, int64_t i, bool m_bf16, bool v_bf16,
                          float g, float lr, float b1, float b2, float eps, float wd, float bias1,
                          float bias2) {
  float mi = load_moment(m, i, m_bf16), vi = load_moment(v, i, v_bf16);
  adamw_step(p, mi, vi, g, lr, b1, b2, eps, wd, bias1, bias2);
  store_moment(m, i, mi, m_bf16);
  store_moment(v, i, vi, v_bf16);
}

// ---- mixture of experts: the router's per-row math (kernels/ops/moe.h moe_*) ----------------
// One row = one token's E logits. The CPU twin loops over rows, the CUDA kernel runs one
// thread per row; both call these, so they agree to the last bit. Every softmax here is
//   m = max_e l_e,  inv = 1 / sum_e exp(l_e - m),  p_e = exp(l_e - m) * inv
// with exp_simd, recomputed where needed instead of kept in a scratch row (a thread has none).
// Scores: 0 softmax, 1 sigmoid.

HD float moe_softmax_stats(const float* l, int n, float& m, float& inv) {  // returns the sum
  m = l[0];
  for (int e = 1; e < n; e++) m = l[e] > m ? l[e] : m;
  float sum = 0.0f;
  for (int e = 0; e < n; e++) sum += exp_simd(l[e] - m);
  inv = 1.0f / sum;
  return sum;
}

// Top-k of one row (ops/moe.h moe_router_topk). The ranking value of expert e is
//   softmax, not pre_softmax: l_e;   pre_softmax: p_e;   sigmoid: sigmoid(l_e)
// plus bias[e] when a bias is given (it picks, it never enters a gate). Pick j is the best
// expert ranked strictly after pick j-1 in the order (value descending, index ascending), so
// ties go to the lower index and no "taken" array is needed: O(k E). Gates of the picks:
//   softmax:     g_j = exp(l_j - max_picked l) / sum over the picks
//   pre_softmax: g_j = p_j
//   sigmoid:     g_j = s_j / (sum_i s_i + 1e-20) for k > 1, s_j for k == 1
// then g_j *= scaling (0: none). Rows with NaN logits are not handled.
HD void moe_topk_row(float* gates, int* experts, const float* l, const float* bias, int E, int k,
                     int score, bool pre_softmax, float scaling) {
  float m = 0.0f, inv = 1.0f;
  if (score == 0 && pre_softmax) moe_softmax_stats(l, E, m, inv);
  float prev_v = 0.0f;
  int prev_e = -1;
  for (int j = 0; j < k; j++) {
    float best_v = 0.0f;
    int best_e = -1;
    for (int e = 0; e < E; e++) {
      float v = score == 1 ? sigmoid(l[e]) : (pre_softmax ? exp_simd(l[e] - m) * inv : l[e]);
      if (bias) v += bias[e];
      const bool after_prev = prev_e < 0 || v < prev_v || (v == prev_v && e > prev_e);
      if (after_prev && (best_e < 0 || v > best_v)) {  // strict >: a tie keeps the lower e
        best_v = v;
        best_e = e;
      }
    }
    experts[j] = best_e;
    prev_v = best_v;
    prev_e = best_e;
  }
  if (score == 1) {
    float sum = 0.0f;
    for (int j = 0; j < k; j++) sum += (gates[j] = sigmoid(l[experts[j]]));
    if (k > 1)
      for (int j = 0; j < k; j++) gates[j] = gates[j] / (sum + 1e-20f);
  } else if (pre_softmax) {
    for (int j = 0; j < k; j++) gates[j] = exp_simd(l[experts[j]] - m) * inv;
  } else {
    float mk = l[experts[0]];
    for (int j = 1; j < k; j++) mk = l[experts[j]] > mk ? l[experts[j]] : mk;
    float sum = 0.0f;
    for (int j = 0; j < k; j++) sum += (gates[j] = exp_simd(l[experts[j]] - mk));
    const float inv_k = 1.0f / sum;
    for (int j = 0; j < k; j++) gates[j] *= inv_k;
  }
  if (scaling != 0.0f)
    for (int j = 0; j < k; j++) gates[j] *= scaling;
}

// Its backward, dl(E) "=" from dg(k) (the picks fixed; G_j = scaling * dg_j, or dg_j):
//   softmax:     dl_{e_j} = g_j (G_j - sum_i g_i G_i)            (softmax over the picks)
//   pre_softmax: dl_e = p_e ([e picked] G_e - sum_i p_{e_i} G_i)  (softmax over all E)
//   sigmoid k>1: S = sum_i s_i + 1e-20, g = s / S: ds_j = (G_j - sum_i g_i G_i) / S,
//                dl_{e_j} = ds_j s_j (1 - s_j)
//   sigmoid k=1: dl_{e_0} = G_0 s_0 (1 - s_0)
HD void moe_topk_backward_row(float* dl, const float* dg, const float* l, const int* experts,
                              int E, int k, int score, bool pre_softmax, float scaling) {
  const float sc = scaling != 0.0f ? scaling : 1.0f;
  for (int e = 0; e < E; e++) dl[e] = 0.0f;
  if (score == 1) {
    float sum = 0.0f;
    for (int j = 0; j < k; j++) sum += sigmoid(l[experts[j]]);
    const float S = sum + 1e-20f;
    float dot = 0.0f;
    if (k > 1)
      for (int j = 0; j < k; j++) dot += sigmoid(l[experts[j]]) / S * (sc * dg[j]);
    for (int j = 0; j < k; j++) {
      const float s = sigmoid(l[experts[j]]);
      const float ds = k > 1 ? (sc * dg[j] - dot) / S : sc * dg[j];
      dl[experts[j]] = ds * s * (1.0f - s);
    }
  } else if (pre_softmax) {
    float m, inv;
    moe_softmax_stats(l, E, m, inv);
    float dot = 0.0f;
    for (int j = 0; j < k; j++) dot += exp_simd(l[experts[j]] - m) * inv * (sc * dg[j]);
    for (int e = 0; e < E; e++) dl[e] = -(exp_simd(l[e] - m) * inv) * dot;
    for (int j = 0; j < k; j++) {
      const float p = exp_simd(l[experts[j]] - m) * inv;
      dl[experts[j]] = p * (sc * dg[j] - dot);
    }
  } else {
    float mk = l[experts[0]];
    for (int j = 1; j < k; j++) mk = l[experts[j]] > mk ? l[experts[j]] : mk;
    float sum = 0.0f;
    for (int j = 0; j < k; j++) sum += exp_simd(l[experts[j]] - mk);
    const float inv_k = 1.0f / sum;
    float dot = 0.0f;
    for (int j = 0; j < k; j++) dot += exp_simd(l[experts[j]] - mk) * inv_k * (sc * dg[j]);
    for (int j = 0; j < k; j++) {
      const float g = exp_simd(l[experts[j]] - mk) * inv_k;
      dl[experts[j]] = g * (sc * dg[j] - dot);
    }
  }
}

// Load-balancing scores of one row (ops/moe.h moe_balancing_scores), p(E) "=":
//   softmax: p_e = softmax(l)_e;   sigmoid: p_e = s_e / (sum s + 1e-20), s = sigmoid(l).
HD void moe_balancing_row(float* p, const float* l, int E, int score) {
  if (score == 1) {
    float sum = 0.0f;
    for (int e = 0; e < E; e++) sum += sigmoid(l[e]);
    for (int e = 0; e < E; e++) p[e] = sigmoid(l[e]) / (sum + 1e-20f);
  } else {
    float m, inv;
    moe_softmax_stats(l, E, m, inv);
    for (int e = 0; e < E; e++) p[e] = exp_simd(l[e] - m) * inv;
  }
}
// dl(E) += its backward of dp(E):
//   softmax: dl_e += p_e (dp_e - sum_i p_i dp_i)
//   sigmoid: S = sum s + 1e-20: dl_e += (dp_e - sum_i p_i dp_i) / S * s_e (1 - s_e)
HD void moe_balancing_backward_row(float* dl, const float* dp, const float* l, int E, int score) {
  if (score == 1) {
    float sum = 0.0f;
    for (int e = 0; e < E; e++) sum += sigmoid(l[e]);
    const float S = sum + 1e-20f;
    float dot = 0.0f;
    for (int e = 0; e < E; e++) dot += sigmoid(l[e]) / S * dp[e];
    for (int e = 0; e < E; e++) {
      const float s = sigmoid(l[e]);
      dl[e] += (dp[e] - dot) / S * (s * (1.0f - s));
    }
  } else {
    float m, inv;
    moe_softmax_stats(l, E, m, inv);
    float dot = 0.0f;
    for (int e = 0; e < E; e++) dot += exp_simd(l[e] - m) * inv * dp[e];
    for (int e = 0; e < E; e++) dl[e] += exp_simd(l[e] - m) * inv * (dp[e] - dot);
  }
}

// z loss (ST-MoE): lse = m + log sum_e exp(l_e - m) of one row; its square's gradient, scaled,
// dl_e += coeff * 2 lse softmax(l)_e.
HD float moe_logsumexp_row(const float* l, int E) {
  float m, inv;
  const float sum = moe_softmax_stats(l, E, m, inv);
  return m + logf(sum);
}
HD void moe_z_loss_backward_row(float* dl, const float* l, int E, float coeff) {
  float m, inv;
  const float sum = moe_softmax_stats(l, E, m, inv);
  const float c = coeff * 2.0f * (m + logf(sum));
  for (int e = 0; e < E; e++) dl[e] += c * (exp_simd(l[e] - m) * inv);
}

// The aux loss's weight of a group's expert from its top-k count (ops/moe.h moe_weighted_sum):
// rounded to fp32 once, as every use of it reads it.
HD float moe_aux_weight(double scale, int count) { return (float)(scale * (double)count); }

// ---- mixture of experts: the dispatch's rules (kernels/ops/moe_dispatch.h) ------------------
// Shared by both twins and by the host, which sizes the grouped GEMM from the same rules.
// The pairs an expert of `count` routed pairs keeps under capacity C (-1: dropless).
HD int moe_kept_pairs(int count, int capacity) {
  return capacity < 0 || count < capacity ? count : capacity;
}
// The rows it runs: its kept pairs, or padded_rows (>= 0: --moe-pad-expert-input-to-capacity,
// min(C, N) for every expert).
HD int moe_expert_rows(int count, int capacity, int padded_rows) {
  return padded_rows >= 0 ? padded_rows : moe_kept_pairs(count, capacity);
}
// Drop policy "probs": pair q (gate gq) beats pair p (gate gp) of the same expert when its gate
// is larger, or equal and q comes first (the earlier token: a stable sort by gate).
HD bool moe_pair_beats(float gq, int q, float gp, int p) {
  return gq > gp || (gq == gp && q < p);
}
// The expert bias's step direction, sign(mean - count) as a float (sign(0) = 0): an expert
// that ran fewer pairs than the mean is raised.
HD float moe_bias_step(double mean, int count) {
  const double offset = mean - (double)count;
  return (float)((offset > 0) - (offset < 0));
}

}  // namespace kernels
