#!/usr/bin/env python3
"""Activation recompute, side by side: none, selective (core_attn; all three modules), full
uniform and full block, at equal batch, on the trainer's CPU backend.

usage: bench/recompute_ablation.py [--trainer ./trainer] [--steps 4] [--memory-budget MIB]
                                   [-- model and batch flags]

For each option it trains a few steps (--metrics-jsonl) and prints the last step's peak
activation memory (predicted by the plan and measured by the ledger), the recompute
buffers, the peak of the total, the step time, MFU and HFU (HFU counts the recomputed
forwards, MFU does not), and hardware over model FLOPs. Then, for --memory-budget (MiB per
rank), the largest micro batch whose planned peak fits under each option (`trainer --plan
--json`, nothing allocated): what recompute buys. Timings are whatever the machine gives
(no assertion); the memory columns are exact. Results: notes/performance.md.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

MODEL = ["--arch", "gpt", "--num-layers", "8", "--hidden-size", "256",
         "--num-attention-heads", "8", "--seq-length", "256", "--vocab-size", "4096",
         "--attention", "naive", "--hidden-dropout", "0.1", "--attention-dropout", "0.1",
         "--micro-batch-size", "4", "--global-batch-size", "4"]

OPTIONS = [
    ("none", []),
    ("selective core_attn", ["--recompute-granularity", "selective"]),
    ("selective all", ["--recompute-granularity", "selective",
                       "--recompute-modules", "core_attn", "mlp", "norm"]),
    ("full uniform 1", ["--recompute-granularity", "full", "--recompute-method", "uniform",
                        "--recompute-num-layers", "1"]),
    ("full uniform 4", ["--recompute-granularity", "full", "--recompute-method", "uniform",
                        "--recompute-num-layers", "4"]),
    ("full block 4", ["--recompute-granularity", "full", "--recompute-method", "block",
                      "--recompute-num-layers", "4"]),
]

MIB = 1024.0 * 1024.0


def train(trainer, flags, steps):
    """The last step's --metrics-jsonl record of a short run."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "m.jsonl")
        cmd = [trainer, *flags, "--device", "cpu", "--train-iters", str(steps),
               "--log-interval", "1000", "--report-interval", "0", "--metrics-jsonl", path]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL,
                       env={**os.environ, "OPENBLAS_NUM_THREADS": "1"})
        with open(path) as f:
            return [r for r in map(json.loads, filter(str.strip, f)) if r.get("type") == "step"][-1]


def planned_total(trainer, flags, mbs):
    """Rank 0's planned peak bytes at micro batch mbs (global batch = mbs)."""
    out = subprocess.run([trainer, *flags, "--plan", "--json", "--micro-batch-size", str(mbs),
                          "--global-batch-size", str(mbs)], check=True, capture_output=True,
                         text=True).stdout
    return json.loads(out)["memory"][0]["total"]


def largest_micro_batch(trainer, flags, budget_bytes, limit=4096):
    """The largest mbs whose planned total fits the budget (0: not even 1)."""
    if planned_total(trainer, flags, 1) > budget_bytes:
        return 0
    lo, hi = 1, 2
    while hi <= limit and planned_total(trainer, flags, hi) <= budget_bytes:
        lo, hi = hi, hi * 2
    hi = min(hi, limit + 1)
    while hi - lo > 1:  # planned memory grows with mbs: bisect
        mid = (lo + hi) // 2
        if planned_total(trainer, flags, mid) <= budget_bytes:
            lo = mid
        else:
            hi = mid
    return lo


def main():
    argv = sys.argv[1:]
    model = MODEL
    if "--" in argv:
        i = argv.index("--")
        model = argv[i + 1:]
        argv = argv[:i]
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trainer", default="./trainer")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--memory-budget", type=float, default=0,
                    help="MiB per rank: report the largest micro batch that fits, per option")
    args = ap.parse_args(argv)

    print("model:", " ".join(model))
    head = (f"{'option':22} {'act pred':>9} {'act meas':>9} {'recomp':>7} {'peak pred':>10}"
            f" {'peak meas':>10} {'ms':>8} {'MFU':>6} {'HFU':>6} {'hw/model':>8}")
    print(head + "\n" + "-" * len(head))
    base_ms = None
    for name, flags in OPTIONS:
        r = train(args.trainer, model + flags, args.steps)
        mem, fl = r["memory"], r["flops"]
        ms = r["step_ms"]
        base_ms = base_ms or ms
        print(f"{name:22} {mem['activations']['predicted'] / MIB:9.2f}"
              f" {mem['activations']['measured'] / MIB:9.2f}"
              f" {mem['recompute']['measured'] / MIB:7.2f}"
              f" {mem['total']['predicted'] / MIB:10.2f} {mem['total']['measured'] / MIB:10.2f}"
              f" {ms:8.1f} {100 * r['mfu']:5.1f}% {100 * r['hfu']:5.1f}%"
              f" {fl['hardware_per_step'] / fl['model_per_step']:8.3f}")
    print("(MiB per rank; act = category activations, recomp = category recompute; ms = the "
          "last step's time)")
    if args.memory_budget > 0:
        budget = args.memory_budget * MIB
        print(f"\nlargest micro batch under {args.memory_budget:g} MiB per rank (plan):")
        for name, flags in OPTIONS:
            print(f"  {name:22} {largest_micro_batch(args.trainer, model + flags, budget):6d}")


if __name__ == "__main__":
    main()
