#!/usr/bin/env bash
# bench/moe.sh: per-expert GEMMs against grouped GEMM (--moe-grouped-gemm) on the CPU backend,
# E = 8 .. 128 experts at the same active FLOPs, beside the dense model with those FLOPs
# (issue 11's benchmark; results in notes/performance.md). Target: grouped within 1.3x of the
# dense model's step time; where it is not, the columns say what the rest is.
#
#   bash bench/moe.sh [TRAINER]             (default ./trainer)
#   SEQ=256 STEPS=4 REPEATS=2 EXPERTS="8 32 128" bash bench/moe.sh
#
# The shape: llama, 4 layers, h 256, 4 heads, seq SEQ, micro-batch 4 (N = 4 SEQ tokens), top-2
# experts of width 128, so every token runs 2 x 128 = 256 SwiGLU columns: the dense model
# has ffn 256 and the same matmul FLOPs per token but the router's 2 N h E (and its
# top-k, permute and unpermute, and the optimizer over E times the expert parameters).
# Dropless; --moe-aux-loss-coeff 1e-2. Columns (rank 0's --metrics-jsonl, medians over
# the steps after the first; every configuration REPEATS times, the fastest kept):
#   tokens/s, step ms, GEMM ms (wall time inside the GEMMs: kernels/ops.h gemm_seconds)
#   calls      GEMM calls per step, every label (kernels/ops.h gemm_counts), and the experts'
#   step/GEMM  what the step spends beyond its GEMMs
#   vs dense   step ms / the dense model's step ms
set -euo pipefail
trainer=${1:-./trainer}
seq=${SEQ:-256}
steps=${STEPS:-4}
repeats=${REPEATS:-2}
experts=${EXPERTS:-8 32 128}
[ -x "$trainer" ] || { echo "no trainer at $trainer (make)"; exit 2; }
[ "$steps" -ge 2 ] || { echo "STEPS ($steps) must be >= 2: step 1 is the warm-up"; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-1}
model=(--arch llama --num-layers 4 --hidden-size 256 --num-attention-heads 4 --seq-length "$seq"
       --vocab-size 256 --micro-batch-size 4 --global-batch-size 4 --train-iters "$steps"
       --lr-warmup-iters 0 --device cpu --log-interval 1000 --report-interval 0 --peak-tflops 1)
moe=(--moe-router-topk 2 --moe-ffn-hidden-size 128 --moe-aux-loss-coeff 1e-2)

configs=("dense --ffn-hidden-size 256")
for e in $experts; do
  configs+=("E$e-per-expert --ffn-hidden-size 256 --num-experts $e ${moe[*]}")
  configs+=("E$e-grouped --ffn-hidden-size 256 --num-experts $e ${moe[*]} --moe-grouped-gemm")
done
echo "machine: $(nproc) cores, OPENBLAS_NUM_THREADS=$OPENBLAS_NUM_THREADS"
echo "runs:    $trainer ${model[*]} [config flags]; $steps steps, first skipped, best of $repeats"
runs=()
for rep in $(seq "$repeats"); do
  for c in "${configs[@]}"; do
    name=${c%% *}; flags=${c#* }
    out="$work/${name}_r$rep.jsonl"
    # shellcheck disable=SC2086
    if ! "$trainer" "${model[@]}" $flags --metrics-jsonl "$out" > "$work/log" 2>&1; then
      echo "run failed: $name"; tail -5 "$work/log"; exit 1
    fi
    runs+=("$name $out")
  done
done
echo "load:    $(cut -d' ' -f1-3 /proc/loadavg) (after the runs)"
echo
printf '%s\n' "${runs[@]}" | python3 -c '
import json, statistics, sys
best = {}
for line in sys.stdin:
    name, path = line.split()
    steps = [r for r in (json.loads(l) for l in open(path) if l.strip())
             if r.get("type") == "step"][1:]
    med = lambda key: statistics.median(s[key] for s in steps)
    calls = steps[-1].get("gemm_calls", {}).get("labels", {})
    row = dict(name=name, step=med("step_ms"), tok=med("tokens_per_s"), gemm=med("gemm_ms"),
               calls=sum(v["measured"] for v in calls.values()),
               experts=calls.get("experts", {}).get("measured", 0))
    if name not in best or row["step"] < best[name]["step"]:
        best[name] = row
dense = best["dense"]["step"]
print("| config | tokens/s | step ms | GEMM ms | step/GEMM | GEMM calls (experts) | vs dense |")
print("|:---|---:|---:|---:|---:|---:|---:|")
for r in best.values():
    print("| %s | %.0f | %.1f | %.1f | %.2f | %d (%d) | %.2f |" % (
        r["name"], r["tok"], r["step"], r["gemm"], r["step"] / r["gemm"], r["calls"],
        r["experts"], r["step"] / dense))
'
