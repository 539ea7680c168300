#!/usr/bin/env bash
# tests/mpi/faults.sh: a rank that hangs or dies takes the job down, within the watchdog's
# limit, with no process left behind.
#   bash tests/mpi/faults.sh ./trainer [filter]
# Four ranks (tp 2 x dp 2) train the tiny preset with --collective-timeout 4; once the step
# lines run, one rank is stopped (SIGSTOP: it hangs, its peers wait in a collective) or
# killed (SIGKILL: it is gone). Each case checks:
#   - mpirun exits non-zero within the limit plus a margin for the launcher (20 s);
#   - SIGSTOP: stderr names the watchdog, the group and operation, and the step
#     ("--collective-timeout 4 s passed waiting for tp all-reduce at step 7: ...");
#   - SIGKILL: MPICH's launcher ends the job at once when a rank exits abnormally, before
#     the watchdog would (so no watchdog line is required);
#   - afterwards no process of the job is left (the stopped one included).
source "$(dirname "$0")/lib.sh"  # trainer, filter, work, passed/failed, finish
limit=4
margin=20

case_() {  # name, signal
  local name=$1 signal=$2
  case "$name" in *"$filter"*) ;; *) return ;; esac
  local seed=$((40000 + RANDOM))  # marks this job's processes for pgrep
  mpirun -np 4 "$trainer" --config configs/models/tiny.toml --tp 2 --train-iters 100000 \
    --log-interval 1 --collective-timeout "$limit" --seed "$seed" \
    > "$work/$name.out" 2> "$work/$name.err" < /dev/null &
  local job=$! waited=0
  until grep -q '^ *3/' "$work/$name.out" 2>/dev/null; do  # step 3 printed: mid-training
    sleep 0.2; waited=$((waited + 1))
    if [ "$waited" -gt 300 ] || ! kill -0 "$job" 2>/dev/null; then
      failed=$((failed + 1)); echo "FAIL  $name: the job never reached step 3"
      tail -3 "$work/$name.err"; kill -9 "$job" 2>/dev/null; return
    fi
  done
  local ranks victim
  ranks=$(pgrep -f -- "^$trainer .*--seed $seed")
  victim=$(echo "$ranks" | tail -1)
  local start=$SECONDS
  kill "-$signal" "$victim"
  local rc=0 took
  wait "$job" || rc=$?
  took=$((SECONDS - start))
  sleep 1
  local left
  left=$(pgrep -f -- "^$trainer .*--seed $seed" | tr '\n' ' ')
  local problems=""
  [ "$(echo "$ranks" | wc -l)" -eq 4 ] || problems+=" found $(echo "$ranks" | wc -l) ranks, not 4;"
  [ "$rc" -ne 0 ] || problems+=" mpirun exited 0;"
  [ "$took" -le $((limit + margin)) ] || problems+=" took ${took} s;"
  [ -z "$left" ] || problems+=" processes left: $left;"
  if [ "$signal" = STOP ] &&
     ! grep -Eq -- "--collective-timeout $limit s passed waiting for [a-z_]+ [a-z/-]+ at step [0-9]+: a rank of the group has died or hangs" "$work/$name.err"; then
    problems+=" no watchdog line naming the group, operation and step;"
  fi
  for p in $left; do kill -CONT "$p" 2>/dev/null; kill -9 "$p" 2>/dev/null; done
  if [ -z "$problems" ]; then
    passed=$((passed + 1))
    echo "ok    $name: exit $rc after $took s, nothing left$( [ "$signal" = STOP ] &&
      printf '; %s' "$(grep -Eo -- 'waiting for [a-z_]+ [a-z/-]+ at step [0-9]+' "$work/$name.err" | head -1)")"
  else
    failed=$((failed + 1)); echo "FAIL  $name:$problems"; tail -4 "$work/$name.err"
  fi
}

case_ sigstop-one-of-4 STOP
case_ sigkill-one-of-4 KILL
finish
