#!/usr/bin/env bash
# Activation recompute reproduces the forward exactly: under tensor + sequence parallelism,
# pipelines (1f1b, interleaved, and zb-h1 with tp + sp) and ZeRO-3, every recompute option
# gives losses, final parameters and last-step gradients BIT-IDENTICAL (--rtol 0) to the same
# run without recompute, dropout included (its masks are counter-based: kernels/math.h);
# and every rank's ledger and communication equal the plan (compare_runs.py), the
# recomputed forwards' collectives and ZeRO-3 gathers included.
#
# usage: tests/mpi/recompute.sh ./trainer [filter]   (filter: substring of a case name)
source "$(dirname "$0")/lib.sh"  # trainer, filter, work, run, check, finish

# gpt with both dropouts (the masks must come back the same), naive attention (selective
# core_attn then drops the S x S probabilities); 4 layers: 2 per stage, 1 per chunk.
gpt="--arch gpt --num-layers 4 --hidden-size 32 --num-attention-heads 4 --seq-length 16 --vocab-size 64 --hidden-dropout 0.1 --attention-dropout 0.1 --attention naive"
common="--adam-eps 1e-4 --train-iters 4 --lr 1e-2 --min-lr 1e-3 --lr-warmup-iters 2 --log-interval 100 --report-interval 0 --peak-tflops 1 --global-batch-size 8"

declare -A parallel=(
  [tp2-sp]="2 --tp 2 --sequence-parallel --micro-batch-size 4"
  [pp2-1f1b]="2 --pp 2 --micro-batch-size 2"
  [pp2-interleaved]="2 --pp 2 --vpp 2 --pipeline-schedule interleaved --micro-batch-size 2"
  [dp2-zero3]="2 --zero-stage 3 --micro-batch-size 2 --overlap-grad-reduce"
  [pp2-zb-h1-tp2-sp]="4 --pp 2 --pipeline-schedule zb-h1 --tp 2 --sequence-parallel --micro-batch-size 2"
)
options=(
  "selective-core_attn:--recompute-granularity selective"
  "selective-all:--recompute-granularity selective --recompute-modules core_attn mlp norm"
  "full-uniform1:--recompute-granularity full --recompute-method uniform --recompute-num-layers 1"
  "full-uniform2:--recompute-granularity full --recompute-method uniform --recompute-num-layers 2"
  "full-block1:--recompute-granularity full --recompute-method block --recompute-num-layers 1"
)
for par in tp2-sp pp2-1f1b pp2-interleaved dp2-zero3 pp2-zb-h1-tp2-sp; do
  set -- ${parallel[$par]}
  np=$1; shift
  flags="$*"
  ref="$par-none"
  run "$ref" "$np" $gpt $common $flags || { echo "FAIL  $ref: run failed"; tail -5 "$work/$ref.log"; failed=$((failed + 1)); continue; }
  for option in "${options[@]}"; do
    name="$par-${option%%:*}"
    # zb-h1's W reads what selective mlp and norm drop (refused, one line)
    case "$name" in *zb-h1*selective-all) continue ;; esac
    RTOL=0 check "$name" "$ref" "$np" $gpt $common $flags ${option#*:}
  done
done
finish
