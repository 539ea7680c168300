#!/usr/bin/env bash
# tests/scripts/loss_scaler.sh: tests/data/loss_scaler_megatron.txt (the trajectories
# tests/test_loss_scaler.cpp holds model/loss_scaler.cpp to) is still exactly what
# megatron-core's DynamicGradScaler writes (tests/scripts/loss_scaler.py). megatron-core needs
# torch: the Python of build/hf-venv (.ci/run installs both there), or $PARALAB_HF_PYTHON;
# without megatron-core the suite fails rather than skips, unless PARALAB_ALLOW_SKIP=1.
# Usage: bash tests/scripts/loss_scaler.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
source "$(dirname "$0")/../test_python.sh"  # python: the test venv's
if ! "$python" -c 'import megatron.core.optimizer.grad_scaler' 2>/dev/null; then
  echo "megatron-core does not import in $python (pip install torch megatron-core)"
  [ "${PARALAB_ALLOW_SKIP:-0}" = 1 ] && { echo "0 passed, 0 failed"; exit 0; }
  echo "0 passed, 1 failed"; exit 1
fi
log=$(mktemp)
trap 'rm -f "$log"' EXIT
"$python" tests/scripts/loss_scaler.py --check tests/data/loss_scaler_megatron.txt 2> "$log"
status=$?
[ "$status" = 0 ] || tail -5 "$log"  # torch's and megatron-core's warnings, shown on a failure
exit "$status"
