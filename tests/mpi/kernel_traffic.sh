#!/usr/bin/env bash
# tests/mpi/kernel_traffic.sh: the non-GEMM kernels of every step, measured (the dispatchers'
# kernels::kernel_counts) against plan/kernel_traffic.h's prediction, on every rank: launches,
# bytes and flash launches equal, exactly, for one rank and for each parallel dimension: tp 2
# with and without sequence parallelism, pp 2 (1f1b with gpt's tied embedding, zb-h1's split
# backward, interleaved with selective recompute, zb-v and dualpipev's turn, dualpipe's copies), cp 2 and 4 (the ring, flash and naive, the
# contiguous layout, all-gather, all-to-all), dp 2 at ZeRO 0-3, ep 2 and 4 with either
# dispatcher (padded to capacity; dropless and with drops at the measured routing; ZeRO-3),
# etp 2, experts folded over tp 2 with sp, CPU offload at ZeRO 1-3, and combinations on 4
# ranks (tp x dp, pp x cp, tp x pp with vocabulary padding). Each step's --metrics-jsonl line carries "kernels" {measured,
# predicted} for rank 0 and, where the step gathers them, one per rank in "ranks"; each
# rank's is checked (rank 0's alone when the line has no per-rank ones, and the script says
# so). A prediction that says it is not exact ("exact": false: an expectation of the MoE
# routing) is held within RTOL_INEXACT (default 5%) instead.
#
# usage: tests/mpi/kernel_traffic.sh ./trainer [filter]   (filter: substring of a case name)
source "$(dirname "$0")/lib.sh"  # trainer, filter, work, run, finish

gpt="--arch gpt --num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16 --vocab-size 64 --hidden-dropout 0.1 --attention-dropout 0.1"
llama="--arch llama --num-layers 2 --hidden-size 32 --num-attention-heads 4 --num-query-groups 2 --ffn-hidden-size 48 --seq-length 16 --vocab-size 64"
moe="--arch llama --num-layers 2 --hidden-size 32 --num-attention-heads 4 --num-query-groups 2 --ffn-hidden-size 48 --seq-length 16 --vocab-size 64 --num-experts 4 --moe-router-topk 2 --moe-ffn-hidden-size 24 --moe-aux-loss-coeff 1e-2 --moe-z-loss-coeff 1e-3"
common="--train-iters 2 --global-batch-size 8 --micro-batch-size 2 --log-interval 100 --report-interval 0 --peak-tflops 1"

traffic() {  # NAME RANKS FLAGS...: run, then hold every rank's kernels to its prediction
  local name=$1 np=$2 result=""; shift 2
  case "$name" in *"$filter"*) ;; *) return ;; esac
  # shellcheck disable=SC2086
  if run "$name" "$np" "$@" $common && result=$(python3 - "$work/$name.jsonl" <<'EOF'
import json, os, sys
inexact_rtol = float(os.environ.get("RTOL_INEXACT", "0.05"))
bad, checked, rank0_only = [], 0, False
for n, line in enumerate(open(sys.argv[1])):
    step = json.loads(line)
    if step.get("type") != "step":  # the run's summary line
        continue
    ranks = [(r["rank"], r["kernels"]) for r in step.get("ranks", []) if "kernels" in r]
    if not ranks:
        if "kernels" not in step:
            print("no \"kernels\" in the step's metrics (the trainer does not print them)")
            sys.exit(1)
        rank0_only = True
        ranks = [(0, step["kernels"])]
    for rank, k in ranks:
        for key in ("launches", "bytes", "attention_launches"):
            m, p = k[key]["measured"], k[key]["predicted"]
            ok = m == p if k.get("exact", True) else abs(m - p) <= inexact_rtol * max(abs(p), 1)
            if not ok:
                bad.append(f"step {n + 1} rank {rank} {key}: measured {m} predicted {p}")
        checked += 1
if bad or checked == 0:
    print("; ".join(bad[:4]) or "no kernels in the metrics")
    sys.exit(1)
print(f"{checked} rank-steps equal" + (" (rank 0 only: no per-rank kernels)" if rank0_only else ""))
EOF
  ); then
    passed=$((passed + 1)); echo "ok    $name: $result"
  else
    failed=$((failed + 1)); echo "FAIL  $name: ${result:-run failed}"; tail -5 "$work/$name.log"
  fi
}

traffic gpt-1rank 1 $gpt
traffic llama-1rank-bf16 1 $llama --bf16
traffic gpt-tp2 2 $gpt --tp 2
traffic gpt-tp2-sp 2 $gpt --tp 2 --sequence-parallel
traffic llama-tp2-sp-naive 2 $llama --tp 2 --sequence-parallel --attention naive
traffic gpt-pp2-1f1b 2 $gpt --pp 2
traffic llama-pp2-zb-h1 2 $llama --pp 2 --pipeline-schedule zb-h1
# the V (4 layers: one a stage): the turn's hand-overs are copies; dualpipe's mixed B's and
# its copies' microbatches (gpt's dropout keeps every mask kernel in the count)
traffic gpt-pp2-zb-v 2 $gpt --num-layers 4 --pp 2 --pipeline-schedule zb-v
traffic llama-pp2-dualpipev 2 $llama --num-layers 4 --pp 2 --pipeline-schedule dualpipev
traffic gpt-pp2-dualpipe 2 $gpt --pp 2 --pipeline-schedule dualpipe
for type in p2p all_gather a2a; do
  traffic "gpt-cp2-$type" 2 $gpt --cp 2 --cp-comm-type "$type"
  traffic "llama-cp2-$type-naive" 2 $llama --cp 2 --cp-comm-type "$type" --attention naive
done
traffic llama-cp2-contiguous-bf16 2 $llama --cp 2 --cp-layout contiguous --bf16
for zero in 0 1 2 3; do
  traffic "gpt-dp2-zero$zero" 2 $gpt --zero-stage "$zero" --ddp-bucket-size 5000
done
# bf16 moments (--use-precision-aware-optimizer): AdamW moves 20 bytes an element, not 28; one
# moment in bf16, 24
traffic gpt-dp2-zero1-bf16-moments 2 $gpt --zero-stage 1 --bf16 --use-precision-aware-optimizer \
  --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16
traffic gpt-1rank-zero1-bf16-exp-avg-sq 1 $gpt --zero-stage 1 --use-precision-aware-optimizer \
  --exp-avg-sq-dtype bf16
# CPU offload: the host part's AdamW is no kernel, the copies are pcie rows, not kernels
traffic gpt-dp2-zero1-offload-half 2 $gpt --zero-stage 1 --ddp-bucket-size 5000 \
  --optimizer-cpu-offload --optimizer-offload-fraction 0.55
traffic gpt-1rank-zero3-offload-params 1 $gpt --zero-stage 3 --offload-params
# ZeRO-2 with offload: the gradient norm's sum of squares in two calls, the host buckets' on
# the CPU twin and the device's (one launch each)
traffic gpt-dp2-zero2-offload-half 2 $gpt --zero-stage 2 --ddp-bucket-size 5000 \
  --optimizer-cpu-offload --optimizer-offload-fraction 0.55
for dispatcher in alltoall allgather; do
  traffic "moe-ep2-$dispatcher-padded" 2 $moe --ep 2 --moe-token-dispatcher-type "$dispatcher" \
    --moe-expert-capacity-factor 1 --moe-pad-expert-input-to-capacity
  traffic "moe-ep2-$dispatcher-dropless" 2 $moe --ep 2 --moe-token-dispatcher-type "$dispatcher"
done
traffic moe-ep2-capacity-measured 2 $moe --ep 2 --moe-token-dispatcher-type alltoall \
  --moe-expert-capacity-factor 1
traffic moe-ep2-zero3-bf16 2 $moe --ep 2 --zero-stage 3 --bf16
for dispatcher in alltoall allgather; do
  traffic "moe-etp2-$dispatcher" 2 $moe --etp 2 --moe-token-dispatcher-type "$dispatcher"
done
traffic moe-tp2-sp-folded-shared 2 $moe --tp 2 --sequence-parallel --etp 1 \
  --moe-shared-expert-intermediate-size 16 --moe-permute-fusion
# 4 ranks: combinations, a vocabulary that tp does not divide (padding columns), cp 4
traffic llama-tp2-sp-dp2-zero1 4 $llama --tp 2 --sequence-parallel --zero-stage 1
traffic gpt-pp2-cp2-zero2 4 $gpt --pp 2 --cp 2 --zero-stage 2
traffic gpt-tp2-pp2-unfused-v63 4 $gpt --tp 2 --pp 2 --vocab-size 63 --no-fused-ce
traffic llama-pp2-interleaved-selective 2 $llama --num-layers 4 --pp 2 --vpp 2 \
  --pipeline-schedule interleaved --recompute-granularity selective \
  --recompute-modules core_attn mlp norm
traffic gpt-cp4-p2p-full-recompute 4 $gpt --cp 4 --recompute-granularity full \
  --recompute-method uniform --recompute-num-layers 1
traffic moe-ep4-alltoall-qk-norm 4 $moe --ep 4 --moe-token-dispatcher-type alltoall --qk-layernorm
finish
