#!/usr/bin/env bash
# bench/gpu/step.sh: paralab's training step on one GPU beside PyTorch eager and torch.compile
# running the same model at the same shapes, in one call (issue 26's "measured beside the
# anchors"). Results go to notes/performance.md ("GPU: one H200").
#
#   bash bench/gpu/step.sh                       on the GPU machine (after .gpu/run.sh's set-up)
#   OUT=DIR PROFILE=gpu.toml bash bench/gpu/step.sh    logs and tables into DIR; a 2nd projection
#   ROWS=gpt2-124m-mbs8 COMPILE=none bash bench/gpu/step.sh          a subset
#   DRY_RUN=1 PYTHON=/path/to/venv/python bash bench/gpu/step.sh     here, on the CPU: tiny shapes
#
# Rows (configs/models/; global batch = micro batch: one microbatch per step; bf16):
#   gpt2-124m-mbs8    GPT-2 124M, micro batch 8, seq 1024
#   gpt2-124m-mbs32   GPT-2 124M, micro batch 32, seq 1024
#   llama-100m-mbs8   llama-100m, micro batch 8, seq 1024
#   llama-7b-4l-mbs2  Llama-2 7B's layer shape at 4 layers, micro batch 2, seq 2048
# Each row: paralab (`trainer --config ... --bf16 --hardware $HARDWARE`, through
# bench/gpu/paralab_row.py: the plan's Psi, model FLOPs and projected step, then the run), then
# PyTorch eager on every row and torch.compile on COMPILE's rows (bench/gpu/step_torch.py, one
# process: every eager row first). WARMUP steps are left out, then two rounds of STEPS steps
# are timed: both rounds' medians are printed (their spread is the noise). The table
# (bench/gpu/report.py): tokens/s, step ms, MFU (model FLOPs as `trainer --plan --json` counts
# them, full attention, over 989 TFLOP/s), peak memory (paralab's ledger beside
# torch.cuda.max_memory_allocated), paralab's projected step (datasheet profile; with PROFILE,
# also the profile `trainer --benchmark` measured), launch -> first step, paralab / eager and
# paralab / compile in tokens/s, and the issue's goals as met / missed.
#
# Time: BUDGET_S (default 240 s) bounds the whole script: each paralab run gets at most
# ROW_TIMEOUT s (default 100) and never eats into the TORCH_RESERVE_S (default 45% of the
# budget) kept for PyTorch, which gets what is left; a row that does not fit is a "skipped"
# row. The rows run in ROWS's order (the issue's headline rows first). Expected times on an
# H200: bench/README.md ("On a GPU").
#
# Environment: TRAINER (./trainer), PYTHON (python3), HARDWARE (the GPU's own profile:
# bench/gpu/hardware.sh), PROFILE (a measured
# profile, optional), WARMUP (3), STEPS (5 per round), ROWS (all four, comma-separated),
# BUDGET_S, ROW_TIMEOUT, TORCH_RESERVE_S,
# COMPILE (gpt2: the GPT-2 rows | all | none), DEVICE (cuda), DRY_RUN (0), OUT (a directory).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1

TRAINER=${TRAINER:-./trainer}
PY=${PYTHON:-python3}
HARDWARE=${HARDWARE:-}
PROFILE=${PROFILE:-}
WARMUP=${WARMUP:-3}
STEPS=${STEPS:-5}
BUDGET_S=${BUDGET_S:-240}
ROW_TIMEOUT=${ROW_TIMEOUT:-100}
TORCH_RESERVE_S=${TORCH_RESERVE_S:-$((BUDGET_S * 45 / 100))}
ROWS=${ROWS:-gpt2-124m-mbs8,gpt2-124m-mbs32,llama-7b-4l-mbs2,llama-100m-mbs8}
COMPILE=${COMPILE:-gpt2}
DEVICE=${DEVICE:-cuda}
DRY_RUN=${DRY_RUN:-0}
if [[ "$DRY_RUN" == 1 ]]; then DEVICE=cpu; fi

START=$SECONDS
DEST=${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/paralab_step.XXXXXX")}
mkdir -p "$DEST"
# The GPU's own hardware profile, unless HARDWARE names one (a dry run on the CPU takes H100 SXM's).
WORK=$DEST
if [[ "$DRY_RUN" == 1 ]]; then HARDWARE=${HARDWARE:-h100-sxm}; HARDWARE_NOTE=""; else source bench/gpu/hardware.sh; fi
RESULTS="$DEST/step_rows.jsonl"
: >"$RESULTS"

# row_spec NAME: the config file and the overrides, in paralab's flag names (key=value).
row_spec() {
  case $1 in
    gpt2-124m-mbs8)   echo "configs/models/gpt2-124m.toml micro-batch-size=8 seq-length=1024" ;;
    gpt2-124m-mbs32)  echo "configs/models/gpt2-124m.toml micro-batch-size=32 seq-length=1024" ;;
    llama-100m-mbs8)  echo "configs/models/llama-100m.toml micro-batch-size=8 seq-length=1024" ;;
    llama-7b-4l-mbs2)
      echo "configs/models/llama-7b.toml num-layers=4 micro-batch-size=2 seq-length=2048" ;;
    *) return 1 ;;
  esac
}
# DRY_RUN: the same families at a size two CPU cores train in seconds (both sides alike).
dry_spec() {
  local extra="num-layers=2 seq-length=64 micro-batch-size=2"
  [[ $1 == llama-7b-* ]] && extra="$extra hidden-size=512 ffn-hidden-size=1376"
  echo "$extra"
}

IFS=, read -ra NAMES <<<"$ROWS"
compile_rows=()
for n in "${NAMES[@]}"; do
  case $COMPILE in
    all) compile_rows+=("$n") ;;
    gpt2) [[ $n == gpt2-* ]] && compile_rows+=("$n") ;;
    none) ;;
  esac
done
COMPILE_ROWS=$(IFS=,; echo "${compile_rows[*]}")

echo "step.sh: $(date -u +%Y-%m-%dT%H:%M:%SZ); rows $ROWS; torch.compile on: ${COMPILE_ROWS:-none}"
echo "step.sh: warm-up $WARMUP, 2 rounds of $STEPS steps; budget ${BUDGET_S}s; logs in $DEST"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu \
  --format=csv,noheader 2>/dev/null || true

skip_row() {  # NAME IMPL REASON: a row that did not run
  printf '{"name": "%s", "impl": "%s", "status": "skipped", "error": "%s"}\n' "$1" "$2" "$3" \
    >>"$RESULTS"
}

torch_rows=()
for n in "${NAMES[@]}"; do
  spec=$(row_spec "$n") || { echo "step.sh: unknown row $n" >&2; exit 2; }
  read -ra kv <<<"$spec"
  config=${kv[0]}
  pairs=("${kv[@]:1}")
  if [[ "$DRY_RUN" == 1 ]]; then read -ra dry <<<"$(dry_spec "$n")"; pairs+=("${dry[@]}"); fi
  args=(--config "$config")
  mbs=1
  for p in "${pairs[@]}"; do
    args+=("--${p%%=*}" "${p#*=}")
    [[ ${p%%=*} == micro-batch-size ]] && mbs=${p#*=}
  done
  torch_rows+=(--row "$n=$config,$(IFS=,; echo "${pairs[*]}")")
  left=$((BUDGET_S - (SECONDS - START) - TORCH_RESERVE_S))
  limit=$((left < ROW_TIMEOUT ? left : ROW_TIMEOUT))
  if ((limit < 15)); then
    skip_row "$n" paralab "budget: ${left}s left before the PyTorch reserve"
    continue
  fi
  echo "---- paralab $n (timeout ${limit}s)"
  "$PY" bench/gpu/paralab_row.py --name "$n" --out "$RESULTS" --log "$DEST/paralab_$n.log" \
    --warmup "$WARMUP" --timeout "$limit" --profile "$PROFILE" -- \
    "$TRAINER" "${args[@]}" --global-batch-size "$mbs" --bf16 --device "$DEVICE" \
    --train-iters $((WARMUP + 2 * STEPS)) --lr-warmup-iters 0 --hardware "$HARDWARE"
done

left=$((BUDGET_S - (SECONDS - START)))
if ((left < 20)); then
  for n in "${NAMES[@]}"; do skip_row "$n" "torch eager" "budget: ${left}s left"; done
else
  echo "---- PyTorch eager (every row), then torch.compile (${COMPILE_ROWS:-none});" \
    "timeout ${left}s"
  modes=eager
  [[ -n "$COMPILE_ROWS" ]] && modes=eager,compile
  PYTHONUNBUFFERED=1 timeout -k 10 "$left" "$PY" bench/gpu/step_torch.py "${torch_rows[@]}" \
    --modes "$modes" --compile-rows "$COMPILE_ROWS" --warmup "$WARMUP" --steps "$STEPS" \
    --device "$DEVICE" --out "$RESULTS" 2>&1 | tee "$DEST/torch.log"
  status=${PIPESTATUS[0]}
  [[ $status == 124 || $status == 137 ]] && echo "step.sh: PyTorch stopped at the budget (${left}s)"
fi

echo
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 || echo "$DEVICE")
echo "==== step.sh: paralab beside PyTorch, $gpu ($((SECONDS - START)) s)"
"$PY" bench/gpu/report.py step "$RESULTS" --rows "$ROWS" --compile-rows "$COMPILE_ROWS" \
  --hardware "$HARDWARE" --hardware-note "$HARDWARE_NOTE" |
  tee "$DEST/step.md"
