#!/usr/bin/env bash
# tests/scripts/megatron_data.sh: paralab's samples of Megatron's indexed datasets, blends,
# splits and mock data against megatron-core's own GPTDataset and BlendedDataset, token for
# token (tests/scripts/megatron_data.py). megatron-core (PyPI) needs torch: the Python of
# build/hf-venv (.ci/run installs both there), or $PARALAB_HF_PYTHON; without megatron-core the
# suite fails rather than skips, unless PARALAB_ALLOW_SKIP=1.
# Usage: bash tests/scripts/megatron_data.sh build/megatron_samples
set -uo pipefail
tool=$(realpath "${1:?usage: tests/scripts/megatron_data.sh build/megatron_samples}")
cd "$(dirname "$0")/../.."
source "$(dirname "$0")/../test_python.sh"  # python: the test venv's
if ! "$python" -c 'import megatron.core.datasets.gpt_dataset' 2>/dev/null; then
  echo "megatron-core does not import in $python (pip install torch megatron-core)"
  [ "${PARALAB_ALLOW_SKIP:-0}" = 1 ] && { echo "0 passed, 0 failed"; exit 0; }
  echo "0 passed, 1 failed"; exit 1
fi
export OPENBLAS_NUM_THREADS=1
log=$(mktemp)
trap 'rm -f "$log"' EXIT
"$python" tests/scripts/megatron_data.py "$tool" 2> "$log"
status=$?
[ "$status" = 0 ] || tail -5 "$log"  # megatron-core's and torch's warnings, shown on a failure
exit "$status"
