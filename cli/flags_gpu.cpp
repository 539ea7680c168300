// cli/flags_gpu.cpp: the precision flags a GPU cannot run, refused when the trainer has chosen
// its GPU (app/training_build.cpp), before any work: one line naming the flag, the GPU and its
// compute capability (docs/setup.md, "Older GPUs"). --plan plans for any hardware: not checked.
//
//   --bf16         compute capability 8.0 (Ampere) or later: bf16 tensor cores (cuBLAS's
//                  CUDA_R_16BF GEMMs) and the flash-mma kernels' bf16 mma.sync arrive with it.
//                  V100 (7.0) and T4 (7.5) have fp16 tensor cores only: fp32 or --fp16 there.
//   --fp8-format   delayed and tensorwise: 8.9 (Ada) or 9.0 (Hopper), the first with FP8 tensor
//                  cores, which cuBLASLt's FP8 GEMMs need (CUBLAS_STATUS_NOT_SUPPORTED before).
//                  blockwise: 8.0. Its GEMMs are emulated on every GPU (dequantised, then cuBLAS's
//                  fp32 GEMM: kernels/cuda/fp8_gemm.cu) and its casts have a software path before
//                  8.9 (kernels/cuda/fp8.cu), but the layers around the linears stay in bf16, as
//                  in Transformer Engine (docs/fp8.md), and bf16 needs 8.0.
//
// defines: gpu_precision_refusal
#include <cstdio>
#include <string>

#include "cli/flags.h"

namespace paralab {

namespace {
std::string capability_text(int cc) {
  char s[16];
  std::snprintf(s, sizeof s, "%d.%d", cc / 10, cc % 10);
  return s;
}
}  // namespace

std::string gpu_precision_refusal(const Options& o, const std::string& gpu, int cc) {
  if (cc <= 0) return "";  // no GPU: nothing to check here
  const std::string device = gpu + " (compute capability " + capability_text(cc) + ")";
  if (o.train.bf16 && cc < 80)
    return "--bf16: " + device + " has no bf16 tensor cores; bf16 needs compute capability 8.0 "
           "or later (A100, H100): train in fp32 or with --fp16";
  if (o.model.fp8.enabled) {
    const bool blockwise = o.model.fp8.recipe == Fp8Recipe::Blockwise;
    const int needed = blockwise ? 80 : 89;
    if (cc < needed)
      return std::string("--fp8-format: ") + device + (blockwise
          ? " cannot run --fp8-recipe blockwise, which needs compute capability 8.0 or later "
            "(its GEMMs are emulated on any GPU, the layers around them run in bf16)"
          : " has no FP8 tensor cores; --fp8-recipe " + std::string(fp8_recipe_name(o.model.fp8.recipe)) +
            " needs compute capability 8.9 or later (L40S, H100); --fp8-recipe blockwise runs "
            "from 8.0 (emulated GEMMs)");
  }
  return "";
}

}  // namespace paralab
