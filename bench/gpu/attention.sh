#!/usr/bin/env bash
# bench/gpu/attention.sh: paralab's tensor-core flash attention (kernels/cuda/flash_mma_*.cu)
# beside PyTorch's flash SDPA on one GPU: forward and backward TFLOP/s, causal bf16, seq 1024,
# 4096, 16384, head dims 64 and 128, FlashAttention-2's benchmark shapes (16384 tokens:
# B = 16384 / S; 2048 channels: A = 2048 / D heads), and each side's error against an fp32
# reference. Prints a markdown table with the ratio paralab / PyTorch and the goals (H200,
# causal D 128 seq 4096: forward >= 300 TFLOP/s, backward >= 200, neither below 0.8 x PyTorch).
# FLOPs: forward 4 D pairs, backward 10 D pairs, pairs = B A S (S+1) / 2.
#
#   bash bench/gpu/attention.sh              (after the build; needs a GPU, python3 with torch)
#   ITERS=20 SEQS=1024,4096 bash bench/gpu/attention.sh
#   CHECK=1 bash bench/gpu/attention.sh      first the op_check rows of the kernels
#
# Needs no compiler: the prebuilt op_check (build/cuda/tests/gpu/op_check, which the GPU pack
# carries), in its --attention-check and --attention-bench modes
# (tests/gpu/op_check_attention_bench.cpp; BIN= overrides it). When $OUT is a directory the
# table, the JSON lines and the check's log land there.
set -euo pipefail
cd "$(dirname "$0")/../.."

BIN=${BIN:-build/cuda/tests/gpu/op_check}
ITERS=${ITERS:-10}
SEQS=${SEQS:-1024,4096,16384}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/paralab_attention.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
DEST=$WORK
if [[ -n "${OUT:-}" && -d "${OUT:-}" ]]; then DEST=$OUT; fi

if [[ ! -x "$BIN" ]]; then
  echo "attention.sh: $BIN not built (scripts/gpu_check.sh builds op_check)" >&2
  exit 2
fi
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader || true

status=0
if [[ "${CHECK:-0}" == 1 ]]; then
  "$BIN" --attention-check 2>&1 | tee "$DEST/attention_check.txt" || status=1
fi
mkdir -p "$WORK/dump"
"$BIN" --attention-bench --iters "$ITERS" --seqs "$SEQS" --dump "$WORK/dump" | tee "$DEST/paralab.jsonl"
python3 bench/gpu/attention.py --paralab "$DEST/paralab.jsonl" --iters "$ITERS" \
  --out "$DEST/attention.md" > "$WORK/attention_py.log"
[[ "$DEST" == "$WORK" ]] || cp "$WORK/attention_py.log" "$DEST/"
cat "$DEST/attention.md"
exit $status
