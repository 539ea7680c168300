#!/usr/bin/env bash
# tests/scripts/megatron_llama.sh: a Megatron-LM Llama pretraining script's arguments, pasted.
#
# The argument arrays below are those of Megatron-LM's examples/llama/
# train_llama_1gpu_bf16_slimpajama.sh ("a small Llama-3.x style model for training from
# scratch"), flag for flag and in its order; only the sizes, lengths and intervals are shrunk
# (each original in the comment beside it) and the paths point into a scratch folder. The
# trainer runs them as they are (cli/flags_megatron.cpp) and this test holds it to Megatron's
# meanings:
#   - it exits 0 and warns once, naming the flags that have no effect here (Transformer
#     Engine, kernel fusions, Weights & Biases, extra logging); its tokenizer.json fixes the
#     vocabulary (256);
#   - Megatron's Llama parts (--swiglu, --normalization RMSNorm, rope, untied output,
#     no biases) choose --arch llama, --group-query-attention --num-query-groups 2 is GQA;
#   - its losses are bitwise those of the same run spelt with paralab's own flags (--arch
#     llama, --lr-warmup-iters 1 for --lr-warmup-fraction .001 of --lr-decay-iters 1000);
#   - --split 949,50,1 validates on the file's second share (the validation lines);
#   - --save / --load of one empty folder: the first job, from step 1; a second run of the
#     same command with more steps resumes from its latest;
#   - --tensorboard-dir's event files hold the run's scalars, read back by the `tensorboard`
#     package (PyPI) when the tests' Python has it: build/hf-venv (.ci/run installs it there),
#     $PARALAB_HF_PYTHON, or python3; without it that part says skip.
# Usage: bash tests/scripts/megatron_llama.sh ./trainer
set -uo pipefail
trainer=$(realpath "${1:?usage: tests/scripts/megatron_llama.sh ./trainer}")
cd "$(dirname "$0")/../.."
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OPENBLAS_NUM_THREADS=1
passed=0; failed=0
pass() { passed=$((passed + 1)); echo "ok    $1"; }
flunk() { failed=$((failed + 1)); echo "FAIL  $1"; }

# 20,000 tokens (ids < 256) in llm.c's token-file format: the data the script's --data-path
# names (Megatron reads an indexed dataset prefix there; paralab an llm.c file).
python3 - "$work/tokens.bin" <<'EOF'
import random, struct, sys
random.seed(1)
tokens = [random.randrange(256) if i % 3 else (i * 7) % 256 for i in range(20000)]
header = struct.pack("<3i", 20240520, 1, len(tokens)) + b"\0" * (1024 - 12)
open(sys.argv[1], "wb").write(header + struct.pack(f"<{len(tokens)}H", *tokens))
EOF

# The script's HuggingFaceTokenizer: a tokenizer.json of 256 tokens, which fixes the
# vocabulary (paralab reads token ids; it counts the tokenizer's vocabulary, nothing more).
mkdir -p "$work/tokenizer"
python3 - "$work/tokenizer/tokenizer.json" <<'EOF'
import json, sys
vocab = {f"<0x{i:02X}>": i for i in range(256)}
json.dump({"version": "1.0", "added_tokens": [], "model": {"type": "BPE", "vocab": vocab,
           "merges": []}}, open(sys.argv[1], "w"))
EOF

CHECKPOINT_PATH=$work/checkpoints
TENSORBOARD_LOGS_PATH=$work/tensorboard_logs
TOKENIZER_MODEL=$work/tokenizer
DATA_PATH=$work/tokens.bin

# ---- Megatron-LM examples/llama/train_llama_1gpu_bf16_slimpajama.sh, shrunk ----
LLAMA_MODEL_ARGS=(
    --num-layers 2                    # 12
    --hidden-size 64                  # 2048
    --num-attention-heads 4           # 16
    --seq-length 32                   # 2048
    --max-position-embeddings 32      # 2048
    --attention-backend auto
    --normalization RMSNorm
    --position-embedding-type rope
    --untie-embeddings-and-output-weights
    --disable-bias-linear
    --transformer-impl transformer_engine
    --group-query-attention
    --num-query-groups 2              # 4
    --attention-dropout 0.0
    --hidden-dropout 0.0
    --rotary-base 500000
    --rotary-percent 1.0
    --swiglu
    --ffn-hidden-size 172             # 5504
    --no-masked-softmax-fusion
    --attention-softmax-in-fp32
)
TRAINING_ARGS=(
    --micro-batch-size 4              # 16
    --global-batch-size 16            # 64
    --train-iters 12                  # 500000
    --weight-decay 0.1
    --adam-beta1 0.9
    --adam-beta2 0.95
    --init-method-std 0.006
    --clip-grad 1.0
    --bf16
    --lr 6.0e-5
    --lr-decay-style cosine
    --min-lr 6.0e-6
    --lr-warmup-fraction .001
    --lr-decay-iters 1000             # 430000
)
MODEL_PARALLEL_ARGS=(
	--tensor-model-parallel-size 1
	--pipeline-model-parallel-size 1
)
DATA_ARGS=(
    --data-path $DATA_PATH
    --tokenizer-type HuggingFaceTokenizer
    --tokenizer-model $TOKENIZER_MODEL
    --split 949,50,1
)
EVAL_AND_LOGGING_ARGS=(
    --log-interval 4                  # 100
    --tensorboard-log-interval 1
    --save-interval 6                 # 10000
    --eval-interval 6                 # 1000
    --save $CHECKPOINT_PATH
    --load $CHECKPOINT_PATH
    --eval-iters 2                    # 10
    --tensorboard-dir $TENSORBOARD_LOGS_PATH
    --wandb-project "megatron-lm-training"
    --wandb-exp-name "llama3x-small-slimpajama-bf16"
    --wandb-save-dir $CHECKPOINT_PATH/wandb
    --log-params-norm
    --log-num-zeros-in-grad
    --log-timers-to-tensorboard
)
# ---- end of the script's arguments ----
megatron=("${LLAMA_MODEL_ARGS[@]}" "${TRAINING_ARGS[@]}" "${MODEL_PARALLEL_ARGS[@]}"
          "${DATA_ARGS[@]}" "${EVAL_AND_LOGGING_ARGS[@]}")

"$trainer" "${megatron[@]}" --metrics-jsonl "$work/megatron.jsonl" > "$work/megatron.log" 2> "$work/megatron.err"
status=$?
warning="paralab: warning: Megatron flags with no effect in paralab: "
if [ "$status" = 0 ] && [ "$(wc -l < "$work/megatron.err")" = 1 ] && grep -q "^$warning" "$work/megatron.err" &&
   grep -q "^paralab | llama 2L h64 a4 g2 s32 V256 " "$work/megatron.log" &&
   grep -q "checkpoint: none in $CHECKPOINT_PATH yet" "$work/megatron.log" &&
   [ "$(cat "$CHECKPOINT_PATH/latest")" = 12 ] &&
   [ "$(grep -c "validation loss at" "$work/megatron.log")" = 2 ]; then
  pass "the script's arguments run as pasted: llama with 2 query groups, saved at 6 and 12, validated twice, one warning"
else
  flunk "the script's arguments: exit $status"; head -3 "$work/megatron.err"; tail -3 "$work/megatron.log"
fi
for flag in --attention-backend --transformer-impl --no-masked-softmax-fusion --attention-softmax-in-fp32 \
            --wandb-project --wandb-exp-name --wandb-save-dir --log-params-norm \
            --log-num-zeros-in-grad --log-timers-to-tensorboard; do
  grep -q -- "$flag (" "$work/megatron.err" || flunk "the warning does not name $flag"
done

# The same run in paralab's own spelling: the Megatron names had their meanings.
"$trainer" --arch llama --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32 \
  --num-query-groups 2 --rotary-base 500000 --ffn-hidden-size 172 --micro-batch-size 4 \
  --global-batch-size 16 --train-iters 12 --weight-decay 0.1 --adam-beta1 0.9 --adam-beta2 0.95 \
  --init-method-std 0.006 --clip-grad 1.0 --bf16 --lr 6.0e-5 --lr-decay-style cosine --min-lr 6.0e-6 \
  --lr-warmup-iters 1 --lr-decay-iters 1000 --data-path "$DATA_PATH" --split 949,50,1 \
  --log-interval 4 --eval-interval 6 --eval-iters 2 --metrics-jsonl "$work/paralab.jsonl" \
  > "$work/paralab.log" 2>&1 || flunk "paralab's spelling: exit $?"
if verdict=$(python3 - "$work/megatron.jsonl" "$work/paralab.jsonl" <<'EOF'
import json, sys
def losses(path):
    rows = [json.loads(l) for l in open(path)]
    return [(r["step"], r["loss"], r["lr"]) for r in rows if r.get("type") == "step"]
a, b = losses(sys.argv[1]), losses(sys.argv[2])
assert len(a) == 12 and a == b, f"{a[:2]} vs {b[:2]}"
print(f"12 steps, losses and learning rates bitwise equal (step 12 loss {a[-1][1]:.4f})")
EOF
); then pass "Megatron's spelling == paralab's: $verdict"; else flunk "Megatron's spelling != paralab's: $verdict"; fi

# The requeued job: the same command with more steps resumes from its latest (12).
"$trainer" "${megatron[@]}" --train-iters 14 > "$work/resumed.log" 2>&1
if [ $? = 0 ] && grep -q "checkpoint: resumed from $CHECKPOINT_PATH/iter_0000012 at iteration 12" "$work/resumed.log" &&
   grep -q "^ *14/14 " "$work/resumed.log"; then
  pass "the same command, 14 steps: resumes at iteration 12, trains 13-14"
else
  flunk "resume"; tail -3 "$work/resumed.log"
fi

# TensorBoard's own reader on the event files.
source "$(dirname "$0")/../test_python.sh"  # python: the test venv's
if ! "$python" -c 'import tensorboard' 2>/dev/null; then
  echo "skip  TensorBoard's reader: no tensorboard package in $python"
elif verdict=$("$python" tests/mpi/tensorboard_scalars.py "$TENSORBOARD_LOGS_PATH" > "$work/tb.json" &&
               python3 - "$work/tb.json" "$work/megatron.jsonl" <<'EOF'
import json, struct, sys
scalars = {tag: {int(s): v for s, v in by_step.items()}
           for tag, by_step in json.load(open(sys.argv[1])).items()}
tags = set(scalars)
want = {"lm loss", "learning-rate", "grad-norm", "iteration-time", "tokens-per-second", "mfu",
        "hfu", "mem-max-allocated-bytes", "skipped-iterations", "lm loss validation"}
assert want <= tags, f"missing {sorted(want - tags)}"
f32 = lambda x: struct.unpack("f", struct.pack("f", x))[0]
rows = [json.loads(l) for l in open(sys.argv[2])]
steps = {r["step"]: r for r in rows if r.get("type") == "step"}
loss = scalars["lm loss"]
assert sorted(loss) == list(range(1, 15)), sorted(loss)  # both runs' files, steps 1-14
for s, r in steps.items():
    assert loss[s] == f32(r["loss"]), (s, loss[s], r["loss"])
    for tag, key in (("learning-rate", "lr"), ("grad-norm", "grad_norm")):
        assert scalars[tag][s] == f32(r[key]), (tag, s, scalars[tag][s], r[key])
valid = sorted(scalars["lm loss validation"])
assert valid == [6, 12, 14], valid
print(f"{len(tags)} scalars, 'lm loss' at steps 1-14 equal to --metrics-jsonl's, validation at {valid}")
EOF
); then pass "TensorBoard reads the event files: $verdict"
else flunk "TensorBoard's reader: $verdict"; fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
