#!/usr/bin/env python3
"""bench/gpu/report.py: the markdown tables of bench/gpu/step.sh, bench/gpu/moe.sh and
bench/gpu/fp8.sh, from the JSON lines their rows wrote (paralab_row.py, step_torch.py,
moe_hf.py), with the issues' goals as met / missed.

    python3 bench/gpu/report.py step ROWS.jsonl --rows gpt2-124m-mbs8,... [--compile-rows ...]
    python3 bench/gpu/report.py moe ROWS.jsonl
    python3 bench/gpu/report.py fp8 ROWS.jsonl --rows bf16,delayed,... --benchmark B.json \
        --torch-gemm T.json

Conventions, printed under each table: tokens/s from the faster of the two timed rounds'
median step; "step ms" both rounds' medians (their spread is the noise: a difference between
implementations smaller than it is not one); MFU = the plan's model FLOPs of the row's step
(trainer --plan --json flops.model_per_step; PyTorch's rows recompute the same number from the
same formula, checked equal here) / (step x peak), peak 989 TFLOP/s (configs/hardware/h200.toml,
dense bf16); memory: paralab's ledger peak (every byte the trainer allocates, not the CUDA
context or cuBLAS/NCCL workspaces) beside torch.cuda.max_memory_allocated (the caching
allocator's live tensors, the same exclusions).
"""
import argparse
import json
import sys

GIB = 1 << 30


def load(path):
    rows = []
    try:
        for line in open(path):
            line = line.strip()
            if line:
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError:
                    pass
    except OSError:
        pass
    return rows


def ok(r):
    return r is not None and r.get("status") == "ok"


def fmt_tok(r):
    if not ok(r):
        return "-"
    t = r["tokens_per_s"]
    return f"{t / 1e3:.1f}k" if t >= 1e3 else f"{t:.1f}"


def fmt_steps(r):
    if not ok(r):
        return "-"
    return " / ".join(f"{x:.1f}" for x in r["step_ms"])


def fmt_pct(x):
    return "-" if x is None else f"{100 * x:.1f}%"


def fmt_gib(r):
    b = (r or {}).get("peak_memory_bytes")
    return "-" if not b else f"{b / GIB:.2f}"


def fmt_proj(r):
    if r is None or r.get("impl", "").startswith(("torch", "transformers")):
        return ""
    a = r.get("projected_step_ms")
    b = r.get("projected_step_ms_measured_profile")
    if a is None and b is None:
        return "-"
    s = "-" if a is None else f"{a:.1f}"
    return s + ("" if b is None else f" / {b:.1f}")


def fmt_first(r):
    if r is None:
        return "-"
    x = r.get("launch_to_first_step_s", r.get("first_step_s"))
    return "-" if x is None else f"{x:.1f}"


def status_note(r):
    if r is None:
        return "not run (budget or timeout)"
    if r.get("status") == "ok":
        return ""
    return f"{r.get('status')}: {(r.get('error') or '').strip()[:160]}"


def best_ms(r):
    return min(r["step_ms"]) if ok(r) else None


def ratio(a, b):
    """a's tokens/s over b's (> 1: a is faster)."""
    if not (ok(a) and ok(b)):
        return None
    return a["tokens_per_s"] / b["tokens_per_s"]


def fmt_ratio(x):
    return "-" if x is None else f"{x:.2f}x"


def mfu_of(r, flops):
    """The row's MFU with the table's FLOPs (the plan's when known)."""
    if not ok(r):
        return None
    f = flops or r.get("model_flops")
    return f / (best_ms(r) / 1e3) / (r.get("peak_tflops", 989.0) * 1e12) if f else None


def goal(text, value, target, cmp, shown):
    if value is None:
        return f"- {text}: n/a (a row is missing or failed)"
    met = value >= target if cmp == ">=" else value <= target
    return f"- {text}: {shown} -> {'MET' if met else 'MISSED'}"


def within(proj, meas, tol=0.2):
    if proj is None or meas is None:
        return None
    return abs(proj - meas) / meas


def find(rows, name, impl_prefix):
    hit = None
    for r in rows:  # the last one written wins (a rerun appends)
        if r.get("name") == name and r.get("impl", "").startswith(impl_prefix):
            hit = r
    return hit


def step_report(rows, names, compile_rows):
    out = ["| model | impl | tokens/s | step ms (round 1 / 2) | MFU | peak mem GiB | "
           "projected ms (h200 / measured profile) | first step s | paralab / eager | "
           "paralab / compile | note |",
           "|:---|:---|---:|---:|---:|---:|---:|---:|---:|---:|:---|"]
    checks, goals_lines = [], []
    for n in names:
        pr = find(rows, n, "paralab")
        ea = find(rows, n, "torch eager")
        co = find(rows, n, "torch compile")
        flops = (pr or {}).get("model_flops")
        for r, impl, want in ((pr, "paralab", True), (ea, "torch eager", True),
                              (co, "torch.compile", n in compile_rows)):
            if r is None and not want:
                continue
            is_pl = impl == "paralab"
            out.append("| " + " | ".join([
                n, impl, fmt_tok(r), fmt_steps(r), fmt_pct(mfu_of(r, flops)), fmt_gib(r),
                fmt_proj(r) if is_pl else "", fmt_first(r),
                fmt_ratio(ratio(pr, ea)) if is_pl else "",
                fmt_ratio(ratio(pr, co)) if is_pl and n in compile_rows else "",
                status_note(r)]) + " |")
        for r in (ea, co):
            if (r and flops and r.get("model_flops")
                    and abs(r["model_flops"] - flops) > 1e-9 * flops):
                checks.append(f"- {n}: model FLOPs differ: plan {flops:.6e}, "
                              f"{r['impl']} {r['model_flops']:.6e}")
            if r and pr and r.get("params") and pr.get("params") and r["params"] != pr["params"]:
                checks.append(f"- {n}: parameters differ: paralab {pr['params']}, "
                              f"{r['impl']} {r['params']}")
        if ok(pr):
            meas = best_ms(pr)
            for key, label in (("projected_step_ms_measured_profile", "measured profile"),
                               ("projected_step_ms", "h200 datasheet profile")):
                if pr.get(key) is not None:
                    dev = within(pr[key], meas)
                    goals_lines.append(goal(
                        f"{n}: projected step within 20% of measured ({label})", dev, 0.2, "<=",
                        f"projected {pr[key]:.1f} ms, measured {meas:.1f} ms, off by "
                        f"{100 * dev:.0f}%"))
                    break
    speed = []
    for n in names:
        if n.startswith("gpt2"):
            pr, co = find(rows, n, "paralab"), find(rows, n, "torch compile")
            x = ratio(pr, co)
            speed.append(goal(f"{n}: paralab >= torch.compile's tokens/s", x, 1.0, ">=",
                              fmt_ratio(x) + " of torch.compile"))
        if n.startswith("llama-7b"):
            pr = find(rows, n, "paralab")
            m = mfu_of(pr, (pr or {}).get("model_flops"))
            speed.append(goal(f"{n}: paralab MFU >= 50%", m, 0.5, ">=", fmt_pct(m)))
    out.append("")
    out.append("Issue 26's goals on one H200:")
    out += speed + goals_lines or ["- no paralab row ran"]
    attn = {}
    for r in rows:
        if r.get("attention") and r.get("impl", "").startswith("torch"):
            attn.setdefault(r["attention"], []).append(r["name"])
    if attn:
        out.append("")
        out.append("PyTorch's attention: " + "; ".join(
            f"{k} ({', '.join(dict.fromkeys(v))})" for k, v in attn.items()))
    if checks:
        out.append("")
        out.append("Same-model checks FAILED:")
        out += checks
    elif any(ok(r) for r in rows):
        out.append("")
        out.append("Same-model checks: every PyTorch row has paralab's Psi and model FLOPs.")
    return out


def fp8_gemm_lines(bench_path, torch_path):
    """The GEMM table of fp8.sh: trainer --benchmark's best bf16, FP8 per tensor and FP8
    block-scaled rates, PyTorch's at the largest size, each FP8 rate over its own bf16."""
    try:
        b = json.load(open(bench_path))
    except (OSError, ValueError):
        return ["GEMMs: trainer --benchmark wrote no JSON (see benchmark.err)"]
    try:
        t = json.load(open(torch_path))
    except (OSError, ValueError):
        t = {}
    best = {}
    for g in b.get("gemm", []):
        best[g["dtype"]] = max(best.get(g["dtype"], (0, 0)), (g["tflops"], g["n"]))
    bf16 = best.get("bf16", (0, 0))[0]
    out = ["| GEMM (square, best over n) | paralab TFLOP/s (n) | / bf16 | PyTorch TFLOP/s "
           f"(n = {t.get('n', '-')}) | / bf16 |", "|:---|---:|---:|---:|---:|"]
    tb = t.get("bf16_tflops")
    for dtype, label, tkey in (("bf16", "bf16", "bf16_tflops"),
                               ("fp8", "FP8 e4m3, per tensor (cuBLASLt)", "fp8_tflops"),
                               ("fp8-blk", "FP8 e4m3, 1x128 by 128x128 blocks (emulated)", None)):
        rate, n = best.get(dtype, (0, 0))
        tv = t.get(tkey) if tkey else None
        out.append("| " + " | ".join([
            label, f"{rate:.1f} ({n})" if rate else "-",
            f"{rate / bf16:.2f}x" if rate and bf16 else "-",
            f"{tv:.1f}" if tv else ("-" if tkey is None else "failed" if t else "-"),
            f"{tv / tb:.2f}x" if tv and tb else "-"]) + " |")
    cc = b.get("compute_capability", 0)
    if cc and cc < 89:
        out.append(f"(compute capability {cc // 10}.{cc % 10}: no FP8 tensor cores, no FP8 rows)")
    for k, e in (t.get("errors") or {}).items():
        out.append(f"PyTorch {k}: {e}")
    return out


def fp8_report(rows, names, bench_path, torch_path):
    out = ["FP8 GEMMs, paralab (trainer --benchmark) beside PyTorch:", ""]
    out += fp8_gemm_lines(bench_path, torch_path)
    out += ["", "The training step in each recipe (one model, one shape):", "",
            "| recipe | tokens/s | step ms (round 1 / 2) | / bf16's step | peak mem GiB | "
            "projected ms (profile / measured profile) | projected / measured | note |",
            "|:---|---:|---:|---:|---:|---:|---:|:---|"]
    base = find(rows, "bf16", "paralab")
    for n in names:
        r = find(rows, n, "paralab")
        # an FP8 row's projection is the plan's step with FP8 GEMMs and casts (fp8.step_fp8_s)
        fp8 = dict(r or {})
        for k in ("projected_step_ms", "projected_step_ms_measured_profile"):
            fp8[k] = fp8.get(k.replace("step_ms", "fp8_step_ms"), fp8.get(k))
        proj, meas = fp8.get("projected_step_ms"), best_ms(r)
        out.append("| " + " | ".join([
            n, fmt_tok(r), fmt_steps(r),
            f"{meas / best_ms(base):.2f}x" if meas and ok(base) else "-",
            fmt_gib(r), fmt_proj(fp8) if r else "-",
            f"{proj / meas:.2f}" if proj and meas else "-", status_note(r)]) + " |")
    out += ["", "An FP8 row's projection is `--plan`'s step with FP8 GEMMs at the FP8 peak and its "
            "casts (fp8.step_fp8_s; blockwise assumes a fused block-scaled GEMM, which paralab's "
            "emulated path is not: docs/fp8.md); bf16's is time.step_s."]
    return out


def moe_report(rows):
    names = []
    for r in rows:
        key = (r.get("name"), r.get("impl"))
        if key not in names:
            names.append(key)
    byname = {k: None for k in names}
    for r in rows:
        byname[(r.get("name"), r.get("impl"))] = r
    out = ["| row | impl | tokens/s | step ms (round 1 / 2) | MFU (active) | GEMM calls/step "
           "(experts) | projected ms (h200 / measured profile) | first step s | peak mem GiB "
           "| note |",
           "|:---|:---|---:|---:|---:|---:|---:|---:|---:|:---|"]
    grouped = dense = per_expert = hf_default = hf_loop = None
    for (name, impl), r in byname.items():
        calls = "-"
        if r.get("gemm_calls") is not None:
            calls = f"{r['gemm_calls']}" + (f" ({r['gemm_calls_experts']})"
                                             if r.get("gemm_calls_experts") is not None else "")
        out.append("| " + " | ".join([
            name or "-", impl or "-", fmt_tok(r), fmt_steps(r),
            fmt_pct(mfu_of(r, r.get("model_flops"))), calls, fmt_proj(r), fmt_first(r),
            fmt_gib(r), status_note(r)]) + " |")
        if impl == "paralab":
            if name.endswith("grouped"):
                grouped = r
            elif name.endswith("per-expert"):
                per_expert = r
            elif name.startswith("dense"):
                dense = r
        elif impl and impl.startswith("transformers"):
            if "(default)" in impl:
                hf_default = r
            if r.get("experts_implementation") == "eager":
                hf_loop = r
    g = []
    x = None if not (ok(grouped) and ok(dense)) else best_ms(grouped) / best_ms(dense)
    g.append(goal("MoE step within 1.3x of the dense model of equal active FLOPs", x, 1.3, "<=",
                  "-" if x is None else f"{x:.2f}x the dense step"))
    x = None if not (ok(grouped) and ok(per_expert)) else best_ms(per_expert) / best_ms(grouped)
    g.append(goal("grouped GEMM >= 2x faster than per-expert GEMMs", x, 2.0, ">=",
                  "-" if x is None else f"{x:.2f}x"))
    x = (grouped or {}).get("launch_to_first_step_s")
    g.append(goal("first step within 10 s of launch (grouped)", x, 10.0, "<=",
                  "-" if x is None else f"{x:.1f} s"))
    x = mfu_of(grouped, (grouped or {}).get("model_flops"))
    g.append(goal("MFU (active) >= 30% (grouped)", x, 0.3, ">=", fmt_pct(x)))
    x = None if not ok(grouped) else grouped["tokens_per_s"] / 78e3
    g.append(goal("paralab >= transformers' default as measured before (78k tokens/s)", x, 1.0,
                  ">=", "-" if x is None else f"{grouped['tokens_per_s'] / 1e3:.1f}k, {x:.2f}x"))
    x = ratio(grouped, hf_default)
    g.append(goal("paralab >= transformers' default measured in this run ("
                  + ((hf_default or {}).get("experts_implementation") or "?") + ")", x, 1.0, ">=",
                  fmt_ratio(x)))
    x = ratio(grouped, hf_loop)
    g.append(goal("paralab >= 5x transformers' per-expert loop (eager)", x, 5.0, ">=",
                  fmt_ratio(x)))
    out += ["", "Issue 27's goals on one H200:"] + g
    checks = []
    for (name, impl), r in byname.items():
        if impl and impl.startswith("transformers") and grouped:
            for key, what in (("model_flops", "model FLOPs"), ("params", "parameters")):
                if r.get(key) and grouped.get(key) and r[key] != grouped[key]:
                    checks.append(f"- {impl}: {what} {r[key]} != paralab's {grouped[key]}")
    if checks:
        out += ["", "Same-model checks FAILED:"] + checks
    elif grouped and grouped.get("model_flops") and any(
            (i or "").startswith("transformers") for _, i in byname):
        out += ["", "Same-model checks: transformers' model has paralab's Psi and active FLOPs."]
    if grouped and dense and grouped.get("model_flops") and dense.get("model_flops"):
        out.append(f"Model FLOPs per step: MoE {grouped['model_flops'] / 1e12:.4g} T (router "
                   f"included), dense {dense['model_flops'] / 1e12:.4g} T.")
    found = next((r.get("found") for r in rows if r.get("found") is not None), None)
    if found is not None:
        tv = next((r.get("transformers") for r in rows if r.get("transformers")), "?")
        out += ["", f"transformers {tv}: experts implementations found: {', '.join(found)}; "
                f"default: {(hf_default or {}).get('experts_implementation', '?')}"]
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("kind", choices=["step", "moe", "fp8"])
    p.add_argument("rows")
    p.add_argument("--rows", dest="names", default="")
    p.add_argument("--compile-rows", default="")
    p.add_argument("--benchmark", default="", help="fp8: trainer --benchmark --json's file")
    p.add_argument("--torch-gemm", default="", help="fp8: bench/gpu/fp8_torch.py's file")
    p.add_argument("--hardware", default="", help="the profile the projections used")
    p.add_argument("--hardware-note", default="", help="how it was chosen (bench/gpu/hardware.sh)")
    a = p.parse_args()
    rows = load(a.rows)
    if a.kind == "step":
        names = [n for n in a.names.split(",") if n] or list(
            dict.fromkeys(r.get("name") for r in rows))
        lines = step_report(rows, names, set(filter(None, a.compile_rows.split(","))))
    elif a.kind == "fp8":
        names = [n for n in a.names.split(",") if n]
        lines = fp8_report(rows, names, a.benchmark, a.torch_gemm)
    else:
        lines = moe_report(rows)
    if a.hardware:
        lines += ["", f"Projections on {a.hardware}" + (f" ({a.hardware_note})" if a.hardware_note else "")]
    lines += ["", "Conventions: " + " ".join(
        __doc__.split("Conventions, printed under each table: ")[1].split())]
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
