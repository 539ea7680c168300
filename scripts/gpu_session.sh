#!/usr/bin/env bash
# scripts/gpu_session.sh: the one prepared call of a session lent a GPU (one H200, 15 minutes of
# device time in all, at most 10 minutes a command, 8 files back): correctness first, then the
# timings beside their anchors, each part under its own timeout and all of them inside BUDGET_S,
# then one tarball and a summary under $OUT, the summary printed last.
#
#   bash .gpu/run.sh scripts/gpu_session.sh                      every part, in order
#   ONLY=attncheck,attention,step bash .gpu/run.sh scripts/gpu_session.sh     a subset
#   (through the device tool: run with timeout_s 600; the default BUDGET_S of 540 s leaves the
#    margin for packing and the transfers. docs/running.md, "A GPU session")
#
# Parts, always in this order (ONLY picks some; each part's timeout in seconds in brackets,
# overridable as PART_S, e.g. STEP_S=200):
#   check      [240] scripts/gpu_check.sh: every CUDA op against its CPU twin (op_check), the
#                    tiny models' losses on cuda against cpu, 1 and 2 ranks; its --benchmark
#                    profile is kept for the part `bench`
#   attncheck  [60]  build/cuda/tests/gpu/op_check --attention-check (the tensor-core flash rows alone)
#   bench      [90]  `trainer --benchmark --device cuda --benchmark-save gpu-measured.toml` (taken
#                    from `check` when it ran): the profile step and moe project with beside h200
#   attention  [90]  bench/gpu/attention.sh, when present (CHECK=1 unless attncheck ran)
#   step       [240] bench/gpu/step.sh: paralab beside PyTorch eager and torch.compile
#   moe        [180] bench/gpu/moe.sh: Qwen3-30B-A3B's layers, grouped / per-expert / dense / HF
#   fp8        [200] bench/gpu/fp8.sh: the FP8 GEMMs beside bf16's (paralab's, PyTorch's) and
#                    the step in each FP8 recipe beside bf16's and its projection
# A part starts only with at least 30 s of the budget left and gets min(its timeout, what is
# left); step and moe are told their share (their BUDGET_S) so they print their table inside it.
# All of them, end to end, take more than 540 s: the budget cuts the last parts (SKIPPED), so a
# session names the parts it needs (docs/running.md has one line per issue).
#
# Under $OUT (the device tool's folder; without OUT, the work folder's name + _out, printed at
# the end): session.tar.gz (every log, metrics file, JSON line and table: <part>.log,
# <part>/...), summary.txt (what is printed last) and gpu-measured.toml (the measured profile,
# when `bench` made one): 3 of the 8 files the device tool brings back.
set -u -o pipefail
cd "$(dirname "$0")/.." || exit 1

ALL=check,attncheck,bench,attention,step,moe,fp8
ONLY=${ONLY:-$ALL}
BUDGET_S=${BUDGET_S:-540}
PACK_S=15  # kept back for the tarball and the summary
START=$SECONDS
WORK=$(mktemp -d "${TMPDIR:-/tmp}/paralab_session.XXXXXX")
DEST=${OUT:-${WORK}_out}
mkdir -p "$DEST"
SUMMARY=$WORK/summary.txt
: >"$SUMMARY"

declare -A LIMIT=([check]=${CHECK_S:-240} [attncheck]=${ATTNCHECK_S:-60} [bench]=${BENCH_S:-90}
                  [attention]=${ATTENTION_S:-90} [step]=${STEP_S:-240} [moe]=${MOE_S:-180}
                  [fp8]=${FP8_S:-200})
declare -A WANT=()
IFS=, read -ra parts <<<"$ONLY"
for p in "${parts[@]}"; do
  [[ -n "${LIMIT[$p]:-}" ]] || { echo "gpu_session: unknown part '$p' (parts: $ALL)" >&2; exit 2; }
  WANT[$p]=1
done

PARTS=()
row() {  # PART RESULT SECONDS DETAIL
  PARTS+=("$(printf '%-10s %-8s %6s  %s' "$1" "$2" "$3" "$4")")
}
# run_part PART LIMIT CMD...: CMD under timeout LIMIT, its output in $WORK/PART.log;
# sets RESULT (PASS, FAIL (status), TIMEOUT) and ELAPSED.
run_part() {
  local part=$1 limit=$2
  shift 2
  local t0=$SECONDS
  echo "==== $part: $* (timeout ${limit}s, $((SECONDS - START))s into the session)"
  timeout -k 10 "$limit" "$@" >"$WORK/$part.log" 2>&1
  local status=$?
  ELAPSED=$((SECONDS - t0))
  case $status in
    0) RESULT=PASS ;;
    124 | 137) RESULT=TIMEOUT ;;
    *) RESULT="FAIL($status)" ;;
  esac
  tail -n 3 "$WORK/$part.log" | sed 's/^/    /'
}
# budget PART: echoes the part's timeout, or nothing when under 30 s of the budget is left
budget() {
  local left=$((BUDGET_S - PACK_S - (SECONDS - START)))
  local want=${LIMIT[$1]}
  ((left < 30)) && return
  echo $((left < want ? left : want))
}
# rows_ok FILE: "N of M rows ok" of a bench's JSON lines
rows_ok() {
  python3 - "$1" <<'EOF' 2>/dev/null || echo "no rows"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
bad = [f"{r.get('name')}/{r.get('impl')}: {r.get('status')}"
       for r in rows if r.get("status") != "ok"]
note = f"; not ok: {', '.join(bad)}"[:160] if bad else ""
print(f"{len(rows) - len(bad)} of {len(rows)} rows ok{note}")
EOF
}

{
  echo "gpu_session: $(date -u +%Y-%m-%dT%H:%M:%SZ), parts: $ONLY, budget ${BUDGET_S}s"
  q=name,driver_version,memory.total,clocks.sm,clocks.max.sm,temperature.gpu,power.draw
  nvidia-smi --format=csv,noheader --query-gpu=$q 2>&1 | head -2
  python3 -c 'import torch, transformers as t; print("torch", torch.__version__,
                                                     "| transformers", t.__version__)' 2>&1 | tail -1
  echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
} | tee -a "$SUMMARY"

PROFILE=""
for part in check attncheck bench attention step moe fp8; do
  [[ -n "${WANT[$part]:-}" ]] || continue
  limit=$(budget "$part")
  if [[ -z "$limit" ]]; then
    row "$part" SKIPPED - "budget: $((BUDGET_S - (SECONDS - START)))s left"
    continue
  fi
  mkdir -p "$WORK/$part"
  case $part in
    check)
      run_part check "$limit" env OUT="$WORK/check" bash scripts/gpu_check.sh
      verdict=$(grep -E '^gpu_check: (ALL PASS|FAILED)' "$WORK/check/gpu_check.txt" 2>/dev/null)
      row check "$RESULT" "$ELAPSED" "${verdict:-no verdict (see check/gpu_check.txt)}"
      ;;
    attncheck)
      bin=build/cuda/tests/gpu/op_check
      if [[ ! -x $bin ]]; then row attncheck ABSENT - "$bin not built"; continue; fi
      run_part attncheck "$limit" "$bin" --attention-check
      row attncheck "$RESULT" "$ELAPSED" "$(grep -ciE 'fail' "$WORK/attncheck.log") lines say FAIL"
      ;;
    bench)
      if [[ -s "$WORK/check/gpu.toml" ]]; then
        cp "$WORK/check/gpu.toml" "$WORK/bench/gpu-measured.toml"
        row bench PASS 0 "profile taken from gpu_check's --benchmark"
      else
        run_part bench "$limit" ./trainer --benchmark --device cuda \
          --benchmark-save "$WORK/bench/gpu-measured.toml"
        keys='^(bf16_tflops|memory_bandwidth_gbs|gemm_efficiency|attention_efficiency'
        keys+='|memory_efficiency) '
        row bench "$RESULT" "$ELAPSED" "$(grep -E "$keys" "$WORK/bench/gpu-measured.toml" \
          2>/dev/null | sed 's/ *#.*//' | tr '\n' ';')"
      fi
      [[ -s "$WORK/bench/gpu-measured.toml" ]] && PROFILE="$WORK/bench/gpu-measured.toml"
      ;;
    attention)
      if [[ ! -f bench/gpu/attention.sh ]]; then
        row attention ABSENT - "bench/gpu/attention.sh not here"
        continue
      fi
      if [[ ! -x build/cuda/tests/gpu/op_check ]]; then
        row attention ABSENT - "build/cuda/tests/gpu/op_check not built"
        continue
      fi
      check=1
      [[ -n "${WANT[attncheck]:-}" ]] && check=0
      run_part attention "$limit" env OUT="$WORK/attention" CHECK=$check bash bench/gpu/attention.sh
      row attention "$RESULT" "$ELAPSED" "table in attention/attention.md"
      ;;
    step)
      run_part step "$limit" env OUT="$WORK/step" PROFILE="$PROFILE" BUDGET_S=$((limit - 20)) \
        bash bench/gpu/step.sh
      row step "$RESULT" "$ELAPSED" "$(rows_ok "$WORK/step/step_rows.jsonl")"
      ;;
    moe)
      run_part moe "$limit" env OUT="$WORK/moe" PROFILE="$PROFILE" BUDGET_S=$((limit - 20)) \
        bash bench/gpu/moe.sh
      row moe "$RESULT" "$ELAPSED" "$(rows_ok "$WORK/moe/moe_rows.jsonl")"
      ;;
    fp8)
      run_part fp8 "$limit" env OUT="$WORK/fp8" PROFILE="$PROFILE" BUDGET_S=$((limit - 20)) \
        bash bench/gpu/fp8.sh
      row fp8 "$RESULT" "$ELAPSED" "$(rows_ok "$WORK/fp8/fp8_rows.jsonl")"
      ;;
  esac
done

# ---- what is printed last (the reply keeps the last 12,000 characters): the tables, then the
# parts' results
{
  if [[ -f "$WORK/check/gpu_check.txt" ]]; then
    echo
    echo "==== gpu_check: what did not pass (all of it: session.tar.gz, check/gpu_check.txt)"
    sed -n '/^==== gpu_check summary/,$p' "$WORK/check/gpu_check.txt" | grep -vE ' PASS$' | head -30
  fi
  for t in attention/attention.md step/step.md moe/moe.md fp8/fp8.md; do
    [[ -f "$WORK/$t" ]] || continue
    echo
    echo "==== $t"
    cat "$WORK/$t"
  done
  echo
  echo "==== gpu_session: parts ($((SECONDS - START)) s of ${BUDGET_S}s)"
  printf '%-10s %-8s %6s  %s\n' part result s detail
  for r in "${PARTS[@]}"; do echo "$r"; done
} >>"$SUMMARY"

[[ -n "$PROFILE" ]] && cp "$PROFILE" "$DEST/gpu-measured.toml"
tar -C "$(dirname "$WORK")" -czf "$DEST/session.tar.gz" "$(basename "$WORK")"
size=$(du -h "$DEST/session.tar.gz" 2>/dev/null | cut -f1)
echo "gpu_session: $DEST/session.tar.gz ($size), summary.txt" >>"$SUMMARY"
cp "$SUMMARY" "$DEST/summary.txt"
echo
tail -c 11500 "$SUMMARY"
grep -qE ' (FAIL|TIMEOUT)' <(printf '%s\n' "${PARTS[@]}") && exit 1
exit 0
