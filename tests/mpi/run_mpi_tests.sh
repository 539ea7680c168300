#!/usr/bin/env bash
# tests/mpi/run_mpi_tests.sh: run the communication tests under mpirun (MPICH).
#
#   bash tests/mpi/run_mpi_tests.sh build/cpu/test_comm
#
# Builds nothing: it takes the test binary. Cases: the binary alone (an MPI singleton,
# world 1), mpirun -np 2, 4, 8, and the abort case: rank 1 fails while the others wait in a
# collective, and every rank must end (non-zero exit, the failing rank's message on
# stderr) well before the timeout. Then, when test_data_parallel sits beside the binary
# (make build/cpu/test_data_parallel), the data-parallel tests at -np 1, 2 and 4.
# Each case runs under `timeout 120`: a hang is a failure.
# Prints 'N passed, N failed' last; exits non-zero when any case failed.
set -u
bin=${1:?usage: run_mpi_tests.sh TEST_COMM_BINARY}
[ -x "$bin" ] || { echo "run_mpi_tests.sh: $bin is not an executable" >&2; exit 2; }
passed=0
failed=0
log=$(mktemp -d)
trap 'rm -rf "$log"' EXIT

report() {  # name, ok(0/1), seconds, log file
  if [ "$2" -eq 0 ]; then
    passed=$((passed + 1)); printf 'PASS  %-28s %6ss\n' "$1" "$3"
  else
    failed=$((failed + 1)); printf 'FAIL  %-28s %6ss\n' "$1" "$3"; tail -n 30 "$4"
  fi
}

run_case() {  # name, command...
  local name=$1; shift
  local t0=$SECONDS
  timeout 120 "$@" >"$log/out" 2>&1
  local rc=$?
  [ $rc -eq 124 ] && echo "(timed out after 120 s)" >>"$log/out"
  report "$name" $((rc != 0)) $((SECONDS - t0)) "$log/out"
}

run_case "singleton (no mpirun)" "$bin"
for n in 2 4 8; do
  run_case "mpirun -np $n" mpirun -np "$n" "$bin"
done

# An error on one rank must end all of them with that rank's message, not hang.
t0=$SECONDS
timeout 120 mpirun -np 4 "$bin" --abort-test >"$log/abort" 2>&1
rc=$?
ok=1
if [ $rc -ne 0 ] && [ $rc -ne 124 ] &&
   grep -q "paralab: error: rank 1: deliberate failure" "$log/abort"; then
  ok=0
fi
[ $ok -ne 0 ] &&
  echo "(exit status $rc; expected non-zero, not 124, and rank 1's message)" >>"$log/abort"
report "abort on one rank (np 4)" $ok $((SECONDS - t0)) "$log/abort"

dpbin=$(dirname "$bin")/test_data_parallel
if [ -x "$dpbin" ]; then
  for n in 1 2 4; do
    run_case "data parallel, mpirun -np $n" mpirun -np "$n" "$dpbin"
  done
fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
