#!/usr/bin/env bash
# lessons/01-memory/check.sh: asserts the numbers of lessons/01-memory/README.md.
#   bash lessons/01-memory/check.sh [TRAINER]     (default: the repository's ./trainer)
# Plans four variants (flash / naive attention, with and without dropout), trains four
# (flash / naive x fused / unfused loss) for two steps on one rank, and checks the README's
# formulas against --plan --json and --metrics-jsonl; then the course's "15 GB of logits": the
# Qwen3-30B-A3B preset planned at 49K tokens, fused and unfused, and two --bf16 runs that
# measure the same byte convention. Prints "N passed, M failed" last.
source "$(dirname "$0")/../lib.sh"  # trainer, root, work, give_up
config=(--config lessons/01-memory/model.toml)

fail_run() { echo "FAIL  trainer $*: see $work"; echo "0 passed, 1 failed"; trap - EXIT; exit 1; }
for variant in flash naive; do
  "$trainer" "${config[@]}" --attention "$variant" --plan --json > "$work/plan_$variant.json" ||
    fail_run "--plan --attention $variant"
  "$trainer" "${config[@]}" --attention "$variant" --hidden-dropout 0.1 --attention-dropout 0.1 \
    --plan --json > "$work/plan_${variant}_dropout.json" ||
    fail_run "--plan --attention $variant (dropout)"
  for loss in fused unfused; do
    flag=(); [ "$loss" = unfused ] && flag=(--no-fused-ce)
    "$trainer" "${config[@]}" --attention "$variant" "${flag[@]}" \
      --metrics-jsonl "$work/run_${variant}_$loss.jsonl" > "$work/run_${variant}_$loss.log" 2>&1 ||
      fail_run "--attention $variant ${flag[*]}"
  done
done
# The course's 15 GB of logits: the Qwen3-30B-A3B preset at 49K tokens, planned fused and
# unfused, and the bf16 byte convention measured on the lesson's model.
qwen=(--config configs/models/qwen3-30b-a3b.toml --seq-length 49152 --micro-batch-size 1)
"$trainer" "${qwen[@]}" --plan --json > "$work/plan_qwen_fused.json" || fail_run "--plan qwen3"
"$trainer" "${qwen[@]}" --plan --json --no-fused-ce > "$work/plan_qwen_unfused.json" ||
  fail_run "--plan qwen3 --no-fused-ce"
for loss in fused unfused; do
  flag=(); [ "$loss" = unfused ] && flag=(--no-fused-ce)
  "$trainer" "${config[@]}" --bf16 "${flag[@]}" --metrics-jsonl "$work/run_bf16_$loss.jsonl" \
    > "$work/run_bf16_$loss.log" 2>&1 || fail_run "--bf16 ${flag[*]}"
done

python3 - "$work" <<'EOF'
import json, os, sys
work = sys.argv[1]
sys.path.insert(0, "lessons")  # the repository root is the working directory (lib.sh)
from checks import check, finish  # noqa: E402

def plan(name):
    return json.load(open(os.path.join(work, "plan_%s.json" % name)))

def run(name):
    rows = [json.loads(l) for l in open(os.path.join(work, "run_%s.jsonl" % name)) if l.strip()]
    return [r for r in rows if r.get("type") == "step"]  # the last line is the run's summary

# The lesson's configuration, read back from the plan so the formulas use what ran.
m = plan("flash")["model"]
B = plan("flash")["batch"]["micro_batch_size"]
L, h, a, S, V, f = (m["num_layers"], m["hidden_size"], m["num_attention_heads"],
                    m["seq_length"], m["vocab_size"], m["ffn_hidden_size"])
N = B * S
chunk = 1024  # the fused loss's tokens per chunk (ModelConfig::cross_entropy_chunk)
print("config: L %d, h %d, a %d, S %d, V %d, f %d, B %d, N = B S = %d" % (L, h, a, S, V, f, B, N))

# Parameters: per layer qkv 3h^2 + 3h, proj h^2 + h, fc1 hf + f, fc2 fh + h, two
# LayerNorms 4h (12h^2 + 13h when f = 4h); embeddings V h + S h; final norm 2h.
psi = L * (4 * h * h + 2 * h * f + 9 * h + f) + V * h + S * h + 2 * h
p = plan("flash")
check("parameters Psi = L(4h^2 + 2hf + 9h + f) + Vh + Sh + 2h", p["params"]["total"], psi)
mem = p["memory"][0]
check("params = 4 Psi", mem["params"], 4 * psi)
check("grads = 4 Psi", mem["grads"], 4 * psi)
check("master_params = 0 (fp32 params are the master)", mem["master_params"], 0)
check("optimizer_states = 8 Psi (Adam m, v)", mem["optimizer_states"], 8 * psi)

# Activations of one layer, bytes. 4(8Nh + 2Nf): u, q, k, v, ctx, x after attention,
# u2, layer output (N h each) and z, m (N f each), fp32 -- 64Nh when f = 4h; 16N: mean and
# rstd of two LayerNorms; attention: lse 4BaS (flash) or P 4BaS^2 (naive); dropout: two
# N h byte masks (2Nh), and with naive attention the mask (1 byte) and P' (4) of the S x S
# probabilities.
dense = 4 * (8 * N * h + 2 * N * f) + 16 * N
flash_layer = dense + 4 * B * a * S
naive_layer = dense + 4 * B * a * S * S
check("flash layer activations = 4(8Nh + 2Nf) + 16N + 4BaS",
      plan("flash")["activations"]["per_layer_bytes"], flash_layer)
check("naive layer activations = 4(8Nh + 2Nf) + 16N + 4BaS^2",
      plan("naive")["activations"]["per_layer_bytes"], naive_layer)
check("flash + dropout layer activations = 4(8Nh + 2Nf) + 2Nh + 16N + 4BaS",
      plan("flash_dropout")["activations"]["per_layer_bytes"], dense + 2 * N * h + 4 * B * a * S)
check("naive + dropout layer activations = 4(8Nh + 2Nf) + 2Nh + 16N + 9BaS^2",
      plan("naive_dropout")["activations"]["per_layer_bytes"],
      dense + 2 * N * h + 9 * B * a * S * S)
# Korthikanti et al. 2022 count the same layer (GPT, f = 4h, dropout, naive attention) in
# 16-bit activations as sbh(34 + 5as/h); in fp32 every tensor doubles except the byte
# masks: 2 x 34 - 2 = 66 sbh and 2 x 5 - 1 = 9 as^2 b, plus the norm statistics they omit.
if f == 4 * h:
    korthikanti = S * B * h * (34 + 5 * a * S / h)
    check("naive + dropout = 2 x Korthikanti sbh(34 + 5as/h) - masks (2sbh + as^2b) + 16N",
          plan("naive_dropout")["activations"]["per_layer_bytes"],
          int(2 * korthikanti - 2 * S * B * h - a * S * S * B + 16 * N))
outside = 4 * N * h + (8 * N + 4 * N * h)  # embedding output; final-norm stats + d(xf)
check("flash activations = L layer + 8Nh + 8N", p["memory"][0]["activations"],
      L * flash_layer + outside)

# 12 scratch tensors of N h (dres, tmp_h, qkv x 3, o_heads, dctx, do_heads, dq, dk, dv,
# xf), dact and dfc1 (N f each), fp32; losses N floats; tokens and targets 2N int32.
# + 12 min(N, chunk): the loss's row max, sum of exponentials and target logit per row
workspace = 4 * (12 * N * h + 2 * N * f) + 12 * N + 12 * min(N, chunk)
check("flash workspace = 4(12Nh + 2Nf) + 12N + 12 min(N, chunk)", mem["workspace"], workspace)
check("naive workspace = flash + 8BaS^2 (scores, dprobs)",
      plan("naive")["memory"][0]["workspace"], workspace + 8 * B * a * S * S)
check("fused logits = min(N, 1024) V 4", mem["logits"], min(N, chunk) * V * 4)

# Measured == predicted, every category, every step, in the four runs.
runs = {(att, loss): run("%s_%s" % (att, loss))
        for att in ("flash", "naive") for loss in ("fused", "unfused")}
for (att, loss), steps in sorted(runs.items()):
    mismatches = []
    for s in steps:
        mismatches += ["step %d %s %d != %d" % (s["step"], c, v["measured"], v["predicted"])
                       for c, v in s["memory"].items() if v["measured"] != v["predicted"]]
        if s["peak_memory_bytes"] != s["memory"]["total"]["predicted"]:
            mismatches.append("step %d peak %d" % (s["step"], s["peak_memory_bytes"]))
    check("%s/%s: %d steps, every category measured == predicted" % (att, loss, len(steps)),
          mismatches, [])

def measured(att, loss, category):
    return runs[(att, loss)][-1]["memory"][category]["measured"]

for loss in ("fused", "unfused"):
    check("%s: naive - flash activations = L 4 B a S (S - 1) (P minus lse)" % loss,
          measured("naive", loss, "activations") - measured("flash", loss, "activations"),
          L * 4 * B * a * S * (S - 1))
for att in ("flash", "naive"):
    check("%s: unfused logits = N V 4" % att, measured(att, "unfused", "logits"), N * V * 4)
    check("%s: fused logits = min(N, 1024) V 4" % att, measured(att, "fused", "logits"),
          min(N, chunk) * V * 4)
    check("%s: activations the same fused or unfused (d(xf) or xf, both N h)" % att,
          measured(att, "unfused", "activations"), measured(att, "fused", "activations"))

print("the course's 15 GB of logits: Qwen3-30B-A3B at S = 49152, one sequence")
for loss in ("fused", "unfused"):
    q = plan("qwen_%s" % loss)
    qN = q["batch"]["micro_batch_size"] * q["model"]["seq_length"]
    qV = q["model"]["vocab_size"]
    if loss == "fused":
        check("N V 2 (the course's bf16 logits) = 14,935,916,544 bytes", qN * qV * 2,
              14935916544)
    want = (qN if loss == "unfused" else min(qN, chunk)) * qV * 6
    check("qwen3 %s logits = %s V (4 + 2) (fp32 + bf16 gradient)" % (
              loss, "N" if loss == "unfused" else "min(N, 1024)"), q["memory"][0]["logits"], want)
for loss in ("fused", "unfused"):
    steps = run("bf16_%s" % loss)
    logits = steps[-1]["memory"]["logits"]
    check("--bf16 %s, measured: logits = %s V 6 == predicted" % (
              loss, "N" if loss == "unfused" else "min(N, 1024)"),
          (logits["measured"], logits["predicted"]),
          ((N if loss == "unfused" else min(N, chunk)) * V * 6,) * 2)

finish()
EOF
