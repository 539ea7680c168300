#!/usr/bin/env bash
# tests/scripts/ablate.sh: scripts/ablate's table against the runs' and plans' own files.
#   bash tests/scripts/ablate.sh TRAINER
# 1. trains configs/ablations/example.toml (6 variants, 2 ranks each, 3 steps) with --keep,
#    then recomputes every CSV column from each kept --metrics-jsonl, checks each kept run
#    was the variant's configuration (its predicted ledger is the variant's own --plan), and
#    the example file's comments (ZeRO-1 halves optim, the dp bus bytes, one loss);
# 2. plans the same matrix (--plan) and checks every column against --plan --json made
#    here by the trainer itself;
# 3. a failing variant beside a good one: exit 1, the trainer's own error line in its row
#    and in the CSV, the good one still run;
# 4. a bad matrix file and a bad argument: exit 2 with one line;
# 5. configs/ablations/pipeline_schedules.toml planned with --plot: each bubble the plan's,
#    the chart drawn.
# Prints one line per check, then "N passed, M failed"; exits non-zero on a failure.
set -uo pipefail
trainer=${1:?usage: bash tests/scripts/ablate.sh TRAINER}
case $trainer in /*) ;; *) trainer="$PWD/$trainer" ;; esac
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root" || exit 1  # the matrix's --config and --hardware cpu resolve from the repository root
[ -x "$trainer" ] || { echo "FAIL  no trainer at $trainer"; echo "0 passed, 1 failed"; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OPENBLAS_NUM_THREADS=1
matrix=configs/ablations/example.toml
tiny="--config configs/models/tiny.toml --train-iters 2 --lr-warmup-iters 1"

scripts/ablate --trainer "$trainer" --matrix "$matrix" --csv "$work/real.csv" \
  --keep "$work/real" > "$work/real.txt" 2> "$work/real.err"
echo $? > "$work/real.rc"
scripts/ablate --trainer "$trainer" --plan --matrix "$matrix" --csv "$work/plan.csv" \
  --keep "$work/plan" > "$work/plan.txt" 2> "$work/plan.err"
echo $? > "$work/plan.rc"
scripts/ablate --trainer "$trainer" --np 2 --base "$tiny" --variant good="--zero-stage 1" \
  --variant bad="--zero-stage 7" --csv "$work/fail.csv" > "$work/fail.txt" 2> "$work/fail.err"
echo $? > "$work/fail.rc"
# the line the trainer itself prints for the bad flag (it exits before anything runs)
# shellcheck disable=SC2086  # $tiny: the same words the --base string splits into
"$trainer" $tiny --zero-stage 7 > /dev/null 2> "$work/bad_direct.err"
printf '[base]\nflag = "--tp 2"\n\n[[variant]]\nname = "a"\n' > "$work/bad.toml"
scripts/ablate --trainer "$trainer" --matrix "$work/bad.toml" > "$work/badm.out" 2> "$work/badm.err"
echo $? > "$work/badm.rc"
scripts/ablate --trainer "$trainer" --variant 'a b=--tp 2' > "$work/badn.out" 2> "$work/badn.err"
echo $? > "$work/badn.rc"
# the pipeline schedules as one ablation, planned and plotted
scripts/ablate --trainer "$trainer" --plan --matrix configs/ablations/pipeline_schedules.toml \
  --csv "$work/sched.csv" --plot "$work/charts" > "$work/sched.txt" 2> "$work/sched.err"
echo $? > "$work/sched.rc"

python3 - "$work" "$trainer" "$matrix" <<'EOF'
import csv, json, os, shlex, subprocess, sys, tomllib
work, trainer, matrix = sys.argv[1:4]
sys.path.insert(0, "lessons")  # the repository root is the working directory
from checks import check, record, finish  # noqa: E402

CATS = ["params", "grads", "master_params", "optimizer_states", "activations", "recompute",
        "comm_buffers", "logits", "workspace", "fp8_operands", "fp8_state", "total"]

def text(name):
    with open(os.path.join(work, name)) as f:
        return f.read()

def rows(name):
    with open(os.path.join(work, name), newline="") as f:
        return list(csv.DictReader(f))

def num(s):
    return None if s == "" else float(s)

def same(a, b, tol=1e-12):
    if a is None or b is None:
        return a is None and b is None
    return abs(a - b) <= tol * max(abs(a), abs(b), 1e-300)

def compare(name, got_row, want):
    """every column of want (key: value or None) against the CSV row; one line."""
    bad = [f"{k} {got_row.get(k)!r} != {v!r}" for k, v in want.items()
           if not same(num(got_row.get(k, "")), None if v is None else float(v))]
    return record(name, not bad, f"{len(want)} columns equal" if not bad else "; ".join(bad[:4]))

def plan_of(flags, np):
    """--plan --json made here, as the variant's reference."""
    cmd = [trainer] + flags + (["--world-size", str(np)] if np > 1 else []) + ["--plan", "--json"]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"FAIL  {shlex.join(cmd)}: {out.stderr.strip()}")
    return json.loads(out.stdout)

with open(matrix, "rb") as f:
    m = tomllib.load(f)
base = shlex.split(m["base"]["flags"])
variants = [(v["name"], shlex.split(v["flags"]), v.get("np", m["base"].get("np", 1)))
            for v in m["variant"]]
names = [v[0] for v in variants]

# -------------------------------------------------------------- 1. real runs
print("1. scripts/ablate --matrix configs/ablations/example.toml (runs)")
check("exit status", int(text("real.rc")), 0)
real = rows("real.csv")
check("one CSV row per variant, in the file's order", [r["variant"] for r in real], names)
lines = text("real.txt").splitlines()
check("one table line per variant", [any(l.split()[:1] == [n] for l in lines) for n in names],
      [True] * len(names))
by = {r["variant"]: r for r in real}
losses = {}
for name, flags, np in variants:
    r = by.get(name, {})
    path = os.path.join(work, "real", name + ".jsonl")
    if not os.path.exists(path):
        record(f"{name}: kept {name}.jsonl", False, "missing")
        continue
    recs = [json.loads(l) for l in open(path) if l.strip()]
    steps = [s for s in recs if s.get("type", "step") == "step"]
    last, timed = steps[-1], steps[1:] or steps
    mean = lambda k: sum(s[k] for s in timed) / len(timed)
    want = {"ranks": len(last.get("ranks", [])) or 1, "loss": last["loss"],
            "step_ms": mean("step_ms"), "tokens_per_s": mean("tokens_per_s"),
            "mfu": mean("mfu"), "hfu": mean("hfu"),
            "bubble": mean("bubble") if "bubble" in last else None,
            "projected_step_ms": last["time"]["step_s"]["projected"] * 1e3}
    # MFU's peak: the run's header, "peak 0.0801 TFLOP/s/rank (flag)"
    header = next(l for l in open(os.path.join(work, "real", name + ".log"))
                  if l.startswith("paralab |"))
    want["peak_tflops"] = float(header.split(" peak ")[1].split()[0])
    for c in CATS:
        want[f"mem_{c}_bytes"] = max(x["memory"][c]["measured"]
                                     for s in steps for x in [s] + s.get("ranks", []))
    groups = {}
    for c in last.get("comm", []):
        groups[c["group"]] = groups.get(c["group"], 0) + c["bus_bytes"]["measured"]
    for g in sorted({k[5:-10] for k in r if k.startswith("comm_")} | set(groups)):
        want[f"comm_{g}_bus_bytes"] = groups.get(g)
    check(f"{name}: status, ranks = np {np}", (r.get("status"), r.get("ranks")), ("ok", str(np)))
    compare(f"{name}: CSV = its --metrics-jsonl", r, want)
    # the run was this variant: its predicted ledger (rank 0) is the variant's own plan
    plan = plan_of(base + flags, np)
    got = {c: last["memory"][c]["predicted"] for c in CATS}
    bad = [c for c in CATS if got[c] != plan["memory"][0][c]]
    record(f"{name}: the run was this variant: its predicted ledger = --plan of base + flags",
           not bad, f"total {got['total']} B" if not bad else f"differ in {', '.join(bad)}")
    losses[name] = last["loss"]
    if name == "zero0":
        psi = plan["params"]["total"]

# the example's comments, from the CSV (Psi from the plan)
if set(names) >= {"zero0", "zero1", "zero2", "zero3", "tp2", "pp2"} and len(real) == len(names):
    v = lambda n, k: num(by[n][k])
    check("example: zero1 optim = zero0 optim / 2",
          v("zero1", "mem_optimizer_states_bytes"), v("zero0", "mem_optimizer_states_bytes") / 2)
    check("example: dp bus bytes, zero0..3 = 4 Psi, 4 Psi + 4, 4 Psi + 4, 6 Psi + 4",
          [v(n, "comm_dp_bus_bytes") for n in ("zero0", "zero1", "zero2", "zero3")],
          [4 * psi, 4 * psi + 4, 4 * psi + 4, 6 * psi + 4])
    check("example: tp2 moves tp bytes and no dp bytes",
          (v("tp2", "comm_tp_bus_bytes") > 0, v("tp2", "comm_dp_bus_bytes")), (True, None))
    check("example: pp2 has a bubble (> 0)", v("pp2", "bubble") > 0, True)
    check("example: one MFU peak, the --peak-tflops of [base] (the header's source: flag)",
          sorted({(by[n]["peak_tflops"], by[n]["peak_source"]) for n in names}),
          [("0.0801", "flag")])
    spread = max(losses.values()) - min(losses.values())
    record("example: one loss in every row (to 1e-5, the equivalence suite's tolerance)",
           spread <= 1e-5 * min(losses.values()), f"spread {spread:.3g}")

# -------------------------------------------------------------- 2. plans
print("2. scripts/ablate --plan --matrix configs/ablations/example.toml")
check("exit status", int(text("plan.rc")), 0)
planned = {r["variant"]: r for r in rows("plan.csv")}
check("one CSV row per variant", list(planned), names)
for name, flags, np in variants:
    p = plan_of(base + flags, np)
    t = p["time"]
    want = {"ranks": p["parallel"]["world_size"], "loss": None, "step_ms": None,
            "tokens_per_s": t["tokens_per_second"], "mfu": t["mfu"], "hfu": t["hfu"],
            "bubble": p["pipeline"]["bubble_simulated"] if "pipeline" in p else None,
            "projected_step_ms": t["step_s"] * 1e3, "peak_tflops": t["peak_tflops"]}
    for c in CATS:
        want[f"mem_{c}_bytes"] = max(x[c] for x in p["memory"])
    for k in planned.get(name, {}):  # a group this plan lacks: empty
        if k.startswith("comm_"):
            want[k] = None
    for c in p["comm"]:
        k = f"comm_{c['group']}_bus_bytes"
        want[k] = (want.get(k) or 0) + c["bus_bytes"]
    compare(f"{name}: CSV = trainer {' '.join(flags)} --world-size {np} --plan --json",
            planned.get(name, {}), want)
check("the table says the times are projected", "projection, not measurements" in text("plan.txt"),
      True)

# -------------------------------------------------------------- 3. a failing variant
print("3. a failing variant beside a good one")
direct = text("bad_direct.err").strip().splitlines()
err = next((l for l in direct if "error:" in l), "(the trainer printed no error)")
check("exit status non-zero (1)", int(text("fail.rc")), 1)
f = {r["variant"]: r for r in rows("fail.csv")}
check("bad: CSV status and error = the trainer's own line",
      (f.get("bad", {}).get("status"), f.get("bad", {}).get("error")), ("error", err))
check("bad: its table row shows the error",
      any(l.startswith("bad") and l.endswith("FAILED: " + err)
          for l in text("fail.txt").splitlines()),
      True)
check("good: still run (status ok, a loss)",
      (f.get("good", {}).get("status"), num(f.get("good", {}).get("loss", "")) is not None),
      ("ok", True))
check("the last line counts the failure", text("fail.txt").splitlines()[-1],
      "2 variants: 1 ok, 1 failed")

# -------------------------------------------------------------- 4. bad input
print("4. bad input")
for tag, what in (("badm", "a matrix with an unknown key"), ("badn", "a name with a space")):
    e = text(tag + ".err").splitlines()
    check(f"{what}: exit 2, one line on stderr, nothing on stdout",
          (int(text(tag + ".rc")), len(e), text(tag + ".out")), (2, 1, ""))
check("the matrix error names the file and the key", text("badm.err").strip(),
      f"ablate: error: {work}/bad.toml: [base]: unknown key 'flag' (flags, np)")
# -------------------------------------------------------------- 5. the schedules, plotted
print("5. configs/ablations/pipeline_schedules.toml, planned, --plot")
check("exit status", int(text("sched.rc")), 0)
with open("configs/ablations/pipeline_schedules.toml", "rb") as fh:
    m = tomllib.load(fh)
base = shlex.split(m["base"]["flags"])
for r in rows("sched.csv"):
    v = next(x for x in m["variant"] if x["name"] == r["variant"])
    want = plan_of(base + shlex.split(v["flags"]), m["base"]["np"])["pipeline"]["bubble_simulated"]
    check(f"{r['variant']}: bubble = the plan's simulated", same(num(r["bubble"]), want), True)
png = os.path.join(work, "charts", "ablate.png")
check("--plot drew charts/ablate.png, its path the last line",
      (os.path.getsize(png) > 10000, text("sched.txt").splitlines()[-1]), (True, png))

finish()
EOF
