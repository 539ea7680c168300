#!/usr/bin/env bash
# lessons/06-context-parallel/check.sh: asserts the numbers of lessons/06-context-parallel/README.md.
#   bash lessons/06-context-parallel/check.sh [TRAINER]   (default: the repository's ./trainer)
# Trains lessons/06-context-parallel/model.toml 2 steps on one rank and under `mpirun -np 2`
# and `-np 4` (cp 2 and 4, each comm type, and the contiguous layout), plans each
# (--plan --json), and checks against the closed forms: each cp rank's causal pairs and
# attention FLOPs under both layouts, the cp group's calls, payload and bus bytes per layer
# and per step (plan and measured), the activations at s/cp (plan and measured) and the
# losses against the single-rank run. Then plans the Qwen3-30B-A3B preset at s = 49152 on
# 64 H20 at cp 1, 2, 4, 8 with each comm type: activations, bytes, FLOPs, the fit, and the
# projected exposed cp time (printed; only its direction is checked).
# Prints "N passed, M failed" last; exits non-zero on a failure.
source "$(dirname "$0")/../lib.sh"  # trainer, root, work, give_up
command -v mpirun >/dev/null || give_up "mpirun not found (apt-get install mpich)"
export OPENBLAS_NUM_THREADS=1  # one thread per rank: 4 ranks on 2 cores

fail_run() { echo "FAIL  trainer $*: see $work"; echo "0 passed, 1 failed"; trap - EXIT; exit 1; }
config=(--config lessons/06-context-parallel/model.toml)
# name, ranks, flags...: a run's --metrics-jsonl and its --plan --json
run() {
  local name=$1 np=$2; shift 2
  local launch=(); [ "$np" -gt 1 ] && launch=(mpirun -np "$np")
  "${launch[@]}" "$trainer" "${config[@]}" "$@" --metrics-jsonl "$work/$name.jsonl" \
    > "$work/$name.log" 2>&1 || fail_run "${launch[*]} ${config[*]} $*"
  "$trainer" "${config[@]}" "$@" --plan --json --world-size "$np" > "$work/$name.json" ||
    fail_run "${config[*]} $* --plan --json --world-size $np"
}
run cp1 1
for cp in 2 4; do
  for type in p2p all_gather a2a; do
    run "cp${cp}_$type" "$cp" --cp "$cp" --cp-comm-type "$type"
  done
  run "cp${cp}_contiguous" "$cp" --cp "$cp" --cp-layout contiguous
done

# The course's run: Qwen3-30B-A3B, 49,152-token sequences, 64 H20 (8 nodes of 8).
qwen=(--config configs/models/qwen3-30b-a3b.toml --world-size 64 --ep 8 --zero-stage 1
      --moe-token-dispatcher-type alltoall --seq-length 49152 --global-batch-size 64
      --hardware h20)
for cp in 1 2 4 8; do
  for type in p2p all_gather a2a; do
    [ "$cp" = 8 ] && [ "$type" = a2a ] && continue  # refused: 4 query groups (below)
    [ "$cp" = 1 ] && [ "$type" != p2p ] && continue  # nothing exchanged at cp 1
    "$trainer" "${qwen[@]}" --cp "$cp" --cp-comm-type "$type" --plan --json \
      > "$work/qwen_cp${cp}_$type.json" || fail_run "${qwen[*]} --cp $cp --cp-comm-type $type --plan --json"
  done
done
"$trainer" "${qwen[@]}" --cp 8 --cp-comm-type a2a --plan > "$work/qwen_a2a8.log" 2>&1
echo "$?" > "$work/qwen_a2a8.rc"

python3 - "$work" <<'EOF'
import json, os, sys
work = sys.argv[1]
sys.path.insert(0, "lessons")  # the repository root is the working directory (lib.sh)
from checks import check, finish, load, record  # noqa: E402

def plan(name):
    return json.load(open(os.path.join(work, name + ".json")))

# The lesson's model (model.toml): e storage bytes (fp32), b micro batch, k microbatches.
L, h, a, g, f, s, V, b, e, k = 2, 64, 8, 4, 128, 256, 256, 2, 4, 1
d = h // a
FLASH = 14 * d  # flash FLOPs per causal pair and head: forward 4d (QK^T, PV), backward 10d

def pairs(cp, r, layout, s=s):
    """Causal (query, key) pairs per head and sequence that cp rank r computes."""
    if layout == "contiguous":        # rank r holds the r-th s/cp tokens
        n = s // cp
        return r * n * n + n * (n + 1) // 2
    c = s // (2 * cp)                 # zigzag: chunks r and 2cp-1-r of c tokens
    return (2 * cp - 1) * c * c + c * (c + 1)   # = s(s+1)/2cp, whatever r

print("# 1. the layout: each rank's causal pairs and attention FLOPs")
for cp in (2, 4):
    for layout in ("zigzag", "contiguous"):
        p = plan(f"cp{cp}_p2p" if layout == "zigzag" else f"cp{cp}_contiguous")["context_parallel"]
        want = [FLASH * b * a * pairs(cp, r, layout) for r in range(cp)]
        check(f"cp {cp} {layout}: attention FLOPs per rank = 14 d b a x pairs(r)",
              p["attention_flops_per_rank"], want)
        pr = [pairs(cp, r, layout) for r in range(cp)]
        check(f"cp {cp} {layout}: the ranks' pairs add up to the sequence's s(s+1)/2 = {s * (s + 1) // 2}",
              sum(pr), s * (s + 1) // 2)
        if layout == "zigzag":
            check(f"cp {cp} zigzag: every rank s(s+1)/2cp pairs", pr, [s * (s + 1) // (2 * cp)] * cp)
        n = s // cp
        mx, mn, mean = max(pr), min(pr), s * (s + 1) / (2 * cp)
        want_ratio = 1 + 2 * (cp - 1) * n / (n + 1) if layout == "contiguous" else 1.0
        check(f"cp {cp} {layout}: max/min = {'1 + 2(cp-1) n/(n+1)' if layout == 'contiguous' else '1'}"
              f" = {want_ratio:.4f}", mx / mn, want_ratio, 1e-12)
        want_mean = ((2 * cp - 1) * n + 1) / (cp * n + 1) if layout == "contiguous" else 1.0
        check(f"cp {cp} {layout}: max/mean = {'((2cp-1)n + 1)/(cp n + 1)' if layout == 'contiguous' else '1'}"
              f" = {want_mean:.4f}", mx / mean, want_mean, 1e-12)
        # measured: the FLOP counter of every rank; what is not attention is the same on every
        # rank (each holds s/cp tokens), so the ranks differ by exactly their attention FLOPs
        _, steps = load(work, f"cp{cp}_p2p" if layout == "zigzag" else f"cp{cp}_contiguous")
        ranks = {x["cp_rank"]: x["hardware_flops"] for x in steps[-1]["ranks"]}
        rest = [ranks[r]["measured"] - L * k * want[r] for r in range(cp)]
        check(f"cp {cp} {layout}: measured FLOPs per rank == plan; less L k x attention(r), equal",
              ([ranks[r]["measured"] == ranks[r]["predicted"] for r in range(cp)], len(set(rest))),
              ([True] * cp, 1))
for cp in (2, 4):  # the rest (qkv, proj, MLP, head of s/cp tokens) does not depend on the layout
    N = b * s // cp   # forward + backward = 3 x forward: 6 N x (the layers' weights + the head's)
    want = 6 * N * (L * (h * (a + 2 * g) * d + a * d * h + 2 * h * f + f * h) + h * V)
    for name in (f"cp{cp}_p2p", f"cp{cp}_contiguous"):
        r0 = load(work, name)[1][-1]["ranks"][0]["hardware_flops"]["measured"]
        check(f"{name}: rank 0's measured FLOPs less attention = 6N[L(h(a+2g)d + adh + 3hf) + hV]",
              r0 - L * k * plan(name)["context_parallel"]["attention_flops_per_rank"][0], want)
n = s // 4
steps_c4 = {x["cp_rank"]: x["hardware_flops"]["measured"] for x in load(work, "cp4_contiguous")[1][-1]["ranks"]}
check("cp 4 contiguous: measured rank r+1 - rank r = L k 14dba n^2",
      [steps_c4[r + 1] - steps_c4[r] for r in range(3)], [L * k * FLASH * b * a * n * n] * 3)

print("# 2. bytes per layer: p2p ring, all_gather, a2a")
def layer_exchanges(cp, kind):
    """{op: (calls, payload, bus)} of one layer and microbatch (plan/context_parallel.h)."""
    n = s // cp
    K = b * g * n * d * e           # one of K, V of the rank's tokens
    KV, Q = 2 * K, b * a * n * d * e
    frac = (cp - 1) / cp            # bus factor of all-gather, reduce-scatter, all-to-all
    if kind == "p2p":               # forward (cp-1) KV; backward (cp-1) KV + (cp-1) dKV
        return {"send/recv": (3 * (cp - 1), 3 * (cp - 1) * KV, 3 * (cp - 1) * KV)}
    if kind == "all_gather":        # K, V gathered forward and backward; dK, dV scattered
        return {"all-gather": (4, 2 * cp * KV, frac * 2 * cp * KV),
                "reduce-scatter": (2, cp * KV, frac * cp * KV)}
    return {"all-to-all": (8, 4 * Q + 2 * KV, frac * (4 * Q + 2 * KV))}  # q,k,v,o; dO,dq,dk,dv

def bus(cp, kind):
    return sum(x[2] for x in layer_exchanges(cp, kind).values())

for cp in (2, 4):
    n = s // cp
    KV, Q = 2 * b * g * n * d * e, b * a * n * d * e
    for kind in ("p2p", "all_gather", "a2a"):
        p = plan(f"cp{cp}_{kind}")["context_parallel"]
        got = {}
        for x in p["exchanges_per_layer"]:
            c, pl, bb = got.get(x["op"], (0, 0, 0))
            got[x["op"]] = (c + x["calls"], pl + x["payload_bytes"], bb + x["bus_bytes"])
        check(f"cp {cp} {kind}: one layer's (calls, payload, bus), plan", got, layer_exchanges(cp, kind))
        check(f"cp {cp} {kind}: bus bytes per layer by type = p2p 3(cp-1)KV, all_gather the same, "
              f"a2a (cp-1)/cp (4Q + 2KV)",
              p["bus_bytes_per_layer_by_type"],
              {t: bus(cp, t) for t in ("p2p", "all_gather", "a2a")})
        # measured, every step: the cp group's rows of rank 0's jsonl
        _, steps = load(work, f"cp{cp}_{kind}")
        want = {op: (L * k * c, L * k * pl, L * k * bb) for op, (c, pl, bb) in layer_exchanges(cp, kind).items()}
        bad = []
        for st in steps:
            meas = {c["group"] + " " + c["op"]: c for c in st["comm"]}
            rows = {key.split(" ", 1)[1]: c for key, c in meas.items() if key.startswith("cp ")}
            got = {op: tuple(c[x]["measured"] for x in ("calls", "payload_bytes", "bus_bytes"))
                   for op, c in rows.items()}
            pred = {op: tuple(c[x]["predicted"] for x in ("calls", "payload_bytes", "bus_bytes"))
                    for op, c in rows.items()}
            if got != want or pred != want:
                bad.append((st["step"], got, pred))
        check(f"cp {cp} {kind}: measured cp traffic per step == plan == L k x the layer's", bad, [])
    psi = plan(f"cp{cp}_p2p")["params"]["total"]
    ar = [(c["calls"], c["payload_bytes"]) for c in plan(f"cp{cp}_p2p")["comm"] if c["group"] == "dp_cp"]
    check(f"cp {cp}: gradients summed over dp x cp: one all-reduce of 4 Psi", ar, [(1, 4 * psi)])
    ratio = bus(cp, "p2p") / bus(cp, "a2a")
    check(f"cp {cp}: p2p / a2a bus = 3cp / (2(1 + a/g)) = {3 * cp / (2 * (1 + a / g)):.2f}",
          ratio, 3 * cp / (2 * (1 + a / g)), 1e-12)

print("# 3. activations per rank at cp 1, 2, 4")
def layer_bytes(cp):  # the llama layer's saved tensors at N = b s/cp tokens (flash, fp32)
    N = b * s // cp   # norm outs, resid1, out: 4h; q, ctx: 2ad; k, v: 2gd; fc1 2f, act f
    return N * (e * (4 * h + 2 * a * d + 2 * g * d + 3 * f) + 4 * a + 8)  # lse 4a, rstd 2 x 4
def activations(cp, kind="p2p"):  # + the embedding's output and the head's (rstd, d(xf))
    N = b * s // cp
    extra = L * b * a * (s // cp) * d * e if kind == "a2a" and cp > 1 else 0  # O head-split
    return N * h * e + L * layer_bytes(cp) + (4 * N + N * h * e) + extra
runs = ["cp1"] + [f"cp{cp}_{t}" for cp in (2, 4) for t in ("p2p", "all_gather", "a2a", "contiguous")]
for name in runs:
    p, steps = load(work, name)
    cp = p["parallel"]["context_parallel"]
    kind = name.split("_")[1] if cp > 1 else "p2p"
    bad = []
    for st in steps:  # every memory category, every collective, every rank's FLOPs and ledger
        bad += [f"step {st['step']} {c}" for c, v in st["memory"].items()
                if c != "total" and v["measured"] != v["predicted"]]
        bad += [f"step {st['step']} {c['group']} {c['op']} {x}" for c in st["comm"]
                for x in ("calls", "payload_bytes", "bus_bytes") if c[x]["measured"] != c[x]["predicted"]]
        for rk in st.get("ranks", []):
            bad += [f"step {st['step']} rank {rk['rank']} {c}" for c, v in rk["memory"].items()
                    if v["measured"] != v["predicted"]]
            if rk["hardware_flops"]["measured"] != rk["hardware_flops"]["predicted"]:
                bad.append(f"step {st['step']} rank {rk['rank']} FLOPs")
    check(f"{name}: every category, collective, rank measured == predicted", bad, [])
    if name.endswith("all_gather") or name.endswith("a2a"):
        continue  # same layer as p2p; their activations are checked below
    check(f"{name}: per layer N[e(4h + 2ad + 2gd + 3f) + 4a + 8], N = bs/cp = {b * s // cp}",
          p["activations"]["per_layer_bytes"], layer_bytes(cp))
    check(f"{name}: Korthikanti's 34 (s/cp) b h (the paper's GPT layer, for scale)",
          p["activations"]["korthikanti"]["closed_form_bytes"], 34 * (s // cp) * b * h)
for cp in (1, 2, 4):
    for kind in (("p2p",) if cp == 1 else ("p2p", "all_gather", "a2a")):
        name = "cp1" if cp == 1 else f"cp{cp}_{kind}"
        m = load(work, name)[1][-1]["memory"]["activations"]
        check(f"{name}: activations = 2Nhe + 4N + L x layer{' + L Q' if kind == 'a2a' and cp > 1 else ''}"
              f", plan and measured", (m["predicted"], m["measured"]), (activations(cp, kind),) * 2)
base = activations(1)
check("activations at cp 2, 4 = cp 1's / cp (p2p, all_gather)",
      [activations(cp) * cp for cp in (2, 4)], [base, base])
ref = [st["loss"] for st in load(work, "cp1")[1]]
for name in runs[1:]:
    got = [st["loss"] for st in load(work, name)[1]]
    check(f"{name}: losses == the single-rank run's (rel 1e-5; {', '.join(f'{x:.4f}' for x in ref)})",
          all(abs(x - y) <= 1e-5 * abs(y) for x, y in zip(got, ref)) and len(got) == len(ref) == 2, True)

print("# 4. Qwen3-30B-A3B at s = 49152 on 64 H20 (--plan)")
Lq, hq, aq, gq, dq, E, topk, fe, Vq, sq, eq = 48, 2048, 32, 4, 128, 128, 8, 768, 151936, 49152, 2
GiB = 2**30
def q(cp, kind="p2p"):
    return plan(f"qwen_cp{cp}_{kind}")
def moe_layer(cp):  # every layer is MoE; M = k N routed rows (dropless: the plan's exact count)
    N = sq // cp
    M = topk * N
    # N: norm outs, resid1, out 4h; q, q_raw, ctx 3ad; k, v, k_raw 3gd; fp32 rstd of the two
    # norms, of q and k per head, lse per head, router logits E
    # M: expert input h, fc1 2f_e, act f_e; 7 fp32/int32 routing vectors
    # and the aux loss's E int32 counts (one group: aux_loss), whole on every cp rank
    return N * (eq * (4 * hq + 3 * aq * dq + 3 * gq * dq) + 4 * (2 + 2 * aq + gq + E)) + \
        M * (eq * (hq + 3 * fe) + 28) + 4 * E
def act_q(cp, kind="p2p"):
    N = sq // cp
    extra = Lq * N * aq * dq * eq if kind == "a2a" and cp > 1 else 0
    return N * hq * eq + Lq * moe_layer(cp) + 4 * N + N * hq * eq + extra
states = q(1)["memory"][0]["resident"]["total"]
for cp in (1, 2, 4, 8):
    for kind in ("p2p", "all_gather", "a2a"):
        if (cp == 8 and kind == "a2a") or (cp == 1 and kind != "p2p"):
            continue
        p = q(cp, kind)
        mem, kq = p["memory"][0], p["batch"]["microbatches_per_rank"]
        tag = f"cp {cp} {kind}"
        if True:
            act = p["activations"]
            held = act["per_microbatch_bytes"] - sum(x["bytes"] for x in act["embedding"] + act["head"])
            if kind != "a2a":
                check(f"{tag}: one MoE layer (the plan's microbatch less embedding and head, over L) "
                      f"= {moe_layer(cp) / GiB:.2f} GiB", held / Lq, moe_layer(cp))
            check(f"{tag}: activations = 2Nhe + 4N + L x MoE layer{' + L Q' if kind == 'a2a' and cp > 1 else ''}"
                  f" = {act_q(cp, kind) / GiB:.2f} GiB", mem["activations"], act_q(cp, kind))
            check(f"{tag}: model states {states / GiB:.2f} GiB whatever cp (ZeRO-1 over dp x cp = 64)",
                  mem["resident"]["total"], states)
            fit = p["fit"]
            check(f"{tag}: fit line: peak {fit['peak_bytes'] / GiB:.2f} GiB "
                  f"{'<=' if fit['fits'] else '>'} 96 GiB",
                  (fit["fits"], fit["capacity_bytes"], fit["peak_bytes"] == mem["total"]),
                  (mem["total"] <= 96 * GiB, 96 * GiB, True))
        if kind != "p2p" or cp == 1:
            continue
        # per-rank attention FLOPs, and the cp group's bytes per layer by type
        want_f = 14 * dq * 1 * aq * (sq * (sq + 1) // (2 * cp))
        check(f"{tag}: attention FLOPs per rank 14 d b a s(s+1)/2cp = {want_f / 1e12:.2f} T",
              p["context_parallel"]["attention_flops_per_rank"], [want_f] * cp)
        N = sq // cp
        KV, Q = 2 * N * gq * dq * eq, N * aq * dq * eq
        want_b = {"p2p": 3 * (cp - 1) * KV, "all_gather": 3 * (cp - 1) * KV}
        if gq % cp == 0:
            want_b["a2a"] = (cp - 1) / cp * (4 * Q + 2 * KV)
        check(f"{tag}: bus per layer, MiB: " + ", ".join(f"{t} {v / 2**20:.0f}" for t, v in want_b.items()),
              p["context_parallel"]["bus_bytes_per_layer_by_type"], want_b)
        ov = p["context_parallel"]["overlap"]
        step_flops = 4 * dq * aq * (sq // (2 * cp)) * (sq // cp)
        check(f"{tag}: a ring step attends 4 d b a (s/2cp)(s/cp) = {step_flops / 1e12:.3f} T FLOPs "
              f"while KV = {KV / 2**20:.0f} MiB travel: hidden at >= {KV * 148e12 / step_flops / 1e9:.2f} GB/s",
              (ov["step_flops"], ov["bytes"], round(ov["needed_gbs"], 6)),
              (step_flops, KV, round(KV * 148e12 / step_flops / 1e9, 6)))
        # the MoE layers' other cp traffic: the aux loss's E int32 counts, one all-reduce per layer
        ar = [c for c in p["comm"] if c["group"] == "cp" and c["op"] == "all-reduce"]
        check(f"{tag}: cp all-reduce of the aux loss's counts: L k calls of 4E bytes",
              [(c["calls"], c["payload_bytes"]) for c in ar], [(Lq * kq, Lq * kq * 4 * E)])
check("cp 1: no context-parallel section (nothing exchanged)", "context_parallel" in q(1), False)
check("cp 1's attention per layer, 14 d a s(s+1)/2 = 69.27 T = 2 x cp 2's",
      2 * q(2)["context_parallel"]["attention_flops_per_rank"][0], 14 * dq * aq * sq * (sq + 1) // 2)
for cp in (2, 4):
    by = q(cp)["context_parallel"]["bus_bytes_per_layer_by_type"]
    check(f"cp {cp}: p2p / a2a = 3cp/(2(1 + a/g)) = cp/6", by["p2p"] / by["a2a"], cp / 6, 1e-12)
ring = [c for c in q(4)["comm"] if c["group"] == "cp" and c["op"] == "send/recv"]
N4 = sq // 4
check("cp 4 p2p: ring bus per step L k 3(cp-1) KV = 40.5 GiB",
      [(c["calls"], c["bus_bytes"]) for c in ring], [(48 * 4 * 9, 48 * 4 * 9 * 2 * N4 * gq * dq * eq)])
counts = Lq * 4 * E  # the aux loss's counts, the same at every cp
check("activations less the aux loss's L 4E counts halve with each doubling of cp (p2p)",
      [(q(cp)["memory"][0]["activations"] - counts) * cp for cp in (2, 4, 8)],
      [q(1)["memory"][0]["activations"] - counts] * 3)
check("activations.moe_per_layer_bytes = the MoE layer above, at every cp",
      [q(cp)["activations"]["moe_per_layer_bytes"] for cp in (1, 2, 4, 8)],
      [moe_layer(cp) for cp in (1, 2, 4, 8)])
rc = int(open(os.path.join(work, "qwen_a2a8.rc")).read())
msg = open(os.path.join(work, "qwen_a2a8.log")).read()
check("cp 8 a2a refused: 4 query groups do not divide by 8", (rc != 0, "query groups" in msg), (True, True))

print("# 4. projected on H20 (a model, not a measurement; printed, direction only)")
# T: the cp exchanges' time, calls x latency + bus / bandwidth (NVLink, 450 GB/s, in a node);
# the ring's exposed part max(T/calls, T - A(cp-1)/cp), A the rank's attention time; all_gather
# and a2a block: exposed = T. (The MoE aux loss's cp all-reduce, about 1-4 ms, is left out.)
print(f"  {'cp':>2} {'type':<10} {'T s':>8} {'exposed s':>10} {'ring rule':>10} {'attention s':>12} "
      f"{'step s':>7} {'T/step':>8}  fit")
for cp in (1, 2, 4, 8):
    for kind in ("p2p", "all_gather", "a2a"):
        if (cp == 8 and kind == "a2a") or (cp == 1 and kind != "p2p"):
            continue
        t = q(cp, kind)["time"]
        rows = [c for c in t["comm"] if c["group"] == "cp" and c["op"] != "all-reduce"]
        sec, exp = sum(c["seconds"] for c in rows), sum(c["exposed_s"] for c in rows)
        calls = sum(c["calls"] for c in rows)
        rule = max(sec / calls, sec - t["attention_s"] * (cp - 1) / cp) if kind == "p2p" and cp > 1 else sec
        fit = q(cp, kind)["fit"]
        print(f"  {cp:>2} {kind if cp > 1 else '-':<10} {sec:>8.4f} {exp:>10.5f} {rule:>10.5f} "
              f"{t['attention_s']:>12.2f} {t['step_s']:>7.2f} {100 * sec / t['step_s']:>7.2f}%  "
              f"{'fits' if fit['fits'] else 'does NOT fit'} ({fit['peak_bytes'] / GiB:.2f} GiB)")
t = q(4)["time"]
print("  what moves it (cp 4 p2p; the step if one figure were 2x worse): " +
      ", ".join(f"{x['key']} +{100 * x['step_change']:.1f}%" for x in t["sensitivity"][:4]))
def exposed(cp, kind):
    return sum(c["exposed_s"] for c in q(cp, kind)["time"]["comm"]
               if c["group"] == "cp" and c["op"] != "all-reduce")
for cp in (2, 4, 8):
    check(f"cp {cp}: the ring exposes less than all_gather (same bus bytes, blocking)",
          exposed(cp, "p2p") < exposed(cp, "all_gather"), True)
finish()
EOF
