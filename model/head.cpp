// model/head.cpp: the head unit of the model (the last stage's): the final norm, the output layer and the loss
// (notes/model.md).
//
// The output layer is column-parallel over the vocabulary: each tp rank multiplies the full
// final-norm output xf (all-gathered with sequence parallelism) by its V/t rows of the
// output weight (gpt: the tied embedding table) and computes the softmax cross-entropy with
// vocab_parallel_cross_entropy, so no rank ever holds a row of all V logits. At tp 1 this is
// the fused loss of a single rank.
//
// The loss is fused by default (--no-fused-ce turns it off): tokens go through in chunks of
// `cross_entropy_chunk`; per chunk the logits are computed, turned in place into their
// gradient, and immediately multiplied back: d(xf) = dlogits W and dW += dlogits^T xf. So
// the head's backward runs inside the forward and what it leaves for backward is d(xf).
#include <algorithm>
#include "kernels/ops.h"
#include "model/transformer_state.h"

namespace paralab {

namespace {
// Real vocabulary columns among this rank's V_l (the last rank's may be padding).
int valid_columns(const ModelConfig& full, int vocab_rows, int rank) {
  return std::max(0, std::min(vocab_rows, full.vocab_size - rank * vocab_rows));
}

// Every tp rank has every token's loss (the loss's all-reduces made them equal): the mean over
// the valid targets, the microbatch's loss.
float mean_token_loss(kernels::Device dev, const float* token_losses, int N, int valid) {
  std::vector<float> losses(N);
  kernels::memcpy_to_host(dev, losses.data(), token_losses, N * sizeof(float));
  double sum = 0.0;
  for (int i = 0; i < N; ++i) sum += losses[i];
  return valid > 0 ? (float)(sum / valid) : 0.0f;
}

}  // namespace

template <typename T>
float Transformer::head_forward(State<T>& s, InFlight<T>& f, const T* x, int valid) {
  kernels::GemmLabel label("head");
  UnitParams dp(*dp_, expert_dp_);
  const ModelConfig& m = local_;
  const int N = f.B * m.seq_length, V = m.vocab_size;
  const int cols = valid_columns(config_, V, tp_.rank());
  const T* H = static_cast<const T*>(dp.acquire_params(head_unit_, true));
  const T* xf_full = head_final_norm(s, f, H, x);

  // ---- output layer and loss: the gradient of the mean loss over the valid tokens, x grad_scale
  const float ce_scale = valid > 0 ? f.grad_scale / valid : 0.0f;
  const bool keep = keep_logits_ && tp_.size() == 1;
  if (keep) {
    last_logits_.assign((size_t)N * V, 0.0f);
    last_logits_columns_ = V;
    last_logits_valid_ = cols;
  }
  // the output weight: in the head unit, or (gpt on one stage) the embedding's word table
  const TensorView& head = view(m.tied_embeddings() ? "embedding.word" : "output.weight");
  const bool elsewhere = head.unit != head_unit_;
  const T* W = (elsewhere ? static_cast<const T*>(dp.acquire_params(head.unit, true)) : H) +
               head.unit_offset;
  if (m.fused_cross_entropy) {
    // evaluation (forward_only): the loss of each chunk only; no gradient is made or written
    T* dW = f.forward_only ? nullptr : static_cast<T*>(dp.grads(head.unit)) + head.unit_offset;
    head_fused_loss(s, f, xf_full, W, dW, ce_scale, cols, keep);
  } else {
    head_unfused_loss(s, f, xf_full, W, ce_scale, cols, keep);
  }
  if (elsewhere) dp.release_params(head.unit);
  dp.release_params(head_unit_);
  return mean_token_loss(device_, s.ws.losses.data(), N, valid);
}

// The final norm on this rank's tokens (xf: scratch when the loss is fused, else saved for the
// backward), then every token's xf for the column-parallel output layer (f, or g-bar with sp).
template <typename T>
const T* Transformer::head_final_norm(State<T>& s, InFlight<T>& f, const T* H, const T* x) {
  const ModelConfig& m = local_;
  const kernels::Device dev = device_;
  const int h = m.hidden_size, N = f.B * m.seq_length, Nl = tp_.local_tokens(N);
  const Category act = Category::ACTIVATIONS;
  Workspace<T>& ws = s.ws;
  if (m.is_gpt()) f.final_mean.allocate(dev, Nl, act);
  f.final_rstd.allocate(dev, Nl, act);
  T* xf;
  if (!m.fused_cross_entropy) {
    f.xf_saved.allocate(dev, (size_t)Nl * h, act);
    xf = f.xf_saved.data();
  } else {
    xf = tp_.sequence_parallel ? ws.xf_local.data() : ws.xf.data();
  }
  const T* fw = H + view("final_norm.weight").unit_offset;
  if (m.is_gpt())
    kernels::layernorm_forward(dev, xf, f.final_mean.data(), f.final_rstd.data(), x, fw,
                               H + view("final_norm.bias").unit_offset, Nl, h, m.norm_epsilon);
  else
    kernels::rmsnorm_forward(dev, xf, f.final_rstd.data(), x, fw, Nl, h, m.norm_epsilon);
  return tp_.enter_column_parallel(xf, m.fused_cross_entropy ? ws.xf.data() : ws.gathered.data(),
                                   N, h);
}

// The fused loss: per chunk of tokens the logits, turned in place into their gradient (x
// ce_scale) and multiplied straight back, d(xf) = dlogits W and dW += dlogits^T xf, so that no
// N x V logits are ever held; without dW (evaluation) only the chunks' losses.
template <typename T>
void Transformer::head_fused_loss(State<T>& s, InFlight<T>& f, const T* xf_full, const T* W,
                                  T* dW, float ce_scale, int cols, bool keep) {
  const ModelConfig& m = local_;
  const kernels::Device dev = device_;
  const int h = m.hidden_size, N = f.B * m.seq_length, V = m.vocab_size;
  const int chunk = std::min(N, std::max(1, m.cross_entropy_chunk));
  const Category act = Category::ACTIVATIONS;
  Workspace<T>& ws = s.ws;
  const bool grad = !f.forward_only;
  // this rank's partial d(xf) over all N tokens, summed over tp below
  T* dxf_full = ws.dxf_full.data();
  if (grad && !tp_.sequence_parallel) {  // reduced in place: it is the saved d(xf) itself
    f.dxf.allocate(dev, (size_t)N * h, act);
    dxf_full = f.dxf.data();
  }
  Buffer<float> logits(dev, (size_t)chunk * V, Category::LOGITS);
  Buffer<T> dlogits_scratch;  // bf16 only: the loss gradient rounded for the GEMMs
  for (int t0 = 0; t0 < N; t0 += chunk) {
    const int n = std::min(chunk, N - t0);
    kernels::gemm(dev, false, true, n, V, h, 1.0f, xf_full + (size_t)t0 * h, h, W, h, 0.0f,
                  logits.data(), V);
    if (keep)
      kernels::memcpy_to_host(dev, last_logits_.data() + (size_t)t0 * V, logits.data(),
                              (size_t)n * V * sizeof(float));
    vocab_parallel_cross_entropy(tp_, ws.losses.data() + t0, logits.data(),
                                 f.targets.data() + t0, ws.loss_scratch.data(), n, V, cols,
                                 ce_scale);
    if (!grad) continue;
    // d(xf) = dlogits W;  dW += dlogits^T xf
    const T* dlogits = loss_gradient_as<T>(dev, logits.data(), (size_t)chunk * V, dlogits_scratch);
    kernels::gemm(dev, false, false, n, h, V, 1.0f, dlogits, V, W, h, 0.0f,
                  dxf_full + (size_t)t0 * h, h);
    kernels::gemm(dev, true, false, V, h, n, 1.0f, dlogits, V, xf_full + (size_t)t0 * h, h,
                  1.0f, dW, h);
  }
  // the output layer's input gradient: summed over tp (f's backward, g-bar's with sp)
  if (grad && tp_.sequence_parallel) f.dxf.allocate(dev, (size_t)tp_.local_tokens(N) * h, act);
  if (grad) tp_.enter_column_parallel_backward(dxf_full, f.dxf.data(), N, h);
}

// --no-fused-ce: every token's logits at once, saved for head_backward, and the loss per chunk.
template <typename T>
void Transformer::head_unfused_loss(State<T>& s, InFlight<T>& f, const T* xf_full, const T* W,
                                    float ce_scale, int cols, bool keep) {
  const ModelConfig& m = local_;
  const kernels::Device dev = device_;
  const int h = m.hidden_size, N = f.B * m.seq_length, V = m.vocab_size;
  const int chunk = std::min(N, std::max(1, m.cross_entropy_chunk));
  Workspace<T>& ws = s.ws;
  f.logits.allocate(dev, (size_t)N * V, Category::LOGITS);
  kernels::gemm(dev, false, true, N, V, h, 1.0f, xf_full, h, W, h, 0.0f, f.logits.data(), V);
  if (keep)
    kernels::memcpy_to_host(dev, last_logits_.data(), f.logits.data(),
                            (size_t)N * V * sizeof(float));
  for (int t0 = 0; t0 < N; t0 += chunk)
    vocab_parallel_cross_entropy(tp_, ws.losses.data() + t0, f.logits.data() + (size_t)t0 * V,
                                 f.targets.data() + t0, ws.loss_scratch.data(),
                                 std::min(chunk, N - t0), V, cols, ce_scale);
}

template <typename T>
void Transformer::head_backward(State<T>& s, InFlight<T>& f) {
  kernels::GemmLabel label("head");
  UnitParams dp(*dp_, expert_dp_);
  const ModelConfig& m = local_;
  const kernels::Device dev = device_;
  const int h = m.hidden_size, N = f.B * m.seq_length, Nl = tp_.local_tokens(N);
  const int V = m.vocab_size, H_unit = head_unit_;
  Workspace<T>& ws = s.ws;

  const T* H = static_cast<const T*>(dp.acquire_params(H_unit, false));
  const T* d_local = f.dxf.data();  // fused: reduced in forward
  if (!m.fused_cross_entropy) {
    // d(xf) = dlogits W, dW += dlogits^T xf (xf all-gathered again with sp), summed over tp
    const TensorView& head = view(m.tied_embeddings() ? "embedding.word" : "output.weight");
    const bool elsewhere = head.unit != H_unit;
    const T* W = (elsewhere ? static_cast<const T*>(dp.acquire_params(head.unit, false)) : H) +
                 head.unit_offset;
    T* dW = static_cast<T*>(dp.grads(head.unit)) + head.unit_offset;
    Buffer<T> dlogits_scratch;
    const T* dlogits = loss_gradient_as<T>(dev, f.logits.data(), (size_t)N * V, dlogits_scratch);
    const T* xf_full = tp_.enter_column_parallel(f.xf_saved.data(), ws.gathered.data(), N, h);
    f.dxf.allocate(dev, (size_t)N * h, Category::WORKSPACE);
    kernels::gemm(dev, false, false, N, h, V, 1.0f, dlogits, V, W, h, 0.0f, f.dxf.data(), h);
    kernels::gemm(dev, true, false, V, h, N, 1.0f, dlogits, V, xf_full, h, 1.0f, dW, h);
    if (elsewhere) dp.release_params(head.unit);
    f.logits.reset();
    f.xf_saved.reset();
    d_local = tp_.enter_column_parallel_backward(f.dxf.data(), ws.tmp_l.data(), N, h);
  }
  // the final norm's backward writes d(last layer output) into dres
  T* G = static_cast<T*>(dp.grads(H_unit));
  T* dres = ws.dres.data();
  kernels::memset_zero(dev, dres, (size_t)Nl * h * sizeof(T));
  const T* x_last = f.acts.empty() ? f.input.data() : f.acts.back().out.data();
  const size_t fw = view("final_norm.weight").unit_offset;
  if (m.is_gpt()) {
    const size_t fb = view("final_norm.bias").unit_offset;
    kernels::layernorm_backward(dev, dres, G + fw, G + fb, d_local, x_last, H + fw,
                                f.final_mean.data(), f.final_rstd.data(), Nl, h);
  } else {
    kernels::rmsnorm_backward(dev, dres, G + fw, d_local, x_last, H + fw, f.final_rstd.data(),
                              Nl, h);
  }
  dp.release_params(H_unit);
  dp.backward_done(H_unit);
  f.dxf.reset();
  f.final_mean.reset();
  f.final_rstd.reset();
}

template float Transformer::head_forward(State<float>&, InFlight<float>&, const float*, int);
template float Transformer::head_forward(State<kernels::bf16>&, InFlight<kernels::bf16>&,
                                         const kernels::bf16*, int);
template float Transformer::head_forward(State<kernels::fp16>&, InFlight<kernels::fp16>&,
                                         const kernels::fp16*, int);
template void Transformer::head_backward(State<float>&, InFlight<float>&);
template void Transformer::head_backward(State<kernels::bf16>&, InFlight<kernels::bf16>&);
template void Transformer::head_backward(State<kernels::fp16>&, InFlight<kernels::fp16>&);

}  // namespace paralab
