#!/usr/bin/env bash
# lessons/07-moe/check.sh: asserts the numbers of lessons/07-moe/README.md.
#   bash lessons/07-moe/check.sh [TRAINER]     (default: the repository's ./trainer)
# Trains configs/models/tiny-moe.toml for 2 steps on one rank under each router convention,
# capacity setting and GEMM setting, and under `mpirun -np 2 --ep 2`; plans Qwen3-30B-A3B
# on 40 H20 (ep 8 with the distributed optimizer, and ZeRO-3 without ep; grouped and per
# expert). Checks parameters, the aux loss, capacity drops, GEMM calls, the all-to-all's bytes
# and ZeRO-3's gathers against closed forms. Prints "N passed, M failed" last.
source "$(dirname "$0")/../lib.sh"  # trainer, root, work, give_up
command -v mpirun >/dev/null || give_up "mpirun not found (apt-get install mpich)"
export OPENBLAS_NUM_THREADS=1

fail_run() { echo "FAIL  trainer $*: see $work"; echo "0 passed, 1 failed"; trap - EXIT; exit 1; }
tiny=(--config configs/models/tiny-moe.toml --train-iters 2 --lr-warmup-iters 0)
one=("${tiny[@]}" --global-batch-size 8)  # one microbatch of 8 x 64 tokens per step
run() {  # name, flags...: a one-rank run and its plan
  local name=$1; shift
  "$trainer" "${one[@]}" "$@" --metrics-jsonl "$work/$name.jsonl" > "$work/$name.log" 2>&1 &&
    "$trainer" "${one[@]}" "$@" --plan --json > "$work/$name.json" 2>> "$work/$name.log" ||
    fail_run "${one[*]} $*"
}
run base
run pre --moe-router-pre-softmax
run sig --moe-router-score-function sigmoid
run cap --moe-expert-capacity-factor 1
run pos --moe-expert-capacity-factor 1 --moe-token-drop-policy position
run pad --moe-expert-capacity-factor 1.25 --moe-pad-expert-input-to-capacity
run pe --moe-grouped-gemm=false

ep2=(--ep 2 --moe-token-dispatcher-type alltoall)
mpirun -np 2 "$trainer" "${tiny[@]}" "${ep2[@]}" --metrics-jsonl "$work/ep2.jsonl" \
  > "$work/ep2.log" 2>&1 < /dev/null || fail_run "mpirun -np 2 ${tiny[*]} ${ep2[*]}"
"$trainer" "${tiny[@]}" "${ep2[@]}" --plan --json --world-size 2 > "$work/ep2.json" ||
  fail_run "--plan --world-size 2 ${ep2[*]}"

qwen=(--config configs/models/qwen3-30b-a3b.toml --plan --json --world-size 40
      --global-batch-size 960 --hardware h20)
ep8=(--ep 8 --moe-token-dispatcher-type alltoall --zero-stage 1)
plan() {  # name, flags...
  local name=$1; shift
  "$trainer" "${qwen[@]}" "$@" > "$work/$name.json" || fail_run "${qwen[*]} $*"
}
plan q_ep8 "${ep8[@]}"
plan q_ep8_pe "${ep8[@]}" --moe-grouped-gemm=false
plan q_z3 --zero-stage 3
plan q_z3_pe --zero-stage 3 --moe-grouped-gemm=false
plan q_z1 --zero-stage 1

python3 - "$work" <<'EOF'
import json, math, sys
work = sys.argv[1]
sys.path.insert(0, "lessons")  # the repository root is the working directory (lib.sh)
from checks import check, record, load, finish  # noqa: E402

def toml(path):  # the flat key = value files of configs/ (no tables, no arrays here)
    out = {}
    for line in open(path):
        line = line.split("#")[0].strip()
        if "=" not in line:
            continue
        k, v = (x.strip() for x in line.split("=", 1))
        v = v.strip('"')
        for cast in (int, float):
            try:
                v = cast(v)
                break
            except ValueError:
                pass
        out[k] = {"true": True, "false": False}.get(v, v) if isinstance(v, str) else v
    return out
def plan(name):
    return json.load(open(f"{work}/{name}.json"))
def steps(name):
    return load(work, name)[1]

Q, T_ = toml("configs/models/qwen3-30b-a3b.toml"), toml("configs/models/tiny-moe.toml")
H20 = toml("configs/hardware/h20.toml")

def params(c):  # one llama MoE layer and the model, by part (notes/model.md)
    h, a = c["hidden-size"], c["num-attention-heads"]
    g, d = c.get("num-query-groups", a), c.get("kv-channels", h // a)
    E, fe = c["num-experts"], c["moe-ffn-hidden-size"]
    p = dict(attention=h * (a * d + 2 * g * d) + a * d * h,           # qkv, proj
             norms=2 * h + (2 * d if c.get("qk-layernorm") else 0),  # norm1, norm2, q/k norms
             router=E * h, expert=3 * h * fe)                         # SwiGLU: gate|up, down
    p["experts"] = E * p["expert"]
    p["total"] = p["attention"] + p["norms"] + p["router"] + p["experts"]
    p["active"] = p["total"] - p["experts"] + c["moe-router-topk"] * p["expert"]  # x k/E
    L, Vh = c["num-layers"], c["vocab-size"] * h
    model = dict(total=L * p["total"] + 2 * Vh + h, active=L * p["active"] + 2 * Vh + h,
                 lookups=Vh, output=Vh)   # untied output layer; final norm h
    return p, model

print("# 1. total vs active parameters")
for tag, c, pj in (("Qwen3-30B-A3B", Q, plan("q_ep8")), ("tiny-moe", T_, plan("base"))):
    layer, model = params(c)
    got = pj["moe"]["params"]
    for k in ("attention", "norms", "router", "expert", "experts", "total", "active"):
        check(f"{tag}: per layer {k}", got["moe_layer"][k], layer[k])
    check(f"{tag}: total = L x layer + 2Vh + h", got["total"], model["total"])
    check(f"{tag}: active (Megatron, embeddings in) = L x active layer + 2Vh + h",
          got["active"], model["active"])
    check(f"{tag}: torchtitan's non-embedding active = active - Vh", got["active_torchtitan"],
          model["active"] - model["lookups"])
    check(f"{tag}: non-embedding active = active - 2Vh", got["active_non_embedding"],
          model["active"] - model["lookups"] - model["output"])
    check(f"{tag}: active / total", round(got["active"] / got["total"], 4),
          round(model["active"] / model["total"], 4))
psi, psi_active = plan("q_ep8")["moe"]["params"]["total"], plan("q_ep8")["moe"]["params"]["active"]

print("# 2. router conventions and the aux loss")
for name, words in (("base", "softmax over the top-k logits"), ("pre", "softmax over all E logits"),
                    ("sig", "sigmoid scores")):
    check(f"{name}: the plan names the convention '{words}'", words in plan(name)["moe"]["routing"], True)
first = {n: steps(n)[0] for n in ("base", "pre", "sig")}
check("step 1, layer 0: the three score functions pick the same experts (monotone in the logits)",
      [first[n]["moe"]["layers"][0]["tokens_per_expert"] for n in ("pre", "sig")],
      [first["base"]["moe"]["layers"][0]["tokens_per_expert"]] * 2)
check("step 1: different gates, different losses (softmax top-k, pre-softmax, sigmoid)",
      len({first[n]["loss"] for n in first}), 3)
alpha, L_t = T_["moe-aux-loss-coeff"], T_["num-layers"]
for n, s in first.items():
    ratios = [l["aux_loss"] / alpha for l in s["moe"]["layers"]]
    check(f"{n}: step-1 aux loss per layer / alpha in [1, 1.01] ({', '.join(f'{r:.5f}' for r in ratios)})",
          all(1 <= r <= 1.01 for r in ratios), True)
    check(f"{n}: step's aux loss = sum over the {L_t} layers", s["aux_loss"],
          sum(l["aux_loss"] for l in s["moe"]["layers"]), 1e-12)
base_layers = first["base"]["moe"]["layers"]
imb = max(l["max_over_mean"] for l in base_layers)
record("base step 1: routing far from balanced, aux loss still near alpha", imb > 1.2,
       f"max/mean {imb:.3f}, aux/alpha - 1 <= {max(l['aux_loss'] for l in base_layers) / alpha - 1:.2e}")
pq = plan("q_ep8")["moe"]
k_q, L_q, a_q = pq["topk"], pq["moe_layers"], Q["moe-aux-loss-coeff"]
check("Qwen: plan's balancing names alpha 0.001", "alpha 0.001" in pq["balancing"], True)
check("Qwen at balance: Megatron's sum over layers L alpha = 0.048", L_q * a_q, 0.048, 1e-12)
check("Qwen at balance: HF's one pooled loss coef x k = 0.008", k_q * a_q, 0.008, 1e-12)
check("Qwen: HF's weight per layer / Megatron's = k / L = 1/6", k_q / L_q, 1 / 6, 1e-12)

print("# 3. capacity and drops")
N = 8 * T_["seq-length"]
E, k = T_["num-experts"], T_["moe-router-topk"]
for name, cf in (("cap", 1.0), ("pos", 1.0), ("pad", 1.25)):
    C = math.ceil(N * k / E * cf)
    check(f"{name}: C = ceil(N k / E x cf) = ceil({N} x {k} / {E} x {cf}) = {C}, in the plan",
          f"= {C} rows" in plan(name)["moe"]["capacity"], True)
    bad = []
    for s in steps(name):
        for l in s["moe"]["layers"]:
            c, kept = l["tokens_per_expert"], l["kept_per_expert"]
            if l["dropped_pairs"] != sum(max(0, x - C) for x in c):
                bad.append(f"step {s['step']} layer {l['layer']} dropped")
            if kept != [min(x, C) for x in c]:
                bad.append(f"step {s['step']} layer {l['layer']} kept")
            if name == "pad" and sum(kept) + l["padding_rows"] != E * min(C, N):
                bad.append(f"step {s['step']} layer {l['layer']} padded rows")
        if s["moe"]["dropped_pairs"] != sum(l["dropped_pairs"] for l in s["moe"]["layers"]):
            bad.append(f"step {s['step']} total")
    check(f"{name}: dropped = sum_e max(0, c_e - C), kept = min(c_e, C)"
          + (", kept + padding = E min(C, N)" if name == "pad" else "") + ", every step and layer",
          bad, [])
drops = {n: [l["dropped_pairs"] for l in steps(n)[0]["moe"]["layers"]] for n in ("cap", "pos", "pad")}
record("step 1 drops per layer at cf 1 (probs, position) and 1.25", drops["cap"][0] > 0,
       f"{drops['cap']}, {drops['pos']}, {drops['pad']}")
check("cf 1: layer 0 drops the same count under probs and position (same routing)",
      drops["pos"][0], drops["cap"][0])
check("cf 1: probs and position keep different pairs (step-1 losses differ)",
      steps("cap")[0]["loss"] != steps("pos")[0]["loss"], True)
C = math.ceil(N * k / E * 1.25)
h, fe = T_["hidden-size"], T_["moe-ffn-hidden-size"]
row = 4 + 4 * h + 4 + 4 * 2 * fe + 4 * fe  # row_pair, expert_in, gate, fc1_out, act (fp32)
check("pad: plan's activations = dropless + L (E min(C, N) - N k) x (8 + 4h + 12 f_e)",
      plan("pad")["activations"]["per_microbatch_bytes"],
      plan("base")["activations"]["per_microbatch_bytes"] + L_t * (E * min(C, N) - N * k) * row)
check("pad: activations measured == predicted, both steps",
      [s["memory"]["activations"]["measured"] == s["memory"]["activations"]["predicted"]
       for s in steps("pad")], [True, True])
check("pad: experts' hardware FLOPs = 3 L E min(C, N) (2h 2f_e + 2 f_e h)",
      steps("pad")[0]["gemm_calls"]["labels"]["experts"]["flops_measured"],
      3 * L_t * E * min(C, N) * (2 * h * 2 * fe + 2 * fe * h))

print("# 4. GEMM calls: per expert vs grouped")
for s in steps("pe"):
    nonempty = sum(sum(1 for x in l["tokens_per_expert"] if x > 0) for l in s["moe"]["layers"])
    ex = s["gemm_calls"]["labels"]["experts"]
    check(f"tiny per expert, step {s['step']}: 6 x nonempty experts = 6 x {nonempty}, measured == predicted",
          (ex["measured"], ex["predicted"]), (6 * nonempty,) * 2)
ex = steps("base")[0]["gemm_calls"]["labels"]["experts"]
check("tiny grouped: 6 L, measured == predicted", (ex["measured"], ex["predicted"]), (6 * L_t,) * 2)
g = plan("base")["moe"]["gemm_calls_per_step"]["experts"]
check("tiny plan per expert: 6 L E (1 - (1 - k/E)^N)", g["per_expert"],
      6 * L_t * E * (1 - (1 - k / E) ** N), 1e-12)
gp, gpe = plan("q_ep8"), plan("q_ep8_pe")
calls = gp["moe"]["gemm_calls_per_step"]
E_q, N_q, mb = gp["moe"]["num_experts"], Q["seq-length"], gp["batch"]["microbatches_per_rank"]
check("Qwen per microbatch, per expert: L E 2 x 3 = 48 x 128 x 2 x 3",
      calls["per_microbatch_experts_per_expert"], L_q * E_q * 2 * 3)
check("Qwen per microbatch, HF unfused: L E 3 x 3", calls["per_microbatch_experts_per_expert_hf_unfused"],
      L_q * E_q * 3 * 3)
check("Qwen per microbatch, grouped: L 2 x 3", calls["per_microbatch_experts_grouped"], L_q * 2 * 3)
nonempty_q = E_q * (1 - (1 - k_q / E_q) ** N_q)
check(f"Qwen per step ({mb} microbatches): per expert 6 L mb E(1 - (1 - k/E)^N), E(..) = {nonempty_q:.2f}",
      calls["experts"]["per_expert"], 6 * L_q * mb * nonempty_q, 1e-12)
check("Qwen per step: grouped 6 L mb", calls["experts"]["grouped"], 6 * L_q * mb)
check("Qwen per step, all labels: the time model's GEMM calls (grouped, per expert)",
      (gp["time"]["gemm_calls"], gpe["time"]["gemm_calls"]),
      (sum(v["grouped"] for v in calls.values() if isinstance(v, dict)),
       sum(v["per_expert"] for v in calls.values() if isinstance(v, dict))))
check("the layout fits on 96 GiB H20s: ep 8 + ZeRO-1, grouped and per expert (plan's fit)",
      (gp["fit"]["fits"], gpe["fit"]["fits"]), (True, True))
t_g, t_pe = gp["time"]["step_s"], gpe["time"]["step_s"]
record("PROJECTED step on 40 H20, grouped -> per expert", t_pe > t_g,
       f"{t_g:.2f} s -> {t_pe:.2f} s, x {t_pe / t_g:.3f}")
# the time model: a GEMM costs (F + F_half) / (g peak) + launch, a grouped call one of its
# summed F: the extra calls cost F_half / (g peak) + launch each
extra = (gpe["time"]["gemm_calls"] - gp["time"]["gemm_calls"]) * (
    H20["launch_overhead_us"] * 1e-6 + H20["gemm_half_gflop"] * 1e9 /
    (H20["gemm_efficiency"] * H20["bf16_tflops"] * 1e12))
check("projected GEMM seconds, per expert - grouped = extra calls x (launch + F_half/(g peak)) (1%)",
      gpe["time"]["gemm_s"] - gp["time"]["gemm_s"], extra, 0.01)
sens = {n: {x["key"]: x["step_change"] for x in plan(n)["time"]["sensitivity"]} for n in ("q_ep8", "q_ep8_pe")}
top = [plan(n)["time"]["sensitivity"][0]["key"] for n in ("q_ep8", "q_ep8_pe")]
check("what moves it most, both: gemm_efficiency (+%.1f%%, +%.1f%%)" % tuple(
          100 * sens[n]["gemm_efficiency"] for n in ("q_ep8", "q_ep8_pe")), top, ["gemm_efficiency"] * 2)
for key in ("launch_overhead_us", "gemm_half_gflop"):
    record(f"{key} moves per expert more than grouped", sens["q_ep8_pe"][key] > sens["q_ep8"][key],
           f"+{100 * sens['q_ep8'][key]:.1f}% -> +{100 * sens['q_ep8_pe'][key]:.1f}%")

print("# 5. expert parallelism: the all-to-all's bytes")
s = steps("ep2")
ep, e_t, h_t = 2, 4, T_["hidden-size"]
M = 8 * T_["seq-length"] * k  # one microbatch of 8 per rank, dropless: N k rows sent
for st in s:
    R = [sum(l["tokens_per_expert"][:E // ep]) for l in st["moe"]["layers"]]  # rank 0's experts
    check(f"ep2 step {st['step']}: R_0 = sum of rank 0's experts' counts = expert_rows_per_rank[0]",
          R, [l["expert_rows_per_rank"][0] for l in st["moe"]["layers"]])
    check(f"ep2 step {st['step']}: mean over ranks of R = M = N k (every row runs once)",
          [sum(l["expert_rows_per_rank"]) / ep for l in st["moe"]["layers"]], [M] * L_t)
    a2a = next(c for c in st["comm"] if c["group"] == "ep" and c["op"] == "all-to-all-v")
    want = sum(2 * M * h_t * e_t + 4 * M + 2 * r * h_t * e_t + 4 * r for r in R)
    check(f"ep2 step {st['step']}: payload = sum_l (2 M h e + 4 M + 2 R h e + 4 R) = {want}, "
          "measured, predicted", (a2a["payload_bytes"]["measured"], a2a["payload_bytes"]["predicted"]),
          (want, want))
    check(f"ep2 step {st['step']}: bus = payload (ep - 1)/ep, calls 6 L",
          (a2a["bus_bytes"]["measured"], a2a["calls"]["measured"]), (want * (ep - 1) // ep, 6 * L_t))
pe2 = next(c for c in plan("ep2")["comm"] if c["group"] == "ep" and c["op"] == "all-to-all-v")
check("ep2 plan: the uniform expectation R = M: L (4 M h e + 8 M)", pe2["payload_bytes"],
      L_t * (4 * M * h_t * e_t + 8 * M))
ag = next(c for c in plan("ep2")["comm"] if c["group"] == "etp_ep")
check("ep2 plan: the counts' all-gather P E 4 per layer", ag["payload_bytes"], L_t * ep * E * 4)
ep_q, e_q, h_q = 8, 2, Q["hidden-size"]
M_q = N_q * k_q
layer_q = 2 * M_q * h_q * e_q + 2 * M_q * h_q * e_q + 4 * M_q + 4 * M_q
a2a = next(c for c in gp["comm"] if c["group"] == "ep" and c["op"] == "all-to-all-v")
check(f"Qwen ep 8: per layer and microbatch 4 M h e + 8 M = {layer_q} at M = R = N k = {M_q}",
      a2a["payload_bytes"], L_q * mb * layer_q)
check("Qwen ep 8: bus = payload x 7/8, calls 6 L mb", (a2a["bus_bytes"], a2a["calls"]),
      (L_q * mb * layer_q * (ep_q - 1) // ep_q, 6 * L_q * mb))
tq = next(c for c in gp["time"]["comm"] if c["group"] == "ep" and c["op"] == "all-to-all-v")
check("Qwen ep 8: in a node (stride 1 x 8 <= 8 GPUs per node)", tq["intra_node"], True)
check("PROJECTED a2a seconds = calls x latency + bus / intra_node_gbs (1%)", tq["seconds"],
      tq["calls"] * H20["collective_latency_us"] * 1e-6 + tq["bus_bytes"] / (H20["intra_node_gbs"] * 1e9),
      0.01)
check(f"PROJECTED a2a all exposed (blocking: nothing hides the dispatch), of a {t_g:.2f} s step",
      tq["exposed_s"], tq["seconds"], 1e-12)

print("# 6. ZeRO-3 on an MoE")
def buckets(units, n, size=40_000_000, one_per_unit=False):  # parallel/buckets.h
    out, hi = [], len(units) - 1
    while hi >= 0:
        lo = hi
        while not one_per_unit and lo > 0 and sum(units[lo:hi + 1]) < size:
            lo -= 1
        b = sum(units[lo:hi + 1])
        out.append(n * math.ceil(b / n))
        hi = lo - 1
    return [b for b in out if b > 0]  # empty buckets never communicate
layer, model = params(Q)
Vh, hq = Q["vocab-size"] * h_q, h_q
dense = [Vh] + [layer["total"] - layer["experts"]] * L_q + [Vh + hq]
experts_local = [0] + [layer["experts"] // ep_q] * L_q + [0]
z3 = buckets([Vh] + [layer["total"]] * L_q + [Vh + hq], 40, one_per_unit=True)
def dp_op(p, group, op):
    return next(c for c in p["comm"] if c["group"] == group and c["op"] == op)
z = plan("q_z3")
check("ZeRO-3 units padded to dp 40: sum P_u = Psi + 56", sum(z3), psi + 56)
check(f"ZeRO-3: all-gather per step = mb x 2 B x (2 sum P_u - P_emb) (every unit forward and "
      "backward, the lookup's backward needs no weights)",
      (dp_op(z, "dp", "all-gather")["payload_bytes"], dp_op(z, "dp", "all-gather")["calls"]),
      (mb * 2 * (2 * sum(z3) - z3[-1]), mb * (2 * len(z3) - 1)))
check("ZeRO-3: reduce-scatter per step = mb x 2 B x sum P_u",
      dp_op(z, "dp", "reduce-scatter")["payload_bytes"], mb * 2 * sum(z3))
bd, be = buckets(dense, 40), buckets(experts_local, 40 // ep_q)
check(f"ep 8 + ZeRO-1: dp all-gather once a step, 2 B x the dense buckets {sum(bd)} (Psi_d padded to dp 40)",
      (dp_op(gp, "dp", "all-gather")["payload_bytes"], dp_op(gp, "dp", "all-gather")["calls"]),
      (2 * sum(bd), len(bd)))
check(f"ep 8 + ZeRO-1: edp all-gather once a step, 2 B x the rank's 16 experts' buckets {sum(be)} (edp 5)",
      (dp_op(gp, "edp", "all-gather")["payload_bytes"], dp_op(gp, "edp", "all-gather")["calls"]),
      (2 * sum(be), len(be)))
z3_ag = dp_op(z, "dp", "all-gather")["payload_bytes"]
ep_ag = dp_op(gp, "dp", "all-gather")["payload_bytes"] + dp_op(gp, "edp", "all-gather")["payload_bytes"]
record("parameter all-gather bytes per step, ZeRO-3 / (ep 8 + ZeRO-1)", z3_ag > 100 * ep_ag,
       f"{z3_ag} / {ep_ag} = {z3_ag / ep_ag:.0f}")
check("total / active parameters: bytes ZeRO-3 gathers per FLOP, against a dense model's",
      round(psi / psi_active, 3), round(model["total"] / model["active"], 3))
z3_all = z3_ag + dp_op(z, "dp", "reduce-scatter")["payload_bytes"]
ep_all = a2a["payload_bytes"] + 2 * ep_ag  # + the reduce-scatters, the same bytes as the gathers
record("bytes per step and rank: ZeRO-3's gathers + scatters vs ep 8's all-to-all + dp/edp",
       z3_all > ep_all, f"{z3_all} vs {ep_all} (x {z3_all / ep_all:.2f})")
where = [c["intra_node"] for c in z["time"]["comm"] if c["group"] == "dp" and c["op"] != "all-reduce"]
check("ZeRO-3's dp gathers and scatters cross nodes (dp 40 spans 5 nodes); the a2a does not",
      (where, tq["intra_node"]), ([False, False], True))
check("ZeRO-3 without ep fits too (plan's fit)", z["fit"]["fits"], True)
f = plan("q_z1")["fit"]
check("ZeRO-1 without ep does not fit in 96 GiB (why ZeRO-3 tempts)",
      (f["fits"], f["peak_bytes"] > f["capacity_bytes"]), (False, True))
tz, tzpe = z["time"]["step_s"], plan("q_z3_pe")["time"]["step_s"]
record("PROJECTED ZeRO-3 step: grouped, per expert (the same: bound by the gathers)",
       abs(tzpe / tz - 1) < 0.01, f"{tz:.2f} s, {tzpe:.2f} s")
top = z["time"]["sensitivity"][0]
check(f"ZeRO-3: what moves it most is inter_node_gbs (+{100 * top['step_change']:.1f}%)", top["key"],
      "inter_node_gbs")
for n in ("q_z3", "q_z3_pe"):
    tc = {c["op"]: c["seconds"] for c in plan(n)["time"]["comm"] if c["group"] == "dp"}
    st = plan(n)["time"]["step_s"]
    check(f"{n}: step = all-gather {tc['all-gather']:.1f} s + reduce-scatter {tc['reduce-scatter']:.1f} s "
          "(+ under 1%): bound by ZeRO-3's collectives", st, tc["all-gather"] + tc["reduce-scatter"], 0.01)
record("PROJECTED: ZeRO-3 per expert > ep 8 per expert > ep 8 grouped", tzpe > t_pe > t_g,
       f"{tzpe:.2f} s > {t_pe:.2f} s > {t_g:.2f} s")
finish()
EOF
