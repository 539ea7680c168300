#!/usr/bin/env bash
# Korthikanti et al. 2022, Table 2, measured: run the configuration the paper assumes (gpt,
# hidden and attention dropout, naive attention, 16-bit activations: --bf16) under tensor
# parallelism with and without sequence parallelism, and hold three numbers equal:
#   the activation bytes the ledger measured per layer (the run's peak of category
#   activations, minus the embedding's and the head's tensors, over L layers),
#   the plan's per-layer bytes, and
#   the paper's closed form sbh(10 + 24/t + 5as/(ht)) (tp) or sbh(34/t + 5as/(ht)) (tp + sp)
#   plus the norm statistics, which the paper does not count (fp32 mean and rstd).
# With --recompute-granularity selective (core_attn) the closed form is the selective row,
# 34sbh, sbh(10 + 24/t) or 34sbh/t: the 5as/h term is recomputed, not kept.
# usage: tests/mpi/korthikanti.sh ./trainer
set -uo pipefail
trainer=${1:?usage: korthikanti.sh ./trainer}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OPENBLAS_NUM_THREADS=1
model="--arch gpt --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32 \
  --vocab-size 256 --attention naive --bf16 --hidden-dropout 0.1 --attention-dropout 0.1 \
  --micro-batch-size 2 --train-iters 1 --peak-tflops 1"
passed=0; failed=0
for case in "1" "2" "2 --sequence-parallel" "4" "4 --sequence-parallel" \
            "1 --recompute-granularity selective" \
            "2 --sequence-parallel --recompute-granularity selective"; do
  set -- $case
  t=$1; shift
  name="tp$t"
  [[ " $* " == *" --sequence-parallel "* ]] && name+="-sp"
  [[ " $* " == *" selective "* ]] && name+="-selective"
  launch=("$trainer")
  [ "$t" -gt 1 ] && launch=(timeout 120 mpirun -np "$t" "$trainer")
  if ! "${launch[@]}" $model --tp "$t" "$@" --metrics-jsonl "$work/$name.jsonl" > "$work/$name.log" 2>&1 \
     || ! "$trainer" $model --tp "$t" "$@" --plan --json --world-size "$t" > "$work/$name.json" 2>&1; then
    failed=$((failed + 1)); echo "FAIL  $name: run failed"; tail -3 "$work/$name.log"; continue
  fi
  if python3 - "$work/$name.jsonl" "$work/$name.json" "$name" <<'PY'
import json, sys
run = json.loads(open(sys.argv[1]).readline())
plan = json.load(open(sys.argv[2]))
act = plan["activations"]
k = act["korthikanti"]
layers = plan["model"]["num_layers"]
outside = sum(t["bytes"] for t in act["embedding"]) + sum(t["bytes"] for t in act["head"])
measured = (run["memory"]["activations"]["measured"] - outside) / layers
ok = (k["applicable"] and measured == act["per_layer_bytes"]
      and k["plan_bytes"] == k["closed_form_bytes"]
      and act["per_layer_bytes"] == k["closed_form_bytes"] + k["norm_statistics_bytes"])
print(f"{'ok  ' if ok else 'FAIL'}  {sys.argv[3]}: measured {measured:.0f} B/layer, plan "
      f"{act['per_layer_bytes']}, {k['formula']} = {k['closed_form_bytes']} + norm statistics "
      f"{k['norm_statistics_bytes']}")
sys.exit(0 if ok else 1)
PY
  then passed=$((passed + 1)); else failed=$((failed + 1)); fi
done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
