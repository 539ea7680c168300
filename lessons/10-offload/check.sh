#!/usr/bin/env bash
# lessons/10-offload/check.sh: asserts the numbers of lessons/10-offload/README.md.
#   bash lessons/10-offload/check.sh [TRAINER]     (default: the repository's ./trainer)
# Part 1 plans Llama-70B on 8 RTX 3090s with ZeRO-3 and both offloads (configs/hardware/
# rtx3090.toml): each GPU's peak, the host bytes per rank and per node against the node's RAM,
# what would fit. Part 2 prints the projected step with and without offload (times are
# printed, never asserted). Part 3 measures the communication multiple against DDP on CPU
# ranks (lessons/10-offload/model.toml, mpirun -np 2: the pcie rows beside the dp rows,
# measured == predicted) and plans it at 70B, against the closed form k(1 + g)/2 x n/(n - 1).
# Prints "N passed, M failed" last; exits non-zero on a failure.
source "$(dirname "$0")/../lib.sh"  # trainer, root, work, give_up
command -v mpirun >/dev/null || give_up "mpirun not found (apt-get install mpich)"

fail_run() { echo "FAIL  trainer $*: see $work"; echo "0 passed, 1 failed"; trap - EXIT; exit 1; }
llama70=(--config configs/models/llama-70b.toml --plan --json --world-size 8 --hardware rtx3090
         --overlap-grad-reduce)
full=(--recompute-granularity full --recompute-method uniform --recompute-num-layers 1)
plan() {  # NAME FLAGS...: --plan --json into $work/NAME.json
  local name=$1; shift
  "$trainer" "$@" > "$work/$name.json" 2> "$work/$name.err" || fail_run "$@"
}
# Part 1: the course's claim, one 4096-token sequence per GPU
plan offload     "${llama70[@]}" --global-batch-size 8 --zero-stage 3 --offload-params "${full[@]}"
plan offload_nr  "${llama70[@]}" --global-batch-size 8 --zero-stage 3 --offload-params
plan zero3       "${llama70[@]}" --global-batch-size 8 --zero-stage 3 "${full[@]}"
plan ddp         "${llama70[@]}" --global-batch-size 8 --zero-stage 0 "${full[@]}"
plan llama7      --config configs/models/llama-7b.toml --plan --json --world-size 8 \
  --hardware rtx3090 --overlap-grad-reduce --global-batch-size 8 --zero-stage 3 \
  --offload-params "${full[@]}"
# Part 3: the multiple at scale, by microbatches per rank and recompute
for k in 1 2 4; do
  plan "multiple_k${k}_full" "${llama70[@]}" --global-batch-size $((8 * k)) --zero-stage 3 --offload-params "${full[@]}"
  plan "multiple_k${k}"      "${llama70[@]}" --global-batch-size $((8 * k)) --zero-stage 3 --offload-params
done
plan multiple_ddp_k4 "${llama70[@]}" --global-batch-size 32 --zero-stage 0
# Part 3: measured on CPU ranks
runs=("ddp:--zero-stage 0" "zero3:--zero-stage 3" "zero3_offload:--zero-stage 3 --offload-params"
      "zero2_offload:--zero-stage 2 --optimizer-cpu-offload")
for r in "${runs[@]}"; do
  name=${r%%:*}
  # shellcheck disable=SC2086
  mpirun -np 2 "$trainer" --config lessons/10-offload/model.toml ${r#*:} \
    --metrics-jsonl "$work/run_$name.jsonl" > "$work/run_$name.log" 2>&1 ||
    fail_run "mpirun -np 2 ${r#*:}"
done

python3 - "$work" <<'EOF'
import json, os, sys
work = sys.argv[1]
sys.path.insert(0, "lessons")  # the repository root is the working directory (lib.sh)
from checks import check, finish  # noqa: E402

def load(name):
    return json.load(open(os.path.join(work, name + ".json")))
GiB = 1 << 30

print("part 1: Llama-70B on 8 RTX 3090s (24 GB), ZeRO-3 + offload_optimizer + offload_param")
L, h, f, V, g, d = 80, 8192, 28672, 32000, 8, 128
layer = 2 * h + h * (64 + 2 * g) * d + 64 * d * h + 3 * h * f  # norms, qkv, proj, SwiGLU
psi = L * layer + 2 * V * h + h
p = load("offload")
check("Psi = L(2h + h(a + 2g)d + a d h + 3hf) + 2Vh + h", p["params"]["total"], psi)
S = p["params"]["zero_shard"]
check("shard S = Psi / 8 (every unit divides by 8: no padding)", S, psi // 8)
mem = p["memory"][0]
check("device: no parameter or gradient shard, no master, no Adam state",
      (mem["resident"]["params"], mem["resident"]["grads"], mem["master_params"],
       mem["optimizer_states"]), (0, 0, 0, 0))
check("device: gathered units = 2 layers (the one in use, the prefetched) x 2 B",
      mem["params"], 2 * 2 * layer)
check("device: gradient buffers = 2 layers' buckets (one reducing while the next fills, "
      "--overlap-grad-reduce) x 2 B", mem["grads"], 2 * 2 * layer)
peak = p["fit"]["peak_bytes"]
check("device peak with full recompute fits 24 GiB (%.2f GiB)" % (peak / GiB),
      (p["fit"]["fits"], peak < 24 * GiB), (True, True))
nr = load("offload_nr")
check("without recompute it does not: 80 layers' activations (%.1f GiB)" % (nr["fit"]["peak_bytes"] / GiB),
      nr["fit"]["fits"], False)
N = 4096  # tokens of the microbatch: bf16 tensors of 6 x h, k and v of g d, fc1 2f and its
# SwiGLU f wide (2 bytes each), and fp32 flash lse (a per token) and two RMSNorm statistics
check("the activations of one layer, 2N(6h + 2gd + 3f) + 4N(a + 2) = 1,125,154,816 B",
      nr["activations"]["per_layer_bytes"], 2 * N * (6 * h + 2 * g * d + 3 * f) + 4 * N * (64 + 2))
host = mem["host"]
landing = layer // 8  # the largest slice: a layer's
check("host per rank: params 2S, grads 2S + a landing slice, master 4S, m v 8S",
      (host["params"], host["grads"], host["master_params"], host["optimizer_states"]),
      (2 * S, 2 * (S + landing), 4 * S, 8 * S))
check("host per rank = 16 S + 2 x one layer's slice", host["total"], 16 * S + 2 * landing)
node = p["fit"]["host"]["node_bytes"]
check("node: 8 ranks x host per rank = %.3f TB (16 bytes x Psi = %.3f TB)" % (node / 1e12, 16 * psi / 1e12),
      node, 8 * host["total"])
check("node RAM (rtx3090.toml, assumed 256 GiB) does not hold it",
      (p["fit"]["host"]["fits"], p["fit"]["host"]["capacity_bytes"]), (False, 256 * GiB))
print("      what would: %.0f GiB of RAM (a 1.5 TB server), or NVMe (ZeRO-Infinity), or a model of"
      " at most 256 GiB / 16 B = %.1fB parameters" % (node / GiB, 256 * GiB / 16 / 1e9))
s7 = load("llama7")
check("Llama-7B, same flags: the node's host bytes fit 256 GiB (%.1f GiB)" % (s7["fit"]["host"]["node_bytes"] / GiB),
      (s7["fit"]["host"]["fits"], s7["fit"]["fits"]), (True, True))

print("part 2: the projected step (printed, not asserted)")
t, t3 = p["time"], load("zero3")["time"]
print("      ZeRO-3 + offload: %.1f s (host AdamW %.1f s, exposed PCIe %.2f s); ZeRO-3 on 3090s with"
      " the memory to hold it: %.1f s; x%.2f" % (t["step_s"], t["host_optimizer_s"],
      t["exposed_pcie_s"], t3["step_s"], t["step_s"] / t3["step_s"]))

print("part 3: communication against DDP, bytes per step and rank")
def rows(plan):
    return {(c["group"], c["op"]): c for c in plan["comm"]}
def net(plan):  # dp bus bytes of the model's collectives (the 4-byte norm aside)
    return sum(c["bus_bytes"] for (g, op), c in rows(plan).items()
               if g == "dp" and op in ("all-reduce", "reduce-scatter", "all-gather") and c["payload_bytes"] > 4)
def pcie(plan):
    return sum(c["bus_bytes"] for (g, _), c in rows(plan).items() if g == "pcie")

runs = {}
for name in ("ddp", "zero3", "zero3_offload", "zero2_offload"):
    steps = [json.loads(l) for l in open(os.path.join(work, "run_%s.jsonl" % name)) if l.strip()]
    steps = [s for s in steps if s.get("type") == "step"]
    bad = []
    for s in steps:
        for c in s["comm"]:
            for key in ("calls", "payload_bytes", "bus_bytes"):
                if c[key]["measured"] != c[key]["predicted"]:
                    bad.append("step %d %s %s %s" % (s["step"], c["group"], c["op"], key))
        for cat, v in s.get("host_memory", {}).items():
            if v["measured"] != v["predicted"]:
                bad.append("step %d host %s" % (s["step"], cat))
        for cat, v in s["memory"].items():
            if cat not in ("total", "activations") and v["measured"] != v["predicted"]:
                bad.append("step %d %s" % (s["step"], cat))
    check("%s: every collective, the pcie rows and the host memory measured == predicted" % name, bad, [])
    runs[name] = {k: v for k, v in ((k, c) for k, c in
                  (((c["group"], c["op"]), c) for c in steps[-1]["comm"]))}
def measured(name, group, ops=None):
    return sum(c["bus_bytes"]["measured"] for (g, op), c in runs[name].items()
               if g == group and (ops is None or op in ops) and c["payload_bytes"]["measured"] > 4)
psi_tiny = 1627392
ddp = measured("ddp", "dp")
check("DDP: all-reduce bus = 2 x 4 Psi x 1/2 = 4 Psi", ddp, 4 * psi_tiny)
z3, z3p = measured("zero3", "dp"), measured("zero3_offload", "pcie")
check("ZeRO-3: reduce-scatter + 2 gathers = 1.5 x DDP (k = 1, g = 2)", z3 / ddp, 1.5)
check("ZeRO-3 + offload_param: the network unchanged", measured("zero3_offload", "dp"), z3)
check("ZeRO-3 + offload_param: PCIe down 4S (S = Psi/2), up 2 gathers x 4S", z3p, 3 * 4 * psi_tiny // 2)
check("ZeRO-3 + offload, network + PCIe = 3.0 x DDP at n = 2: k(1 + g)/2 x n/(n - 1)",
      (z3 + z3p) / ddp, 3.0)
z2, z2p = measured("zero2_offload", "dp"), measured("zero2_offload", "pcie")
check("ZeRO-2 + offload_optimizer (ZeRO-Offload): network = DDP's, PCIe 2 x 4S = DDP's",
      (z2 / ddp, z2p / ddp), (1.0, 1.0))

print("      planned at 70B, n = 8 (g: gathers per unit and microbatch, 3 with full recompute):")
print("      %-22s %8s %8s %8s %10s" % ("", "network", "+ PCIe", "formula", "PCIe share"))
ddp70 = net(load("ddp"))
check("70B DDP: all-reduce bus = 2 x 2 Psi x 7/8", ddp70, 2 * 2 * psi * 7 // 8)
for k in (1, 2, 4):
    for recompute, gathers in (("", 2), ("_full", 3)):
        q = load("multiple_k%d%s" % (k, recompute))
        n_, pc = net(q), pcie(q)
        formula = k * (1 + gathers) / 2 * 8 / 7
        print("      k %d, g %d%-12s %8.3f %8.3f %8.3f %9.1f%%" % (
            k, gathers, " (recompute)" if gathers == 3 else "", n_ / ddp70, (n_ + pc) / ddp70,
            formula, 100 * pc / (n_ + pc)))
        # the closed form counts every unit g times; the head is gathered once for its
        # forward and backward together (lesson 02), one 2Vh fewer per microbatch and pass
        check("k %d g %d: (network + PCIe) / DDP within 2%% of k(1 + g)/2 x n/(n - 1)" % (k, gathers),
              (n_ + pc) / ddp70, formula, 0.02)
q = load("multiple_k4")
check("accumulation: DDP reduces once a step, whatever k (k = 4: the same bytes)",
      net(load("multiple_ddp_k4")), ddp70)
finish()
EOF
