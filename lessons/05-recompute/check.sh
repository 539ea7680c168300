#!/usr/bin/env bash
# lessons/05-recompute/check.sh: asserts the numbers of this lesson's README.
#   bash lessons/05-recompute/check.sh [TRAINER]   (default: the repository's ./trainer)
# Trains 3 steps on one rank under each recompute option (and, for flash attention, none and
# selective core_attn), plans each (--plan --json), checks the README's formulas against the
# plan and the ledger, the FLOP counts and HFU/MFU, that every option reproduces the losses
# of the run without recompute exactly, and the largest micro batch each option fits in the
# README's memory budget (a search over --plan --json --micro-batch-size).
source "$(dirname "$0")/../lib.sh"  # trainer, root, work, give_up
export OPENBLAS_NUM_THREADS=1
config=(--config lessons/05-recompute/model.toml)
sel=(--recompute-granularity selective)
full=(--recompute-granularity full --recompute-method)
run() {  # name, flags...
  local name=$1; shift
  "$trainer" "${config[@]}" "$@" --metrics-jsonl "$work/$name.jsonl" > "$work/$name.log" 2>&1 &&
    "$trainer" "${config[@]}" "$@" --plan --json > "$work/$name.json" 2>&1 ||
    { echo "FAIL  run $name failed"; tail -3 "$work/$name.log"; echo "0 passed, 1 failed"; exit 1; }
}
run none
run sel "${sel[@]}"
run selall "${sel[@]}" --recompute-modules core_attn mlp norm
run u1 "${full[@]}" uniform --recompute-num-layers 1
run u2 "${full[@]}" uniform --recompute-num-layers 2
run u4 "${full[@]}" uniform --recompute-num-layers 4
run b2 "${full[@]}" block --recompute-num-layers 2
run flash --attention flash
run nodrop --hidden-dropout 0 --attention-dropout 0
run flash_sel --attention flash "${sel[@]}"
run selall_b19 "${sel[@]}" --recompute-modules core_attn mlp norm --micro-batch-size 19 \
  --global-batch-size 19 --train-iters 1
run u1_b26 "${full[@]}" uniform --recompute-num-layers 1 --micro-batch-size 26 --global-batch-size 26 \
  --train-iters 1
python3 - "$work" "$trainer" <<'PY'
import json, re, subprocess, sys
from fractions import Fraction
work, trainer = sys.argv[1], sys.argv[2]
sys.path.insert(0, "lessons")  # the repository root is the working directory (lib.sh)
from checks import check, finish, record  # noqa: E402
import checks  # noqa: E402
def load(name):
    return checks.load(work, name)
def per_layer_measured(name):  # the ledger's activations less the embedding's and head's
    plan, steps = load(name)
    act = plan["activations"]
    outside = sum(t["bytes"] for t in act["embedding"]) + sum(t["bytes"] for t in act["head"])
    return (steps[0]["memory"]["activations"]["measured"] - outside) // L
def category(name, cat):  # (plan, measured) peak of a ledger category, rank 0
    plan, steps = load(name)
    return plan["memory"][0][cat], max(s["memory"][cat]["measured"] for s in steps)
L, h, a, s, b, f, V = 4, 64, 4, 32, 2, 256, 256
N, sbh = b * s, s * b * h
stats = 16 * N                 # two norms x (mean, rstd) x fp32
X = sbh * (34 + 5 * a * s // h) + stats   # one layer's saved bytes without recompute
emb, head = 2 * N * h, 8 * N + 2 * N * h  # embedding output; final norm stats + d(xf)

print("# 1. none")
plan, _ = load("none")
check("Korthikanti sbh(34 + 5as/h)", plan["activations"]["korthikanti"]["closed_form_bytes"],
      sbh * (34 + 5 * a * s // h))
check("plan per layer sbh(34 + 5as/h) + 16N", plan["activations"]["per_layer_bytes"], X)
check("measured per layer", per_layer_measured("none"), X)
check("activations peak 2Nh + L X + (8N + 2Nh), plan and measured", category("none", "activations"),
      (emb + L * X + head,) * 2)

print("# 2. selective core_attn")
plan, _ = load("sel")
check("Korthikanti 34sbh", plan["activations"]["korthikanti"]["closed_form_bytes"], 34 * sbh)
check("plan per layer 34sbh + 16N", plan["activations"]["per_layer_bytes"], 34 * sbh + stats)
check("measured per layer", per_layer_measured("sel"), 34 * sbh + stats)
check("saved per layer 5as^2b", plan["activations"]["selective_saved_per_layer_bytes"],
      5 * a * s * s * b)
check("activations peak 2Nh + L (34sbh + 16N) + (8N + 2Nh), plan and measured", category("sel", "activations"),
      (emb + L * (34 * sbh + stats) + head,) * 2)
check("recompute = one layer's P, mask, P' 5as^2b, plan and measured", category("sel", "recompute"),
      (5 * a * s * s * b,) * 2)
plan, _ = load("flash")
check("flash, none: per layer 34sbh + 4bas + 16N, plan", plan["activations"]["per_layer_bytes"],
      34 * sbh + 4 * b * a * s + stats)
check("flash, none: measured per layer", per_layer_measured("flash"),
      34 * sbh + 4 * b * a * s + stats)
plan, _ = load("flash_sel")
check("flash, core_attn saves 4bas, plan", plan["activations"]["selective_saved_per_layer_bytes"],
      4 * b * a * s)
check("flash, core_attn: measured per layer 34sbh + 16N", per_layer_measured("flash_sel"),
      34 * sbh + stats)
check("flash, recompute = the lse 4bas, plan and measured", category("flash_sel", "recompute"),
      (4 * b * a * s,) * 2)
check("flash, core_attn saves 4bas / (34sbh + 4bas + 16N) of a layer",
      f"{100 * 4 * b * a * s / (34 * sbh + 4 * b * a * s + stats):.2f}%", "0.72%")

print("# 3. selective core_attn mlp norm")
plan, _ = load("selall")
check("Korthikanti form marked not applicable", plan["activations"]["korthikanti"]["applicable"], False)
check("plan per layer 14sbh", plan["activations"]["per_layer_bytes"], 14 * sbh)
check("measured per layer", per_layer_measured("selall"), 14 * sbh)
check("activations peak 2Nh + L 14sbh + (8N + 2Nh), plan and measured", category("selall", "activations"),
      (emb + L * 14 * sbh + head,) * 2)
check("recompute = max(2sbh + 8N, 5as^2b, 18sbh + 8N), plan and measured",
      category("selall", "recompute"),
      (max(2 * sbh + 8 * N, 5 * a * s * s * b, 18 * sbh + 8 * N),) * 2)

print("# 4. full")
for n in (1, 2, 4):
    check(f"uniform {n}: activations peak 2Nh L/n + n X, plan and measured",
          category(f"u{n}", "activations"), (2 * N * h * (L // n) + n * X,) * 2)
n = 2
check(f"block {n}: activations peak 2Nh (1 + n) + (L - n) X + (8N + 2Nh), plan and measured",
      category("b2", "activations"), (2 * N * h * (1 + n) + (L - n) * X + head,) * 2)
for name in ("u1", "u2", "u4", "b2"):
    check(f"{name}: category recompute empty, plan and measured", category(name, "recompute"), (0, 0))
states = 16 * load("none")[0]["params"]["per_rank"]  # bf16 params, grads; fp32 master, Adam m, v
for name in ("none", "sel", "selall", "b2", "flash", "flash_sel"):
    p, m = category(name, "total")
    check(f"{name}: peak total, plan == measured", p == m, True)
# full uniform: the activations peak falls in backward, after the loss freed its logits chunk
# (and, when the forward does not reach it too, the 8N bytes of int32 tokens and targets): the
# plan replays the phases, so its total is that moment's, not the sum of the category peaks
logits = min(N, 1024) * V * 6
for name, tokens in (("u1", 0), ("u2", 0), ("u4", 8 * N)):
    p, m = category(name, "total")
    A, W = load(name)[0]["memory"][0]["activations"], load(name)[0]["memory"][0]["workspace"]
    check(f"{name}: peak total 16 Psi + A + W{' - 8N' if tokens else ''}, plan and measured",
          (p, m), (states + A + W - tokens,) * 2)

print("# 5. FLOPs")
Fl = 24 * N * h * h + 4 * b * s * s * h   # one layer's forward (naive: full S x S)
model = 3 * (L * Fl + 2 * N * h * V)
x = Fraction(s, 6 * h) + Fraction(V, 12 * h * L)
recompute = {"none": 0, "sel": L * 2 * b * s * s * h, "selall": L * (2 * b * s * s * h + 2 * N * h * f),
             "u1": L * Fl, "u2": L * Fl, "u4": L * Fl, "b2": 2 * Fl}
ratio = {"none": Fraction(1), "sel": 1 + Fraction(s, 36 * h) / (1 + x),
         "selall": 1 + (Fraction(s, 36 * h) + Fraction(1, 9)) / (1 + x),
         "u1": 1 + (1 + Fraction(s, 6 * h)) / (3 * (1 + x)),
         "b2": 1 + Fraction(2, L) * (1 + Fraction(s, 6 * h)) / (3 * (1 + x))}
ratio["u2"] = ratio["u4"] = ratio["u1"]
check("model FLOPs 3(L(24Nh^2 + 4bs^2h) + 2NhV)", load("none")[0]["flops"]["model_per_step"], model)
check("full: (layers' model + recompute) / layers' model", Fraction(3 * L * Fl + recompute["u1"], 3 * L * Fl),
      Fraction(4, 3))
for name in recompute:
    fl = load(name)[0]["flops"]
    check(f"{name}: recompute FLOPs", (fl["recompute_per_step"], fl["hardware_per_step"] - fl["model_per_step"]),
          (recompute[name],) * 2)
    check(f"{name}: hardware / model = {float(ratio[name]):.4f}",
          Fraction(fl["hardware_per_step"], fl["model_per_step"]), ratio[name])
for name in recompute:
    _, steps = load(name)
    counted = all(st["flops"]["hardware_per_rank_measured"] == st["flops"]["hardware_per_rank_predicted"]
                  for st in steps)
    worst = max(abs(st["hfu"] / st["mfu"] * st["flops"]["model_per_step"] / st["flops"]["hardware_per_step"] - 1)
                for st in steps)
    record(name, counted and worst <= 1e-9,
           f"FLOP counter == plan, HFU/MFU == hardware/model to {worst:.1e}")

print("# 6. bit-identical")
def losses(name):
    return [re.search(r'"loss":([^,}]+)', l).group(1) for l in open(f"{work}/{name}.jsonl")
            if '"type":"step"' in l]  # the last line is the run's summary
for name, ref in [(n, "none") for n in ("sel", "selall", "u1", "u2", "u4", "b2")] + [("flash_sel", "flash")]:
    got, want = losses(name), losses(ref)
    check(f"{name}: losses == {ref}'s ({', '.join(want)})", got == want and len(got) == 3, True)

check("dropout is on: the losses without it differ", losses("nodrop") != losses("none"), True)

print("# 7. largest micro batch in 8.5 MiB (plan)")
budget = 17 * 2**19
options = {"none": [], "sel": ["--recompute-granularity", "selective"],
           "selall": ["--recompute-granularity", "selective", "--recompute-modules", "core_attn", "mlp", "norm"],
           **{f"u{n}": ["--recompute-granularity", "full", "--recompute-method", "uniform",
                        "--recompute-num-layers", str(n)] for n in (1, 2, 4)},
           "b2": ["--recompute-granularity", "full", "--recompute-method", "block", "--recompute-num-layers", "2"]}
def total(flags, mbs):
    out = subprocess.run([trainer, "--config", "lessons/05-recompute/model.toml", *flags, "--plan", "--json",
                          "--micro-batch-size", str(mbs), "--global-batch-size", str(mbs)],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)["memory"][0]["total"]
def largest(flags):  # bench/recompute_ablation.py's search: double, then bisect
    if total(flags, 1) > budget:
        return 0
    lo, hi = 1, 2
    while total(flags, hi) <= budget:
        lo, hi = hi, hi * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if total(flags, mid) <= budget else (lo, mid)
    return lo
mem = load("none")[0]["memory"][0]
check("W = 2(12Nh + 2Nf) + 4bas^2 + 12N + 12 min(N, 1024), logits = min(N, 1024) V (4 + 2)",
      (mem["workspace"], mem["logits"]),
      (2 * (12 * N * h + 2 * N * f) + 4 * b * a * s * s + 12 * N + 12 * min(N, 1024), logits))
want = {"none": 10, "sel": 12, "selall": 19, "u1": 26, "u2": 18, "u4": 11, "b2": 15}
for name, flags in options.items():
    mem = load(name)[0]["memory"][0]
    # per sample, at b = 2; full uniform peaks in backward: no logits (u4: nor the 8N tokens)
    gone = (mem["logits"] + (8 * N if name == "u4" else 0)) if name in ("u1", "u2", "u4") else 0
    c = (sum(mem[k] for k in ("activations", "workspace", "logits")) - gone) // b
    check(f"{name}: c = (A + W + logits at the peak)/b = total(b)/b - 16 Psi/b", c,
          (mem["total"] - states) // b)
    check(f"{name}: b_max (search) = floor((budget - 16 Psi) / c)", (largest(flags), (budget - states) // c),
          (want[name],) * 2)
m = load("selall_b19")[1][0]["memory"]["total"]
check("selall at b 19: measured total == plan <= budget", (m["measured"] == m["predicted"], m["measured"] <= budget),
      (True, True))
m = load("u1_b26")[1][0]["memory"]["total"]
check("u1 at b 26: measured 16 Psi + 26 (A + W)/b == plan <= budget",
      (m["measured"], m["measured"] == m["predicted"] <= budget),
      (states + 26 * sum(load("u1")[0]["memory"][0][k] for k in ("activations", "workspace")) // b, True))
finish()
PY
