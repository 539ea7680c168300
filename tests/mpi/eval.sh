#!/usr/bin/env bash
# Evaluation (--eval-interval) is equivalent to the single-rank run: every layout's validation
# losses (forward only, on the held-out split: model/evaluate.h) equal one rank's to 1e-5
# relative at every step that evaluated (compare_runs.py), while the training losses,
# parameters, ledgers and communication still match the plan and the reference, so the
# evaluation between steps perturbs neither the training nor the step's measurements. And a
# run with evaluation trains exactly as the run without it.
#
# usage: tests/mpi/eval.sh ./trainer [filter]   (filter: substring of a case name)
source "$(dirname "$0")/lib.sh"  # trainer, filter, work, run, check, finish

# 4 layers: 2 stages x 2 chunks under interleaving. 5 steps, evaluations after steps 2, 4
# and 5 (the end), 3 validation batches of the global batch 8. --adam-eps 1e-4: see
# equivalence.sh.
gpt="--arch gpt --num-layers 4 --hidden-size 32 --num-attention-heads 4 --seq-length 16 --vocab-size 64"
llama="--arch llama --num-layers 4 --hidden-size 32 --num-attention-heads 4 --num-query-groups 2 --ffn-hidden-size 48 --seq-length 16 --vocab-size 64"
common="--adam-eps 1e-4 --train-iters 5 --global-batch-size 8 --lr 1e-2 --min-lr 1e-3 --lr-warmup-iters 2 --log-interval 100 --report-interval 0 --peak-tflops 1 --eval-interval 2 --eval-iters 3"

for arch in gpt llama; do
  model=${!arch}
  run "$arch-ref" 1 $model $common --micro-batch-size 2 || { echo "reference run failed"; cat "$work/$arch-ref.log"; exit 1; }
  check "$arch-dp2" "$arch-ref" 2 $model $common --micro-batch-size 2
  check "$arch-dp2-zero3" "$arch-ref" 2 $model $common --micro-batch-size 2 --zero-stage 3 --ddp-bucket-size 2000
  check "$arch-tp2" "$arch-ref" 2 $model $common --micro-batch-size 2 --tp 2
  check "$arch-tp2-sp" "$arch-ref" 2 $model $common --micro-batch-size 2 --tp 2 --sequence-parallel
  check "$arch-pp2" "$arch-ref" 2 $model $common --micro-batch-size 2 --pp 2
  check "$arch-pp2-interleaved" "$arch-ref" 2 $model $common --micro-batch-size 2 --pp 2 --vpp 2
  check "$arch-pp2-zb-h1" "$arch-ref" 2 $model $common --micro-batch-size 2 --pp 2 --pipeline-schedule zb-h1
done
check "gpt-dp2-zero1-overlap" "gpt-ref" 2 $gpt $common --micro-batch-size 2 --zero-stage 1 \
  --overlap-grad-reduce --overlap-param-gather --ddp-bucket-size 2000
check "gpt-pp2-gpipe-tp2" "gpt-ref" 4 $gpt $common --micro-batch-size 2 --pp 2 --pipeline-schedule gpipe --tp 2
check "gpt-pp2-dp2" "gpt-ref" 4 $gpt $common --micro-batch-size 2 --pp 2 --zero-stage 2
check "gpt-pp4-1f1b" "gpt-ref" 4 $gpt $common --micro-batch-size 2 --pp 4
check "gpt-tp2-dp2-zero3" "gpt-ref" 4 $gpt $common --micro-batch-size 2 --tp 2 --zero-stage 3
# the head's loss-only forward unfused, and the layers' under full and selective recompute
check "gpt-tp2-no-fused-ce" "gpt-ref" 2 $gpt $common --micro-batch-size 2 --tp 2 --no-fused-ce
check "gpt-pp2-recompute-full" "gpt-ref" 2 $gpt $common --micro-batch-size 2 --pp 2 \
  --recompute-granularity full --recompute-method uniform --recompute-num-layers 2
check "llama-dp2-recompute-selective" "llama-ref" 2 $llama $common --micro-batch-size 2 \
  --recompute-granularity selective --recompute-modules core_attn mlp norm

# Evaluation changes nothing the training reads: the same run without it trains alike, to
# the bit (losses and parameters), and the run with it keeps its ledger and communication the
# plan's. With dropout on (evaluation runs without it); and with FP8 delayed scaling, whose
# validation casts record amaxes like any cast (the state is put back after), with its ZeRO-1
# FP8 gathers overlapped (the evaluation's forward makes them first; the next step makes them
# again, as its plan says)
noeval=${common/--eval-interval 2 --eval-iters 3/}
unchanged() {  # name ranks flags...
  local name=$1 np=$2; shift 2
  case "$name" in *"$filter"*) ;; *) return ;; esac
  if run "$name-eval" "$np" "$@" $common && run "$name-noeval" "$np" "$@" $noeval &&
     python3 - "$work/$name-eval.jsonl" "$work/$name-noeval.jsonl" <<'PY' &&
import json, sys
def steps(p):
    return [r for r in map(json.loads, open(p)) if r.get("type") == "step"]
a, b = steps(sys.argv[1]), steps(sys.argv[2])
assert [r["loss"] for r in a] == [r["loss"] for r in b], "training losses differ"
assert [r["peak_memory_bytes"] for r in a] == [r["peak_memory_bytes"] for r in b], "peaks differ"
assert sum("validation_loss" in r for r in a) == 3 and not any("validation_loss" in r for r in b)
PY
     cmp -s "$work/$name-eval.bin" "$work/$name-noeval.bin" &&
     python3 "$here/compare_runs.py" --rtol 0 "$work/$name-eval.jsonl" "$work/$name-eval.bin" \
       "$work/$name-eval.jsonl" "$work/$name-eval.bin" > /dev/null; then
    passed=$((passed + 1)); echo "ok    $name: losses, peaks and parameters identical, ledger == plan"
  else
    failed=$((failed + 1)); echo "FAIL  $name"; tail -5 "$work/$name-eval.log"
  fi
}
unchanged train-unchanged 2 $gpt --micro-batch-size 2 --pp 2 --hidden-dropout 0.1 \
  --attention-dropout 0.1
unchanged fp8-delayed-pg-unchanged 2 $llama --micro-batch-size 2 --fp8-format hybrid \
  --fp8-recipe delayed --zero-stage 1 --fp8-param-gather --overlap-param-gather \
  --overlap-grad-reduce
finish
