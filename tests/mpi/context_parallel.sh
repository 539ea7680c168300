#!/usr/bin/env bash
# Context parallelism (parallel/context_parallel.h) is equivalent to the single-rank run: each
# sequence split over cp ranks (the zigzag layout, and the contiguous one), attention over the
# ring (p2p), the all-gather and the all-to-all (a2a), flash and naive kernels, with dropout
# keyed by global position, alone and with tp + sp, pp, dp (ZeRO 1 and 3 over dp x cp) and
# recompute, gives the losses, final parameters and last step's gradients of one rank to 1e-5
# relative over 5 steps; and every rank's ledger, communication (the cp group's send/recvs,
# all-gathers, reduce-scatters and all-to-alls, the dp_cp group's reductions) and FLOPs equal
# its plan (compare_runs.py).
#
# usage: tests/mpi/context_parallel.sh ./trainer [filter]   (filter: substring of a case name)
source "$(dirname "$0")/lib.sh"  # trainer, filter, work, run, check, finish

# 16 tokens: 2cp = 8 chunks of 2 at cp 4. Dropout on (hidden and attention) for gpt; llama
# has 2 query groups for 4 heads (GQA).
gpt="--arch gpt --num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16 --vocab-size 64 --hidden-dropout 0.1 --attention-dropout 0.1"
llama="--arch llama --num-layers 2 --hidden-size 32 --num-attention-heads 4 --num-query-groups 2 --ffn-hidden-size 48 --seq-length 16 --vocab-size 64"
common="--adam-eps 1e-4 --train-iters 5 --global-batch-size 8 --lr 1e-2 --min-lr 1e-3 --lr-warmup-iters 2 --log-interval 100 --report-interval 0 --peak-tflops 1 --micro-batch-size 4"

for arch in gpt llama; do
  model=${!arch}
  for attention in flash naive; do
    ref="$arch-$attention-ref"
    run "$ref" 1 $model $common --attention $attention ||
      { echo "reference run failed"; cat "$work/$ref.log"; exit 1; }
    for type in p2p all_gather a2a; do
      for cp in 2 4; do
        # a2a splits the heads: llama's 2 query groups allow cp 2 only
        [ "$type" = a2a ] && [ "$arch" = llama ] && [ "$cp" = 4 ] && continue
        check "$arch-$attention-cp$cp-$type" "$ref" "$cp" $model $common --attention $attention \
          --cp "$cp" --cp-comm-type "$type"
      done
    done
    check "$arch-$attention-cp2-contiguous" "$ref" 2 $model $common --attention $attention \
      --cp 2 --cp-layout contiguous
    check "$arch-$attention-cp4-contiguous-all_gather" "$ref" 4 $model $common \
      --attention $attention --cp 4 --cp-layout contiguous --cp-comm-type all_gather
  done
done

llama_ref="llama-flash-ref"
check "llama-cp2-tp2-sp" $llama_ref 4 $llama $common --cp 2 --tp 2 --sequence-parallel
llama4="${llama/--num-query-groups 2/--num-query-groups 4}"  # a2a: g/tp = 2 groups over cp 2
run llama4-ref 1 $llama4 $common || { echo "reference run failed"; exit 1; }
check "llama-cp2-tp2-sp-a2a" llama4-ref 4 $llama4 $common --cp 2 --tp 2 --sequence-parallel \
  --cp-comm-type a2a
# with pipelining: each stage's layers exchange over its own cp group
check "llama-cp2-pp2-1f1b" $llama_ref 4 $llama $common --cp 2 --pp 2
llama_l4="${llama/--num-layers 2/--num-layers 4}"  # interleaved: 2 stages x 2 chunks
run llama-l4-ref 1 $llama_l4 $common || { echo "reference run failed"; exit 1; }
check "llama-cp2-pp2-interleaved" llama-l4-ref 4 $llama_l4 $common --cp 2 --pp 2 \
  --pipeline-schedule interleaved --vpp 2 --micro-batch-size 1
# gradients summed over dp x cp; ZeRO shards over it
for zero in 1 3; do
  check "llama-cp2-dp2-zero$zero" $llama_ref 4 $llama $common --cp 2 --zero-stage $zero \
    --micro-batch-size 2 --ddp-bucket-size 5000
done
# recompute reruns the exchanges before the backward
check "gpt-cp2-full-recompute" gpt-flash-ref 2 $gpt $common --cp 2 \
  --recompute-granularity full --recompute-method uniform --recompute-num-layers 1
for type in p2p all_gather a2a; do
  check "gpt-naive-cp2-selective-$type" gpt-naive-ref 2 $gpt $common --cp 2 --attention naive \
    --recompute-granularity selective --recompute-modules core_attn --cp-comm-type $type
  check "llama-cp2-selective-$type" $llama_ref 2 $llama $common --cp 2 --cp-comm-type $type \
    --recompute-granularity selective --recompute-modules core_attn
done
# --bf16 storage: the ring's fp32 running output and dq, the blocks in bf16; sums in another
# order round differently: bf16's bound (2e-2), the ledger and comm still exact
run llama-bf16-ref 1 $llama $common --bf16 || { echo "bf16 reference run failed"; exit 1; }
for type in p2p all_gather a2a; do
  for attention in flash naive; do
    RTOL=2e-2 check "llama-bf16-$attention-cp2-$type" llama-bf16-ref 2 $llama $common --bf16 \
      --cp 2 --cp-comm-type $type --attention $attention
  done
done
# --fp16 the same way, with its dynamic loss scale from 2^12 (equivalence.sh's reason) and
# fp16's bound there (5e-3): the blocks and the exchanged partial outputs in fp16
fp16="--fp16 --initial-loss-scale 4096"
run llama-fp16-ref 1 $llama $common $fp16 || { echo "fp16 reference run failed"; exit 1; }
for type in p2p all_gather a2a; do
  RTOL=5e-3 check "llama-fp16-cp2-$type" llama-fp16-ref 2 $llama $common $fp16 --cp 2 \
    --cp-comm-type $type
done
RTOL=5e-3 check "llama-fp16-cp2-dp2-zero3" llama-fp16-ref 4 $llama $common $fp16 --cp 2 \
  --zero-stage 3
# every selective module, and full recompute by block with naive a2a; zb-h1's split backward
check "llama-cp2-selective-all-modules" $llama_ref 2 $llama $common --cp 2 \
  --recompute-granularity selective --recompute-modules core_attn mlp norm
check "llama-naive-cp2-a2a-full-block" llama-naive-ref 2 $llama $common --cp 2 \
  --attention naive --cp-comm-type a2a --recompute-granularity full --recompute-method block \
  --recompute-num-layers 1
check "llama-cp2-pp2-zb-h1" $llama_ref 4 $llama $common --cp 2 --pp 2 --pipeline-schedule zb-h1
# the validation loss: every cp rank's share of the held-out sequences
run llama-eval-ref 1 $llama $common --eval-interval 2 --eval-iters 2 ||
  { echo "reference run failed"; exit 1; }
check "llama-cp2-eval" llama-eval-ref 2 $llama $common --cp 2 --eval-interval 2 --eval-iters 2
# eight ranks: cp 2 x tp 2 x dp 2
check "llama-cp2-tp2-sp-dp2" $llama_ref 8 $llama $common --cp 2 --tp 2 --sequence-parallel \
  --micro-batch-size 2
# cp x ep: MoE models (tests/mpi/moe_models.sh: dropless, microbatches of one sequence, as the
# reference's; a capacity would cut each cp rank's S/cp tokens apart, as Megatron's does per
# rank, so it is left out). Each cp rank routes its S/cp tokens of every sequence; the aux
# loss's counts are summed over cp (and tp) and the z-loss is over the whole microbatch, so
# the cp ranks' partial losses add up to the one-rank losses. The expert grid folds the cp
# ranks into ep (and edp).
source "$here/moe_models.sh"  # moe, llama, gpt, common, ref (replacing the dense ones above)
ref llama-moe-ref $llama --moe-grouped-gemm
moe_cp="--moe-grouped-gemm --cp 2"
check "llama-moe-cp2-ep1" llama-moe-ref 2 $llama $moe_cp $common
for dispatcher in alltoall allgather; do
  # the cp ranks are the ep ranks
  check "llama-moe-cp2-ep2-$dispatcher" llama-moe-ref 2 $llama $moe_cp $common --ep 2 \
    --moe-token-dispatcher-type $dispatcher
done
check "llama-moe-cp2-dp2-ep4" llama-moe-ref 4 $llama $moe_cp $common --ep 4 \
  --moe-token-dispatcher-type alltoall
check "llama-moe-cp2-dp2-ep2-zero1" llama-moe-ref 4 $llama $moe_cp $common --ep 2 --zero-stage 1
check "llama-moe-cp2-tp2-sp-ep2-alltoall" llama-moe-ref 4 $llama $moe_cp $common --tp 2 \
  --sequence-parallel --etp 1 --ep 2 --moe-token-dispatcher-type alltoall
check "llama-moe-cp2-tp2-sp-etp2-ep2-allgather" llama-moe-ref 4 $llama $moe_cp $common --tp 2 \
  --sequence-parallel --ep 2
check "llama-moe-cp2-a2a-ep2" llama-moe-ref 2 $llama $moe_cp $common --cp-comm-type a2a --ep 2 \
  --moe-token-dispatcher-type alltoall
check "llama-moe-cp2-pp2-ep2" llama-moe-ref 4 $llama $moe_cp $common --pp 2 --ep 2
# full recompute runs each MoE layer's forward, its counts' all-reduce and exchange, twice
check "llama-moe-cp2-ep2-full-recompute" llama-moe-ref 2 $llama $moe_cp $common --ep 2 \
  --recompute-granularity full --recompute-method uniform --recompute-num-layers 1 \
  --moe-token-dispatcher-type alltoall
ref gpt-moe-ref $gpt --moe-grouped-gemm
check "gpt-moe-cp2-ep2" gpt-moe-ref 2 $gpt $moe_cp $common --ep 2 \
  --moe-token-dispatcher-type alltoall
# seq_aux_loss: each sequence's counts summed over its cp ranks (2 sequences a microbatch,
# the reference's too), with sigmoid routing and the expert bias (its counts over dp x cp)
bias="--moe-router-score-function sigmoid --moe-router-enable-expert-bias"
bias+=" --moe-router-bias-update-rate 1e-2 --moe-router-load-balancing-type seq_aux_loss"
common_mb2=${common/--micro-batch-size 1/--micro-batch-size 2}
run llama-moe-bias-ref 1 $llama --moe-grouped-gemm $bias $common_mb2 ||
  { echo "reference run failed"; cat "$work/llama-moe-bias-ref.log"; exit 1; }
check "llama-moe-bias-cp2-ep2" llama-moe-bias-ref 2 $llama $moe_cp $bias $common_mb2 --ep 2
check "llama-moe-bias-cp2-dp2-ep2" llama-moe-bias-ref 4 $llama $moe_cp $bias $common_mb2 --ep 2 \
  --moe-token-dispatcher-type alltoall
finish
