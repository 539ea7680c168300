#!/usr/bin/env python3
"""bench/gpu/fp8_torch.py: PyTorch's GEMMs at one square size, the anchor of bench/gpu/fp8.sh's
paralab rows (trainer --benchmark): bf16 (torch.matmul) and FP8 (torch._scaled_mm, E4M3 x E4M3
with per-tensor fp32 scales into bf16: the cuBLASLt call paralab's per-tensor FP8 GEMM makes).

    python3 bench/gpu/fp8_torch.py --n 8192 --out torch_gemm.json

Each: 3 warm-up calls, then the best of 3 trials of enough calls to last ~0.05 s (CUDA events),
2 n^3 FLOPs per call. Writes one JSON object: {"n", "bf16_tflops", "fp8_tflops", "torch",
"errors"}; a GEMM that fails (no FP8 on the GPU, an older torch) is null with its error.
"""
import argparse
import json
import sys


def best_seconds(torch, call, trial_s=0.05, trials=3):
    for _ in range(3):
        call()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    call()
    end.record()
    end.synchronize()
    once = max(start.elapsed_time(end) / 1e3, 1e-6)
    calls = max(1, min(1000, int(trial_s / once)))
    best = float("inf")
    for _ in range(trials):
        start.record()
        for _ in range(calls):
            call()
        end.record()
        end.synchronize()
        best = min(best, start.elapsed_time(end) / 1e3 / calls)
    return best


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--n", type=int, required=True)
    p.add_argument("--out", required=True)
    a = p.parse_args()
    out = {"n": a.n, "bf16_tflops": None, "fp8_tflops": None, "torch": None, "errors": {}}
    try:
        import torch
        out["torch"] = torch.__version__
        n, flops = a.n, 2.0 * a.n ** 3
        x = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
        t = best_seconds(torch, lambda: torch.matmul(x, w))
        out["bf16_tflops"] = flops / t / 1e12
        try:
            # _scaled_mm wants A row-major and B column-major: B = w8^T of a row-major w8
            x8 = x.to(torch.float8_e4m3fn)
            w8 = w.to(torch.float8_e4m3fn)
            one = torch.ones((), device="cuda", dtype=torch.float32)
            f = lambda: torch._scaled_mm(x8, w8.t(), scale_a=one, scale_b=one,
                                         out_dtype=torch.bfloat16)
            t = best_seconds(torch, f)
            out["fp8_tflops"] = flops / t / 1e12
        except Exception as e:  # no FP8 tensor cores, or an API this torch lacks
            out["errors"]["fp8"] = f"{type(e).__name__}: {e}"[:300]
    except Exception as e:
        out["errors"]["bf16"] = f"{type(e).__name__}: {e}"[:300]
    json.dump(out, open(a.out, "w"))
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
