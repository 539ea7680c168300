#!/usr/bin/env bash
# bench/gpu/offload.sh: CPU offload on one GPU, in one call (issue 29). NOT YET RUN: written
# without a GPU at hand; the first session with one runs it and records the output in
# notes/performance.md ("CPU offload on a GPU").
#
#   bash bench/gpu/offload.sh [TRAINER]            (default ./trainer; needs --device cuda)
#   STEPS=6 MODEL=llama-100m SEQ=1024 bash bench/gpu/offload.sh
#   DEVICE=cpu MODEL=tiny SEQ=64 bash bench/gpu/offload.sh   (a dry run of the script itself)
#
# 1. The link: `trainer --benchmark` on the GPU, whose offload line is the copies between the
#    device and pinned host memory (64 MiB each way), one 4-byte copy (the latency) and the
#    host AdamW's rate on one thread; --benchmark-save writes them into a profile, which the
#    runs below project with (pcie_gbs, pcie_latency_us, host_adam_params_per_s measured).
# 2. The step: MODEL (bf16, one rank, STEPS steps) without offload, with
#    --optimizer-cpu-offload (pinned, then --no-offload-pin-memory), with half of it
#    (--optimizer-offload-fraction 0.5), and at ZeRO-3 with --offload-params; for each, rank
#    0's medians after the first step: measured step beside the projection, the host AdamW
#    and the exposed pcie time measured beside projected (tests/mpi/time_ratio.py prints the
#    step; the offload columns come from --metrics-jsonl's "time"), the pcie bytes measured
#    == planned.
set -uo pipefail
trainer=${1:-./trainer}
steps=${STEPS:-6}
model=${MODEL:-llama-100m}
seq=${SEQ:-1024}
device=${DEVICE:-cuda}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
nvidia-smi --query-gpu=name,pcie.link.gen.current,pcie.link.width.current,memory.total \
  --format=csv,noheader 2>/dev/null || echo "nvidia-smi: not found"
"$trainer" --device "$device" --benchmark --benchmark-save "$work/gpu.toml" > "$work/bench.log" 2>&1 ||
  { tail -5 "$work/bench.log"; exit 1; }
grep -E "^CPU offload|^memory bandwidth" "$work/bench.log"
grep -E "^(pcie_gbs|pcie_latency_us|host_cores|host_memory_gib|host_adam_params_per_s) " "$work/gpu.toml"

common=(--config "configs/models/$model.toml" --device "$device" --bf16 --seq-length "$seq"
        --micro-batch-size 4 --global-batch-size 4 --train-iters "$steps" --lr-warmup-iters 0
        --log-interval 1000 --report-interval 0 --hardware "$work/gpu.toml")
run() {  # NAME FLAGS...
  local name=$1; shift
  if "$trainer" "${common[@]}" "$@" --metrics-jsonl "$work/$name.jsonl" > "$work/$name.log" 2>&1; then
    python3 - "$work/$name.jsonl" "$name" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
rows = [r for r in rows if r.get("type") == "step"][1:]  # after the first step
def med(f):
    v = [f(r) for r in rows]
    v = [x for x in v if x is not None]
    return statistics.median(v) if v else float("nan")
t = lambda r, k, side: r["time"].get(k, {}).get(side)
def exposed(r, side):
    return sum(e.get(side, 0) for e in r["time"]["exposed_comm_s"] if e["group"] == "pcie")
step_m, step_p = med(lambda r: t(r, "step_s", "measured")), med(lambda r: t(r, "step_s", "projected"))
host_m, host_p = med(lambda r: t(r, "host_optimizer_s", "measured")), med(lambda r: t(r, "host_optimizer_s", "projected"))
pcie_m, pcie_p = med(lambda r: exposed(r, "measured")), med(lambda r: exposed(r, "projected"))
last = rows[-1]
bad = [c["op"] for c in last["comm"] if c["group"] == "pcie" and
       c["payload_bytes"]["measured"] != c["payload_bytes"]["predicted"]]
bad += [k for k, v in last.get("host_memory", {}).items() if v["measured"] != v["predicted"]]
moved = sum(c["payload_bytes"]["measured"] for c in last["comm"] if c["group"] == "pcie")
print(f"{sys.argv[2]:<26} step {step_m*1e3:9.1f} ms (projected {step_p*1e3:9.1f}, ratio {step_p/step_m:5.2f})"
      f"  host AdamW {host_m*1e3:8.1f} ms (proj {host_p*1e3:8.1f})  exposed pcie {pcie_m*1e3:7.1f} ms"
      f" (proj {pcie_p*1e3:7.1f})  pcie {moved/2**20:8.1f} MiB/step  bytes {'== plan' if not bad else 'DIFFER: ' + ','.join(bad)}")
PY
  else
    echo "$name: run failed"; tail -3 "$work/$name.log"
  fi
}
run "no offload"
run "offload, pinned" --optimizer-cpu-offload
run "offload, pageable" --optimizer-cpu-offload --no-offload-pin-memory
run "offload, fraction 0.5" --optimizer-cpu-offload --optimizer-offload-fraction 0.5 \
  --ddp-bucket-size 1000000  # whole buckets go to the host: several, so half is some
run "zero-3, offload params" --zero-stage 3 --offload-params
