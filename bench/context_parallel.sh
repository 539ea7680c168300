#!/usr/bin/env bash
# bench/context_parallel.sh: context parallelism on CPU ranks. One sequence per step, split
# over cp 1, 2, 4 ranks (mpirun -np cp, dp 1), with each comm type (p2p ring, all_gather,
# a2a), flash attention and naive attention at the same size; then cp 4 p2p under the
# contiguous and the zigzag layout, each rank's FLOPs. Reports ratios, asserts nothing about
# time; checks that every planned number equals the measured one. Results in
# notes/performance.md.
#
#   bash bench/context_parallel.sh [TRAINER]        (default ./trainer)
#   SEQ=2048 STEPS=5 REPEATS=2 QUERY_GROUPS=4 NAIVE=1 bash bench/context_parallel.sh
#
# The shape: llama, 4 layers, h 128, 4 heads (d 32), QUERY_GROUPS key/value groups (a2a needs
# heads and groups divisible by cp: its rows are skipped where they are not), ffn 256, vocab
# 256, seq SEQ, micro batch 1 = global batch 1: every configuration does the same step (one
# sequence), only how it is split changes. OPENBLAS_NUM_THREADS=1 on every rank, so cp 1 runs
# on one core and cp 4 puts two ranks on each of 2 cores.
# Columns (rank 0's --metrics-jsonl; medians over the steps after the first; every
# configuration REPEATS times, the fastest kept; bytes, memory and FLOPs do not vary):
#   step ms        wall time of the step;        vs cp1: over the cp-1 run, same attention
#   cp calls, payload MiB, bus MiB
#                  rank 0's calls on the cp group per step (measured; the plan's are checked
#                  equal), the bytes it sent (payload) and the bus bytes (payload x the
#                  collective's bus factor, (cp-1)/cp for all-gather, reduce-scatter, all-to-all)
#   formula MiB    the bus bytes from the closed forms, L layers, K = B g (s/cp) d e, Q = B a
#                  (s/cp) d e: p2p and all_gather 3 (cp-1) 2K (K, V: (cp-1) forward, 2 (cp-1)
#                  backward), a2a (cp-1)/cp (4Q + 4K) (q, k, v, o forward, their gradients back)
#   exposed ms     time rank 0 spent blocked in cp-group calls (the JSON's exposed_ms, the
#                  report's "exposed ms" column); exp/step: its share of the step
#   activ MiB      the ledger's activations category, predicted / measured (rank 0; every
#                  rank holds the same)
#   attn GF        attention's scores and AV products per rank per step, forward + backward
#                  as run (the plan's hardware FLOPs: flash the causal pairs, naive every
#                  scored pair of each block pass)
# The second table: cp 4, p2p, flash, contiguous against zigzag: each rank's hardware FLOPs
# (the jsonl's per-rank records, measured / predicted), the attention part (those less the
# rank-independent rest), its ratio to rank 0's and the closed form's ratio, with n = s/cp:
# contiguous r n^2 + n(n+1)/2 pairs on rank r, zigzag (chunks c = s/2cp, rank r holding r and
# 2cp-1-r) (2cp-1) c^2 + c(c+1) on every rank.
# On 2 cores the 4 ranks of cp 4 share the machine (and its other users): the step times say
# what the exchanges cost beside the compute they split, not what a GPU per rank would show.
set -euo pipefail
trainer=${1:-./trainer}
seq=${SEQ:-2048}
steps=${STEPS:-5}
repeats=${REPEATS:-2}
groups=${QUERY_GROUPS:-4}
naive=${NAIVE:-1}
heads=4
[ -x "$trainer" ] || { echo "no trainer at $trainer (make)"; exit 2; }
[ "$steps" -ge 2 ] || { echo "STEPS ($steps) must be >= 2: step 1 is the warm-up"; exit 2; }
command -v mpirun > /dev/null || { echo "mpirun not found (scripts/setup.sh installs MPICH)"; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OPENBLAS_NUM_THREADS=1
model=(--arch llama --num-layers 4 --hidden-size 128 --num-attention-heads "$heads"
       --num-query-groups "$groups" --seq-length "$seq" --vocab-size 256 --ffn-hidden-size 256
       --micro-batch-size 1 --global-batch-size 1 --train-iters "$steps" --lr-warmup-iters 0
       --device cpu --log-interval 1000 --report-interval 0)
# name  ranks  flags
configs=()
attns=(flash)
[ "$naive" = 1 ] && attns+=(naive)
for attn in "${attns[@]}"; do
  configs+=("$attn-cp1 1 --attention $attn")
  for cp in 2 4; do
    for type in p2p all_gather a2a; do
      if [ "$type" = a2a ] && { [ $((heads % cp)) -ne 0 ] || [ $((groups % cp)) -ne 0 ]; }; then
        continue
      fi
      configs+=("$attn-cp$cp-$type $cp --attention $attn --cp $cp --cp-comm-type $type")
    done
  done
done
configs+=("flash-cp4-p2p-contiguous 4 --attention flash --cp 4 --cp-comm-type p2p --cp-layout contiguous")

echo "machine: $(nproc) cores, OPENBLAS_NUM_THREADS=1, mpirun -np cp (dp 1)"
echo "model:   ${model[*]}"
echo "runs:    $steps steps, first skipped, best of $repeats"
runs=()
for c in "${configs[@]}"; do  # the plan of each (deterministic: once)
  read -r name np flags <<< "$c"
  # shellcheck disable=SC2086
  if ! "$trainer" "${model[@]}" $flags --world-size "$np" --plan --json > "$work/$name.plan.json" \
       2> "$work/log"; then
    echo "plan failed: $name"; tail -5 "$work/log"; exit 1
  fi
done
for rep in $(seq "$repeats"); do
  for c in "${configs[@]}"; do
    read -r name np flags <<< "$c"
    out="$work/${name}_r$rep.jsonl"
    # shellcheck disable=SC2086
    if ! timeout 600 mpirun -np "$np" "$trainer" "${model[@]}" $flags --metrics-jsonl "$out" \
         > "$work/log" 2>&1 < /dev/null; then
      echo "run failed: $name: mpirun -np $np $trainer ${model[*]} $flags"; tail -20 "$work/log"
      exit 1
    fi
    runs+=("$name $np $out")
  done
done
echo "load:    $(cut -d' ' -f1-3 /proc/loadavg) (after the runs)"
echo

printf '%s\n' "${runs[@]}" | python3 -c '
import json, os, statistics, sys
work, seq, groups, heads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
L, h, B, e = 4, 128, 1, 4
d = h // heads
MiB, G = 2**20, 1e9
mismatches, checks = [], 0

def check(name, what, pred, meas):
    global checks
    checks += 1
    if pred != meas:
        mismatches.append("%s: %s predicted %s, measured %s" % (name, what, pred, meas))

def pm(name, what, x):  # a {"predicted", "measured"} pair
    check(name, what, x["predicted"], x["measured"])

best, order, plans = {}, [], {}
for line in sys.stdin:
    name, np_, path = line.split()
    if name not in plans:
        plans[name] = json.load(open(os.path.join(work, name + ".plan.json")))
    plan = plans[name]
    mm = {m["name"]: m["hardware_per_step"] for m in plan["flops"]["matmuls"]}
    recs = [json.loads(l) for l in open(path) if l.strip()]
    steps = [r for r in recs if r.get("type") == "step"]
    for s in steps:  # every planned number against its measurement, every step
        tag = "%s step %d" % (name, s["step"])
        for c in s["comm"]:
            for k in ("calls", "payload_bytes", "bus_bytes"):
                pm(tag, "%s %s %s" % (c["group"], c["op"], k), c[k])
        for k, v in s["memory"].items():
            pm(tag, "memory " + k, v)
        check(tag, "hardware FLOPs", s["flops"]["hardware_per_rank_predicted"],
              s["flops"].get("hardware_per_rank_measured"))
        for k, v in s["gemm_calls"]["labels"].items():
            check(tag, "gemm calls " + k, v["predicted"], v["measured"])
        att = s["gemm_calls"]["labels"].get("attention")
        if att:  # the attention label: qkv, the core (as the FLOP counter counts it), proj
            check(tag, "attention FLOPs", mm["qkv"] + mm["scores"] + mm["av"] + mm["proj"],
                  att["flops_measured"])
        for r in s.get("ranks", []):
            pm(tag + " rank %d" % r["rank"], "hardware FLOPs", r["hardware_flops"])
            for k, v in r["memory"].items():
                pm(tag + " rank %d" % r["rank"], "memory " + k, v)
    timed = steps[1:]
    def cp_sum(s, key, sub=None):
        return sum((c[key][sub] if sub else c[key]) for c in s["comm"] if c["group"] == "cp")
    last = timed[-1]
    row = dict(np=int(np_), step=statistics.median(s["step_ms"] for s in timed),
               exposed=statistics.median(cp_sum(s, "exposed_ms") for s in timed),
               calls=cp_sum(last, "calls", "measured"),
               payload=cp_sum(last, "payload_bytes", "measured") / MiB,
               bus=cp_sum(last, "bus_bytes", "measured") / MiB,
               act_pred=last["memory"]["activations"]["predicted"] / MiB,
               act_meas=last["memory"]["activations"]["measured"] / MiB,
               attn=(mm["scores"] + mm["av"]) / G,
               nonattn=plan["flops"]["hardware_per_rank_step"] - mm["scores"] - mm["av"],
               ranks=[(r["rank"], r["hardware_flops"]["measured"], r["hardware_flops"]["predicted"])
                      for r in last.get("ranks", [])])
    if name not in best or row["step"] < best[name]["step"]:
        best[name] = row
    if name not in order:
        order.append(name)

def formula_bus(cp, typ):
    if cp == 1:
        return 0.0
    K = B * groups * (seq // cp) * d * e
    Q = B * heads * (seq // cp) * d * e
    if typ == "a2a":
        return L * (cp - 1) / cp * (4 * Q + 4 * K) / MiB
    return L * 3 * (cp - 1) * 2 * K / MiB

hdr = ("%-20s%9s%7s%6s%9s%9s%9s%9s%7s%10s%10s%8s" %
       ("config", "step ms", "vs cp1", "calls", "payload", "bus", "formula", "exposed",
        "exp/", "activ MiB", "activ MiB", "attn GF"))
hdr2 = ("%-20s%9s%7s%6s%9s%9s%9s%9s%7s%10s%10s%8s" %
        ("", "", "", "cp", "MiB", "MiB", "MiB", "ms", "step", "pred", "meas", "/rank"))
print(hdr); print(hdr2)
main = [n for n in order if not n.endswith("contiguous")]
for n in main:
    r = best[n]
    attn, cpname = n.split("-")[0], n.split("-")
    base = best[attn + "-cp1"]["step"]
    typ = cpname[2] if len(cpname) > 2 else "-"
    label = "%s cp%d %s" % (attn, r["np"], typ)
    print("%-20s%9.1f%7.2f%6d%9.2f%9.2f%9.2f%9.1f%6.0f%%%10.2f%10.2f%8.2f" % (
        label, r["step"], r["step"] / base, r["calls"], r["payload"], r["bus"],
        formula_bus(r["np"], typ), r["exposed"], 100 * r["exposed"] / r["step"],
        r["act_pred"], r["act_meas"], r["attn"]))

print()
print("cp 4, p2p, flash: each rank'"'"'s hardware FLOPs per step by layout")
print("%-12s%5s%10s%10s%10s%10s%11s%9s%11s" % ("layout", "rank", "step ms", "exposed",
      "hw GF", "hw GF", "attn GF", "attn", "closed"))
print("%-12s%5s%10s%10s%10s%10s%11s%9s%11s" % ("", "", "(rank 0)", "ms", "meas", "pred",
      "(hw-rest)", "/rank 0", "form /r0"))
cp = 4
n = seq // cp
c = seq // (2 * cp)
for layout, name in (("zigzag", "flash-cp4-p2p"), ("contiguous", "flash-cp4-p2p-contiguous")):
    if name not in best:
        continue
    r = best[name]
    def pairs(k):
        if layout == "contiguous":
            return k * n * n + n * (n + 1) / 2
        return (2 * cp - 1) * c * c + c * (c + 1)
    a0 = None
    for rank, meas, pred in r["ranks"]:
        attn = meas - r["nonattn"]
        a0 = attn if a0 is None else a0
        print("%-12s%5d%10s%10s%10.2f%10.2f%11.2f%9.2f%11.2f" % (
            layout if rank == 0 else "", rank,
            "%.1f" % r["step"] if rank == 0 else "", "%.1f" % r["exposed"] if rank == 0 else "",
            meas / G, pred / G, attn / G, attn / a0, pairs(rank) / pairs(0)))
print()
if mismatches:
    print("plan != measured (%d of %d checks):" % (len(mismatches), checks))
    for m in mismatches[:40]:
        print("  " + m)
    sys.exit(1)
print("plan == measured: all %d checks (comm calls/payload/bus per group, memory categories, "
      "hardware FLOPs per rank, GEMM calls, attention FLOPs; every step, every rank)" % checks)
' "$work" "$seq" "$groups" "$heads"
