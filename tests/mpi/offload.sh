#!/usr/bin/env bash
# tests/mpi/offload.sh: CPU offload (parallel/offload.h) changes where the optimizer's states
# live, never the arithmetic. Every case trains 4 steps with offload and is compared, with
# compare_runs.py at --rtol 0 (bit for bit: the host update is the device kernel's own
# kernels/math.h adamw_step), against the same layout without offload; both runs' ledgers
# (device and host columns, every rank) and communication (the pcie rows included) must equal
# their plans exactly. ZeRO 0-3, a fraction that cuts a bucket, offload_params (also with
# --fp8-param-gather), with tp, pp, ep and bf16; the no-offload layouts themselves are held to the single-rank run by
# equivalence.sh, pipeline.sh and expert_parallel.sh.
#
# usage: tests/mpi/offload.sh ./trainer [filter]   (filter: substring of a case name)
source "$(dirname "$0")/lib.sh"  # trainer, filter, work, run, check, finish

gpt="--arch gpt --num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16 --vocab-size 64"
common="--adam-eps 1e-4 --train-iters 4 --global-batch-size 8 --lr 1e-2 --min-lr 1e-3 --lr-warmup-iters 2 --log-interval 100 --report-interval 0 --peak-tflops 1 --ddp-bucket-size 3000"
moe="--config configs/models/tiny-moe.toml --train-iters 4 --log-interval 100 --report-interval 0 --peak-tflops 1 --ddp-bucket-size 20000"

# pair NAME RANKS FLAGS: the run without offload (NAME-ref), then with --optimizer-cpu-offload
# (and OFFLOAD's extra flags) compared to it bit for bit
pair() {
  local name=$1 np=$2 flags=$3 offload=${4:---optimizer-cpu-offload}
  case "$name" in *"$filter"*) ;; *) return ;; esac
  # shellcheck disable=SC2086
  run "$name-ref" "$np" $flags || { failed=$((failed + 1)); echo "FAIL  $name-ref: run failed"; tail -5 "$work/$name-ref.log"; return; }
  # shellcheck disable=SC2086
  RTOL=0 check "$name" "$name-ref" "$np" $flags $offload
}

pair single      1 "$gpt $common --micro-batch-size 4"
pair dp2-zero0   2 "$gpt $common --micro-batch-size 2 --overlap-grad-reduce"
pair dp2-zero1   2 "$gpt $common --micro-batch-size 4 --zero-stage 1 --overlap-param-gather --overlap-grad-reduce"
pair dp2-zero2   2 "$gpt $common --micro-batch-size 2 --zero-stage 2 --overlap-grad-reduce"
pair dp2-zero3   2 "$gpt $common --micro-batch-size 2 --zero-stage 3"
pair dp2-zero1-half 2 "$gpt $common --micro-batch-size 4 --zero-stage 1" "--optimizer-cpu-offload --optimizer-offload-fraction 0.55"
pair dp2-zero3-params 2 "$gpt $common --micro-batch-size 2 --zero-stage 3 --overlap-grad-reduce" "--offload-params"
pair tp2-zero1   2 "$gpt $common --micro-batch-size 8 --tp 2 --sequence-parallel --zero-stage 1"
pair pp2-zero2   2 "$gpt $common --micro-batch-size 2 --pp 2 --zero-stage 2"
pair ep2-zero1   2 "$moe --ep 2 --zero-stage 1" "--optimizer-cpu-offload --optimizer-offload-fraction 0.5"
pair bf16-zero2  2 "$gpt $common --micro-batch-size 2 --bf16 --zero-stage 2 --overlap-grad-reduce"
pair bf16-zero3-params 2 "$gpt $common --micro-batch-size 2 --bf16 --zero-stage 3" "--offload-params"
# --fp8-param-gather: the slice comes up from the host, then is cast and gathered as on the
# device (equivalence.sh holds the runs without offload to those without the flag, bitwise)
fp8_pg="--fp8-param-gather --fp8-format hybrid"
pair fp8-zero3-params 2 "$gpt $common --micro-batch-size 2 --zero-stage 3 $fp8_pg" "--offload-params"
pair bf16-fp8-zero3-params 2 "$gpt $common --micro-batch-size 2 --bf16 --zero-stage 3 $fp8_pg \
  --fp8-recipe tensorwise --overlap-grad-reduce" "--offload-params"
# bf16 moments (Megatron's precision-aware optimizer): 2 bytes each in the host column too
pair bf16-moments-zero1-half 2 "$gpt $common --micro-batch-size 4 --bf16 --zero-stage 1 --use-precision-aware-optimizer --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16" "--optimizer-cpu-offload --optimizer-offload-fraction 0.55"
finish
