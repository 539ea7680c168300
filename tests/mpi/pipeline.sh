#!/usr/bin/env bash
# Pipeline parallelism is equivalent to the single-rank run (notes/design.md, "Correctness is
# equivalence"): every schedule on 2 and 4 stages, with m = 1, p, 2p and an odd number of
# microbatches, gives the losses, the final parameters and the last step's gradients (every
# stage's, gathered by --save-tensors) of one rank training the same global batch, to 1e-5 relative
# over 5 steps; and on every rank the ledger and the communication equal the plan
# (compare_runs.py reads each rank from --metrics-jsonl's "ranks").
#
# usage: tests/mpi/pipeline.sh ./trainer [filter]   (filter: substring of a case name)
source "$(dirname "$0")/lib.sh"  # trainer, filter, work, run, check, finish

# 8 layers: 4 stages x 2 chunks each under interleaving. --adam-eps 1e-4: see equivalence.sh.
gpt="--arch gpt --num-layers 8 --hidden-size 32 --num-attention-heads 4 --seq-length 16 --vocab-size 64"
llama="--arch llama --num-layers 8 --hidden-size 32 --num-attention-heads 4 --num-query-groups 2 --ffn-hidden-size 48 --seq-length 16 --vocab-size 64"
common="--adam-eps 1e-4 --train-iters 5 --lr 1e-2 --min-lr 1e-3 --lr-warmup-iters 2 --log-interval 100 --report-interval 0 --peak-tflops 1"

# The reference: one rank, the same global batch in the same microbatches (gradients
# accumulate in the same order; llama's first norm gradient changes by ~3e-5 between one
# microbatch of 6 and three of 2 on one rank already).
ref() {  # arch, global batch, micro batch: the reference's name
  local name="$1-ref$2x$3"
  [ -f "$work/$name.bin" ] || run "$name" 1 ${!1} $common --global-batch-size "$2" \
    --micro-batch-size "$3" || { echo "reference run failed"; cat "$work/$name.log"; exit 1; }
  echo "$name"
}

# every schedule, p 2 and 4, m = 1, p, 2p and 3 (interleaved needs m a multiple of p)
for p in 2 4; do
  for schedule in gpipe 1f1b interleaved zb-h1; do
    for m in 1 "$p" $((2 * p)) 3; do  # 3: odd, above p = 2 and below p = 4
      extra=""
      [ "$schedule" = interleaved ] && { [ $((m % p)) -eq 0 ] || continue; extra="--vpp 2"; }
      case $m in 3) gbs=6; mbs=2 ;; *) gbs=8; mbs=$((8 / m)) ;; esac
      check "gpt-pp$p-$schedule-m$m" "$(ref gpt $gbs $mbs)" "$p" $gpt $common --pp "$p" \
        --pipeline-schedule "$schedule" $extra --global-batch-size "$gbs" --micro-batch-size "$mbs"
    done
  done
done
# llama (untied embeddings, GQA) on the schedules that hold the most in flight
for schedule in 1f1b interleaved zb-h1; do
  extra=""; [ "$schedule" = interleaved ] && extra="--vpp 2"
  check "llama-pp2-$schedule-m4" "$(ref llama 8 2)" 2 $llama $common --pp 2 \
    --pipeline-schedule "$schedule" $extra --global-batch-size 8 --micro-batch-size 2
done
check "llama-pp4-1f1b-m3" "$(ref llama 6 2)" 4 $llama $common --pp 4 --global-batch-size 6 --micro-batch-size 2
# uneven stages: 1 layer first, 3 last, the rest even
check "gpt-pp4-uneven" "$(ref gpt 8 2)" 4 $gpt $common --pp 4 --decoder-first-pipeline-num-layers 1 \
  --decoder-last-pipeline-num-layers 3 --global-batch-size 8 --micro-batch-size 2

# with data parallelism and every ZeRO stage (gpt's tied embedding defers its buckets)
for zero in 0 1 2 3; do
  check "gpt-pp2-dp2-zero$zero" "$(ref gpt 8 1)" 4 $gpt $common --pp 2 --global-batch-size 8 \
    --micro-batch-size 1 --zero-stage "$zero" --ddp-bucket-size 5000 --overlap-grad-reduce
  check "llama-pp2-vpp2-dp2-zero$zero" "$(ref llama 8 1)" 4 $llama $common --pp 2 --vpp 2 \
    --pipeline-schedule interleaved --global-batch-size 8 --micro-batch-size 1 \
    --zero-stage "$zero" --ddp-bucket-size 5000
done
# zb-h1's W declares the layers done: the buckets reduce after it
for zero in 1 2 3; do
  check "gpt-pp2-zb-h1-dp2-zero$zero" "$(ref gpt 8 1)" 4 $gpt $common --pp 2 \
    --pipeline-schedule zb-h1 --global-batch-size 8 --micro-batch-size 1 --zero-stage "$zero" \
    --ddp-bucket-size 5000 --overlap-grad-reduce
done
# --no-fused-ce: the last stage keeps every held microbatch's logits; --bf16 storage (its
# messages are bf16; sums round in another order: bf16's bound)
check "gpt-pp2-gpipe-unfused" "$(ref gpt 8 2)" 2 $gpt $common --pp 2 --pipeline-schedule gpipe \
  --global-batch-size 8 --micro-batch-size 2 --no-fused-ce
[ -f "$work/gpt-ref-bf16.bin" ] || run "gpt-ref-bf16" 1 $gpt $common --global-batch-size 8 \
  --micro-batch-size 2 --bf16
RTOL=2e-2 check "gpt-pp2-interleaved-bf16" "gpt-ref-bf16" 2 $gpt $common --pp 2 --vpp 2 \
  --pipeline-schedule interleaved --global-batch-size 8 --micro-batch-size 2 --bf16
# --fp16 (from 2^12, fp16's bound 5e-3: equivalence.sh): 1f1b, and zb-h1's split backward
fp16="--fp16 --initial-loss-scale 4096"
[ -f "$work/gpt-ref-fp16.bin" ] || run "gpt-ref-fp16" 1 $gpt $common --global-batch-size 8 \
  --micro-batch-size 2 $fp16
for schedule in 1f1b zb-h1; do
  RTOL=5e-3 check "gpt-pp2-$schedule-fp16" "gpt-ref-fp16" 2 $gpt $common --pp 2 \
    --pipeline-schedule $schedule --global-batch-size 8 --micro-batch-size 2 $fp16
done
# selective recompute under a pipeline: bit-identical to the run without, as on one rank
check "gpt-pp2-interleaved-selective" "$(ref gpt 8 2)" 2 $gpt $common --pp 2 --vpp 2 \
  --pipeline-schedule interleaved --global-batch-size 8 --micro-batch-size 2 \
  --recompute-granularity selective --recompute-modules core_attn mlp norm
# zb-h1 with tensor and sequence parallelism: W reads the all-gathered inputs B kept
check "gpt-pp2-zb-h1-tp2-sp" "$(ref gpt 8 2)" 4 $gpt $common --pp 2 --tp 2 --sequence-parallel \
  --pipeline-schedule zb-h1 --global-batch-size 8 --micro-batch-size 2
# pp 2 x tp 2 x dp 2 on 8 ranks, ZeRO 1, with and without sequence parallelism
for sp in "" "--sequence-parallel"; do
  check "gpt-pp2-tp2-dp2-zero1${sp:+-sp}" "$(ref gpt 8 2)" 8 $gpt $common --pp 2 --tp 2 $sp \
    --global-batch-size 8 --micro-batch-size 2 --zero-stage 1 --ddp-bucket-size 5000
done
# ZeRO-2/3 under pp x tp + sp: gpt's tied embedding defers its stages' buckets (one reduction
# a step), so the tp-replicated gradients (norms, biases, positions) that sit in them are
# all-reduced over tp once, on the step's last microbatch, and not with every microbatch of a
# sum kept across them (tests/mpi/layout_fuzz.py found it: 40x at step 1); one bucket a stage
for zero in 2 3; do
  check "gpt-pp2-tp2-sp-zero$zero" "$(ref gpt 8 1)" 4 $gpt $common --pp 2 --tp 2 \
    --sequence-parallel --global-batch-size 8 --micro-batch-size 1 --zero-stage "$zero"
done
# llama's own output weight, which the fused loss writes in forward: zb-h1's B declares the head
# done and its reduce-scatter stayed in flight past the next forward's write (0.47 apart; it
# now completes first; layout_fuzz.py found it). gpt's tied head is deferred, which hid it.
for zero in 2 3; do
  check "llama-pp2-zb-h1-dp2-zero$zero" "$(ref llama 8 1)" 4 $llama $common --pp 2 \
    --pipeline-schedule zb-h1 --global-batch-size 8 --micro-batch-size 1 --zero-stage "$zero" \
    --overlap-grad-reduce
done
# zb-h1 under tp + sp at ZeRO-2/3 (dp 2): the head's bucket, reduced at a layer's W, goes on
# summing past the head's B, so the final norm's tp sum waits for that W (it was made in B,
# and the next microbatch's B summed it again: 0.56 apart; layout_fuzz.py found it)
for zero in 2 3; do
  check "llama-pp2-zb-h1-tp2-sp-dp2-zero$zero" "$(ref llama 8 1)" 8 $llama $common --pp 2 --tp 2 \
    --sequence-parallel --pipeline-schedule zb-h1 --global-batch-size 8 --micro-batch-size 1 \
    --zero-stage "$zero"
done
finish
