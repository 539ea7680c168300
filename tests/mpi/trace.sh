#!/usr/bin/env bash
# What a multi-rank run shows of every rank (docs/output.md "Every rank", "Timelines"):
# --trace has a process per world rank with its actions on a compute lane and its
# collectives (tp, dp, pp exchanges) on comm lanes, no empty slices, no flow pointing backwards
# (tests/mpi/check_trace.py); the report's "memory per rank" table lists every rank with
# every ledger category, predicted above measured, for dp, tp and pp alike; and
# --print-schedule draws every pipeline, its scale stated once.
#
# usage: tests/mpi/trace.sh ./trainer [filter]   (filter: substring of a case name)
source "$(dirname "$0")/lib.sh"  # trainer, filter, work, finish
tiny="--config configs/models/tiny.toml --train-iters 2 --log-interval 100 --peak-tflops 1"

case_() {  # name, ranks, check_trace flags (one word), trainer flags...
  local name=$1 np=$2 checks=$3; shift 3
  case "$name" in *"$filter"*) ;; *) return ;; esac
  local log="$work/$name.log" ok=1
  timeout 300 mpirun -np "$np" "$trainer" $tiny "$@" --trace "$work/$name.json" \
    --print-schedule > "$log" 2>&1 < /dev/null || { echo "FAIL  $name: run failed"; tail -5 "$log"; ok=0; }
  if [ $ok = 1 ]; then
    python3 "$here/check_trace.py" "$work/$name.json" --world "$np" ${checks//:/ } \
      > "$work/$name.check" || ok=0
    # memory per rank: every rank, a predicted and a measured row, all ten columns
    python3 - "$log" "$np" >> "$work/$name.check" <<'PY' || ok=0
import re, sys
log, n = open(sys.argv[1]).read(), int(sys.argv[2])
head = "memory per rank (MiB): each category is its own peak in the step; total is the peak of their sum"
assert head in log, "no memory per rank table"
table = log[log.rindex(head):].split("\n\n")[0].splitlines()
cols = "params grads master optim activ recomp comm_buf logits work total".split()
header = next(l for l in table if l.split()[:5] == ["rank", "pp", "tp", "cp", "dp"])
assert header.split()[5:] == cols, header
pred = [l for l in table if re.match(r"\s+\d+\s+\d+\s+\d+\s+\d+\s+\d+ pred", l)]
meas = [l for l in table if re.match(r"\s+meas", l)]
assert [int(l.split()[0]) for l in pred] == list(range(n)), pred
assert len(meas) == n and all(len(l.split()) == 11 for l in meas), meas
assert max(len(l) for l in table) <= 120, max(len(l) for l in table)
# the timeline states its scale once, in ms
assert "timeline, measured (last step)" in log and "(1 unit = 1 ms)" not in log
assert re.search(r"ms \(mean per action\), (1 ms = [\d.e+-]+ columns?|1 column = [\d.e+-]+ ms)", log)  # squeezed: 1 ms = 12.5 columns
print("ok    memory per rank: %d ranks x 10 columns, predicted and measured; timeline scale" % n)
PY
  fi
  if [ $ok = 1 ]; then passed=$((passed + 1)); echo "ok    $name"
  else failed=$((failed + 1)); echo "FAIL  $name"; grep -v "^ok" "$work/$name.check"; fi
}

# the brief's 8-rank grid: pp 2 x tp 2 x dp 2, four pipelines
case_ pp2-tp2-dp2 8 --groups=tp,dp,pp,world:--flows --pp 2 --tp 2 --global-batch-size 16 --mbs 2
# data and tensor parallelism alone: no pipeline, still every rank
case_ dp2 2 --groups=dp,world --global-batch-size 4 --mbs 2
case_ tp2 2 --groups=tp,world --tp 2 --global-batch-size 4 --mbs 2
# dualpipe: both directions' messages, the mirror all-reduce on every rank
case_ pp2-dualpipe-tp2 4 --groups=tp,pp,mirror,world:--flows --pp 2 --tp 2 \
  --pipeline-schedule dualpipe --global-batch-size 8 --mbs 2
# the clocks estimated by ping-pong (as across nodes): flows still forwards
PARALAB_CLOCK_PINGPONG=1 case_ pp2-pingpong 2 --groups=pp:--flows --pp 2 \
  --pipeline-schedule zb-h1 --global-batch-size 8 --mbs 2
finish
