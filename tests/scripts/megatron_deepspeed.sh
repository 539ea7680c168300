#!/usr/bin/env bash
# tests/scripts/megatron_deepspeed.sh: a Megatron-DeepSpeed launch line as a user pastes it --
# a Llama model's Megatron flags, its parallelism and schedule, a --data-path blend of two
# indexed datasets written by megatron-core's own IndexedDatasetBuilder, and --deepspeed
# --deepspeed_config with a realistic ds_config.json (the batch triad with "auto", ZeRO stage 1
# and then 2 with CPU offload and small reduce buckets, bf16, gradient clipping, optimizer and
# scheduler blocks) -- shrunk only in model size and step count, trained on 2 ranks. It holds:
#   - the run exits 0 with a header naming the config's ZeRO stage and bf16, and says on its
#     warning lines which flags and keys have no effect here;
#   - every step's memory ledger and communication (calls and bytes per group and operation:
#     the reduce buckets' count follows reduce_bucket_size) equal the plan's
#     (tests/mpi/compare_runs.py's ledger check);
#   - its losses are bitwise those of the same run spelt with paralab's own flags (the config's
#     keys had DeepSpeed's meanings);
#   - `--plan` with the same line prints the config's effective values and their sources.
# docs/deepspeed.md shows the same line. Needs megatron-core (build/hf-venv, as
# tests/scripts/megatron_data.sh) and mpirun.
# Usage: bash tests/scripts/megatron_deepspeed.sh ./trainer
set -uo pipefail
trainer=$(realpath "${1:?usage: tests/scripts/megatron_deepspeed.sh ./trainer}")
cd "$(dirname "$0")/../.."
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OPENBLAS_NUM_THREADS=1
passed=0; failed=0
pass() { passed=$((passed + 1)); echo "ok    $1"; }
flunk() { failed=$((failed + 1)); echo "FAIL  $1"; }
source "$(dirname "$0")/../test_python.sh"  # python: the test venv's
if ! "$python" -c 'import megatron.core.datasets.indexed_dataset' 2>/dev/null; then
  echo "megatron-core does not import in $python"; echo "0 passed, 1 failed"; exit 1
fi

# The data, as tools/preprocess_data.py writes it (megatron-core's builder, uint16 tokens,
# documents of a few sequences), and a Hugging Face tokenizer.json of 512 tokens.
"$python" - "$work" <<'EOF' 2> "$work/python.log"
import json, os, sys, numpy, torch
from megatron.core.datasets.indexed_dataset import IndexedDatasetBuilder
work = sys.argv[1]
for name, seed, documents in (("web", 1, 300), ("books", 2, 120)):
    rng = numpy.random.default_rng(seed)
    builder = IndexedDatasetBuilder(os.path.join(work, f"{name}_text_document.bin"), dtype=numpy.uint16)
    for _ in range(documents):
        lengths = rng.integers(8, 120, size=rng.integers(1, 3)).tolist()
        builder.add_document(torch.from_numpy(rng.integers(0, 512, size=sum(lengths))), lengths)
    builder.finalize(os.path.join(work, f"{name}_text_document.idx"))
os.makedirs(os.path.join(work, "tokenizer"))
vocab = {f"<0x{i:03X}>": i for i in range(512)}
json.dump({"version": "1.0", "added_tokens": [], "model": {"type": "BPE", "vocab": vocab, "merges": []}},
          open(os.path.join(work, "tokenizer", "tokenizer.json"), "w"))
EOF
[ -s "$work/web_text_document.idx" ] || { flunk "megatron-core wrote no data"; tail -3 "$work/python.log"; }

ds_config() {  # the ZeRO stage
  cat <<EOF
{
  "train_batch_size": "auto",
  "train_micro_batch_size_per_gpu": 2,
  "gradient_accumulation_steps": "auto",
  "steps_per_print": 1,
  "gradient_clipping": 1.0,
  "zero_optimization": {
    "stage": $1,
    "allgather_partitions": true,
    "allgather_bucket_size": 2e4,
    "reduce_scatter": true,
    "reduce_bucket_size": 2e4,
    "overlap_comm": true,
    "contiguous_gradients": true,
    "offload_optimizer": {"device": "cpu", "pin_memory": true}
  },
  "bf16": {"enabled": true},
  "fp16": {"enabled": false, "loss_scale": 0, "loss_scale_window": 500, "hysteresis": 2,
           "min_loss_scale": 1, "initial_scale_power": 12},
  "optimizer": {"type": "AdamW", "params": {"lr": 3e-4, "betas": [0.9, 0.95], "eps": 1e-8,
                                            "weight_decay": 0.1}},
  "scheduler": {"type": "WarmupDecayLR",
                "params": {"warmup_min_lr": 0, "warmup_max_lr": 3e-4, "warmup_num_steps": 2,
                           "total_num_steps": 6, "warmup_type": "linear"}},
  "wall_clock_breakdown": false
}
EOF
}

DATA_PATH="0.3 $work/web_text_document 0.7 $work/books_text_document"
for stage in 1 2; do
  ds_config "$stage" > "$work/ds_config_$stage.json"
  # ---- a Megatron-DeepSpeed pretrain_llama2_distributed.sh launch line, shrunk ----
  launch=(
    --tensor-model-parallel-size 1 --pipeline-model-parallel-size 1 --no-pipeline-parallel
    --num-layers 2 --hidden-size 64 --ffn-hidden-size 172 --num-attention-heads 4
    --group-query-attention --num-query-groups 2
    --micro-batch-size 2 --global-batch-size 8 --seq-length 32 --max-position-embeddings 32
    --train-iters 6 --lr 3e-4 --lr-decay-style cosine --min-lr 3e-5 --lr-warmup-iters 2
    --weight-decay 0.1 --clip-grad 1.0 --optimizer adam --adam-beta1 0.9 --adam-beta2 0.95
    --log-interval 1 --eval-iters 2 --eval-interval 3
    --data-path $DATA_PATH --data-impl mmap --split 949,50,1
    --tokenizer-type HuggingFaceTokenizer --tokenizer-model "$work/tokenizer"
    --bf16 --attention-dropout 0 --hidden-dropout 0 --no-query-key-layer-scaling
    --use-rotary-position-embeddings --untie-embeddings-and-output-weights --swiglu
    --normalization RMSNorm --disable-bias-linear --use-flash-attn-v2 --seed 1234
    --distributed-backend nccl
    --deepspeed --deepspeed_config "$work/ds_config_$stage.json" --zero-stage "$stage"
    --deepspeed-activation-checkpointing
  )
  # ---- end of the launch line ----
  timeout 300 mpirun -np 2 "$trainer" "${launch[@]}" --metrics-jsonl "$work/ds$stage.jsonl" \
    > "$work/ds$stage.log" 2> "$work/ds$stage.err" < /dev/null
  status=$?
  if [ "$status" = 0 ] && grep -q "zero $stage | cpu bf16" "$work/ds$stage.log" &&
     grep -q "^paralab: warning: Megatron flags with no effect in paralab: .*--data-impl" "$work/ds$stage.err" &&
     grep -q "^paralab: warning: DeepSpeed config keys with no effect in paralab: .*optimizer" "$work/ds$stage.err" &&
     [ "$(grep -c "validation loss at" "$work/ds$stage.log")" = 2 ]; then
    pass "stage $stage: the launch line runs as pasted on 2 ranks (zero $stage, bf16, CPU offload), validated twice, the no-effect flags and keys named"
  else
    flunk "stage $stage: exit $status"; head -5 "$work/ds$stage.err"; tail -3 "$work/ds$stage.log"
  fi
  if verdict=$(python3 - "$work/ds$stage.jsonl" <<'EOF'
import json, math, sys
sys.path.insert(0, "tests/mpi")
from compare_runs import ledger_problems, records
problems = ledger_problems(sys.argv[1])
assert not problems, problems[:3]
rows = records(sys.argv[1])
assert len(rows) == 6 and all(math.isfinite(r["loss"]) for r in rows), len(rows)
rs = [c for c in rows[0]["comm"] if c["op"] == "reduce-scatter"]
assert rs and rs[0]["calls"]["measured"] > 1, rs
print(f"6 steps, every ledger and comm row == plan ({rs[0]['calls']['measured']} reduce-scatter calls a step from 2e4-element buckets)")
EOF
  ); then pass "stage $stage: $verdict"; else flunk "stage $stage: $verdict"; fi
  # the same run in paralab's own spelling: the config's keys had DeepSpeed's meanings
  timeout 300 mpirun -np 2 "$trainer" --arch llama --num-layers 2 --hidden-size 64 --ffn-hidden-size 172 \
    --num-attention-heads 4 --num-query-groups 2 --micro-batch-size 2 --global-batch-size 8 \
    --seq-length 32 --train-iters 6 --lr 3e-4 --lr-decay-style cosine --min-lr 3e-5 \
    --lr-warmup-iters 2 --weight-decay 0.1 --clip-grad 1.0 --adam-beta1 0.9 --adam-beta2 0.95 \
    --log-interval 1 --eval-iters 2 --eval-interval 3 --data-path $DATA_PATH --split 949,50,1 \
    --vocab-size 512 --bf16 --seed 1234 --zero-stage "$stage" --ddp-bucket-size 20000 \
    --overlap-grad-reduce --optimizer-cpu-offload --offload-pin-memory \
    --metrics-jsonl "$work/own$stage.jsonl" > "$work/own$stage.log" 2>&1 < /dev/null ||
    flunk "stage $stage, paralab's spelling: exit $?"
  if verdict=$(python3 - "$work/ds$stage.jsonl" "$work/own$stage.jsonl" <<'EOF'
import json, sys
def losses(path):
    return [(r["step"], r["loss"], r["lr"]) for r in map(json.loads, open(path)) if r.get("type") == "step"]
a, b = losses(sys.argv[1]), losses(sys.argv[2])
assert len(a) == 6 and a == b, f"{a[:2]} vs {b[:2]}"
print(f"6 steps, losses and learning rates bitwise equal (step 6 loss {a[-1][1]:.4f})")
EOF
  ); then pass "stage $stage: the launch line == paralab's spelling: $verdict"
  else flunk "stage $stage: the launch line != paralab's spelling: $verdict"; fi
done

# --plan of the same line: the config's effective values beside their sources
"$trainer" "${launch[@]}" --plan --world-size 2 > "$work/plan.txt" 2>/dev/null
if grep -q "^deepspeed config .*ds_config_2.json" "$work/plan.txt" &&
   grep -Eq "^  train_batch_size +8 +\"auto\": --global-batch-size" "$work/plan.txt" &&
   grep -Eq "^  zero_optimization.reduce_bucket_size +20000 +JSON" "$work/plan.txt"; then
  pass "--plan prints the config's effective values and their sources"
else
  flunk "--plan's config table"; grep -A12 "^deepspeed config" "$work/plan.txt"
fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
