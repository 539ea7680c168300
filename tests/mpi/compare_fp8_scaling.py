#!/usr/bin/env python3
"""Step 1's FP8 weight scaling of a layout against the single rank's, bit for bit.

usage: compare_fp8_scaling.py REF.jsonl RUN.jsonl

Both runs ran with --log-fp8-scaling (--metrics-jsonl's "fp8_scaling", parallel/fp8_log.h).
At step 1 every weight is the initial parameter in both runs, and no FP8 code has yet been
able to change it (the first update comes after the step), so each kind's weight amax (the max
over the tp pieces: exact) and its scale (max / amax) must equal the single rank's to the bit,
whatever the layout's summation order does to the activations. A wrong or missing amax
reduction over tp shows here where rank 0's piece does not hold the weight's max; a wrong
scale anywhere. The two floats are compared as fp32 bit patterns (the JSON writes the shortest
decimal that reads back as the same double, which is the fp32 value). Prints the kinds
compared; exit 1 on a difference.
"""
import json
import struct
import sys


def step_one_scaling(path):
    """The first step record's "fp8_scaling" (the run's last line is its summary)."""
    with open(path) as f:
        for line in f:
            r = json.loads(line)
            if r.get("type", "step") == "step":
                if "fp8_scaling" not in r:
                    raise SystemExit(f"{path}: step {r['step']} has no fp8_scaling"
                                     " (run with --log-fp8-scaling)")
                return r["fp8_scaling"]
    raise SystemExit(f"{path}: no step record")


def fp32_bits(x):
    return struct.unpack("<I", struct.pack("<f", x))[0]


def main():
    if len(sys.argv) != 3:
        raise SystemExit(__doc__.strip().splitlines()[2])
    ref, run = step_one_scaling(sys.argv[1]), step_one_scaling(sys.argv[2])
    if ref.keys() != run.keys():
        print(f"kinds differ: {sorted(run)} vs {sorted(ref)} FAIL")
        return 1
    problems = []
    for kind, roles in ref.items():
        for key in ("amax", "scale"):
            a, b = run[kind]["weight"][key], roles["weight"][key]
            if fp32_bits(a) != fp32_bits(b):
                problems.append(f"{kind} weight {key} {a!r} vs {b!r}")
    ok = not problems
    print(f"step 1 weight amax and scale of {', '.join(ref)}: "
          f"{'; '.join(problems) if problems else 'bitwise'} {'ok' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
