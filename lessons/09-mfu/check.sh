#!/usr/bin/env bash
# lessons/09-mfu/check.sh: asserts the numbers of lessons/09-mfu/README.md.
#   bash lessons/09-mfu/check.sh [TRAINER]     (default: the repository's ./trainer)
# Part 1 plans Llama-2 7B and Qwen3-30B-A3B at S = 2K, 4K and 49152 under both attention-FLOP
# conventions and checks 6ND and the plan's per-matmul FLOPs per token against closed forms.
# Part 2 plans Llama-2 7B with selective and full recompute and checks HFU/MFU = hardware /
# model FLOPs exactly. Part 3 trains lessons/09-mfu/model.toml for 2 steps with and without
# full recompute and checks the measured HFU/MFU against the plan. Part 4 projects
# Qwen3-30B-A3B at S = 49152 on 40 H20 under three layouts (the time model) and turns the
# course's 8-10% MFU into tokens/s under each FLOP convention. Part 5 runs the tensor-core flash
# attention on the emulated CUDA device (build/emulated/op_check, make emulated): the lane map
# of one tile, and GPT-2 124M's attention in the kernel table (FLOPs run, the roofline).
# Prints "N passed, M failed" last; exits non-zero on a failure.
source "$(dirname "$0")/../lib.sh"  # trainer, root, work, give_up
export OPENBLAS_NUM_THREADS=1

fail_run() { echo "FAIL  trainer $1: see $work/$1.log"; echo "0 passed, 1 failed"; trap - EXIT; exit 1; }
plan() {  # name, flags...: the plan as JSON in $work/name.json
  local name=$1; shift
  "$trainer" "$@" --plan --json > "$work/$name.json" 2> "$work/$name.log" || fail_run "$name"
}
llama=(--config configs/models/llama-7b.toml --global-batch-size 1)  # per token: one sequence is enough
qwen=(--config configs/models/qwen3-30b-a3b.toml --global-batch-size 1)
sel=(--recompute-granularity selective)
full=(--recompute-granularity full --recompute-method uniform --recompute-num-layers 1)

# Part 1 and 2: FLOPs per token, and HFU/MFU with recompute
for conv in full causal; do
  for s in 2048 4096 49152; do
    plan "llama_${s}_$conv" "${llama[@]}" --seq-length $s --attention-flops $conv
  done
  for s in 4096 49152; do
    plan "qwen_${s}_$conv" "${qwen[@]}" --seq-length $s --attention-flops $conv
    plan "llama_${s}_${conv}_sel" "${llama[@]}" --seq-length $s --attention-flops $conv "${sel[@]}"
    plan "llama_${s}_${conv}_full" "${llama[@]}" --seq-length $s --attention-flops $conv "${full[@]}"
  done
done

# the paper's ratio counts the true vocabulary in both FLOP counts: no padding rows
plan gpt3_naive_sel --config configs/models/gpt3-175b.toml --global-batch-size 1 --attention naive \
  --make-vocab-size-divisible-by 1 "${sel[@]}"

# Part 3: two real steps, without and with full recompute
tiny=(--config lessons/09-mfu/model.toml)
for r in none full; do
  flags=(); [ $r = full ] && flags=("${full[@]}")
  "$trainer" "${tiny[@]}" "${flags[@]}" --metrics-jsonl "$work/cpu_$r.jsonl" > "$work/cpu_$r.log" 2>&1 ||
    fail_run "cpu_$r"
  plan "cpu_$r" "${tiny[@]}" "${flags[@]}"
done

# Part 4: Qwen3-30B-A3B at S = 49152 on 40 H20, 80 sequences (3.9M tokens) a step
h20_base=(--config configs/models/qwen3-30b-a3b.toml --seq-length 49152 --global-batch-size 80
          --world-size 40 --hardware h20)
h20=("${h20_base[@]}" "${full[@]}")
for conv in full causal; do
  plan "h20_zero3_$conv" "${h20[@]}" --attention-flops $conv --zero-stage 3
  plan "h20_ep8_$conv" "${h20[@]}" --attention-flops $conv --ep 8 --moe-token-dispatcher-type alltoall \
    --use-distributed-optimizer
  plan "h20_pp4_$conv" "${h20[@]}" --attention-flops $conv --pp 4 --ep 2 --use-distributed-optimizer
done
plan h20_zero3_overlap "${h20[@]}" --zero-stage 3 --overlap-grad-reduce
plan h20_zero3_norecompute "${h20_base[@]}" --zero-stage 3

# Part 5: GPT-2 124M's attention in the tensor-core flash kernels, on the emulated CUDA device
op_check=build/emulated/op_check
[ -x "$op_check" ] || give_up "part 5 needs $op_check: build it with make emulated (kernels/emulator/README.md)"
"$op_check" --lane-map > "$work/lane_map.log" 2>&1 || fail_run lane_map
"$op_check" --kernel-table --seq 1024 --head-dim 64 --heads 96 > "$work/kernel_table.log" 2>&1 ||
  fail_run kernel_table

python3 - "$work" <<'EOF'
import json, os, sys
from fractions import Fraction as Fr
work = sys.argv[1]
sys.path.insert(0, "lessons")  # the repository root is the working directory (lib.sh)
from checks import check, finish  # noqa: E402

def info(name, shown):  # a number the README prints but does not assert (a time, a ratio to 6ND)
    print(f"      {name}: {shown}")

def load(name):
    return json.load(open(os.path.join(work, name + ".json")))

def per_token(p, key="model_per_step"):  # FLOPs per token, exact (integers below 2^53)
    return Fr(int(p["flops"][key]), p["batch"]["tokens_per_step"])

def rows(p, *names, key="model_per_step"):
    return sum(int(m[key]) for m in p["flops"]["matmuls"] if m["name"] in names)

G = lambda x: f"{float(x) / 1e9:.2f}G"

print("# 1. 6ND against the plan's per-matmul count")
# Llama-2 7B: L 32, h 4096, a = g = 32, d 128, SwiGLU f 11008, V 32000, untied, no biases
L, h, a, g, d, f, V = 32, 4096, 32, 32, 128, 11008, 32000
W_L = h * (a + 2 * g) * d + a * d * h + 3 * h * f  # one layer's matmul weights: qkv, proj, fc1 (2f), fc2
W = L * W_L + V * h                                # every matmul weight, the output layer in
norms = (2 * L + 1) * h                            # RMSNorm weights: two a layer and the final one
psi = load("llama_4096_full")["params"]["total"]
check("llama-7b: Psi = L W_L + 2Vh + (2L + 1)h = 6,738,415,616", (psi, L * W_L + 2 * V * h + norms),
      (6738415616,) * 2)
psi_ne = psi - 2 * V * h  # Kaplan et al.'s non-embedding count: no lookup table, no output layer
check("llama-7b: Psi_ne = Psi - 2Vh = 6,476,271,616; 6 Psi_ne per token", 6 * psi_ne, 38857629696)
for s in (2048, 4096, 49152):
    pf, pc = load(f"llama_{s}_full"), load(f"llama_{s}_causal")
    att_full, att_causal = 12 * L * a * d * s, 6 * L * a * d * (s + 1)
    check(f"llama-7b S {s}: full, 6W + 12 L a d S = {G(6 * W + att_full)} per token",
          per_token(pf), 6 * W + att_full)
    check(f"llama-7b S {s}: causal, 6W + 6 L a d (S+1) = {G(6 * W + att_causal)} per token",
          per_token(pc), 6 * W + att_causal)
    check(f"llama-7b S {s}: linear rows = 6W = 6(Psi_ne - norms + Vh)",
          Fr(rows(pf, "qkv", "proj", "fc1", "fc2", "head"), s), 6 * (psi_ne - norms + V * h))
    share_f, share_c = Fr(att_full, 6 * W + att_full), Fr(att_causal, 6 * W + att_causal)
    check(f"llama-7b S {s}: attention share full {float(share_f):.1%}, causal {float(share_c):.1%}",
          (Fr(rows(pf, "scores", "av"), int(pf["flops"]["model_per_step"])),
           Fr(rows(pc, "scores", "av"), int(pc["flops"]["model_per_step"]))), (share_f, share_c))
    # the other two conventions (flops.per_token): torchtitan 6 x (Psi - lookups) + 12 L a d S,
    # Megatron 6 x (the layers' GEMM weights + h Vp) + 6 L a d S (no norm weights, causal)
    fpt = pf["flops"]["per_token"]
    check(f"llama-7b S {s}: torchtitan 6(Psi - Vh) + 12 L a d S, Megatron 6(L W_L + Vh) + 6 L a d S",
          (fpt["torchtitan"], fpt["megatron"]),
          (6 * (psi - V * h) + 12 * L * a * d * s, 6 * W + 6 * L * a * d * s))
    info(f"llama-7b S {s}: plan / 6 Psi_ne",
         f"full {float(per_token(pf) / (6 * psi_ne)):.3f}, causal {float(per_token(pc) / (6 * psi_ne)):.3f}")

# Qwen3-30B-A3B: L 48, h 2048, a 32, g 4, d 128, E 128 experts of f_e 768, top k 8, V 151936
L, h, a, g, d, E, k, fe, V = 48, 2048, 32, 4, 128, 128, 8, 768, 151936
W_att = h * (a + 2 * g) * d + a * d * h        # qkv and proj
router, experts = h * E, k * 3 * h * fe         # the router; k experts' fc1 (2 f_e) and fc2 per token
qk_norm = 2 * h + 2 * d                         # norm1, norm2, q_norm, k_norm
p4 = load("qwen_4096_full")
mp = p4["moe"]["params"]
check("qwen3: active (torchtitan: lookups out, output in) = L(W_att + hE + 3k h f_e + norms) + Vh + h",
      mp["active_torchtitan"], L * (W_att + router + experts + qk_norm) + V * h + h)
check("qwen3: active non-embedding = the same - Vh", mp["active_non_embedding"],
      L * (W_att + router + experts + qk_norm) + h)
Wq = L * (W_att + router + experts) + V * h     # the matmul weights a token meets, router in
Vp = p4["params"]["padded_vocab"]
for s in (4096, 49152):
    pf, pc = load(f"qwen_{s}_full"), load(f"qwen_{s}_causal")
    fpt = pf["flops"]["per_token"]
    para_f, para_c = 6 * Wq + 12 * L * a * d * s, 6 * Wq + 6 * L * a * d * (s + 1)
    titan = 6 * mp["active_torchtitan"] + 12 * L * a * d * s
    mega = 6 * (L * (W_att + experts) + h * Vp) + 6 * L * a * d * s
    check(f"qwen3 S {s}: paralab full 6W + 12 L a d S = {G(para_f)}", (per_token(pf), fpt["paralab"]),
          (para_f,) * 2)
    check(f"qwen3 S {s}: paralab causal 6W + 6 L a d (S+1) = {G(para_c)}",
          (per_token(pc), pc["flops"]["per_token"]["paralab"]), (para_c,) * 2)
    check(f"qwen3 S {s}: torchtitan 6 active + 12 L a d S = {G(titan)} (= paralab full + 6 x norms)",
          (fpt["torchtitan"], fpt["torchtitan"] - para_f), (titan, 6 * (L * qk_norm + h)))
    check(f"qwen3 S {s}: Megatron 6(L(W_att + 3k h f_e) + h Vp) + 6 L a d S = {G(mega)}",
          fpt["megatron"], mega)
    share_f, share_c = Fr(12 * L * a * d * s, para_f), Fr(6 * L * a * d * (s + 1), para_c)
    check(f"qwen3 S {s}: attention share full {float(share_f):.1%}, causal {float(share_c):.1%}",
          (Fr(rows(pf, "scores", "av"), int(pf["flops"]["model_per_step"])),
           Fr(rows(pc, "scores", "av"), int(pc["flops"]["model_per_step"]))), (share_f, share_c))
    info(f"qwen3 S {s}: plan / 6 x active (torchtitan's)",
         f"full {para_f / (6 * mp['active_torchtitan']):.3f}, causal {para_c / (6 * mp['active_torchtitan']):.3f}")

print("# 2. HFU/MFU = hardware / model FLOPs (Llama-2 7B, flash attention)")
L, h, a, g, d, f, V = 32, 4096, 32, 32, 128, 11008, 32000
W_L = h * (a + 2 * g) * d + a * d * h + 3 * h * f
W = L * W_L + V * h
for s in (4096, 49152):
    x = L * a * d * (s + 1)  # per token: one attention product over the causal pairs, all layers
    model = {"full": 6 * W + 12 * L * a * d * s, "causal": 6 * W + 6 * x}
    hw = 6 * W + 7 * x       # flash: scores 2 fwd-side + QK^T again, dS -> 4 products; av 3
    rc = {"none": 0, "sel": 2 * x, "full": 2 * L * W_L + 2 * x}
    for conv in ("full", "causal"):
        for r in ("none", "sel", "full"):
            p = load(f"llama_{s}_{conv}" + ("" if r == "none" else f"_{r}"))
            want = Fr(hw + rc[r], model[conv])
            check(f"S {s} {conv:6} {r:4}: HFU/MFU = (6W + 7x + rc)/model = {float(want):.4f}",
                  Fr(int(p["flops"]["hardware_per_step"]), int(p["flops"]["model_per_step"])), want)
    p, q = load(f"llama_{s}_full_full"), load(f"llama_{s}_full_sel")
    lin = rows(p, "qkv", "proj", "fc1", "fc2")
    check(f"S {s}: full recompute's linear part = the layers' linear model FLOPs / 3 (so 4/3)",
          Fr(int(p["flops"]["recompute_per_step"]) - int(q["flops"]["recompute_per_step"]), lin),
          Fr(1, 3))
    want = 1 + Fr(rc["full"], hw)
    check(f"S {s}: full: hardware with / without = 1 + (2 L W_L + 2x)/(6W + 7x) = {float(want):.4f}",
          Fr(int(p["flops"]["hardware_per_step"]), int(load(f"llama_{s}_full")["flops"]["hardware_per_step"])),
          want)
    want = 1 + Fr(rc["sel"], hw)
    check(f"S {s}: selective: hardware with / without = 1 + 2x/(6W + 7x) = {float(want):.4f}",
          Fr(int(q["flops"]["hardware_per_step"]), int(load(f"llama_{s}_full")["flops"]["hardware_per_step"])),
          want)

p = load("gpt3_naive_sel")
L, h, s, V = 96, 12288, 2048, 50257
x = Fr(s, 6 * h) + Fr(V, 12 * h * L)
want = 1 + Fr(s, 36 * h) / (1 + x)
check(f"gpt3-175b naive, selective: hardware/model = 1 + (s/36h)/(1 + s/6h + V/12hL) = {float(want):.4f}",
      Fr(int(p["flops"]["hardware_per_step"]), int(p["flops"]["model_per_step"])), want)
info("gpt3-175b: Korthikanti eq. 8 over eq. 3, (1 + s/3h + V/12hL)/(1 + s/6h + V/12hL)",
     f"{float((1 + Fr(s, 3 * h) + Fr(V, 12 * h * L)) / (1 + x)):.4f} (three attention-core forwards again)")

print("# 3. measured on the CPU: lessons/09-mfu/model.toml, 2 steps")
L, h, a, d, f, V, B, s = 2, 64, 4, 16, 256, 256, 4, 128
W_L = h * 3 * a * d + a * d * h + 3 * h * f
W = L * W_L + V * h
x = L * a * d * (s + 1)
ratio = {"none": Fr(6 * W + 7 * x, 6 * W + 12 * L * a * d * s),
         "full": Fr(6 * W + 9 * x + 2 * L * W_L, 6 * W + 12 * L * a * d * s)}
for r in ("none", "full"):
    p = load(f"cpu_{r}")
    steps = [json.loads(l) for l in open(os.path.join(work, f"cpu_{r}.jsonl")) if l.strip()]
    steps = [st for st in steps if st.get("type", "step") == "step"]
    check(f"cpu {r}: planned hardware/model = {float(ratio[r]):.4f}",
          Fr(int(p["flops"]["hardware_per_step"]), int(p["flops"]["model_per_step"])), ratio[r])
    good = all(st["flops"]["hardware_per_rank_measured"] == st["flops"]["hardware_per_rank_predicted"]
               == p["flops"]["hardware_per_step"] for st in steps)
    check(f"cpu {r}: the FLOP counter == the plan's hardware FLOPs, every step", good, True)
    worst = max(abs(st["hfu"] / st["mfu"] / float(ratio[r]) - 1) for st in steps)
    check(f"cpu {r}: measured HFU/MFU == planned ratio (rel 1e-9), {len(steps)} steps", worst <= 1e-9, True)
    peak = steps[0]["flops"]["model_per_step"] / (steps[0]["step_ms"] / 1e3 * steps[0]["mfu"]) / 1e12
    info(f"cpu {r}: measured", ", ".join(
        f"step {st['step']} {st['step_ms']:.1f} ms MFU {st['mfu']:.1%} HFU {st['hfu']:.1%}" for st in steps)
        + f"; peak {peak:.4f} TFLOP/s (measured sgemm)")

print("# 4. 40 H20, Qwen3-30B-A3B at S = 49152 (a projection)")
prof = open("configs/hardware/h20.toml").read()
check("h20.toml: confirmed = false, bf16_tflops = 148",
      ("confirmed = false" in prof, "bf16_tflops = 148 " in prof), (True, True))
P, n = 148e12, 40
pz = load("h20_zero3_full")
check("the plan's peak is 148 TFLOP/s, marked unconfirmed",
      (pz["peak"]["tflops"], "unconfirmed" in pz["peak"]["source"]), (148, True))
fpt = pz["flops"]["per_token"]
conv = {"paralab full (default)": fpt["paralab"], "torchtitan": fpt["torchtitan"],
        "paralab causal": load("h20_zero3_causal")["flops"]["per_token"]["paralab"],
        "Megatron": fpt["megatron"]}
for name, F in conv.items():
    info(f"tokens/s = MFU x 148e12 x 40 / {G(F)} ({name})",
         f"8%: {0.08 * P * n / F:,.0f}, 10%: {0.10 * P * n / F:,.0f}")
info("paralab full / Megatron FLOPs per token at 49K", f"{fpt['paralab'] / fpt['megatron']:.3f}")
# HFU/MFU of the projection: part 2's formula with Qwen3's matmul weights (dropless: M = N k rows)
L, h, a, g, d, s = 48, 2048, 32, 4, 128, 49152
x = L * a * d * (s + 1)
want = Fr(6 * Wq + 7 * x + 2 * L * (W_att + router + experts) + 2 * x, 6 * Wq + 12 * L * a * d * s)
check(f"qwen3 49K, full recompute: hardware/model = (6W + 9x + 2 L W_L)/(6W + 12 L a d S) = {float(want):.4f}",
      abs(pz["flops"]["hardware_per_step"] / pz["flops"]["model_per_step"] / float(want) - 1) < 1e-12, True)
tz = pz["time"]
info("zero3: rank 0's step", ", ".join(f"{k} {tz[k + '_s']:.1f} s" for k in
     ("gemm", "attention", "recompute", "memory", "exposed_comm")))
over = {c["op"]: c for c in load("h20_zero3_overlap")["time"]["comm"] if c["group"] == "dp"}
blk = {c["op"]: c for c in tz["comm"] if c["group"] == "dp"}
check("zero3: --overlap-grad-reduce hides the dp reduce-scatter but its last call",
      (blk["reduce-scatter"]["exposed_s"] == blk["reduce-scatter"]["seconds"],
       over["reduce-scatter"]["exposed_s"] < blk["reduce-scatter"]["exposed_s"] / 10), (True, True))
info("zero3: dp reduce-scatter exposed", f"{blk['reduce-scatter']['exposed_s']:.2f} s blocking, "
     f"{over['reduce-scatter']['exposed_s']:.3f} s with --overlap-grad-reduce "
     f"(one of {over['reduce-scatter']['calls']} calls: {over['reduce-scatter']['seconds'] / over['reduce-scatter']['calls']:.3f} s)")
nr = load("h20_zero3_norecompute")
check("zero3 without recompute does not fit 96 GiB", (nr["fit"]["fits"], nr["flops"]["recompute_per_step"]),
      (False, 0))
info("zero3 without recompute: peak", f"{nr['fit']['peak_bytes']:,} bytes ({nr['fit']['peak_bytes'] / 2**30:.0f} GiB)")
ep_rows = [c for c in load("h20_ep8_full")["time"]["comm"] if c["group"] == "ep"]
check("ep8: the ep rows run inside a node (ep 8 = gpus_per_node)", all(c["intra_node"] for c in ep_rows), True)
st = load("h20_pp4_full")["time"]["stages"]
check("pp4: the last stage's forward (with the head) is the longest", st[-1]["F_s"] > max(x["F_s"] for x in st[:-1]),
      True)
info("pp4: forward per microbatch by stage", ", ".join(f"{x['F_s']:.2f} s" for x in st))
for lay in ("zero3", "ep8", "pp4"):
    tf, tc = load(f"h20_{lay}_full")["time"], load(f"h20_{lay}_causal")["time"]
    pf = load(f"h20_{lay}_full")
    check(f"{lay}: fits in 96 GiB", pf["fit"]["fits"], True)
    tok = tf["tokens_per_second"]
    check(f"{lay}: MFU = tokens/s x F_paralab / (peak x 40), both conventions (rel 1e-9)",
          (abs(tf["mfu"] / (tok * conv["paralab full (default)"] / (P * n)) - 1) < 1e-9,
           abs(tc["mfu"] / (tok * conv["paralab causal"] / (P * n)) - 1) < 1e-9), (True, True))
    check(f"{lay}: HFU/MFU = hardware/model FLOPs (rel 1e-9)",
          abs(tf["hfu"] / tf["mfu"] / (pf["flops"]["hardware_per_step"] / pf["flops"]["model_per_step"]) - 1)
          < 1e-9, True)
    groups, bad, blocking = {}, [], 0
    for c in tf["comm"]:
        groups[c["group"]] = groups.get(c["group"], 0) + c["exposed_s"]
        if c["overlap"] == "blocking":  # a row's time: calls x latency + bus bytes / bandwidth
            blocking += 1
            want = c["calls"] * c["latency_us"] * 1e-6 + c["bus_bytes"] / (c["bandwidth_gbs"] * 1e9)
            if abs(c["seconds"] / want - 1) > 1e-9 or c["exposed_s"] != c["seconds"]:
                bad.append(f"{c['group']} {c['op']}")
    check(f"{lay}: each of {blocking} blocking rows = calls x latency + bus bytes / bandwidth, all exposed",
          bad, [])
    check(f"{lay}: exposed comm = the rows' sum (rel 1e-9)",
          abs(sum(groups.values()) - tf["exposed_comm_s"]) <= 1e-9 * tf["exposed_comm_s"], True)
    check(f"{lay}: bubble {'> 0 (pp 4)' if lay == 'pp4' else '= 0 (no pp)'}",
          tf["bubble_s"] > 0 if lay == "pp4" else tf["bubble_s"], True if lay == "pp4" else 0)
    if lay == "pp4":  # 1F1B, p 4 stages, m = 80 / (B dp 10) = 8 microbatches per rank
        pipe = pf["pipeline"]
        check("pp4: unit-cost bubble (p-1)/(m+p-1) = 3/11, simulated and closed form",
              (pipe["p"], pipe["m"], pipe["bubble_simulated"], pipe["bubble_closed_form"]),
              (4, 8, 3 / 11, 3 / 11))
    top = tf["sensitivity"][0]
    worst = tok / (1 + top["step_change"]) * conv["Megatron"] / (P * n)
    check(f"{lay}: the assumption that moves it most is attention_efficiency (+{top['step_change']:.0%} at half)",
          top["key"], "attention_efficiency")
    check(f"{lay}: Megatron-convention MFU > 10%, even with it halved ({worst:.1%})", worst > 0.10, True)
    sens = tf["sensitivity"]
    check(f"{lay}: next gemm_efficiency (+{sens[1]['step_change']:.0%}); network and latency figures < 2%",
          (sens[1]["key"], all(x["step_change"] < 0.02 for x in sens if "gbs" in x["key"] or "latency" in x["key"])),
          ("gemm_efficiency", True))
    mega = tok * conv["Megatron"] / (P * n)
    info(f"{lay}: step would have to be longer by, for 8-10% MFU",
         f"{mega / 0.10:.1f}-{mega / 0.08:.1f}x (Megatron), {tf['mfu'] / 0.10:.1f}-{tf['mfu'] / 0.08:.1f}x (full)")
    info(f"{lay}: projected",
         f"step {tf['step_s']:.1f} s, {tok:,.0f} tokens/s, MFU {tf['mfu']:.1%} (full) {tc['mfu']:.1%} (causal) "
           f"{tok * conv['Megatron'] / (P * n):.1%} (Megatron), HFU {tf['hfu']:.1%}; exposed "
           + ", ".join(f"{k} {v:.2f} s" for k, v in groups.items() if v >= 0.005)
           + f"; bubble {tf['bubble_s']:.1f} s ({tf['bubble_s'] / tf['step_s']:.0%})")
print("# 5. GPT-2 124M's attention in the tensor-core flash kernels (the emulated device)")
import math, re, tomllib
lane_map = open(os.path.join(work, "lane_map.log")).read()
tables, name = {}, None
for line in lane_map.splitlines():
    if re.match(r"^(S|P|O) ", line):
        name = line[0]
        tables[name] = []
    elif name and line.startswith("row"):
        tables[name].append([int(x) for x in line.split()[2:]])
want = [[4 * (r % 8) + (c % 8) // 2 for c in range(16)] for r in range(16)]
check("lane map: S, P and O, 16 x 16 each, lane = 4 (r mod 8) + (c mod 8) / 2 for every element",
      [tables.get(t) == want for t in "SPO"], [True] * 3)
err = float(re.search(r"P V to ([0-9.e+-]+) \(relative\)", lane_map).group(1))
check(f"lane map: the kernel's S, P, O equal the host's to {err:.1e} (< 1e-5), its lanes agreeing",
      ("holds S(r, c), P(r, c) and O(r, c), lane 4 (r mod 8) + (c mod 8) / 2: yes" in lane_map, err < 1e-5),
      (True, True))

table = open(os.path.join(work, "kernel_table.log")).read()
row_re = re.compile(r"^flash_mma::(\w+)<(?:bf16, )?64>\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+) (\w+)\s+([0-9.]+)"
                    r"\s+([0-9.]+) \(([0-9.]+)\)\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)\s+(.+)$")
k = {}
for line in table.splitlines():
    m = row_re.match(line)
    if m:
        g = m.groups()
        k[g[0].replace("_kernel", "")] = dict(blocks=int(g[2]), regs=int(g[4]), per_sm=int(g[5]), limit=g[6],
                                              gflop=float(g[7]), us=float(g[13]), tflops=float(g[14]),
                                              bound=g[15].strip())
check("kernel table: forward, delta, dq and dkdv rows", sorted(k), ["delta", "dkdv", "dq", "forward"])
S, D, BH = 1024, 64, 96  # GPT-2 124M at micro batch 8: 8 sequences x 12 heads, head dim 64
pairs = BH * S * (S + 1) // 2  # causal (query, key) pairs
fa = re.search(r"FlashAttention's count ([0-9.]+) GFLOP forward, ([0-9.]+) backward", table)
check(f"FlashAttention's count: 4 D pairs = {4 * D * pairs / 1e9:.2f}, 10 D pairs = {10 * D * pairs / 1e9:.2f} GFLOP",
      (fa.group(1), fa.group(2)), (f"{4 * D * pairs / 1e9:.2f}", f"{10 * D * pairs / 1e9:.2f}"))
# What the kernels execute: a warp owns 16 rows (queries; keys in dkdv) and runs 64-wide tiles up
# to its diagonal, ceil(16 (w + 1) / 64) tiles for warp w of the S / 16 warps of a head.
tiles = sum(math.ceil(16 * (w + 1) / 64) for w in range(S // 16))
computed = BH * 16 * 64 * tiles  # pairs the tiles compute, masked ones included
check(f"tiles: sum over warps of ceil(16 (w + 1) / 64) = {tiles}; computed pairs / causal pairs = "
      f"{computed / pairs:.4f}", tiles, 544)
for kern, per_pair in (("forward", 4), ("dq", 6), ("dkdv", 8)):
    check(f"{kern}: {per_pair} D x computed pairs = {per_pair * D * computed / 1e9:.3f} GFLOP of mma.sync, counted",
          k[kern]["gflop"], round(per_pair * D * computed / 1e9, 3))
hardware = sum(k[x]["gflop"] for x in ("forward", "dq", "dkdv"))
model = 14 * D * pairs / 1e9
check(f"executed / FlashAttention's count = {hardware:.2f} / {model:.2f} = {hardware / model:.3f} "
      "= 18 D computed pairs / 14 D causal pairs (the backward recomputes S and dP in both kernels)",
      round(hardware / model, 3), round(18 * computed / (14 * pairs), 3))
check("blocks: 768 = 96 heads x 1024 / 128 rows each (forward, dq, dkdv)",
      [k[x]["blocks"] for x in ("forward", "dq", "dkdv")], [BH * S // 128] * 3)
check("forward: 128 registers (launch bound 2 blocks an SM), 2 blocks an SM",
      (k["forward"]["regs"], k["forward"]["per_sm"]), (128, 2))
check("forward, dq, dkdv: bound by shared memory (ldmatrix wavefronts), not the tensor cores",
      [k[x]["bound"] for x in ("forward", "dq", "dkdv")], ["shared memory"] * 3)
total = float(re.search(r"total projected ([0-9.]+) us", table).group(1))
check(f"total projected {total} us = the rows' sum", abs(total - sum(x["us"] for x in k.values())) < 0.2, True)
h100 = tomllib.load(open("configs/hardware/h100-sxm.toml", "rb"))
peak, eff = h100["bf16_tflops"], h100["attention_efficiency"]
time_model_us = model * 1e9 / (peak * 1e12 * eff) * 1e6
check(f"the time model's attention: {model:.2f} GFLOP / ({peak} TFLOP/s x {eff}) = {time_model_us:.1f} us; "
      f"the kernels' roofline {total} us is {total / time_model_us:.1f}x it",
      total > time_model_us, True)
info("the kernels' roofline in FlashAttention's count",
     f"{model / total * 1e3:.0f} TFLOP/s, {model / total * 1e3 / peak:.1%} of the {peak} TFLOP/s peak")
finish()
EOF
