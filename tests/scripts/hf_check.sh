#!/usr/bin/env bash
# tests/scripts/hf_check.sh: Hugging Face exports that transformers computes alike, and
# imports that train on at any layout.
#   bash tests/scripts/hf_check.sh ./trainer [filter]
# Per family (GPT-2; Llama with grouped-query attention; Qwen3: llama --qk-layernorm;
# Mixtral: the tiny MoE; Qwen3-MoE: with --qk-layernorm and a dense layer):
#   trained    the trainer trains 3 steps at a parallel layout and writes --export-hf at the
#              end (gathered from every rank); hf_logits imports it (--load-hf) and computes
#              the logits of a fixed batch; scripts/hf_check.py loads the folder with
#              transformers and compares: max|paralab - hf| / max|hf| <= 1e-4
#   convert    `trainer --convert` of that run's checkpoint writes the same files, byte for byte
#   random     hf_logits exports random weights at a scale where each tensor shows in the
#              logits (a swapped norm or a permuted key row would not hide), the same check
# and for gpt and llama a run that starts from the export (--load-hf) at tp 2 has the
# single-rank start's losses (1e-5) and not a fresh start's. The transformers check needs torch
# and transformers in $PARALAB_HF_PYTHON (.ci/run installs them in build/hf-venv), else
# python3; without them it says SKIP and the rest still runs.
set -uo pipefail
trainer=${1:?usage: $0 ./trainer [filter]}
filter=${2:-}
cd "$(dirname "$0")/../.."
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OPENBLAS_NUM_THREADS=1
source "$(dirname "$0")/../test_python.sh"  # python: the test venv's
logits=build/hf_logits
passed=0; failed=0; skipped=0
pass() { passed=$((passed + 1)); echo "ok    $1"; }
flunk() { failed=$((failed + 1)); echo "FAIL  $1"; }

pairs=()  # (export, logits, label): transformers checks them all at the end, one torch import
family() {  # name ranks "layout flags" model flags...
  local name=$1 np=$2 layout=$3; shift 3
  case "$name" in *"$filter"*) ;; *) return ;; esac
  local launch=("$trainer") v
  [ "$np" -gt 1 ] && launch=(mpirun -np "$np" "$trainer")
  # shellcheck disable=SC2086
  if ! "${launch[@]}" "$@" $layout --train-iters 3 --export-hf "$work/$name" --save "$work/$name.ckpt" \
       > "$work/$name.log" 2>&1 ||
     ! "$logits" "$@" --load-hf "$work/$name" --out "$work/$name.logits" > "$work/$name.logits.log" 2>&1; then
    flunk "$name (trained): $(tail -1 "$work/$name.log") $(tail -1 "$work/$name.logits.log")"; return
  fi
  pairs+=("$work/$name" "$work/$name.logits")
  # --convert of the run's last checkpoint: the same export, byte for byte
  if "$trainer" --convert --load "$work/$name.ckpt" --export-hf "$work/$name.converted" \
       > "$work/$name.convert.log" 2>&1 &&
     cmp -s "$work/$name/model.safetensors" "$work/$name.converted/model.safetensors" &&
     cmp -s "$work/$name/config.json" "$work/$name.converted/config.json"; then
    pass "$name: --convert of the checkpoint == the run's --export-hf, byte for byte"
  else
    flunk "$name: --convert differs from --export-hf: $(tail -1 "$work/$name.convert.log")"
  fi
  if ! "$logits" "$@" --export-hf "$work/$name.random" --random-weights --out "$work/$name.random.logits" \
       > "$work/$name.random.log" 2>&1; then
    flunk "$name (random): $(tail -1 "$work/$name.random.log")"; return
  fi
  pairs+=("$work/$name.random" "$work/$name.random.logits")
}

tiny=(--config configs/models/tiny.toml)
moe=(--config configs/models/tiny-moe.toml)
family gpt2 2 "--tp 2" "${tiny[@]}"
# llama's vocabulary of 200 is padded to 256 rows (--make-vocab-size-divisible-by 128): the
# export, --convert of the checkpoint and the imports hold the (200, h) tensors
family llama 2 "--zero-stage 3" "${tiny[@]}" --arch llama --num-query-groups 2 --vocab-size 200
family qwen3 2 "--pp 2" "${tiny[@]}" --arch llama --qk-layernorm --rotary-base 500000 --norm-epsilon 1e-6
family mixtral 2 "--ep 2" "${moe[@]}"
family qwen3-moe 1 "" "${moe[@]}" --qk-layernorm --moe-layer-freq "[1,0]"

# transformers on every export: one line per check; the folder names the family and the kind
if [ ${#pairs[@]} -gt 0 ]; then
  out=$("$python" scripts/hf_check.py "${pairs[@]}" 2>&1); rc=$?
  if grep -q '^SKIP' <<< "$out"; then
    skipped=$((${#pairs[@]} / 2)); echo "skip  transformers not importable ($python)"
  else
    while IFS= read -r line; do
      case "$line" in PASS*) pass "${line#PASS }" ;; FAIL*) flunk "${line#FAIL }" ;; esac
    done <<< "${out//$work\//}"
    [ "$rc" -ne 0 ] && ! grep -q '^FAIL' <<< "$out" && flunk "hf_check.py exit $rc: $(tail -2 <<< "$out")"
  fi
fi

# --load-hf at tp 2 against one rank: the same losses; a fresh start's differ.
start_from() {  # name flags...
  local name=$1; shift
  case "$name" in *"$filter"*) ;; *) return ;; esac
  if "$trainer" "$@" --train-iters 3 --metrics-jsonl "$work/$name.one.jsonl" --load-hf "$work/$name" > /dev/null 2>&1 &&
     mpirun -np 2 "$trainer" "$@" --train-iters 3 --tp 2 --metrics-jsonl "$work/$name.tp2.jsonl" \
       --load-hf "$work/$name" > /dev/null 2>&1 &&
     "$trainer" "$@" --train-iters 3 --metrics-jsonl "$work/$name.fresh.jsonl" > /dev/null 2>&1 &&
     v=$(python3 - "$work/$name" <<'EOF'
import json, sys
base = sys.argv[1]
def losses(kind):
    return [r["loss"] for r in map(json.loads, open(f"{base}.{kind}.jsonl")) if r.get("type") == "step"]
one, tp2, fresh = losses("one"), losses("tp2"), losses("fresh")
worst = max(abs(a - b) / abs(b) for a, b in zip(tp2, one))
assert worst <= 1e-5, f"tp 2 vs 1 rank: rel {worst:.2e}"
assert one[0] != fresh[0], "step 1 equals a fresh start's: nothing was loaded"
print(f"tp 2 == 1 rank (rel {worst:.1e}), step 1 loss {one[0]:.4f} vs a fresh start's {fresh[0]:.4f}")
EOF
); then pass "$name --load-hf: $v"; else flunk "$name --load-hf: ${v:-run failed}"; fi
}
start_from gpt2 "${tiny[@]}"
start_from llama "${tiny[@]}" --arch llama --num-query-groups 2 --vocab-size 200

echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
