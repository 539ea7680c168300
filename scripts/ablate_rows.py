"""scripts/ablate_rows.py: scripts/ablate's reading and writing. One variant's output (a
run's --metrics-jsonl, or --plan --json) becomes one row of columns; the rows become the
aligned table for people and the CSV for machines. Which field of the trainer's output each
column reads is in scripts/ablate --help; the field names are report/report_json.cpp's."""
import csv
import json
import os
import re

# the ledger's categories (measure/ledger.h), in the trainer's order, and the table's short
# names for them (the "memory per rank" table's)
CATEGORIES = ["params", "grads", "master_params", "optimizer_states", "activations",
              "recompute", "comm_buffers", "logits", "workspace", "fp8_operands", "fp8_state",
              "total"]
SHORT = {"master_params": "master", "optimizer_states": "optim", "activations": "activ",
         "recompute": "recomp", "comm_buffers": "comm_buf", "workspace": "work",
         "fp8_operands": "fp8_ops", "fp8_state": "fp8_st"}
MIB = 1048576.0


class BadInput(Exception):
    pass

PEAK_RE = re.compile(r"peak ([0-9.eE+-]+) TFLOP/s/rank \(([^);]*)")


def header_peak(log_text):
    """(TFLOP/s per rank, its source) from the run's header line: MFU's denominator."""
    m = PEAK_RE.search(log_text)
    return (float(m.group(1)), m.group(2).strip()) if m else (None, None)


def read_plan(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        raise BadInput(f"{os.path.basename(path)}: not the plan's JSON ({e})")


def read_run(path):
    steps = []
    try:
        with open(path) as f:
            for k, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    rec = json.loads(line)
                except ValueError:
                    raise BadInput(f"{os.path.basename(path)}:{k}: not JSON")
                if rec.get("type", "step") == "step":  # the last line is the summary
                    steps.append(rec)
    except OSError as e:
        raise BadInput(f"{os.path.basename(path)}: cannot read ({e.strerror})")
    if not steps:
        raise BadInput(f"{os.path.basename(path)}: no step records")
    return steps


# ---------------------------------------------------------------------------- the rows
def grid_text(tp, cp, pp, dp):
    parts = [f"{k}{n}" for k, n in (("tp", tp), ("cp", cp), ("pp", pp), ("dp", dp)) if n > 1]
    return " ".join(parts) or "1"


def mean(xs):
    return sum(xs) / len(xs)


def row_of_run(data):
    """The table's numbers from one run's step records (rank 0's lines; `ranks` per rank)
    and the peak its header printed."""
    steps, (peak, peak_source) = data
    last = steps[-1]
    timed = steps[1:] or steps  # step 1 pays the warm-up (first touches, the peak's sgemm)
    ranks = last.get("ranks") or []
    row = {"ranks": len(ranks) or 1,
           "grid": grid_text(*(1 + max((r.get(k, 0) for r in ranks), default=0)
                               for k in ("tp_rank", "cp_rank", "pp_rank", "dp_rank"))),
           "loss": last["loss"], "step_ms": mean([s["step_ms"] for s in timed]),
           "peak_tflops": peak, "peak_source": peak_source}
    for key in ("tokens_per_s", "mfu", "hfu", "bubble"):
        vals = [s.get(key) for s in timed]
        row[key] = mean(vals) if all(isinstance(x, (int, float)) for x in vals) else None
    t = last.get("time")
    row["projected_step_ms"] = t["step_s"]["projected"] * 1e3 if t else None
    for c in CATEGORIES:
        row["mem_" + c] = max(r["memory"][c]["measured"]
                              for s in steps for r in [s] + (s.get("ranks") or []))
    for c in last.get("comm", []):
        key = "comm_" + c["group"]
        row[key] = row.get(key, 0) + c["bus_bytes"]["measured"]
    return row


def row_of_plan(p):
    par = p["parallel"]
    row = {"ranks": par["world_size"],
           "grid": grid_text(par["tensor_parallel"], par["context_parallel"],
                             par["pipeline_parallel"], par["data_parallel"]),
           "loss": None, "step_ms": None}
    t = p.get("time") or {}
    projected = t.get("projected", False)
    # the projection's MFU divides by the profile's peak (time.peak_tflops)
    peak = p.get("peak") or {}
    row["peak_tflops"] = t["peak_tflops"] if projected else peak.get("tflops")
    row["peak_source"] = t["hardware"] if projected else peak.get("source")
    projected = t.get("projected", False)
    row["tokens_per_s"] = t["tokens_per_second"] if projected else None
    row["mfu"] = t["mfu"] if projected else None
    row["hfu"] = t["hfu"] if projected else None
    row["bubble"] = p["pipeline"]["bubble_simulated"] if "pipeline" in p else None
    row["projected_step_ms"] = t["step_s"] * 1e3 if projected else None
    for c in CATEGORIES:
        row["mem_" + c] = max(m[c] for m in p["memory"])
    for c in p.get("comm", []):
        key = "comm_" + c["group"]
        row[key] = row.get(key, 0) + c["bus_bytes"]
    return row


# ---------------------------------------------------------------------------- output
def fmt(v, kind):
    if v is None:
        return "-"
    if kind == "loss":
        return f"{v:.4f}"
    if kind == "ms":
        return f"{v:.1f}" if v >= 10 else f"{v:.2f}"
    if kind == "rate":
        return f"{v / 1e3:.1f}k" if v >= 1e3 else f"{v:.0f}"
    if kind == "pct":
        return f"{100 * v:.1f}%"
    if kind == "mib":
        return f"{v / MIB:.2f}"
    return str(v)


def table(rows, comm_groups, plan_mode):
    """The aligned text table: [(header, key, kind)] columns, empty ones left out."""
    first = [("variant", "variant", "str"), ("ranks", "ranks", "str"), ("grid", "grid", "str")]
    cols = [("loss", "loss", "loss"), ("step ms", "step_ms", "ms"),
            ("tok/s", "tokens_per_s", "rate"), ("MFU", "mfu", "pct"), ("HFU", "hfu", "pct"),
            ("bubble", "bubble", "pct"), ("proj ms", "projected_step_ms", "ms")]
    mem = [(SHORT.get(c, c), "mem_" + c, "mib") for c in CATEGORIES]
    comm = [(g, "comm_" + g, "mib") for g in comm_groups]
    ok = [r for r in rows if not r.get("error")]
    left_out = []

    def keep(col):
        vals = [fmt(r.get(col[1]), col[2]) for r in ok]
        empty = all(v in ("-", "0.00") for v in vals)
        if empty and ok:
            left_out.append(col[0])
        return not empty

    cols = [c for c in cols if keep(c)]
    mem = [c for c in mem if keep(c)]
    comm = [c for c in comm if keep(c)]
    body = cols + mem + comm
    cells = [[str(r.get(k, "")) for _, k, _ in first] +
             ([] if r.get("error") else [fmt(r.get(k), kind) for _, k, kind in body])
             for r in rows]
    heads = [h for h, _, _ in first + body]
    widths = [max([len(heads[i])] + [len(c[i]) for c in cells if i < len(c)])
              for i in range(len(heads))]
    # the spans' labels above the memory and comm columns
    # (the longest label that fits the span; the legend below the table says the rest)
    spans = [([""], len(first) + len(cols)),
             (["memory MiB, max over ranks", "memory MiB", "mem MiB"], len(mem)),
             (["comm MiB/step (bus, rank 0)", "comm MiB/step", "comm MiB"], len(comm))]
    top, at = [], 0
    for labels, n in spans:
        if n == 0:
            continue
        w = sum(widths[at:at + n]) + 2 * (n - 1)
        label = next((l for l in labels if len(l) <= w), labels[-1])
        if len(label) > w:  # widen the span's last column to hold its label
            widths[at + n - 1] += len(label) - w
            w = len(label)
        top.append(label.ljust(w))
        at += n
    lines = []
    mode = ("plan (trainer --plan --json; times are the time model's projection, not "
            "measurements)" if plan_mode else
            "runs (--metrics-jsonl; step ms, tok/s, MFU, HFU, bubble: means over the steps "
            "after the first)")
    lines.append(mode)
    lines.append("  ".join(top).rstrip())
    def line(vals):
        out = []
        for i, v in enumerate(vals):
            out.append(v.ljust(widths[i]) if i < len(first) else v.rjust(widths[i]))
        return "  ".join(out).rstrip()
    lines.append(line(heads))
    for r, c in zip(rows, cells):
        if r.get("error"):
            lines.append(line(c) + "  FAILED: " + r["error"])
        else:
            lines.append(line(c))
    legend = []
    if mem:
        legend.append("memory: each category's peak in a step (total: the peak of their sum), "
                      "MiB, the largest over " + ("the ranks" if plan_mode else "steps and ranks"))
    if comm:
        legend.append("comm: bus MiB per step per group, rank 0")
    if legend:
        lines.append("; ".join(legend))
    measured = sorted({r["peak_tflops"] for r in ok if r.get("peak_source") and
                       r["peak_source"].startswith("measured") and r.get("peak_tflops")})
    if not plan_mode and len(ok) > 1 and measured:
        lines.append(f"MFU, HFU: runs timed their own peak at start-up ({measured[0]:.4g}"
                     + (f" to {measured[-1]:.4g}" if len(measured) > 1 else "")
                     + " TFLOP/s/rank): to compare them across rows give one peak, "
                     "--base \"--peak-tflops X\"")
    if left_out:
        lines.append("left out (0 or empty in every row; in the CSV): " + ", ".join(left_out))
    return "\n".join(lines)


def csv_value(v):
    if v is None:
        return ""
    if isinstance(v, float):
        return repr(v)
    return str(v)


def write_csv(path, rows, comm_groups):
    cols = (["mode", "variant", "status", "ranks", "grid", "loss", "step_ms", "tokens_per_s",
             "mfu", "hfu", "peak_tflops", "peak_source", "bubble", "projected_step_ms"] +
            ["mem_%s_bytes" % c for c in CATEGORIES] +
            ["comm_%s_bus_bytes" % g for g in comm_groups] + ["error", "command"])
    keys = {**{"mem_%s_bytes" % c: "mem_" + c for c in CATEGORIES},
            **{"comm_%s_bus_bytes" % g: "comm_" + g for g in comm_groups}}
    try:
        with open(path, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(cols)
            for r in rows:
                w.writerow([csv_value(r.get(keys.get(c, c))) for c in cols])
    except OSError as e:
        raise BadInput(f"--csv {path}: cannot write ({e.strerror})")
