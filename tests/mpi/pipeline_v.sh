#!/usr/bin/env bash
# The schedules of the DeepSeek era (parallel/pipeline_schedule.h) are equivalent to the
# single-rank run: zb-v and dualpipev (the V placement, rank r holding stages r and 2p - 1 - r)
# and dualpipe (two copies of the model, ranks r and p - 1 - r summing their gradients), on 2
# and 4 ranks, with data parallelism at every ZeRO stage, tensor (and sequence), context and
# expert parallelism, selective and full recompute, and the uneven splits
# (--decoder-first/last-pipeline-num-layers, --account-for-embedding/loss-in-pipeline-split),
# give the losses, the final parameters and the last step's gradients of one rank training
# the same global batch, to 1e-5 relative over 3 steps; and on every rank the ledger and the
# communication equal the plan (compare_runs.py reads each rank from --metrics-jsonl).
#
# usage: tests/mpi/pipeline_v.sh ./trainer [filter]   (filter: substring of a case name)
source "$(dirname "$0")/lib.sh"  # trainer, filter, work, run, check, finish

# 8 layers: 4 stages of 2 on 2 ranks, 8 of 1 on 4. --adam-eps 1e-4: see equivalence.sh.
gpt="--arch gpt --num-layers 8 --hidden-size 32 --num-attention-heads 4 --seq-length 16 --vocab-size 64"
llama="--arch llama --num-layers 8 --hidden-size 32 --num-attention-heads 4 --num-query-groups 2 --ffn-hidden-size 48 --seq-length 16 --vocab-size 64"
common="--adam-eps 1e-4 --train-iters 3 --lr 1e-2 --min-lr 1e-3 --lr-warmup-iters 2 --log-interval 100 --report-interval 0 --peak-tflops 1"

ref() {  # model, global batch, micro batch, [extra flags]: the reference's name
  local name="$1-ref$2x$3${4:+-$5}"
  [ -f "$work/$name.bin" ] || run "$name" 1 ${!1} $common --global-batch-size "$2" \
    --micro-batch-size "$3" ${4:-} || { echo "reference run failed"; cat "$work/$name.log"; exit 1; }
  echo "$name"
}

schedules="zb-v dualpipev dualpipe"
for s in $schedules; do
  # p 2 (m 4, and zb-v's odd m 3) and p 4 (m 8: the DualPipes' 2p), gpt's tied embedding on
  # rank 0 with the head; llama untied
  check "gpt-pp2-$s-m4" "$(ref gpt 8 2)" 2 $gpt $common --pp 2 --pipeline-schedule $s \
    --global-batch-size 8 --micro-batch-size 2
  check "gpt-pp4-$s-m8" "$(ref gpt 8 1)" 4 $gpt $common --pp 4 --pipeline-schedule $s \
    --global-batch-size 8 --micro-batch-size 1
  check "llama-pp2-$s-m4" "$(ref llama 8 2)" 2 $llama $common --pp 2 --pipeline-schedule $s \
    --global-batch-size 8 --micro-batch-size 2
  # data parallelism at every ZeRO stage (the mirror sums each stage's gradient buffer)
  for zero in 0 1 2 3; do
    check "gpt-pp2-dp2-$s-zero$zero" "$(ref gpt 8 1)" 4 $gpt $common --pp 2 \
      --pipeline-schedule $s --global-batch-size 8 --micro-batch-size 1 --zero-stage $zero \
      --ddp-bucket-size 5000 --overlap-grad-reduce
  done
  # tensor and sequence parallelism; context parallelism
  check "llama-pp2-tp2-sp-$s" "$(ref llama 8 2)" 4 $llama $common --pp 2 --tp 2 \
    --sequence-parallel --pipeline-schedule $s --global-batch-size 8 --micro-batch-size 2
  check "gpt-pp2-cp2-$s" "$(ref gpt 8 2)" 4 $gpt $common --pp 2 --cp 2 --pipeline-schedule $s \
    --global-batch-size 8 --micro-batch-size 2
  # recompute: selective (a split B's W reads what core_attn keeps) and full
  check "gpt-pp2-$s-selective" "$(ref gpt 8 2)" 2 $gpt $common --pp 2 --pipeline-schedule $s \
    --global-batch-size 8 --micro-batch-size 2 --recompute-granularity selective
  check "gpt-pp2-$s-full" "$(ref gpt 8 2)" 2 $gpt $common --pp 2 --pipeline-schedule $s \
    --global-batch-size 8 --micro-batch-size 2 --recompute-granularity full \
    --recompute-method uniform --recompute-num-layers 1
done
check "gpt-pp2-zb-v-m3" "$(ref gpt 6 2)" 2 $gpt $common --pp 2 --pipeline-schedule zb-v \
  --global-batch-size 6 --micro-batch-size 2
# uneven: the V's rank 0 (both ends) with 2 layers, its other rank 6; DualPipe's stages 1 2 2 3;
# the embedding and the loss counted as layers
check "gpt-pp2-zb-v-first2" "$(ref gpt 8 2)" 2 $gpt $common --pp 2 --pipeline-schedule zb-v \
  --global-batch-size 8 --micro-batch-size 2 --decoder-first-pipeline-num-layers 2
check "gpt-pp4-dualpipe-first1-last3" "$(ref gpt 8 1)" 4 $gpt $common --pp 4 \
  --pipeline-schedule dualpipe --global-batch-size 8 --micro-batch-size 1 \
  --decoder-first-pipeline-num-layers 1 --decoder-last-pipeline-num-layers 3
check "gpt-pp2-1f1b-account" "$(ref gpt 8 2)" 2 $gpt $common --pp 2 --global-batch-size 8 \
  --micro-batch-size 2 --account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split
check "gpt-pp2-dualpipe-account" "$(ref gpt 8 2)" 2 $gpt $common --pp 2 \
  --pipeline-schedule dualpipe --global-batch-size 8 --micro-batch-size 2 \
  --account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split

# expert parallelism: the MoE llama of moe.sh (4 layers: 1 a stage on the V of 2 ranks)
source "$(dirname "$0")/moe_models.sh"  # moe, llama, gpt, common, ref (MoE's)
ref llama-moe-ref $llama --moe-grouped-gemm
for s in $schedules; do
  check "llama-moe-pp2-ep2-$s" llama-moe-ref 4 $llama --moe-grouped-gemm $common --ep 2 --pp 2 \
    --pipeline-schedule $s --moe-token-dispatcher-type alltoall
done
finish
