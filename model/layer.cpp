// model/layer.cpp: one pre-norm transformer layer, forward and backward (notes/model.md).
//
//   x_mid = x + dropout(proj(attention(qkv(norm1(x)))))
//   out   = x_mid + dropout(fc2(act(fc1(norm2(x_mid)))))      act = gelu (gpt) | swiglu (llama)
//
// With tensor parallelism (parallel/tensor_parallel.h) qkv and fc1 are column-parallel, proj
// and fc2 row-parallel, and each block is bracketed by the conjugate operators:
//   u_full = enter_column_parallel(norm(x))      f (identity) | sp: all-gather
//   y      = exit_row_parallel(partial)          g (all-reduce) | sp: reduce-scatter
// so the code below is the single-rank layer with those two calls around each block. N is
// the microbatch's tokens; N_l = N, or N/t with sequence parallelism, is what the norms,
// dropout and residual see.
// A linear layer y = x W^T + b (W stored (out, in) like PyTorch) has backward
//   dx = dy W,  dW += dy^T x,  db += colsum(dy).
// The residual stream's gradient lives in ws.dres for the whole backward pass: each norm's
// backward ADDS its input gradient into it (the residual branch passes dres through as is).
#include "kernels/ops.h"
#include "model/layer.h"

namespace paralab {

namespace {

using kernels::Device;

// Allocates every saved tensor of this layer for this microbatch.
template <typename T>
void allocate_activations(const LayerContext& c, LayerActivations<T>& a) {
  const ModelConfig& m = c.model;
  const Device dev = c.device;
  const size_t N = (size_t)c.B * m.seq_length, h = m.hidden_size, S = m.seq_length;
  const size_t Nl = c.tp.local_tokens((int)N);
  const size_t A = m.num_attention_heads, G = m.groups(), d = m.head_dim();
  const Category act = Category::ACTIVATIONS;
  if (m.is_gpt()) a.norm1_mean.allocate(dev, Nl, act);
  a.norm1_rstd.allocate(dev, Nl, act);
  a.norm1_out.allocate(dev, Nl * h, act);
  a.q.allocate(dev, N * A * d, act);
  a.k.allocate(dev, N * G * d, act);
  a.v.allocate(dev, N * G * d, act);
  if (m.attention == AttentionImpl::NAIVE) {
    a.probs.allocate(dev, c.B * A * S * S, act);
    if (m.attention_dropout > 0.0f) {
      a.attn_mask.allocate(dev, c.B * A * S * S, act);
      a.probs_dropped.allocate(dev, c.B * A * S * S, act);
    }
  } else {
    a.lse.allocate(dev, c.B * A * S, act);
  }
  a.ctx.allocate(dev, N * A * d, act);
  if (m.hidden_dropout > 0.0f) a.proj_mask.allocate(dev, Nl * h, act);
  a.x_mid.allocate(dev, Nl * h, act);
  if (m.is_gpt()) a.norm2_mean.allocate(dev, Nl, act);
  a.norm2_rstd.allocate(dev, Nl, act);
  a.norm2_out.allocate(dev, Nl * h, act);
  a.fc1_out.allocate(dev, N * m.fc1_size(), act);
  a.act_out.allocate(dev, N * m.ffn(), act);
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
                int which) {
  const ModelConfig& m = c.model;
  const int N = c.B * m.seq_length, Nl = c.tp.local_tokens(N), h = m.hidden_size;
  T* y = c.tp.exit_row_parallel(ws.tmp_h.data(), ws.tmp_l.data(), N, h);
  if (bias) kernels::add_bias(c.device, y, bias, Nl, h);
  if (m.hidden_dropout > 0.0f)
    kernels::dropout_forward(c.device, y, mask, y, (size_t)Nl * h, m.hidden_dropout,
                             c.dropout_seed, hidden_stream(c, which));
  return y;
}

// Backward of finish_block: from d(block output) (N_l, h) to the full (N, h) gradient of
// the row-parallel output, accumulating the bias gradient (partial over tp with sp).
template <typename T>
const T* finish_block_backward(const LayerContext& c, Workspace<T>& ws, const T* dout,
                               const uint8_t* mask, T* dbias) {
  const ModelConfig& m = c.model;
  const int N = c.B * m.seq_length, Nl = c.tp.local_tokens(N), h = m.hidden_size;
  const T* dy = dout;
  if (m.hidden_dropout > 0.0f) {
    T* local = c.tp.sequence_parallel ? ws.tmp_l.data() : ws.tmp_h.data();
    kernels::dropout_backward(c.device, local, dout, mask, (size_t)Nl * h, m.hidden_dropout);
    dy = local;
  }
  if (dbias) kernels::bias_backward(c.device, dbias, dy, Nl, h);
  return c.tp.exit_row_parallel_backward(dy, ws.gathered.data(), N, h);
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
  allocate_activations(c, a);

  // ---- attention block: norm, qkv (column-parallel), attention on local heads,
  //      proj (row-parallel), dropout, residual
  norm_forward(c, a.norm1_out.data(), a.norm1_mean, a.norm1_rstd, x, w.norm1_w, w.norm1_b, Nl);
  const T* u = tp.enter_column_parallel(a.norm1_out.data(), ws.gathered.data(), N, h);
  column_parallel_forward(tp, ws.qkv.data(), u, w.qkv_w, w.qkv_b, N, h, m.qkv_size());
  kernels::qkv_split_forward(dev, a.q.data(), a.k.data(), a.v.data(), ws.qkv.data(), c.B,
                             m.seq_length, m.num_attention_heads, m.groups(), m.head_dim(),
                             m.is_gpt() ? 0.0f : m.rope_theta);
  attention_forward(c, a, ws);
  row_parallel_forward(tp, ws.tmp_h.data(), a.ctx.data(), w.proj_w, N, attn, h);
  const T* y = finish_block(c, ws, w.proj_b, a.proj_mask.data(), 2);
  kernels::add(dev, a.x_mid.data(), x, y, (size_t)Nl * h);

  // ---- MLP block: norm, fc1 (column-parallel), activation, fc2 (row-parallel), residual
  norm_forward(c, a.norm2_out.data(), a.norm2_mean, a.norm2_rstd, a.x_mid.data(), w.norm2_w,
               w.norm2_b, Nl);
  const T* u2 = tp.enter_column_parallel(a.norm2_out.data(), ws.gathered.data(), N, h);
  column_parallel_forward(tp, a.fc1_out.data(), u2, w.fc1_w, w.fc1_b, N, h, m.fc1_size());
  if (m.is_gpt())
    kernels::gelu_forward(dev, a.act_out.data(), a.fc1_out.data(), (size_t)N * m.ffn());
  else
    kernels::swiglu_forward(dev, a.act_out.data(), a.fc1_out.data(), N, m.ffn());
  row_parallel_forward(tp, ws.tmp_h.data(), a.act_out.data(), w.fc2_w, N, m.ffn(), h);
  const T* y2 = finish_block(c, ws, w.fc2_b, a.fc2_mask.data(), 3);
  kernels::add(dev, a.out.data(), a.x_mid.data(), y2, (size_t)Nl * h);
}

template <typename T>
void layer_backward(const LayerContext& c, const LayerWeights<T>& w, LayerGrads<T>& g, const T* x,
                    LayerActivations<T>& a, Workspace<T>& ws) {
  const ModelConfig& m = c.model;
  const TensorParallel& tp = c.tp;
  const Device dev = c.device;
  const int N = c.B * m.seq_length, Nl = tp.local_tokens(N), h = m.hidden_size;
  const int attn = m.num_attention_heads * m.head_dim();
  T* dres = ws.dres.data();

  // ---- MLP block: d(out) = dres flows to x_mid unchanged and into the MLP branch
  const T* dy = finish_block_backward(c, ws, dres, a.fc2_mask.data(), g.fc2_b);
  row_parallel_backward(tp, ws.dact.data(), g.fc2_w, dy, a.act_out.data(), w.fc2_w, N, m.ffn(),
                        h);
  if (m.is_gpt())
    kernels::gelu_backward(dev, ws.dfc1.data(), ws.dact.data(), a.fc1_out.data(),
                           (size_t)N * m.ffn());
  else
    kernels::swiglu_backward(dev, ws.dfc1.data(), ws.dact.data(), a.fc1_out.data(), N, m.ffn());
  // with sp the saved input is this rank's tokens only: gather it again for dW
  const T* u2 = tp.enter_column_parallel(a.norm2_out.data(), ws.gathered.data(), N, h);
  column_parallel_backward(tp, ws.tmp_h.data(), g.fc1_w, g.fc1_b, ws.dfc1.data(), u2, w.fc1_w,
                           N, h, m.fc1_size());
  const T* du2 = tp.enter_column_parallel_backward(ws.tmp_h.data(), ws.tmp_l.data(), N, h);
  norm_backward(c, dres, g.norm2_w, g.norm2_b, du2, a.x_mid.data(), w.norm2_w, a.norm2_mean,
                a.norm2_rstd, Nl);

  // ---- attention block: dres is now d(x_mid)
  dy = finish_block_backward(c, ws, dres, a.proj_mask.data(), g.proj_b);
  row_parallel_backward(tp, ws.dctx.data(), g.proj_w, dy, a.ctx.data(), w.proj_w, N, attn, h);
  attention_backward(c, a, ws);
  kernels::qkv_split_backward(dev, ws.qkv.data(), ws.dq.data(), ws.dk.data(), ws.dv.data(), c.B,
                              m.seq_length, m.num_attention_heads, m.groups(), m.head_dim(),
                              m.is_gpt() ? 0.0f : m.rope_theta);
  const T* u = tp.enter_column_parallel(a.norm1_out.data(), ws.gathered.data(), N, h);
  column_parallel_backward(tp, ws.tmp_h.data(), g.qkv_w, g.qkv_b, ws.qkv.data(), u, w.qkv_w, N,
                           h, m.qkv_size());
  const T* du = tp.enter_column_parallel_backward(ws.tmp_h.data(), ws.tmp_l.data(), N, h);
  norm_backward(c, dres, g.norm1_w, g.norm1_b, du, x, w.norm1_w, a.norm1_mean, a.norm1_rstd,
                Nl);
  a = LayerActivations<T>();  // release this microbatch's saved tensors
}

template <typename T>
void Workspace<T>::ensure(const ModelConfig& m, const TensorParallel& tp, kernels::Device dev,
                          int B) {
  const int N = B * m.seq_length;
  if (N == tokens) return;
  tokens = N;
  const size_t n = N, Nl = tp.local_tokens(N), h = m.hidden_size, S = m.seq_length;
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
  dact.allocate(dev, n * m.ffn(), ws);
  dfc1.allocate(dev, n * m.fc1_size(), ws);
  if (m.attention == AttentionImpl::NAIVE) {
    scores.allocate(dev, B * A * S * S, ws);
    dprobs.allocate(dev, B * A * S * S, ws);
  } else {
    scores.reset();
    dprobs.reset();
  }
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
}

template struct Workspace<float>;
template struct Workspace<kernels::bf16>;
template void layer_forward(const LayerContext&, const LayerWeights<float>&, const float*,
                            LayerActivations<float>&, Workspace<float>&);
template void layer_forward(const LayerContext&, const LayerWeights<kernels::bf16>&,
                            const kernels::bf16*, LayerActivations<kernels::bf16>&,
                            Workspace<kernels::bf16>&);
template void layer_backward(const LayerContext&, const LayerWeights<float>&, LayerGrads<float>&,
                             const float*, LayerActivations<float>&, Workspace<float>&);
template void layer_backward(const LayerContext&, const LayerWeights<kernels::bf16>&,
                             LayerGrads<kernels::bf16>&, const kernels::bf16*,
                             LayerActivations<kernels::bf16>&, Workspace<kernels::bf16>&);

}  // namespace paralab
