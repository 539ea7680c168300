#!/usr/bin/env bash
# tests/mpi/fp8.sh: FP8 training end to end on the CPU backend (parallel/fp8_linear.h,
# parallel/fp8_scaling.h, docs/fp8.md).
#   bash tests/mpi/fp8.sh ./trainer [filter]
#   converge   the tiny preset in --bf16, STEPS steps, in each recipe (delayed, tensorwise,
#              blockwise) and each format (e4m3, hybrid): every run's loss falls as the bf16
#              run's does and follows it. The bound is derived, not tuned: to first order a
#              rounding perturbation moves the loss in proportion to the unit roundoff u of
#              what is rounded. The bf16 run differs from the fp32 run by bf16's u = 2^-8 on
#              every stored tensor; the FP8 run differs from the bf16 run by FP8's u on the
#              linears' GEMM inputs only: E4M3's 2^-4 (16 x bf16's), E5M2's 2^-3 (32 x) for
#              hybrid's gradients. So the worst relative loss difference to bf16 over the steps
#              must stay within (u_fp8 / u_bf16) times the worst relative difference between the
#              bf16 and fp32 runs, measured here in the same call: 16 x for e4m3, 32 x for
#              hybrid. A step's difference can be larger than its first-order share only
#              through a term of order u^2, which this bound leaves out; a run that fails it has
#              an FP8 error that is not rounding (a wrong scale, operand, or transpose).
#              One run is outside that model and checked for what it is instead: delayed
#              scaling with E4M3 gradients starts at scale 1 (Transformer Engine's start), where
#              E4M3's smallest subnormal, 2^-9, is above most of the first step's output
#              gradients: they flush to zero, so step 1's gradient norm is clearly below bf16's
#              (measured 1.00 vs 1.59) and the run trails it (final loss ~2% above at 40 steps); asserted:
#              that step-1 norm below 0.9 x bf16's, and the loss falling. (hybrid's E5M2, down to
#              2^-16, keeps them: why Megatron and TE default to hybrid.)
#   moe        the same with the tiny preset made MoE (4 experts, top 2), 30 steps: fp32, bf16,
#              and delayed hybrid in bf16 within the same derived bound of the bf16 MoE run (the
#              experts' fc1 and fc2 in FP8 besides qkv and proj).
#   moe-log    --log-fp8-scaling with MoE experts: their kinds logged, no bit changed, and the
#              TensorBoard scalars equal to the records (below).
#   refused    --fp8-format with --fp16 and with a shared expert: one line, exit 2, no step run.
source "$(dirname "$0")/lib.sh"  # trainer, filter, work, run, finish

STEPS=${FP8_STEPS:-40}  # CI time (60 until 2026-12-06; docs/testing.md has the margins at 40)
tiny=(--config configs/models/tiny.toml --log-interval 100 --report-interval 0
      --train-iters "$STEPS")

verdict() {  # name args...: the python on stdin judges, counted
  local name=$1 out; shift
  if out=$(python3 - "$work" "$STEPS" "$@"); then
    passed=$((passed + 1)); echo "ok    $name: $out"
  else
    failed=$((failed + 1)); echo "FAIL  $name: $out"
  fi
}
wanted() { case "$1" in *"$filter"*) return 0 ;; esac; return 1; }

# one single-rank run in the background, nproc at a time (a 2-core machine halves the suite);
# a run that fails leaves too few steps in its metrics, which the verdict names
run_in_background() {
  while [ "$(jobs -rp | wc -l)" -ge "$(nproc)" ]; do wait -n; done
  run "$@" &
}

converge() {  # case prefix "recipe-format ..." flags...: fp32, bf16 and the FP8 runs, judged
  local case=$1 prefix=$2 pairs=$3; shift 3
  run_in_background "${prefix}fp32" 1 "${tiny[@]}" "$@"
  run_in_background "${prefix}bf16" 1 "${tiny[@]}" "$@" --bf16
  local runs=() pair
  for pair in $pairs; do
    run_in_background "$prefix$pair" 1 "${tiny[@]}" "$@" --bf16 --fp8-format "${pair#*-}" \
      --fp8-recipe "${pair%-*}"
    runs+=("$pair")
  done
  wait
  verdict "$case" "$prefix" "${runs[@]}" <<'EOF'
import json, sys
work, steps, prefix, names = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4:]
def losses(name):
    try:
        rows = [r for r in map(json.loads, open(f"{work}/{prefix}{name}.jsonl")) if r.get("type") == "step"]
    except OSError:
        return []
    return [r["loss"] for r in rows]
def norms(name):
    return [r["grad_norm"] for r in map(json.loads, open(f"{work}/{prefix}{name}.jsonl")) if r.get("type") == "step"]
def worst(a, b):
    return max(abs(x - y) / abs(y) for x, y in zip(a, b))
fp32, bf16 = losses("fp32"), losses("bf16")
if len(fp32) != steps or len(bf16) != steps:
    print(f"reference runs: {len(fp32)} and {len(bf16)} steps of {steps}"); sys.exit(1)
drift = worst(bf16, fp32)  # bf16's rounding, u = 2^-8, on every stored tensor
problems, said = [], [f"bf16 vs fp32 {drift:.1e}"]
for name in names:
    got = losses(name)
    ratio = 32 if name.endswith("hybrid") else 16  # u_fp8 / u_bf16: E5M2 2^-3, E4M3 2^-4
    if len(got) != steps or any(x is None for x in got):
        problems.append(f"{name}: {len(got)} steps of {steps}"); continue
    rel = worst(got, bf16)
    said.append(f"{name} {rel:.1e} (final {got[-1]:.3f} vs {bf16[-1]:.3f})")
    if name == "delayed-e4m3":  # the first step's underflow (header), not rounding
        n1, b1 = norms(name)[0], norms("bf16")[0]
        said[-1] += f", step-1 grad norm {n1:.2f} vs bf16's {b1:.2f}"
        if not n1 < 0.9 * b1:
            problems.append(f"{name}: step-1 gradient norm {n1:.3f} not below 0.9 x bf16's {b1:.3f}")
    elif rel > ratio * drift:
        problems.append(f"{name}: worst rel {rel:.2e} > {ratio} x {drift:.2e}")
    if got[-1] >= 0.8 * got[0]:
        problems.append(f"{name}: the loss did not fall ({got[0]:.3f} -> {got[-1]:.3f})")
if problems:
    print("; ".join(problems + said)); sys.exit(1)
print(", ".join(said))
EOF
}
if wanted converge; then
  converge converge "" "delayed-e4m3 delayed-hybrid tensorwise-e4m3 tensorwise-hybrid blockwise-e4m3 blockwise-hybrid"
fi
if wanted moe; then  # FP8_MOE_STEPS (30) steps: CI time
  STEPS=${FP8_MOE_STEPS:-30}
  tiny=(--config configs/models/tiny.toml --log-interval 100 --report-interval 0
        --train-iters "$STEPS")
  converge moe moe- "delayed-hybrid" --num-experts 4 --moe-router-topk 2
fi

# --log-fp8-scaling in an MoE model (every layer MoE): the experts' fc1 and fc2 are logged as
# kinds of their own, the dense MLP's fc1 and fc2 (none here) are not; logging changes no bit
# (RTOL 0 against the run without it; compare_runs.py holds its ledger, fp8_state included, to
# the plan); each token reaches k = 2 experts, so the experts' fc1 input and fc2 output
# gradient hold k x the values of qkv's input and proj's output gradient (dropless routing).
if wanted moe-log; then
  source "$(dirname "$0")/../test_python.sh"  # python: the test venv's
  moe_log=(--config configs/models/tiny.toml --log-interval 100 --report-interval 0
           --train-iters 3 --num-experts 4 --moe-router-topk 2 --bf16 --fp8-format hybrid)
  for recipe in delayed tensorwise; do
    run "moe-$recipe-nolog" 1 "${moe_log[@]}" --fp8-recipe $recipe
    RTOL=0 check "moe-log-$recipe" "moe-$recipe-nolog" 1 "${moe_log[@]}" --fp8-recipe $recipe \
      --log-fp8-scaling --tensorboard-dir "$work/moe-log-$recipe-tb"
    verdict "moe-log-$recipe kinds" "moe-log-$recipe" "$python" <<'EOF'
import json, struct, subprocess, sys
work, name, python = sys.argv[1], sys.argv[3], sys.argv[4]
steps = [r for r in map(json.loads, open(f"{work}/{name}.jsonl")) if r.get("type") == "step"]
step = steps[-1]
log, problems = step["fp8_scaling"], []
# the event files' fp8-KIND-ROLE-{amax,scale,saturated,flushed} (the last two as fractions of
# the elements) are every step's record (tests/mpi/tensorboard_scalars.py: TensorBoard's reader)
tb = subprocess.run([python, "tests/mpi/tensorboard_scalars.py", f"{work}/{name}-tb"],
                    capture_output=True, text=True)
tb_said = f"; skip TensorBoard's reader: no tensorboard package in {python}"
if "No module named 'tensorboard'" not in tb.stderr:
    f32 = lambda x: struct.unpack("f", struct.pack("f", x))[0]
    scalars = json.loads(tb.stdout) if tb.returncode == 0 else {}
    compared = 0
    for r in steps:
        for k, roles in r["fp8_scaling"].items():
            for role, t in roles.items():
                n = max(t["elements"], 1)
                for field, want in (("amax", t["amax"]), ("scale", t["scale"]),
                                    ("saturated", t["saturated"] / n), ("flushed", t["flushed"] / n)):
                    got = scalars.get(f"fp8-{k}-{role}-{field}", {}).get(str(r["step"]))
                    compared += 1
                    if got != f32(want):
                        problems.append(f"TensorBoard fp8-{k}-{role}-{field} step {r['step']}: {got} != {want}")
    tb_said = f"; TensorBoard's {compared} fp8-* scalars == the records"
if sorted(log) != ["experts.fc1", "experts.fc2", "proj", "qkv"]:
    problems.append(f"kinds {sorted(log)}")
else:
    n = lambda k, r: log[k][r]["elements"]
    if n("experts.fc1", "input") != 2 * n("qkv", "input"):
        problems.append(f"experts.fc1 input {n('experts.fc1', 'input')} != 2 x {n('qkv', 'input')}")
    if n("experts.fc2", "output_grad") != 2 * n("proj", "output_grad"):
        problems.append(f"experts.fc2 output_grad {n('experts.fc2', 'output_grad')} != 2 x "
                        f"{n('proj', 'output_grad')}")
    for k in ("experts.fc1", "experts.fc2"):
        for r, t in log[k].items():
            if not (t["amax"] > 0 and t["scale"] > 0):
                problems.append(f"{k} {r}: amax {t['amax']} scale {t['scale']}")
if problems:
    print("; ".join(problems)); sys.exit(1)
print(", ".join(f"{k}: " + " ".join(f"{r} {t['elements']}" for r, t in log[k].items())
                for k in ("experts.fc1", "experts.fc2")) + tb_said)
EOF
  done
fi

if wanted refused; then
  for bad in "--fp16" "--num-experts 4 --moe-shared-expert-intermediate-size 32"; do
    out=$("$trainer" "${tiny[@]}" --fp8-format e4m3 $bad 2>&1 < /dev/null); rc=$?
    lines=$(printf '%s\n' "$out" | grep -c .)
    if [ "$rc" -eq 2 ] && [ "$lines" -eq 1 ] && [[ "$out" == "paralab: error: --fp8-format e4m3 "* ]]; then
      passed=$((passed + 1)); echo "ok    refused $bad: $out"
    else
      failed=$((failed + 1)); echo "FAIL  refused $bad: exit $rc, $lines lines: $out"
    fi
  done
fi
finish
