// model/layer.cpp: one pre-norm transformer layer, forward and backward (notes/model.md).
//
//   x_mid = x + dropout(proj(attention(qkv(norm1(x)))))
//   out   = x_mid + dropout(fc2(act(fc1(norm2(x_mid)))))      act = gelu (gpt) | swiglu (llama)
//
// With tensor parallelism (parallel/tensor_parallel.h) qkv and fc1 are column-parallel, proj
// and fc2 row-parallel, and each block is bracketed by the conjugate operators:
//   u_full = enter_column_parallel(norm(x))      f (identity) | sp: all-gather
//   y      = exit_row_parallel(partial)          g (all-reduce) | sp: reduce-scatter
// so the code below is the single-rank layer with those two calls around each block. An MoE
// layer (model/moe.h) runs its router and experts in place of fc1 -> act -> fc2 on the rank's
// own N_l tokens (tensor parallelism needs sp with experts), so that block has neither call;
// its replicated weights' partial gradients are all-reduced over tp. --qk-layernorm normalises q and k per head between the split and RoPE. N is
// the microbatch's tokens; N_l = N, or N/t with sequence parallelism, is what the norms,
// dropout and residual see.
// A linear layer y = x W^T + b (W stored (out, in) like PyTorch) has backward
//   dx = dy W,  dW += dy^T x,  db += colsum(dy).
// The residual stream's gradient lives in ws.dres for the whole backward pass: each norm's
// backward ADDS its input gradient into it (the residual branch passes dres through as is).
// Selective recompute (--recompute-granularity selective, model/config.h Recompute): the
// listed modules' internals are not saved; backward runs their forward kernels again on the
// kept inputs at the start of the module's backward (norm2 and the MLP at the start of the
// MLP block, the core before the attention backward, norm1 before qkv's backward), so every
// tensor and every gradient comes out bit for bit as without recompute.
#include <stdexcept>
#include <utility>
#include "kernels/ops.h"
#include "model/layer.h"

namespace paralab {

namespace {

using kernels::Device;

// The layer's four linears, numbered in the stage's FP8 scaling from c.fp8_first (Fp8Linear:
// off when the run is not in FP8). Attention's core, the norms and the residual stay in the
// storage type, as in Transformer Engine.
enum Linear { QKV = 0, PROJ = 1, FC1 = 2, FC2 = 3 };
template <typename T>
Fp8Linear linear(const LayerContext& c, Workspace<T>& ws, Linear k) {
  if (c.fp8_weights.state == nullptr) return {c.fp8, c.fp8_first + k, &ws.fp8};
  // --fp8-param-gather: W gathered in FP8 at this scale
  return {c.fp8, c.fp8_first + k, &ws.fp8, c.fp8_weights.scale(k), c.fp8_weights.factor(k),
          c.fp8_weights_stored};
}

// ---- which tensors each module owns, and selective recompute -------------------------------
// A module's tensors are saved activations, or, when the config recomputes the module
// (model/config.h Recompute, selective), category recompute and alive only inside its block:
// open_recomputed / close_recomputed bracket where they are made and used, in forward and
// again in backward (plan/recompute.h predicts the same lifetimes).
enum class Module { NORM1, CORE_ATTN, NORM2, MLP };

bool recomputed(const ModelConfig& m, Module mod) {
  const Recompute& r = m.recompute;
  return mod == Module::CORE_ATTN ? r.recompute_core_attn()
         : mod == Module::MLP     ? r.recompute_mlp()
                                  : r.recompute_norm();
}

template <typename T>
void allocate_module(const LayerContext& c, LayerActivations<T>& a, Module mod, Category cat) {
  const ModelConfig& m = c.model;
  const Device dev = c.device;
  const size_t N = (size_t)c.B * m.seq_length, h = m.hidden_size;
  const size_t Nl = c.tp.local_tokens((int)N);
  switch (mod) {
    case Module::NORM1:
      if (m.is_gpt()) a.norm1_mean.allocate(dev, Nl, cat);
      a.norm1_rstd.allocate(dev, Nl, cat);
      a.norm1_out.allocate(dev, Nl * h, cat);
      break;
    case Module::CORE_ATTN:  // the core allocates what it keeps (core_attention_forward)
      break;
    case Module::NORM2:
      if (m.is_gpt()) a.norm2_mean.allocate(dev, Nl, cat);
      a.norm2_rstd.allocate(dev, Nl, cat);
      a.norm2_out.allocate(dev, Nl * h, cat);
      break;
    case Module::MLP:
      if (m.moe.is_moe_layer(c.layer)) {  // model/moe.cpp allocates its own
        if (cat == Category::RECOMPUTE)
          throw std::logic_error("layer: selective mlp recompute of an MoE layer");
        break;
      }
      a.fc1_out.allocate(dev, N * m.fc1_size(), cat);
      a.act_out.allocate(dev, N * m.ffn(), cat);
      break;
  }
}

template <typename T>
void open_recomputed(const LayerContext& c, LayerActivations<T>& a, Module mod) {
  if (recomputed(c.model, mod)) allocate_module(c, a, mod, Category::RECOMPUTE);
}

template <typename T>
void close_recomputed(const LayerContext& c, LayerActivations<T>& a, Module mod) {
  if (!recomputed(c.model, mod)) return;
  switch (mod) {
    case Module::NORM1: a.norm1_mean.reset(); a.norm1_rstd.reset(); a.norm1_out.reset(); break;
    case Module::CORE_ATTN: a.core = CoreSaved<T>(); break;
    case Module::NORM2: a.norm2_mean.reset(); a.norm2_rstd.reset(); a.norm2_out.reset(); break;
    case Module::MLP: a.fc1_out.reset(); a.act_out.reset(); a.fc1_in.reset(); break;
  }
}

// Allocates every saved tensor of this layer for this microbatch: the modules' unless
// recomputed, and the rest (q, k, v, ctx, masks, residuals, output) always.
template <typename T>
void allocate_activations(const LayerContext& c, LayerActivations<T>& a) {
  const ModelConfig& m = c.model;
  const Device dev = c.device;
  const size_t N = (size_t)c.B * m.seq_length, h = m.hidden_size;
  const size_t Nl = c.tp.local_tokens((int)N);
  const size_t A = m.num_attention_heads, G = m.groups(), d = m.head_dim();
  const Category act = Category::ACTIVATIONS;
  for (Module mod : {Module::NORM1, Module::CORE_ATTN, Module::NORM2, Module::MLP})
    if (!recomputed(m, mod)) allocate_module(c, a, mod, act);
  a.q.allocate(dev, N * A * d, act);
  a.k.allocate(dev, N * G * d, act);
  if (m.qk_layernorm) {
    a.q_raw.allocate(dev, N * A * d, act);
    a.k_raw.allocate(dev, N * G * d, act);
    if (m.is_gpt()) a.q_norm_mean.allocate(dev, N * A, act);
    if (m.is_gpt()) a.k_norm_mean.allocate(dev, N * G, act);
    a.q_norm_rstd.allocate(dev, N * A, act);
    a.k_norm_rstd.allocate(dev, N * G, act);
  }
  a.v.allocate(dev, N * G * d, act);
  a.ctx.allocate(dev, N * A * d, act);
  if (m.hidden_dropout > 0.0f) a.proj_mask.allocate(dev, Nl * h, act);
  a.x_mid.allocate(dev, Nl * h, act);
  if (m.hidden_dropout > 0.0f) a.fc2_mask.allocate(dev, Nl * h, act);
  a.out.allocate(dev, Nl * h, act);
}

template <typename T>
void norm_forward(const LayerContext& c, T* out, Buffer<float>& mean, Buffer<float>& rstd,
                  const T* x, const T* w, const T* b, int N) {
  const ModelConfig& m = c.model;
  if (m.is_gpt())
    kernels::layernorm_forward(c.device, out, mean.data(), rstd.data(), x, w, b, N,
                               m.hidden_size, m.norm_epsilon);
  else
    kernels::rmsnorm_forward(c.device, out, rstd.data(), x, w, N, m.hidden_size, m.norm_epsilon);
}

template <typename T>
void norm_backward(const LayerContext& c, T* dx, T* dw, T* db, const T* dout, const T* x,
                   const T* w, const Buffer<float>& mean, const Buffer<float>& rstd, int N) {
  if (c.model.is_gpt())
    kernels::layernorm_backward(c.device, dx, dw, db, dout, x, w, mean.data(), rstd.data(), N,
                                c.model.hidden_size);
  else
    kernels::rmsnorm_backward(c.device, dx, dw, dout, x, w, rstd.data(), N, c.model.hidden_size);
}

// Hidden dropout on the N_l tokens of this rank: replicated regions (no sp) draw the same
// mask on every tp rank; with sp each rank's tokens draw their own.
uint64_t hidden_stream(const LayerContext& c, int which) {
  const uint64_t rank = c.tp.sequence_parallel ? (uint64_t)c.tp.rank() : 0;
  return 4ull * c.layer + which + (rank << 32);
}

// The end of a row-parallel block: partial (N, h) -> reduced over tp (N_l, h), plus the bias
// (added once, after the reduction), then dropout. Returns where the result is.
template <typename T>
T* finish_block(const LayerContext& c, Workspace<T>& ws, const T* bias, uint8_t* mask,
                int which, bool row_parallel = true) {
  const ModelConfig& m = c.model;
  const int N = c.B * m.seq_length, Nl = c.tp.local_tokens(N), h = m.hidden_size;
  // an MoE block's output is already the rank's tokens' own (no partial sums over tp)
  T* y = row_parallel ? c.tp.exit_row_parallel(ws.tmp_h.data(), ws.tmp_l.data(), N, h)
                      : ws.tmp_h.data();
  if (bias) kernels::add_bias(c.device, y, bias, Nl, h);
  if (m.hidden_dropout > 0.0f)
    kernels::dropout_forward(c.device, y, mask, y, (size_t)Nl * h, m.hidden_dropout,
                             c.dropout_seed, hidden_stream(c, which), c.positions, h);
  return y;
}

// Backward of finish_block: from d(block output) (N_l, h) to the full (N, h) gradient of
// the row-parallel output, accumulating the bias gradient (partial over tp with sp).
template <typename T>
const T* finish_block_backward(const LayerContext& c, Workspace<T>& ws, const T* dout,
                               const uint8_t* mask, T* dbias, bool row_parallel = true) {
  const ModelConfig& m = c.model;
  const int N = c.B * m.seq_length, Nl = c.tp.local_tokens(N), h = m.hidden_size;
  const T* dy = dout;
  if (m.hidden_dropout > 0.0f) {
    T* local = c.tp.sequence_parallel ? ws.tmp_l.data() : ws.tmp_h.data();
    kernels::dropout_backward(c.device, local, dout, mask, (size_t)Nl * h, m.hidden_dropout);
    dy = local;
  }
  if (dbias) kernels::bias_backward(c.device, dbias, dy, Nl, h);
  return row_parallel ? c.tp.exit_row_parallel_backward(dy, ws.gathered.data(), N, h) : dy;
}

// The MLP up to fc2's input, from fc1's full input u2 (N, h): fc1 (column-parallel), then
// gelu | swiglu. Forward, and selective mlp's recompute in backward.
template <typename T>
void mlp_up(const LayerContext& c, const LayerWeights<T>& w, LayerActivations<T>& a,
            Workspace<T>& ws, const T* u2) {
  const ModelConfig& m = c.model;
  const int N = c.B * m.seq_length;
  column_parallel_forward(c.tp, linear(c, ws, FC1), a.fc1_out.data(), u2, w.fc1_w, w.fc1_b, N,
                          m.hidden_size, m.fc1_size());
  if (m.is_gpt())
    kernels::gelu_forward(c.device, a.act_out.data(), a.fc1_out.data(), (size_t)N * m.ffn());
  else
    kernels::swiglu_forward(c.device, a.act_out.data(), a.fc1_out.data(), N, m.ffn());
}

}  // namespace

template <typename T>
void layer_forward(const LayerContext& c, const LayerWeights<T>& w, const T* x,
                   LayerActivations<T>& a, Workspace<T>& ws) {
  const ModelConfig& m = c.model;
  const TensorParallel& tp = c.tp;
  const Device dev = c.device;
  const int N = c.B * m.seq_length, Nl = tp.local_tokens(N), h = m.hidden_size;
  const int attn = m.num_attention_heads * m.head_dim();
  kernels::GemmLabel label("attention");  // the MLP block labels its own
  allocate_activations(c, a);

  // ---- attention block: norm, qkv (column-parallel), attention on local heads,
  //      proj (row-parallel), dropout, residual
  open_recomputed(c, a, Module::NORM1);
  norm_forward(c, a.norm1_out.data(), a.norm1_mean, a.norm1_rstd, x, w.norm1_w, w.norm1_b, Nl);
  const T* u = tp.enter_column_parallel(a.norm1_out.data(), ws.gathered.data(), N, h);
  column_parallel_forward(tp, linear(c, ws, QKV), ws.qkv.data(), u, w.qkv_w, w.qkv_b, N, h,
                          m.qkv_size());
  close_recomputed(c, a, Module::NORM1);
  if (m.qk_layernorm) {  // the split without RoPE, then the norms and RoPE
    kernels::qkv_split_forward(dev, a.q_raw.data(), a.k_raw.data(), a.v.data(), ws.qkv.data(),
                               c.B, m.seq_length, m.num_attention_heads, m.groups(),
                               m.head_dim(), 0.0f, c.positions);
    qk_norm_forward(c, w, a);
  } else {
    kernels::qkv_split_forward(dev, a.q.data(), a.k.data(), a.v.data(), ws.qkv.data(), c.B,
                               m.seq_length, m.num_attention_heads, m.groups(), m.head_dim(),
                               m.is_gpt() ? 0.0f : m.rope_theta, c.positions);
  }
  open_recomputed(c, a, Module::CORE_ATTN);
  attention_forward(c, a, ws);
  close_recomputed(c, a, Module::CORE_ATTN);
  row_parallel_forward(tp, linear(c, ws, PROJ), ws.tmp_h.data(), a.ctx.data(), w.proj_w, N,
                       attn, h);
  const T* y = finish_block(c, ws, w.proj_b, a.proj_mask.data(), 2);
  kernels::add(dev, a.x_mid.data(), x, y, (size_t)Nl * h);

  // ---- MLP block: norm, fc1 (column-parallel), activation, fc2 (row-parallel), residual
  open_recomputed(c, a, Module::NORM2);
  open_recomputed(c, a, Module::MLP);
  norm_forward(c, a.norm2_out.data(), a.norm2_mean, a.norm2_rstd, a.x_mid.data(), w.norm2_w,
               w.norm2_b, Nl);
  // experts instead of fc1, fc2: on the rank's own tokens (N_l under sequence parallelism),
  // so without the column/row-parallel collectives
  const bool moe = m.moe.is_moe_layer(c.layer);
  if (moe) {
    moe_forward(c, w.moe, a.norm2_out.data(), ws.tmp_h.data(), a.moe);
  } else {
    kernels::GemmLabel label("mlp");
    mlp_up(c, w, a, ws, tp.enter_column_parallel(a.norm2_out.data(), ws.gathered.data(), N, h));
    row_parallel_forward(tp, linear(c, ws, FC2), ws.tmp_h.data(), a.act_out.data(), w.fc2_w, N,
                         m.ffn(), h);
  }
  close_recomputed(c, a, Module::NORM2);
  close_recomputed(c, a, Module::MLP);
  const T* y2 = finish_block(c, ws, w.fc2_b, a.fc2_mask.data(), 3, !moe);
  kernels::add(dev, a.out.data(), a.x_mid.data(), y2, (size_t)Nl * h);
}

template <typename T>
void layer_backward(const LayerContext& c, const LayerWeights<T>& w, LayerGrads<T>& g, const T* x,
                    LayerActivations<T>& a, Workspace<T>& ws, BackwardPart part) {
  const ModelConfig& m = c.model;
  const TensorParallel& tp = c.tp;
  const Device dev = c.device;
  const int N = c.B * m.seq_length, Nl = tp.local_tokens(N), h = m.hidden_size;
  const int attn = m.num_attention_heads * m.head_dim();
  const Recompute& rc = m.recompute;
  kernels::GemmLabel label("attention");  // the MLP block labels its own
  T* dres = ws.dres.data();
  // Split: each linear's weight gradient waits for W; its output gradient is kept for it.
  const bool split = part == BackwardPart::INPUT_GRAD;
  auto defer = [&](Buffer<T>& keep, const T* dy, size_t n) {
    keep.allocate(dev, n, Category::ACTIVATIONS);
    kernels::memcpy_device(dev, keep.data(), dy, n * sizeof(T));
  };
  if (split && (rc.recompute_mlp() || rc.recompute_norm()))
    throw std::logic_error("layer_backward: a split backward reads what selective mlp and "
                           "norm recompute drop");
  // With sp a column-parallel input is all-gathered for its GEMMs: W keeps that gathered copy
  // (N rows) instead of the rank's N_l rows, so it needs no second all-gather.
  Buffer<T> qkv_in, fc1_in;

  // ---- MLP block: selective recompute first (norm2 from x_mid, then fc1 and the
  //      activation from norm2's output), the same kernels on the same inputs as forward
  const T* u2_kept = nullptr;  // fc1's full input, when the recompute made it
  open_recomputed(c, a, Module::NORM2);
  open_recomputed(c, a, Module::MLP);
  if (rc.recompute_norm())
    norm_forward(c, a.norm2_out.data(), a.norm2_mean, a.norm2_rstd, a.x_mid.data(), w.norm2_w,
                 w.norm2_b, Nl);
  if (rc.recompute_mlp()) {
    // with sp, keep the gathered input for fc1's weight gradient (ws.gathered is needed below)
    if (tp.sequence_parallel) a.fc1_in.allocate(dev, (size_t)N * h, Category::RECOMPUTE);
    u2_kept = tp.enter_column_parallel(a.norm2_out.data(), a.fc1_in.data(), N, h);
    kernels::GemmLabel label("mlp");
    mlp_up(c, w, a, ws, u2_kept);
  }
  // d(out) = dres flows to x_mid unchanged and into the MLP branch
  const bool moe = m.moe.is_moe_layer(c.layer);
  const T* dy = finish_block_backward(c, ws, dres, a.fc2_mask.data(), g.fc2_b, !moe);
  if (moe) {
    // its weight gradients are done here, in B too: a split backward's W has none of them
    moe_backward(c, w.moe, g.moe, a.norm2_out.data(), dy, ws.tmp_h.data(), a.moe);
  } else {
    kernels::GemmLabel label("mlp");
    if (split) defer(a.d_fc2, dy, (size_t)N * h);
    row_parallel_backward(tp, linear(c, ws, FC2), ws.dact.data(), split ? nullptr : g.fc2_w, dy,
                          a.act_out.data(), w.fc2_w, N, m.ffn(), h);
    if (m.is_gpt())
      kernels::gelu_backward(dev, ws.dfc1.data(), ws.dact.data(), a.fc1_out.data(),
                             (size_t)N * m.ffn());
    else
      kernels::swiglu_backward(dev, ws.dfc1.data(), ws.dact.data(), a.fc1_out.data(), N, m.ffn());
    // with sp the saved input is this rank's tokens only: gather it again for dW
    const T* u2 = u2_kept ? u2_kept
                          : tp.enter_column_parallel(a.norm2_out.data(), ws.gathered.data(), N, h);
    if (split && tp.sequence_parallel) defer(fc1_in, u2, (size_t)N * h);
    if (split) defer(a.d_fc1, ws.dfc1.data(), (size_t)N * m.fc1_size());
    column_parallel_backward(tp, linear(c, ws, FC1), ws.tmp_h.data(), split ? nullptr : g.fc1_w,
                             g.fc1_b, ws.dfc1.data(), u2, w.fc1_w, N, h, m.fc1_size());
  }
  const T* du2 = moe ? ws.tmp_h.data()
                     : tp.enter_column_parallel_backward(ws.tmp_h.data(), ws.tmp_l.data(), N, h);
  norm_backward(c, dres, g.norm2_w, g.norm2_b, du2, a.x_mid.data(), w.norm2_w, a.norm2_mean,
                a.norm2_rstd, Nl);
  close_recomputed(c, a, Module::NORM2);
  close_recomputed(c, a, Module::MLP);

  // ---- attention block: dres is now d(x_mid)
  dy = finish_block_backward(c, ws, dres, a.proj_mask.data(), g.proj_b);
  if (split) defer(a.d_proj, dy, (size_t)N * h);
  row_parallel_backward(tp, linear(c, ws, PROJ), ws.dctx.data(), split ? nullptr : g.proj_w, dy,
                        a.ctx.data(), w.proj_w, N, attn, h);
  open_recomputed(c, a, Module::CORE_ATTN);
  if (rc.recompute_core_attn()) attention_recompute(c, a, ws);
  attention_backward(c, a, ws);
  close_recomputed(c, a, Module::CORE_ATTN);
  if (m.qk_layernorm) qk_norm_backward(c, w, g, a, ws);  // RoPE's, then the norms' backward
  kernels::qkv_split_backward(dev, ws.qkv.data(), ws.dq.data(), ws.dk.data(), ws.dv.data(), c.B,
                              m.seq_length, m.num_attention_heads, m.groups(), m.head_dim(),
                              m.is_gpt() || m.qk_layernorm ? 0.0f : m.rope_theta, c.positions);
  open_recomputed(c, a, Module::NORM1);
  if (rc.recompute_norm())  // norm1 again, from the layer input
    norm_forward(c, a.norm1_out.data(), a.norm1_mean, a.norm1_rstd, x, w.norm1_w, w.norm1_b, Nl);
  const T* u = tp.enter_column_parallel(a.norm1_out.data(), ws.gathered.data(), N, h);
  if (split && tp.sequence_parallel) defer(qkv_in, u, (size_t)N * h);
  if (split) defer(a.d_qkv, ws.qkv.data(), (size_t)N * m.qkv_size());
  column_parallel_backward(tp, linear(c, ws, QKV), ws.tmp_h.data(), split ? nullptr : g.qkv_w,
                           g.qkv_b, ws.qkv.data(), u, w.qkv_w, N, h, m.qkv_size());
  const T* du = tp.enter_column_parallel_backward(ws.tmp_h.data(), ws.tmp_l.data(), N, h);
  norm_backward(c, dres, g.norm1_w, g.norm1_b, du, x, w.norm1_w, a.norm1_mean, a.norm1_rstd,
                Nl);
  close_recomputed(c, a, Module::NORM1);
  if (!split) {
    a = LayerActivations<T>();  // release this microbatch's saved tensors
    return;
  }
  // B of a split backward: keep the linears' inputs (norm1_out and norm2_out: all N rows,
  // the gathered copies, with sp) and output gradients for W
  LayerActivations<T> keep;
  keep.norm1_out = tp.sequence_parallel ? std::move(qkv_in) : std::move(a.norm1_out);
  keep.ctx = std::move(a.ctx);
  keep.norm2_out = tp.sequence_parallel ? std::move(fc1_in) : std::move(a.norm2_out);
  keep.act_out = std::move(a.act_out);
  keep.d_qkv = std::move(a.d_qkv);
  keep.d_proj = std::move(a.d_proj);
  keep.d_fc1 = std::move(a.d_fc1);
  keep.d_fc2 = std::move(a.d_fc2);
  a = std::move(keep);
}

template <typename T>
void layer_weight_backward(const LayerContext& c, LayerGrads<T>& g, LayerActivations<T>& a,
                           Workspace<T>& ws) {
  const ModelConfig& m = c.model;
  const TensorParallel& tp = c.tp;
  const int N = c.B * m.seq_length, h = m.hidden_size;
  const int attn = m.num_attention_heads * m.head_dim();
  // every linear's input as B kept it: all N rows (with sp the gathered norm outputs); an
  // MoE layer's B did its experts' and router's
  if (!m.moe.is_moe_layer(c.layer)) {
    kernels::GemmLabel label("mlp");
    linear_weight_backward(tp, linear(c, ws, FC2), g.fc2_w, (T*)nullptr, a.d_fc2.data(),
                           a.act_out.data(), N, m.ffn(), h);
    linear_weight_backward(tp, linear(c, ws, FC1), g.fc1_w, g.fc1_b, a.d_fc1.data(),
                           a.norm2_out.data(), N, h, m.fc1_size());
  }
  kernels::GemmLabel attention_label("attention");
  linear_weight_backward(tp, linear(c, ws, PROJ), g.proj_w, (T*)nullptr, a.d_proj.data(),
                         a.ctx.data(), N, attn, h);
  linear_weight_backward(tp, linear(c, ws, QKV), g.qkv_w, g.qkv_b, a.d_qkv.data(),
                         a.norm1_out.data(), N, h, m.qkv_size());
  a = LayerActivations<T>();
}

template <typename T>
void Workspace<T>::ensure(const ModelConfig& m, const TensorParallel& tp,
                          const ContextParallel& cp, kernels::Device dev, int B,
                          bool fp8_decoded_weight) {
  const int N = B * m.seq_length;
  if (N == tokens) return;
  tokens = N;
  const size_t n = N, Nl = tp.local_tokens(N), h = m.hidden_size;
  const size_t A = m.num_attention_heads, G = m.groups(), d = m.head_dim();
  const bool sp = tp.sequence_parallel;
  const Category ws = Category::WORKSPACE;
  dres.allocate(dev, Nl * h, ws);
  tmp_h.allocate(dev, n * h, ws);
  if (sp) tmp_l.allocate(dev, Nl * h, ws); else tmp_l.reset();
  if (sp) gathered.allocate(dev, n * h, ws); else gathered.reset();
  qkv.allocate(dev, n * m.qkv_size(), ws);
  o_heads.allocate(dev, n * A * d, ws);
  dctx.allocate(dev, n * A * d, ws);
  do_heads.allocate(dev, n * A * d, ws);
  dq.allocate(dev, n * A * d, ws);
  dk.allocate(dev, n * G * d, ws);
  dv.allocate(dev, n * G * d, ws);
  // the dense MLP's gradients: not when every layer is MoE (model/moe.cpp has its own)
  bool dense_mlp = false;
  for (int l = 0; l < m.num_layers; ++l) dense_mlp = dense_mlp || !m.moe.is_moe_layer(l);
  if (dense_mlp) {
    dact.allocate(dev, n * m.ffn(), ws);
    dfc1.allocate(dev, n * m.fc1_size(), ws);
  } else {
    dact.reset();
    dfc1.reset();
  }
  core.ensure(core_shape(m, B, cp), spec_of(cp), dev);
  if (m.fused_cross_entropy) xf.allocate(dev, n * h, ws); else xf.reset();
  if (m.fused_cross_entropy && sp) {
    xf_local.allocate(dev, Nl * h, ws);
    dxf_full.allocate(dev, n * h, ws);
  } else {
    xf_local.reset();
    dxf_full.reset();
  }
  losses.allocate(dev, n, ws);
  loss_scratch.allocate(dev, 3 * (size_t)std::min(N, std::max(1, m.cross_entropy_chunk)), ws);
  if (m.fp8.enabled) {  // the dense linears' (in, out): qkv, proj, and a dense MLP's fc1, fc2
    std::vector<std::pair<int, int>> linears = {{m.hidden_size, m.qkv_size()},
                                                {(int)(A * d), m.hidden_size}};
    if (dense_mlp) linears.insert(linears.end(), {{m.hidden_size, m.fc1_size()},
                                                  {m.ffn(), m.hidden_size}});
    fp8.allocate(dev, m.fp8, N, linears, fp8_decoded_weight ? (int)sizeof(T) : 0,
                 Category::FP8_OPERANDS);
  } else {
    fp8 = Fp8Scratch();
  }
}

template struct Workspace<float>;
template struct Workspace<kernels::bf16>;
template struct Workspace<kernels::fp16>;
template void layer_forward(const LayerContext&, const LayerWeights<float>&, const float*,
                            LayerActivations<float>&, Workspace<float>&);
template void layer_forward(const LayerContext&, const LayerWeights<kernels::bf16>&,
                            const kernels::bf16*, LayerActivations<kernels::bf16>&,
                            Workspace<kernels::bf16>&);
template void layer_forward(const LayerContext&, const LayerWeights<kernels::fp16>&,
                            const kernels::fp16*, LayerActivations<kernels::fp16>&,
                            Workspace<kernels::fp16>&);
template void layer_backward(const LayerContext&, const LayerWeights<float>&, LayerGrads<float>&,
                             const float*, LayerActivations<float>&, Workspace<float>&,
                             BackwardPart);
template void layer_backward(const LayerContext&, const LayerWeights<kernels::bf16>&,
                             LayerGrads<kernels::bf16>&, const kernels::bf16*,
                             LayerActivations<kernels::bf16>&, Workspace<kernels::bf16>&,
                             BackwardPart);
template void layer_backward(const LayerContext&, const LayerWeights<kernels::fp16>&,
                             LayerGrads<kernels::fp16>&, const kernels::fp16*,
                             LayerActivations<kernels::fp16>&, Workspace<kernels::fp16>&,
                             BackwardPart);
template void layer_weight_backward(const LayerContext&, LayerGrads<float>&,
                                    LayerActivations<float>&, Workspace<float>&);
template void layer_weight_backward(const LayerContext&, LayerGrads<kernels::bf16>&,
                                    LayerActivations<kernels::bf16>&, Workspace<kernels::bf16>&);
template void layer_weight_backward(const LayerContext&, LayerGrads<kernels::fp16>&,
                                    LayerActivations<kernels::fp16>&, Workspace<kernels::fp16>&);

}  // namespace paralab
