#!/usr/bin/env bash
# tests/emulator/older_gpus.sh: the emulated device playing a V100 and a T4
# (PARALAB_EMULATED_GPU=v100, t4; kernels/emulator/runtime.cpp): --bf16 is refused at start-up
# with one line naming the flag, the GPU and its compute capability (exit status 2, nothing on
# stdout; cli/flags_gpu.cpp), and --fp16 trains there on the kernels those GPUs take: the flash
# attention's scalar tiles, at a head dim (64) the tensor-core kernels take on an H100, with the
# T4's hardware profile (configs/hardware/t4.toml, matched by the device name). --fp8-format is
# refused on the T4 too, and a job whose ranks have different GPUs (rank 1 a V100, rank 0 the
# default H100) ends with the V100's one line, whichever rank it is on.
# (--fp8-format's other thresholds are tests/test_flags_gpu.cpp's.)
# Usage: tests/emulator/older_gpus.sh [path/to/emulated/trainer]
set -uo pipefail
trainer=$(realpath "${1:-build/emulated/trainer}")
cd "$(dirname "$0")/../.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OPENBLAS_NUM_THREADS=1
passed=0; failed=0
tiny=(--config configs/models/tiny.toml --device cuda-emulated --num-attention-heads 2
      --micro-batch-size 2 --global-batch-size 2 --train-iters 1)

for gpu in "v100:Tesla V100-SXM2-32GB (compute capability 7.0)" "t4:Tesla T4 (compute capability 7.5)"; do
  key=${gpu%%:*} want="paralab: error: --bf16: ${gpu#*:} has no bf16 tensor cores"
  PARALAB_EMULATED_GPU=$key "$trainer" "${tiny[@]}" --bf16 >"$tmp/out" 2>"$tmp/err"; rc=$?
  if [ "$rc" -eq 2 ] && [ "$(wc -l <"$tmp/err")" -eq 1 ] && grep -qF "$want" "$tmp/err" &&
     [ ! -s "$tmp/out" ]; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
    echo "FAIL $key --bf16: want status 2 and one line '$want...'; got status $rc:"
    sed 's/^/    | /' "$tmp/err" | head -5
  fi
done

# expect_refusal NAME WANT COMMAND...: status 2, one line on stderr starting with WANT, no stdout
expect_refusal() {
  local name=$1 want=$2 rc; shift 2
  "$@" >"$tmp/out" 2>"$tmp/err"; rc=$?
  if [ "$rc" -eq 2 ] && [ "$(wc -l <"$tmp/err")" -eq 1 ] && grep -qF "$want" "$tmp/err" &&
     [ ! -s "$tmp/out" ]; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
    echo "FAIL $name: want status 2 and one line '$want...'; got status $rc:"
    sed 's/^/    | /' "$tmp/err" "$tmp/out" | head -5
  fi
}
expect_refusal "t4 --fp8-format" "paralab: error: --fp8-format: Tesla T4 (compute capability 7.5) has no FP8 tensor cores" \
  env PARALAB_EMULATED_GPU=t4 "$trainer" "${tiny[@]}" --fp8-format hybrid
if command -v mpirun >/dev/null; then
  expect_refusal "rank 1 on a V100" "paralab: error: --bf16: Tesla V100-SXM2-32GB (compute capability 7.0)" \
    timeout 120 mpirun -np 1 "$trainer" "${tiny[@]}" --bf16 --global-batch-size 4 : \
      -np 1 -env PARALAB_EMULATED_GPU v100 "$trainer" "${tiny[@]}" --bf16 --global-batch-size 4
fi

PARALAB_EMULATED_GPU=t4 "$trainer" "${tiny[@]}" --fp16 >"$tmp/out" 2>"$tmp/err"; rc=$?
if [ "$rc" -eq 0 ] && grep -q "configs/hardware/t4.toml, fp16 dense" "$tmp/out" && grep -q "attention kernels: scalar fp32 tiles" "$tmp/out"; then
  passed=$((passed + 1))
else
  failed=$((failed + 1))
  echo "FAIL t4 --fp16: want a step on the scalar flash kernels; got status $rc:"
  sed 's/^/    | /' "$tmp/out" "$tmp/err" | tail -8
fi

echo "older GPUs on the emulated device: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
