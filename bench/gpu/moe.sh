#!/usr/bin/env bash
# bench/gpu/moe.sh: Qwen3-30B-A3B's MoE layers on one GPU (issue 27): paralab with grouped
# GEMMs against per-expert GEMMs, beside a dense model of equal active FLOPs and beside Hugging
# Face transformers' Qwen3MoeForCausalLM at the same shape, in one call. Results go to
# notes/performance.md ("GPU: one H200").
#
#   bash bench/gpu/moe.sh                         on the GPU machine (after .gpu/run.sh's set-up)
#   OUT=DIR PROFILE=gpu.toml bash bench/gpu/moe.sh       logs and the table into DIR
#   DRY_RUN=1 PYTHON=/path/to/venv/python bash bench/gpu/moe.sh      here, on the CPU: tiny shapes
#
# The shape: configs/models/qwen3-30b-a3b.toml (E 128, top-8, h 2048, expert width 768, 32
# query heads of 128 over 4 groups, qk-layernorm, vocabulary 151936, seq 4096, bf16) at LAYERS
# layers (default 2), micro batch 1 = global batch (4096 tokens a step). Rows:
#   qwen3-moe-grouped     paralab --moe-grouped-gemm --moe-permute-fusion
#   transformers ...      bench/gpu/moe_hf.py: every experts implementation this transformers
#                         offers (discovered at run time and printed; the default first, then
#                         "eager", its Python loop over experts), bf16 parameters, AdamW
#   qwen3-moe-per-expert  paralab --moe-grouped-gemm=false --moe-permute-fusion (one GEMM call
#                         per expert and projection: only the GEMMs differ from the grouped row)
#   dense-ffn-<k f_e>     paralab, the same model with a dense SwiGLU MLP of width k x f_e =
#                         8 x 768 = 6144 in every layer: a token runs 3 h (k f_e) MLP weights,
#                         as its k experts do, so the matmul FLOPs are equal but for the
#                         router's 2 h E per token (0.7% of a layer's); the plan's FLOPs of both
#                         are in the rows
# paralab's rows go through bench/gpu/paralab_row.py (the plan's model FLOPs and projected step
# on HARDWARE, with PROFILE also on a measured profile; launch -> first step line; GEMM calls per
# step from --metrics-jsonl). WARMUP steps, then two rounds of STEPS steps, each round's median.
# MFU (active): the plan's model FLOPs (router + the k experts a token runs, attention over the
# full S x S square) over step x 989 TFLOP/s, the same count for transformers' rows
# (moe_hf.py, checked against the plan's). bench/gpu/report.py prints the table and the goals
# as met / missed. A row that fails (the bf16 grouped GEMM of issue 27 may) is a row; the script
# goes on.
#
# Time: BUDGET_S (default 180 s) bounds the whole script; each paralab run gets at most
# ROW_TIMEOUT s (default 90); HF_RESERVE_S (default 60) is kept for transformers while the
# grouped row runs. Until parameters are initialised on the device (issue 26), the host draws
# ~16M parameters/s: the MoE rows' 1.87B take ~2 minutes before step 1 and end as "timeout"
# rows (ROW_TIMEOUT=150 BUDGET_S=400 lets the grouped one through). Expected times on an H200:
# bench/README.md ("On a GPU").
# Environment: TRAINER, PYTHON, HARDWARE (the GPU's profile: bench/gpu/hardware.sh), PROFILE, WARMUP (2), STEPS (4), LAYERS (2),
# HF_IMPLS (comma-separated; default every one found), BUDGET_S, ROW_TIMEOUT, HF_RESERVE_S,
# DEVICE, DRY_RUN, OUT.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1

TRAINER=${TRAINER:-./trainer}
PY=${PYTHON:-python3}
HARDWARE=${HARDWARE:-}
PROFILE=${PROFILE:-}
WARMUP=${WARMUP:-2}
STEPS=${STEPS:-4}
LAYERS=${LAYERS:-2}
BUDGET_S=${BUDGET_S:-180}
ROW_TIMEOUT=${ROW_TIMEOUT:-90}
HF_RESERVE_S=${HF_RESERVE_S:-60}
HF_IMPLS=${HF_IMPLS:-}
DEVICE=${DEVICE:-cuda}
DRY_RUN=${DRY_RUN:-0}
CFG=configs/models/qwen3-30b-a3b.toml

START=$SECONDS
DEST=${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/paralab_moe.XXXXXX")}
mkdir -p "$DEST"
# The GPU's own hardware profile, unless HARDWARE names one (a dry run on the CPU takes H100 SXM's).
WORK=$DEST
if [[ "$DRY_RUN" == 1 ]]; then HARDWARE=${HARDWARE:-h100-sxm}; HARDWARE_NOTE=""; else source bench/gpu/hardware.sh; fi
RESULTS="$DEST/moe_rows.jsonl"
: >"$RESULTS"

# val KEY: the config file's value of KEY
val() { sed -n "s/^$1 *= *\"\{0,1\}\([^\"# ]*\)\"\{0,1\}.*/\1/p" "$CFG" | head -1; }
shape=(--num-layers "$LAYERS" --micro-batch-size 1 --global-batch-size 1
       --seq-length "$(val seq-length)")
hf_set="num-layers=$LAYERS,micro-batch-size=1"
hf_dry=()
if [[ "$DRY_RUN" == 1 ]]; then
  DEVICE=cpu
  # the same family, tiny: what moe_hf.py --dry-run builds
  small=(--hidden-size 128 --num-attention-heads 4 --num-query-groups 2 --kv-channels 32
         --seq-length 64 --vocab-size 1024 --ffn-hidden-size 256)
  shape+=("${small[@]}")
  moe_small=(--num-experts 16 --moe-router-topk 4 --moe-ffn-hidden-size 64)
  hf_dry=(--dry-run)
fi
k=$(val moe-router-topk)
fe=$(val moe-ffn-hidden-size)
[[ "$DRY_RUN" == 1 ]] && { k=4; fe=64; }
dense_ffn=$((k * fe))
# the dense twin: the config's attention, norms, vocabulary and RoPE, no experts
dense=(--arch llama --hidden-size "$(val hidden-size)"
       --num-attention-heads "$(val num-attention-heads)"
       --num-query-groups "$(val num-query-groups)" --kv-channels "$(val kv-channels)"
       --qk-layernorm --vocab-size "$(val vocab-size)" --rotary-base "$(val rotary-base)"
       --norm-epsilon "$(val norm-epsilon)" --ffn-hidden-size "$dense_ffn")
common=(--bf16 --device "$DEVICE" --train-iters $((WARMUP + 2 * STEPS)) --lr-warmup-iters 0
        --hardware "$HARDWARE")

gpu_name() {
  nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 || echo "$DEVICE"
}
echo "moe.sh: $(date -u +%Y-%m-%dT%H:%M:%SZ); $CFG at $LAYERS layers, micro batch 1"
echo "moe.sh: budget ${BUDGET_S}s; logs in $DEST"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu \
  --format=csv,noheader 2>/dev/null || true

skip_row() {  # NAME IMPL REASON
  printf '{"name": "%s", "impl": "%s", "status": "skipped", "error": "%s"}\n' "$1" "$2" "$3" \
    >>"$RESULTS"
}
# paralab_run NAME RESERVE ARGS...: one paralab row, leaving RESERVE seconds of the budget
paralab_run() {
  local name=$1 reserve=$2
  shift 2
  local left=$((BUDGET_S - (SECONDS - START) - reserve))
  local limit=$((left < ROW_TIMEOUT ? left : ROW_TIMEOUT))
  if ((limit < 15)); then
    skip_row "$name" paralab "budget: ${left}s left"
    return
  fi
  echo "---- paralab $name (timeout ${limit}s)"
  "$PY" bench/gpu/paralab_row.py --name "$name" --out "$RESULTS" --log "$DEST/paralab_$name.log" \
    --warmup "$WARMUP" --timeout "$limit" --profile "$PROFILE" -- "$TRAINER" "$@" "${common[@]}"
}

moe=(--config "$CFG" "${shape[@]}")
[[ "$DRY_RUN" == 1 ]] && moe+=("${moe_small[@]}")
paralab_run qwen3-moe-grouped "$HF_RESERVE_S" "${moe[@]}" --moe-grouped-gemm --moe-permute-fusion

left=$((BUDGET_S - (SECONDS - START)))
if ((left < 20)); then
  skip_row qwen3-30b-a3b "transformers" "budget: ${left}s left"
else
  limit=$((left < HF_RESERVE_S + 30 ? left : HF_RESERVE_S + 30))
  echo "---- transformers Qwen3MoeForCausalLM (timeout ${limit}s)"
  PYTHONUNBUFFERED=1 timeout -k 10 "$limit" "$PY" bench/gpu/moe_hf.py --config "$CFG" \
    --set "$hf_set" --name "qwen3-moe-hf" --impls "$HF_IMPLS" --warmup "$WARMUP" \
    --steps "$STEPS" --device "$DEVICE" --out "$RESULTS" "${hf_dry[@]}" 2>&1 | tee "$DEST/hf.log"
fi

paralab_run qwen3-moe-per-expert 0 "${moe[@]}" --moe-grouped-gemm=false --moe-permute-fusion
paralab_run "dense-ffn-$dense_ffn" 0 "${dense[@]}" "${shape[@]}"

echo
echo "==== moe.sh: Qwen3-30B-A3B's layers ($LAYERS), $(gpu_name) ($((SECONDS - START)) s)"
"$PY" bench/gpu/report.py moe "$RESULTS" --hardware "$HARDWARE" --hardware-note "$HARDWARE_NOTE" |
  tee "$DEST/moe.md"
