#!/usr/bin/env bash
# scripts/gpu_check.sh: the GPU self-check, for a machine with one NVIDIA GPU; with --emulated,
# the same checks on the emulated CUDA device (make emulated: kernels/emulator/README.md), on any
# machine, which CI runs on every commit.
#
#   1. set-up (scripts/setup.sh, when present) and `make` (the nvcc build: CUDA + CPU twins);
#   2. tests/gpu/op_check: every op of kernels/ops.h on both twins, one row per op
#      (max |gpu - cpu| / max |cpu| against a bound);
#   3. training: the tiny model for 20 steps with --device cpu and --device cuda, for
#      --arch gpt, --arch llama (and gpt with --attention naive, which runs the materialised
#      softmax instead of flash), and the tiny MoE with grouped and with per-expert GEMMs;
#      the 20 losses of the two devices must agree to a relative
#      LOSS_RTOL (default 1e-3): max_t |loss_cuda(t) - loss_cpu(t)| / |loss_cpu(t)|;
#   4. the same with 2 ranks on the one GPU (--comm mpi): pp 2 (1f1b, zb-h1, interleaved),
#      tp 2 + sp, expert parallelism, and context parallelism cp 2 with each comm type (the
#      ring's block passes and merges, flash and naive);
#   5. trainer --benchmark saved as a profile, and a llama-100m bf16 run with it: the time
#      model's projected step beside the measured one.
#
# --emulated: the CUDA side is build/emulated/trainer --device cuda-emulated (and its op_check),
# the CPU side the main build's ./trainer; the models are shrunk to what the emulator runs in
# seconds (microbatches of 1, ITERS 2: the emulated device runs a tiny step in ~1 s, and a
# pair's two runs go side by side on two cores), one more
# 2-rank case talks through the emulated NCCL (on one real GPU NCCL refuses two ranks), and part
# 5 is skipped (the emulator's times say nothing of a GPU's).
#
# Prints a summary table and exits non-zero when anything fails. When $OUT is set, the whole
# log goes to $OUT/gpu_check.txt ($OUT a directory, with the metrics files beside it) or to
# the file $OUT.
#
# op_check (tests/gpu/op_check*.cpp: main and the harness, then one file per op family) links
# against the library objects of the build (everything under build/cuda except trainer.o and
# the tests), gathered in an archive so the linker takes only what the kernels need:
#   ar rcs build/cuda/libparalab.a <objects>
#   g++ -std=c++17 -O2 -I. tests/gpu/op_check*.cpp build/cuda/libparalab.a \
#       $(pkg-config --libs mpich) $(pkg-config --libs openblas) -lpthread \
#       -L$CUDA_HOME/lib64 -lcudart -lcublas -lnccl
set -u -o pipefail
cd "$(dirname "$0")/.." || exit 1

EMULATED=0
[[ "${1:-}" == --emulated ]] && EMULATED=1
LOSS_RTOL=${LOSS_RTOL:-1e-3}
# bf16 storage: the two twins round their outputs alike only up to an fp32 ulp (a flipped last
# bf16 bit), and the differences grow over 20 steps; paralab's bf16 tests hold a bf16 run to
# 2e-2 of the fp32 one (tests/test_bf16.cpp, tests/mpi/equivalence.sh)
BF16_RTOL=${BF16_RTOL:-2e-2}
ITERS=20
CONFIG=configs/models/tiny.toml
BUILD=build/cuda
DEVICE=cuda
GPU_TRAINER=./trainer
SINGLE_SHAPE=()                                           # the 1-rank runs' batch
RANKS_SHAPE=(--global-batch-size 8 --micro-batch-size 2)  # the 2-rank runs'
if [[ $EMULATED -eq 1 ]]; then
  ITERS=${ITERS_EMULATED:-2}
  BUILD=build/emulated
  DEVICE=cuda-emulated
  GPU_TRAINER=build/emulated/trainer
  SINGLE_SHAPE=(--global-batch-size 1 --micro-batch-size 1)
  RANKS_SHAPE=(--global-batch-size 2 --micro-batch-size 1)
fi
WORK=$(mktemp -d "${TMPDIR:-/tmp}/paralab_gpu_check.XXXXXX")

OUT_DIR=""
LOG="$WORK/gpu_check.txt"
if [[ -n "${OUT:-}" ]]; then
  if [[ -d "$OUT" ]]; then
    OUT_DIR="$OUT"
    LOG="$OUT/gpu_check.txt"
  else
    LOG="$OUT"
  fi
fi
: >"$LOG"

say() { echo "$@" | tee -a "$LOG"; }
# run LABEL CMD...: runs CMD with its output in the log; returns CMD's status.
run() {
  local label=$1
  shift
  say "---- $label: $*"
  "$@" 2>&1 | tee -a "$LOG"
  return "${PIPESTATUS[0]}"
}

declare -a SUMMARY=()
FAILED=0
record() {  # record NAME DETAIL PASS|FAIL
  SUMMARY+=("$(printf '%-28s %-28s %s' "$1" "$2" "$3")")
  [[ "$3" == PASS ]] || FAILED=1
}

finish() {
  say ""
  say "==== gpu_check summary"
  say "$(printf '%-28s %-28s %s' check detail result)"
  for line in "${SUMMARY[@]}"; do say "$line"; done
  if [[ $FAILED -eq 0 ]]; then say "gpu_check: ALL PASS"; else say "gpu_check: FAILED"; fi
  [[ -n "$OUT_DIR" ]] && cp "$WORK"/*.jsonl "$OUT_DIR"/ 2>/dev/null
  exit $FAILED
}

say "gpu_check: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname)$([[ $EMULATED -eq 1 ]] && echo ', the emulated device')"
[[ $EMULATED -eq 0 ]] && { run "nvidia-smi" nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv || true; }

# ---- 1. set-up and build ----------------------------------------------------------------
if [[ -f scripts/setup.sh ]]; then
  if run "setup" bash scripts/setup.sh; then record setup "scripts/setup.sh" PASS
  else record setup "scripts/setup.sh" FAIL; fi
fi
if run "build" make -j"$(nproc)" && { [[ $EMULATED -eq 0 ]] || run "build" make emulated; }; then
  record build "make$([[ $EMULATED -eq 1 ]] && echo ' && make emulated')" PASS
else
  record build "make" FAIL
  finish
fi

# ---- 2. op_check --------------------------------------------------------------------------
if [[ $EMULATED -eq 1 ]]; then
  if OPENBLAS_NUM_THREADS=1 run "op_check" build/emulated/op_check --jobs "$(nproc)"; then
    record op_check "every op, both twins" PASS
  else record op_check "every op, both twins" FAIL; fi
else
  NVCC_BIN=$(command -v nvcc)
  CUDA_HOME=${CUDA_HOME:-${NVCC_BIN%/bin/nvcc}}
  read -ra HOST_LIBS <<<"$(pkg-config --libs mpich 2>/dev/null) \
                        $(pkg-config --libs openblas 2>/dev/null)"
  mapfile -t OBJS < <(find "$BUILD" -name '*.o' ! -path "$BUILD/tests/*" ! -name trainer.o | sort)
  OP_CHECK_SRCS=(tests/gpu/op_check*.cpp)  # op_check.cpp (main) and the op families' files
  rm -f "$BUILD/libparalab.a"
  mkdir -p "$BUILD/tests/gpu"
  if run "op_check build" ar rcs "$BUILD/libparalab.a" "${OBJS[@]}" &&
     run "op_check build" g++ -std=c++17 -O2 -Wall -Wextra -Werror -I. \
         -o "$BUILD/tests/gpu/op_check" "${OP_CHECK_SRCS[@]}" "$BUILD/libparalab.a" \
         "${HOST_LIBS[@]}" -lpthread \
         -L"$CUDA_HOME/lib64" -Wl,-rpath,"$CUDA_HOME/lib64" -lcudart -lcublas -lnccl; then
    if run "op_check" "$BUILD/tests/gpu/op_check"; then record op_check "every op, both twins" PASS
    else record op_check "every op, both twins" FAIL; fi
  else
    record op_check "build" FAIL
  fi
fi

# ---- 3. training: cpu vs cuda losses ----------------------------------------------------------
# compare_losses CPU.jsonl CUDA.jsonl: prints "max_rel_diff steps", exits 1 on a mismatch
# (above $RTOL: LOSS_RTOL, or BF16_RTOL for the bf16 runs).
compare_losses() {
  python3 - "$1" "$2" "$ITERS" "${RTOL:-$LOSS_RTOL}" <<'EOF'
import json, math, sys
cpu_path, cuda_path, iters, rtol = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
def losses(path):
    out = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line:
                rec = json.loads(line)
                if "loss" in rec:
                    out.append(float(rec["loss"]))
    return out
cpu, cuda = losses(cpu_path), losses(cuda_path)
if len(cpu) != iters or len(cuda) != iters:
    print(f"nan steps cpu={len(cpu)} cuda={len(cuda)} (want {iters})")
    sys.exit(1)
worst = 0.0
for c, g in zip(cpu, cuda):
    if not (math.isfinite(c) and math.isfinite(g)):
        print(f"nan non-finite loss cpu={c} cuda={g}")
        sys.exit(1)
    worst = max(worst, abs(g - c) / max(abs(c), 1e-12))
print(f"{worst:.3e} {iters}")
sys.exit(0 if worst <= rtol else 1)
EOF
}

if [[ ! -f "$CONFIG" ]]; then
  record training "$CONFIG missing" FAIL
  finish
fi
declare -a TABLE=()
# train_both NAME FLAGS...: the run on --device cpu and on --device cuda, their losses
# compared (one TABLE row and one record).
train_both() {
  local name=$1 file="$WORK/single_${#TABLE[@]}" ok=1 result status device
  shift
  # the two runs side by side (one rank each), their logs in order after
  local pids=() device
  for device in cpu "$DEVICE"; do
    local bin=./trainer
    [[ $device == cpu ]] || bin=$GPU_TRAINER
    rm -f "${file}_$device.jsonl"
    OPENBLAS_NUM_THREADS=1 "$bin" "$@" "${SINGLE_SHAPE[@]}" --train-iters "$ITERS" \
        --device "$device" --metrics-jsonl "${file}_$device.jsonl" >"${file}_$device.log" 2>&1 &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || ok=0; done
  for device in cpu "$DEVICE"; do
    say "---- train $name $device"
    tee -a "$LOG" <"${file}_$device.log" >/dev/null
  done
  if [[ $ok -eq 1 ]]; then
    result=$(compare_losses "${file}_cpu.jsonl" "${file}_$DEVICE.jsonl")
    status=$?
  else
    result="trainer failed"
    status=1
  fi
  local verdict
  verdict=$([[ $status -eq 0 ]] && echo PASS || echo FAIL)
  TABLE+=("$(printf '%-14s %-36s %s' "$name" "$result" "$verdict")")
  record "losses $name" "$result" "$verdict"
}
for variant in "gpt" "llama" "gpt --attention naive"; do
  # shellcheck disable=SC2086  # $variant is deliberately split into flags
  train_both "${variant// --attention /-}" --config "$CONFIG" --arch $variant
done
# The tiny MoE (configs/models/tiny-moe.toml): grouped GEMM (cublasGemmGroupedBatchedEx)
# with the fused permute, and per-expert GEMMs with the unfused passes.
train_both "moe grouped" --config configs/models/tiny-moe.toml --moe-grouped-gemm \
  --moe-permute-fusion
train_both "moe per-expert" --config configs/models/tiny-moe.toml --moe-grouped-gemm=false
# bf16 storage, each against the CPU twin's bf16 run: dense, and the MoE with the bf16 grouped
# GEMM (issue 27's failure) and per expert; a head dim of 64 takes the tensor-core flash
# attention (kernels/cuda/flash_mma_*.cu; the tiny model's 32 keeps the scalar kernels)
RTOL=$BF16_RTOL train_both "gpt bf16" --config "$CONFIG" --arch gpt --bf16
RTOL=$BF16_RTOL train_both "llama bf16" --config "$CONFIG" --arch llama --bf16
RTOL=$BF16_RTOL train_both "llama bf16 d64" --config "$CONFIG" --arch llama --bf16 \
  --hidden-size 256 --num-attention-heads 4 --seq-length 200
RTOL=$BF16_RTOL train_both "moe grouped bf16" --config configs/models/tiny-moe.toml --bf16 \
  --moe-grouped-gemm --moe-permute-fusion
RTOL=$BF16_RTOL train_both "moe per-expert bf16" --config configs/models/tiny-moe.toml --bf16 \
  --moe-grouped-gemm=false
# fp16 storage with its dynamic loss scale (from 2^10: no overflow in these steps, which would
# leave nothing to compare), the scalar and the tensor-core flash attention; bf16's bound
RTOL=$BF16_RTOL train_both "gpt fp16" --config "$CONFIG" --arch gpt --fp16 --initial-loss-scale 1024
RTOL=$BF16_RTOL train_both "llama fp16 d64" --config "$CONFIG" --arch llama --fp16 \
  --initial-loss-scale 1024 --hidden-size 256 --num-attention-heads 4 --seq-length 200
# FP8 in the dense linears (docs/fp8.md), one pair per recipe in bf16 storage: the casts are
# bit-identical twins (op_check's fp8 rows), the GEMMs (cuBLASLt per tensor, the emulated path
# for blocks) differ from the CPU's dequantise-then-fp32 product by fp32 summation order, which
# bf16 storage rounds: bf16's bound
RTOL=$BF16_RTOL train_both "gpt fp8 delayed" --config "$CONFIG" --arch gpt --bf16 \
  --fp8-format hybrid --fp8-recipe delayed
RTOL=$BF16_RTOL train_both "llama fp8 tensorwise" --config "$CONFIG" --arch llama --bf16 \
  --fp8-format e4m3 --fp8-recipe tensorwise
RTOL=$BF16_RTOL train_both "llama fp8 blockwise" --config "$CONFIG" --arch llama --bf16 \
  --fp8-format e4m3 --fp8-recipe blockwise

# ---- 4. several ranks on the one GPU: pipelines and tensor parallelism ----------------------
# Two ranks share the GPU (cuda_select_device takes local rank modulo the GPUs) and talk
# through MPI with their buffers staged through the host (--comm mpi: NCCL refuses two ranks
# on one device): the pipeline executor, zb-h1's split and tp + sp on the CUDA kernels,
# against the same run on the CPU; and expert parallelism (4 experts over 2 ranks) with each
# token dispatcher, and each expert's width over etp 2: the dispatch's permutes, all-to-alls
# and partial sums on CUDA buffers; and context parallelism over 2 ranks: the ring's passes
# (flash, and naive's per-pass probabilities), the all-gather's and the all-to-all's
# reorders, the log-sum-exp merge on CUDA buffers; and ZeRO-3's FP8 gathers in blockwise
# (--fp8-param-gather: a weight's shard cast at its 128 x 128 blocks' scales, the GEMMs on the
# gathered codes).
moe_ep="--num-experts 4 --moe-router-topk 2 --moe-grouped-gemm --ep 2 --moe-token-dispatcher-type"
moe_etp="--num-experts 4 --moe-router-topk 2 --moe-grouped-gemm --etp 2 --moe-token-dispatcher-type alltoall"
variants=("--pp 2" "--pp 2 --pipeline-schedule zb-h1" "--pp 2 --vpp 2 --pipeline-schedule interleaved --num-layers 4" "--tp 2 --sequence-parallel" "$moe_ep alltoall" "$moe_ep allgather" "$moe_etp" "--cp 2" "--cp 2 --attention naive" "--cp 2 --cp-comm-type all_gather" "--cp 2 --cp-comm-type a2a" "$moe_ep alltoall --bf16" "$moe_ep allgather --bf16" "$moe_etp --bf16" "--zero-stage 3 --bf16 --fp8-format e4m3 --fp8-recipe blockwise --fp8-param-gather")
# The emulated device gives each rank its own GPU: NCCL's calls (on MPI) run too, data parallel
# with ZeRO-1 and tensor parallel, fp32, bf16 and fp16 (ncclFloat16), and ZeRO-1's FP8 gathers
# (u8) with the blocks' amaxes MAX-reduced.
[[ $EMULATED -eq 1 ]] && variants+=("--zero-stage 1 --comm-cuda nccl" "--tp 2 --sequence-parallel --bf16 --comm-cuda nccl" "--zero-stage 1 --fp16 --initial-loss-scale 1024 --comm-cuda nccl" "--zero-stage 1 --overlap-param-gather --bf16 --fp8-format e4m3 --fp8-recipe blockwise --fp8-param-gather --comm-cuda nccl")
for variant in "${variants[@]}"; do
  name="2 ranks ${variant// --/ }"
  name=${name//--/}
  RTOL=$LOSS_RTOL
  [[ "$variant" == *--bf16* || "$variant" == *--fp16* ]] && RTOL=$BF16_RTOL
  ok=1
  for device in cpu "$DEVICE"; do
    bin=./trainer
    comm=mpi
    [[ $device == cpu ]] || bin=$GPU_TRAINER
    [[ $device != cpu && "$variant" == *--comm-cuda\ nccl* ]] && comm=nccl
    file="$WORK/${device}_ranks_${#TABLE[@]}.jsonl"
    rm -f "$file"
    # shellcheck disable=SC2086
    OPENBLAS_NUM_THREADS=1 run "train $name $device" timeout 600 mpirun -np 2 "$bin" --config "$CONFIG" \
        ${variant//--comm-cuda nccl/} "${RANKS_SHAPE[@]}" --train-iters "$ITERS" --device "$device" \
        --comm "$comm" --metrics-jsonl "$file" || ok=0
  done
  if [[ $ok -eq 1 ]]; then
    result=$(compare_losses "$WORK/cpu_ranks_${#TABLE[@]}.jsonl" "$WORK/${DEVICE}_ranks_${#TABLE[@]}.jsonl")
    status=$?
  else
    result="trainer failed"
    status=1
  fi
  verdict=$([[ $status -eq 0 ]] && echo PASS || echo FAIL)
  TABLE+=("$(printf '%-14s %-36s %s' "${name:0:14}" "$result" "$verdict")")
  record "losses $name" "$result" "$verdict"
done

# ---- 5. the machine measured, and the time model against a measured GPU step -------------
# trainer --benchmark on the GPU (cuBLAS bf16 and fp32 GEMMs, the kernel mix, flash, NCCL at
# one rank: no collective rows) saved as a profile, then llama-100m trained in bf16 with it:
# the run's "time per step, projected vs measured" table goes to the log and its metrics to
# $OUT (time{step_s{projected, measured}}), for notes/performance.md. Recorded, not judged:
# PASS when both run.
if [[ $EMULATED -eq 1 ]]; then
  say "---- 5. benchmark and time model: skipped on the emulated device (its times are the CPU's)"
elif run "benchmark" ./trainer --benchmark --device cuda --benchmark-save "$WORK/gpu.toml" &&
   run "time model on the GPU" ./trainer --config configs/models/llama-100m.toml --bf16 \
       --device cuda --seq-length 1024 --micro-batch-size 8 --global-batch-size 8 \
       --train-iters 6 --hardware "$WORK/gpu.toml" --metrics-jsonl "$WORK/time_gpu.jsonl"; then
  record "benchmark + time model" "profile and projected step" PASS
else
  record "benchmark + time model" "a run failed" FAIL
fi
[[ -n "$OUT_DIR" && -f "$WORK/gpu.toml" ]] && cp "$WORK/gpu.toml" "$OUT_DIR"/ 2>/dev/null

say ""
say "==== losses, $ITERS steps, $DEVICE vs cpu (bound $LOSS_RTOL)"
say "$(printf '%-14s %-36s %s' config 'max rel diff / steps' result)"
for line in "${TABLE[@]}"; do say "$line"; done
finish
