#!/usr/bin/env bash
# tests/mpi/checkpoint_faults.sh: what a checkpoint survives and what it refuses.
#   bash tests/mpi/checkpoint_faults.sh ./trainer [filter]
#   kill -9 mid-save     a rank killed while it writes iteration 2's shard: `latest` still
#                        names iteration 1, which loads and trains on
#   SIGTERM / SIGINT     one rank of 2 (or the only one) signalled: every rank finishes the
#                        same step, saves, exits 16 with the line saying where; --load goes on
#   requeue              signal -> save -> exit 16 -> the same command -> exit 0, as
#                        scripts/slurm.sbatch loops: --metrics-jsonl appended, the losses bitwise
#                        an uninterrupted run's; exit 4 when nothing was saved;
#                        --exit-duration-in-mins
#   bad files            a truncated shard, a flipped byte, another model, a broken manifest or
#                        `latest`, a piece missing, a safetensors header longer than its file or
#                        with offsets out of range, a NaN weight (the last three with the
#                        manifest's CRC32C and size fixed, so that the reader's own rule trips):
#                        each one line naming the file and the rule, exit 2, nothing on stdout
#   --load semantics     --load and --save of one folder without a checkpoint: step 1; another
#                        --seed or a finished run refused; --no-load-optim keeps the weights,
#                        not Adam; --ckpt-step, an iteration folder as --load, latest kept
#                        unless --override-latest, --finetune; --no-save-optim
source "$(dirname "$0")/lib.sh"  # trainer, filter, work, passed/failed, finish

tiny=(--config configs/models/tiny.toml)
pass() { passed=$((passed + 1)); echo "ok    $1"; }
flunk() { failed=$((failed + 1)); echo "FAIL  $1"; }
wanted() { case "$1" in *"$filter"*) return 0 ;; esac; return 1; }

# A good checkpoint of the tiny model at iteration 3 (one rank), for the bad-file cases.
"$trainer" "${tiny[@]}" --train-iters 6 --exit-interval 3 --save "$work/good" > "$work/good.log" 2>&1
[ $? -eq 16 ] || { flunk "the good checkpoint (want exit status 16)"; tail -3 "$work/good.log"; }

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
bad_load latest-missing "latest-missing/latest names iteration 7, but $work/latest-missing/iter_0000007 is missing (iterations there: 3; choose one with --ckpt-step N)"
edit manifest-gone 'os.remove(manifest)'
bad_load manifest-gone "iter_0000003/manifest.json: cannot read"
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

# --load DIR --save DIR without a checkpoint in DIR yet: the first job of a chain trains from
# step 1 (--load alone of such a folder is refused: tests/cli_errors.sh).
if wanted no-latest; then
  if "$trainer" "${tiny[@]}" --train-iters 2 --load "$work/nowhere" --save "$work/nowhere" > "$work/nolatest.log" 2>&1 &&
     grep -q "checkpoint: none in $work/nowhere yet (no latest, no iter_NNNNNNN/): training from step 1" "$work/nolatest.log" &&
     [ "$(cat "$work/nowhere/latest")" = 2 ]; then
    pass "no-latest: --load and --save of one empty folder train from step 1 and save there"
  else flunk "no-latest"; tail -3 "$work/nolatest.log"; fi
fi

# Which iteration: --ckpt-step N, or the iteration folder itself as --load; --save into the
# folder refuses to move latest back unless --override-latest; --finetune starts at 0.
if wanted choose-iteration; then
  rm -rf "$work/steps"
  "$trainer" "${tiny[@]}" --train-iters 3 --save "$work/steps" --save-interval 1 > "$work/steps.log" 2>&1
  "$trainer" "${tiny[@]}" --train-iters 4 --load "$work/steps" --ckpt-step 2 > "$work/step2.log" 2>&1; s2=$?
  "$trainer" "${tiny[@]}" --train-iters 4 --load "$work/steps/iter_0000001" > "$work/step1.log" 2>&1; s1=$?
  "$trainer" "${tiny[@]}" --train-iters 4 --load "$work/steps" --ckpt-step 2 --save "$work/steps" > "$work/back.out" 2> "$work/back.err"; sb=$?
  "$trainer" "${tiny[@]}" --train-iters 3 --load "$work/steps" --ckpt-step 1 --save "$work/steps" --override-latest > "$work/over.log" 2>&1; so=$?
  "$trainer" "${tiny[@]}" --train-iters 2 --seed 7 --load "$work/steps" --finetune > "$work/fine.log" 2>&1; sf=$?
  if [ "$s2$s1$so$sf" = 0000 ] && [ "$sb" = 2 ] &&
     grep -q "resumed from $work/steps/iter_0000002 at iteration 2 (weights and optimizer; chosen by --ckpt-step 2)" "$work/step2.log" &&
     grep -q "resumed from $work/steps/iter_0000001 at iteration 1 (weights and optimizer; chosen by --load)" "$work/step1.log" &&
     grep -q "its latest is iteration 3 and this run starts at iteration 2" "$work/back.err" && [ ! -s "$work/back.out" ] &&
     [ "$(cat "$work/steps/latest")" = 3 ] && grep -q "^ *2/3 " "$work/over.log" &&
     grep -q "weights only: --finetune, starting at iteration 0" "$work/fine.log" && grep -q "^ *1/2 " "$work/fine.log"; then
    pass "choose-iteration: --ckpt-step 2, --load iter_0000001, latest kept (exit 2) unless --override-latest, --finetune from 0"
  else
    flunk "choose-iteration: exit statuses $s2 $s1 back=$sb $so $sf"; cat "$work/back.err"; tail -2 "$work/fine.log"
  fi
fi

# --no-save-optim: the shards hold the weights alone (bytes as the plan says), and a resume
# needs --no-load-optim (or --finetune): without it, one line and exit 2.
if wanted no-save-optim; then
  rm -rf "$work/weights"
  "$trainer" "${tiny[@]}" --train-iters 4 --exit-interval 2 --save "$work/weights" --no-save-optim \
    --metrics-jsonl "$work/weights.jsonl" > "$work/nso.log" 2>&1; sa=$?
  "$trainer" "${tiny[@]}" --train-iters 4 --load "$work/weights" > "$work/nso.out" 2> "$work/nso.err"; sr=$?
  "$trainer" "${tiny[@]}" --train-iters 4 --load "$work/weights" --no-load-optim > "$work/nso2.log" 2>&1; sn=$?
  verdict=$(python3 - "$work/weights.jsonl" "$work/good/iter_0000003/manifest.json" <<'EOF'
import json, sys
save = [r for r in map(json.loads, open(sys.argv[1])) if r.get("type") == "checkpoint"][0]
full = sum(s["payload_bytes"] for s in json.load(open(sys.argv[2]))["shards"])
assert save["payload_bytes"] == save["predicted_bytes"], (save["payload_bytes"], save["predicted_bytes"])
assert save["payload_bytes"][0] * 3 == full, (save["payload_bytes"], full)  # 4 of 12 bytes
print(f"{save['payload_bytes'][0]} bytes == plan, a third of a full save's {full}")
EOF
  )
  if [ "$sa" = 16 ] && [ "$sr" = 2 ] && [ "$sn" = 0 ] && [ "$(wc -l < "$work/nso.err")" = 1 ] &&
     grep -q "was saved with --no-save-optim (no optimizer state): add --no-load-optim" "$work/nso.err" &&
     [ ! -s "$work/nso.out" ] && [ -n "$verdict" ]; then
    pass "no-save-optim: $verdict; --load alone refused, --no-load-optim resumes"
  else flunk "no-save-optim: exit $sa $sr $sn; $(cat "$work/nso.err") $verdict"; fi
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
  for _ in $(seq 3000); do grep -q "^ *20/" "$work/$name.log" 2>/dev/null && break; sleep 0.01; done
  pid=$(pgrep -f -- "--save $work/$name\$" | tail -1)
  kill -"$sig" "$pid"
  wait "$launcher"
  local rc=$? step
  step=$(sed -n 's/^stopped after step \([0-9]*\) (SIGINT or SIGTERM): resume with --load .* (exit status 16)$/\1/p' "$work/$name.log")
  if [ "$rc" -eq 16 ] && [ -n "$step" ] && [ "$(cat "$work/$name/latest")" = "$step" ] &&
     "$trainer" "${tiny[@]}" --train-iters $((step + 1)) --load "$work/$name" > "$work/$name.resumed" 2>&1 &&
     grep -q "at iteration $step " "$work/$name.resumed"; then
    pass "$name: SIG$sig to one rank: exit 16 after step $step, saved, --load resumes"
  else
    flunk "$name: exit $rc, stopped at '${step}'"; tail -3 "$work/$name.log"
  fi
}
signal_case sigterm-one-of-two 2 TERM
signal_case sigint-single 1 INT

# A Slurm requeue, simulated (scripts/slurm.sbatch's loop): SIGTERM -> save -> exit 16 -> the
# same command again -> resumes -> exit 0. The --metrics-jsonl file is appended, its step
# records 1-24 once each, and their losses bitwise those of an uninterrupted run; the
# TensorBoard folder holds both runs' event files.
if wanted requeue; then
  cycle=("${tiny[@]}" --train-iters 24 --report-interval 0 --save "$work/rq" --load "$work/rq"
         --metrics-jsonl "$work/rq.jsonl" --tensorboard-dir "$work/rq-tb")
  "$trainer" "${tiny[@]}" --train-iters 24 --report-interval 0 --metrics-jsonl "$work/ref.jsonl" > /dev/null 2>&1
  OPENBLAS_NUM_THREADS=1 timeout 120 "$trainer" "${cycle[@]}" > "$work/rq1.log" 2>&1 < /dev/null &
  launcher=$!
  for _ in $(seq 3000); do grep -q "^ *8/24 " "$work/rq1.log" 2>/dev/null && break; sleep 0.01; done
  pid=$(pgrep -f -- "--tensorboard-dir $work/rq-tb\$" | tail -1)
  kill -TERM "$pid"
  wait "$launcher"; first=$?
  runs=1 status=$first
  while [ "$status" -eq 16 ] && [ "$runs" -lt 5 ]; do  # the sbatch script's `scontrol requeue`
    "$trainer" "${cycle[@]}" > "$work/rq$((runs + 1)).log" 2>&1 < /dev/null; status=$?; runs=$((runs + 1))
  done
  verdict=$(python3 - "$work/rq.jsonl" "$work/ref.jsonl" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
steps = [r["step"] for r in rows if r.get("type") == "step"]
assert steps == list(range(1, 25)), steps
ref = {r["step"]: r["loss"] for r in map(json.loads, open(sys.argv[2])) if r.get("type") == "step"}
bad = [r["step"] for r in rows if r.get("type") == "step" and r["loss"] != ref[r["step"]]]
assert not bad, f"losses differ at steps {bad[:5]}"
summaries = [(r["first_step"], r["last_step"]) for r in rows if r.get("type") == "summary"]
print(f"steps 1-24 once, bitwise the uninterrupted run's; summaries {summaries}")
EOF
  )
  if [ "$first" = 16 ] && [ "$status" = 0 ] && [ "$runs" = 2 ] && [ -n "$verdict" ] &&
     [ "$(ls "$work/rq-tb" | grep -c tfevents)" = 2 ]; then
    pass "requeue: SIGTERM -> exit 16 -> rerun -> exit 0; $verdict; 2 event files"
  else
    flunk "requeue: first exit $first, then $status after $runs runs: $verdict"; tail -3 "$work/rq1.log"
  fi
fi

# Stopping without --save: nothing saved, exit 4 (a requeue would start from step 1);
# --exit-duration-in-mins stops like a signal, after the step that passes the limit.
if wanted exit-codes; then
  OPENBLAS_NUM_THREADS=1 timeout 120 "$trainer" "${tiny[@]}" --train-iters 100000 --seed 99 > "$work/unsaved.log" 2>&1 < /dev/null &
  launcher=$!
  for _ in $(seq 3000); do grep -q "^ *5/" "$work/unsaved.log" 2>/dev/null && break; sleep 0.01; done
  pid=$(pgrep -f -- "--train-iters 100000 --seed 99\$" | tail -1)
  kill -INT "$pid"
  wait "$launcher"; su=$?
  "$trainer" "${tiny[@]}" --train-iters 100 --exit-duration-in-mins 0.00001 --save "$work/timed" > "$work/timed.log" 2>&1; st=$?
  "$trainer" "${tiny[@]}" --train-iters 100 --exit-duration-in-mins 0.00001 > "$work/timed2.log" 2>&1; st2=$?
  if [ "$su" = 4 ] && grep -q "(SIGINT or SIGTERM): no --save, nothing saved (exit status 4)" "$work/unsaved.log" &&
     [ "$st" = 16 ] && grep -q "^stopped after step 1 (--exit-duration-in-mins 1e-05: .* minutes since the run started): resume with --load $work/timed (exit status 16)" "$work/timed.log" &&
     [ "$(cat "$work/timed/latest")" = 1 ] && [ "$st2" = 4 ]; then
    pass "exit-codes: SIGINT without --save exits 4; --exit-duration-in-mins saves and exits 16 (4 without --save)"
  else
    flunk "exit-codes: $su $st $st2"; tail -2 "$work/unsaved.log" "$work/timed.log"
  fi
fi

finish
