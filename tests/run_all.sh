#!/usr/bin/env bash
# Runs every test: the GoogleTest binary (kernels, plan, flags, data, golden, ledger), the
# layering of the includes, the command-line error checks, every ./trainer command of the
# README and docs/ (planned), the multi-rank MPI tests
# (communication, data parallelism, equivalence with the single-rank run, MoE, expert
# and context parallelism, random layouts mixing them all, Korthikanti's formulas measured, the kernels' traffic, the
# benchmark and the time model against measured steps, NaN steps skipped, checkpoints resumed,
# resharded, killed and refused, CPU offload), the instructors' tools (scripts/ablate,
# scripts/plot), the Hugging Face exports against transformers, a Megatron-LM Llama script's
# arguments as pasted (with TensorBoard's reader), Megatron's indexed datasets against
# megatron-core's samples, a Megatron-DeepSpeed launch line with its ds_config.json, the fuzzed file readers and every lesson's
# check.
# Takes the binaries `make binaries` links: ./trainer and build/{unit_tests,test_comm,
# test_data_parallel,hf_logits,megatron_samples}, whichever build they are; and the emulated
# device's (make emulated: build/emulated/{emulator_tests,op_check,trainer,planted_driver}),
# whose suites run the CUDA code on the CPU (kernels/emulator/README.md).
#
#   bash tests/run_all.sh              everything (make test)
#   bash tests/run_all.sh --mpi-only   the MPI suites (make mpi-test)
#   bash tests/run_all.sh --lessons    every lesson's check.sh (make lessons)
#   bash tests/run_all.sh --quick      one suite of each kind (the fresh-root CI check)
#
# Two lanes in `make test`: the MPI suites keep two cores busy about three quarters of the time
# (their ranks wait on each other), so the suites that compare numbers and bytes and time
# nothing (the lessons, the instructors' tools, the references against PyTorch, transformers
# and megatron-core, the fuzzers) run beside the first of them, the equivalence suites, in a
# second lane whose output prints when it ends. The suites that time steps, draw clocks or kill
# ranks start after it, alone. On 2 cores, 2026-12-07: 868 s in one lane, 771-784 s in two
# (docs/testing.md).
set -uo pipefail
cd "$(dirname "$0")/.."
mode=${1:-all}
case $mode in all|--mpi-only|--lessons|--quick) ;;
  *) echo "usage: tests/run_all.sh [--mpi-only|--lessons|--quick]" >&2; exit 2 ;; esac
passed=0; failed=0
run() {  # name, command...
  local name=$1; shift
  local start=$SECONDS
  if "$@"; then passed=$((passed + 1)); echo "[suite ok]   $name ($((SECONDS - start)) s)"
  else failed=$((failed + 1)); echo "[suite FAIL] $name ($((SECONDS - start)) s)"; fi
}
export OPENBLAS_NUM_THREADS=1

# start_lane SUITES: runs the function SUITES in a second lane, its output held in a file;
# join_lane prints it and adds its tally (a lane that ends without one counts as a failed suite).
lane_log="" lane_tally="" lane_pid=""
start_lane() {
  lane_log=$(mktemp) lane_tally=$(mktemp)
  ( passed=0 failed=0; "$1" || failed=$((failed + 1)); echo "$passed $failed" > "$lane_tally" ) \
    > "$lane_log" 2>&1 &
  lane_pid=$!
}
join_lane() {
  wait "$lane_pid"
  cat "$lane_log"
  local p=0 f=1
  read -r p f < "$lane_tally" || { p=0 f=1; echo "[suite FAIL] the second lane ended early"; }
  passed=$((passed + p)); failed=$((failed + f))
  rm -f "$lane_log" "$lane_tally"
}

basics() {
  run "unit tests (gtest)" build/unit_tests
  run "layering of the includes" bash tests/check_layout.sh
  run "command-line errors" bash tests/cli_errors.sh ./trainer
}
lessons() {
  for lesson in lessons/[0-9]*/; do
    run "lesson ${lesson#lessons/}" bash "${lesson}check.sh" ./trainer
  done
}
tools_references_lessons() {  # numbers and bytes, no durations: the second lane
  run "fuzzed readers (15 s, with clang++)" env FUZZ_SECONDS=15 bash tests/fuzz/run.sh
  run "every ./trainer command of README and docs/ plans" bash tests/docs_commands.sh ./trainer
  run "scripts/ablate's table equals the runs" bash tests/scripts/ablate.sh ./trainer
  run "scripts/plot renders every chart" bash tests/scripts/plot.sh ./trainer
  run "Hugging Face exports: transformers' logits" bash tests/scripts/hf_check.sh ./trainer
  run "a Megatron Llama script as pasted, TensorBoard" bash tests/scripts/megatron_llama.sh ./trainer
  run "Megatron's datasets: megatron-core's samples" bash tests/scripts/megatron_data.sh build/megatron_samples
  run "FP8 codes: PyTorch's float8 casts" bash tests/scripts/fp8_reference.sh
  run "the loss scaler's reference: megatron-core's" bash tests/scripts/loss_scaler.sh
  run "a Megatron-DeepSpeed launch line, ds_config.json" bash tests/scripts/megatron_deepspeed.sh ./trainer
  lessons
}
mpi_tests() {
  run "MPI tests (comm, data parallel)" bash tests/mpi/run_mpi_tests.sh build/test_comm
}
equivalence_suites() {  # runs against runs: losses, gradients, bytes
  mpi_tests
  run "equivalence with the single-rank run" bash tests/mpi/equivalence.sh ./trainer
  run "pipelines equal the single-rank run" bash tests/mpi/pipeline.sh ./trainer
  run "zb-v, dualpipev, dualpipe equal the single rank" bash tests/mpi/pipeline_v.sh ./trainer
  run "recompute is bit-identical (tp+sp, pp, ZeRO-3)" bash tests/mpi/recompute.sh ./trainer
  run "MoE equals the single-rank run (dp, pp)" bash tests/mpi/moe.sh ./trainer
  run "expert parallelism equals the single-rank run" bash tests/mpi/expert_parallel.sh ./trainer
  run "context parallelism equals the single-rank run" bash tests/mpi/context_parallel.sh ./trainer
  run "100 random layouts: single rank, plan, resume" python3 tests/mpi/layout_fuzz.py ./trainer \
    --seed 1 --cases 100
  run "validation loss equals the single-rank run" bash tests/mpi/eval.sh ./trainer
  run "Korthikanti activations, measured" bash tests/mpi/korthikanti.sh ./trainer
  run "non-GEMM kernels equal the plan on every rank" bash tests/mpi/kernel_traffic.sh ./trainer
}
timed_and_killed_suites() {  # clocks, step times, signals: alone on the cores
  run "every rank in --trace, memory per rank" bash tests/mpi/trace.sh ./trainer
  run "no fresh allocation after the first step" bash tests/mpi/allocations.sh ./trainer
  run "--benchmark's tables and profile" bash tests/mpi/benchmark.sh ./trainer
  run "projected step within 2x of measured" bash tests/mpi/time_model.sh ./trainer
  run "NaN steps skipped, then exit 3 (1-2 ranks)" bash tests/mpi/skipped_steps.sh ./trainer
  run "fp16: megatron-core's loss scale, underflow" bash tests/mpi/fp16.sh ./trainer
  run "fp8: each recipe follows the bf16 run" bash tests/mpi/fp8.sh ./trainer
  run "a stopped or killed rank ends the job" bash tests/mpi/faults.sh ./trainer
  run "checkpoints resume bitwise, reshard to 1e-5" bash tests/mpi/checkpoint.sh ./trainer
  run "checkpoints: kill mid-save, signals, bad files" bash tests/mpi/checkpoint_faults.sh ./trainer
  run "CPU offload is bit-identical, host bytes == plan" bash tests/mpi/offload.sh ./trainer
}
emulated_device() {
  run "emulated device: its PTX and its checks" build/emulated/emulator_tests
  run "emulated device: planted defects reported" bash tests/emulator/planted/defects.sh
  run "emulated device: CUDA ops = CPU twins, training" bash scripts/gpu_check.sh --emulated
  run "emulated V100, T4: --bf16 refused, fp16 trains" bash tests/emulator/older_gpus.sh
}

case $mode in
  --quick)
    basics
    mpi_tests
    run "equivalence (dp and tp subset)" bash tests/mpi/equivalence.sh ./trainer 'dp2-zero1'
    run "lesson 01-memory" bash lessons/01-memory/check.sh ./trainer
    run "scripts/plot renders every chart" bash tests/scripts/plot.sh ./trainer ;;
  --lessons) lessons ;;
  --mpi-only) equivalence_suites; timed_and_killed_suites ;;
  all)
    start_lane tools_references_lessons
    basics
    equivalence_suites
    join_lane
    timed_and_killed_suites
    emulated_device ;;
esac
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
