#!/usr/bin/env bash
# bench/gpu/fp8.sh: FP8 on one GPU, in one call (issue 36's "GPU speed measured when a GPU is at
# hand"): the FP8 GEMM's TFLOP/s beside bf16's, paralab's and PyTorch's, and paralab's training
# step in each FP8 recipe beside the same step in bf16 and beside its projection. Results go to
# notes/performance.md ("FP8 on a GPU").
#
#   bash bench/gpu/fp8.sh                        on the GPU machine (after .gpu/run.sh's set-up)
#   OUT=DIR PROFILE=gpu.toml bash bench/gpu/fp8.sh   logs and tables into DIR; a 2nd projection
#   RECIPES=bf16,tensorwise bash bench/gpu/fp8.sh    a subset of the step rows
#   DRY_RUN=1 bash bench/gpu/fp8.sh              here, on the CPU: tiny shapes, every path
#
# 1. GEMMs. `trainer --benchmark --json` (app/benchmark.cpp): square GEMMs up to GEMM_MIB per
#    operand, bf16 and, on sm_89 or later, FP8 (E4M3 x E4M3 into bf16) with per-tensor factors
#    (cuBLASLt: what delayed and tensorwise run) and with 1 x 128 by 128 x 128 block factors
#    (paralab's emulated path: dequantise and sgemm, what blockwise runs); and PyTorch at the
#    largest of those sizes (bench/gpu/fp8_torch.py: bf16 matmul and torch._scaled_mm with
#    per-tensor scales). Best of a few trials each: the ratio FP8 / bf16 is the number.
# 2. Steps. One model (Llama-2 7B's layer shape at 4 layers, micro batch 2, seq 2048: every
#    linear's dims multiples of 16, so per-tensor FP8 takes cuBLASLt) trained in bf16 and in
#    each RECIPES entry (delayed: --fp8-format hybrid, Megatron's default recipe; tensorwise and
#    blockwise: e4m3), each through bench/gpu/paralab_row.py (the plan's projected step, then
#    the run; WARMUP steps left out, two rounds of STEPS timed), the table by bench/gpu/report.py
#    fp8: step ms, tokens/s, the step against bf16's, projected against measured, the ledger's
#    peak memory. PyTorch has no FP8 training step without Transformer Engine (not installed on
#    the GPU machine): the step's anchor is paralab's own bf16 row, the GEMMs' is PyTorch.
#
# Time: BUDGET_S (default 200 s) bounds the whole; each step row gets at most ROW_TIMEOUT (70).
# Environment: TRAINER (./trainer), PYTHON (python3), HARDWARE (bench/gpu/hardware.sh), PROFILE,
# WARMUP (3), STEPS (5), RECIPES (bf16,delayed,tensorwise,blockwise), GEMM_MIB (128), BUDGET_S,
# ROW_TIMEOUT, DEVICE (cuda), DRY_RUN (0), OUT.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1

TRAINER=${TRAINER:-./trainer}
PY=${PYTHON:-python3}
HARDWARE=${HARDWARE:-}
PROFILE=${PROFILE:-}
WARMUP=${WARMUP:-3}
STEPS=${STEPS:-5}
RECIPES=${RECIPES:-bf16,delayed,tensorwise,blockwise}
GEMM_MIB=${GEMM_MIB:-128}
BUDGET_S=${BUDGET_S:-200}
ROW_TIMEOUT=${ROW_TIMEOUT:-70}
DEVICE=${DEVICE:-cuda}
DRY_RUN=${DRY_RUN:-0}
if [[ "$DRY_RUN" == 1 ]]; then DEVICE=cpu; GEMM_MIB=1; fi

START=$SECONDS
DEST=${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/paralab_fp8.XXXXXX")}
mkdir -p "$DEST"
WORK=$DEST
if [[ "$DRY_RUN" == 1 ]]; then HARDWARE=${HARDWARE:-h100-sxm}; HARDWARE_NOTE=""; else source bench/gpu/hardware.sh; fi
RESULTS="$DEST/fp8_rows.jsonl"
: >"$RESULTS"

echo "fp8.sh: $(date -u +%Y-%m-%dT%H:%M:%SZ); recipes $RECIPES; budget ${BUDGET_S}s; logs in $DEST"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu \
  --format=csv,noheader 2>/dev/null || true

# ---- 1. GEMMs: paralab's --benchmark (bf16 and FP8 rows), then PyTorch at the largest size
echo "---- trainer --benchmark --benchmark-max-mib $GEMM_MIB"
timeout -k 5 90 "$TRAINER" --benchmark --json --device "$DEVICE" --benchmark-max-mib "$GEMM_MIB" \
  >"$DEST/benchmark.json" 2>"$DEST/benchmark.err" || echo "fp8.sh: trainer --benchmark failed"
n=$("$PY" - "$DEST/benchmark.json" <<'EOF' 2>/dev/null || echo 0
import json, sys
rows = json.load(open(sys.argv[1]))["gemm"]
print(max([r["n"] for r in rows if r["dtype"] == "bf16"] or [0]))
EOF
)
if [[ "$DRY_RUN" != 1 && "$n" -gt 0 ]]; then
  echo "---- PyTorch bf16 matmul and torch._scaled_mm at n = $n"
  timeout -k 5 60 "$PY" bench/gpu/fp8_torch.py --n "$n" --out "$DEST/torch_gemm.json" \
    2>&1 | tee "$DEST/torch_gemm.log"
fi

# ---- 2. steps: bf16 and each recipe, the same model and shape
model=(--config configs/models/llama-7b.toml --num-layers 4 --micro-batch-size 2
       --global-batch-size 2 --seq-length 2048)
[[ "$DRY_RUN" == 1 ]] && model+=(--num-layers 2 --seq-length 64 --hidden-size 512
                                 --ffn-hidden-size 1376)
IFS=, read -ra NAMES <<<"$RECIPES"
for r in "${NAMES[@]}"; do
  case $r in
    bf16)       fp8=() ;;
    delayed)    fp8=(--fp8-format hybrid --fp8-recipe delayed) ;;
    tensorwise) fp8=(--fp8-format e4m3 --fp8-recipe tensorwise) ;;
    blockwise)  fp8=(--fp8-format e4m3 --fp8-recipe blockwise) ;;
    *) echo "fp8.sh: unknown recipe $r (bf16, delayed, tensorwise, blockwise)" >&2; exit 2 ;;
  esac
  left=$((BUDGET_S - (SECONDS - START)))
  limit=$((left < ROW_TIMEOUT ? left : ROW_TIMEOUT))
  if ((limit < 15)); then
    printf '{"name": "%s", "impl": "paralab", "status": "skipped", "error": "budget: %ss left"}\n' \
      "$r" "$left" >>"$RESULTS"
    continue
  fi
  echo "---- paralab $r (timeout ${limit}s)"
  "$PY" bench/gpu/paralab_row.py --name "$r" --out "$RESULTS" --log "$DEST/paralab_$r.log" \
    --warmup "$WARMUP" --timeout "$limit" --profile "$PROFILE" -- \
    "$TRAINER" "${model[@]}" --bf16 "${fp8[@]}" --device "$DEVICE" \
    --train-iters $((WARMUP + 2 * STEPS)) --lr-warmup-iters 0 --hardware "$HARDWARE"
done

echo
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 || echo "$DEVICE")
echo "==== fp8.sh: FP8 beside bf16, $gpu ($((SECONDS - START)) s)"
"$PY" bench/gpu/report.py fp8 "$RESULTS" --rows "$RECIPES" --benchmark "$DEST/benchmark.json" \
  --torch-gemm "$DEST/torch_gemm.json" --hardware "$HARDWARE" --hardware-note "${HARDWARE_NOTE:-}" |
  tee "$DEST/fp8.md"
