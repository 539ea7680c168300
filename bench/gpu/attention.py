#!/usr/bin/env python3
"""bench/gpu/attention.py: paralab's tensor-core flash attention beside PyTorch's.

Reads the JSON lines of `op_check --attention-bench --dump DIR` (tests/gpu/op_check_attention_bench.cpp:
paralab's causal bf16 forward and backward, ms and TFLOP/s per shape, and a small run's tensors
in DIR), then on the same GPU:
  - times torch.nn.functional.scaled_dot_product_attention with the flash backend
    (torch.nn.attention.sdpa_kernel(SDPBackend.FLASH_ATTENTION)) at the same shapes: forward,
    and backward alone (autograd.grad on a kept graph), mean of --iters calls after 2 warm-up;
  - computes an fp32 reference (explicit softmax(Q K^T scale + causal mask) V and its autograd
    gradients, TF32 off) on the small run's bf16 inputs, and the error of each side against it:
    max |x - ref| / max |ref| per tensor, forward o, backward the worst of dq, dk, dv (PyTorch's
    flash on the very same bf16 inputs and dout);
  - prints a markdown table with the ratio paralab / PyTorch and the goals (H200, bf16, causal,
    D 128, seq 4096: forward >= 300 TFLOP/s, backward >= 200, neither below 0.8 x PyTorch).

FLOPs, both sides alike: forward 4 D pairs, backward 10 D pairs (2.5 x the forward, the
FlashAttention papers' count), pairs = B A S (S + 1) / 2 (causal).

  python3 bench/gpu/attention.py --paralab paralab.jsonl [--out attention.md] [--iters 10]
"""
import argparse
import json
import math
import sys

import numpy as np
import torch
import torch.nn.functional as F


def flash_context():
    """The flash backend of SDPA alone (newer and older PyTorch spell it differently)."""
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
        return sdpa_kernel(SDPBackend.FLASH_ATTENTION)
    except ImportError:
        return torch.backends.cuda.sdp_kernel(enable_flash=True, enable_math=False,
                                              enable_mem_efficient=False)


def pairs(B, A, S):
    return B * A * S * (S + 1) / 2


def time_ms(call, iters):
    for _ in range(2):
        call()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        call()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / iters


def torch_speed(B, A, S, D, iters):
    """PyTorch flash SDPA at (B, A, S, D) bf16, causal: (fwd ms, bwd ms)."""
    gen = torch.Generator(device="cuda").manual_seed(1)
    q, k, v = (torch.empty(B, A, S, D, device="cuda", dtype=torch.bfloat16).uniform_(-2, 2, generator=gen)
               for _ in range(3))
    dout = torch.empty_like(q).uniform_(-1, 1, generator=gen)
    with flash_context():
        with torch.no_grad():
            fwd = time_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True), iters)
        qg, kg, vg = (x.detach().requires_grad_(True) for x in (q, k, v))
        o = F.scaled_dot_product_attention(qg, kg, vg, is_causal=True)
        bwd = time_ms(lambda: torch.autograd.grad(o, (qg, kg, vg), dout, retain_graph=True), iters)
    return fwd, bwd


def load(prefix, name, shape, dtype):
    raw = np.fromfile(f"{prefix}_{name}.bin", dtype=np.int16 if dtype == "bf16" else np.float32)
    t = torch.from_numpy(raw.copy())
    if dtype == "bf16":
        t = t.view(torch.bfloat16)
    return t.reshape(shape).cuda()


def rel_err(x, ref):
    x, ref = x.float(), ref.float()
    if not torch.isfinite(x).all():
        return math.inf
    return ((x - ref).abs().max() / ref.abs().max().clamp_min(1e-30)).item()


def errors(rec):
    """Errors of paralab's dumped run and of PyTorch's flash on the same inputs, against fp32."""
    B, A, S, D = rec["dump_B"], rec["dump_A"], rec["S"], rec["D"]
    shape, prefix = (B, A, S, D), rec["dump"]
    q, k, v, dout = (load(prefix, n, shape, "bf16") for n in ("q", "k", "v", "dout"))
    scale = 1.0 / math.sqrt(D)
    # fp32 reference with autograd, one head at a time (S x S fp32 scores per head)
    torch.backends.cuda.matmul.allow_tf32 = False
    ref = {n: torch.empty(shape, device="cuda") for n in ("o", "dq", "dk", "dv")}
    mask = torch.ones(S, S, device="cuda", dtype=torch.bool).triu(1)
    for b in range(B):
        for h in range(A):
            q32, k32, v32 = (x[b, h].float().requires_grad_(True) for x in (q, k, v))
            s = (q32 @ k32.T) * scale
            p = torch.softmax(s.masked_fill(mask, -math.inf), dim=-1)
            o = p @ v32
            o.backward(dout[b, h].float())
            ref["o"][b, h], ref["dq"][b, h] = o.detach(), q32.grad
            ref["dk"][b, h], ref["dv"][b, h] = k32.grad, v32.grad
            del s, p, o
    mine = {"o": load(prefix, "o", shape, "bf16"), "dq": load(prefix, "dq", shape, "f32"),
            "dk": load(prefix, "dk", shape, "bf16"), "dv": load(prefix, "dv", shape, "bf16")}
    with flash_context():
        qg, kg, vg = (x.detach().requires_grad_(True) for x in (q, k, v))
        o = F.scaled_dot_product_attention(qg, kg, vg, is_causal=True)
        o.backward(dout)
    theirs = {"o": o.detach(), "dq": qg.grad, "dk": kg.grad, "dv": vg.grad}
    out = {}
    for side, t in (("paralab", mine), ("torch", theirs)):
        out[side + "_fwd_err"] = rel_err(t["o"], ref["o"])
        out[side + "_bwd_err"] = max(rel_err(t[n], ref[n]) for n in ("dq", "dk", "dv"))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--paralab", required=True, help="op_check --attention-bench JSON lines")
    ap.add_argument("--out", help="also write the table (markdown) here")
    ap.add_argument("--iters", type=int, default=10)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("attention.py: no CUDA device for PyTorch")
    rows = []
    with open(args.paralab) as f:
        recs = [json.loads(line) for line in f if line.startswith("{")]
    for rec in recs:
        B, A, S, D = rec["B"], rec["A"], rec["S"], rec["D"]
        t_fwd, t_bwd = torch_speed(B, A, S, D, args.iters)
        n = pairs(B, A, S)
        row = dict(rec, torch_fwd_ms=t_fwd, torch_bwd_ms=t_bwd,
                   torch_fwd_tflops=4 * D * n / (t_fwd * 1e-3) / 1e12,
                   torch_bwd_tflops=10 * D * n / (t_bwd * 1e-3) / 1e12)
        if "dump" in rec:
            row.update(errors(rec))
        rows.append(row)
        print(json.dumps(row), flush=True)
        torch.cuda.empty_cache()

    gpu = torch.cuda.get_device_name()
    lines = [f"flash attention, causal, bf16, on {gpu} (PyTorch {torch.__version__}); "
             "TFLOP/s with forward 4 D pairs, backward 10 D pairs, pairs = B A S (S+1) / 2; "
             "err = max |x - ref| / max |ref| against fp32 (fwd: o; bwd: worst of dq, dk, dv)",
             "",
             "| S | D | B x A | fwd paralab | fwd torch | ratio | bwd paralab | bwd torch | ratio "
             "| err fwd paralab / torch | err bwd paralab / torch |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        err = lambda k: f"{r.get('paralab_' + k, math.nan):.1e} / {r.get('torch_' + k, math.nan):.1e}"
        lines.append(
            f"| {r['S']} | {r['D']} | {r['B']} x {r['A']} | {r['fwd_tflops']:.0f} | "
            f"{r['torch_fwd_tflops']:.0f} | {r['fwd_tflops'] / r['torch_fwd_tflops']:.2f} | "
            f"{r['bwd_tflops']:.0f} | {r['torch_bwd_tflops']:.0f} | "
            f"{r['bwd_tflops'] / r['torch_bwd_tflops']:.2f} | {err('fwd_err')} | {err('bwd_err')} |")
    goal = [r for r in rows if r["S"] == 4096 and r["D"] == 128]
    if goal:
        r = goal[0]
        checks = [("forward >= 300 TFLOP/s", r["fwd_tflops"] >= 300),
                  ("backward >= 200 TFLOP/s", r["bwd_tflops"] >= 200),
                  ("forward >= 0.8 x PyTorch", r["fwd_tflops"] >= 0.8 * r["torch_fwd_tflops"]),
                  ("backward >= 0.8 x PyTorch", r["bwd_tflops"] >= 0.8 * r["torch_bwd_tflops"])]
        lines += ["", "goals (causal, D 128, seq 4096; set for an H200): " +
                  ", ".join(f"{name} {'MET' if ok else 'MISSED'}" for name, ok in checks)]
    table = "\n".join(lines)
    print(table)
    if args.out:
        with open(args.out, "w") as f:
            f.write(table + "\n")


if __name__ == "__main__":
    main()
