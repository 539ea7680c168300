#!/usr/bin/env bash
# scripts/setup.sh: installs the Debian/Ubuntu packages paralab builds against, when missing.
#
# Idempotent and quiet: when everything is present it prints nothing and exits 0 at once
# (`make run` and `make test` call it every time). Otherwise, as root it runs apt-get update
# and installs what is missing; as anyone else it prints the exact command and exits 1.
# The CUDA toolkit is not installed here: without nvcc, `make` builds the CPU-only binary.
set -euo pipefail

# g++ and pkg-config build it (the Makefile asks pkg-config for the MPI and BLAS flags);
# MPICH launches the ranks; CLI11 parses the flags; nlohmann/json reads every JSON file
# (checkpoint/json_document.h) and toml++ the --config files (cli/flags_toml.cpp); OpenBLAS is
# the CPU GEMM; GoogleTest runs the tests; python3 runs the tests' and lessons' comparisons
# (standard library only); python3-matplotlib draws scripts/plot's charts; Boost.Context runs
# the emulated device's threads as fibers (make emulated: kernels/emulator/); binutils'
# addr2line names the source lines in the emulator's reports.
packages=(g++ make pkg-config mpich libmpich-dev libcli11-dev nlohmann-json3-dev
          libtomlplusplus-dev libopenblas-dev googletest libgtest-dev python3 python3-matplotlib
          libboost-context-dev binutils)

if ! command -v dpkg-query >/dev/null 2>&1; then
  echo "setup.sh: not a Debian/Ubuntu system; install g++, pkg-config, MPICH, CLI11," \
       "nlohmann/json, toml++, OpenBLAS and GoogleTest yourself" >&2
  exit 0
fi

# One dpkg-query for all packages keeps the all-present case fast.
installed=$(dpkg-query -W -f='${Package} ${db:Status-Status}\n' "${packages[@]}" 2>/dev/null \
            | awk '$2 == "installed" { print $1 }' || true)
missing=()
for p in "${packages[@]}"; do
  grep -qx "$p" <<<"$installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

install=(apt-get install -y --no-install-recommends "${missing[@]}")
if [ "$(id -u)" -ne 0 ]; then
  echo "paralab needs: ${missing[*]}. Install them with:" >&2
  echo "  sudo apt-get update && sudo ${install[*]}" >&2
  exit 1
fi
echo "setup.sh: installing ${missing[*]}"
start=$SECONDS
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
"${install[@]}"
echo "setup.sh: installed ${#missing[@]} packages (and their dependencies) in $((SECONDS - start)) s"
