#!/usr/bin/env python3
"""The pipeline bubble, measured against its predictions, for every schedule.

usage: bench/pipeline_bubble.py [--trainer ./trainer] [--pp 2] [--steps 4]
                               [--schedules gpipe,1f1b,interleaved,zb-h1] [--m 1,2,4]
                               [-- model flags]

For each schedule (gpipe, 1f1b, interleaved with v 2, zb-h1) and m microbatches per step
(--m: multiples of p) it runs `mpirun -np p trainer` and prints, from the last step of
--metrics-jsonl: the measured bubble (rank 0's pipeline: sum of idle / (p x longest run)),
the bubble the simulation predicts with the previous step's measured per-stage action
costs, and the plan's closed form with unit costs F 1, B 3 (zb-h1: B 2 + W 1) (`trainer --plan --json`,
"pipeline"). Every column is a fraction of the step, so the formula printed is the closed
form of the step (the plan's own label for interleaved and zb-h1 is the ideal-time form or
the idle time). Ratios only, no assertion: with more ranks than cores the ranks also wait
for a core, which the measurement counts as idle. Results: notes/performance.md.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

MODEL = ["--arch", "gpt", "--num-layers", "8", "--hidden-size", "256",
         "--num-attention-heads", "8", "--seq-length", "128", "--vocab-size", "2048",
         "--micro-batch-size", "2"]


def last_record(cmd):
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "m.jsonl")
        subprocess.run(cmd + ["--metrics-jsonl", path], check=True, stdout=subprocess.DEVNULL,
                       env={**os.environ, "OPENBLAS_NUM_THREADS": "1"})
        with open(path) as f:  # the last step's record (a run summary may follow it)
            return [r for r in map(json.loads, filter(str.strip, f)) if "step" in r][-1]


# The closed form of the bubble as a fraction of the step (the plan's "bubble_closed_form"):
# idle / (ideal + idle), ideal m(F+B+W), the idle time per schedule.
STEP_FORMULA = {
    "gpipe": "(p-1)/(m+p-1)",
    "1f1b": "(p-1)/(m+p-1)",
    "interleaved": "(p-1)/(vm+p-1)",
    "zb-h1": "I/(m(F+B+W)+I), I=(p-1)(F+B-W)",
}


def main():
    argv = sys.argv[1:]
    model = MODEL
    if "--" in argv:
        i = argv.index("--")
        model, argv = argv[i + 1:], argv[:i]
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trainer", default="./trainer")
    ap.add_argument("--pp", type=int, default=2)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--schedules", default="gpipe,1f1b,interleaved,zb-h1",
                    help="comma-separated schedules to run")
    ap.add_argument("--m", default="1,2,4", help="microbatches per step, in multiples of p")
    args = ap.parse_args(argv)
    p = args.pp
    schedules = [x for x in args.schedules.split(",") if x]
    unknown = [x for x in schedules if x not in STEP_FORMULA]
    if unknown:
        ap.error(f"--schedules: unknown {', '.join(unknown)} (one of {', '.join(STEP_FORMULA)})")
    ms = [int(x) * p for x in args.m.split(",") if x]
    mbs = int(model[model.index("--micro-batch-size") + 1])
    print("model:", " ".join(model), f"| pp {p}")
    fw = max(len("formula (of the step)"), *(len(STEP_FORMULA[x]) for x in schedules))
    head = (f"{'schedule':12} {'m':>3} {'measured':>9} {'predicted':>10} {'closed form':>12}"
            f"  {'formula (of the step)':{fw}} {'step ms':>8}")
    print(head + "\n" + "-" * len(head))
    for schedule in schedules:
        for m in ms:
            flags = model + ["--pp", str(p), "--pipeline-schedule", schedule,
                             "--global-batch-size", str(m * mbs)]
            if schedule == "interleaved":
                flags += ["--vpp", "2"]
            plan = json.loads(subprocess.run(
                [args.trainer, *flags, "--plan", "--json", "--world-size", str(p)],
                check=True, capture_output=True, text=True).stdout)["pipeline"]
            r = last_record(["mpirun", "-np", str(p), args.trainer, *flags, "--device", "cpu",
                             "--train-iters", str(args.steps), "--log-interval", "1000",
                             "--report-interval", "0"])
            print(f"{schedule:12} {m:3d} {100 * r['bubble']:8.1f}% {100 * r['bubble_predicted']:9.1f}%"
                  f" {100 * plan['bubble_closed_form']:11.1f}%  {STEP_FORMULA[schedule]:{fw}}"
                  f" {r['step_ms']:8.1f}")
    print("(bubble: idle fraction of the pipeline's run; predicted: the schedule simulated with"
          " the previous step's measured costs; closed form: unit costs F 1, B 3 (zb-h1: B 2 + W 1))")


if __name__ == "__main__":
    main()
