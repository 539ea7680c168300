"""lessons/checks.py: what every lesson's check.sh shares (imported by its python3 part,
which runs from the repository root): one line per check, the tally, the exit status, and
reading back a run's `--plan --json` and `--metrics-jsonl`.

    import sys; sys.path.insert(0, "lessons"); from checks import check, load, finish
"""
import json
import sys

_tally = {"passed": 0, "failed": 0}


def record(name, good, shown):
    """Counts one check and prints `ok    name: shown` or `FAIL  name: shown`."""
    _tally["passed" if good else "failed"] += 1
    print(f"{'ok  ' if good else 'FAIL'}  {name}: {shown}")
    return good


def check(name, got, want, tol=0.0):
    """got == want (or within tol relative); prints got, and want when they differ."""
    good = got == want if tol == 0 else abs(got - want) <= tol * abs(want)
    return record(name, good, f"{got}" + ("" if good else f" (want {want})"))


def load(work, name):
    """(plan, steps): work/name.json (--plan --json) and work/name.jsonl (--metrics-jsonl)."""
    with open(f"{work}/{name}.json") as f:
        plan = json.load(f)
    with open(f"{work}/{name}.jsonl") as f:
        rows = [json.loads(line) for line in f if line.strip()]
        return plan, [r for r in rows if r.get("type", "step") == "step"]  # not the summary


def finish():
    """Prints `N passed, M failed` and exits non-zero when anything failed."""
    print(f"{_tally['passed']} passed, {_tally['failed']} failed")
    sys.exit(1 if _tally["failed"] else 0)
