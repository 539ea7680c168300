#!/usr/bin/env python3
"""Checks a measured --trace file (Chrome trace JSON) of a multi-rank run.

usage: tests/mpi/check_trace.py TRACE --world N [--groups tp,dp,pp] [--flows]

Holds what report/rank_report.h (measured_trace) promises a reader in Perfetto:
  - every world rank 0..N-1 is a process, with a "compute" lane (its actions) and a
    "comm" lane;
  - no slice is empty (dur > 0);
  - every flow ends no earlier than it starts (a receive ends after its send started:
    the clocks are aligned), and both its ends lie inside a slice of their lane;
  - each group named in --groups has calls on a comm lane of every rank (pp: exchanges);
  - --flows: there are flows at all (a pipeline).
Prints one line per check, "ok" or "FAIL", and exits 1 when any failed.
"""
import argparse
import collections
import json
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace")
    ap.add_argument("--world", type=int, required=True)
    ap.add_argument("--groups", default="")
    ap.add_argument("--flows", action="store_true")
    args = ap.parse_args()
    events = json.load(open(args.trace))["traceEvents"]
    failed = []

    def check(name, ok, detail=""):
        print(f"{'ok  ' if ok else 'FAIL'}  {name}" + (f": {detail}" if detail else ""))
        if not ok:
            failed.append(name)

    procs = {e["pid"]: e["args"]["name"] for e in events if e.get("name") == "process_name"}
    check(f"a process per world rank 0..{args.world - 1}",
          sorted(procs) == list(range(args.world)), f"pids {sorted(procs)}")
    lanes = collections.defaultdict(dict)
    for e in events:
        if e.get("name") == "thread_name":
            lanes[e["pid"]][e["tid"]] = e["args"]["name"]
    check("every rank has lanes compute (0) and comm (1)",
          all(lanes[r].get(0) == "compute" and lanes[r].get(1) == "comm"
              for r in range(args.world)))
    slices = [e for e in events if e.get("ph") == "X"]
    by_lane = collections.defaultdict(list)
    for e in slices:
        by_lane[(e["pid"], e["tid"])].append(e)
    empty = [e for e in slices if not e["dur"] > 0]
    check("no empty slices", not empty, f"{len(empty)} of {len(slices)}" if empty else
          f"{len(slices)} slices")
    check("every rank has actions on its compute lane",
          all(any(e["cat"] == "compute" for e in by_lane[(r, 0)]) for r in range(args.world)))
    # slices of one lane nest (here: never overlap), or Perfetto drops them
    overlaps = 0
    for key, lane in by_lane.items():
        lane.sort(key=lambda e: e["ts"])
        overlaps += sum(1 for a, b in zip(lane, lane[1:]) if b["ts"] < a["ts"] + a["dur"] - 1e-3)
    check("slices of a lane do not overlap", overlaps == 0, f"{overlaps} overlaps")

    def inside(pid, tid, ts):
        return any(e["ts"] <= ts <= e["ts"] + e["dur"] for e in by_lane[(pid, tid)])

    starts = {e["id"]: e for e in events if e.get("ph") == "s"}
    ends = {e["id"]: e for e in events if e.get("ph") == "f"}
    check("every flow has both ends", sorted(starts) == sorted(ends))
    backwards = [i for i in starts if i in ends and ends[i]["ts"] < starts[i]["ts"]]
    check("no flow points backwards (end >= start)", not backwards,
          f"{len(backwards)} of {len(starts)}" +
          (f", e.g. {starts[backwards[0]]['ts']} -> {ends[backwards[0]]['ts']}" if backwards else ""))
    unbound = [i for i in starts if i in ends and not (
        inside(starts[i]["pid"], starts[i]["tid"], starts[i]["ts"]) and
        inside(ends[i]["pid"], ends[i]["tid"], ends[i]["ts"]))]
    check("every flow's ends lie inside slices of their lanes", not unbound,
          f"{len(unbound)} of {len(starts)}")
    if args.flows:
        check("the pipeline's messages are flows", len(starts) > 0, f"{len(starts)} flows")
    for group in [g for g in args.groups.split(",") if g]:
        missing = [r for r in range(args.world)
                   if not any(e["cat"] == group and e["tid"] >= 1 and
                              lanes[r].get(e["tid"], "").startswith("comm")
                              for e in slices if e["pid"] == r)]
        check(f"{group} calls on a comm lane of every rank", not missing,
              f"missing on ranks {missing}" if missing else "")
    print(f"{args.trace}: {len(failed)} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
