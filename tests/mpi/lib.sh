# tests/mpi/lib.sh: what the comparison scripts (equivalence.sh, pipeline.sh, recompute.sh)
# share; sourced, not run. From the script's arguments (TRAINER [FILTER]) it sets `trainer`
# and `filter`, makes a scratch folder `work` (removed on exit) and defines:
#   run NAME RANKS FLAGS...        one training run (mpirun above one rank) writing
#                                  $work/NAME.{log,jsonl,bin} (--metrics-jsonl, --save-tensors)
#   check NAME REF RANKS FLAGS...  when NAME contains FILTER: run it, then compare_runs.py
#                                  against REF's files at RTOL (default 1e-5; the tensors at
#                                  PARAMS_RTOL when set); counts it
#   finish                         prints "N passed, M failed"; fails when any failed
set -uo pipefail
trainer=${1:?usage: $0 ./trainer [filter]}
filter=${2:-}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OPENBLAS_NUM_THREADS=1
passed=0; failed=0

run() {
  local name=$1 np=$2; shift 2
  local launch=("$trainer")
  [ "$np" -gt 1 ] && launch=(timeout 300 mpirun -np "$np" "$trainer")
  "${launch[@]}" "$@" --metrics-jsonl "$work/$name.jsonl" --save-tensors "$work/$name.bin" \
    > "$work/$name.log" 2>&1 < /dev/null
}

check() {
  local name=$1 ref=$2 np=$3 result=""; shift 3
  case "$name" in *"$filter"*) ;; *) return ;; esac
  if run "$name" "$np" "$@" && result=$(python3 "$here/compare_runs.py" --rtol "${RTOL:-1e-5}" \
       --params-rtol "${PARAMS_RTOL:-${RTOL:-1e-5}}" "$work/$ref.jsonl" "$work/$ref.bin" "$work/$name.jsonl" "$work/$name.bin"); then
    passed=$((passed + 1)); echo "ok    $name: $result"
  else
    failed=$((failed + 1)); echo "FAIL  $name: ${result:-run failed}"; tail -5 "$work/$name.log"
  fi
}

finish() {
  echo "$passed passed, $failed failed"
  [ "$failed" -eq 0 ]
}
