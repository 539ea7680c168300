#!/usr/bin/env bash
# tests/check_layout.sh (make lint): the folders depend one way (notes/design.md),
#   kernels -> measure -> parallel -> model -> checkpoint -> plan -> report -> cli -> app
#   -> trainer.cu (top level),
# so no file includes a header from a folder after its own in that order. Tests and
# scripts sit outside the order and may include anything. Prints each violation, then
# 'N passed, N failed' (one check per source file).
set -uo pipefail
cd "$(dirname "$0")/.."
order=(kernels measure parallel model checkpoint plan report cli app)
rank_of() {  # folder (first path component) -> its place in the order; top level = last
  local i
  for i in "${!order[@]}"; do [ "${order[$i]}" = "$1" ] && { echo "$i"; return; }; done
  echo "${#order[@]}"
}
passed=0; failed=0
while IFS= read -r file; do
  own=$(rank_of "${file%%/*}")
  [ "$file" = "${file%%/*}" ] && own=${#order[@]}   # a file at the top level
  bad=""
  while IFS= read -r inc; do
    dir=${inc%%/*}
    [ "$dir" = "$inc" ] && dir=top
    if [ "$dir" = top ]; then dep=${#order[@]}; else dep=$(rank_of "$dir"); fi
    if [ "$dep" -gt "$own" ]; then bad+=" $inc"; fi
  done < <(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$file")
  if [ -n "$bad" ]; then failed=$((failed + 1)); echo "FAIL  $file includes from above its layer:$bad"
  else passed=$((passed + 1)); fi
done < <(ls kernels/*.h kernels/*.cpp kernels/ops/* kernels/cpu/* kernels/cuda/* kernels/emulator/*.h \
            kernels/emulator/*.cpp kernels/emulator/include/* measure/* parallel/* \
            model/* checkpoint/* plan/* report/* cli/* app/* 2>/dev/null)
# The root holds the entrance only: trainer.cu is its one source file (notes/design.md).
for file in $(ls *.cpp *.h *.cu *.cuh 2>/dev/null); do
  if [ "$file" = trainer.cu ]; then passed=$((passed + 1))
  else failed=$((failed + 1)); echo "FAIL  $file is a source file at the root: it belongs in a folder"; fi
done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
