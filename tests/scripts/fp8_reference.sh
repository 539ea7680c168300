#!/usr/bin/env bash
# tests/data/fp8_reference.txt is what scripts/fp8_reference.py writes with PyTorch's float8
# dtypes: runs it again (torch in build/hf-venv, as .ci/run installs it, or $PARALAB_HF_PYTHON;
# else ml_dtypes where importable) and compares every line but the first (which names the
# library). tests/test_fp8.cpp holds kernels/fp8.h to the committed file.
set -uo pipefail
cd "$(dirname "$0")/../.."
source "$(dirname "$0")/../test_python.sh"  # python: the test venv's
if ! "$python" -c 'import numpy; import torch' 2>/dev/null && ! "$python" -c 'import numpy, ml_dtypes' 2>/dev/null; then
  echo "fp8_reference: neither torch nor ml_dtypes (with numpy) in $python: skipped"
  exit 0
fi
out=$(mktemp)
trap 'rm -f "$out"' EXIT
"$python" scripts/fp8_reference.py "$out" || { echo "fp8_reference: scripts/fp8_reference.py failed"; exit 1; }
head -1 "$out"
if diff <(tail -n +2 tests/data/fp8_reference.txt) <(tail -n +2 "$out") > /dev/null; then
  echo "fp8_reference: tests/data/fp8_reference.txt matches, $(grep -c '^encode' "$out") casts and 256 decodes per format"
else
  echo "fp8_reference: tests/data/fp8_reference.txt differs from this library's codes:"
  diff <(tail -n +2 tests/data/fp8_reference.txt) <(tail -n +2 "$out") | head -20
  exit 1
fi
