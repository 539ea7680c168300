#!/usr/bin/env python3
"""tests/mpi/time_ratio.py: the time model's projected step beside the measured one.

    time_ratio.py RUN.jsonl [--min R --max R] [--label NAME]

Reads rank 0's --metrics-jsonl step records ("time": {"step_s": {"projected", "measured"},
"gemm_s", "exposed_comm_s", "bubble_s"}), skips step 1 (first-touch page faults, thread
start), and prints one line: the medians of the measured and projected step, their ratio
(projected / measured) and the same for the GEMMs, the exposed communication and the
bubble where measured. With --min/--max it exits 1 when the step ratio is outside."""
import argparse
import json
import statistics
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("jsonl")
    ap.add_argument("--min", type=float)
    ap.add_argument("--max", type=float)
    ap.add_argument("--label", default="")
    a = ap.parse_args()
    steps = [json.loads(l) for l in open(a.jsonl) if l.strip()]
    steps = [s for s in steps if s.get("type") == "step" and "time" in s]
    if len(steps) > 1:
        steps = steps[1:]
    if not steps:
        print(f"{a.label}: no 'time' records in {a.jsonl}")
        return 1
    def med(f):
        v = [x for x in (f(s) for s in steps) if x is not None]
        return statistics.median(v) if v else None
    t = lambda s: s["time"]
    measured = med(lambda s: t(s)["step_s"]["measured"])
    projected = med(lambda s: t(s)["step_s"]["projected"])
    ratio = projected / measured
    parts = [f"step measured {measured*1e3:.1f} ms projected {projected*1e3:.1f} ms "
             f"ratio {ratio:.2f}"]
    gm = med(lambda s: t(s)["gemm_s"].get("measured"))
    if gm:
        gp = med(lambda s: t(s)["gemm_s"]["projected"])
        parts.append(f"GEMM {gm*1e3:.1f} / {gp*1e3:.1f} ms ({gp/gm:.2f})")
    groups = {g["group"] for s in steps for g in t(s)["exposed_comm_s"]}
    for g in sorted(groups):
        def pick(s, key):
            for x in t(s)["exposed_comm_s"]:
                if x["group"] == g:
                    return x.get(key)
            return None
        m = med(lambda s: pick(s, "measured"))
        p = med(lambda s: pick(s, "projected"))
        if m is not None and p is not None:
            parts.append(f"exposed {g} {m*1e3:.1f} / {p*1e3:.1f} ms")
    bm = med(lambda s: t(s)["bubble_s"].get("measured"))
    if bm is not None:
        parts.append(f"bubble {bm*1e3:.1f} / {med(lambda s: t(s)['bubble_s']['projected'])*1e3:.1f} ms")
    line = (a.label + ": " if a.label else "") + "; ".join(parts)
    ok = (a.min is None or ratio >= a.min) and (a.max is None or ratio <= a.max)
    if not ok:
        line += f"  OUTSIDE [{a.min}, {a.max}]"
    print(line)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
