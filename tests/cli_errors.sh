#!/usr/bin/env bash
# tests/cli_errors.sh: every kind of bad input stops the trainer before it allocates
# anything, with exit status 2 and exactly one line on stderr that names the flag (or file).
# Usage (from anywhere): tests/cli_errors.sh path/to/trainer
set -uo pipefail
trainer=$(realpath "${1:?usage: tests/cli_errors.sh path/to/trainer}")
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OPENBLAS_NUM_THREADS=1
passed=0; failed=0

# expect_error NAME EXPECTED_SUBSTRING -- COMMAND...: status 2, one stderr line, containing it.
expect_error() {
  local name=$1 want=$2; shift 3
  local out rc lines
  "$@" >"$tmp/stdout" 2>"$tmp/stderr"; rc=$?
  out=$(cat "$tmp/stderr")
  lines=$(wc -l <"$tmp/stderr")
  if [ "$rc" -eq 2 ] && [ "$lines" -eq 1 ] && [[ "$out" == "paralab: error: "*"$want"* ]]; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
    echo "FAIL $name: want status 2 and one line containing '$want'; got status $rc, $lines line(s):"
    sed 's/^/    | /' "$tmp/stderr" | head -5
  fi
}
bad() { local name=$1 want=$2; shift 2; expect_error "$name" "$want" -- "$trainer" "$@"; }

# Data files, each wrong in one way.
printf 'To be, or not to be, that is the question.\n%.0s' {1..4} >"$tmp/text.txt"
printf 'short' >"$tmp/short.txt"
head -c 2048 /dev/zero >"$tmp/zeros.bin"
head -c 100 /dev/zero >"$tmp/stub.bin"
# llm.c header: magic 20240520 = 0x0134D888, version 1, 100 tokens; then 100 tokens 0xFFFF.
{ printf '\x88\xd8\x34\x01\x01\x00\x00\x00\x64\x00\x00\x00'; head -c 1012 /dev/zero
  printf '\xff%.0s' {1..200}; } >"$tmp/big_ids.bin"
{ printf '\x88\xd8\x34\x01\x02\x00\x00\x00\x64\x00\x00\x00'; head -c 1212 /dev/zero; } >"$tmp/v2.bin"
printf 'num-layerz = 4\n' >"$tmp/typo.toml"
printf 'num-attention-heads = 6\n' >"$tmp/heads.toml"

# Parse errors (issue 2): unknown flag, invalid value.
bad "unknown flag"            "--no-such-flag"          --no-such-flag
bad "stray argument"          "extra"                   extra
bad "not a number"            "--hidden-size"           --hidden-size abc
bad "not a float"             "--lr"                    --lr fast
bad "not a choice"            "--arch"                  --arch bert
bad "missing value"           "--seq-length"            --seq-length
# Inconsistent sizes.
bad "heads divide hidden"     "--num-attention-heads (6) must divide --hidden-size (64)" \
                                                        --num-attention-heads 6
bad "groups divide heads"     "--num-query-groups (3) must divide --num-attention-heads (4)" \
                                                        --num-query-groups 3
bad "gbs by mbs"              "--global-batch-size (10)" --micro-batch-size 4 --global-batch-size 10
bad "llama head dim even"     "--arch llama needs an even head dim" \
                                                        --arch llama --hidden-size 60 --num-attention-heads 4
bad "positive size"           "--num-layers must be >= 1, got 0" --num-layers 0
bad "dropout range"           "--hidden-dropout"        --hidden-dropout 1.5
bad "lr >= min lr"            "--min-lr"                --lr 1e-4 --min-lr 1e-3
bad "warmup <= decay"         "--lr-warmup-iters"       --lr-warmup-iters 500 --train-iters 100
bad "adam beta"               "--adam-beta2"            --adam-beta2 1
# Parallel layout (issue 3), planned for ranks that are not launched.
bad "world-size needs plan"   "--world-size"            --world-size 8
bad "world by tp x cp x pp"   "--world-size (6) must be divisible by --tp (4)" \
                                                        --plan --world-size 6 --tp 4
bad "tp divides heads"        "--tp (8) must divide --num-attention-heads (4)" \
                                                        --plan --world-size 8 --tp 8
bad "pp divides layers"       "--pp (3) must divide --num-layers (2)" --plan --world-size 3 --pp 3
# Pipeline schedules (issue 5), planned for 2 or 4 ranks.
bad "layers by virtual stages" "--num-layers (6) must be divisible by --pp (2) x virtual stages (2) = 4" \
                                                        --plan --world-size 2 --pp 2 --layers 6 --vpp 2
bad "interleaved m by pp"     "= 3, to be a multiple of --pp (2)" \
                                                        --plan --world-size 2 --pp 2 --layers 4 --vpp 2 --mbs 4 --gbs 12
bad "zb-h1 virtual stages"    "--pipeline-schedule zb-h1 takes no virtual stages, got 2" \
                                                        --plan --world-size 2 --pp 2 --layers 4 --vpp 2 --pipeline-schedule zb-h1
bad "interleaved needs v"     "--pipeline-schedule interleaved needs virtual stages" \
                                                        --plan --world-size 2 --pp 2 --layers 4 --pipeline-schedule interleaved
bad "first + last layers"     "must add up to --num-layers (8) with --pp 2" \
                                                        --plan --world-size 2 --pp 2 --layers 8 --decoder-first-pipeline-num-layers 3 --decoder-last-pipeline-num-layers 3
bad "first layers leave rest" "cannot split the remaining 5 of --num-layers (8) evenly" \
                                                        --plan --world-size 4 --pp 4 --layers 8 --decoder-first-pipeline-num-layers 3
bad "trace unwritable, train" "--trace: cannot write /nonexistent/dir/t.json" \
                                                        --train-iters 1 --trace /nonexistent/dir/t.json
bad "metrics unwritable"      "--metrics-jsonl: cannot write /nonexistent/dir/m.jsonl" \
                                                        --train-iters 1 --metrics-jsonl /nonexistent/dir/m.jsonl
bad "trace unwritable"        "--trace: cannot write /nonexistent/dir/t.json" \
                                                        --plan --world-size 2 --pp 2 --trace /nonexistent/dir/t.json
bad "zero stage range"        "--zero-stage"            --zero-stage 4
bad "param gather needs zero" "--overlap-param-gather"  --overlap-param-gather
bad "nccl needs cuda"         "--comm nccl"             --device cpu --comm nccl
# Activation recompute (Megatron's constraints).
bad "full needs a method"     "--recompute-granularity full needs --recompute-method" \
                                                        --recompute-granularity full --recompute-num-layers 1
bad "full needs layers"       "--recompute-granularity full needs --recompute-num-layers" \
                                                        --recompute-granularity full --recompute-method block
bad "selective takes none"    "--recompute-method (uniform) needs --recompute-granularity full, got selective" \
                                                        --recompute-granularity selective --recompute-method uniform
bad "unknown module"          "--recompute-modules: unknown module 'attn'" \
                                                        --recompute-granularity selective --recompute-modules attn
bad "recompute layers range"  "--recompute-num-layers (3) must be between 1 and the layers of a pipeline rank (2)" \
                                                        --recompute-granularity full --recompute-method uniform --recompute-num-layers 3
# Config files.
bad "missing config"          "--config"                --config "$tmp/none.toml"
bad "unknown config key"      "unknown key 'num-layerz'" --config "$tmp/typo.toml"
bad "config value checked"    "--num-attention-heads (6)" --config "$tmp/heads.toml"
# Data files.
bad "missing data file"       "--data-path $tmp/none.bin: no such file" --data-path "$tmp/none.bin"
bad "shorter than header"     "shorter than the 1024-byte llm.c header" --data-path "$tmp/stub.bin"
bad "wrong magic"             "bad magic 0"             --data-path "$tmp/zeros.bin"
bad "wrong version"           "llm.c version 2"         --data-path "$tmp/v2.bin"
bad "token id >= vocab"       "token id 65535 at token 0 is >= --vocab-size (256)" \
                                                        --data-path "$tmp/big_ids.bin"
bad "text too short"          "shorter than --seq-length + 1" --data-path "$tmp/short.txt"
bad "text needs vocab 256"    "needs --vocab-size >= 256, got 100" \
                                                        --data-path "$tmp/text.txt" --vocab-size 100

# A launched world that the layout does not divide: every rank stops, one line in all.
if command -v mpirun >/dev/null 2>&1; then
  expect_error "launched world by tp" "launched world size (3) must be divisible by --tp (2)" \
    -- mpirun -np 3 "$trainer" --tp 2
fi

# --help is not an error: the manual on stdout, status 0.
if "$trainer" --help >"$tmp/help" 2>"$tmp/stderr" && grep -q -- "--num-attention-heads" "$tmp/help" \
   && [ ! -s "$tmp/stderr" ]; then
  passed=$((passed + 1))
else
  failed=$((failed + 1)); echo "FAIL --help: want the manual on stdout and status 0"
fi

echo "cli_errors: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
