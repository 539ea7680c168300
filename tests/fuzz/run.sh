#!/usr/bin/env bash
# tests/fuzz/run.sh: builds each libFuzzer target with clang++ (ASan + UBSan, no MPI) into
# build/fuzz/ (each source compiled once), seeds its corpus, build/fuzz/corpus/NAME/, with a few valid
# inputs, runs them side by side for FUZZ_SECONDS (default 60; `make test`: 15) seconds of
# wall time, and prints "PASS NAME: N runs in S s" or "FAIL NAME: ..." per target, then "N passed, M failed". A failing input is kept as
# build/fuzz/crash-NAME-*, the run's output as build/fuzz/NAME.log. Exits 0 with a SKIP line
# when clang++ cannot build a fuzzer.
set -uo pipefail
cd "$(dirname "$0")/../.."
export LC_ALL=C  # ${#s} counts bytes, printf writes bytes
seconds=${FUZZ_SECONDS:-60}
out=build/fuzz
flags=(-std=c++17 -O1 -g -I. -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all)
mkdir -p "$out"

# the target's name -> its sources (the target file first)
declare -A sources=(
  [fuzz_json]="tests/fuzz/fuzz_json.cpp checkpoint/json_document.cpp"
  [fuzz_safetensors]="tests/fuzz/fuzz_safetensors.cpp checkpoint/safetensors.cpp checkpoint/json_document.cpp checkpoint/file_io.cpp"
  [fuzz_token_file]="tests/fuzz/fuzz_token_file.cpp model/data.cpp model/megatron_data.cpp model/gpt_dataset.cpp model/indexed_dataset.cpp model/numpy_random.cpp"
  [fuzz_indexed_dataset]="tests/fuzz/fuzz_indexed_dataset.cpp model/indexed_dataset.cpp"
  [fuzz_manifest]="tests/fuzz/fuzz_manifest.cpp checkpoint/checkpoint_manifest.cpp checkpoint/checkpoint_manifest_check.cpp checkpoint/json_document.cpp model/param_table.cpp parallel/pipeline_schedule.cpp parallel/pipeline_generators.cpp parallel/pipeline_simulation.cpp"
)
targets=(fuzz_json fuzz_safetensors fuzz_token_file fuzz_indexed_dataset fuzz_manifest)

printf 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }\n' \
  > "$out/probe.cpp"
if ! command -v clang++ > /dev/null ||
   ! clang++ -fsanitize=fuzzer "$out/probe.cpp" -o "$out/probe" 2> /dev/null; then
  echo "SKIP: clang++ with libFuzzer not found"
  exit 0
fi

# n as 8 little-endian bytes, or 4 with a second argument of 4
le() {
  local n=$1 width=${2:-8} i
  for ((i = 0; i < width; i++)); do printf "\\x$(printf %02x $(((n >> (8 * i)) & 255)))"; done
}
# a safetensors file: the header's length, the header, then `bytes` bytes of buffer
safetensors_file() {
  local header=$1 bytes=$2
  le ${#header}
  printf '%s' "$header"
  head -c "$bytes" /dev/zero
}
# an llm.c token file: magic 20240520, version 1, the count, 253 zero int32, the tokens
llmc_file() {
  local t
  le 20240520 4; le 1 4; le $# 4
  head -c $((253 * 4)) /dev/zero
  for t in "$@"; do le "$t" 2; done
}

seed() {
  local dir=$out/corpus/$1
  mkdir -p "$dir"
  case $1 in
    fuzz_json)
      printf '%s' '{"a": [1, -2.5e3, 0.1E+2, true, false, null], "b": {"c": "\u00e9\ud83d\ude00 \"q\""}}' \
        > "$dir/seed_object"
      printf '[[[[]]], {}, "caf\xc3\xa9", 9007199254740993, -0]' > "$dir/seed_array"
      printf '%s' '"\t"' > "$dir/seed_string"
      ;;
    fuzz_safetensors)
      safetensors_file '{"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}' 8 > "$dir/seed_one"
      safetensors_file '{"__metadata__":{"format":"pt"},"a":{"dtype":"BF16","shape":[2,2],"data_offsets":[0,8]},"e":{"dtype":"I64","shape":[0],"data_offsets":[8,8]},"b":{"dtype":"U8","shape":[3],"data_offsets":[8,11]}}   ' 11 \
        > "$dir/seed_three"
      safetensors_file '{}' 0 > "$dir/seed_empty"
      ;;
    fuzz_manifest)
      # a real one: the tiny model's, written by a save (tests/mpi/checkpoint.sh makes more)
      if [ -x ./trainer ]; then
        rm -rf "$out/manifest_seed"; mkdir -p "$out/manifest_seed"
        ./trainer --config configs/models/tiny.toml --num-layers 1 --hidden-size 32 --ffn-hidden-size 64 \
          --seq-length 16 --vocab-size 64 --num-attention-heads 2 --micro-batch-size 1 --global-batch-size 1 \
          --train-iters 1 --save "$out/manifest_seed/ckpt" > /dev/null 2>&1 &&
          cp "$out/manifest_seed/ckpt/iter_0000001/manifest.json" "$dir/seed_tiny"
      fi
      printf '%s' '{"format": "paralab checkpoint", "version": 1}' > "$dir/seed_partial"
      ;;
    fuzz_indexed_dataset)
      # two sequences (3 tokens, 1 token) in two documents, uint16: the .idx's length, the
      # .idx (magic, version 1, dtype 8, S 2, D 3, lengths, pointers, bounds), the .bin
      { le 82 2; printf 'MMIDIDX\0\0'; le 1; printf '\x08'; le 2; le 3; le 3 4; le 1 4
        le 0; le 6; le 0; le 1; le 2; le 7 2; le 8 2; le 9 2; le 999 2; } > "$dir/seed_two"
      ;;
    fuzz_token_file)
      llmc_file 1 2 3 4 5 6 7 8 9 10 11 12 255 > "$dir/seed_llmc"
      printf 'plain text is read as bytes, one token each\n' > "$dir/seed_text"
      ;;
  esac
}

# Compile each source once (several targets share the readers' files), nproc at a time, link
# every target, then run them side by side (each for $seconds of wall time).
passed=0; failed=0
declare -A object_of=()
for name in "${targets[@]}"; do
  for src in ${sources[$name]}; do object_of[$src]=$out/obj/${src%.cpp}.o; done
done
for src in "${!object_of[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge "$(nproc)" ]; do wait -n; done
  mkdir -p "$(dirname "${object_of[$src]}")"
  clang++ "${flags[@]}" -c "$src" -o "${object_of[$src]}" 2> "${object_of[$src]%.o}.log" &
done
wait
running=()
for name in "${targets[@]}"; do
  objects=()
  for src in ${sources[$name]}; do objects+=("${object_of[$src]}"); done
  if ! clang++ "${flags[@]}" "${objects[@]}" -o "$out/$name" 2> "$out/$name.log"; then
    echo "FAIL $name: does not build (build/fuzz/$name.log, build/fuzz/obj/*.log)"
    failed=$((failed + 1)); continue
  fi
  seed "$name"
  "$out/$name" -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 \
    -artifact_prefix="$out/crash-$name-" "$out/corpus/$name" > "$out/$name.log" 2>&1 &
  running+=("$name:$!")
done
for entry in "${running[@]}"; do
  name=${entry%%:*}
  wait "${entry##*:}"
  rc=$?
  done_line=$(grep -E '^Done [0-9]+ runs in [0-9]+ second' "$out/$name.log" | tail -1)
  if [ "$rc" -eq 0 ] && [ -n "$done_line" ]; then
    runs=$(echo "$done_line" | awk '{print $2}'); secs=$(echo "$done_line" | awk '{print $5}')
    echo "PASS $name: $runs runs in $secs s"
    passed=$((passed + 1))
  else
    why=$(grep -m1 -E 'ERROR: |runtime error: |SUMMARY: ' "$out/$name.log")
    echo "FAIL $name: exit $rc: ${why:-no result} (build/fuzz/$name.log)"
    failed=$((failed + 1))
  fi
done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
