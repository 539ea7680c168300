#!/usr/bin/env bash
# Mixture of experts (model/moe.h) is equivalent to the single-rank run: under data
# parallelism (every ZeRO stage) and pipeline parallelism (every schedule, recompute
# included) an MoE model gives the losses, the final parameters and the last step's
# gradients of one rank training the same global batch in the same microbatches, to 1e-5
# relative over 5 steps; and every rank's ledger, communication and FLOPs equal the plan
# (compare_runs.py; dropless, the plan is evaluated at the routing the run measured).
# Experts stay whole on every rank here (expert parallelism: tests/mpi/expert_parallel.sh).
#
# The reference must use the same microbatches: the auxiliary loss and the capacity are
# per microbatch (its T tokens), so one microbatch of 8 is not eight of 1 -- unlike the LM
# loss, a sum over tokens.
#
# usage: tests/mpi/moe.sh ./trainer [filter]   (filter: substring of a case name)
source "$(dirname "$0")/lib.sh"  # trainer, filter, work, run, check, finish
source "$(dirname "$0")/moe_models.sh"  # moe, llama, gpt, common, ref

# data parallelism, every ZeRO stage, grouped and per-expert GEMMs
ref llama-ref $llama --moe-grouped-gemm
for zero in 0 1 2 3; do
  check "llama-dp2-zero$zero" llama-ref 2 $llama --moe-grouped-gemm $common --zero-stage "$zero" \
    --ddp-bucket-size 20000
done
check "llama-dp4-zero3-overlap" llama-ref 4 $llama --moe-grouped-gemm $common --zero-stage 3 \
  --ddp-bucket-size 20000 --overlap-grad-reduce --overlap-param-gather
check "llama-per-expert" llama-ref 1 $llama $common
check "llama-per-expert-dp2" llama-ref 2 $llama $common
ref gpt-ref $gpt --moe-grouped-gemm
check "gpt-dp2-zero1" gpt-ref 2 $gpt --moe-grouped-gemm $common --zero-stage 1

# pipelines: every schedule, and recompute
for schedule in gpipe 1f1b interleaved zb-h1; do
  extra=""; [ "$schedule" = interleaved ] && extra="--vpp 2"
  check "llama-pp2-$schedule" llama-ref 2 $llama --moe-grouped-gemm $common --pp 2 \
    --pipeline-schedule "$schedule" $extra
done
check "llama-pp2-full-recompute" llama-ref 2 $llama --moe-grouped-gemm $common --pp 2 \
  --recompute-granularity full --recompute-method uniform --recompute-num-layers 1
check "llama-pp2-selective" llama-ref 2 $llama --moe-grouped-gemm $common --pp 2 \
  --recompute-granularity selective --recompute-modules core_attn norm
# selective recompute on one stage: the peak of the total replayed (plan/total.cpp), the core's
# buffers before the experts, norm2's beside them: exact at ZeRO 0-1 (was the sum of the
# peaks, 10 KB over) and 2-3 (was the core's over); full recompute's block method on a pipeline
# stage puts the experts' transients beside its layers' peak, an upper bound the plan says
for zero in 0 2; do
  for modules in core_attn "core_attn norm"; do
    check "llama-dp2-zero$zero-selective-${modules// /-}" llama-ref 2 $llama --moe-grouped-gemm \
      $common --zero-stage "$zero" --recompute-granularity selective --recompute-modules $modules
  done
done
check "llama-pp2-full-block" llama-ref 2 $llama --moe-grouped-gemm $common --pp 2 \
  --recompute-granularity full --recompute-method block --recompute-num-layers 1
check "gpt-pp2-dp2-zero2" gpt-ref 4 $gpt --moe-grouped-gemm $common --pp 2 --zero-stage 2 \
  --ddp-bucket-size 5000

# capacity (both drop policies; padded: every size from the configuration), the shared
# expert with its gate on alternate layers, sigmoid routing with the expert bias (its update
# sums the counts over data parallelism)
for variant in "cap-probs:--moe-expert-capacity-factor 1.0" \
               "cap-position:--moe-expert-capacity-factor 1.0 --moe-token-drop-policy position" \
               "cap-padded:--moe-expert-capacity-factor 1.25 --moe-pad-expert-input-to-capacity" \
               "shared:--moe-shared-expert-intermediate-size 32 --moe-shared-expert-gate --moe-layer-freq 2" \
               "bias:--moe-router-score-function sigmoid --moe-router-enable-expert-bias --moe-router-bias-update-rate 1e-2 --moe-router-load-balancing-type seq_aux_loss"; do
  name=${variant%%:*}; flags=${variant#*:}
  ref "llama-$name-ref" $llama --moe-grouped-gemm $flags
  check "llama-$name-dp2-zero1" "llama-$name-ref" 2 $llama --moe-grouped-gemm $flags $common \
    --zero-stage 1
  check "llama-$name-pp2-1f1b" "llama-$name-ref" 2 $llama --moe-grouped-gemm $flags $common --pp 2
done

# FP8 in the experts (docs/fp8.md "MoE: the experts") against each recipe's own single-rank
# run, to equivalence.sh's FP8 bound (1.6e-3: a code flips only where the layouts' fp32
# summation order moves an input across a rounding boundary; a wrong scale, operand or amax
# group moves every code); and the ledger, the amax all-reduces and the FLOPs equal the plan.
# Delayed: each expert's amaxes reduced over the ranks that hold it, edp = dp at dp 2, nobody at
# ep 2 (each expert on one rank with all its tokens), both dispatchers. Tensorwise at dp 2
# (each expert GEMM a microbatch's rows, as on one rank). Not here: tensorwise and blockwise
# at ep 2, where an expert's GEMM holds two ranks' microbatches at once and so scales
# differently from the one-rank run (docs/fp8.md; as Transformer Engine), and ZeRO >= 1, whose
# reduce-scatter sums in another order and flips a code in this tiny model with or without
# experts (measured 1.2e-2 here, 6.4e-2 on the same model dense).
fp8="--fp8-format hybrid --fp8-recipe delayed"
ref llama-fp8-ref $llama --moe-grouped-gemm $fp8
RTOL=1.6e-3 check "llama-fp8-dp2" llama-fp8-ref 2 $llama --moe-grouped-gemm $fp8 $common
RTOL=1.6e-3 check "llama-fp8-ep2-allgather" llama-fp8-ref 2 $llama --moe-grouped-gemm $fp8 \
  $common --ep 2
RTOL=1.6e-3 check "llama-fp8-ep2-alltoall" llama-fp8-ref 2 $llama --moe-grouped-gemm $fp8 \
  $common --ep 2 --moe-token-dispatcher-type alltoall
fp8="--fp8-format e4m3 --fp8-recipe tensorwise"
ref llama-fp8-tensorwise-ref $llama --moe-grouped-gemm $fp8
RTOL=1.6e-3 check "llama-fp8-tensorwise-dp2" llama-fp8-tensorwise-ref 2 $llama --moe-grouped-gemm \
  $fp8 $common
# --fp8-param-gather with experts: each local expert's fc1 and fc2 gathered as FP8 codes at
# its own scale, the GEMMs casting at the gathered scale (ZeRO-3: reading the codes): the same
# codes, so bitwise equal to the same layout without the flag (which the rows above hold to
# the single rank), the ledger and the communication the plan's. Delayed with the experts in
# the dense vector (dp 2, ZeRO-1 and ZeRO-3); tensorwise with them apart (ep 2 x dp 2: the
# expert vector's gather over edp 2, ZeRO-2, alltoall, every other layer dense); blockwise at
# ZeRO-3 (each expert's 128 x 128 blocks' amaxes reduced over the slices, its backward decoding
# the codes at the blocks' factors).
pg_pair() {  # name ranks flags...: the run without the flag, then with it at RTOL 0
  local name=$1 np=$2; shift 2
  case "$name" in *"$filter"*) ;; *) return ;; esac
  # shellcheck disable=SC2086
  run "$name" "$np" $llama --moe-grouped-gemm $common "$@" ||
    { failed=$((failed + 1)); echo "FAIL  $name: run failed"; tail -5 "$work/$name.log"; return; }
  RTOL=0 check "$name-pg" "$name" "$np" $llama --moe-grouped-gemm $common "$@" --fp8-param-gather
}
pg_pair llama-fp8-dp2-zero1 2 --fp8-format hybrid --zero-stage 1 --ddp-bucket-size 20000
pg_pair llama-fp8-dp2-zero3 2 --fp8-format hybrid --zero-stage 3 --ddp-bucket-size 20000
pg_pair llama-fp8-tensorwise-ep2-dp2-zero2 4 --fp8-format e4m3 --fp8-recipe tensorwise \
  --zero-stage 2 --ep 2 --moe-token-dispatcher-type alltoall --moe-layer-freq 2 \
  --ddp-bucket-size 5000
pg_pair llama-fp8-blockwise-dp2-zero3 2 --fp8-format e4m3 --fp8-recipe blockwise --zero-stage 3 \
  --ddp-bucket-size 20000
finish
