#!/usr/bin/env bash
# tests/docs_commands.sh: every `./trainer` command the README and docs/ show still runs as
# written: it parses, and it passes the flag checks a run makes before it allocates anything.
#
# It reads the fenced code blocks (``` ... ```) of README.md and docs/*.md, joins lines that
# end in `\`, cuts each at a `#` comment and at a pipe or `;`, and keeps every command line
# whose program is `./trainer`. Each is run on one rank with `--plan` appended (the plan
# checks exactly what a run checks, `--world-size` standing for the ranks not launched):
#   ./trainer ARGS                     ->  ./trainer ARGS --plan
#   mpirun -np N ./trainer ARGS        ->  ./trainer ARGS --world-size N --plan
#   VAR=value ./trainer ARGS           ->  the same, with VAR in the environment
# and must exit 0. The commands run in a scratch folder that links configs/ and lessons/,
# so the files they name resolve as from the repository root and what they write (a
# --trace under --plan, a --save folder) lands in the scratch folder.
#
# Skipped, each named in the output with its reason, and only these kinds:
#   --benchmark    measures the machine (GEMMs and collectives over seconds); there is no
#                  plan of it to check (tests/mpi/benchmark.sh runs it)
#   --convert      converts a checkpoint on disk to a Hugging Face folder; nothing to plan
#                  and no checkpoint here (tests/scripts/hf_check.sh runs it)
#   srun ...       the world size is Slurm's allocation (salloc's line), not on the command
#   a file no checkout holds: --hardware FILE.toml, --data-path FILE, --load-hf DIR or
#                  --load DIR (unless --save names it too) that another command makes first (e.g. --benchmark-save's profile); a missing
#                  --config file is NOT skipped: a preset the docs name must exist
#   a placeholder: `$VAR`, `[...]`, `...`, `<...>` or a shell loop (a template, not a command)
#
# And every preset's header (configs/models/*.toml) states the parameter count its plan has,
# to the digits it gives ("0.44M parameters").
#
# Prints one line per failure (the file and line, the command, the trainer's last line),
# one per skip (VERBOSE=1: one per pass too), then "N passed, M failed"; exits non-zero on
# any failure.
# Usage (from anywhere): bash tests/docs_commands.sh [path/to/trainer]   (default ./trainer)
set -uo pipefail
cd "$(dirname "$0")/.."
trainer=$(realpath "${1:-./trainer}") || { echo "docs_commands.sh: no trainer at ${1:-./trainer}" >&2; exit 2; }
[ -x "$trainer" ] || { echo "docs_commands.sh: $trainer is not executable" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ln -s "$PWD/configs" "$tmp/configs"
ln -s "$PWD/lessons" "$tmp/lessons"
export OPENBLAS_NUM_THREADS=1
python3 - "$trainer" "$tmp" "$PWD" <<'EOF'
import glob, os, shlex, subprocess, sys

trainer, scratch, root = sys.argv[1:4]
files = ["README.md"] + sorted(glob.glob("docs/*.md"))

def logical_lines(path):
    """(line number, text) of each command line inside the file's fenced code blocks."""
    out, fenced, buf, start = [], False, "", 0
    for n, line in enumerate(open(path, encoding="utf-8"), 1):
        line = line.rstrip("\n")
        if line.lstrip().startswith("```"):
            fenced = not fenced
            buf = ""
            continue
        if not fenced:
            continue
        if not buf:
            start = n
        if line.rstrip().endswith("\\"):
            buf += line.rstrip()[:-1] + " "
            continue
        out.append((start, buf + line))
        buf = ""
    return out

def words(text):
    """Shell words up to the first comment, pipe, `;` or `&&`."""
    lex = shlex.shlex(text, posix=True, punctuation_chars=";&|<>()")
    lex.whitespace_split = True
    lex.commenters = "#"
    out = []
    for w in lex:
        if w and set(w) <= set(";&|<>()"):
            break
        out.append(w)
    return out

def placeholder(line, ws):
    return (any("$" in w or w.startswith("[") or w.endswith("]") or "..." in w or w.startswith("<")
                for w in ws)
            or line.lstrip().startswith(("for ", "while ", "do ", "done")))

seen, cases = set(), []
for path in files:
    for n, line in logical_lines(path):
        if "trainer" not in line:
            continue
        try:
            ws = words(line)
        except ValueError as e:
            cases.append((path, n, line, None, f"not shell words: {e}"))
            continue
        idx = next((i for i, w in enumerate(ws) if w == "./trainer"), None)
        if idx is None:
            continue
        pre, args = ws[:idx], ws[idx + 1:]
        key = (tuple(pre), tuple(args))
        if key in seen:
            continue
        seen.add(key)
        cases.append((path, n, " ".join(ws), (pre, args), None))

def flag(args, name):
    for i, a in enumerate(args):
        if a == name and i + 1 < len(args):
            return args[i + 1]
        if a.startswith(name + "="):
            return a.split("=", 1)[1]
    return None

passed = failed = skipped = 0
for path, n, text, parsed, error in cases:
    where = f"{path}:{n}"
    if error:
        failed += 1
        print(f"FAIL {where}: {text}\n    {error}")
        continue
    pre, args = parsed
    env, world, reason = dict(os.environ), None, None
    i = 0
    while i < len(pre):
        w = pre[i]
        if "=" in w and not w.startswith("-") and w.split("=", 1)[0].isidentifier():
            k, v = w.split("=", 1); env[k] = v
        elif w in ("mpirun", "mpiexec"):
            pass
        elif w in ("-np", "-n") and i + 1 < len(pre):
            world = pre[i + 1]; i += 1
        elif w == "srun":
            reason = "srun: the world size is Slurm's allocation"
            break
        else:
            reason = f"launcher word '{w}' this check does not know"
        i += 1
    if reason is None and placeholder(text, args):
        reason = "a placeholder, not a command"
    if reason is None and "--benchmark" in args:
        reason = "--benchmark measures the machine; nothing to plan"
    if reason is None and "--convert" in args:
        reason = "--convert needs a checkpoint on disk; nothing to plan"
    if reason is None:
        for name in ("--hardware", "--data-path", "--load-hf", "--load"):
            v = flag(args, name)
            if v is None or (name == "--load" and flag(args, "--save") == v):
                continue  # --load and --save of one folder: the first job, from step 1
            is_file = name != "--hardware" or v.endswith(".toml") or "/" in v
            if is_file and not os.path.exists(os.path.join(root, v)):
                reason = f"{name} {v}: a file another command makes first"
    if reason:
        skipped += 1
        print(f"skip {where}: {text}\n    ({reason})")
        continue
    run = list(args)
    if world is not None and flag(run, "--world-size") is None:
        run += ["--world-size", world]
    if "--plan" not in run:
        run.append("--plan")
    try:
        p = subprocess.run([trainer] + run, cwd=scratch, env=env, capture_output=True,
                           text=True, timeout=60)
        rc, err = p.returncode, (p.stderr.strip().splitlines() or p.stdout.strip().splitlines() or [""])[-1]
    except subprocess.TimeoutExpired:
        rc, err = "timeout", "ran past 60 s"
    if rc == 0:
        passed += 1
        if os.environ.get("VERBOSE"):
            print(f"ok   {where}: ./trainer {shlex.join(run)}")
    else:
        failed += 1
        print(f"FAIL {where}: {text}\n    ran: ./trainer {shlex.join(run)}\n    exit {rc}: {err}")
# The presets are documentation too: the parameter count each one's header states ("0.44M
# parameters", "6.74B parameters") is the plan's Psi at the stated precision.
import re
presets = sorted(glob.glob(os.path.join(root, "configs/models/*.toml")))
for path in presets:
    header = " ".join(l.lstrip("#").strip() for l in open(path, encoding="utf-8") if l.startswith("#"))
    m = re.search(r"([0-9]+(?:\.[0-9]+)?)([MB]) parameters", header)
    name = os.path.relpath(path, root)
    if not m:
        failed += 1
        print(f"FAIL {name}: its header states no parameter count (N.NM parameters)")
        continue
    p = subprocess.run([trainer, "--config", path, "--plan", "--json"], cwd=root, env=env,
                       capture_output=True, text=True, timeout=60)
    import json
    psi = json.loads(p.stdout)["params"]["total"] if p.returncode == 0 else None
    decimals = len(m.group(1).split(".")[1]) if "." in m.group(1) else 0
    unit = 1e6 if m.group(2) == "M" else 1e9
    if psi is not None and f"{psi / unit:.{decimals}f}" == m.group(1):
        passed += 1
    else:
        failed += 1
        print(f"FAIL {name}: states {m.group(0)}, the plan's Psi is {psi}")
print(f"docs_commands: {len(cases)} commands in {len(files)} files, {skipped} skipped; "
      f"{len(presets)} presets' parameter counts")
print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
EOF
