#!/usr/bin/env bash
# `trainer --benchmark` (app/benchmark.h) on 1 and 2 ranks with small buffers (--benchmark-max-mib
# 1: a few seconds a run). Checks the invariants of its --json, not its timings (bench/README:
# tests assert no time): every collective row's busbw = algbw x the nccl-tests bus factor of
# its operation and group size, algbw = bytes / time, every time > 0, the efficiencies in
# (0, 1.5], the tables complete (every operation at every size 1 KiB x 4^k <= 1 MiB, one
# group of 2); the FP8 GEMM rows (the CPU twin's, per tensor and block-scaled, at fp32's sizes)
# and their best rates; that the text report prints the tables, the FP8 line and a verdict on
# the ranks; and that the profile --benchmark-save writes loads: `--plan --hardware FILE` exits 0.
#
# usage: tests/mpi/benchmark.sh ./trainer [filter]   (filter: substring of a case name)
source "$(dirname "$0")/lib.sh"  # trainer, filter, work, finish
trainer=$(realpath "$trainer")
cd "$here/../.."  # configs/hardware and configs/models are read from the repository root
small="--benchmark --benchmark-max-mib 1"

launch() {  # ranks, trainer flags...
  local np=$1; shift
  if [ "$np" -gt 1 ]; then timeout 120 mpirun -np "$np" "$trainer" "$@"
  else timeout 120 "$trainer" "$@"; fi
}

json_case() {  # name, ranks
  local name=$1 np=$2 ok=1
  case "$name" in *"$filter"*) ;; *) return ;; esac
  launch "$np" $small --json --benchmark-save "$work/$name.toml" \
    > "$work/$name.json" 2> "$work/$name.err" < /dev/null || ok=0
  [ $ok = 1 ] && { python3 - "$work/$name.json" "$np" > "$work/$name.check" 2>&1 <<'PY' || ok=0
import json, sys
r, n = json.load(open(sys.argv[1])), int(sys.argv[2])
def factor(op, g):  # nccl-tests PERFORMANCE.md, as measure/comm_stats.h
    return {"all-reduce": 2 * (g - 1) / g, "send/recv": 1.0}.get(op, (g - 1) / g)
assert r["ranks"] == n and len(r["per_rank"]) == n and len(r["hosts"]) == n, "ranks"
for key, value in (("gemm", r["gemm_efficiency"]), ("memory", r["memory"]["memory_efficiency"]),
                   ("attention", r["attention"]["attention_efficiency"])):
    assert 0 < value <= 1.5, (key, value)
assert r["launch_overhead_us"] > 0 and r["memory"]["bandwidth_gbs"] > 0
assert r["attention"]["flops"] > 0 and r["attention"]["time_us"] > 0
assert r["gemm"] and all(g["time_us"] > 0 and g["tflops"] > 0 for g in r["gemm"]), r["gemm"]
assert r["gemm_half_gflop"] >= 0 and r["peak_tflops"] > 0
# FP8 at fp32's sizes on the CPU (the twin), both kinds of factors; the best rates are the rows'
for dtype, key in (("fp8", "fp8_best_tflops"), ("fp8-blk", "fp8_blocks_best_tflops")):
    sizes = [g["n"] for g in r["gemm"] if g["dtype"] == dtype]
    assert sizes and sizes == [g["n"] for g in r["gemm"] if g["dtype"] == "fp32"][:len(sizes)]
    assert abs(r[key] - max(g["tflops"] for g in r["gemm"] if g["dtype"] == dtype)) < 1e-12, key
assert r["compute_capability"] == 0
rows = r["collectives"]
sizes = [1024 * 4**k for k in range(6)]  # 1 KiB .. 1 MiB
ops = ["all-reduce", "all-gather", "reduce-scatter", "all-to-all", "send/recv"]
want = [(op, g) for g in ([] if n == 1 else [n]) for op in ops]
assert sorted({(c["op"], c["group_size"]) for c in rows}) == sorted(want), rows
assert len(rows) == len(want) * len(sizes), len(rows)
for c in rows:
    f = factor(c["op"], c["group_size"])
    assert c["time_us"] > 0, c
    assert abs(c["bus_factor"] - f) < 1e-12, c
    assert abs(c["algbw_gbs"] - c["bytes"] / c["time_us"] / 1e3) <= 1e-9 * c["algbw_gbs"], c
    assert abs(c["busbw_gbs"] - c["algbw_gbs"] * f) <= 1e-9 * max(c["busbw_gbs"], 1e-30), c
    assert c["in_node"], c  # one machine
print(f"{len(r['gemm'])} GEMM sizes, {len(rows)} collective rows, "
      f"gemm_efficiency {r['gemm_efficiency']:.3f}")
PY
  }
  # the saved profile loads where --hardware reads one
  if [ $ok = 1 ] && ! "$trainer" --config configs/models/tiny.toml --plan \
       --hardware "$work/$name.toml" > "$work/$name.plan" 2>&1; then
    ok=0; cp "$work/$name.plan" "$work/$name.check"
  fi
  if [ $ok = 1 ]; then
    passed=$((passed + 1)); echo "ok    $name: $(tail -1 "$work/$name.check")"
  else
    failed=$((failed + 1)); echo "FAIL  $name"
    tail -5 "$work/$name.err"; tail -20 "$work/$name.check" 2>/dev/null
  fi
}

text_case() {  # name, ranks: the tables and the ranks' verdict, on rank 0 only
  local name=$1 np=$2 log="$work/$1.log"
  case "$name" in *"$filter"*) ;; *) return ;; esac
  if launch "$np" $small > "$log" 2>&1 < /dev/null &&
     [ "$(grep -c '^paralab --benchmark:' "$log")" = 1 ] &&
     grep -q '^all-reduce, group of 2 ranks (0-1, one node)' "$log" &&
     grep -q 'busbw GB/s' "$log" && grep -q '^send/recv, group of 2 ranks' "$log" &&
     grep -q '^FP8 GEMM (e4m3 x e4m3 into bf16; the CPU twin' "$log" &&
     grep -Eq '^all ranks within 0.7x of the median|a bad node\?$' "$log"; then
    passed=$((passed + 1)); echo "ok    $name"
  else
    failed=$((failed + 1)); echo "FAIL  $name"; tail -20 "$log"
  fi
}

json_case "json-np1" 1
json_case "json-np2" 2
text_case "text-np2" 2
finish
