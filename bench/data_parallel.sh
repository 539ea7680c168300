#!/usr/bin/env bash
# bench/data_parallel.sh: step time and exposed communication time of data parallelism,
# dp 1, 2, 4 x ZeRO stages 0-3, each without and with overlap. Reports ratios, asserts
# nothing about time (issue 3's benchmark; results in notes/performance.md).
#
#   bash bench/data_parallel.sh [TRAINER]        (default ./trainer)
#   STEPS=12 WARMUP=2 REPEATS=3 DPS="1 2 4" STAGES="0 1 2 3" bash bench/data_parallel.sh
#
# One small GPT (4 layers, h 128, 4 heads, seq 64, vocab 256) and one global batch of 16
# sequences in microbatches of 4, so dp 1 accumulates 4 microbatches, dp 2 two and dp 4
# one: the work of a step is the same at every dp, only how it is split changes.
# --ddp-bucket-size 150000 cuts the 0.83M parameters into 5 buckets of about one layer:
# with the default (40M elements, one bucket) there is nothing to overlap (the only bucket
# is ready when backward ends) and ZeRO-2's one bucket buffer is the whole gradient.
# "overlap" is --overlap-grad-reduce, plus --overlap-param-gather at stages >= 1.
#
# Every configuration runs REPEATS times, the sweeps interleaved, and the table keeps the
# run with the lowest median step time: on a shared or oversubscribed machine the other
# processes only ever add time, so the fastest run is the least disturbed one.
# Columns (rank 0's --metrics-jsonl; medians over the steps after WARMUP):
#   step ms       wall time of the step
#   comm ms       time inside dp-group collectives (posted to completed)
#   exposed ms    the part of it no compute overlapped (the step waited for it)
#   exp/step      exposed ms / step ms
#   peak MiB      rank 0's ledger peak (every rank holds the same, padding aside)
#   vs dp1        step ms / the dp-1 run of the same stage and overlap setting
set -euo pipefail
trainer=${1:-./trainer}
steps=${STEPS:-12}
warmup=${WARMUP:-2}
repeats=${REPEATS:-3}
dps=${DPS:-1 2 4}
stages=${STAGES:-0 1 2 3}
[ -x "$trainer" ] || { echo "no trainer at $trainer (run make)"; exit 2; }
command -v mpirun >/dev/null || { echo "mpirun not found (apt-get install mpich)"; exit 2; }
[ "$warmup" -lt "$steps" ] || { echo "WARMUP ($warmup) must be < STEPS ($steps)"; exit 2; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
model=(--arch gpt --num-layers 4 --hidden-size 128 --num-attention-heads 4 --seq-length 64
       --vocab-size 256 --micro-batch-size 4 --global-batch-size 16 --train-iters "$steps"
       --lr-warmup-iters 0 --ddp-bucket-size 150000 --device cpu --log-interval 1000
       --report-interval 0)

echo "machine: $(nproc) cores, $(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -1)"
echo "model:   ${model[*]}"
echo "runs:    $steps steps, first $warmup skipped, best of $repeats"
runs=()
for rep in $(seq "$repeats"); do
  for dp in $dps; do
    for z in $stages; do
      for overlap in off on; do
        # at dp 1 there is nothing to overlap: data_parallel makes no dp call
        [ "$dp" -eq 1 ] && [ "$overlap" = on ] && continue
        extra=()
        if [ "$overlap" = on ]; then
          extra+=(--overlap-grad-reduce)
          [ "$z" -ge 1 ] && extra+=(--overlap-param-gather)
        fi
        out="$work/dp${dp}_z${z}_${overlap}_r${rep}.jsonl"
        if ! mpirun -np "$dp" "$trainer" "${model[@]}" --zero-stage "$z" "${extra[@]}" \
               --metrics-jsonl "$out" > "$work/log" 2>&1; then
          echo "run failed: dp $dp stage $z overlap $overlap"; tail -5 "$work/log"; exit 1
        fi
        runs+=("$dp $z $overlap $out")
      done
    done
  done
done
echo "load:    $(cut -d' ' -f1-3 /proc/loadavg) (1, 5, 15 min averages, after the runs)"
echo

printf '%s\n' "${runs[@]}" | python3 -c '
import json, statistics, sys
warmup = int(sys.argv[1])
best = {}  # (dp, stage, overlap) -> the row of its fastest repeat
for line in sys.stdin:
    dp, z, overlap, path = line.split()
    steps = [r for r in (json.loads(l) for l in open(path) if l.strip()) if r.get("type") == "step"][warmup:]
    def median(f):
        return statistics.median(f(s) for s in steps)
    def dp_sum(s, key):
        return sum(c[key] for c in s["comm"] if c["group"] == "dp")
    step = median(lambda s: s["step_ms"])
    row = dict(dp=int(dp), z=int(z), overlap=overlap, step=step,
               comm=median(lambda s: dp_sum(s, "time_ms")),
               exposed=median(lambda s: dp_sum(s, "exposed_ms")),
               peak=median(lambda s: s["peak_memory_bytes"]) / 2**20)
    key = (row["dp"], row["z"], row["overlap"])
    if key not in best or step < best[key]["step"]:
        best[key] = row
rows = list(best.values())
# dp 1 has no overlap run: the on rows compare with the dp-1 off run of their stage
base = {r["z"]: r["step"] for r in rows if r["dp"] == 1}
print("| dp | stage | overlap | step ms | comm ms | exposed ms | exp/step | peak MiB | vs dp1 |")
print("|---:|---:|:---|---:|---:|---:|---:|---:|---:|")
for r in rows:
    ratio = "%.2f" % (r["step"] / base[r["z"]]) if r["z"] in base else "-"
    print("| %d | %d | %s | %.1f | %.1f | %.1f | %.0f%% | %.2f | %s |" % (
        r["dp"], r["z"], r["overlap"], r["step"], r["comm"], r["exposed"],
        100 * r["exposed"] / r["step"], r["peak"], ratio))
' "$warmup"
