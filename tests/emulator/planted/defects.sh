#!/usr/bin/env bash
# tests/emulator/planted/defects.sh: negative controls for the emulated device's checks. Each
# defect below is planted in a copy of one of paralab's real CUDA sources (the exact text it
# replaces must be found there once: a kernel that changed fails this test until its defect is
# updated), the copy is compiled as the emulated build compiles it and linked, first, beside the
# build's other objects with a small driver (planted/driver.cpp) that runs the op; the emulator
# must report the defect by the right check, naming the right kernel. A checker that has never
# caught anything is not a checker. The driver on the unchanged build must run clean.
#
#   bash tests/emulator/planted/defects.sh        (after make emulated)
set -uo pipefail
cd "$(dirname "$0")/../../.."
BUILD=build/emulated
[ -x "$BUILD/planted_driver" ] || { echo "defects.sh: $BUILD/planted_driver missing (make emulated)"; exit 1; }
read -r -a FLAGS <<<"$(make -s EMULATED=1 emulated-kernel-flags)"
read -r -a LIBS <<<"$(make -s EMULATED=1 emulated-link-libs)"
# the emulated build's library objects (some of them the main build's: the Makefile says why)
mapfile -t LIBRARY < <(make -s EMULATED=1 emulated-library-objects)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/paralab_defects.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
passed=0; failed=0
pass() { passed=$((passed + 1)); echo "PASS  $*"; }
fail() { failed=$((failed + 1)); echo "FAIL  $*"; }

# The unchanged build: every op the defects use runs clean.
for op in flash-forward flash-backward grouped-gemm; do
  out=$(OPENBLAS_NUM_THREADS=1 "$BUILD/planted_driver" "$op" 2>&1)
  if [ "$out" = clean ]; then pass "unchanged build: $op runs clean"
  else fail "unchanged build: $op: $out"; fi
done

# plant NAME FILE ORIGINAL REPLACEMENT OP REGEX [SOURCES...]: SOURCES are the .cu files to
# compile (FILE's own when it is a .cu).
plant() {
  local name=$1 file=$2 original=$3 replacement=$4 op=$5 regex=$6
  shift 6
  local sources=("$@")
  [ ${#sources[@]} -eq 0 ] && sources=("$file")
  local count
  count=$(grep -cF -- "$original" "$file")
  if [ "$count" -ne 1 ]; then
    fail "$name: the text to replace is in $file $count times, not once: update the defect"
    return
  fi
  local dir="$WORK/${name// /_}"
  mkdir -p "$dir/src/kernels/cuda" "$dir/gen"
  cp -r "$BUILD/gen/kernels" "$dir/gen/"
  python3 - "$file" "$dir/src/$file" "$original" "$replacement" <<'PY'
import sys
src, dst, old, new = sys.argv[1:5]
text = open(src).read()
open(dst, "w").write(text.replace(old, new, 1))
PY
  python3 kernels/emulator/translate.py "$dir/src/$file" "$dir/gen/$file"
  local objects=() replaced=()
  for cu in "${sources[@]}"; do
    [ -f "$dir/src/$cu" ] || cp "$cu" "$dir/src/$cu"
    [ "$cu" = "$file" ] || python3 kernels/emulator/translate.py "$cu" "$dir/gen/$cu"
    local obj="$dir/$(basename "$cu").o"
    if ! g++ "${FLAGS[@]/#-I$BUILD\/gen/-I$dir/gen}" -c "$dir/gen/$cu" -o "$obj" 2>"$dir/compile.log"; then
      fail "$name: does not compile: $(head -3 "$dir/compile.log")"
      return
    fi
    objects+=("$obj")
    replaced+=("$BUILD/$cu.o")
  done
  local others=()
  while IFS= read -r o; do
    local skip=0
    for r in "${replaced[@]}"; do [ "$o" = "$r" ] && skip=1; done
    [ $skip -eq 0 ] && others+=("$o")
  done < <(printf '%s\n' "$BUILD/tests/emulator/planted/driver.o" "${LIBRARY[@]}")
  if ! g++ -o "$dir/driver" "${objects[@]}" "${others[@]}" "${LIBS[@]}" 2>"$dir/link.log"; then
    fail "$name: does not link: $(head -3 "$dir/link.log")"
    return
  fi
  local out
  out=$(OPENBLAS_NUM_THREADS=1 "$dir/driver" "$op" 2>/dev/null)
  if grep -qE -- "$regex" <<<"$out"; then pass "$name: ${out:0:160}"
  else fail "$name: expected /$regex/, got: ${out:0:300}"; fi
}

# Each defect compiles, links and runs on its own: nproc of them at a time, their lines printed
# in the order below once all are done (a 2-core machine halves the suite's time).
results=()
plant_in_background() {
  local result="$WORK/result.${#results[@]}"
  results+=("$result")
  while [ "$(jobs -rp | wc -l)" -ge "$(nproc)" ]; do wait -n; done
  plant "$@" > "$result" 2>&1 &
}

FWD=kernels/cuda/flash_mma_forward.cu
BWD=kernels/cuda/flash_mma_backward.cu
plant_in_background "missing __syncthreads in the forward's tile loop" "$FWD" \
  "    __syncthreads();  // every warp is done with this stage before tile t + 2 overwrites it" \
  "    // (the barrier planted away)" \
  flash-forward "racecheck: .*forward_kernel<kernels::bf16, 64>.*hazard on dynamic shared memory"
plant_in_background "the forward prefetches into the stage it computes on" "$FWD" \
  "      load_rows_async<D, kBc, kThreads>(sK + (stage ^ 1) * kBc * kStride, Kh, k0 + kBc," \
  "      load_rows_async<D, kBc, kThreads>(sK + stage * kBc * kStride, Kh, k0 + kBc," \
  flash-forward "racecheck: .*forward_kernel<kernels::bf16, 64>.*hazard on dynamic shared memory"
plant_in_background "off by one in a tile's last row" kernels/cuda/flash_mma.cuh \
  "    const bool inside = row0 + r < rows;" \
  "    const bool inside = row0 + r <= rows;" \
  flash-forward "memcheck: .*forward_kernel<kernels::bf16, 64>.*cp.async source.*past its end" "$FWD"
plant_in_background "a cp.async from a misaligned address" kernels/cuda/flash_mma.cuh \
  "    const H* src = inside ? head + (size_t)(row0 + r) * D + c * 8 : head;" \
  "    const H* src = inside ? head + (size_t)(row0 + r) * D + c * 8 + 4 : head;" \
  flash-forward "memcheck: .*forward_kernel<kernels::bf16, 64>.*cp.async source .* not 16-byte aligned" "$FWD"
plant_in_background "a wrong ldmatrix lane address" kernels/cuda/mma_layout.h \
  "  return Coord{(lane & 7) + (lane >> 4) * 8, ((lane >> 3) & 1) * 8};" \
  "  return Coord{(lane & 7) + (lane >> 4) * 8, ((lane >> 3) & 1) * 4};" \
  flash-forward "memcheck: .*forward_kernel<kernels::bf16, 64>.*ldmatrix row: .*not 16-byte aligned" "$FWD"
plant_in_background "a launch with more shared memory than its attribute" "$FWD" \
  "  if (!set_smem(forward_kernel<H, D>, F::kSmemBytes)) return false;" \
  "  if (!set_smem(forward_kernel<H, D>, F::kSmemBytes - 1024)) return false;" \
  flash-forward "launch of .*forward_kernel<kernels::bf16, 64>.*bytes of dynamic shared memory, above the kernel's limit"
plant_in_background "the dK, dV kernel's barrier before the next stage's loads removed" "$BWD" \
  "$(grep -m1 -F '__syncthreads();  // every warp' "$BWD" || echo 'NOT FOUND IN flash_mma_backward.cu')" \
  "    // (the barrier planted away)" \
  flash-backward "racecheck: .*(dq|dkdv)_kernel<kernels::bf16, 64>"
plant_in_background "the grouped GEMM's B pointers one group off" kernels/cuda/memory_gemm.cu \
  "      (const void* const*)dev, type, ld_a.data(), (const void* const*)(dev + stride), type," \
  "      (const void* const*)dev, type, ld_a.data(), (const void* const*)(dev + stride + 1), type," \
  grouped-gemm "memcheck: cublasGemmGroupedBatchedEx .*'s B at 0x0 .*not device memory"

wait
for result in "${results[@]}"; do
  cat "$result"
  passed=$((passed + $(grep -c '^PASS' "$result")))
  failed=$((failed + $(grep -c '^FAIL' "$result")))
done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
