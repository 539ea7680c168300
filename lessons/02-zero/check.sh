#!/usr/bin/env bash
# lessons/02-zero/check.sh: asserts the numbers of lessons/02-zero/README.md.
#   bash lessons/02-zero/check.sh [TRAINER]     (default: the repository's ./trainer)
# Part 1 plans GPT-2 124M at dp 2 and 4 for ZeRO stages 0-3 (fp32 and --bf16) and checks
# the per-rank model states and the dp traffic against the closed forms. Part 2 trains
# lessons/02-zero/model.toml for 2 steps under `mpirun -np 2` at every stage and checks
# measured == predicted. Part 3 plans the llama-7b preset at dp 4 for the course's table.
# Then the README itself: every byte count it prints recomputed from those plans and runs.
# Prints "N passed, M failed" last; exits non-zero on a failure.
source "$(dirname "$0")/../lib.sh"  # trainer, root, work, give_up
command -v mpirun >/dev/null || give_up "mpirun not found (apt-get install mpich)"

fail_run() { echo "FAIL  trainer $*: see $work"; echo "0 passed, 1 failed"; trap - EXIT; exit 1; }
# --make-vocab-size-divisible-by 1: the vocabulary as it is (50257 rows), so that the vector
# ZeRO shards is the Psi of the paper (the default pads it to 50304: README, "Psi")
gpt2=(--config configs/models/gpt2-124m.toml --make-vocab-size-divisible-by 1)
for n in 2 4; do
  for z in 0 1 2 3; do
    # one microbatch per rank (global batch 8 x dp): ZeRO section 7's per-step traffic
    for precision in fp32 bf16; do
      flag=(); [ "$precision" = bf16 ] && flag=(--bf16)
      "$trainer" "${gpt2[@]}" "${flag[@]}" --plan --json --world-size "$n" --zero-stage "$z" \
        --global-batch-size $((8 * n)) > "$work/plan_${precision}_dp${n}_z$z.json" ||
        fail_run "--plan --world-size $n --zero-stage $z ${flag[*]}"
    done
  done
done
# the preset's own batch: 512 sequences = 16 microbatches of 8 per rank at dp 4
"$trainer" "${gpt2[@]}" --plan --json --world-size 4 --zero-stage 2 > "$work/plan_accum.json" ||
  fail_run "--plan --world-size 4 --zero-stage 2"
# Part 3: the course's "7B model + Adam on 4 GPUs", one 4096-token sequence per rank
for z in 0 1 2 3; do
  "$trainer" --config configs/models/llama-7b.toml --plan --json --world-size 4 --zero-stage "$z" \
    --global-batch-size 4 > "$work/plan_7b_z$z.json" || fail_run "llama-7b --plan --zero-stage $z"
done
for z in 0 1 2 3; do
  mpirun -np 2 "$trainer" --config lessons/02-zero/model.toml --zero-stage "$z" \
    --metrics-jsonl "$work/run_z$z.jsonl" > "$work/run_z$z.log" 2>&1 ||
    fail_run "mpirun -np 2 --zero-stage $z"
done

python3 - "$work" <<'EOF'
import json, os, sys
work = sys.argv[1]
sys.path.insert(0, "lessons")  # the repository root is the working directory (lib.sh)
from checks import check, finish  # noqa: E402

def load(name):
    return json.load(open(os.path.join(work, name)))

# ZeRO's model-state bytes per rank, Psi parameters, N data-parallel ranks.
def paper(z, psi, n):       # Rajbhandari et al. SC20 Fig. 1: 2 + 2 + K, K = 12 (mixed precision)
    return [16 * psi, 4 * psi + 12 * psi / n, 2 * psi + 14 * psi / n, 16 * psi / n][z]
def paralab_fp32(z, psi, n):  # params 4, grads 4, Adam 8, no master copy
    return [16 * psi, 8 * psi + 8 * psi / n, 4 * psi + 12 * psi / n, 16 * psi / n][z]

# dp traffic of one step, in units of Psi elements per rank: bus bytes (what each rank
# sends, nccl-tests) over 4 bytes x Psi x (n - 1)/n. The 4-byte gradient-norm all-reduce
# of stages >= 1 is not model traffic.
def volume(comm, z, psi, n, elem=4):
    model_ops = ("all-reduce",) if z == 0 else ("reduce-scatter", "all-gather")
    bus = sum(c["bus_bytes"] for c in comm if c["group"] == "dp" and c["op"] in model_ops)
    return bus / (elem * psi * (n - 1) / n)

print("part 1: GPT-2 124M, --plan --json --world-size N --zero-stage z")
for n in (2, 4):
    for z in range(4):
        for precision in ("fp32", "bf16"):
            p = load("plan_%s_dp%d_z%d.json" % (precision, n, z))
            psi = p["params"]["total"]
            mem, dp = p["memory"][0], p["data_parallel"]
            b = 2 if precision == "bf16" else 4
            tag = "%s dp %d stage %d" % (precision, n, z)
            if precision == "fp32":
                check("%s: Psi = 124,439,808, divisible by N (no padding)" % tag,
                      (psi, dp["padded_total"], psi % n), (124439808, psi, 0))
                S = psi // n
                check("%s: shard S = Psi/N" % tag, p["params"]["zero_shard"], S if z else psi)
                check("%s: params = 4 x (Psi, or S + gathered units at stage 3)" % tag,
                      mem["params"], 4 * (psi if z < 3 else S + dp["params_transient_peak"]))
                check("%s: grads = 4 x (Psi, or S + live bucket buffers at stages 2-3)" % tag,
                      mem["grads"], 4 * (psi if z < 2 else S + dp["grads_transient_peak"]))
                check("%s: optimizer_states = 8 x (Psi, or S at stages >= 1)" % tag,
                      mem["optimizer_states"], 8 * (psi if z == 0 else S))
            # What the rank holds all step long: the peaks less the transient buffers.
            resident = (mem["params"] - b * dp["params_transient_peak"] +
                        mem["grads"] - b * dp["grads_transient_peak"] +
                        mem["master_params"] + mem["optimizer_states"])
            want = paper(z, psi, n) if precision == "bf16" else paralab_fp32(z, psi, n)
            check("%s: resident model states = %s (%.2f Psi)" % (
                      tag, "ZeRO paper" if precision == "bf16" else "fp32 closed form", want / psi),
                  resident, int(want))
            if precision == "fp32":
                check("%s: dp traffic = %d Psi (ZeRO section 7)" % (tag, 3 if z == 3 else 2),
                      volume(p["comm"], z, psi, n), 3.0 if z == 3 else 2.0, 1e-12)

p = load("plan_accum.json")
psi, k = p["params"]["total"], p["batch"]["microbatches_per_rank"]
rs = [c for c in p["comm"] if c["group"] == "dp" and c["op"] == "reduce-scatter"]
check("gbs 512, dp 4, stage 2: %d microbatches reduce-scatter k x 4 Psi bytes" % k,
      sum(c["payload_bytes"] for c in rs), k * 4 * psi)

print("part 2: lessons/02-zero/model.toml, mpirun -np 2, 2 steps per stage")
runs = {z: [r for r in (json.loads(l) for l in open(os.path.join(work, "run_z%d.jsonl" % z))
                         if l.strip()) if r.get("type") == "step"]  # not the summary line
        for z in range(4)}
for z, steps in runs.items():
    bad = []
    for s in steps:
        bad += ["step %d %s %d != %d" % (s["step"], c, v["measured"], v["predicted"])
                for c, v in s["memory"].items() if c != "total" and v["measured"] != v["predicted"]]
        for c in s["comm"]:
            for key in ("calls", "payload_bytes", "bus_bytes"):
                if c[key]["measured"] != c[key]["predicted"]:
                    bad.append("step %d %s %s %s" % (s["step"], c["group"], c["op"], key))
    check("stage %d: every memory category and every collective measured == predicted" % z,
          bad, [])

last = {z: runs[z][-1] for z in runs}
def measured(z, category):
    return last[z]["memory"][category]["measured"]
psi = measured(0, "params") // 4
n = 2
for z in range(4):
    check("stage %d: measured dp traffic = %d Psi" % (z, 3 if z == 3 else 2),
          volume([dict(c, bus_bytes=c["bus_bytes"]["measured"]) for c in last[z]["comm"]],
                 z, psi, n), 3.0 if z == 3 else 2.0, 1e-12)
check("stage 1: optimizer_states = 8 Psi / 2", measured(1, "optimizer_states"), 8 * psi // 2)
check("stage 2: grads below stage 1's", measured(2, "grads") < measured(1, "grads"), True)
check("stage 3: params below stage 2's", measured(3, "params") < measured(2, "params"), True)
for z in (1, 2, 3):
    check("stage %d: step-%d loss equals stage 0's (rel 1e-5)" % (z, last[z]["step"]),
          last[z]["loss"], last[0]["loss"], 1e-5)

print("part 3: the course's 7B + Adam on 4 GPUs, llama-7b --plan --world-size 4")
L, h, f, V = 32, 4096, 11008, 32000
psi7 = L * (4 * h * h + 3 * h * f + 2 * h) + 2 * V * h + h
plans7 = [load("plan_7b_z%d.json" % z) for z in range(4)]
check("Psi = L(4h^2 + 3hf + 2h) + 2Vh + h", plans7[0]["params"]["total"], psi7)
course = [112, 35, 28, 7]                       # GB per GPU, as the course prints them
for z, p in enumerate(plans7):
    mem, dp = p["memory"][0], p["data_parallel"]
    resident = (mem["params"] - 2 * dp["params_transient_peak"] +
                mem["grads"] - 2 * dp["grads_transient_peak"] +
                mem["master_params"] + mem["optimizer_states"])
    check("stage %d: resident = %.4g Psi (2 + 2 + 12)" % (z, paper(z, psi7, 4) / psi7),
          resident, int(paper(z, psi7, 4)))
    # the course's column beside its own convention's (arithmetic, not a trainer check)
    print("      stage %d: at Psi = 7e9 the course prints %d GB, 2 + 2 + 12 gives %g GB" % (
              z, course[z], paper(z, 7e9, 4) / 1e9))
m0 = plans7[0]["memory"][0]
check("stage 0 split: params 2Psi, grads 2Psi, master 4Psi, optimizer_states (m, v) 8Psi",
      [m0[c] for c in ("params", "grads", "master_params", "optimizer_states")],
      [2 * psi7, 2 * psi7, 4 * psi7, 8 * psi7])
print("      the course's optimizer states: 56 GB = 8 x 7e9 (m, v); with the master 12 x 7e9 = 84")
def dp_bus(p, op):
    return sum(c["bus_bytes"] for c in p["comm"] if c["group"] == "dp" and c["op"] == op)
ddp = dp_bus(plans7[0], "all-reduce")
check("stage 0: all-reduce bus = 2 x 2Psi x 3/4", ddp, 2 * 2 * psi7 * 3 // 4)
for z in (1, 2):
    check("stage %d: reduce-scatter + all-gather = DDP's bytes" % z,
          (dp_bus(plans7[z], "reduce-scatter"), dp_bus(plans7[z], "all-gather")),
          (ddp // 2, ddp // 2))
rs3, ag3 = dp_bus(plans7[3], "reduce-scatter"), dp_bus(plans7[3], "all-gather")
check("stage 3: reduce-scatter 2Psi 3/4, all-gather 2(2Psi - Vh) 3/4 (the head gathered once)",
      (rs3, ag3), (2 * psi7 * 3 // 4, 2 * (2 * psi7 - V * h) * 3 // 4))
check("stage 3 / DDP = 1.4903", round((rs3 + ag3) / ddp, 4), 1.4903)
gathers = [c["calls"] for c in plans7[3]["comm"] if c["group"] == "dp" and c["op"] == "all-gather"]
check("stage 3: 2 x 34 units - 1 = 67 all-gathers", gathers, [67])
c3 = {c["op"]: c["bus_bytes"]["measured"] for c in last[3]["comm"] if c["group"] == "dp"}
c0 = {c["op"]: c["bus_bytes"]["measured"] for c in last[0]["comm"] if c["group"] == "dp"}
check("part 2 measured: ZeRO-3 / DDP bus bytes = 1.5 (tied embedding)",
      (c3["reduce-scatter"] + c3["all-gather"]) / c0["all-reduce"], 1.5)

print("the README: every number it prints, as the plans and the runs above give it")
import re  # noqa: E402
readme = open("lessons/02-zero/README.md", encoding="utf-8").read()
printed = []  # (what, value): each must appear in the README as 1,234,567
def states(mem):
    return mem["params"] + mem["grads"] + mem["master_params"] + mem["optimizer_states"]
# Part 1: GPT-2 124M
p1 = {(n, z, pr): load("plan_%s_dp%d_z%d.json" % (pr, n, z)) for n in (2, 4) for z in range(4)
      for pr in ("fp32", "bf16")}
psi = p1[(2, 0, "fp32")]["params"]["total"]
h, V, S_len = 768, 50257, 1024
layer, embedding = 12 * h * h + 13 * h, V * h + S_len * h
check("GPT-2: 12 layers + embedding + final norm = Psi", 12 * layer + embedding + 2 * h, psi)
printed += [("Psi", psi), ("a layer", layer), ("the tied embedding", embedding),
            ("the final norm", 2 * h)]
for n in (2, 4):
    for z in range(4):
        fp32, bf16 = p1[(n, z, "fp32")], p1[(n, z, "bf16")]
        dp = fp32["data_parallel"]
        peak = states(fp32["memory"][0])
        resident = peak - 4 * (dp["params_transient_peak"] + dp["grads_transient_peak"])
        printed += [("paper dp %d stage %d" % (n, z), int(paper(z, psi, n))),
                    ("fp32 resident dp %d stage %d" % (n, z), resident),
                    ("fp32 peak dp %d stage %d" % (n, z), peak)]
        if peak != resident:
            printed.append(("fp32 transient dp %d stage %d" % (n, z), peak - resident))
dp2 = p1[(2, 2, "fp32")]["data_parallel"]
printed.append(("stage 2's transient gradient elements", dp2["grads_transient_peak"]))
check("GPT-2 at 40M elements a bucket: three buckets", dp2["buckets"], 3)
check("stage 2's transient: the head's bucket (head + layers 7-12) beside the embedding's",
      dp2["grads_transient_peak"], 6 * layer + 2 * h + embedding)
printed += [("head + layers 7-12", 6 * layer + 2 * h), ("layers 1-6", 6 * layer)]
dp3 = p1[(2, 3, "fp32")]["data_parallel"]
printed.append(("stage 3's transient elements", dp3["params_transient_peak"]))
printed.append(("k x 4 Psi", sum(c["payload_bytes"] for c in rs)))
# Part 2: the lesson's model, measured
l2 = last[0]["memory"]
psi2 = measured(0, "params") // 4
h2, V2, S2 = 128, 256, 64
layer2 = 12 * h2 * h2 + 13 * h2
check("lesson model: 8 layers + embedding + final norm = Psi", 8 * layer2 + V2 * h2 + S2 * h2 + 2 * h2,
      psi2)
printed += [("Psi (lesson model)", psi2), ("S", psi2 // 2), ("head + last layer bucket", layer2 + 2 * h2),
            ("the embedding's bucket", V2 * h2 + S2 * h2), ("two layers", 2 * layer2)]
for z in range(4):
    for c in ("params", "grads", "optimizer_states"):
        printed.append(("stage %d %s" % (z, c), measured(z, c)))
    for c in last[z]["comm"]:
        if c["group"] == "dp" and c["op"] != "all-reduce" or z == 0 and c["group"] == "dp":
            printed.append(("stage %d %s bus" % (z, c["op"]), c["bus_bytes"]["measured"]))
    grads_extra = measured(z, "grads") // 4 - psi2 // 2
    if z >= 2:
        printed.append(("stage %d gradient transient" % z, grads_extra))
    if z == 3:
        printed.append(("stage 3 parameter transient", measured(3, "params") // 4 - psi2 // 2))
    total = last[z]["memory"]["total"]
    printed.append(("stage %d measured peak" % z, total["measured"]))
    check("stage %d: the measured peak of the total == the plan's" % z, total["measured"],
          total["predicted"])
    if z >= 2:
        printed.append(("stage %d sum of category peaks" % z,
                        sum(v["measured"] for k, v in last[z]["memory"].items() if k != "total")))
calls = {z: {c["op"]: c["calls"]["measured"] for c in last[z]["comm"] if c["group"] == "dp"} for z in range(4)}
for z, text in ((0, "all-reduce ×%d" % calls[0].get("all-reduce", 0)),
                (1, "reduce-scatter ×%d + all-gather ×%d" % (calls[1]["reduce-scatter"], calls[1]["all-gather"])),
                (3, "reduce-scatter ×%d + all-gather ×%d" % (calls[3]["reduce-scatter"], calls[3]["all-gather"]))):
    check("README: stage %d's calls, %s" % (z, text), text in readme, True)
buffers = ", ".join(str(measured(z, "comm_buffers")) for z in range(4)) + " bytes"
check("README: comm_buffers %s" % buffers, buffers in readme, True)
# Part 3: llama-7b
printed.append(("Psi (7B)", psi7))
for z, p in enumerate(plans7):
    resident = int(paper(z, psi7, 4))
    printed += [("7B stage %d resident" % z, resident), ("7B stage %d peak" % z, p["memory"][0]["total"])]
    check("README: 7B stage %d in GB, %.1f" % (z, resident / 1e9), "| %.1f |" % (resident / 1e9) in readme, True)
printed += [("7B params", m0["params"]), ("7B master_params", m0["master_params"]),
            ("7B optimizer_states", m0["optimizer_states"]), ("7B activations", m0["activations"]),
            ("7B logits", m0["logits"]), ("7B DDP all-reduce bus", ddp), ("7B reduce-scatter", ddp // 2),
            ("7B stage 3 all-gather", ag3)]
missing = [f"{what} {value:,}" for what, value in printed if f"{value:,}" not in readme]
check("README prints each of %d numbers as measured or planned" % len(printed), missing, [])
known = {f"{value:,}" for _, value in printed}
stale = sorted(set(re.findall(r"\d{1,3}(?:,\d{3})+", readme)) - known)
check("README prints no number that check.sh does not compute", stale, [])

finish()
EOF
