// model/layer.cpp: one pre-norm transformer layer, forward and backward (notes/model.md).
//
//   x_mid = x + dropout(proj(attention(qkv(norm1(x)))))
//   out   = x_mid + dropout(fc2(act(fc1(norm2(x_mid)))))      act = gelu (gpt) | swiglu (llama)
//
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
  const size_t A = m.num_attention_heads, G = m.groups(), d = m.head_dim();
  const Category act = Category::ACTIVATIONS;
  if (m.is_gpt()) a.norm1_mean.allocate(dev, N, act);
  a.norm1_rstd.allocate(dev, N, act);
  a.norm1_out.allocate(dev, N * h, act);
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
  if (m.hidden_dropout > 0.0f) a.proj_mask.allocate(dev, N * h, act);
  a.x_mid.allocate(dev, N * h, act);
  if (m.is_gpt()) a.norm2_mean.allocate(dev, N, act);
  a.norm2_rstd.allocate(dev, N, act);
  a.norm2_out.allocate(dev, N * h, act);
  a.fc1_out.allocate(dev, N * m.fc1_size(), act);
  a.act_out.allocate(dev, N * m.ffn(), act);
  if (m.hidden_dropout > 0.0f) a.fc2_mask.allocate(dev, N * h, act);
  a.out.allocate(dev, N * h, act);
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

// y(N, out) = x(N, in) W^T + b
template <typename T>
void linear_forward(Device dev, T* y, const T* x, const T* W, const T* b, int N, int in,
                    int out) {
  kernels::gemm(dev, false, true, N, out, in, 1.0f, x, in, W, in, 0.0f, y, out);
  if (b) kernels::add_bias(dev, y, b, N, out);
}

// dx(N, in) = dy W (written, when dx != nullptr); dW += dy^T x; db += colsum(dy)
template <typename T>
void linear_backward(Device dev, T* dx, T* dW, T* db, const T* dy, const T* x, const T* W, int N,
                     int in, int out) {
  if (dx) kernels::gemm(dev, false, false, N, in, out, 1.0f, dy, out, W, in, 0.0f, dx, in);
  kernels::gemm(dev, true, false, out, in, N, 1.0f, dy, out, x, in, 1.0f, dW, in);
  if (db) kernels::bias_backward(dev, db, dy, N, out);
}

}  // namespace

template <typename T>
void layer_forward(const LayerContext& c, const LayerWeights<T>& w, const T* x,
                   LayerActivations<T>& a, Workspace<T>& ws) {
  const ModelConfig& m = c.model;
  const Device dev = c.device;
  const int N = c.B * m.seq_length, h = m.hidden_size;
  const int attn = m.num_attention_heads * m.head_dim();
  allocate_activations(c, a);

  // ---- attention block
  norm_forward(c, a.norm1_out.data(), a.norm1_mean, a.norm1_rstd, x, w.norm1_w, w.norm1_b, N);
  linear_forward(dev, ws.qkv.data(), a.norm1_out.data(), w.qkv_w, w.qkv_b, N, h, m.qkv_size());
  kernels::qkv_split_forward(dev, a.q.data(), a.k.data(), a.v.data(), ws.qkv.data(), c.B,
                             m.seq_length, m.num_attention_heads, m.groups(), m.head_dim(),
                             m.is_gpt() ? 0.0f : m.rope_theta);
  attention_forward(c, a, ws);
  linear_forward(dev, ws.tmp_h.data(), a.ctx.data(), w.proj_w, w.proj_b, N, attn, h);
  if (m.hidden_dropout > 0.0f)
    kernels::dropout_forward(dev, ws.tmp_h.data(), a.proj_mask.data(), ws.tmp_h.data(),
                             (size_t)N * h, m.hidden_dropout, c.dropout_seed, 4ull * c.layer + 2);
  kernels::add(dev, a.x_mid.data(), x, ws.tmp_h.data(), (size_t)N * h);

  // ---- MLP block
  norm_forward(c, a.norm2_out.data(), a.norm2_mean, a.norm2_rstd, a.x_mid.data(), w.norm2_w,
               w.norm2_b, N);
  linear_forward(dev, a.fc1_out.data(), a.norm2_out.data(), w.fc1_w, w.fc1_b, N, h,
                 m.fc1_size());
  if (m.is_gpt())
    kernels::gelu_forward(dev, a.act_out.data(), a.fc1_out.data(), (size_t)N * m.ffn());
  else
    kernels::swiglu_forward(dev, a.act_out.data(), a.fc1_out.data(), N, m.ffn());
  linear_forward(dev, ws.tmp_h.data(), a.act_out.data(), w.fc2_w, w.fc2_b, N, m.ffn(), h);
  if (m.hidden_dropout > 0.0f)
    kernels::dropout_forward(dev, ws.tmp_h.data(), a.fc2_mask.data(), ws.tmp_h.data(),
                             (size_t)N * h, m.hidden_dropout, c.dropout_seed, 4ull * c.layer + 3);
  kernels::add(dev, a.out.data(), a.x_mid.data(), ws.tmp_h.data(), (size_t)N * h);
}

template <typename T>
void layer_backward(const LayerContext& c, const LayerWeights<T>& w, LayerGrads<T>& g, const T* x,
                    LayerActivations<T>& a, Workspace<T>& ws) {
  const ModelConfig& m = c.model;
  const Device dev = c.device;
  const int N = c.B * m.seq_length, h = m.hidden_size;
  const int attn = m.num_attention_heads * m.head_dim();
  T* dres = ws.dres.data();

  // ---- MLP block: d(out) = dres flows to x_mid unchanged and into the MLP branch
  const T* dy = dres;
  if (m.hidden_dropout > 0.0f) {
    kernels::dropout_backward(dev, ws.tmp_h.data(), dres, a.fc2_mask.data(), (size_t)N * h,
                              m.hidden_dropout);
    dy = ws.tmp_h.data();
  }
  linear_backward(dev, ws.dact.data(), g.fc2_w, g.fc2_b, dy, a.act_out.data(), w.fc2_w, N,
                  m.ffn(), h);
  if (m.is_gpt())
    kernels::gelu_backward(dev, ws.dfc1.data(), ws.dact.data(), a.fc1_out.data(),
                           (size_t)N * m.ffn());
  else
    kernels::swiglu_backward(dev, ws.dfc1.data(), ws.dact.data(), a.fc1_out.data(), N, m.ffn());
  linear_backward(dev, ws.tmp_h.data(), g.fc1_w, g.fc1_b, ws.dfc1.data(), a.norm2_out.data(),
                  w.fc1_w, N, h, m.fc1_size());
  norm_backward(c, dres, g.norm2_w, g.norm2_b, ws.tmp_h.data(), a.x_mid.data(), w.norm2_w,
                a.norm2_mean, a.norm2_rstd, N);

  // ---- attention block: dres is now d(x_mid)
  dy = dres;
  if (m.hidden_dropout > 0.0f) {
    kernels::dropout_backward(dev, ws.tmp_h.data(), dres, a.proj_mask.data(), (size_t)N * h,
                              m.hidden_dropout);
    dy = ws.tmp_h.data();
  }
  linear_backward(dev, ws.dctx.data(), g.proj_w, g.proj_b, dy, a.ctx.data(), w.proj_w, N, attn,
                  h);
  attention_backward(c, a, ws);
  kernels::qkv_split_backward(dev, ws.qkv.data(), ws.dq.data(), ws.dk.data(), ws.dv.data(), c.B,
                              m.seq_length, m.num_attention_heads, m.groups(), m.head_dim(),
                              m.is_gpt() ? 0.0f : m.rope_theta);
  linear_backward(dev, ws.tmp_h.data(), g.qkv_w, g.qkv_b, ws.qkv.data(), a.norm1_out.data(),
                  w.qkv_w, N, h, m.qkv_size());
  norm_backward(c, dres, g.norm1_w, g.norm1_b, ws.tmp_h.data(), x, w.norm1_w, a.norm1_mean,
                a.norm1_rstd, N);
  a = LayerActivations<T>();  // release this microbatch's saved tensors
}

template <typename T>
void Workspace<T>::ensure(const ModelConfig& m, kernels::Device dev, int B) {
  const int N = B * m.seq_length;
  if (N == tokens) return;
  tokens = N;
  const size_t n = N, h = m.hidden_size, S = m.seq_length, d = m.head_dim();
  const size_t A = m.num_attention_heads, G = m.groups();
  const Category ws = Category::WORKSPACE;
  dres.allocate(dev, n * h, ws);
  tmp_h.allocate(dev, n * h, ws);
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
  losses.allocate(dev, n, ws);
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
