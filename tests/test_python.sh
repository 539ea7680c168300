# tests/test_python.sh: sourced, not run. Sets `python` to the Python the tests' references
# run in: $PARALAB_HF_PYTHON when set, else build/hf-venv's (.ci/run installs torch,
# transformers, tensorboard and megatron-core there), else python3 (the checks that need those
# packages then say skip).
python=${PARALAB_HF_PYTHON:-python3}
if [ -z "${PARALAB_HF_PYTHON:-}" ] && [ -x build/hf-venv/bin/python ]; then
  python=build/hf-venv/bin/python
fi
