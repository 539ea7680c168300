#!/usr/bin/env python3
"""bench/gpu/paralab_row.py: one paralab training run measured as one row of a GPU table
(bench/gpu/step.sh, bench/gpu/moe.sh).

    python3 bench/gpu/paralab_row.py --name NAME --out rows.jsonl --log run.log \
        [--warmup 3] [--timeout 120] [--peak-tflops 989] [--profile measured.toml] \
        -- ./trainer --config ... --train-iters N --hardware h200 ...

1. The plan of the same command (`CMD --plan --json`, milliseconds, no device): Psi
   (params.total), the step's model FLOPs (flops.model_per_step: every matmul forward and
   backward, attention over the full S x S square, docs/output.md), the projected step on the
   command's --hardware (time.step_s; with --fp8-format also the step with FP8 GEMMs and casts,
   fp8.step_fp8_s) and, with --profile, on that profile too (the one `trainer --benchmark`
   measured on this GPU).
2. The run, `CMD --metrics-jsonl FILE`, killed after --timeout seconds. Every output line goes
   to --log stamped with the seconds since launch; "launch -> first step" is the stamp of the
   first step line (printed once step 1 is done: start-up, parameter init and step 1).
3. From the metrics: the steps after --warmup split into two rounds (first half, second half),
   the median step of each; tokens/s and MFU from the faster round's median (MFU = the plan's
   model FLOPs / (step x --peak-tflops), the same formula step_torch.py and moe_hf.py use);
   the ledger's peak memory (max over steps of peak_memory_bytes); the projected step the run
   printed (time.step_s.projected); GEMM calls per step (gemm_calls.labels, measured; with MoE
   the experts' label apart).

Appends one JSON line to --out whatever happened ("status": ok, failed (exit status), timeout,
or no-steps), so a table can show a failure as a row. Exits 0 unless the row could not be
written.
"""
import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time


def plan(cmd, hardware=None):
    """CMD --plan --json [--hardware X] -> dict, or {"error": ...}."""
    args = list(cmd)
    if hardware:
        args += ["--hardware", hardware]  # the last one given wins (docs/flags.md)
    try:
        r = subprocess.run(args + ["--plan", "--json"], capture_output=True, text=True,
                           timeout=120)
        if r.returncode != 0:
            return {"error": (r.stderr or r.stdout).strip()[-300:]}
        return json.loads(r.stdout)
    except (subprocess.TimeoutExpired, json.JSONDecodeError, OSError) as e:
        return {"error": f"{type(e).__name__}: {e}"[:300]}


def run_stamped(cmd, log_path, timeout):
    """Runs cmd, its output stamped into log_path; -> (rc or None on timeout, first step s)."""
    header = re.compile(r"\bstep\b.*\btok/s\b.*\bMFU\b")
    first = {"t": None, "after_header": False}
    t0 = time.monotonic()
    with open(log_path, "w") as log:
        log.write("$ " + " ".join(cmd) + "\n")
        log.flush()
        try:
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    text=True, bufsize=1, start_new_session=True)
        except OSError as e:
            log.write(f"could not start: {e}\n")
            return -1, None

        def pump():
            for line in proc.stdout:
                t = time.monotonic() - t0
                log.write(f"[{t:8.3f}s] {line}")
                if first["t"] is None:
                    if header.search(line):
                        first["after_header"] = True
                    elif first["after_header"] and re.match(r"\s*\d+\s", line):
                        first["t"] = t
                        log.flush()

        reader = threading.Thread(target=pump, daemon=True)
        reader.start()
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            rc = None
        reader.join(timeout=5)
        log.write(f"[{time.monotonic() - t0:8.3f}s] exit: "
                  f"{'timeout after %ds' % timeout if rc is None else rc}\n")
    return rc, first["t"]


def steps_of(path):
    out = []
    if not os.path.exists(path):
        return out
    for line in open(path):
        line = line.strip()
        if not line:
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        if rec.get("type", "step") == "step" and "step_ms" in rec:
            out.append(rec)
    return out


def tail(path, n=4):
    try:
        lines = [l.rstrip() for l in open(path) if l.strip()]
    except OSError:
        return ""
    return " | ".join(lines[-n:])[-400:]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--name", required=True)
    p.add_argument("--impl", default="paralab")
    p.add_argument("--out", required=True)
    p.add_argument("--log", required=True)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--timeout", type=float, default=120)
    p.add_argument("--peak-tflops", type=float, default=989.0)
    p.add_argument("--profile", default="", help="a measured hardware profile for a 2nd projection")
    p.add_argument("cmd", nargs=argparse.REMAINDER)
    a = p.parse_args()
    cmd = a.cmd[1:] if a.cmd and a.cmd[0] == "--" else a.cmd
    row = {"name": a.name, "impl": a.impl, "status": "failed", "command": " ".join(cmd)}

    pl = plan(cmd)
    if "error" in pl:
        row["plan_error"] = pl["error"]
    else:
        row["params"] = pl["params"]["total"]
        row["tokens_per_step"] = pl["batch"]["tokens_per_step"]
        row["model_flops"] = pl["flops"]["model_per_step"]
        if "time" in pl:
            row["projected_step_ms"] = pl["time"]["step_s"] * 1e3
            row["projected_hardware"] = pl["time"].get("hardware", "")
            row["projected_gemm_calls"] = pl["time"].get("gemm_calls")
        if isinstance(pl.get("fp8"), dict):  # --fp8-format: the step with FP8 GEMMs and casts
            row["projected_fp8_step_ms"] = pl["fp8"]["step_fp8_s"] * 1e3
    if a.profile and os.path.exists(a.profile):
        pm = plan(cmd, a.profile)
        if "time" in pm:
            row["projected_step_ms_measured_profile"] = pm["time"]["step_s"] * 1e3
        if isinstance(pm.get("fp8"), dict):
            row["projected_fp8_step_ms_measured_profile"] = pm["fp8"]["step_fp8_s"] * 1e3

    fd, metrics = tempfile.mkstemp(suffix=".jsonl", prefix="paralab_row_")
    os.close(fd)
    os.unlink(metrics)
    t0 = time.monotonic()
    rc, first = run_stamped(cmd + ["--metrics-jsonl", metrics], a.log, a.timeout)
    row["wall_s"] = time.monotonic() - t0
    row["rc"] = rc
    row["launch_to_first_step_s"] = first
    steps = steps_of(metrics)
    if os.path.exists(metrics):
        os.unlink(metrics)
    row["steps_done"] = len(steps)
    timed = steps[a.warmup:]
    if timed:
        half = max(1, len(timed) // 2)
        rounds = [timed[:half], timed[half:]] if len(timed) >= 2 else [timed]
        row["step_ms"] = [statistics.median(s["step_ms"] for s in r) for r in rounds if r]
        row["step_ms_all"] = [[s["step_ms"] for s in r] for r in rounds if r]
        best = min(row["step_ms"])
        tokens = row.get("tokens_per_step") or timed[0].get("tokens_per_s", 0) * best / 1e3
        row["tokens_per_step"] = tokens
        row["tokens_per_s"] = tokens / (best / 1e3)
        if row.get("model_flops"):
            row["mfu"] = row["model_flops"] / (best / 1e3) / (a.peak_tflops * 1e12)
        row["mfu_paralab_printed"] = statistics.median(s.get("mfu", 0) for s in timed)
        row["peak_memory_bytes"] = max(s.get("peak_memory_bytes", 0) for s in steps)
        proj = [s["time"]["step_s"]["projected"] for s in timed
                if isinstance(s.get("time"), dict) and isinstance(s["time"].get("step_s"), dict)
                and s["time"]["step_s"].get("projected") is not None]
        if proj:
            row["projected_step_ms"] = statistics.median(proj) * 1e3
        labels = (timed[-1].get("gemm_calls") or {}).get("labels") or {}
        if labels:
            row["gemm_calls"] = sum(v.get("measured", 0) for v in labels.values())
            if "experts" in labels:
                row["gemm_calls_experts"] = labels["experts"].get("measured", 0)
            row["gemm_grouped"] = (timed[-1].get("gemm_calls") or {}).get("grouped")
    row["peak_tflops"] = a.peak_tflops
    if rc is None:
        row["status"] = "timeout"
        row["error"] = f"killed after {a.timeout:.0f} s, {len(steps)} steps done"
    elif rc != 0:
        row["error"] = f"exit {rc}: {tail(a.log)}"
    elif not timed:
        row["status"] = "no-steps"
        row["error"] = f"{len(steps)} steps recorded, {a.warmup} warm-up"
    else:
        row["status"] = "ok"
    with open(a.out, "a") as f:
        f.write(json.dumps(row) + "\n")
    brief = {k: row.get(k) for k in ("name", "impl", "status", "step_ms", "tokens_per_s", "mfu",
                                      "launch_to_first_step_s", "projected_step_ms", "error")}
    print("paralab_row: " + json.dumps(brief), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
