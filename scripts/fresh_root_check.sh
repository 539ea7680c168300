#!/usr/bin/env bash
# scripts/fresh_root_check.sh: proves the README's quick start on a machine that has none of
# the packages paralab needs. It builds a minimal Debian root with mmdebstrap (variant "apt":
# dpkg, apt and the essential set; no compiler, no pkg-config, no python; `make` added, the
# one thing the README asks a fresh machine to have), copies this checkout in (the files git
# tracks or would track: what a clone holds), and runs, as root inside it, exactly what a new
# user types:
#     make run          (set-up installs the packages, builds, trains the demo)
#     make -jN test     (every suite; -j as a user in a hurry would)
# The host's apt sources are used, so a local mirror or snapshot applies. No CUDA toolkit
# inside: this is the CPU-only path; .ci/run covers the nvcc build on the host.
#
# usage (as root): bash scripts/fresh_root_check.sh [--quick]   (--quick: `make run`, then the
#                  test binaries and one suite of each kind, tests/run_all.sh --quick, which
#                  includes scripts/plot's charts (matplotlib), instead of `make test`)
# Prints the time of each phase; exits non-zero if either command fails.
set -euo pipefail
cd "$(dirname "$0")/.."
quick=0
[ "${1:-}" = --quick ] && quick=1
[ "$(id -u)" -eq 0 ] || { echo "fresh_root_check.sh: needs root (chroot, mounts)" >&2; exit 2; }
if ! command -v mmdebstrap >/dev/null 2>&1; then
  echo "fresh_root_check.sh: installing mmdebstrap"
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends mmdebstrap >/dev/null
fi

. /etc/os-release
suite=${VERSION_CODENAME:?no VERSION_CODENAME in /etc/os-release}
sources=()
for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
  [ -s "$f" ] && grep -q '^[^#]' "$f" && sources+=("$f")
done

root=$(mktemp -d /tmp/paralab-fresh-root.XXXXXX)
cleanup() { rm -rf --one-file-system "$root"; }
trap cleanup EXIT
start=$SECONDS
mmdebstrap --quiet --variant=apt --include=make "$suite" "$root" "${sources[@]}"
echo "fresh root: Debian $suite (variant apt + make) in $((SECONDS - start)) s"

mkdir -p "$root/root/paralab"
git ls-files -co --exclude-standard -z | tar --null -T - -cf - | tar -xf - -C "$root/root/paralab"

# What runs inside: a new user's shell, without this machine's environment (only the two
# OpenBLAS settings some processors need, see the environment notes, pass through).
inner='set -e; cd /root/paralab; t0=$(date +%s)
make run
t1=$(date +%s); echo "fresh root: make run took $((t1 - t0)) s"
if [ "$1" = 1 ]; then make -j"$(nproc)" binaries && bash tests/run_all.sh --quick
else make -j"$(nproc)" test; fi
echo "fresh root: the tests took $(( $(date +%s) - t1 )) s"'
keep_env=(HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8)
for v in OPENBLAS_CORETYPE OPENBLAS_L2_SIZE; do [ -n "${!v:-}" ] && keep_env+=("$v=${!v}"); done
# A private mount namespace: /proc, /dev (with /dev/shm, which MPICH's shared memory uses) and
# /sys exist inside and vanish with the process, whatever happens.
unshare --mount --fork -- bash -c '
  set -e; root=$1; shift
  mount -t proc proc "$root/proc"
  mount --rbind /dev "$root/dev"
  mount --rbind /sys "$root/sys"
  exec chroot "$root" /usr/bin/env -i "$@"' _ "$root" "${keep_env[@]}" /bin/bash -c "$inner" _ "$quick"
