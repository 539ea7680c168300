# lessons/lib.sh: the start every lesson's check.sh shares (sourced, not run). Given the
# trainer's path as the script's first argument (default: the repository's ./trainer), it
# sets `trainer` (absolute), `root` (the repository), `work` (a scratch folder removed on
# exit), defines give_up MESSAGE (one line, then "0 passed, 1 failed", exit 1), checks the
# trainer exists and cd's to the repository root.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
trainer=${1:-$root/trainer}
case $trainer in /*) ;; *) trainer="$PWD/$trainer" ;; esac
give_up() { echo "$1"; echo "0 passed, 1 failed"; exit 1; }
[ -x "$trainer" ] || give_up "no trainer at $trainer (run make)"
cd "$root"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
