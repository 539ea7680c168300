// kernels/ops/init.h: the parameters' first values, drawn where they live.
// Twins: kernels/cpu/init.cpp, kernels/cuda/init.cu.
//
// Megatron initialises each weight from N(0, sigma). paralab draws element i of a full tensor
// (its index t in the model's full table) from the counter RNG keyed on (seed, 2t, i) and
// (seed, 2t + 1, i), Box-Muller (kernels/math.h init_normal_value): the value does not depend
// on the device, the parallel layout or which rank draws it, so every rank draws exactly the
// elements it stores (its tensor-parallel slice, its experts, its pipeline stage, its ZeRO-3
// shard) and nothing is drawn twice or copied from the host. The elements a rank stores are
// rectangles of the full tensor (model/param_table.h ShardBlock): element j of a rectangle of
// `cols` columns is the full tensor's full_offset + (j / cols) full_stride + j % cols.
//
// defines: init_normal, fill
#pragma once
#include "kernels/dispatch.h"

namespace kernels {

// out[j] ("=") for j < count: sigma x the normal of full element full_offset + (r / cols)
// full_stride + r % cols, r = first + j (local element r of the rectangle), drawn from
// streams (stream, stream + 1). Traffic: writes count elements.
template <Device Dev, class T>
void init_normal(T* out, int64_t first, int64_t count, int64_t cols, int64_t full_offset,
                 int64_t full_stride, uint64_t seed, uint64_t stream, float sigma);
template <class T>
void init_normal(Device d, T* out, int64_t first, int64_t count, int64_t cols,
                 int64_t full_offset, int64_t full_stride, uint64_t seed, uint64_t stream,
                 float sigma) {
  count_kernel((double)count * sizeof(T));
  ON_DEVICE(init_normal, T)(out, first, count, cols, full_offset, full_stride, seed, stream,
                            sigma);
}

// out[j] ("=") = value for j < n (biases 0, norm weights 1). Traffic: writes n elements.
template <Device Dev, class T> void fill(T* out, float value, size_t n);
template <class T> void fill(Device d, T* out, float value, size_t n) {
  count_kernel((double)n * sizeof(T));
  ON_DEVICE(fill, T)(out, value, n);
}

}  // namespace kernels
