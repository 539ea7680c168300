#!/usr/bin/env bash
# bench/checkpoint.sh: save and load of the gpt2-124m preset on the CPU backend (issue 16's
# benchmark; results in notes/performance.md): at dp 2 (DDP, and ZeRO-1) and at tp 2, one
# step then a save (--exit-interval 1 --save), then a resume at the same layout (--load) and
# a resharded one (saved at tp 2, loaded at dp 2 ZeRO-1). The model's step is cut to one
# sequence of SEQ tokens per rank (the checkpoint's size does not depend on it).
#
#   bash bench/checkpoint.sh [TRAINER]      (default ./trainer)
#   SEQ=128 REPEATS=2 bash bench/checkpoint.sh
#
# Columns (each configuration REPEATS times, the fastest kept):
#   save s       the save, barrier to barrier (the trainer's "checkpoint: saved" line)
#   MB/s         tensor data of every rank / save s
#   bytes/rank   every rank's tensor data (--metrics-jsonl's checkpoint record), == the plan's
#   files MB     the shards' and the manifest's bytes on disk
#   load s       the resume: manifest, checksums (each rank a share of the shards), the slices
set -euo pipefail
trainer=${1:-./trainer}
seq=${SEQ:-128}
repeats=${REPEATS:-2}
[ -x "$trainer" ] || { echo "no trainer at $trainer (make)"; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-1}
model=(--config configs/models/gpt2-124m.toml --seq-length "$seq" --micro-batch-size 1
       --global-batch-size 2 --train-iters 3 --lr-warmup-iters 1)

printf '%-24s %8s %8s %-24s %9s %8s\n' "layout" "save s" "MB/s" "bytes/rank" "files MB" "load s"
bench() {  # name save-flags load-flags
  local name=$1 save_flags=$2 load_flags=$3 best_save="" best_load="" r
  for r in $(seq "$repeats"); do
    rm -rf "$work/$name"
    # shellcheck disable=SC2086
    mpirun -np 2 "$trainer" "${model[@]}" $save_flags --exit-interval 1 --save "$work/$name" \
      --metrics-jsonl "$work/$name.jsonl" > "$work/$name.save.log" 2>&1
    # shellcheck disable=SC2086
    mpirun -np 2 "$trainer" "${model[@]}" $load_flags --load "$work/$name" \
      > "$work/$name.load.log" 2>&1
    local save load
    save=$(sed -n 's/^checkpoint: saved .* in \([0-9.]*\) s.*/\1/p' "$work/$name.save.log")
    load=$(sed -n 's/^checkpoint: resumed .* in \([0-9.]*\) s.*/\1/p' "$work/$name.load.log")
    if [ -z "$best_save" ] || python3 -c "import sys; sys.exit(not $save < $best_save)"; then best_save=$save; fi
    if [ -z "$best_load" ] || python3 -c "import sys; sys.exit(not $load < $best_load)"; then best_load=$load; fi
  done
  python3 - "$work/$name.jsonl" "$name" "$best_save" "$best_load" <<'EOF'
import json, sys
path, name, save, load = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4])
rec = next(r for r in map(json.loads, open(path)) if r.get("type") == "checkpoint")
assert rec["payload_bytes"] == rec["predicted_bytes"], (rec["payload_bytes"], rec["predicted_bytes"])
total = sum(rec["payload_bytes"])
print(f"{name:<24} {save:8.3f} {total / save / 1e6:8.0f} {'/'.join(str(b) for b in rec['payload_bytes']):<24} "
      f"{rec['file_bytes'] / 1e6:9.1f} {load:8.3f}")
EOF
}
bench "dp 2 (DDP)" "" ""
bench "dp 2 ZeRO-1" "--zero-stage 1" "--zero-stage 1"
bench "tp 2" "--tp 2" "--tp 2"
bench "tp 2 -> dp 2 ZeRO-1" "--tp 2" "--zero-stage 1"
