#!/usr/bin/env bash
# tests/mpi/fp16.sh: --fp16 training end to end on the CPU backend (model/loss_scaler.h,
# model/grad_underflow.h).
#   bash tests/mpi/fp16.sh ./trainer [filter]
#   dynamic    the tiny preset from Megatron's 2^32: the first steps overflow (the loss
#              gradient alone is ~2^25 at that scale, past fp16's 65504) and are skipped,
#              the scale backs off (the second overflow first: hysteresis 2) until it fits,
#              and the run goes on; per step, the scale used is the one the previous step
#              left, the scaler's state equals megatron-core's DynamicGradScaler.update
#              (transcribed below; tests/test_loss_scaler.cpp holds the C++ to megatron-core
#              itself) fed the run's own overflows, a step is skipped exactly when its
#              gradient norm is not finite, and the learning rate is the fp32 run's at the
#              updates made (a skipped step does not move the schedule); the overflows do not
#              count towards --max-skipped-steps (the run finishes, exit 0); 2 ranks (ZeRO-1)
#              reproduce the single-rank trajectory;
#   static     --loss-scale 1024: every step's loss within 1e-3 of the fp32 run's (fp16
#              keeps 11 significant bits: finer than bf16's 8, whose bound is 2e-2; measured 3e-5);
#   underflow  --log-fp16-underflow's fractions equal a count made here of the last step's
#              gradients (--save-tensors), each divided by the scale and rounded to fp16 by
#              Python's struct 'e' (IEEE binary16, round half to even: an encoder that shares
#              no code with kernels/float16.h), in an fp32 run and in an fp16 run at 4096; at
#              --loss-scale 1 a value stored in fp16 is its own unscaled value (none flushes,
#              the subnormal ones are the stored ones).
#   logs       the scaler and the underflow where people and TensorBoard read them: each step
#              line's "loss scale (growth, hysteresis)" column and its "skipped" note are the
#              step's --metrics-jsonl record; the event files' loss-scale, its trackers and the
#              fp16-underflow-* scalars equal the record's (read back by the `tensorboard`
#              package, as tests/scripts/megatron_llama.sh does; skipped, said so, without it).
source "$(dirname "$0")/lib.sh"  # trainer, filter, work, run, finish

tiny=(--config configs/models/tiny.toml --log-interval 100 --report-interval 0)

verdict() {  # name args...: the python on stdin judges, counted
  local name=$1 out; shift
  if out=$(python3 - "$work" "$@"); then
    passed=$((passed + 1)); echo "ok    $name: $out"
  else
    failed=$((failed + 1)); echo "FAIL  $name: $out"
  fi
}
wanted() { case "$1" in *"$filter"*) return 0 ;; esac; return 1; }

if wanted dynamic; then
  run fp32-30 1 "${tiny[@]}" --train-iters 30 || echo "fp32 run failed"
  run dynamic 1 "${tiny[@]}" --train-iters 30 --fp16 || echo "fp16 run failed"
  run dynamic-dp2 2 "${tiny[@]}" --train-iters 30 --fp16 --zero-stage 1 || echo "fp16 dp2 run failed"
  verdict dynamic dynamic dynamic-dp2 <<'EOF'
import json, struct, sys
work, names = sys.argv[1], sys.argv[2:]
f32 = lambda x: struct.unpack("f", struct.pack("f", x))[0]
def steps(name):
    return [r for r in map(json.loads, open(f"{work}/{name}.jsonl")) if r.get("type") == "step"]
def megatron(found, state, window=1000, hysteresis=2, min_scale=1.0):
    # megatron/core/optimizer/grad_scaler.py DynamicGradScaler.update (growth 2, back-off 0.5)
    scale, growth, hyst = state
    if found:
        growth, hyst = 0, hyst - 1
        if hyst <= 0:
            scale = max(f32(scale * 0.5), min_scale)
    else:
        growth += 1
        if growth == window:
            growth, hyst, scale = 0, hysteresis, f32(scale * 2)
    return scale, growth, hyst
problems = []
lr32 = [r["lr"] for r in steps("fp32-30")]
runs = {}
for name in names:
    rows = steps(name)
    state, updates, overflows = (2.0 ** 32, 0, 2), 0, 0
    for r in rows:
        s = r["step"]
        if r["loss_scale"] != state[0]:
            problems.append(f"{name} step {s}: scale {r['loss_scale']} used, the previous step left {state[0]}")
        overflow = r["grad_norm"] is None
        if r["skipped"] != overflow or r["loss"] is None:
            problems.append(f"{name} step {s}: skipped {r['skipped']}, grad_norm {r['grad_norm']}, loss {r['loss']}")
        if r["lr"] != lr32[updates]:
            problems.append(f"{name} step {s}: lr {r['lr']} is not the fp32 run's at update {updates + 1} ({lr32[updates]})")
        state = megatron(overflow, state)
        got = r["loss_scaler"]
        if (got["scale"], got["growth_tracker"], got["hysteresis_tracker"]) != state:
            problems.append(f"{name} step {s}: scaler {got} != megatron-core's {state}")
        updates += not overflow
        overflows += overflow
    runs[name] = ([r["skipped"] for r in rows], [r["loss_scale"] for r in rows])
    if len(rows) != 30 or overflows < 8 or rows[-1]["skipped_steps"] != overflows:
        problems.append(f"{name}: {len(rows)} steps, {overflows} overflows (want 30 steps, >= 8 overflows)")
    finite = [r["loss"] for r in rows if not r["skipped"]]
    if not finite or finite[-1] >= finite[0]:
        problems.append(f"{name}: the loss did not fall ({finite[:1]} -> {finite[-1:]})")
if len(runs) == 2 and runs[names[0]] != runs[names[1]]:
    problems.append(f"{names[1]}'s overflows and scales differ from {names[0]}'s")
if problems:
    print("; ".join(problems[:4])); sys.exit(1)
rows = steps(names[0])
print(f"{overflows} overflows from 2^32 to {rows[-1]['loss_scale']:g}, scaler == megatron-core's "
      f"on all 30 steps, lr the fp32 run's at the updates made, dp2 ZeRO-1 alike, "
      f"loss {rows[-1]['loss']:.3f}")
EOF
fi

if wanted static; then
  run fp32-10 1 "${tiny[@]}" --train-iters 10 || echo "fp32 run failed"
  run static 1 "${tiny[@]}" --train-iters 10 --fp16 --loss-scale 1024 || echo "fp16 run failed"
  verdict static fp32-10 static <<'EOF'
import json, sys
work, ref, name = sys.argv[1:4]
def steps(n):
    return [r for r in map(json.loads, open(f"{work}/{n}.jsonl")) if r.get("type") == "step"]
a, b = steps(ref), steps(name)
worst = max(abs(x["loss"] - y["loss"]) / abs(x["loss"]) for x, y in zip(a, b))
bad = len(a) != 10 or len(b) != 10 or worst > 1e-3 or any(r["skipped"] or r["loss_scale"] != 1024 for r in b)
print(f"{'FAIL ' if bad else ''}10 steps at scale 1024, worst loss rel {worst:.1e} of fp32's")
sys.exit(1 if bad else 0)
EOF
fi

if wanted underflow; then
  run under-fp32 1 "${tiny[@]}" --train-iters 3 --log-fp16-underflow || echo "fp32 run failed"
  run under-fp16 1 "${tiny[@]}" --train-iters 3 --fp16 --loss-scale 4096 --log-fp16-underflow || echo "fp16 run failed"
  run under-one 1 "${tiny[@]}" --train-iters 3 --fp16 --loss-scale 1 --log-fp16-underflow || echo "fp16 run failed"
  verdict underflow under-fp32 under-fp16 under-one <<'EOF'
import json, struct, sys
sys.path.insert(0, "tests/mpi")
from compare_runs import read_tensor_file
work, names = sys.argv[1], sys.argv[2:]
f32 = lambda x: struct.unpack("f", struct.pack("f", x))[0]
def fp16(x):  # IEEE binary16, round half to even; past 65520 struct refuses: infinity
    try:
        return struct.unpack("e", struct.pack("e", x))[0]
    except OverflowError:
        return float("inf")
problems, said = [], []
for name in names:
    last = [r for r in map(json.loads, open(f"{work}/{name}.jsonl")) if r.get("type") == "step"][-1]
    got = last["fp16_underflow"]
    inv = f32(1.0 / last.get("loss_scale", 1.0))
    n = nonzero = zero = sub = below = 0
    for key, g in read_tensor_file(f"{work}/{name}.bin").items():
        if not key.startswith("grad."):
            continue
        for x in g:
            n += 1
            if x == 0:
                continue
            nonzero += 1
            below += abs(x) < 2.0 ** -14
            u = fp16(f32(x * inv))
            zero += u == 0
            sub += u != 0 and abs(u) < 2.0 ** -14
    want = {"elements": n, "nonzero": nonzero, "unscaled_zero": zero / nonzero,
            "unscaled_subnormal": sub / nonzero, "stored_below_normal": below / nonzero}
    if got != want:
        problems.append(f"{name}: {got} != counted {want}")
    said.append(f"{name} zero {zero / nonzero:.2%} subnormal {sub / nonzero:.2%}")
    if name == "under-one" and (zero != 0 or sub != below):
        problems.append(f"{name}: fp16 values at scale 1 moved ({zero} flushed, {sub} vs {below} subnormal)")
if problems:
    print("; ".join(problems)); sys.exit(1)
print(", ".join(said) + " (of the nonzero gradients, unscaled), as counted from the saved ones")
EOF
fi

if wanted logs; then
  # from 2^16, growing every 2 clean steps with hysteresis 1: an overflow within 8 steps
  run logs 1 "${tiny[@]}" --log-interval 1 --train-iters 8 --fp16 --initial-loss-scale 65536 \
    --loss-scale-window 2 --hysteresis 1 --log-fp16-underflow --tensorboard-dir "$work/logs-tb" ||
    echo "fp16 run failed"
  source "$(dirname "$0")/../test_python.sh"  # python: the test venv's
  verdict logs "$python" <<'EOF'
import json, math, re, struct, subprocess, sys
work, python = sys.argv[1], sys.argv[2]
rows = {r["step"]: r for r in map(json.loads, open(f"{work}/logs.jsonl")) if r.get("type") == "step"}
lines = {}
for line in open(f"{work}/logs.log"):
    m = re.match(r"\s*(\d+)/8\s", line)
    if m:
        lines[int(m.group(1))] = line
problems = []
for s, r in rows.items():
    sc = r["loss_scaler"]
    want = f"2^{int(math.log2(r['loss_scale']))} ({sc['growth_tracker']}, {sc['hysteresis_tracker']})"
    if want not in lines.get(s, ""):
        problems.append(f"step {s}: the line has no '{want}': {lines.get(s, '').strip()}")
    if r["skipped"] != ("skipped: gradient overflow" in lines.get(s, "")):
        problems.append(f"step {s}: skipped {r['skipped']}, the line says otherwise")
skipped = sum(r["skipped"] for r in rows.values())
if len(rows) != 8 or not skipped:
    problems.append(f"{len(rows)} steps, {skipped} skipped (want 8, an overflow)")
said = f"8 step lines == the records (scale, trackers, {skipped} skipped)"
tb = subprocess.run([python, "tests/mpi/tensorboard_scalars.py", f"{work}/logs-tb"],
                    capture_output=True, text=True)
if "No module named 'tensorboard'" in tb.stderr:
    said += f"; skip TensorBoard's reader: no tensorboard package in {python}"
else:
    f32 = lambda x: struct.unpack("f", struct.pack("f", x))[0]
    scalars = json.loads(tb.stdout) if tb.returncode == 0 else {}
    tags = {"loss-scale": lambda r: r["loss_scale"],
            "loss-scale-growth-tracker": lambda r: r["loss_scaler"]["growth_tracker"],
            "loss-scale-hysteresis-tracker": lambda r: r["loss_scaler"]["hysteresis_tracker"]}
    for key in ("unscaled_zero", "unscaled_subnormal", "stored_below_normal"):
        tags["fp16-underflow-" + key.replace("_", "-")] = lambda r, k=key: r["fp16_underflow"][k]
    for tag, of in tags.items():
        got = {int(s): v for s, v in scalars.get(tag, {}).items()}
        if got != {s: f32(of(r)) for s, r in rows.items()}:
            problems.append(f"TensorBoard's {tag} {got} is not the records'")
    said += f"; TensorBoard's {len(tags)} scaler and underflow scalars == the records"
if problems:
    print("; ".join(problems[:4])); sys.exit(1)
print(said)
EOF
fi
finish
