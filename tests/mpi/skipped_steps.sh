#!/usr/bin/env bash
# tests/mpi/skipped_steps.sh: a step whose loss or gradient norm is not finite is skipped,
# and --max-skipped-steps of them in a row stop the run with exit status 3 and one line.
#   bash tests/mpi/skipped_steps.sh ./trainer [filter]
# The tiny preset at --lr 1e6 diverges: its first steps are finite, then every loss is NaN.
# On one rank, at dp 2 with ZeRO-1, at pp 2 and at tp 2, and the tiny MoE with an expert bias
# at dp 2 (every rank must decide alike, or one would wait forever in the next step's
# collectives): exit 3 within the timeout, every step's collectives the plan's (a skipped
# step still runs them), stderr
# exactly the one line naming the steps and the flag, every --metrics-jsonl line whole,
# the skipped steps flagged with their running count (each with a null loss or gradient
# norm: JSON has no NaN), the steps before them not, no
# summary record. The update itself (nothing moves on a skipped step) is
# tests/test_optimizer.cpp's.
source "$(dirname "$0")/lib.sh"  # trainer, filter, work, passed/failed, finish

case_() {  # name, ranks, flags...
  local name=$1 np=$2; shift 2
  case "$name" in *"$filter"*) ;; *) return ;; esac
  local launch=("$trainer")
  [ "$np" -gt 1 ] && launch=(mpirun -np "$np" "$trainer")
  timeout 120 "${launch[@]}" --config "${config:-configs/models/tiny.toml}" --lr 1e6 \
    --max-skipped-steps 3 --metrics-jsonl "$work/$name.jsonl" "$@" > "$work/$name.out" 2> "$work/$name.err" < /dev/null
  local rc=$? verdict
  verdict=$(python3 - "$work/$name" "$rc" <<'EOF'
import json, re, sys
base, rc = sys.argv[1], int(sys.argv[2])
err = open(base + ".err").read().splitlines()
rows = [json.loads(line) for line in open(base + ".jsonl")]  # each line whole, or this raises
problems = []
if rc != 3:
    problems.append("exit status %d, not 3" % rc)
m = re.fullmatch(r"paralab: stopped at step (\d+): 3 steps in a row skipped \((\d+)-(\d+)\), "
                 r"their loss or gradient norm not finite; --max-skipped-steps 3", err[-1] if err else "")
if len(err) != 1 or not m:
    problems.append("stderr is not the one line: %r" % err[:3])
steps = [r for r in rows if r.get("type") == "step"]
if any(r.get("type") != "step" for r in rows):
    problems.append("a summary record was written")
if m and (int(m.group(1)) != steps[-1]["step"] or int(m.group(2)) != steps[-1]["step"] - 2):
    problems.append("the line's steps %s are not the last record's" % m.group(0))
tail = steps[-3:]
if [r["skipped"] for r in tail] != [True] * 3 or \
   [r["skipped_steps"] for r in tail] != [1, 2, 3] or \
   any(r["loss"] is not None and r["grad_norm"] is not None for r in tail):
    problems.append("the last three records are not skipped 1, 2, 3, each with a null loss "
                    "or gradient norm")
if not steps[:-3] or any(r["skipped"] or r["skipped_steps"] for r in steps[:-3]):
    problems.append("the finite steps before them are flagged (or missing)")
# a skipped step still runs the planned collectives (ZeRO's gathers, the expert bias's counts)
off = ["step %d %s %s" % (r["step"], c["group"], c["op"]) for r in steps for c in r.get("comm", [])
       if any(c[key]["measured"] != c[key]["predicted"] for key in ("calls", "payload_bytes"))]
if off:
    problems.append("communication differs from the plan: " + ", ".join(off[:3]))
print("; ".join(problems) if problems else
      "exit 3 after step %d, steps %d-%d skipped" % (steps[-1]["step"], steps[-3]["step"],
                                                       steps[-1]["step"]))
sys.exit(1 if problems else 0)
EOF
  )
  if [ $? -eq 0 ]; then
    passed=$((passed + 1)); echo "ok    $name: $verdict"
  else
    failed=$((failed + 1)); echo "FAIL  $name: $verdict"; tail -3 "$work/$name.err"
  fi
}

case_ one-rank 1
case_ dp2-zero1 2 --zero-stage 1
case_ pp2 2 --pp 2
case_ tp2 2 --tp 2
config=configs/models/tiny-moe.toml case_ moe-expert-bias-dp2 2 --moe-router-enable-expert-bias \
  --moe-router-score-function sigmoid --moe-router-load-balancing-type none --zero-stage 1
finish
