#!/usr/bin/env bash
# bench/precision_quality.sh: one model trained the same number of steps in every precision
# paralab has, on the CPU backend (issue 36's quality table; results in notes/performance.md).
#
#   bash bench/precision_quality.sh [TRAINER]            (default ./trainer)
#   STEPS=300 MODEL="--config configs/models/llama-100m.toml --seq-length 256 \
#     --global-batch-size 8 --micro-batch-size 8" bash bench/precision_quality.sh
#
# The default model is a small Llama (4 layers, h 128, 4 heads / 2 groups, SwiGLU 512, S 128,
# vocab 256, 8 sequences a step) on the synthetic corpus, so that the ten runs take minutes on
# two cores; the llama-100m line above is the issue's model, hours on two cores. Runs, each
# from the same seed and data:
#   fp32, bf16 (the baseline), fp16 with Megatron's dynamic scaler (from 2^32), fp16 with a
#   static scale of 1024, fp16 unscaled (--loss-scale 1), bf16 with bf16 Adam moments
#   (--use-precision-aware-optimizer), and FP8 (bf16 storage) with each recipe: delayed
#   hybrid (Megatron's default recipe), delayed e4m3, tensorwise hybrid, blockwise hybrid.
# Columns: the mean loss of the last 10 steps, relative to bf16's; the worst relative
# difference of any step's loss to bf16's at the same step; steps skipped (fp16 overflows);
# the loss scale at the end (fp16) and where it settled; then a moving scale's trajectory, each
# scale with the steps that used it and the skips among them. A loss difference on a model this
# small and this short says how far each precision perturbs training, not how a 100B model
# would fare: DeepSeek-V3's "relative loss error below 0.25%" for FP8 against BF16 is measured
# at 16B and 230B parameters over 1T tokens (arXiv:2412.19437, section 3.3), not a target here.
set -euo pipefail
trainer=${1:-./trainer}
steps=${STEPS:-300}
model=${MODEL:-"--arch llama --num-layers 4 --hidden-size 128 --num-attention-heads 4 \
  --num-query-groups 2 --ffn-hidden-size 512 --seq-length 128 --vocab-size 256 \
  --micro-batch-size 8 --global-batch-size 8 --lr 3e-3 --min-lr 3e-4 --lr-warmup-iters 20 \
  --lr-decay-style cosine --weight-decay 0.1 --clip-grad 1.0 --seed 1234"}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

runs=(
  "fp32:"
  "bf16:--bf16"
  "fp16 dynamic (2^32):--fp16"
  "fp16 static 1024:--fp16 --loss-scale 1024"
  "fp16 unscaled:--fp16 --loss-scale 1"
  "bf16 + bf16 moments:--bf16 --use-distributed-optimizer --use-precision-aware-optimizer --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16"
  "fp8 delayed hybrid:--bf16 --fp8-format hybrid --fp8-recipe delayed"
  "fp8 delayed e4m3:--bf16 --fp8-format e4m3 --fp8-recipe delayed"
  "fp8 tensorwise hybrid:--bf16 --fp8-format hybrid --fp8-recipe tensorwise"
  "fp8 blockwise hybrid:--bf16 --fp8-format hybrid --fp8-recipe blockwise"
)
i=0
for r in "${runs[@]}"; do
  # shellcheck disable=SC2086
  OPENBLAS_NUM_THREADS=1 "$trainer" $model ${r#*:} --train-iters "$steps" --log-interval "$steps" \
    --report-interval 0 --metrics-jsonl "$work/$i.jsonl" > "$work/$i.log" 2>&1 ||
    { echo "bench/precision_quality.sh: run '${r%%:*}' failed: $(tail -n 1 "$work/$i.log")" >&2; exit 1; }
  echo "${r%%:*}" > "$work/$i.name"
  i=$((i + 1))
done

python3 - "$work" "$i" "$steps" <<'EOF'
import json, math, sys
work, n, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def steps_of(k):
    rows = [json.loads(l) for l in open(f"{work}/{k}.jsonl") if l.strip()]
    return [r for r in rows if r.get("type", "step") == "step"]
runs = [(open(f"{work}/{k}.name").read().strip(), steps_of(k)) for k in range(n)]
base = dict(runs)["bf16"]
tail = lambda s: sum(r["loss"] for r in s[-10:]) / 10
print(f"{steps} steps, one rank, CPU backend; baseline bf16 (last-10 mean loss {tail(base):.4f})")
print(f"{'run':<24} {'last-10 loss':>12} {'vs bf16':>9} {'worst step vs bf16':>19} {'skipped':>8}  loss scale")
for name, s in runs:
    worst = max(abs(a["loss"] - b["loss"]) / b["loss"] for a, b in zip(s, base))
    skipped = sum(1 for r in s if r.get("skipped"))
    scales = [r["loss_scale"] for r in s if "loss_scale" in r]
    scale = ""
    if scales:
        first_clean = next((r["loss_scale"] for r in s if not r.get("skipped")), None)
        scale = f"2^{math.log2(scales[0]):.0f} -> 2^{math.log2(scales[-1]):.0f}" + (
            f" (first update at 2^{math.log2(first_clean):.0f})" if first_clean else "")
    print(f"{name:<24} {tail(s):>12.4f} {tail(s) / tail(base) - 1:>+9.2%} {worst:>19.2%} {skipped:>8}  {scale}")
# a moving scale's whole trajectory: each scale used and the steps that used it, skips marked
for name, s in runs:
    used = [(r["step"], r["loss_scale"], r.get("skipped")) for r in s if "loss_scale" in r]
    if len({x for _, x, _ in used}) < 2:
        continue
    spans = []
    for step, x, skipped in used:
        if not spans or spans[-1][2] != x:
            spans.append([step, step, x, 0])
        spans[-1][1] = step
        spans[-1][3] += bool(skipped)
    print(f"{name} scale: " + ", ".join(
        f"2^{math.log2(x):.0f} at {a}" + (f"-{b}" if b > a else "") + (f" ({k} skipped)" if k else "")
        for a, b, x, k in spans))
EOF
