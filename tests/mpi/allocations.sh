#!/usr/bin/env bash
# tests/mpi/allocations.sh: no allocation inside a step (issue 26). The caching allocator
# (kernels/block_cache.h) makes every buffer once, in the first step; each step after reuses
# the freed blocks, so --metrics-jsonl's "fresh_allocations" is 0 from step 2 on (and above 0
# at step 1), while the ledger still equals the plan (the memory table: the ledger counts the
# bytes asked for, not the blocks). Dense and MoE (whose experts' rows change every step), one
# rank and two (dp 2 with ZeRO-2, whose buckets come and go; tp 2 with sequence parallelism;
# pp 2), and the time table's measured phases are present on rank 0.
#
#   bash tests/mpi/allocations.sh ./trainer [filter]
source "$(dirname "$0")/lib.sh"

no_fresh() {  # NAME RANKS FLAGS...
  local name=$1 np=$2 result=""; shift 2
  case "$name" in *"$filter"*) ;; *) return ;; esac
  if run "$name" "$np" "$@" --train-iters 4 --lr-warmup-iters 0 --hardware cpu &&
     result=$(python3 - "$work/$name.jsonl" <<'PY'
import json, sys
steps = [r for r in map(json.loads, open(sys.argv[1])) if r.get("type") == "step"]
fresh = [r["fresh_allocations"] for r in steps]
assert len(steps) == 4 and fresh[0] > 0 and fresh[1:] == [0, 0, 0], fresh
for r in steps:  # the ledger equals the plan, every category, every step
    for c, m in r["memory"].items():
        if c != "activations" and isinstance(m, dict) and "predicted" in m:
            assert m["measured"] == m["predicted"], (r["step"], c, m)
t = steps[-1]["time"]
assert all("measured" in t[k] for k in ("gemm_s", "memory_s", "optimizer_s")), t
print("fresh blocks per step %s (step 1: %.1f MiB), reused %d" %
      (fresh, steps[0]["fresh_allocation_bytes"] / 2**20, steps[-1]["reused_allocations"]))
PY
     ); then
    passed=$((passed + 1)); echo "ok    $name: $result"
  else
    failed=$((failed + 1)); echo "FAIL  $name: ${result:-run failed}"; tail -5 "$work/$name.log"
  fi
}

tiny=(--config configs/models/tiny.toml --micro-batch-size 2)
no_fresh dense-1rank 1 "${tiny[@]}" --global-batch-size 4
no_fresh dense-bf16 1 "${tiny[@]}" --global-batch-size 4 --bf16
no_fresh moe-1rank 1 --config configs/models/tiny-moe.toml --micro-batch-size 2 --global-batch-size 4
no_fresh dp2-zero2 2 "${tiny[@]}" --global-batch-size 4 --zero-stage 2
no_fresh tp2-sp 2 "${tiny[@]}" --global-batch-size 2 --tp 2 --sequence-parallel
no_fresh pp2 2 "${tiny[@]}" --global-batch-size 8 --pp 2
finish
