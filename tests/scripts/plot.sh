#!/usr/bin/env bash
# tests/scripts/plot.sh: scripts/plot draws every chart from small runs of the tiny model.
#   bash tests/scripts/plot.sh TRAINER
# Runs a 2-stage pipeline (mpirun -np 2 --pp 2, 6 steps, validation every 3, --trace) and
# a ZeRO-1 dp 2 run (6 steps), plans the pipeline (--plan --json, --plan --trace), then
# draws the loss curves of both runs, the pipeline run's memory, the dp run's comm and the
# pipeline's timeline, and the plan's memory, comm and simulated timeline. Each PNG must
# exist, start with the PNG signature, have an IHDR of width and height > 0 whose image
# data inflates to exactly height rows of width pixels, end with IEND, and be > 5 KB.
# Bad input (a missing file, a malformed JSONL line, a trace without traceEvents, a trace
# given as --memory, a step that is not there) must exit 2 with one line naming the file,
# and draw nothing. Prints one line per check, then "N passed, M failed"; exits non-zero
# on a failure.
set -uo pipefail
trainer=${1:?usage: bash tests/scripts/plot.sh TRAINER}
case $trainer in /*) ;; *) trainer="$PWD/$trainer" ;; esac
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root" || exit 1
[ -x "$trainer" ] || { echo "FAIL  no trainer at $trainer"; echo "0 passed, 1 failed"; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OPENBLAS_NUM_THREADS=1
tiny=(--config configs/models/tiny.toml --train-iters 6 --lr-warmup-iters 1)
fail_run() { echo "FAIL  $*: see the log above"; echo "0 passed, 1 failed"; exit 1; }

mpirun -np 2 "$trainer" "${tiny[@]}" --pp 2 --eval-interval 3 --eval-iters 1 \
  --metrics-jsonl "$work/pp.jsonl" --trace "$work/pp.trace.json" > "$work/pp.log" 2>&1 ||
  { tail -3 "$work/pp.log"; fail_run "mpirun -np 2 trainer --pp 2"; }
mpirun -np 2 "$trainer" "${tiny[@]}" --zero-stage 1 --metrics-jsonl "$work/dp.jsonl" \
  > "$work/dp.log" 2>&1 ||
  { tail -3 "$work/dp.log"; fail_run "mpirun -np 2 trainer --zero-stage 1"; }
"$trainer" "${tiny[@]}" --pp 2 --world-size 2 --plan --json > "$work/plan.json" ||
  fail_run "trainer --pp 2 --world-size 2 --plan --json"
"$trainer" "${tiny[@]}" --pp 2 --world-size 2 --plan --trace "$work/plan.trace.json" > /dev/null ||
  fail_run "trainer --pp 2 --world-size 2 --plan --trace"

scripts/plot --out "$work/run" --loss "$work/pp.jsonl" "$work/dp.jsonl" --label "pp 2" "dp 2" \
  --memory "$work/pp.jsonl" --comm "$work/dp.jsonl" --timeline "$work/pp.trace.json" \
  > "$work/run.out" 2> "$work/run.err"
echo $? > "$work/run.rc"
scripts/plot --out "$work/plan" --memory "$work/plan.json" --comm "$work/plan.json" \
  --timeline "$work/plan.trace.json" "$work/pp.trace.json" > "$work/plan.out" 2> "$work/plan.err"
echo $? > "$work/plan.rc"

# bad input: each case its own --out folder, which must stay without PNGs
printf '{"type": "step", "step": 1, "loss": 5.5}\nnot json\n' > "$work/broken.jsonl"
echo '{"displayTimeUnit": "ms"}' > "$work/notrace.json"
bad=(
  "missing|$work/none.jsonl|--loss $work/none.jsonl"
  "malformed|$work/broken.jsonl:2|--loss $work/broken.jsonl"
  "notrace|$work/notrace.json|--timeline $work/notrace.json"
  "trace_as_memory|$work/pp.trace.json|--memory $work/pp.trace.json"
  "no_step|$work/dp.jsonl|--comm $work/dp.jsonl --step 99"
)
for case in "${bad[@]}"; do
  IFS='|' read -r tag file args <<< "$case"
  # shellcheck disable=SC2086  # the arguments are words by design
  scripts/plot --out "$work/bad_$tag" $args > "$work/bad_$tag.out" 2> "$work/bad_$tag.err"
  echo "$? $file" > "$work/bad_$tag.rc"
done

python3 - "$work" <<'EOF'
import os, struct, sys, zlib
work = sys.argv[1]
sys.path.insert(0, "lessons")  # the repository root is the working directory
from checks import check, record, finish  # noqa: E402

def text(name):
    with open(os.path.join(work, name)) as f:
        return f.read()

CHANNELS = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}  # PNG colour type -> samples per pixel

def png(path):
    """'' when path is a valid, non-trivial PNG, else what is wrong."""
    if not os.path.exists(path):
        return "missing"
    data = open(path, "rb").read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        return "no PNG signature"
    if data[12:16] != b"IHDR":
        return "the first chunk is not IHDR"
    w, h, depth, ctype = struct.unpack(">IIBB", data[16:26])
    if w == 0 or h == 0:
        return f"IHDR {w} x {h}"
    if data[-8:-4] != b"IEND":
        return "no IEND chunk at the end"
    idat, at = b"", 8
    while at < len(data):
        n, kind = struct.unpack(">I4s", data[at:at + 8])
        if kind == b"IDAT":
            idat += data[at + 8:at + 8 + n]
        at += 12 + n
    try:
        raw = zlib.decompress(idat)
    except zlib.error as e:
        return f"image data does not inflate ({e})"
    row = 1 + (w * CHANNELS.get(ctype, 4) * depth + 7) // 8  # filter byte + samples
    if len(raw) != h * row:
        return f"image data {len(raw)} B for {w} x {h} (want {h * row})"
    if len(data) <= 5 * 1024:
        return f"{len(data)} B (want > 5 KB)"
    return f"{w} x {h}, {len(data)} B"

def good(msg):
    return msg[:1].isdigit()

print("runs: scripts/plot --loss pp.jsonl dp.jsonl --memory pp.jsonl --comm dp.jsonl "
      "--timeline pp.trace.json")
check("exit status", int(text("run.rc")), 0)
charts = ["loss", "memory", "comm", "timeline"]
check("stdout lists each chart's path", text("run.out").split(),
      [os.path.join(work, "run", c + ".png") for c in charts])
for c in charts:
    msg = png(os.path.join(work, "run", c + ".png"))
    record(f"{c}.png: valid PNG, IHDR > 0, > 5 KB", good(msg), msg)

print("plan: scripts/plot --memory plan.json --comm plan.json --timeline plan.trace.json "
      "pp.trace.json (two panels, one PNG)")
check("exit status", int(text("plan.rc")), 0)
for c in charts[1:]:
    msg = png(os.path.join(work, "plan", c + ".png"))
    record(f"plan {c}.png: valid PNG, IHDR > 0, > 5 KB", good(msg), msg)

print("bad input: exit 2, one line naming the file, nothing drawn")
for tag in ("missing", "malformed", "notrace", "trace_as_memory", "no_step"):
    rc, name = text(f"bad_{tag}.rc").split(" ", 1)
    err = text(f"bad_{tag}.err").splitlines()
    out = os.path.join(work, f"bad_{tag}")
    drawn = os.path.isdir(out) and any(f.endswith(".png") for f in os.listdir(out))
    ok = (int(rc) == 2 and len(err) == 1 and err[0].startswith(f"plot: error: {name.strip()}")
          and not drawn and text(f"bad_{tag}.out") == "")
    record(f"{tag}", ok, err[0] if len(err) == 1 else f"exit {rc}, {len(err)} lines: {err[:3]}")
finish()
EOF
