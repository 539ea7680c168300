#!/usr/bin/env bash
# lessons/04-pipeline/check.sh: asserts the numbers of lessons/04-pipeline/README.md.
#   bash lessons/04-pipeline/check.sh [TRAINER]   (default: the repository's ./trainer)
# Plans and trains lessons/04-pipeline/model.toml (3 steps) under gpipe, 1f1b, interleaved
# (v 2) and zb-h1 at pp 2, and gpipe and 1f1b at pp 4 (mpirun -np 2 and 4), plus one rank
# as the reference; at 8 layers every schedule at pp 4 (zb-v, dualpipev and dualpipe too),
# their memory, bubble and DeepSeek-V3's table; checks the bubble, the microbatches held, the activation bytes and the
# pp traffic of every rank against the closed forms, --plan --json and --metrics-jsonl, the
# losses against one rank's, and the measured action order (--trace) against the plan's.
source "$(dirname "$0")/../lib.sh"  # trainer, root, work, give_up
command -v mpirun >/dev/null || give_up "mpirun not found (apt-get install mpich)"
export OPENBLAS_NUM_THREADS=1
config=(--config lessons/04-pipeline/model.toml)
run() {  # name, ranks, flags...: --plan --json (+ simulated timeline and trace), then train
  local name=$1 np=$2; shift 2
  local launch=("$trainer"); [ "$np" -gt 1 ] && launch=(timeout 120 mpirun -np "$np" "$trainer")
  { [ "$np" -eq 1 ] || "$trainer" "${config[@]}" "$@" --plan --json --world-size "$np" \
      --print-schedule --trace "$work/$name.plan_trace.json" \
      > "$work/$name.json" 2> "$work/$name.plan.txt"; } &&
    "${launch[@]}" "${config[@]}" "$@" --metrics-jsonl "$work/$name.jsonl" --print-schedule \
      --trace "$work/$name.trace.json" > "$work/$name.log" 2>&1 ||
    { echo "FAIL  run $name failed"; tail -3 "$work/$name.log"; echo "0 passed, 1 failed"; exit 1; }
}
run ref 1
run p2_gpipe 2 --pp 2 --pipeline-schedule gpipe
run p2_1f1b 2 --pp 2 --pipeline-schedule 1f1b
run p2_interleaved 2 --pp 2 --pipeline-schedule interleaved --vpp 2
run p2_zb 2 --pp 2 --pipeline-schedule zb-h1
run p4_gpipe 4 --pp 4 --pipeline-schedule gpipe
run p4_1f1b 4 --pp 4 --pipeline-schedule 1f1b
# section 7: the seven schedules at L 8, p 4, m 8
eight=(--num-layers 8 --global-batch-size 16)
run l8_ref 1 "${eight[@]}"
for s in gpipe 1f1b interleaved zb-h1 zb-v dualpipev dualpipe; do
  extra=(); [ "$s" = interleaved ] && extra=(--vpp 2)
  run "l8_$s" 4 "${eight[@]}" --pp 4 --pipeline-schedule "$s" "${extra[@]}"
done
python3 scripts/plot --out "$work/png" --timeline "$work"/l8_{gpipe,1f1b,interleaved,zb-h1,zb-v,dualpipev,dualpipe}.plan_trace.json \
  > "$work/png.out" 2>&1 || { echo "FAIL  scripts/plot --timeline"; cat "$work/png.out"; }
python3 - "$work" <<'PY'
import json, re, sys
from fractions import Fraction as Fr
work = sys.argv[1]
sys.path.insert(0, "lessons")  # the repository root is the working directory (lib.sh)
from checks import check, finish, record  # noqa: E402
import checks  # noqa: E402
def check_frac(name, got, want):  # a fraction of simulated cost units, to 1e-9
    record(name, abs(got - float(want)) < 1e-9, f"{got:.6g} = {want}" +
           ("" if abs(got - float(want)) < 1e-9 else " (differs)"))
def load(name):
    return checks.load(work, name)
def timeline(name):  # the simulated timeline's rank lines (stderr of --plan --json)
    return [l.rstrip() for l in open(f"{work}/{name}.plan.txt") if l.startswith("rank ")]
def compute_order(path):  # per rank, the compute lane's actions of a Chrome trace, in time order
    ev = json.load(open(path))["traceEvents"]
    ranks = {}
    for e in ev:
        if e.get("ph") == "X" and e.get("cat") == "compute":
            ranks.setdefault(e["pid"], []).append((e["ts"], e["name"]))
    return [[n for _, n in sorted(ranks[r])] for r in sorted(ranks)]

L, h, a, S, b, V, G = 4, 64, 4, 32, 2, 256, 8
N = b * S
m = G // b                                # microbatches per step (dp 1)
A = 64 * N * h + 16 * N + 4 * b * a * S   # one layer, one microbatch (fp32, flash)
inp = 4 * N * h                           # a chunk's input: the received activation
head = 4 * N * h + 8 * N                  # the last stage's final-norm output gradient + stats
msg = 4 * N * h                           # one pp message
check("A = 64Nh + 16N + 4baS per layer", A, 264192)
check("4Nh + 2A: one microbatch on a 2-layer stage", inp + 2 * A, 544768)
check("4Nh + 8N: the head's (last stage)", head, 16896)
check("4Nh + A: one microbatch on a 1-layer chunk", inp + A, 280576)
check("A: the plan's per-layer activations",
      load("p2_1f1b")[0]["activations"]["per_layer_bytes"], A)

# 1. gpipe and 1f1b
for p in (2, 4):
    Lr = L // p
    for sched in ("gpipe", "1f1b"):
        name = f"p{p}_{sched}"
        pl = load(name)[0]["pipeline"]
        check_frac(f"{name}: bubble simulated (p-1)/(m+p-1) of the step", pl["bubble_simulated"],
                   Fr(p - 1, m + p - 1))
        check_frac(f"{name}: bubble closed form", pl["bubble_closed_form"], Fr(p - 1, m + p - 1))
        check_frac(f"{name}: bubble (p-1)/m of the ideal time", pl["bubble_vs_ideal_simulated"],
                   Fr(p - 1, m))
        held = [m if sched == "gpipe" else min(p - r, m) for r in range(p)]
        check(f"{name}: held per rank ({'m' if sched == 'gpipe' else 'min(p-r, m)'})",
              [s["held"] for s in pl["per_rank"]], held)
        want = [held[r] * (inp + Lr * A + (head if r == p - 1 else 0)) for r in range(p)]
        check(f"{name}: activations held x (4Nh + L_r A) (+ head)",
              [s["activation_bytes"] for s in pl["per_rank"]], want)
for sched in ("gpipe", "1f1b"):
    pl = load(f"p2_{sched}")[0]["pipeline"]
    check(f"p2_{sched}: idle, busy units per rank (p-1)(F+B+W), m(F+B+W)",
          [(s["idle"], s["busy"]) for s in pl["per_rank"]], [(1 * 4, m * 4)] * 2)
    check(f"p2_{sched}: messages act/grad per rank [m/0, 0/m]",
          [(s["activations_sent"], s["gradients_sent"]) for s in pl["per_rank"]],
          [(m, 0), (0, m)])
check("p2_gpipe: timeline", timeline("p2_gpipe"), [
    "rank 0: F0 F1 F2 F3 ............B0       B1       B2       B3         idle 20.0%",
    "rank 1: ...F0 F1 F2 F3 B0       B1       B2       B3       .........  idle 20.0%"])
check("p2_1f1b: timeline", timeline("p2_1f1b"), [
    "rank 0: F0 F1 .........B0       F2 B1       F3 B2       ...B3         idle 20.0%",
    "rank 1: ...F0 B0       F1 B1       F2 B2       F3 B3       .........  idle 20.0%"])

# 2. interleaved, v 2
p, v = 2, 2
pl = load("p2_interleaved")[0]["pipeline"]
check_frac("interleaved: bubble (p-1)/(vm) of the ideal time", pl["bubble_vs_ideal_simulated"],
           Fr(p - 1, v * m))
check_frac("interleaved: closed form", pl["bubble_vs_ideal_closed_form"], Fr(p - 1, v * m))
check_frac("interleaved: bubble (p-1)/(vm+p-1) of the step", pl["bubble_simulated"],
           Fr(p - 1, v * m + p - 1))
held = [(p - r - 1) * 2 + (v - 1) * p + 1 for r in range(p)]
check("interleaved: held (p-r-1)2 + (v-1)p + 1 pairs of L/(pv) layers",
      [s["held"] for s in pl["per_rank"]], held)
want = [held[r] * (inp + L // (p * v) * A) + (head if r == p - 1 else 0) for r in range(p)]
check("interleaved: activations held x (4Nh + A) (+ head once)",
      [s["activation_bytes"] for s in pl["per_rank"]], want)
check("interleaved: idle chunk units per rank (p-1)(F+B+W)", [s["idle"] for s in pl["per_rank"]],
      [(p - 1) * 4] * p)
check("interleaved: busy chunk units per rank v m (F+B+W)", [s["busy"] for s in pl["per_rank"]],
      [v * m * 4] * p)
check("interleaved: timeline", timeline("p2_interleaved"), [
    "rank 0: F0a F1a F0b F1b F2a ........B0b         F3a B1b         F2b B0a         F3b B1a         ....B2b         ....B3b         B2a         B3a           idle 11.1%",
    "rank 1: ....F0a F1a F0b B0b         F1b B1b         F2a B0a         F3a B1a         F2b B2b         F3b B3b         B2a         B3a         ............  idle 11.1%"])
check("interleaved: first layer of each chunk per rank",
      [[c["first"] for c in s["layers"]] for s in pl["per_rank"]], [[0, 2], [1, 3]])
check("interleaved: act/grad per rank", [(s["activations_sent"], s["gradients_sent"])
      for s in pl["per_rank"]], [(2 * m, m), (m, 2 * m)])
check("interleaved: messages sent per rank (2v-1)m",
      [s["activations_sent"] + s["gradients_sent"] for s in pl["per_rank"]], [(2 * v - 1) * m] * p)

# 3. zb-h1 beside 1f1b (F 1, B 2, W 1)
zb, one = load("p2_zb")[0]["pipeline"], load("p2_1f1b")[0]["pipeline"]
F, B, W = 1, 2, 1
check("zb-h1: idle units per rank (p-1)(F+B-W)", [s["idle"] for s in zb["per_rank"]],
      [(p - 1) * (F + B - W)] * p)
check("1f1b: idle units per rank (p-1)(F+B+W)", [s["idle"] for s in one["per_rank"]],
      [(p - 1) * (F + B + W)] * p)
check_frac("zb-h1: bubble of the step", zb["bubble_simulated"],
           Fr((p - 1) * (F + B - W), m * (F + B + W) + (p - 1) * (F + B - W)))
check_frac("zb-h1: closed form", zb["bubble_closed_form"], Fr(1, 9))
check_frac("zb-h1: bubble of the ideal time", zb["bubble_vs_ideal_simulated"], Fr(1, 8))
check("zb-h1: held F..B min(p-r, m)", [s["held"] for s in zb["per_rank"]], [2, 1])
check("zb-h1: held F..W", [s["held_until_w"] for s in zb["per_rank"]], [2, 2])
Lr = L // p
keep, dy = 4 * 16 * N * h, 4 * 9 * N * h  # per layer B -> W; B's first copy
check("zb-h1: a layer keeps 16Nh x 4 from B to W", keep, 262144)
check("zb-h1: a B copies 9Nh x 4 output gradients first", dy, 147456)
check("step units: zb-h1 m(F+B+W) + (p-1)(F+B-W), 1f1b m(F+B+W) + (p-1)(F+B+W)",
      [zb["step_time_units"], one["step_time_units"]], [16 + 2, 16 + 4])
check("zb-h1: act/grad per rank [m/0, 0/m]", [(s["activations_sent"], s["gradients_sent"])
      for s in zb["per_rank"]], [(m, 0), (0, m)])
check("zb-h1: activations [2(4Nh + L_r A) + 36Nh, L_r 64Nh + 4Nh + L_r A + 36Nh]",
      [s["activation_bytes"] for s in zb["per_rank"]],
      [2 * (inp + Lr * A) + dy, Lr * keep + inp + Lr * A + dy])
check("zb-h1: timeline", timeline("p2_zb"), [
    "rank 0: F0 F1 ......B0    W0 F2 B1    W1 F3 B2    W2 B3    W3   idle 11.1%",
    "rank 1: ...F0 B0    F1 B1    W0 F2 B2    W1 F3 B3    W2 W3 ...  idle 11.1%"])

# 4. training: every rank measured == predicted; the wire
def comm(rank, group, op):
    return next(c for c in rank["comm"] if c["group"] == group and c["op"] == op)
def p2p(name, key):  # per rank, the measured pp send/recv calls or payload_bytes, last step
    return [int(comm(r, "pp", "send/recv")[key]["measured"]) for r in load(name)[1][-1]["ranks"]]
for name in ("p2_gpipe", "p2_1f1b", "p2_interleaved", "p2_zb", "p4_gpipe", "p4_1f1b"):
    plan, steps = load(name)
    pl = plan["pipeline"]
    ranks = steps[-1]["ranks"]
    check(f"{name}: activations measured per rank",
          [r["memory"]["activations"]["measured"] for r in ranks],
          [s["activation_bytes"] for s in pl["per_rank"]])
    check(f"{name}: every category measured == predicted on every rank",
          all(c["measured"] == c["predicted"] for r in ranks for k, c in r["memory"].items()
              if k != "total"), True)
    # the predicted total replays the stage's actions (zb-h1's peak falls inside a B)
    tot = [r["memory"]["total"] for r in ranks]
    check(f"{name}: total (peak) measured == predicted on every rank",
          all(t["measured"] == t["predicted"] for t in tot), True)
    check(f"{name}: pp send/recv calls measured = the plan's exchanges", p2p(name, "calls"),
          [s["exchanges"] for s in pl["per_rank"]])
    check(f"{name}: pp send/recv payload = messages x N h 4", p2p(name, "payload_bytes"),
          [(s["activations_sent"] + s["gradients_sent"]) * msg for s in pl["per_rank"]])
    got, want = steps[0]["bubble_predicted"], pl["bubble_simulated"]
    record(f"{name}: step 1's (pred) = the plan's simulated bubble", abs(got - want) < 1e-9,
       f"{got:.6g}" + ("" if abs(got - want) < 1e-9 else f" (want {want:.6g})"))
_, steps = load("p2_1f1b")
r0, r1 = steps[-1]["ranks"]
check("p2_1f1b: stage 0 pp payload m N h 4", p2p("p2_1f1b", "payload_bytes")[0], m * N * h * 4)
check("p2_1f1b: exchanges per rank", p2p("p2_1f1b", "calls"), [5, 5])
check("p2_1f1b: embedding all-reduce V h 4 on both stages",
      [int(comm(r, "embedding", "all-reduce")["payload_bytes"]["measured"]) for r in (r0, r1)],
      [V * h * 4] * 2)
check("p2_1f1b: embedding, pp, world all-reduce calls per rank",
      [[int(comm(r, g, "all-reduce")["calls"]["measured"]) for g in ("embedding", "pp", "world")]
       for r in (r0, r1)], [[1, 1, 1]] * 2)
check("p2_1f1b: pp all-reduce (gradient norm) and world all-reduce (loss, stop flag), bytes",
      [[int(comm(r, g, "all-reduce")["payload_bytes"]["measured"]) for g in ("pp", "world")]
       for r in (r0, r1)], [[4, 8]] * 2)
for name, want in (("p2_gpipe", [7, 8]), ("p2_interleaved", [11, 11]), ("p2_zb", [5, 7]),
                   ("p4_gpipe", [7, 9, 9, 8]), ("p4_1f1b", [7, 9, 9, 5])):
    check(f"{name}: exchanges (send/recv calls) per rank", p2p(name, "calls"), want)
check("p2_interleaved: pp payload per rank (2v-1) m N h 4", p2p("p2_interleaved", "payload_bytes"),
      [(2 * v - 1) * m * msg] * 2)
check("p4_1f1b: pp payload per rank [m, 2m, 2m, m] x N h 4", p2p("p4_1f1b", "payload_bytes"),
      [k * m * msg for k in (1, 2, 2, 1)])

# 5. equivalence: the same losses as one rank
ref = [r for r in map(json.loads, open(f"{work}/ref.jsonl")) if r.get("type") == "step"]
for name in ("p2_gpipe", "p2_1f1b", "p2_interleaved", "p2_zb", "p4_gpipe", "p4_1f1b"):
    _, got = load(name)
    worst = max(abs(x["loss"] - y["loss"]) / abs(y["loss"]) for x, y in zip(got, ref))
    record(f"{name}: {len(got)} losses equal one rank's", len(got) == len(ref) == 3 and worst <= 1e-6,
       f"to {worst:.1e} (bound 1e-6)")

# 6. the measured timeline runs the plan's lists
for name in ("p2_gpipe", "p2_1f1b", "p2_interleaved", "p2_zb", "p4_gpipe", "p4_1f1b"):
    check(f"{name}: --trace's actions per rank in the plan's order",
          compute_order(f"{work}/{name}.trace.json") ==
          compute_order(f"{work}/{name}.plan_trace.json"), True)
log = open(f"{work}/p2_1f1b.log").read()
check("p2_1f1b: --print-schedule prints the measured timeline",
      "timeline, measured (last step): 1f1b, p 2, m 4" in log, True)

# 7. the seven schedules at L 8, p 4, m 8 (F 1, B 2, W 1; a whole B 3)
p, m8 = 4, 8
F, B, W = 1, 2, 1
ideal = m8 * (F + B + W)  # one chunk's work a microbatch on 1F1B's ranks
idle_of = {"gpipe": 3 * 4, "1f1b": 3 * 4, "interleaved": 3 * 4, "zb-h1": 3 * (F + B - W),
           "zb-v": 3 * max(B, 2 * (B - W)), "dualpipev": 8, "dualpipe": 2}
busy_of = {"gpipe": ideal, "1f1b": ideal, "interleaved": 2 * ideal, "zb-h1": ideal,
           "zb-v": 2 * ideal, "dualpipev": 2 * ideal, "dualpipe": ideal}
closed = {"gpipe": Fr(3, 11), "1f1b": Fr(3, 11), "interleaved": Fr(3, 19), "zb-h1": Fr(6, 38),
          "zb-v": Fr(6, 70), "dualpipev": Fr(12, 76), "dualpipe": Fr(4, 36)}
held_of = {"gpipe": [8] * 4, "1f1b": [4, 3, 2, 1], "interleaved": [11, 9, 7, 5],
           "zb-h1": [4, 3, 2, 1], "zb-v": [8] * 4, "dualpipev": [9] * 4, "dualpipe": [5] * 4}
looped = [473600, 399872, 399872, 465920]
params_of = {"gpipe": looped, "1f1b": looped, "interleaved": looped, "zb-h1": looped,
             "zb-v": [474112] + [399872] * 3, "dualpipev": [474112] + [399872] * 3,
             "dualpipe": [873984, 799744, 799744, 873984]}
total_of = {"gpipe": [6.29, 6.01, 6.01, 6.44], "1f1b": [4.21, 3.41, 2.89, 2.69],
            "interleaved": [5.08, 4.26, 3.73, 3.52], "zb-h1": [4.35, 4.05, 4.03, 4.25],
            "zb-v": [4.42, 4.15, 4.15, 4.15], "dualpipev": [4.62, 4.28, 4.26, 4.26],
            "dualpipe": [6.34, 5.98, 5.98, 6.34]}
ref8 = [r for r in map(json.loads, open(f"{work}/l8_ref.jsonl")) if r.get("type") == "step"]
for s in ("gpipe", "1f1b", "interleaved", "zb-h1", "zb-v", "dualpipev", "dualpipe"):
    plan, steps = load(f"l8_{s}")
    pl, ranks = plan["pipeline"], steps[-1]["ranks"]
    check_frac(f"l8 {s}: closed form", pl["bubble_closed_form"], closed[s])
    check_frac(f"l8 {s}: simulated, idle / (idle + busy) per rank", pl["bubble_simulated"],
               Fr(idle_of[s], idle_of[s] + busy_of[s]))
    check(f"l8 {s}: idle units per rank", [x["idle"] for x in pl["per_rank"]], [idle_of[s]] * 4)
    check(f"l8 {s}: held per rank", [x["held"] for x in pl["per_rank"]], held_of[s])
    check(f"l8 {s}: params per rank, measured", [r["memory"]["params"]["measured"] for r in ranks],
          params_of[s])
    check(f"l8 {s}: total peak per rank (MiB), measured",
          [round(r["memory"]["total"]["measured"] / 2**20, 2) for r in ranks], total_of[s])
    check(f"l8 {s}: every category and the total measured == predicted on every rank",
          all(c["measured"] == c["predicted"] for r in ranks for c in r["memory"].values()), True)
    measured = sum(x["bubble"] for x in steps[1:]) / len(steps[1:])
    record(f"l8 {s}: measured bubble a fraction above the simulated",
           pl["bubble_simulated"] < measured < 1, f"{measured:.3f}")
    worst = max(abs(x["loss"] - y["loss"]) / abs(y["loss"]) for x, y in zip(steps, ref8))
    record(f"l8 {s}: losses equal one rank's", len(steps) == len(ref8) == 3 and worst <= 1e-6,
           f"to {worst:.1e}")
zv, dual = load("l8_zb-v"), load("l8_dualpipe")
r0 = zv[0]["pipeline"]["per_rank"][0]
check("l8 zb-v: rank 0 holds the embedding and the head, no tied copy",
      (r0["embedding"], r0["head"], r0["tied_embedding_copy"]), (True, True, False))
check("l8 zb-v: no embedding all-reduce on any rank",
      any(c["group"] == "embedding" for r in zv[1][-1]["ranks"] for c in r["comm"]), False)
check("l8 zb-v: rank 0 sends m activations and m gradients",
      (r0["activations_sent"], r0["gradients_sent"]), (m8, m8))
check("l8 dualpipe: one mirror all-reduce of the gradient buffer per rank",
      [int(comm(r, "mirror", "all-reduce")["calls"]["measured"]) for r in dual[1][-1]["ranks"]],
      [1] * 4)
check("l8 dualpipe: its bytes, the rank's gradients (fp32)",
      [int(comm(r, "mirror", "all-reduce")["payload_bytes"]["measured"]) for r in dual[1][-1]["ranks"]],
      [r["memory"]["grads"]["measured"] for r in dual[1][-1]["ranks"]])
check("scripts/plot --timeline drew the seven simulated timelines",
      open(f"{work}/png.out").read().split(), [f"{work}/png/timeline.png"])

# 8. DeepSeek-V3's Table 2 (F 1, B whole 3, W 1; F&B = F + B on a CPU)
Bw = B + W
formula = {"1f1b": (4 - 1) * (F + Bw), "zb-h1": (4 - 1) * (F + Bw - 2 * W),
           "dualpipe": (4 // 2 - 1) * ((F + Bw) + Bw - 3 * W),
           "dualpipev": (8 // 2 - 1) * ((F + Bw) + Bw - 3 * W)}
check("report bubbles at F&B = F + B: 1F1B, ZB1P, DualPipe, DualPipeV",
      [formula[k] for k in ("1f1b", "zb-h1", "dualpipe", "dualpipev")], [12, 6, 4, 12])
for k in ("1f1b", "zb-h1", "dualpipe", "dualpipev"):
    sim = load(f"l8_{k}")[0]["pipeline"]["per_rank"][0]["idle"]
    ok = sim == formula[k] if k in ("1f1b", "zb-h1") else sim < formula[k]
    record(f"DeepSeek {k}: simulated idle {'=' if k in ('1f1b', 'zb-h1') else '<'} the report's",
           ok, f"{sim:g} vs {formula[k]}")
check("DeepSeek activations: PP (1F1B, ZB1P), PP + 1 (DualPipe PP 4, DualPipeV PP 8)",
      [load(f"l8_{k}")[0]["pipeline"]["per_rank"][0]["held"]
       for k in ("1f1b", "zb-h1", "dualpipe", "dualpipev")], [4, 4, 5, 9])
finish()
PY
