#!/usr/bin/env bash
# tests/mpi/checkpoint.sh: checkpoints resume bit for bit, reshard to other layouts, survive a
# kill mid-save, and refuse bad files with one line.
#   bash tests/mpi/checkpoint.sh ./trainer [filter]
# A case trains 6 steps in two runs: the first stops after step 3 (--exit-interval 3), saves
# (--save) and exits 16 (resume me), the second resumes (--load) and trains steps 4-6. Against an uninterrupted
# run of 6 steps:
#   same layout (bitwise): steps 1-3 and 4-6 have the same loss and gradient norm, and the
#     final parameters (--save-tensors) the same bytes;
#   another layout (reshard): the same to 1e-5 relative (fp32; the layouts' reductions round
#     differently);
#   CPU offload (its states and ZeRO-3 shard in host memory) saved and resumed: bitwise, since
#     offload does not change the arithmetic;
# and the save's tensor bytes per rank equal the plan's (checkpoint_bytes). A loss-scaled run
# (--fp16) also continues its scaler's state exactly, and an FP8 delayed run its amax
# histories and scales.
source "$(dirname "$0")/lib.sh"  # trainer, filter, work, run, passed/failed, finish

tiny=(--config configs/models/tiny.toml --train-iters 6)
moe=(--config configs/models/tiny-moe.toml --train-iters 6 --moe-router-score-function sigmoid
     --moe-router-enable-expert-bias --moe-aux-loss-coeff 0)

compare() {  # mode ref a b: python verdict, exit status
  python3 - "$@" <<'EOF'
import json, math, os, struct, sys
sys.path.insert(0, "tests/mpi")
from compare_runs import read_tensor_file
mode, ref, a, b = sys.argv[1:5]
def records(name, kind):
    return [r for r in map(json.loads, open(name + ".jsonl")) if r.get("type") == kind]
def steps(name):
    return {r["step"]: r for r in records(name, "step")}
problems, worst, worst_param = [], 0.0, 0.0
params_rtol = float(os.environ.get("PARAMS_RTOL", "1e-5"))  # "rtol" mode's final parameters
R, A, B = steps(ref), steps(a), steps(b)
if sorted(A) != [1, 2, 3] or sorted(B) != [4, 5, 6]:
    problems.append(f"steps {sorted(A)} then {sorted(B)}, not 1-3 then 4-6")
for s, r in sorted({**A, **B}.items()):
    # a loss-scaled run's scaler (the scale, its trackers) continues exactly
    if r.get("loss_scaler") != R[s].get("loss_scaler"):
        problems.append(f"step {s} loss scaler {r.get('loss_scaler')} != {R[s].get('loss_scaler')}")
    for key in ("loss", "grad_norm"):
        x, y = r[key], R[s][key]
        if x is None or y is None:  # an fp16 overflow's norm (JSON null): both, or a problem
            if x != y:
                problems.append(f"step {s} {key} {x!r} != {y!r}")
            continue
        if mode == "bitwise" and x != y:
            problems.append(f"step {s} {key} {x!r} != {y!r}")
        rel = abs(x - y) / max(abs(y), 1e-30)
        worst = max(worst, rel)
        if rel > 1e-5:
            problems.append(f"step {s} {key} {x} vs {y} (rel {rel:.2e})")
got, want = read_tensor_file(b + ".bin"), read_tensor_file(ref + ".bin")
manifest = json.load(open(f"{a}.ckpt/iter_0000003/manifest.json"))["model"]
d, per_group = manifest["kv_channels"], manifest["num_attention_heads"] // manifest["num_query_groups"]
for name, w in want.items():
    if name.startswith("grad."):
        continue
    g = got[name]
    if mode != "bitwise" and name.endswith("attn.qkv.bias"):
        # gpt's key bias has a gradient of exactly 0 (a constant added to every score of a
        # query leaves its softmax unchanged): its Adam steps are rounding noise, which other
        # layouts round otherwise (tests/test_golden.cpp's exception). Query and value rows count.
        rows = (per_group + 2) * d
        keep = [i for i in range(len(w)) if not (per_group * d <= i % rows < (per_group + 1) * d)]
        g, w = [g[i] for i in keep], [w[i] for i in keep]
    if mode == "bitwise":
        if struct.pack(f"{len(g)}f", *g) != struct.pack(f"{len(w)}f", *w):
            problems.append(f"final {name} differs")
    else:
        num = math.sqrt(sum((p - q) ** 2 for p, q in zip(g, w)))
        den = math.sqrt(sum(q * q for q in w)) or 1.0
        worst_param = max(worst_param, num / den)
        if num / den > params_rtol:
            problems.append(f"final {name} rel {num / den:.2e}")
saves = records(a, "checkpoint")
if len(saves) != 1 or saves[0]["payload_bytes"] != saves[0]["predicted_bytes"]:
    problems.append(f"checkpoint bytes measured {saves and saves[0]['payload_bytes']} != "
                    f"predicted {saves and saves[0]['predicted_bytes']}")
log = open(a + ".log").read()
if "stopped after step 3 (--exit-interval 3): resume with --load" not in log:
    problems.append("no 'stopped after step 3' line")
if "resumed from" not in open(b + ".log").read():
    problems.append("no 'resumed from' line")
if problems:
    print("; ".join(problems[:4]))
    sys.exit(1)
print(f"steps 1-6 {'bitwise equal' if mode == 'bitwise' else f'worst rel {worst:.1e}'}, final "
      f"parameters {'byte for byte' if mode == 'bitwise' else f'worst rel {worst_param:.1e}'}, "
      f"tensor bytes per rank "
      f"{saves[0]['payload_bytes']} == plan")
EOF
}

# resume NAME REF MODE SAVE_RANKS "SAVE FLAGS" LOAD_RANKS "LOAD FLAGS" (model flags in $model)
resume() {
  local name=$1 ref=$2 mode=$3 np_a=$4 flags_a=$5 np_b=$6 flags_b=$7 result
  rm -rf "$work/$name.a.ckpt"; ln -s "$work/$name.ckpt" "$work/$name.a.ckpt"  # the manifest, by the run's name
  case "$name" in *"$filter"*) ;; *) return ;; esac
  # shellcheck disable=SC2086
  # the first run stops early and saved: exit status 16, "resume me"
  run "$name.a" "$np_a" "${model[@]}" $flags_a --exit-interval 3 --save "$work/$name.ckpt"
  local status_a=$?
  if [ "$status_a" -eq 16 ] &&
     run "$name.b" "$np_b" "${model[@]}" $flags_b --load "$work/$name.ckpt" &&
     result=$(compare "$mode" "$work/$ref" "$work/$name.a" "$work/$name.b"); then
    passed=$((passed + 1)); echo "ok    $name: $result"
  else
    failed=$((failed + 1)); echo "FAIL  $name: ${result:-run failed (the first run exited $status_a, want 16)}"
    tail -3 "$work/$name.a.log" "$work/$name.b.log" 2>/dev/null
  fi
}

reference() {  # NAME RANKS FLAGS: an uninterrupted 6-step run
  local name=$1 np=$2; shift 2
  run "$name" "$np" "${model[@]}" "$@" || { echo "FAIL  reference $name"; tail -3 "$work/$name.log"; failed=$((failed + 1)); }
}

# ---- same layout, bitwise -----------------------------------------------------------------
model=("${tiny[@]}")
reference single 1
reference ddp 2
reference zero2 2 --zero-stage 2 --overlap-grad-reduce --overlap-param-gather
reference zero3 2 --zero-stage 3
reference tp2sp 2 --tp 2 --sequence-parallel
reference cp2 2 --cp 2
reference pp2 2 --pp 2
resume single      single bitwise 1 ""                          1 ""
resume ddp         ddp    bitwise 2 ""                          2 ""
resume zero2       zero2  bitwise 2 "--zero-stage 2 --overlap-grad-reduce --overlap-param-gather" 2 "--zero-stage 2 --overlap-grad-reduce --overlap-param-gather"
resume zero3       zero3  bitwise 2 "--zero-stage 3"            2 "--zero-stage 3"
# CPU offload keeps states and the ZeRO-3 shard on the host: saved from there, loaded there
resume zero3-offload zero3 bitwise 2 "--zero-stage 3 --offload-params" 2 "--zero-stage 3 --offload-params"
resume tp2sp       tp2sp  bitwise 2 "--tp 2 --sequence-parallel" 2 "--tp 2 --sequence-parallel"
resume cp2         cp2    bitwise 2 "--cp 2"                    2 "--cp 2"
resume pp2         pp2    bitwise 2 "--pp 2"                    2 "--pp 2"
# ---- another layout: to 1e-5 of the single-rank run ----------------------------------------
resume tp2-to-zero1 single rtol 2 "--tp 2"                      2 "--zero-stage 1"
resume zero3-to-pp2 single rtol 2 "--zero-stage 3"              2 "--pp 2"
resume tp2dp2-to-1  single rtol 4 "--tp 2 --zero-stage 1"       1 ""
resume 1-to-cp2     single rtol 1 ""                            2 "--cp 2"

model=("${tiny[@]}" --bf16)
reference zero1-bf16 2 --zero-stage 1
resume zero1-bf16 zero1-bf16 bitwise 2 "--zero-stage 1"         2 "--zero-stage 1"
# half of the states (and the fp32 masters) on the host when saved, none when resumed
resume zero1-bf16-offload zero1-bf16 bitwise 2 "--zero-stage 1 --optimizer-cpu-offload --optimizer-offload-fraction 0.5" 2 "--zero-stage 1"

# Megatron's precision-aware optimizer, bf16 moments (--use-precision-aware-optimizer needs
# ZeRO >= 1, the single rank's too): saved as BF16, 2 bytes each (the plan's bytes), resumed bit
# for bit, from host memory too (CPU offload); resharded from dp 2 ZeRO-3 to one rank (the
# moments reload exactly: the bf16 values widened and rounded back); and with --bf16 storage
m16=(--use-precision-aware-optimizer --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16)
model=("${tiny[@]}" "${m16[@]}")
reference single-m16 1 --zero-stage 1
reference zero1-m16 2 --zero-stage 1
resume zero1-m16    zero1-m16  bitwise 2 "--zero-stage 1"       2 "--zero-stage 1"
resume zero1-m16-offload zero1-m16 bitwise 2 "--zero-stage 1 --optimizer-cpu-offload --optimizer-offload-fraction 0.5" 2 "--zero-stage 1"
resume zero3-to-zero1-m16 zero1-m16 bitwise 2 "--zero-stage 3" 2 "--zero-stage 1"
# dp 2 to one rank: the steps to 1e-5, the final parameters to 1e-3. A moment the layouts'
# 1e-7 differences carry across a bf16 rounding boundary is stored an ulp (2^-8) apart, and its
# element's update with it (tests/mpi/equivalence.sh): the uninterrupted dp 2 run is 2.4e-4
# from the one-rank run already (the norms' biases, near zero; 9.5e-7 with fp32 moments), and
# so is the resharded resume (measured 2.4e-4). The exact reload is the bitwise case above.
PARAMS_RTOL=1e-3 resume dp2-to-1-m16 single-m16 rtol 2 "--zero-stage 1" 1 "--zero-stage 1"
model=("${tiny[@]}" --bf16 "${m16[@]}")
reference zero1-bf16-m16 2 --zero-stage 1
resume zero1-bf16-m16 zero1-bf16-m16 bitwise 2 "--zero-stage 1" 2 "--zero-stage 1"

# --fp16 with a dynamic scale that grows every 2 clean steps: the growth tracker stands at 1
# when step 3 saves, so a resume that lost it would grow a step late
model=("${tiny[@]}" --fp16 --initial-loss-scale 1024 --loss-scale-window 2)
reference zero1-fp16 2 --zero-stage 1
resume zero1-fp16 zero1-fp16 bitwise 2 "--zero-stage 1"         2 "--zero-stage 1"

# FP8 delayed scaling, hybrid, with a 4-step amax history and its max (so the history, not
# only this step's amax, sets each scale): its histories and scales saved per layer and resumed
# bit for bit on one rank, over dp 2 ZeRO-1 and over pp 2 (each stage its layers'); the
# manifest names the recipe. Then what another run does with them: a run without --fp8-format
# drops them and a run with another history length starts fresh, each saying so in one line;
# an fp32 checkpoint, or this one with its FP8 state struck from the manifest, loaded into the
# same FP8 run starts fresh, saying so, and the latter's step 4 is not the uninterrupted run's
# (the saved state is what the bitwise cases restore); --export-hf writes no FP8 state, the
# weights at their storage type (an fp32 run F32, a bf16 run BF16) or as --export-hf-dtype asks.
fp8=(--fp8-format hybrid --fp8-amax-history-len 4 --fp8-amax-compute-algo max)
model=("${tiny[@]}" "${fp8[@]}")
reference fp8 1
reference zero1-fp8 2 --zero-stage 1
reference pp2-fp8 2 --pp 2
resume fp8         fp8       bitwise 1 ""                       1 ""
resume zero1-fp8   zero1-fp8 bitwise 2 "--zero-stage 1"         2 "--zero-stage 1"
resume pp2-fp8     pp2-fp8   bitwise 2 "--pp 2"                 2 "--pp 2"
# --fp8-param-gather at ZeRO-1/2: the receivers' copies of the other slices are decoded codes,
# the checkpoint saves each owner's exact slice (a decoded one saved would change steps 4-6);
# delayed in fp32, tensorwise in bf16 (its fp32 master beside the bf16 weights) with
# --overlap-param-gather (its FP8 gathers at the next step's first uses), blockwise in bf16 (a
# scale per 128 x 128 block, from the slices' amaxes: nothing saved, all remade by the gather)
pg=(--fp8-param-gather --ddp-bucket-size 100000)
reference zero1-fp8-pg 2 --zero-stage 1 "${pg[@]}"
reference zero2-fp8-pg-bf16 2 --zero-stage 2 "${pg[@]}" --bf16 --fp8-recipe tensorwise \
  --overlap-param-gather
resume zero1-fp8-pg zero1-fp8-pg bitwise 2 "--zero-stage 1 ${pg[*]}" 2 "--zero-stage 1 ${pg[*]}"
resume zero2-fp8-pg-bf16 zero2-fp8-pg-bf16 bitwise \
  2 "--zero-stage 2 ${pg[*]} --bf16 --fp8-recipe tensorwise --overlap-param-gather" \
  2 "--zero-stage 2 ${pg[*]} --bf16 --fp8-recipe tensorwise --overlap-param-gather"
reference zero1-fp8-pg-blockwise 2 --zero-stage 1 "${pg[@]}" --bf16 --fp8-recipe blockwise
resume zero1-fp8-pg-blockwise zero1-fp8-pg-blockwise bitwise \
  2 "--zero-stage 1 ${pg[*]} --bf16 --fp8-recipe blockwise" \
  2 "--zero-stage 1 ${pg[*]} --bf16 --fp8-recipe blockwise"
# and with pipelining (pp 2 x dp 2): each stage's delayed histories and slices its own
reference pp2-zero1-fp8-pg 4 --pp 2 --zero-stage 1 "${pg[@]}"
resume pp2-zero1-fp8-pg pp2-zero1-fp8-pg bitwise 4 "--pp 2 --zero-stage 1 ${pg[*]}" \
  4 "--pp 2 --zero-stage 1 ${pg[*]}"
# The MoE experts' FP8 state (one per expert, "fp8/L/e"): resumed bit for bit on one rank and
# over ep 2 (each rank saves and loads its own experts')
model=("${tiny[@]}" "${fp8[@]}" --num-experts 4 --moe-router-topk 2)
reference moe-fp8 1
reference ep2-fp8 2 --ep 2
resume moe-fp8     moe-fp8   bitwise 1 ""                       1 ""
resume ep2-fp8     ep2-fp8   bitwise 2 "--ep 2"                 2 "--ep 2"
# with --fp8-param-gather at ZeRO-1 over ep 2 x dp 2: the experts' owners' exact slices saved
ep2pg="--ep 2 --zero-stage 1 --micro-batch-size 4 ${pg[*]}"
reference ep2-zero1-fp8-pg 4 $ep2pg
resume ep2-zero1-fp8-pg ep2-zero1-fp8-pg bitwise 4 "$ep2pg" 4 "$ep2pg"
model=("${tiny[@]}" "${fp8[@]}")

fp8_other_runs() {  # the fp8 case's checkpoint (iteration 3) loaded by other runs
  local ckpt="$work/fp8.ckpt" problems=""
  [ -f "$ckpt/iter_0000003/manifest.json" ] || { echo "no fp8 checkpoint (the fp8 case failed)"; return 1; }
  python3 - "$ckpt/iter_0000003/manifest.json" <<'PY' || problems+="manifest's fp8 recipe; "
import json, sys
m = json.load(open(sys.argv[1]))
want = {"format": "hybrid", "recipe": "delayed", "margin": 0, "amax_history_len": 4,
        "amax_compute_algo": "max"}
assert m.get("fp8") == want, m.get("fp8")
assert m["shards"][0].get("fp8_layers") == [0, 1], m["shards"][0].get("fp8_layers")
PY
  # --export-hf from these runs: the weights at the type asked, else their storage type, and
  # never FP8 codes or state
  exported_as() {  # FOLDER DTYPE TORCH_DTYPE
    python3 - "$@" <<'PY'
import glob, json, struct, sys
folder, dtype, torch_dtype = sys.argv[1:]
files = glob.glob(folder + "/*.safetensors")
assert files, "no safetensors"
for f in files:
    with open(f, "rb") as h:
        n = struct.unpack("<Q", h.read(8))[0]
        header = json.loads(h.read(n))
    for name, t in header.items():
        if name == "__metadata__":
            continue
        assert t["dtype"] == dtype, (name, t["dtype"])
        assert not any(w in name for w in ("fp8", "amax", "scale")), name
assert json.load(open(folder + "/config.json"))["torch_dtype"] == torch_dtype
PY
  }
  run fp8-to-fp32 1 "${tiny[@]}" --load "$ckpt" --export-hf "$work/fp32-hf" ||
    problems+="fp8-to-fp32 run failed; "
  exported_as "$work/fp32-hf" F32 float32 || problems+="fp32 run's export not F32; "
  # tiny: 2 layers of 4 linears, 4 (4 + 1) 3 bytes each: 480 bytes
  grep -q "dropping its FP8 state (hybrid delayed, margin 0, history 4, max: amax histories and scales, 480 bytes): this run has no --fp8-format" \
    "$work/fp8-to-fp32.log" || problems+="no 'dropping its FP8 state' line; "
  # into a bf16 run: the same line, and its export BF16 (its 16-bit weights)
  run fp8-to-bf16 1 "${tiny[@]}" --bf16 --load "$ckpt" --export-hf "$work/bf16-hf" ||
    problems+="fp8-to-bf16 run failed; "
  grep -q "dropping its FP8 state (hybrid delayed, margin 0, history 4, max: amax histories and scales, 480 bytes): this run has no --fp8-format" \
    "$work/fp8-to-bf16.log" || problems+="no 'dropping its FP8 state' line (bf16 run); "
  exported_as "$work/bf16-hf" BF16 bfloat16 || problems+="bf16 run's export not BF16; "
  run fp8-len2 1 "${tiny[@]}" --fp8-format hybrid --fp8-amax-history-len 2 --load "$ckpt" \
    --export-hf "$work/fp8-hf" --export-hf-dtype fp16 || problems+="fp8-len2 run failed; "
  exported_as "$work/fp8-hf" F16 float16 || problems+="the FP8 run's --export-hf-dtype fp16; "
  grep -q "amax histories start fresh (scale 1): the checkpoint saved them for hybrid delayed, margin 0, history 4, max, this run has --fp8-format hybrid delayed, margin 0, history 2" \
    "$work/fp8-len2.log" || problems+="no 'start fresh' line (history 4 -> 2); "
  # an fp32 checkpoint: the single case's, or one made here (the first run stops and saves)
  [ -d "$work/single.ckpt" ] || run fp32-save 1 "${tiny[@]}" --exit-interval 3 --save "$work/single.ckpt"
  run single-to-fp8 1 "${model[@]}" --load "$work/single.ckpt" || problems+="single-to-fp8 run failed; "
  grep -q "amax histories start fresh (scale 1): the checkpoint has none" \
    "$work/single-to-fp8.log" || problems+="no 'start fresh' line (fp32 checkpoint); "
  # the same checkpoint with its FP8 state struck from the manifest: the same run starts fresh
  # and its step 4 is not the uninterrupted run's (the state is what the bitwise cases restore)
  cp -r "$ckpt" "$work/fp8-stripped.ckpt"
  python3 - "$work/fp8-stripped.ckpt/iter_0000003/manifest.json" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
for s in m["shards"]:
    s.pop("fp8_layers", None)
json.dump(m, open(sys.argv[1], "w"))
PY
  run fp8-stripped 1 "${model[@]}" --load "$work/fp8-stripped.ckpt" || problems+="fp8-stripped run failed; "
  grep -q "amax histories start fresh (scale 1): the checkpoint has none" \
    "$work/fp8-stripped.log" || problems+="no 'start fresh' line (state struck); "
  python3 - "$work/fp8.jsonl" "$work/fp8-stripped.jsonl" <<'PY' || problems+="fresh histories gave the uninterrupted step 4; "
import json, sys
def step4(name):
    return [r for r in map(json.loads, open(name)) if r.get("type") == "step" and r["step"] == 4][0]
a, b = step4(sys.argv[1]), step4(sys.argv[2])
assert (a["loss"], a["grad_norm"]) != (b["loss"], b["grad_norm"]), (a["loss"], b["loss"])
PY
  [ -z "$problems" ] || { echo "$problems"; return 1; }
  echo "manifest names hybrid delayed 4 max; dropped (480 bytes) without --fp8-format (fp32 and bf16 runs); fresh with history 2, from fp32 and with the state struck (step 4 then differs); --export-hf F32, BF16, and F16 as asked, no FP8 state"
}
case fp8-other-runs in *"$filter"*)
  if result=$(fp8_other_runs); then passed=$((passed + 1)); echo "ok    fp8-other-runs: $result"
  else failed=$((failed + 1)); echo "FAIL  fp8-other-runs: $result"; fi ;;
esac

model=("${tiny[@]}" --num-layers 4)
reference four 1
reference interleaved 2 --pp 2 --num-layers-per-virtual-pipeline-stage 1
reference zb 2 --pp 2 --pipeline-schedule zb-h1
resume interleaved interleaved bitwise 2 "--pp 2 --num-layers-per-virtual-pipeline-stage 1" 2 "--pp 2 --num-layers-per-virtual-pipeline-stage 1"
resume zb          zb          bitwise 2 "--pp 2 --pipeline-schedule zb-h1" 2 "--pp 2 --pipeline-schedule zb-h1"
resume vpp-to-tp2  four        rtol 2 "--pp 2 --num-layers-per-virtual-pipeline-stage 1" 2 "--tp 2"

# llama: fc1's [gate | up] halves split over tp, grouped-query attention
model=("${tiny[@]}" --arch llama --num-query-groups 2)
reference llama 1
resume llama-tp2-to-1 llama rtol 2 "--tp 2"                     1 ""

# a padded vocabulary: V = 200 rows of embedding.word and output.weight held as 256
# (--make-vocab-size-divisible-by 128, x tp), the rows past V saved with each rank's local
# tensor and dropped on load. One rank (its one piece runs past the full tensor's numel); the
# last ZeRO-1 rank's piece, the padding at its end, into tp 2; tp 2 (rank 1: 72 real rows,
# 56 padding) into one rank; and tp 2 into tp 2 padded to a multiple of 4 x 2 (200 rows, rank 1
# from row 100): the manifest's multiple places the saved rows, not the run's
model=("${tiny[@]}" --arch llama --num-query-groups 2 --vocab-size 200)
reference padded 1
resume padded          padded bitwise 1 ""                      1 ""
resume padded-zero1-to-tp2 padded rtol 2 "--zero-stage 1"       2 "--tp 2"
resume padded-tp2-to-1 padded rtol 2 "--tp 2"                   1 ""
resume padded-tp2-to-multiple4 padded rtol 2 "--tp 2"           2 "--tp 2 --make-vocab-size-divisible-by 4"

# MoE with aux-loss-free balancing: experts over ep, the expert bias saved and restored
model=("${moe[@]}")
reference moe 1
reference moe-ep2 2 --ep 2
resume moe-ep2       moe-ep2 bitwise 2 "--ep 2"                  2 "--ep 2"
resume moe-ep2-to-1  moe     rtol    2 "--ep 2"                  1 ""
resume moe-1-to-ep2z1 moe    rtol    1 ""                        2 "--ep 2 --zero-stage 1"
resume moe-ep2-to-etp2 moe   rtol    2 "--ep 2"                  2 "--etp 2"

finish
