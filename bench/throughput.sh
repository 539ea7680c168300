#!/usr/bin/env bash
# bench/throughput.sh: single-rank fp32 throughput on the CPU backend, and how close the step
# time is to the time of its GEMMs alone (issue 2's benchmark; results in
# notes/performance.md). Target: step ms / GEMM ms <= 1.3.
#
#   bash bench/throughput.sh [TRAINER]           (default ./trainer, built with make if absent)
#   SEQ=1024 STEPS=4 REPEATS=1 bash bench/throughput.sh
#   PEAK_TFLOPS=0.2 bash bench/throughput.sh     (a fixed MFU denominator, see MFU below)
#
# Two ~100M-parameter shapes from configs/models/, micro-batch 4, one microbatch per step:
#   gpt    gpt2-124m.toml   12 layers, h 768, 12 heads, ffn 3072, vocab 50257, tied, GeLU
#   llama  llama-100m.toml  8 layers, h 768, 12 heads / 4 groups, SwiGLU 2048, vocab 32000
# at sequence length SEQ (default 256, which keeps a step to seconds on two cores; the
# configs' own 1024 makes attention a larger share).
#
# Every configuration runs REPEATS times and the table keeps the run with the lowest median
# step time (on a shared machine other processes only ever add time). Columns (rank 0's
# --metrics-jsonl, medians over the steps after the first, which pays for first-touch page
# faults and OpenBLAS's thread start):
#   tokens/s   tokens of a step / step time
#   MFU        model FLOPs / step time / peak; on the CPU the peak is a 512^3 sgemm timed
#              at start-up (the run header says which), so MFU reads "fraction of the best
#              GEMM rate" and moves with the machine's load; PEAK_TFLOPS fixes it
#   step ms    wall time of the step
#   GEMM ms    wall time inside kernels::gemm and gemm_strided_batched (kernels/ops.h
#              gemm_seconds; the flash attention kernels' own tile products are not in it)
#   step/GEMM  step ms / GEMM ms: 1.0 would mean everything but the GEMMs is free
# GEMM ms shows "-" when the trainer does not report gemm_ms.
set -euo pipefail
trainer=${1:-./trainer}
seq=${SEQ:-256}
steps=${STEPS:-6}
repeats=${REPEATS:-2}
if [ ! -x "$trainer" ]; then
  [ "$trainer" = ./trainer ] || { echo "no trainer at $trainer"; exit 2; }
  make -s -j"$(nproc)" trainer
fi
[ "$steps" -ge 2 ] || { echo "STEPS ($steps) must be >= 2: step 1 is the warm-up"; exit 2; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
common=(--seq-length "$seq" --micro-batch-size 4 --global-batch-size 4 --train-iters "$steps"
        --lr-warmup-iters 0 --device cpu --log-interval 1000 --report-interval 0)
[ -n "${PEAK_TFLOPS:-}" ] && common+=(--peak-tflops "$PEAK_TFLOPS")

echo "machine: $(nproc) cores, $(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -1)"
echo "runs:    $trainer --config configs/models/{gpt2-124m,llama-100m}.toml ${common[*]}"
echo "         $steps steps, first skipped, best of $repeats; OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-unset (all cores)}"
runs=()
for rep in $(seq "$repeats"); do
  for cfg in gpt2-124m llama-100m; do
    out="$work/${cfg}_r${rep}.jsonl"
    if ! "$trainer" --config "configs/models/$cfg.toml" "${common[@]}" \
           --metrics-jsonl "$out" > "$work/log" 2>&1; then
      echo "run failed: $cfg"; tail -5 "$work/log"; exit 1
    fi
    [ "$rep" -eq 1 ] && echo "$cfg: $(grep -m1 -o 'peak [0-9.]* TFLOP/s[^|]*' "$work/log" || true)"
    runs+=("$cfg $out")
  done
done
echo "load:    $(cut -d' ' -f1-3 /proc/loadavg) (1, 5, 15 min averages, after the runs)"
echo

printf '%s\n' "${runs[@]}" | python3 -c '
import json, statistics, sys
best = {}  # config -> the row of its fastest repeat
for line in sys.stdin:
    cfg, path = line.split()
    steps = [r for r in (json.loads(l) for l in open(path) if l.strip()) if r.get("type") == "step"][1:]
    def median(key):
        values = [s[key] for s in steps if s.get(key) is not None and s[key] >= 0]
        return statistics.median(values) if len(values) == len(steps) else None
    row = dict(cfg=cfg, step=median("step_ms"), tok=median("tokens_per_s"), mfu=median("mfu"),
               gemm=median("gemm_ms"))
    if cfg not in best or row["step"] < best[cfg]["step"]:
        best[cfg] = row
print("| config | tokens/s | MFU | step ms | GEMM ms | step/GEMM |")
print("|:---|---:|---:|---:|---:|---:|")
for r in best.values():
    gemm = "%.1f" % r["gemm"] if r["gemm"] else "-"
    ratio = "%.2f" % (r["step"] / r["gemm"]) if r["gemm"] else "-"
    print("| %s | %.1f | %.1f%% | %.1f | %s | %s |" % (
        r["cfg"], r["tok"], 100 * r["mfu"], r["step"], gemm, ratio))
'
