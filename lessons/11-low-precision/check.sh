#!/usr/bin/env bash
# lessons/11-low-precision/check.sh: asserts the numbers of lessons/11-low-precision/README.md.
#   bash lessons/11-low-precision/check.sh [TRAINER]     (default: the repository's ./trainer)
# Part 1 reads `--number-formats --json` and holds each format to its layout's closed forms,
# computed here (and fp16's to Python's struct 'e', an encoder sharing no code with the
# trainer). Part 2 trains the tiny GPT 20 steps in fp32, fp16 unscaled, fp16 at a static 1024
# and fp16 with Megatron's dynamic scaler, and checks the underflow fractions, the losses and
# the dynamic scaler's skipped steps against 1 + (32 - k).
# Prints "N passed, M failed" last; exits non-zero on a failure.
source "$(dirname "$0")/../lib.sh"  # trainer, root, work, give_up

fail_run() { echo "FAIL  trainer $*: see $work"; echo "0 passed, 1 failed"; trap - EXIT; exit 1; }
"$trainer" --number-formats --json > "$work/formats.json" 2> "$work/formats.err" ||
  fail_run --number-formats --json
tiny=(--config configs/models/tiny.toml --train-iters 20 --log-interval 20 --report-interval 0
      --log-fp16-underflow)
train() {  # NAME FLAGS...: --metrics-jsonl into $work/NAME.jsonl
  local name=$1; shift
  "$trainer" "${tiny[@]}" "$@" --metrics-jsonl "$work/$name.jsonl" > "$work/$name.log" 2>&1 ||
    fail_run "${tiny[@]}" "$@"
}
train fp32
train unscaled --fp16 --loss-scale 1
train static --fp16 --loss-scale 1024
train dynamic --fp16

python3 - "$work" <<'PY'
import json, math, struct, sys
work = sys.argv[1]
sys.path.insert(0, "lessons")  # the repository root is the working directory (lib.sh)
from checks import check, finish  # noqa: E402

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
finish()
PY
