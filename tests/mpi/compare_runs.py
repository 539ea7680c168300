#!/usr/bin/env python3
"""Compare two trainer runs: per-step losses (--metrics-jsonl) and final parameters (--save-tensors).

usage: compare_runs.py REF.jsonl REF.bin RUN.jsonl RUN.bin [--rtol 1e-5] [--params-rtol R]

Losses must agree to rtol relative at every step, and so must the validation losses
(--eval-interval: "validation_loss" on the steps that evaluated, the same steps in both); every parameter tensor must agree to rtol
in the norm-wise relative sense ||a - b|| / ||b|| (elementwise comparisons of values that
are ~0 say nothing about the math); --params-rtol gives the tensors a bound of their own (default
--rtol; inf: not compared), for precisions whose last step's gradients a rounding or routing flip
moves further than it moves the losses (layout_fuzz.py). Both runs' ledgers must also hold the plan: at every step
the measured bytes of every category but activations equal the predicted ones exactly,
activations within 1%, the peak of the total exactly (at most where the plan marks it an
upper bound: "exact": false), what is held between steps ("resident", every rank) and CPU
offload's host memory ("host_memory", every rank) exactly, and
every communication row's calls and payload bytes, (per rank) the kernels' FLOP count and
(rank 0) the GEMM calls per label equal the prediction exactly, on rank 0 and (when the run gathered them) on every rank.
Prints the worst of each; exit 1 on failure.
"""
import json
import math
import struct
import sys


def read_tensor_file(path):
    """checkpoint/tensor_file.h: "PLTF", version, count, then (name, dtype, dims, data)."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:4] != b"PLTF":
        raise SystemExit(f"{path}: not a tensor file")
    _version, count = struct.unpack_from("<IQ", data, 4)
    pos = 16
    tensors = {}
    for _ in range(count):
        (name_len,) = struct.unpack_from("<I", data, pos)
        pos += 4
        name = data[pos:pos + name_len].decode()
        pos += name_len
        dtype, ndim = struct.unpack_from("<II", data, pos)
        pos += 8
        dims = struct.unpack_from(f"<{ndim}q", data, pos)
        pos += 8 * ndim
        numel = math.prod(dims) if dims else 1
        kind = "f" if dtype == 0 else "i"
        tensors[name] = struct.unpack_from(f"<{numel}{kind}", data, pos)
        pos += 4 * numel
    return tensors


def records(path, kind="step"):
    """The records of one type: the steps by default (the run's last line is {"type":
    "summary"}; a save writes {"type": "checkpoint"})."""
    with open(path) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return [r for r in rows if r.get("type", "step") == kind]


def worst_tensor(ref, run):
    """The largest norm-wise relative difference ||a - b|| / ||b|| over the tensors of two
    tensor files (the difference itself where ||b|| is 0), and its tensor's name."""
    worst, worst_name = 0.0, ""
    for name, r in ref.items():
        diff = math.dist(run[name], r)
        norm = math.hypot(*r)
        rel = diff / norm if norm > 0 else diff
        if rel > worst:
            worst, worst_name = rel, name
    return worst, worst_name


EXACT = ("params", "grads", "master_params", "optimizer_states", "recompute", "comm_buffers",
         "logits", "workspace", "fp8_operands", "fp8_state")


def ledger_problems(path):
    """Where a run's measured ledger or communication differs from its plan: rank 0's, and
    every rank's when the run gathered them ("ranks": a pipeline's stages differ)."""
    problems = []
    for r in records(path):
        # rank 0's GEMM calls per label (kernels' gemm_counts) against plan/gemm_calls.h: exact,
        # but the per-expert "experts" row where the plan says it is an expectation
        calls = r.get("gemm_calls", {})
        for label, c in calls.get("labels", {}).items():
            if (label != "experts" or calls.get("experts_exact")) and c["measured"] != c["predicted"]:
                problems.append(f"step {r['step']} GEMM calls {label}: measured {c['measured']}"
                                f" predicted {c['predicted']}")
        # the rows every rank's experts ran, against the plan where it is exact (padded to
        # capacity); otherwise the plan's value is the uniform-routing expectation
        for layer in r.get("moe", {}).get("layers", []):
            if layer.get("expert_rows_exact"):
                for i, rows in enumerate(layer.get("expert_rows_per_rank", [])):
                    if rows != layer["expert_rows_expected"]:
                        problems.append(f"step {r['step']} layer {layer['layer']} expert rows of"
                                        f" holder {i}: measured {rows} predicted"
                                        f" {layer['expert_rows_expected']}")
        views = [("", r)] + [(f"rank {x['rank']} ", x) for x in r.get("ranks", [])]
        for who, v in views:
            mem = v["memory"]
            for cat in EXACT:
                if mem[cat]["measured"] != mem[cat]["predicted"]:
                    problems.append(f"step {r['step']} {who}{cat}: measured {mem[cat]['measured']}"
                                    f" predicted {mem[cat]['predicted']}")
            flops = v.get("hardware_flops")
            if isinstance(flops, dict) and flops["measured"] != flops["predicted"]:
                problems.append(f"step {r['step']} {who}hardware FLOPs: measured"
                                f" {flops['measured']} predicted {flops['predicted']}")
            # CPU offload's host column (the ledger's host bytes), rank 0 and every gathered rank
            for cat, rec in v.get("host_memory", {}).items():
                if rec["measured"] != rec["predicted"]:
                    problems.append(f"step {r['step']} {who}host {cat}: measured"
                                    f" {rec['measured']} predicted {rec['predicted']}")
            # held between steps (the ledger after the optimizer step), rank 0 and every gathered rank
            for cat, rec in v.get("resident", {}).items():
                if rec["measured"] != rec["predicted"]:
                    problems.append(f"step {r['step']} {who}resident {cat}: measured"
                                    f" {rec['measured']} predicted {rec['predicted']}")
            # the peak of the total: to the byte where the plan says it is exact (the
            # record's "exact", which its ranks share), else an upper bound
            tot = mem["total"]
            exact = r["memory"]["total"].get("exact", True)
            if (tot["measured"] != tot["predicted"] if exact
                    else tot["measured"] > tot["predicted"]):
                problems.append(f"step {r['step']} {who}total (peak): measured {tot['measured']}"
                                f" predicted {tot['predicted']}"
                                f"{'' if exact else ' (an upper bound)'}")
            act = mem["activations"]
            if abs(act["measured"] - act["predicted"]) > 0.01 * act["predicted"]:
                problems.append(f"step {r['step']} {who}activations: {act['measured']} vs"
                                f" {act['predicted']}")
            for c in v.get("comm", []):
                for key in ("calls", "payload_bytes"):
                    if c[key]["measured"] != c[key]["predicted"]:
                        problems.append(f"step {r['step']} {who}{c['group']} {c['op']} {key}:"
                                        f" measured {c[key]['measured']} predicted"
                                        f" {c[key]['predicted']}")
    return problems


def main():
    args = sys.argv[1:]
    rtol = 1e-5
    if "--rtol" in args:
        i = args.index("--rtol")
        rtol = float(args[i + 1])
        del args[i:i + 2]
    params_rtol = rtol
    if "--params-rtol" in args:
        i = args.index("--params-rtol")
        params_rtol = float(args[i + 1])
        del args[i:i + 2]
    ref_jsonl, ref_bin, run_jsonl, run_bin = args
    ok = True
    for path in (ref_jsonl, run_jsonl):
        problems = ledger_problems(path)
        if problems:
            print(f"{path}: plan and measurement differ: " + "; ".join(problems[:3]))
            ok = False
    a = [r["loss"] for r in records(run_jsonl)]
    b = [r["loss"] for r in records(ref_jsonl)]
    if len(a) != len(b):
        print(f"steps differ: {len(a)} vs {len(b)}")
        return 1
    worst_loss = max(abs(x - y) / max(abs(y), 1e-30) for x, y in zip(a, b))
    ok &= worst_loss <= rtol
    va = [(r["step"], r["validation_loss"]) for r in records(run_jsonl) if "validation_loss" in r]
    vb = [(r["step"], r["validation_loss"]) for r in records(ref_jsonl) if "validation_loss" in r]
    if [s for s, _ in va] != [s for s, _ in vb]:
        print(f"validation steps differ: {[s for s, _ in va]} vs {[s for s, _ in vb]}")
        return 1
    worst_valid = max((abs(x - y) / max(abs(y), 1e-30) for (_, x), (_, y) in zip(va, vb)),
                      default=0.0)
    ok &= worst_valid <= rtol
    ref, run = read_tensor_file(ref_bin), read_tensor_file(run_bin)
    if ref.keys() != run.keys():
        print("parameter names differ")
        return 1
    worst_param, worst_name = worst_tensor(ref, run)
    ok &= worst_param <= params_rtol
    valid = f", validation loss max rel {worst_valid:.2e} ({len(va)})" if va else ""
    print(f"loss max rel {worst_loss:.2e}{valid}, params max rel {worst_param:.2e} ({worst_name})"
          f" {'ok' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
