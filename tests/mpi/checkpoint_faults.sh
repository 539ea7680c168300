#!/usr/bin/env bash
# tests/mpi/checkpoint_faults.sh: what a checkpoint survives and what it refuses.
#   bash tests/mpi/checkpoint_faults.sh ./trainer [filter]
#   kill -9 mid-save     a rank killed while it writes iteration 2's shard: `latest` still
#                        names iteration 1, which loads and trains on
#   SIGTERM / SIGINT     one rank of 2 (or the only one) signalled: every rank finishes the
#                        same step, saves, exits 0 with the line saying where; --load goes on
#   bad files            a truncated shard, a flipped byte, another model, a broken manifest or
#                        `latest`, a piece missing, a safetensors header longer than its file or
#                        with offsets out of range, a NaN weight (the last three with the
#                        manifest's CRC32C and size fixed, so that the reader's own rule trips):
#                        each one line naming the file and the rule, exit 2, nothing on stdout
#   --load semantics     no DIR/latest trains from step 1 (Megatron's); another --seed or a
#                        finished run refused; --no-load-optim keeps the weights, not Adam
source "$(dirname "$0")/lib.sh"  # trainer, filter, work, passed/failed, finish

tiny=(--config configs/models/tiny.toml)
pass() { passed=$((passed + 1)); echo "ok    $1"; }
flunk() { failed=$((failed + 1)); echo "FAIL  $1"; }
wanted() { case "$1" in *"$filter"*) return 0 ;; esac; return 1; }

# A good checkpoint of the tiny model at iteration 3 (one rank), for the bad-file cases.
"$trainer" "${tiny[@]}" --train-iters 6 --exit-interval 3 --save "$work/good" > "$work/good.log" 2>&1 ||
  { flunk "the good checkpoint"; tail -3 "$work/good.log"; }

# Edits a copy of the good checkpoint with python ($2: a statement over `folder`, `shard`,
# `manifest` paths; fix_crc() recomputes the manifest's size and CRC32C of the shard).
edit() {
  local name=$1 code=$2
  rm -rf "$work/$name"; cp -r "$work/good" "$work/$name"
  python3 - "$work/$name/iter_0000003" "$code" <<'EOF'
import json, os, struct, sys
folder, code = sys.argv[1], sys.argv[2]
shard, manifest = folder + "/rank_00000.safetensors", folder + "/manifest.json"
def crc32c(data):
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    crc = 0xFFFFFFFF
    for b in data:
        crc = table[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF
def fix_crc():
    m = json.load(open(manifest))
    data = open(shard, "rb").read()
    m["shards"][0]["bytes"], m["shards"][0]["crc32c"] = len(data), crc32c(data)
    json.dump(m, open(manifest, "w"), indent=1)
def header():
    data = open(shard, "rb").read()
    (n,) = struct.unpack_from("<Q", data)
    return data, n, json.loads(data[8:8 + n])
def write_header(data, n, h):  # the same length, padded with spaces
    text = json.dumps(h, separators=(",", ":")).encode()
    assert len(text) <= n
    open(shard, "wb").write(data[:8] + text + b" " * (n - len(text)) + data[8 + n:])
exec(code)
EOF
}

bad_load() {  # name want flags...: --load of $work/name refused with one line
  local name=$1 want=$2; shift 2
  wanted "$name" || return
  "$trainer" "${tiny[@]}" --train-iters 6 --load "$work/$name" "$@" > "$work/$name.out" 2> "$work/$name.err" < /dev/null
  local rc=$? lines
  lines=$(wc -l < "$work/$name.err")
  if [ "$rc" -eq 2 ] && [ "$lines" -eq 1 ] && grep -qF -- "$want" "$work/$name.err" && [ ! -s "$work/$name.out" ]; then
    pass "$name: $(cat "$work/$name.err")"
  else
    flunk "$name: exit $rc, $lines lines, want '$want': $(head -c 300 "$work/$name.err") $(head -c 200 "$work/$name.out")"
  fi
}

edit truncated 'open(shard, "r+b").truncate(os.path.getsize(shard) - 100)'
bad_load truncated "rank_00000.safetensors: 5259468 bytes, the manifest says 5259568 (a truncated or replaced shard)"
edit flipped 'f = open(shard, "r+b"); f.seek(-1000, 2); b = f.read(1); f.seek(-1000, 2); f.write(bytes([b[0] ^ 1]))'
bad_load flipped "(a corrupted shard)"
rm -rf "$work/other"; cp -r "$work/good" "$work/other"
bad_load other "hidden_size is 128, the run has 64 (--hidden-size)" --hidden-size 64
edit manifest-cut 'open(manifest, "r+").truncate(500)'
bad_load manifest-cut "manifest.json: not JSON"
edit latest-text 'open(folder + "/../latest", "w").write("three\n")'
bad_load latest-text "latest: not an iteration number"
edit latest-missing 'open(folder + "/../latest", "w").write("7\n")'
bad_load latest-missing "iter_0000007/manifest.json: cannot read"
edit piece-missing 'm = json.load(open(manifest)); m["shards"][0]["pieces"].pop(3); json.dump(m, open(manifest, "w"))'
bad_load piece-missing "saved by no rank"
edit other-version 'm = json.load(open(manifest)); m["version"] = 2; json.dump(m, open(manifest, "w"))'
bad_load other-version "version 2, this trainer reads version 1"
edit header-long 'data = open(shard, "rb").read(); open(shard, "wb").write(struct.pack("<Q", len(data)) + data[8:]); fix_crc()'
bad_load header-long "rank_00000.safetensors:"
edit offsets 'data, n, h = header(); k = next(k for k in h if k != "__metadata__"); h[k]["data_offsets"][1] += 4; write_header(data, n, h); fix_crc()'
bad_load offsets "rank_00000.safetensors:"
edit nan-weight 'data, n, h = header(); b = 8 + n + h["param/0"]["data_offsets"][0]; open(shard, "wb").write(data[:b] + struct.pack("<f", float("nan")) + data[b + 4:]); fix_crc()'
bad_load nan-weight "param/0 (embedding.position) holds NaN at its element 0"
rm -rf "$work/seeded"; cp -r "$work/good" "$work/seeded"
bad_load seeded "--seed 5: the checkpoint" --seed 5
rm -rf "$work/done"; cp -r "$work/good" "$work/done"
bad_load done "--train-iters 3: the checkpoint" --train-iters 3

# --load without DIR/latest: train from step 1, as Megatron does.
if wanted no-latest; then
  if "$trainer" "${tiny[@]}" --train-iters 2 --load "$work/nowhere" > "$work/nolatest.log" 2>&1 &&
     grep -q "checkpoint: none in $work/nowhere (no $work/nowhere/latest): training from step 1" "$work/nolatest.log"; then
    pass "no-latest: trains from step 1"
  else flunk "no-latest"; tail -3 "$work/nolatest.log"; fi
fi

# --no-load-optim: step 4's loss is computed before any update, so it equals a full resume's;
# step 5 follows Adam's fresh moments and does not.
if wanted no-load-optim; then
  "$trainer" "${tiny[@]}" --train-iters 6 --load "$work/good" --metrics-jsonl "$work/full.jsonl" > /dev/null 2>&1
  "$trainer" "${tiny[@]}" --train-iters 6 --load "$work/good" --no-load-optim --metrics-jsonl "$work/weights.jsonl" > "$work/weights.log" 2>&1
  if verdict=$(python3 - "$work/full.jsonl" "$work/weights.jsonl" <<'EOF'
import json, sys
full, weights = ({r["step"]: r["loss"] for r in map(json.loads, open(p)) if r.get("type") == "step"} for p in sys.argv[1:3])
assert full[4] == weights[4], f"step 4: {full[4]} != {weights[4]}"
assert full[5] != weights[5], "step 5 equal: Adam's moments were loaded"
print(f"step 4 loss {weights[4]} equal, step 5 {weights[5]} != {full[5]}")
EOF
  ) && grep -q "weights only: --no-load-optim" "$work/weights.log"; then pass "no-load-optim: $verdict"
  else flunk "no-load-optim: $verdict"; fi
fi

# kill -9 of one rank while it writes iteration 2's shard (a model big enough that the write
# takes a while: 12.6M parameters, 151 MB on dp rank 0).
if wanted kill-mid-save; then
  big=("${tiny[@]}" --hidden-size 512 --ffn-hidden-size 2048 --num-layers 4)
  OPENBLAS_NUM_THREADS=1 mpirun -np 2 "$trainer" "${big[@]}" --train-iters 20 --save-interval 1 \
    --save "$work/killed" > "$work/killed.log" 2>&1 < /dev/null &
  launcher=$!
  disown "$launcher"  # killed below: no job notice from this shell
  seen=""
  for _ in $(seq 6000); do  # 60 s at most
    if ls "$work"/killed/iter_0000002/rank_00000.safetensors.tmp.* > /dev/null 2>&1; then seen=yes; break; fi
    sleep 0.01
  done
  pkill -9 -f -- "--save $work/killed" 2>/dev/null
  while kill -0 "$launcher" 2>/dev/null; do sleep 0.05; done
  if [ -n "$seen" ] && [ "$(cat "$work/killed/latest")" = 1 ] && [ ! -e "$work/killed/iter_0000002/manifest.json" ] &&
     "$trainer" "${big[@]}" --train-iters 2 --load "$work/killed" > "$work/resumed.log" 2>&1 &&
     grep -q "resumed from $work/killed/iter_0000001 at iteration 1" "$work/resumed.log"; then
    pass "kill-mid-save: killed while iter_0000002 was half written; latest = 1 loads and trains step 2"
  else
    flunk "kill-mid-save: seen=$seen latest=$(cat "$work/killed/latest" 2>/dev/null)"; tail -3 "$work/resumed.log" 2>/dev/null
  fi
fi

# SIGTERM to one rank of two (a preemption), SIGINT to a single rank (Ctrl-C).
signal_case() {  # name ranks signal
  local name=$1 np=$2 sig=$3
  wanted "$name" || return
  local launch=("$trainer")
  [ "$np" -gt 1 ] && launch=(mpirun -np "$np" "$trainer")
  OPENBLAS_NUM_THREADS=1 timeout 120 "${launch[@]}" "${tiny[@]}" --train-iters 100000 \
    --save "$work/$name" > "$work/$name.log" 2>&1 < /dev/null &
  local launcher=$! pid
  for _ in $(seq 3000); do grep -q "^ *20 " "$work/$name.log" 2>/dev/null && break; sleep 0.01; done
  pid=$(pgrep -f -- "--save $work/$name\$" | tail -1)
  kill -"$sig" "$pid"
  wait "$launcher"
  local rc=$? step
  step=$(sed -n 's/^stopped after step \([0-9]*\) (SIGINT or SIGTERM): resume with --load .*/\1/p' "$work/$name.log")
  if [ "$rc" -eq 0 ] && [ -n "$step" ] && [ "$(cat "$work/$name/latest")" = "$step" ] &&
     "$trainer" "${tiny[@]}" --train-iters $((step + 1)) --load "$work/$name" > "$work/$name.resumed" 2>&1 &&
     grep -q "at iteration $step " "$work/$name.resumed"; then
    pass "$name: SIG$sig to one rank: exit 0 after step $step, saved, --load resumes"
  else
    flunk "$name: exit $rc, stopped at '${step}'"; tail -3 "$work/$name.log"
  fi
}
signal_case sigterm-one-of-two 2 TERM
signal_case sigint-single 1 INT

finish
