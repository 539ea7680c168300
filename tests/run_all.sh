#!/usr/bin/env bash
# Runs every test: the GoogleTest binary (kernels, plan, flags, data, golden, ledger), the
# command-line error checks, the multi-rank MPI tests (communication, data parallelism,
# equivalence with the single-rank run, Korthikanti's formulas measured) and every lesson's
# check. Usage: tests/run_all.sh BUILD_DIR/unit_tests
set -uo pipefail
cd "$(dirname "$0")/.."
unit=${1:?usage: tests/run_all.sh path/to/unit_tests}
build=$(dirname "$unit")
passed=0; failed=0
run() {  # name, command...
  local name=$1; shift
  local start=$SECONDS
  if "$@"; then passed=$((passed + 1)); echo "[suite ok]   $name ($((SECONDS - start)) s)"
  else failed=$((failed + 1)); echo "[suite FAIL] $name ($((SECONDS - start)) s)"; fi
}
export OPENBLAS_NUM_THREADS=1
run "unit tests (gtest)" "$unit"
run "command-line errors" bash tests/cli_errors.sh ./trainer
run "MPI tests (comm, data parallel)" bash tests/mpi/run_mpi_tests.sh "$build/test_comm"
run "equivalence with the single-rank run" bash tests/mpi/equivalence.sh ./trainer
run "pipelines equal the single-rank run" bash tests/mpi/pipeline.sh ./trainer
run "recompute is bit-identical (tp+sp, pp, ZeRO-3)" bash tests/mpi/recompute.sh ./trainer
run "Korthikanti activations, measured" bash tests/mpi/korthikanti.sh ./trainer
for lesson in lessons/[0-9]*/; do
  run "lesson ${lesson#lessons/}" bash "${lesson}check.sh" ./trainer
done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
