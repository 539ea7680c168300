#!/usr/bin/env python3
"""Random parallel layouts against the single-rank run: the suites' rows, mixed.

The suites hold each dimension, and the pairs the lessons teach, against one rank. A user mixes
them: tp 2 + sp x pp 2 (zb-v) x dp 2 at ZeRO-3 with selective recompute, an MoE model in bf16
with ep 2. This draws such layouts from a seed, each on a tiny model (at most 8 ranks), trains
it for 4 steps and holds it to the single rank training the same global batch in the same
microbatches, with compare_runs.py: the losses, the final parameters and the last step's
gradients within the precision's bound, and every rank's ledger, communication and FLOPs equal
to its plan, exactly, as the suites hold them.

    tests/mpi/layout_fuzz.py ./trainer [--seed S] [--cases N] [--seconds T]

The bounds (losses; the final parameters and last gradients), as the suites derive them:
fp32 storage 1e-5 for the losses (equivalence.sh), 5e-5 for the tensors (a bias starting at 0
takes Adam's first steps from gradients below eps, which magnifies their last bits). bf16 and FP8 (fp32 storage) are held to the plan
exactly, as every draw, but their numbers only loosely: a layout's summation order rounds bf16
sums differently and flips FP8 codes, and a flip cascades (equivalence.sh, notes/decisions.md:
7.6e-2 after 5 steps for tensorwise at tp 2, not drawn here). Measured over 4 layers and 4
steps: losses within 5e-4, dense gradients within 0.13 (the suites' 2-layer rows: 2e-2 bf16,
1.6e-3 FP8), so the bounds are 2e-3 and 0.2; an MoE model's expert gradients move by up to 0.3
where one token's routing flips, so there the tensors are not compared. With
--fp8-param-gather the run is also held to the same layout without the flag, bit for bit (the
codes are the owner's: docs/fp8.md), but with delayed scaling where a step routed no token to
an expert: the gather records that expert's weight amax and the GEMMs, which did not run,
record none (as Transformer Engine; docs/fp8.md).

Every third case is also trained again in two runs, stopped after step 2 with a checkpoint and
resumed, and held to the uninterrupted run bit for bit, its save's bytes to the plan's; and
the checkpoint is loaded by one rank (resharded) for steps 3-4 and held to the single-rank run
at the case's bounds, its ledger to its plan.

A layout the trainer refuses (exit 2, one line naming the flag) is counted as refused, not
failed; a refusal of more than one line, another exit status, a hang (300 s) or a crash fails.
The draw is reproducible: every case prints its flags, and `--seed S --cases N` repeats them.
"""
import argparse
import math
import os
import random
import shlex
import struct
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from compare_runs import ledger_problems, read_tensor_file, records, worst_tensor  # noqa: E402
STEPS = 4
COMMON = (f"--adam-eps 1e-4 --train-iters {STEPS} --lr 1e-2 --min-lr 1e-3 "
          "--lr-warmup-iters 2 --log-interval 100 --report-interval 0 --peak-tflops 1").split()
MOE = ("--num-experts 4 --moe-router-topk 2 --moe-ffn-hidden-size 24 --moe-aux-loss-coeff 1e-2 "
       "--moe-z-loss-coeff 1e-3").split()


def draw_model(rng, arch, tp, sp, cp, moe, layers):
    """The model's flags, which the reference shares: the family at `layers` layers and 4 heads, llama's query groups 4 where tp is 4; and options the layouts must
    carry: dropout (counter-based masks; not under tp, whose heads and sp tokens draw per rank
    as Megatron's: notes/decisions.md), naive attention, llama's --qk-layernorm (needs sp under
    tp; gpt's key-norm bias has an exactly zero gradient, softmax being shift-invariant, so
    its relative difference is noise's), the unfused loss, a vocabulary tp pads; MoE's grouped
    GEMM and one of its variants (a capacity only on whole microbatches: its drops are per
    source rank's tokens)."""
    m = ["--arch", arch, "--num-layers", str(layers), "--hidden-size", "32",
         "--num-attention-heads", "4",
         "--seq-length", "16", "--vocab-size", rng.choice(["64", "64", "64", "63"])]
    if arch == "llama":
        m += ["--num-query-groups", "4" if tp == 4 else "2", "--ffn-hidden-size", "48"]
    if arch == "gpt" and tp == 1 and rng.random() < 0.3:
        m += ["--hidden-dropout", "0.1", "--attention-dropout", "0.1"]
    if rng.random() < 0.2:
        m += ["--attention", "naive"]
    if arch == "llama" and (tp == 1 or sp) and rng.random() < 0.3:
        m += ["--qk-layernorm"]
    if rng.random() < 0.15:
        m += ["--no-fused-ce"]
    if rng.random() < 0.2:
        m += ["--eval-interval", "2", "--eval-iters", "1"]  # validation losses compared too
    if not moe:
        return m
    m += MOE + (["--moe-grouped-gemm"] if rng.random() < 0.7 else [])
    variants = [[], [], ["--moe-shared-expert-intermediate-size", "32", "--moe-shared-expert-gate",
                         "--moe-layer-freq", "2"],
                ["--moe-router-score-function", "sigmoid", "--moe-router-enable-expert-bias",
                 "--moe-router-bias-update-rate", "1e-2", "--moe-router-load-balancing-type",
                 "seq_aux_loss"]]
    if tp == 1 and cp == 1:
        variants.append(["--moe-expert-capacity-factor", "1.0"])
    return m + rng.choice(variants)


def draw_parallel(rng, tp, pp, cp, dp, moe):
    """The layout's own flags, and its ZeRO stage: tp (+ sp), pp and a schedule (uneven
    stages for the plain ones), cp and its comm type, dp with ZeRO and the overlaps, ep (2 or 4;
    etp 1 under tp: whole experts), recompute (selective with some of its modules).
    None where the draw cannot be laid out."""
    layout = []
    if tp > 1:
        layout += ["--tp", str(tp)] + (["--sequence-parallel"] if moe or rng.random() < 0.5 else [])
    if pp > 1:
        schedule = rng.choice(["1f1b", "gpipe", "interleaved", "zb-h1", "zb-v", "dualpipev"])
        layout += ["--pp", str(pp), "--pipeline-schedule", schedule]
        if schedule == "interleaved":
            layout += ["--vpp", "2"]
        elif pp == 2 and schedule in ("1f1b", "gpipe", "zb-h1") and rng.random() < 0.25:
            layout += ["--decoder-first-pipeline-num-layers", "1"]
    if cp > 1:
        layout += ["--cp", str(cp), "--cp-comm-type", rng.choice(["p2p", "all_gather", "a2a"])]
    zero = 0
    if dp > 1:
        zero = rng.choice([0, 1, 2, 3])
        layout += ["--zero-stage", str(zero), "--ddp-bucket-size", str(rng.choice([5000, 20000]))]
        if rng.random() < 0.5:
            layout += ["--overlap-grad-reduce"]
            if zero >= 1 and rng.random() < 0.5:
                layout += ["--overlap-param-gather"]
    if moe and dp > 1 and rng.random() < 0.5:
        layout += ["--ep", rng.choice(["2", "2", "4"])]
        if rng.random() < 0.5:
            layout += ["--moe-token-dispatcher-type", "alltoall"]
    if moe and tp > 1 and rng.random() < 0.4:
        layout += ["--expert-tensor-parallel-size", "1"]  # whole experts folded over tp
    recompute = rng.choices(["none", "selective", "full"], [0.5, 0.25, 0.25])[0]
    if recompute == "selective":
        layout += ["--recompute-granularity", "selective"]
        if rng.random() < 0.5:
            modules = [m for m in ("core_attn", "mlp", "norm") if rng.random() < 0.5]
            layout += ["--recompute-modules"] + (modules or ["mlp"])
    elif recompute == "full":
        layout += ["--recompute-granularity", "full", "--recompute-method",
                   rng.choice(["uniform", "block"]), "--recompute-num-layers", "1"]
    return layout, zero


def draw(rng):
    """One layout: (the model and precision flags the reference shares, the layout's own flags,
    its ranks, the bounds, the layout without --fp8-param-gather (its bit-for-bit twin) or None,
    the reference's own flags)."""
    while True:
        arch = rng.choice(["gpt", "llama"])
        tp, pp = rng.choice([1, 1, 2, 2, 4]), rng.choice([1, 1, 2, 2, 4])
        cp, dp = rng.choice([1, 1, 1, 2, 2, 4]), rng.choice([1, 2, 2, 4])
        if tp * pp * cp * dp > 8 or tp * pp * cp * dp == 1:
            continue
        gbs = rng.choice([8, 8, 16])
        mbs = rng.choice([m for m in (1, 2, 4) if gbs % (dp * m) == 0])
        moe = rng.random() < 0.3
        precision = rng.choices(["fp32", "bf16", "fp16", "fp8"], [0.5, 0.2, 0.1, 0.2])[0]
        if precision == "fp8" and tp > 1 and cp > 1:
            continue  # keep the FP8 draws to layouts the suites hold
        layout, zero = draw_parallel(rng, tp, pp, cp, dp, moe)
        if layout is None:
            continue
        sp = "--sequence-parallel" in layout
        # 4 layers (pp 4, or pp 2 in two chunks); 8 for two chunks a stage on pp 4
        two_chunks = any(s in layout for s in ("zb-v", "dualpipev", "interleaved"))
        layers = 8 if two_chunks and pp == 4 else 4
        shared = draw_model(rng, arch, tp, sp, cp, moe, layers) + [
            "--micro-batch-size", str(mbs), "--global-batch-size", str(gbs)]
        pair, reference = None, []  # the reference's flags beyond `shared`
        # fp32: the tensors at 5e-5, not 1e-5: a bias that starts at 0 takes Adam's first
        # step, lr g / (|g| + eps), from gradients below eps in places, where their last bits'
        # layout-dependent rounding moves it most (measured 2.6e-5 on gpt's proj bias at
        # tp 2 x dp 4, its gradients within 1e-5); the wrong trainings found were 1e-3 and up
        bound = (1e-5, 5e-5) if precision == "fp32" else (2e-3, math.inf if moe else 0.2)
        if precision == "bf16":
            shared += ["--bf16"]
        if precision == "fp16":  # from 2^32 every one of the 4 steps would overflow and skip
            shared += ["--fp16", "--initial-loss-scale", "4096"]
        if precision == "fp8":
            recipe = rng.choice(["delayed", "tensorwise", "blockwise"])
            if (recipe != "delayed" and tp > 1) or (recipe == "blockwise" and cp > 1):
                # tensorwise at tp 2 is held at one step (equivalence.sh); blockwise's 1 x 128
                # tiles and 128 x 128 blocks cut across the tp pieces of these 32-wide layers,
                # and under cp its weight gradient's tiles run along the tokens cp splits, so
                # its scales are not the single rank's (docs/fp8.md)
                recipe = "delayed"
            fmt = "e4m3" if recipe == "blockwise" else rng.choice(["e4m3", "hybrid"])
            shared += ["--fp8-format", fmt, "--fp8-recipe", recipe]
            if zero >= 1 and rng.random() < 0.6:
                pair = list(layout)
                layout += ["--fp8-param-gather"]
        if zero >= 1 and precision != "fp8" and rng.random() < 0.15:
            # Megatron's precision-aware optimizer: bf16 moments round where the layouts'
            # last bits differ, so its tensors are held at bf16's bound (equivalence.sh)
            optimizer = ["--use-precision-aware-optimizer", "--exp-avg-dtype", "bf16",
                         "--exp-avg-sq-dtype", "bf16"]
            layout += optimizer
            reference += optimizer + ["--zero-stage", "1"]  # it needs ZeRO >= 1
            if precision == "fp32":
                bound = (1e-5, 2e-2)  # a moment one bf16 rounding apart (equivalence.sh)
        if zero == 3 and rng.random() < 0.2:
            layout += ["--offload-params"]
        return shared, layout, tp * pp * cp * dp, bound, pair, reference


class Runner:
    def __init__(self, trainer, work):
        self.trainer, self.work, self.done = trainer, work, {}

    def run(self, flags, ranks):
        """Trains once per distinct command line: (name, exit status, the log's text)."""
        key = (ranks, tuple(flags))
        if key in self.done:
            return self.done[key]
        name = os.path.join(self.work, f"run{len(self.done)}")
        launch = [self.trainer] if ranks == 1 else ["mpirun", "-np", str(ranks), self.trainer]
        cmd = ["timeout", "300"] + launch + flags + COMMON + [
            "--metrics-jsonl", name + ".jsonl", "--save-tensors", name + ".bin"]
        p = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True)
        self.done[key] = (name, p.returncode, p.stdout + p.stderr)
        return self.done[key]


def compare(a, b, bound):
    p = subprocess.run([sys.executable, os.path.join(HERE, "compare_runs.py"), "--rtol",
                        str(bound[0]), "--params-rtol", str(bound[1]),
                        a + ".jsonl", a + ".bin", b + ".jsonl", b + ".bin"],
                       capture_output=True, text=True)
    return p.returncode == 0, (p.stdout + p.stderr).strip().replace("\n", "; ")


def idle_expert(jsonl):
    """Whether a step of the run routed no token to some expert of some layer."""
    return any(layer["min"] == 0 for r in records(jsonl)
               for layer in r.get("moe", {}).get("layers", []))


def resume(runner, flags, ranks, full, ckpt):
    """The layout trained again in two runs, the first stopping after step 2 with a checkpoint
    (exit 16, "resume me"), the second resuming it for steps 3-4, against `full`, the
    uninterrupted run: every step's loss and gradient norm, and the final parameters and last
    gradients, bit for bit; the save's bytes the plan's (tests/mpi/checkpoint.sh's rule)."""
    a, status, log = runner.run(flags + ["--exit-interval", "2", "--save", ckpt], ranks)
    if status != 16:
        return False, f"the saving run exited {status}, want 16: " + log.strip()[-200:]
    b, status, log = runner.run(flags + ["--load", ckpt], ranks)
    if status != 0:
        return False, f"the resumed run exited {status}: " + log.strip()[-200:]
    steps = lambda n: {r["step"]: r for r in records(n + ".jsonl")}  # noqa: E731
    want, got = steps(full), {**steps(a), **steps(b)}
    problems = [f"step {s} {k}" for s in want for k in ("loss", "grad_norm", "loss_scaler")
                if s not in got or got[s].get(k) != want[s].get(k)]
    if sorted(got) != sorted(want):
        problems.append(f"steps {sorted(got)}")
    x, y = read_tensor_file(b + ".bin"), read_tensor_file(full + ".bin")
    same = lambda u, v: u is not None and struct.pack(f"{len(u)}f", *u) == struct.pack(  # noqa
        f"{len(v)}f", *v)  # bytes, so that an overflowed fp16 step's NaN gradients compare
    problems += [f"final {n}" for n in y if not same(x.get(n), y[n])]
    saves = records(a + ".jsonl", "checkpoint")
    if len(saves) != 1 or saves[0]["payload_bytes"] != saves[0]["predicted_bytes"]:
        problems.append("checkpoint bytes " + str([(s["payload_bytes"], s["predicted_bytes"])
                                                   for s in saves]))
    if problems:
        return False, "resumed: " + ", ".join(problems[:4])
    return True, f"resumed after step 2 bit for bit, {saves[0]['payload_bytes']} B saved == plan"


def reshard(runner, flags, ckpt, ref, bound):
    """The checkpoint of `resume` loaded by one rank (flags: the reference's) for steps 3-4,
    against the single-rank run `ref` at the layouts' bounds, and its ledger the plan's."""
    one, status, log = runner.run(flags + ["--load", ckpt], 1)
    if status != 0:
        return False, f"resharded to one rank: exit {status}: " + log.strip()[-200:]
    got = {r["step"]: r["loss"] for r in records(one + ".jsonl")}
    want = {r["step"]: r["loss"] for r in records(ref + ".jsonl") if r["step"] > 2}
    worst = max(abs(got[s] - w) / abs(w) for s, w in want.items()) if sorted(got) == sorted(
        want) else math.inf
    params = {n: t for n, t in read_tensor_file(ref + ".bin").items() if not n.startswith("grad.")}
    worst_param, _ = worst_tensor(params, read_tensor_file(one + ".bin"))  # the parameters
    problems = ledger_problems(one + ".jsonl")
    ok = worst <= bound[0] and worst_param <= bound[1] and not problems
    return ok, (f"resharded to one rank: loss max rel {worst:.2e}, params {worst_param:.2e}"
                + (f", plan and measurement differ: {problems[0]}" if problems else ""))


def one_case(runner, shared, layout, ranks, bound, pair, reference, check_resume=False):
    """'ok' | 'refused' | 'FAIL', and what to print."""
    name, status, log = runner.run(shared + layout, ranks)
    if status == 2:
        lines = [x for x in log.splitlines() if x.strip()]
        return ("refused", lines[-1]) if len(set(lines)) == 1 else (
            "FAIL", "a refusal of more than one line: " + " | ".join(lines[:4]))
    if status != 0:
        tail = " | ".join(log.strip().splitlines()[-4:])
        return "FAIL", f"exit {status}{' (hung: 300 s)' if status == 124 else ''}: {tail}"
    ref, ref_status, ref_log = runner.run(shared + reference, 1)
    if ref_status != 0:
        return "FAIL", "the single-rank reference failed: " + ref_log.strip().splitlines()[-1]
    ok, said = compare(ref, name, bound)
    if ok and pair is not None and "delayed" in shared and idle_expert(name + ".jsonl"):
        # delayed scaling: the gather records every expert's weight amax, the GEMMs only a
        # running expert's, so the two part where a step routes nothing to one (docs/fp8.md)
        said += "; not held bit for bit to the run without --fp8-param-gather: a step " \
                "routed no token to an expert"
    elif ok and pair is not None:
        twin, twin_status, twin_log = runner.run(shared + pair, ranks)
        if twin_status != 0:
            return "FAIL", "the run without --fp8-param-gather failed: " + twin_log.strip()[-200:]
        ok, bits = compare(twin, name, (0, 0))
        said += f"; against the run without --fp8-param-gather: {bits}"
    if ok and check_resume:
        ckpt = os.path.join(runner.work, f"ckpt{len(runner.done)}")
        ok, resumed = resume(runner, shared + layout, ranks, name, ckpt)
        said += "; " + resumed
        if ok:
            ok, resharded = reshard(runner, shared + reference, ckpt, ref, bound)
            said += "; " + resharded
    return ("ok" if ok else "FAIL"), said


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("trainer")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--cases", type=int, default=20)
    ap.add_argument("--seconds", type=float, default=0, help="stop drawing after this (0: none)")
    args = ap.parse_args()
    os.environ["OPENBLAS_NUM_THREADS"] = "1"
    rng = random.Random(args.seed)
    tally = {"ok": 0, "refused": 0, "FAIL": 0}
    start = time.time()
    with tempfile.TemporaryDirectory() as work:
        runner = Runner(os.path.abspath(args.trainer), work)
        for i in range(args.cases):
            if args.seconds and time.time() - start > args.seconds:
                print(f"stopped after {i} cases: --seconds {args.seconds:g}")
                break
            case = draw(rng)
            shared, layout, ranks, bound = case[:4]
            result, said = one_case(runner, *case, check_resume=i % 3 == 0)
            tally[result] += 1
            print(f"{result:<7} case {i} (seed {args.seed}), {ranks} ranks, bounds {bound[0]:g}"
                  f" {bound[1]:g}: "
                  f"{shlex.join(shared + layout)}\n        {said}", flush=True)
    print(f"{tally['ok']} passed, {tally['refused']} refused, {tally['FAIL']} failed "
          f"({time.time() - start:.0f} s)")
    return 1 if tally["FAIL"] else 0


if __name__ == "__main__":
    sys.exit(main())
