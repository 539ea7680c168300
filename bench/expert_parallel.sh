#!/usr/bin/env bash
# bench/expert_parallel.sh: expert parallelism on CPU ranks, ep 1 / 2 / 4 of a small MoE on
# the same 4 ranks (dp 4; the experts over ep, their copies over edp = 4 / ep), each
# dispatcher (--moe-token-dispatcher-type alltoall | allgather), and ep 2 with each expert's
# width split over etp 2. Issue 12's benchmark;
# results in notes/performance.md.
#
#   bash bench/expert_parallel.sh [TRAINER]        (default ./trainer)
#   SEQ=128 STEPS=4 REPEATS=2 bash bench/expert_parallel.sh
#
# The shape: llama, 4 layers, h 256, 4 heads, seq SEQ, micro-batch 2, 8 experts of width 256,
# top-2, grouped GEMM, dropless; 4 ranks x 1 microbatch per step. Columns (rank 0's
# --metrics-jsonl, medians over the steps after the first; every configuration REPEATS
# times, the fastest kept):
#   step ms, GEMM ms       wall time of the step, and inside its GEMMs
#   ep, etp, etp_ep MiB    payload bytes rank 0 moved on the ep group (the all-to-alls), the
#                          etp group (the blocks' gathers and partial sums with etp 2) and the
#                          etp_ep group (the counts' all-gather; allgather's gathers and
#                          reduce-scatters), measured (equal to the plan: tests/mpi)
#   edp MiB                the expert gradients' reduction over expert-data-parallel
#   exposed ms             time rank 0 spent blocked in those groups' calls (nothing
#                          overlaps them: the dispatch is on the critical path)
#   vs ep1                 step ms / the ep 1 step ms
# On 2 cores the 4 ranks share the machine: the ratios say what the exchanges cost beside the
# compute they save, not what a GPU cluster's links would.
set -euo pipefail
trainer=${1:-./trainer}
seq=${SEQ:-128}
steps=${STEPS:-4}
repeats=${REPEATS:-2}
[ -x "$trainer" ] || { echo "no trainer at $trainer (make)"; exit 2; }
[ "$steps" -ge 2 ] || { echo "STEPS ($steps) must be >= 2: step 1 is the warm-up"; exit 2; }
command -v mpirun > /dev/null || { echo "mpirun not found (scripts/setup.sh installs MPICH)"; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OPENBLAS_NUM_THREADS=1
model=(--arch llama --num-layers 4 --hidden-size 256 --num-attention-heads 4 --seq-length "$seq"
       --vocab-size 256 --ffn-hidden-size 256 --micro-batch-size 2 --global-batch-size 8
       --train-iters "$steps" --lr-warmup-iters 0 --device cpu --log-interval 1000
       --report-interval 0 --peak-tflops 1
       --num-experts 8 --moe-router-topk 2 --moe-ffn-hidden-size 256 --moe-grouped-gemm)
configs=("ep1 --ep 1"
         "ep2-alltoall --ep 2 --moe-token-dispatcher-type alltoall"
         "ep2-allgather --ep 2 --moe-token-dispatcher-type allgather"
         "ep4-alltoall --ep 4 --moe-token-dispatcher-type alltoall"
         "ep4-allgather --ep 4 --moe-token-dispatcher-type allgather"
         "etp2-ep2-a2a --etp 2 --ep 2 --moe-token-dispatcher-type alltoall"
         "etp2-ep2-ag --etp 2 --ep 2 --moe-token-dispatcher-type allgather")
echo "machine: $(nproc) cores, 4 ranks, OPENBLAS_NUM_THREADS=1"
echo "runs:    mpirun -np 4 $trainer ${model[*]} [config flags]; $steps steps, first skipped, best of $repeats"
runs=()
for rep in $(seq "$repeats"); do
  for c in "${configs[@]}"; do
    name=${c%% *}; flags=${c#* }
    out="$work/${name}_r$rep.jsonl"
    # shellcheck disable=SC2086
    if ! timeout 600 mpirun -np 4 "$trainer" "${model[@]}" $flags --metrics-jsonl "$out" \
         > "$work/log" 2>&1 < /dev/null; then
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
order = []
for line in sys.stdin:
    name, path = line.split()
    steps = [r for r in map(json.loads, open(path)) if r.get("type") == "step"][1:]
    row = {"step": statistics.median(r["step_ms"] for r in steps),
           "gemm": statistics.median(r["gemm_ms"] for r in steps)}
    last = steps[-1]
    for g in ("ep", "etp", "etp_ep", "edp"):
        rows = [c for c in last["comm"] if c["group"] == g]
        row[g] = sum(c["payload_bytes"]["measured"] for c in rows) / 2**20
        row[g + "_exposed"] = sum(c["exposed_ms"] for c in rows)
    if name not in best or row["step"] < best[name]["step"]:
        best[name] = row
    if name not in order:
        order.append(name)
base = best["ep1"]["step"]
print("%-15s%9s%9s%9s%9s%11s%9s%11s%8s" % ("config", "step ms", "GEMM ms", "ep MiB",
                                           "etp MiB", "etp_ep MiB", "edp MiB", "exposed ms",
                                           "vs ep1"))
for n in order:
    r = best[n]
    print("%-15s%9.1f%9.1f%9.2f%9.2f%11.2f%9.2f%11.1f%8.2f" % (
        n, r["step"], r["gemm"], r["ep"], r["etp"], r["etp_ep"], r["edp"],
        r["ep_exposed"] + r["etp_exposed"] + r["etp_ep_exposed"], r["step"] / base))
'
