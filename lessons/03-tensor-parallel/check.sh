#!/usr/bin/env bash
# lessons/03-tensor-parallel/check.sh: asserts the numbers of this lesson's README.
#   bash lessons/03-tensor-parallel/check.sh [TRAINER]   (default: the repository's ./trainer)
# Plans t = 1, 2 and 2 with sequence parallelism, trains each for 3 steps (mpirun -np 2 for
# t = 2) and checks the README's formulas against --plan --json and --metrics-jsonl, then
# that tp 2 (with and without sp) reproduces one rank's losses without dropout.
source "$(dirname "$0")/../lib.sh"  # trainer, root, work, give_up
export OPENBLAS_NUM_THREADS=1
config=(--config lessons/03-tensor-parallel/model.toml)
nodrop=(--hidden-dropout 0 --attention-dropout 0)
run() {  # name, ranks, flags...
  local name=$1 np=$2; shift 2
  local launch=("$trainer"); [ "$np" -gt 1 ] && launch=(timeout 120 mpirun -np "$np" "$trainer")
  "${launch[@]}" "${config[@]}" "$@" --metrics-jsonl "$work/$name.jsonl" > "$work/$name.log" 2>&1 &&
    "$trainer" "${config[@]}" "$@" --plan --json --world-size "$np" > "$work/$name.json" 2>&1 ||
    { echo "FAIL  run $name failed"; tail -3 "$work/$name.log"; echo "0 passed, 1 failed"; exit 1; }
}
run t1 1 --tp 1
run t2 2 --tp 2
run t2sp 2 --tp 2 --sequence-parallel
run t1_nodrop 1 --tp 1 "${nodrop[@]}"
run t2_nodrop 2 --tp 2 "${nodrop[@]}"
run t2sp_nodrop 2 --tp 2 --sequence-parallel "${nodrop[@]}"
python3 - "$work" <<'PY'
import json, sys
work = sys.argv[1]
sys.path.insert(0, "lessons")  # the repository root is the working directory (lib.sh)
from checks import check, finish, record  # noqa: E402
import checks  # noqa: E402
def load(name):
    return checks.load(work, name)
L, h, a, S, b = 2, 64, 4, 32, 2
N, sbh = b * S, S * b * h
closed = {"t1": sbh * 34 + 5 * a * S * S * b,
          "t2": sbh * 10 + sbh * 24 // 2 + 5 * a * S * S * b // 2,
          "t2sp": sbh * 34 // 2 + 5 * a * S * S * b // 2}
stats = {"t1": 16 * N, "t2": 16 * N, "t2sp": 16 * N // 2}
check("Korthikanti sbh(34 + 5as/h), t 1", closed["t1"], 4096 * 44)
check("Korthikanti sbh(10 + 24/t + 5as/(ht)), t 2", closed["t2"], 4096 * 27)
check("Korthikanti sbh(34/t + 5as/(ht)), t 2 + sp", closed["t2sp"], 4096 * 22)
for name in ("t1", "t2", "t2sp"):
    plan, steps = load(name)
    act = plan["activations"]
    k = act["korthikanti"]
    check(f"{name}: plan's closed form", k["closed_form_bytes"], closed[name])
    check(f"{name}: plan per layer = closed form + norm statistics", act["per_layer_bytes"],
          closed[name] + stats[name])
    outside = sum(t["bytes"] for t in act["embedding"]) + sum(t["bytes"] for t in act["head"])
    measured = (steps[0]["memory"]["activations"]["measured"] - outside) // L
    check(f"{name}: measured per layer", measured, closed[name] + stats[name])
def comm(steps, op):
    for c in steps[-1]["comm"]:
        if c["group"] == "tp" and c["op"] == op:
            return c
    return None
_, t2 = load("t2")
ar = comm(t2, "all-reduce")
check("tp 2: all-reduce calls 4L + 2 + 2 + 1", int(ar["calls"]["measured"]), 4 * L + 5)
check("tp 2: all-reduce payload (4L+2) N h 2 + 12N + 4", int(ar["payload_bytes"]["measured"]),
      (4 * L + 2) * N * h * 2 + 12 * N + 4)
_, t2sp = load("t2sp")
ag, rs = comm(t2sp, "all-gather"), comm(t2sp, "reduce-scatter")
check("tp 2 + sp: all-gather calls 6L + 2", int(ag["calls"]["measured"]), 6 * L + 2)
check("tp 2 + sp: reduce-scatter calls 4L + 2", int(rs["calls"]["measured"]), 4 * L + 2)
check("tp 2 + sp: block bus bytes = tp's + the 2L re-gathers",
      int(ag["bus_bytes"]["measured"] + rs["bus_bytes"]["measured"]),
      (4 * L + 2) * N * h * 2 + 2 * L * N * h * 2 // 2)
for name in ("t2_nodrop", "t2sp_nodrop"):
    _, ref = load("t1_nodrop")
    _, got = load(name)
    # bf16 storage: the tp ranks' partial sums round in another order than one rank's sums
    worst = max(abs(x["loss"] - y["loss"]) / abs(y["loss"]) for x, y in zip(got, ref))
    record(name, worst <= 1e-3, f"losses equal one rank's to {worst:.1e} (bf16 bound 1e-3)")
finish()
PY
