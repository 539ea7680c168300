#!/usr/bin/env bash
# bench/time_model.sh: the time model (plan/time_model.h) held against measured step time on
# this machine, with the profile `trainer --benchmark` measures on it (issue 14's target:
# within 20%). Results in notes/performance.md ("Time model").
#
#   bash bench/time_model.sh [TRAINER]        (default ./trainer)
#   STEPS=6 MIB=64 bash bench/time_model.sh
#
# 1. Benchmarks the machine at one rank and at two (OPENBLAS_NUM_THREADS=1: one core per
#    rank, as the MPI tests run; a profile holds per-rank figures at its ranks per node).
# 2. Trains the gpt2-124m and llama-100m shapes (configs/models/) at sequence 256, micro
#    batch 4, fp32, STEPS steps: one rank, and two ranks as dp 2, tp 2, pp 2 (pp: 2
#    microbatches), each with the profile of its rank count.
# 3. Prints, per run, rank 0's medians over the steps after the first (time_ratio.py):
#    measured and projected step, ratio = projected / measured, and the GEMMs, exposed
#    communication and bubble where measured.
set -uo pipefail
trainer=${1:-./trainer}
steps=${STEPS:-5}
mib=${MIB:-64}
export OPENBLAS_NUM_THREADS=1
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$trainer" --benchmark --benchmark-max-mib "$mib" --benchmark-save "$work/cpu1.toml" \
  > "$work/bench1.log" 2>&1 || { tail -5 "$work/bench1.log"; exit 1; }
mpirun -np 2 "$trainer" --benchmark --benchmark-max-mib "$mib" \
  --benchmark-save "$work/cpu2.toml" > "$work/bench2.log" 2>&1 || { tail -5 "$work/bench2.log"; exit 1; }
echo "machine: $(nproc) cores, $(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -1)"
for n in 1 2; do
  echo "profile, $n rank(s): $(grep -E '^(fp32_tflops|memory_bandwidth_gbs|gemm_efficiency|gemm_half_gflop|attention_efficiency|launch_overhead_us|intra_node_gbs|collective_latency_us) ' "$work/cpu$n.toml" | sed 's/ *#.*//' | tr '\n' ';')"
done
common=(--seq-length 256 --micro-batch-size 4 --train-iters "$steps" --lr-warmup-iters 0
        --device cpu --log-interval 1000 --report-interval 0)
run() {  # NAME RANKS PROFILE FLAGS...
  local name=$1 np=$2 profile=$3; shift 3
  local launch=("$trainer")
  [ "$np" -gt 1 ] && launch=(mpirun -np "$np" "$trainer")
  if "${launch[@]}" "${common[@]}" "$@" --hardware "$profile" \
       --metrics-jsonl "$work/$name.jsonl" > "$work/$name.log" 2>&1; then
    python3 "$here/../tests/mpi/time_ratio.py" "$work/$name.jsonl" --label "$name"
  else
    echo "$name: run failed"; tail -3 "$work/$name.log"
  fi
}
for model in gpt2-124m llama-100m; do
  cfg=(--config "configs/models/$model.toml")
  run "$model 1 rank" 1 "$work/cpu1.toml" "${cfg[@]}" --global-batch-size 4
  run "$model dp 2" 2 "$work/cpu2.toml" "${cfg[@]}" --global-batch-size 8
  run "$model tp 2" 2 "$work/cpu2.toml" "${cfg[@]}" --global-batch-size 4 --tp 2
  run "$model pp 2" 2 "$work/cpu2.toml" "${cfg[@]}" --global-batch-size 8 --pp 2
done
