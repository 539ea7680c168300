# bench/gpu/hardware.sh, sourced by bench/gpu/step.sh and moe.sh: HARDWARE, the hardware
# profile of the GPU the benchmark runs on, unless the caller set it. The profile is the one the
# trainer itself picks for the GPU's name (configs/hardware/*.toml `match`: H100 SXM or PCIe,
# H200, A100 40/80 GB, L40S, RTX 4090 and 3090, H20), read back from `trainer --plan --json
# --device cuda`; a GPU no profile matches gets one measured here (`trainer --benchmark
# --benchmark-save`), and HARDWARE_NOTE says so, for the table. Needs TRAINER and WORK.
HARDWARE_NOTE=""
if [ -z "${HARDWARE:-}" ]; then
  gpu_name=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)
  HARDWARE=$("$TRAINER" --config configs/models/tiny.toml --device cuda --plan --json 2>/dev/null |
             python3 -c 'import json, re, sys
h = json.load(sys.stdin).get("time", {}).get("hardware", "")
m = re.search(r"\((configs/hardware/[^)]+\.toml)\)", h)
print(m.group(1) if m else "")' 2>/dev/null)
  if [ -n "$HARDWARE" ]; then
    HARDWARE_NOTE="the profile matching \"$gpu_name\": $HARDWARE"
  else
    HARDWARE="$WORK/measured.toml"
    "$TRAINER" --benchmark --device cuda --benchmark-save "$HARDWARE" >"$WORK/benchmark.log" 2>&1 ||
      { echo "hardware.sh: no profile matches \"$gpu_name\" and trainer --benchmark failed" >&2; exit 1; }
    HARDWARE_NOTE="no configs/hardware profile matches \"$gpu_name\": projected on one measured here ($HARDWARE)"
  fi
  echo "hardware: $HARDWARE_NOTE"
fi
