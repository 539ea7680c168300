#!/usr/bin/env bash
# lessons/11-low-precision/check.sh: asserts the numbers of lessons/11-low-precision/README.md.
#   bash lessons/11-low-precision/check.sh [TRAINER]     (default: the repository's ./trainer)
# Part 1 reads `--number-formats --json` and holds each format to its layout's closed forms,
# computed here (and fp16's to Python's struct 'e', an encoder sharing no code with the
# trainer). Part 2 trains the tiny GPT 20 steps in fp32, fp16 unscaled, fp16 at a static 1024
# and fp16 with Megatron's dynamic scaler, and checks the underflow fractions, the losses and
# the dynamic scaler's skipped steps against 1 + (32 - k). Part 3 plans Llama-70B (tp 8, pp 4,
# dp 2) at ZeRO 0-3 in fp32, bf16, with bf16 Adam moments and in FP8 (delayed, tensorwise,
# blockwise), and checks the bytes of model state per parameter, FP8's ledger rows and its amax
# all-reduces against their formulas. Part 3b holds the README's table of each precision at
# ZeRO-1 (model state, activations, peak, fit) to the plans, and its prose's claims. Part 4
# trains 4 steps without warm-up in FP8 (delayed, tensorwise) with --log-fp8-scaling, holds
# every delayed scale to (max / the previous step's amax) / 2^0 and every tensorwise scale to
# max / its amax, finds the step where proj's dY amax jumps most, and checks that delayed
# scaling saturates there and tensorwise nowhere. Part 5 trains 20 steps in bf16 and the three
# FP8 recipes, draws the 7 runs' loss curves with scripts/plot and checks the PNG renders.
# Parts 4 and 5 read the README's rows and hold them to the runs (no measured number is typed
# here), each number within the spread that OpenBLAS's choice of kernel for the CPU gives (near,
# below).
# Part 6 (qwen3_fp8.py) does for Qwen3-30B-A3B (ep 8) what part 3 does for the 70B, the MoE
# experts in FP8 too, and what part 3b does with section 6's table of each precision.
# Prints "N passed, M failed" last; exits non-zero on a failure.
source "$(dirname "$0")/../lib.sh"  # trainer, root, work, give_up
export OPENBLAS_NUM_THREADS=1

fail_run() { echo "FAIL  trainer $*: see $work"; echo "0 passed, 1 failed"; trap - EXIT; exit 1; }
"$trainer" --number-formats --json > "$work/formats.json" 2> "$work/formats.err" ||
  fail_run --number-formats --json
tiny=(--config configs/models/tiny.toml --train-iters 20 --log-interval 20 --report-interval 0
      --log-fp16-underflow)
train() {  # NAME FLAGS...: --metrics-jsonl into $work/NAME.jsonl, the exit status into NAME.rc
  local name=$1; shift
  "$trainer" "${tiny[@]}" "$@" --metrics-jsonl "$work/$name.jsonl" > "$work/$name.log" 2>&1
  echo $? > "$work/$name.rc"
}
trained() {  # NAME...: each run exited 0, else the first that did not ends the script
  for name in "$@"; do [ "$(cat "$work/$name.rc")" = 0 ] || fail_run "$name (see $name.log)"; done
}
llama70=(--config configs/models/llama-70b.toml --plan --json --world-size 64 --tp 8 --pp 4
         --hardware h100-sxm --global-batch-size 64)  # bf16: the preset's
bf16_moments=(--use-precision-aware-optimizer --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16)
tensorwise=(--fp8-format hybrid --fp8-recipe tensorwise)
blockwise=(--fp8-format e4m3 --fp8-recipe blockwise)
plan_to() {  # NAME FLAGS...: the plan into $work/NAME.json; a refusal ends the script
  local name=$1; shift
  "$trainer" "$@" > "$work/$name.json" 2> "$work/$name.err" || fail_run "$@"
}
for z in 0 1 2 3; do
  plan_to z${z}_bf16 "${llama70[@]}" --zero-stage $z
  plan_to z${z}_fp32 "${llama70[@]}" --zero-stage $z --bf16=false  # the preset's bf16 off
  plan_to z${z}_fp8 "${llama70[@]}" --zero-stage $z --fp8-format hybrid
  plan_to z${z}_tensorwise "${llama70[@]}" --zero-stage $z "${tensorwise[@]}"
  plan_to z${z}_blockwise "${llama70[@]}" --zero-stage $z "${blockwise[@]}"
  [ $z = 0 ] && continue
  plan_to z${z}_moments "${llama70[@]}" --zero-stage $z "${bf16_moments[@]}"
done
plan_to z1_fp16 "${llama70[@]}" --zero-stage 1 --fp16  # over the preset's bf16
plan_to z1_fp8pg "${llama70[@]}" --zero-stage 1 --fp8-format hybrid --fp8-param-gather
plan_to z1_blockwise--fp8-param-gather "${llama70[@]}" --zero-stage 1 "${blockwise[@]}" \
  --fp8-param-gather
"$trainer" "${llama70[@]}" --zero-stage 0 "${bf16_moments[@]}" > /dev/null 2> "$work/z0_moments.err"
echo $? > "$work/z0_moments.rc"
"$trainer" "${llama70[@]}" --zero-stage 1 --bf16 --fp16 > /dev/null 2> "$work/z1_bf16_fp16.err"
echo $? > "$work/z1_bf16_fp16.rc"  # both typed: refused
# part 6: Qwen3-30B-A3B (lessons/11-low-precision/qwen3_fp8.py checks them), each precision
qwen3=(--config configs/models/qwen3-30b-a3b.toml --plan --json --world-size 64 --ep 8
       --zero-stage 1 --hardware h100-sxm)
plan_to qwen3_bf16 "${qwen3[@]}"
plan_to qwen3_fp32 "${qwen3[@]}" --bf16=false
plan_to qwen3_fp16 "${qwen3[@]}" --fp16
plan_to qwen3_moments "${qwen3[@]}" "${bf16_moments[@]}"
plan_to qwen3_fp8 "${qwen3[@]}" --fp8-format hybrid
plan_to qwen3_tensorwise "${qwen3[@]}" "${tensorwise[@]}"
plan_to qwen3_blockwise "${qwen3[@]}" "${blockwise[@]}"
# two runs at a time, one thread each (2 cores)
train fp32 & train unscaled --fp16 --loss-scale 1 & wait
train static --fp16 --loss-scale 1024 & train dynamic --fp16 & wait
# part 4: delayed scaling's lag, measured (tiny GPT, no warm-up: the first updates are full-size)
lag=(--lr-warmup-iters 0 --train-iters 4 --fp8-format hybrid --log-fp8-scaling)
train lag_delayed "${lag[@]}" & train lag_tensorwise "${lag[@]}" --fp8-recipe tensorwise & wait
# part 5: the loss curves (the tiny GPT's 20 steps in each precision), drawn by scripts/plot
train bf16 --bf16 & train fp8_blockwise --fp8-format hybrid --fp8-recipe blockwise & wait
train fp8_delayed --fp8-format hybrid & train fp8_tensorwise --fp8-format hybrid \
  --fp8-recipe tensorwise & wait
trained fp32 unscaled static dynamic lag_delayed lag_tensorwise bf16 fp8_blockwise fp8_delayed \
  fp8_tensorwise
curves=()
for c in fp32 bf16 static dynamic fp8_delayed fp8_tensorwise fp8_blockwise; do
  curves+=("$work/$c.jsonl")
done
scripts/plot --out "$work/png" --loss "${curves[@]}" --label fp32 bf16 "fp16 S=1024" \
  "fp16 dynamic" "FP8 delayed" "FP8 tensorwise" "FP8 blockwise" > /dev/null 2> "$work/plot.err"
echo $? > "$work/plot.rc"

python3 - "$work" <<'PY'
import json, math, os, struct, sys, zlib
work = sys.argv[1]
sys.path.insert(0, "lessons")  # the repository root is the working directory (lib.sh)
from checks import check, finish, record  # noqa: E402

print("part 1: the formats (trainer --number-formats)")
formats = {f["name"]: f for f in json.load(open(f"{work}/formats.json"))["formats"]}
layouts = {"fp32": (8, 23), "bf16": (8, 7), "fp16": (5, 10), "e4m3": (4, 3), "e5m2": (5, 2)}
for name, (e, m) in layouts.items():
    f, bias = formats[name], 2 ** (e - 1) - 1
    top = 448.0 if name == "e4m3" else (2 - 2.0 ** -m) * 2.0 ** (2 ** e - 2 - bias)
    check(f"{name}: max, min normal 2^(1-bias), min subnormal 2^(1-bias-m), epsilon 2^-m",
          (f["max"], f["min_normal"], f["min_subnormal"], f["epsilon"]),
          (top, 2.0 ** (1 - bias), 2.0 ** (1 - bias - m), 2.0 ** -m))
check("only E4M3 has no infinity", [n for n, f in formats.items() if not f["infinity"]], ["e4m3"])
check("fp16's max is struct 'e''s largest finite code, 0x7bff",
      formats["fp16"]["max"], struct.unpack("<e", b"\xff\x7b")[0])

print("part 2: fp16's underflow and the loss scale (tiny GPT, step 20)")
def steps(name):
    rows = [json.loads(l) for l in open(f"{work}/{name}.jsonl") if l.strip()]
    return [r for r in rows if r.get("type", "step") == "step"]
last = {n: steps(n)[-1] for n in ("fp32", "unscaled", "static", "dynamic")}
u = {n: r["fp16_underflow"] for n, r in last.items()}
check("gradients counted: the tiny GPT's 437,760 parameters", u["fp32"]["elements"], 437760)
check("fp32: 0.078% would flush to zero in fp16", u["fp32"]["unscaled_zero"], 0.00078, tol=0.05)
check("fp32: 19.1% would be subnormal in fp16", u["fp32"]["unscaled_subnormal"], 0.191, tol=0.02)
check("fp16 S=1: 19.2% stored below 2^-14", u["unscaled"]["stored_below_normal"], 0.192, tol=0.02)
check("fp16 S=1: about 104 gradients exactly zero (437,656 nonzero)",
      u["unscaled"]["nonzero"], 437656, tol=0.0001)
check("fp16 S=1024: 0.10% stored below 2^-14", u["static"]["stored_below_normal"], 0.0010, tol=0.1)
check("fp16 S=1024: unscaled fractions are fp32's", (round(u["static"]["unscaled_zero"], 4),
      round(u["static"]["unscaled_subnormal"], 2)), (0.0008, 0.19))
for n in ("unscaled", "static"):
    check(f"{n}: step-20 loss is fp32's 3.366 within 1e-3", last[n]["loss"], last["fp32"]["loss"],
          tol=1e-3)
check("fp32 step-20 loss 3.366", round(last["fp32"]["loss"], 2), 3.37)
dyn = steps("dynamic")
first = next(r for r in dyn if not r["skipped"])
k = int(math.log2(first["loss_scale"]))
check("dynamic: first update at 2^k, k = 19 (step 15)", (k, first["step"]), (19, 15))
check("dynamic: 1 + (32 - k) = 14 steps skipped before it", first["step"] - 1, 1 + (32 - k))
check("dynamic: step 16 overflows at 2^19 and halves at once (hysteresis refilled only on growth)",
      [(r["step"], r["skipped"], r["loss_scale"]) for r in dyn[15:17]],
      [(16, True, 2 ** 19), (17, False, 2 ** 18)])
check("dynamic: 15 of 20 steps skipped", sum(r["skipped"] for r in dyn), 15)
check("dynamic: step-20 loss 5.25, 15 updates behind fp32", round(last["dynamic"]["loss"], 2), 5.25)

# Parts 3, 3b, 4, 5 and 6 hold the README's tables to the plans and runs: a row is found by its
# first cell, and each number in it must be the plan's or the run's, printed as the README
# prints it (no number of a table is typed here).
readme = open("lessons/11-low-precision/README.md").read()
def row(first, part):
    """The cells after the first of the README row whose first cell is `first`, in part N."""
    text = next((p for p in readme.split("\n## ") if p.startswith(f"{part}.")), "")
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and cells[0] == first:
            return cells[1:]
    return None
# The README's rows are one machine's runs, and a run's last bits depend on the CPU: OpenBLAS
# picks its sgemm kernel for the CPU it finds, and kernels sum in different orders. fp32 and bf16
# absorb that; an FP8 cast amplifies it (a value that crosses a code boundary moves by an eighth
# of itself in E4M3), and 20 steps carry it on. Measured: the same runs under each of OpenBLAS's
# x86 kernels (OPENBLAS_CORETYPE = Haswell, SkylakeX, Cooperlake, Zen, Sandybridge, Prescott; the
# README is SkylakeX's) spread their step-20 losses by 0.0003 in fp32, bf16 and fp16 and by 0.003
# in FP8 (3.3674 to 3.3703 delayed: +0.00% to +0.09% of bf16); at step 3 of part 4 the amaxes and
# scales by 4%, delayed's saturated count from 570 to 641, and at step 1 the flushed counts by
# 0.4% (delayed) and from 0 to 573 (tensorwise, of 786,432). So each cell is held to the run
# within a tolerance above that spread: wide enough for each of those kernels, and still the
# README's number, not a range.
def near(name, cells, want):
    """The README's cells against the run's values. Each entry of want is a string (the cell,
    exactly) or (value, tolerance): the cell's number within the tolerance of value, an absolute
    amount or, written "6%", relative; for a cell "n of total", value is (n, total), total exact."""
    def holds(cell, entry):
        if isinstance(entry, str):
            return cell == entry
        value, tolerance = entry
        number, _, total = cell.replace(",", "").rstrip("%").partition(" of ")
        if isinstance(value, tuple):
            value, want_total = value
            if total != str(want_total):
                return False
        bound = (float(tolerance[:-1]) / 100 * abs(value) if isinstance(tolerance, str)
                 else tolerance)
        return abs(float(number) - value) <= bound
    good = cells is not None and len(cells) == len(want) and all(map(holds, cells, want))
    return record(name, good, f"{cells}" + ("" if good else f" (want {want})"))

print("part 3: the 70B's ledger in fp32, bf16, with bf16 moments, in FP8 (tp 8, pp 4, dp 2)")
def plan(name):
    return json.load(open(f"{work}/{name}.json"))
def per_param(p):
    m = p["memory"][0]
    r = m["resident"]
    return sum(r[k] for k in ("params", "grads", "master_params", "optimizer_states")) / m["param_count"]
N = 2
recipes = ("fp8", "tensorwise", "blockwise")  # FP8 delayed (hybrid), tensorwise, blockwise
for z in range(4):
    for k, name in ((12, "bf16"), (8, "moments")) + tuple((12, r) for r in recipes):
        if z == 0 and name == "moments":
            continue
        want = [2 + 2 + k, 2 + 2 + k / N, 2 + (2 + k) / N, (2 + 2 + k) / N][z]
        check(f"ZeRO-{z} {name}: bytes of model state per parameter",
              per_param(plan(f"z{z}_{name}")), want)
    # fp32: 4-byte weights and gradients, no separate master, the two fp32 moments (8)
    check(f"ZeRO-{z} fp32: bytes of model state per parameter, 4 + 4 + 8 sharded alike",
          per_param(plan(f"z{z}_fp32")), [4 + 4 + 8, 4 + 4 + 8 / N, 4 + 12 / N, 16 / N][z])
bpp = lambda p: f"{per_param(p):.2f}".rstrip("0").rstrip(".")  # as the README prints it
formulas = ["2 + 2 + k", "2 + 2 + k/N", "2 + (2 + k)/N", "(2 + 2 + k)/N"]
for z in range(4):
    cells = [bpp(plan(f"z{z}_{n}")) if z or n != "moments" else "refused"  # refused: below
             for n in ("bf16", "moments") + recipes]
    near(f"README's ZeRO-{z} row: bf16, bf16 moments, FP8 delayed, tensorwise, blockwise",
         row(str(z), 3), [formulas[z]] + cells)
check("bf16 moments at ZeRO 0: refused, exit 2",
      (open(f"{work}/z0_moments.rc").read().strip(), "needs the distributed optimizer" in open(f"{work}/z0_moments.err").read()),
      ("2", True))
b, f8 = plan("z1_bf16"), plan("z1_fp8")
Nt, h, f, a, g, d, t, layers = 4096, 8192, 28672, 64, 8, 128, 8, 20
linears = [(h, (a + 2 * g) * d // t), (a * d // t, h), (h, 2 * f // t), (f // t, h)]  # (in, out)
A = max(Nt * max(i, o) for i, o in linears)
B = max(max(o * i, Nt * i) for i, o in linears)
history = 4 * (1 + 1) * 3 * 4 * layers
check("fp8_operands = A + B + 2 factors = 92,274,696 B; fp8_state = delayed histories = 1,920 B;"
      " workspace unchanged",
      (f8["memory"][0]["fp8_operands"], f8["memory"][0]["fp8_state"],
       f8["memory"][0]["workspace"] - b["memory"][0]["workspace"]), (A + B + 2 * 4, history, 0))
check("A = N_t max(in, out), B = max(out in, N_t in)", (A, B), (33554432, 58720256))
rows = lambda p: {(c["group"], c["op"]): c for c in p["comm"]}
rb, rf = rows(b), rows(f8)
check("FP8's amax all-reduces: 2 more calls on tp and on dp, 960 B in all on each",
      [(rf[(grp, "all-reduce")]["calls"] - rb[(grp, "all-reduce")]["calls"],
        rf[(grp, "all-reduce")]["payload_bytes"] - rb[(grp, "all-reduce")]["payload_bytes"]) for grp in ("tp", "dp")],
      [(2, 4 * 3 * 4 * layers)] * 2)
pg = plan("z1_fp8pg")
gather = lambda p: rows(p)[("dp", "all-gather")]["payload_bytes"]
psi = f8["memory"][0]["param_count"]
F = layers * sum(i * o for i, o in linears)
check("ZeRO-1's all-gather: 2 Psi = 4,345,954,304 B, Psi = 2,172,977,152",
      (gather(f8), psi), (2 * psi, 2172977152))
check("F = 20 x 106,954,752 = 2,139,095,040 dense weight elements", F, 2139095040)
check("--fp8-param-gather: 2,207,186,944 B (50.8%), 327,680 B above 2 Psi - F",
      (gather(pg), round(100 * gather(pg) / gather(f8), 1), gather(pg) - (2 * psi - F)),
      (2207186944, 50.8, 327680))
check("its staging 160,505,856 B (comm_buffers: 3 messages), fp8_state 12 x 80 = 960 B more",
      (pg["memory"][0]["comm_buffers"] - f8["memory"][0]["comm_buffers"],
       pg["memory"][0]["fp8_state"] - f8["memory"][0]["fp8_state"]), (160505856, 12 * 4 * layers))
bw, bwpg = plan("z1_blockwise"), plan("z1_blockwise--fp8-param-gather")
blocks = layers * sum(-(-i // 128) * -(-o // 128) for i, o in linears)  # 128 x 128, rounded up
check("blockwise: 6,528 blocks per layer (qkv 10 x 64, proj 64 x 8, fc1 56 x 64, fc2 64 x 28)",
      (blocks // layers, blocks), (6528, 130560))
check("blockwise --fp8-param-gather: the same 2,207,186,944 B; its amaxes 4 B per block on dp "
      "(522,240 B), 12 B of fp8_state per block (1,566,720 B)",
      (gather(bwpg), rows(bwpg)[("dp", "all-reduce")]["payload_bytes"] -
       rows(bw)[("dp", "all-reduce")]["payload_bytes"],
       bwpg["memory"][0]["fp8_state"] - bw["memory"][0]["fp8_state"]),
      (2207186944, 4 * blocks, 12 * blocks))
x = f8["fp8"]
print("      projected (H100 SXM, not asserted): linears' GEMMs %.2f s -> %.2f s at the FP8 peak, casts %.2f s;"
      " step %.2f s -> %.2f s (%+.1f%%)" % (x["gemm_s"], x["gemm_fp8_s"], x["cast_s"], x["step_s"],
      x["step_fp8_s"], 100 * (x["step_fp8_s"] / x["step_s"] - 1)))

print("part 3b: the 70B at ZeRO-1 in each precision (fp32, bf16, fp16, bf16 moments, FP8 x 3)")
PRECISIONS = {"fp32": "fp32", "bf16": "bf16", "fp16": "fp16", "bf16, bf16 moments": "moments",
              "FP8 delayed (hybrid)": "fp8", "FP8 tensorwise (hybrid)": "tensorwise",
              "FP8 blockwise (e4m3)": "blockwise"}  # the README's row -> the plan's file
def table_rows(part, header):
    """The first cells of the rows of part N's table whose header's first cell is `header`."""
    text = next((p for p in readme.split("\n## ") if p.startswith(f"{part}.")), "")
    firsts, inside = [], False
    for line in text.splitlines():
        first = line.strip().strip("|").split("|")[0].strip() if line.startswith("|") else None
        if first is None:
            inside = False
        elif inside and not first.startswith("---"):
            firsts.append(first)
        elif first == header:
            inside = True
    return firsts
def precision_table(part, prefix, model):
    """The README's table of part N against the plans PREFIX{name}, and what its prose derives
    from every row: fp16 plans as bf16, fp32 stores each saved activation in 4 bytes, FP8 moves
    neither model state nor activations. Returns the plans and the names of the activations
    bf16 holds in 4 bytes (the norm statistics apart)."""
    gib = lambda b: f"{b / 2 ** 30:.2f}"
    check(f"README's {model} table: its rows, in order", table_rows(part, "precision"),
          list(PRECISIONS))
    pl = {n: plan(prefix + n) for n in PRECISIONS.values()}
    for label, name in PRECISIONS.items():
        p = pl[name]
        near(f"README's {model} {label} row: bytes/param, activations, peak, fits",
             row(label, part), [bpp(p), gib(p["memory"][0]["activations"]),
                                gib(p["fit"]["peak_bytes"]), "yes" if p["fit"]["fits"] else "no"])
    m = {n: p["memory"][0] for n, p in pl.items()}
    check(f"{model}: the capacity is the H100's 80 GiB", pl["bf16"]["fit"]["capacity_bytes"],
          80 * 2 ** 30)
    check(f"{model} fp16: the plan's memory and fit are bf16's, to the byte",
          (m["fp16"] == m["bf16"], pl["fp16"]["fit"] == pl["bf16"]["fit"]), (True, True))
    saved = lambda p: [e for v in p["activations"].values() if isinstance(v, list) for e in v]
    shape = lambda p: [(e["name"], e["elements"]) for e in saved(p)]
    check(f"{model} fp32: bf16's saved tensors (names, elements), every one 4 bytes",
          (shape(pl["fp32"]) == shape(pl["bf16"]),
           {e["bytes_per_element"] for e in saved(pl["fp32"])}),
          (True, {4}))
    for r in recipes:
        check(f"{model} FP8 {r}: bf16's model state and activations; the peak moves by "
              "fp8_operands + fp8_state",
              (m[r]["resident"] == m["bf16"]["resident"], m[r]["activations"],
               pl[r]["fit"]["peak_bytes"] - pl["bf16"]["fit"]["peak_bytes"]),
              (True, m["bf16"]["activations"], m[r]["fp8_operands"] + m[r]["fp8_state"]))
    four = sorted({e["name"] for e in saved(pl["bf16"])
                   if e["bytes_per_element"] == 4 and not e["norm_statistic"]})
    return pl, four
pl, four = precision_table("3b", "z1_", "70B")
check("70B: fp32 in bf16 too, the norm statistics and attention's log-sum-exp only", four,
      ["attn.lse"])
check("--bf16 and --fp16 both typed: refused, exit 2",
      (open(f"{work}/z1_bf16_fp16.rc").read().strip(),
       "--bf16 and --fp16 are exclusive: give one" in open(f"{work}/z1_bf16_fp16.err").read()),
      ("2", True))
fp32 = [plan(f"z{z}_fp32")["fit"] for z in range(4)]
check("fp32: misses the 80 GiB by 1.48 GiB at ZeRO-1; ZeRO-2 77.84 GiB and ZeRO-3 74.59 fit",
      (f"{(fp32[1]['peak_bytes'] - fp32[1]['capacity_bytes']) / 2 ** 30:.2f}",
       [(f"{x['peak_bytes'] / 2 ** 30:.2f}", x["fits"]) for x in fp32[2:]]),
      ("1.48", [("77.84", True), ("74.59", True)]))
moved = [pl[r]["fit"]["peak_bytes"] - pl["bf16"]["fit"]["peak_bytes"] for r in recipes]
check("FP8 moves the peak by 0.09 GiB: 92,276,616 B delayed, 92,274,704 tensorwise, 94,371,840 "
      "blockwise", (moved, {f"{x / 2 ** 30:.2f}" for x in moved}),
      ([A + B + 8 + history, A + B + 8 + 8, 94371840], {"0.09"}))
bwm = pl["blockwise"]["memory"][0]
check("blockwise: no fp8_state; its factors, one per 1 x 128 tile of both operands, 2 MiB",
      (bwm["fp8_state"], bwm["fp8_operands"] - (A + B), 2 * Nt * h // 128 * 4),
      (0, 2 ** 21, 2 ** 21))

print("part 4: why delayed scaling lags (tiny GPT, no warm-up, FP8 hybrid, --log-fp8-scaling)")
f32 = lambda x: struct.unpack("<f", struct.pack("<f", x))[0]
kinds, roles = ("qkv", "proj", "fc1", "fc2"), ("input", "weight", "output_grad")
top = lambda role: 57344.0 if role == "output_grad" else 448.0  # hybrid: E5M2 gradients
d, t = steps("lag_delayed"), steps("lag_tensorwise")
sc = lambda r, k, role: r["fp8_scaling"][k][role]
check("delayed, step 1: every scale is 1 (Transformer Engine's start: no history yet)",
      {sc(d[0], k, r)["scale"] for k in kinds for r in roles}, {1.0})
# margin 0, history 1, most_recent (Megatron's defaults): scale_t = fp32(max / amax_(t-1))
check("delayed: each step's scale = (max / the previous step's amax) / 2^0 in fp32, 12 tensors",
      [(r1["step"], k, ro) for r0, r1 in zip(d, d[1:]) for k in kinds for ro in roles
       if sc(r1, k, ro)["scale"] != f32(top(ro) / sc(r0, k, ro)["amax"])], [])
check("tensorwise: each step's scale = max / its own amax in fp32, 12 tensors",
      [(r["step"], k, ro) for r in t for k in kinds for ro in roles
       if sc(r, k, ro)["scale"] != f32(top(ro) / sc(r, k, ro)["amax"])], [])
check("tensorwise: no value saturates, any step, any tensor",
      sum(sc(r, k, ro)["saturated"] for r in t for k in kinds for ro in roles), 0)
amax = [sc(r, "proj", "output_grad")["amax"] for r in d]
J = max(range(2, len(d) + 1), key=lambda s: amax[s - 1] / amax[s - 2])  # the largest jump
dj, tj = sc(d[J - 1], "proj", "output_grad"), sc(t[J - 1], "proj", "output_grad")
check(f"proj's dY: its amax jumps most at step {J}, x{amax[J - 1] / amax[J - 2]:.2f}; delayed "
      f"scales it by max / step {J - 1}'s amax", dj["scale"], f32(57344.0 / amax[J - 2]))
check(f"delayed, step {J}: amax x scale = {dj['amax'] * dj['scale']:.0f} is past E5M2's 57344, "
      "and values saturate", (dj["amax"] * dj["scale"] > 57344.0, dj["saturated"] > 0),
      (True, True))
spread = "6%"  # amaxes and scales (4% measured); saturated counts 15% (570 to 641 of 583)
want = {"delayed": [str(J), (amax[J - 2], spread), (dj["amax"], spread), (dj["scale"], spread),
                    (f32(57344.0 / dj["amax"]), spread),
                    ((dj["saturated"], dj["elements"]), "15%")],
        "tensorwise": [str(J), (sc(t[J - 2], "proj", "output_grad")["amax"], spread),
                       (tj["amax"], spread), (tj["scale"], spread),
                       (f32(57344.0 / tj["amax"]), spread),
                       ((tj["saturated"], tj["elements"]), "15%")]}  # 0: exactly 0
for name, cells in want.items():
    near(f"README's {name} row (step, amax before and at the jump, scale used, max / amax, "
         "saturated)", row(name, 4), cells)
q1d, q1t = sc(d[0], "qkv", "output_grad"), sc(t[0], "qkv", "output_grad")
near("README's step-1 row: qkv's dY flushed at scale 1 (delayed) and at max / amax (tensorwise)",
     row("qkv's output gradient dY", 4), [((q1d["flushed"], q1d["elements"]), "1%"),
     (100 * q1d["flushed"] / q1d["elements"], 1),
     ((q1t["flushed"], q1t["elements"]), 0.001 * q1t["elements"])])

print("part 5: the loss curves (tiny GPT, 20 steps; scripts/plot)")
def png(path):
    """'' when path is a PNG whose image data inflates to its IHDR's rows, else what is wrong."""
    data = open(path, "rb").read() if os.path.exists(path) else b""
    if data[:8] != b"\x89PNG\r\n\x1a\n" or data[12:16] != b"IHDR" or data[-8:-4] != b"IEND":
        return "not a PNG"
    w, h, depth, ctype = struct.unpack(">IIBB", data[16:26])
    idat, at = b"", 8
    while at < len(data):
        n, kind = struct.unpack(">I4s", data[at:at + 8])
        idat += data[at + 8:at + 8 + n] if kind == b"IDAT" else b""
        at += 12 + n
    row_bytes = 1 + (w * {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}.get(ctype, 4) * depth + 7) // 8
    return "" if w and h and len(zlib.decompress(idat)) == h * row_bytes else "bad image data"
check("scripts/plot --loss (7 runs) exits 0", (open(f"{work}/plot.rc").read().strip(),
      open(f"{work}/plot.err").read()), ("0", ""))
check("the regenerated loss.png renders", png(f"{work}/png/loss.png"), "")
committed = "lessons/11-low-precision/loss.png"
check("the committed loss.png renders and is under 100 KB",
      (png(committed), os.path.getsize(committed) < 100 * 1024), ("", True))
runs = {"fp32": "fp32", "bf16": "bf16", "fp16 S=1024": "static", "fp16 dynamic": "dynamic",
        "FP8 delayed": "fp8_delayed", "FP8 tensorwise": "fp8_tensorwise",
        "FP8 blockwise": "fp8_blockwise"}
b20 = steps("bf16")[-1]["loss"]
for label, name in runs.items():
    l20 = steps(name)[-1]["loss"]
    fp8 = label.startswith("FP8")  # 0.003 and 0.09 points measured; the others 0.0003, 0.005
    near(f"README's {label} row: step-20 loss, relative to bf16", row(label, 5),
         [(l20, 0.004 if fp8 else 0.001), (100 * (l20 / b20 - 1), 0.12 if fp8 else 0.01)])

sys.path.insert(0, "lessons/11-low-precision")  # part 6, its own file: Qwen3-30B-A3B in FP8
import qwen3_fp8  # noqa: E402
qwen3_fp8.run(work)
pl, four = precision_table("6", "qwen3_", "Qwen3")
check("Qwen3: fp32 in bf16 too, besides the norm statistics and attention's log-sum-exp, the "
      "router's logits and gates (fp32) and its routing indices (int32)",
      four, sorted(["attn.lse", "moe.logits", "moe.gates", "moe.expert_gates", "moe.experts",
                    "moe.aux_counts", "moe.row_pair", "moe.slots", "moe.source_pair",
                    "moe.local_slots"]))
act = {n: pl[n]["memory"][0]["activations"] for n in ("fp32", "bf16")}
check("Qwen3: fp32's activations a little less than twice bf16's (1.98 to 2)",
      1.98 < act["fp32"] / act["bf16"] < 2, True)
finish()
PY
