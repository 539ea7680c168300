#!/usr/bin/env python3
"""bench/gpu/step_torch.py: paralab's two model families written again in plain PyTorch, timed
as a PyTorch user would train them, for bench/gpu/step.sh (issue 26's anchors).

The same model as paralab's (docs/model.md, notes/model.md), read from the same config files:
  gpt    LayerNorm with bias, learned positions, exact erf GeLU, linear biases, tied head
  llama  RMSNorm, RoPE (rotate-half, theta --rotary-base), SwiGLU ([gate | up] in one fc1),
         grouped-query attention, no biases, untied head
Both: pre-norm, causal attention through torch.nn.functional.scaled_dot_product_attention with
the flash backend alone (sdpa_kernel(FLASH_ATTENTION): a shape flash does not take raises
instead of falling back), the vocabulary padded to a multiple of 128 as paralab's
--make-vocab-size-divisible-by (GPT-2: 50304), the mean token cross-entropy, AdamW with
paralab's defaults and the config's values (lr, betas 0.9/0.95, eps 1e-8, weight decay 0.1 on
the >= 2-D weights only, global-norm clipping at 1.0; torch.optim.AdamW(fused=True) on CUDA),
bf16 autocast over fp32 parameters (what a PyTorch user writes; paralab holds bf16 parameters
and fp32 masters: the optimizer's bytes are the same, the parameters' differ). Not the same:
the padded vocabulary columns are not masked out of PyTorch's softmax (nanoGPT's practice;
paralab masks them): no GEMM shape changes.

Rows are given as NAME=CONFIG[,key=value...] with paralab's flag names as keys:
    --row gpt2-mbs8=configs/models/gpt2-124m.toml,micro-batch-size=8

Per row and mode (eager, compile: torch.compile of the model, the optimizer step left eager and
fused), WARMUP steps (compilation happens in the first), then two rounds of STEPS steps, each
step timed with CUDA events (wall clock on the CPU); per round the median. One JSON line per
(row, mode) goes to --out as soon as it is measured (so a later hang loses nothing):
    {"name", "impl", "status": "ok"|"failed", "error", "tokens_per_step", "step_ms": [median of
     round 1, round 2], "step_ms_all", "tokens_per_s" (from the faster round's median),
     "model_flops", "mfu", "peak_tflops", "params", "peak_memory_bytes"
     (torch.cuda.max_memory_allocated: parameters, gradients, Adam states, activations; not the
     CUDA context or cuBLAS workspace), "first_step_s" (wall, compilation included), "attention"}

MFU, one convention for every row of step.sh: model FLOPs (docs/output.md; plan/flops.h) =
forward + backward (3x forward) of every matmul with the attention's scores and PV products over
the full S x S square (paralab's default --attention-flops full): 6 N T + 12 L a d S T, N the
matmul weights (qkv, proj, fc1, fc2 of every layer and the head; embeddings, norms and biases are
not matmuls), T = B S tokens. The head counts the padded vocabulary (GPT-2: 50304 x 768), as the
plan's number does at tp 1 (docs/output.md says "true vocabulary"; plan/flops.cpp uses Vp: 0.03%
of GPT-2's FLOPs), so this equals `trainer --plan --json`'s flops.model_per_step for the row.
Divided by the step time and --peak-tflops (default 989, configs/hardware/h200.toml's dense
bf16).

  python3 bench/gpu/step_torch.py --row ... --modes eager,compile --out torch.jsonl
  python3 bench/gpu/step_torch.py --row ... --params-only        # Psi and FLOPs, no device
  python3 bench/gpu/step_torch.py --row ... --device cpu --dry-run   # tiny shapes, a few steps
"""
import argparse
import contextlib
import gc
import json
import math
import statistics
import sys
import time

try:
    import tomllib
except ImportError:  # Python < 3.11
    tomllib = None

import torch
import torch.nn as nn
import torch.nn.functional as F

# paralab's defaults (model/config.h) for what a config may leave out.
DEFAULTS = {
    "arch": "gpt", "num-query-groups": 0, "ffn-hidden-size": 0, "kv-channels": 0,
    "rotary-base": 10000.0, "norm-epsilon": 1e-5, "lr": 1e-3, "weight-decay": 0.1,
    "clip-grad": 1.0, "adam-beta1": 0.9, "adam-beta2": 0.95, "adam-eps": 1e-8,
    "make-vocab-size-divisible-by": 128, "micro-batch-size": 1, "qk-layernorm": False,
    "num-experts": 0,
}
INT_KEYS = {"num-layers", "hidden-size", "num-attention-heads", "num-query-groups",
            "ffn-hidden-size", "seq-length", "vocab-size", "kv-channels", "micro-batch-size",
            "make-vocab-size-divisible-by", "num-experts", "moe-router-topk",
            "moe-ffn-hidden-size"}


def read_toml(path):
    if tomllib is not None:
        with open(path, "rb") as f:
            return tomllib.load(f)
    out = {}  # paralab's TOML subset: key = value lines (docs/flags.md)
    for line in open(path):
        line = line.split("#", 1)[0].strip()
        if "=" in line:
            k, v = (s.strip() for s in line.split("=", 1))
            out[k] = v.strip('"') if v.startswith('"') else (
                v == "true" if v in ("true", "false") else float(v) if any(
                    c in v for c in ".e") else int(v))
    return out


def load_config(spec):
    """CONFIG[,key=value...] -> a dict with paralab's flag names: the file over paralab's
    defaults, the overrides over the file."""
    parts = spec.split(",")
    c = dict(DEFAULTS)
    c.update(read_toml(parts[0]))
    for kv in parts[1:]:
        k, v = kv.split("=", 1)
        c[k] = int(v) if k in INT_KEYS else v
    for k in INT_KEYS:
        if k in c:
            c[k] = int(c[k])
    return c


def parse_row(spec):
    """NAME=CONFIG[,key=value...] -> (name, config dict with paralab's flag names)."""
    name, rest = spec.split("=", 1)
    c = load_config(rest)
    if c.get("num-experts", 0):
        raise SystemExit(f"step_torch.py: {name}: MoE configs are bench/gpu/moe_hf.py's")
    if c.get("qk-layernorm"):
        raise SystemExit(f"step_torch.py: {name}: qk-layernorm is not written here")
    return name, c


class Shape:
    def __init__(self, c):
        self.arch = c["arch"]
        self.gpt = self.arch == "gpt"
        self.L, self.h = c["num-layers"], c["hidden-size"]
        self.a = c["num-attention-heads"]
        self.g = c["num-query-groups"] or self.a
        self.d = c["kv-channels"] or self.h // self.a
        self.f = c["ffn-hidden-size"] or 4 * self.h
        self.S, self.V = c["seq-length"], c["vocab-size"]
        div = c["make-vocab-size-divisible-by"]
        self.Vp = (self.V + div - 1) // div * div if div > 1 else self.V
        self.B = c["micro-batch-size"]
        self.eps = float(c["norm-epsilon"])
        self.theta = float(c["rotary-base"])

    def matmul_params(self):
        """N: the weights every token multiplies by. The head counts the padded vocabulary Vp,
        as paralab's --plan --json flops.model_per_step does at tp 1 (plan/flops.cpp)."""
        fc1 = self.f * (1 if self.gpt else 2)
        layer = (self.h * (self.a + 2 * self.g) * self.d + self.a * self.d * self.h
                 + self.h * fc1 + self.f * self.h)
        return self.L * layer + self.h * self.Vp

    def model_flops(self):
        """Model FLOPs of one step of one microbatch (paralab's, --attention-flops full)."""
        T = self.B * self.S
        return 6 * self.matmul_params() * T + 12 * self.L * self.a * self.d * self.S * T


def rope_tables(S, d, theta, device):
    i = torch.arange(d // 2, dtype=torch.float32, device=device)
    inv = theta ** (-2.0 * i / d)
    ang = torch.arange(S, dtype=torch.float32, device=device)[:, None] * inv[None, :]
    return torch.cos(ang), torch.sin(ang)  # (S, d/2)


def rope(x, cos, sin):
    """rotate-half: pair (i, i + d/2) turned by pos * theta^(-2i/d); fp32 math, x's dtype out."""
    d = x.shape[-1]
    x1, x2 = x[..., : d // 2].float(), x[..., d // 2:].float()
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1).type_as(x)


class Attention(nn.Module):
    def __init__(self, s, gqa_native):
        super().__init__()
        self.s, self.gqa_native = s, gqa_native
        self.qkv = nn.Linear(s.h, (s.a + 2 * s.g) * s.d, bias=s.gpt)
        self.proj = nn.Linear(s.a * s.d, s.h, bias=s.gpt)

    def forward(self, x, cos, sin):
        s = self.s
        B, S, _ = x.shape
        q, k, v = self.qkv(x).split([s.a * s.d, s.g * s.d, s.g * s.d], dim=-1)
        q = q.view(B, S, s.a, s.d).transpose(1, 2)
        k = k.view(B, S, s.g, s.d).transpose(1, 2)
        v = v.view(B, S, s.g, s.d).transpose(1, 2)
        if not s.gpt:
            q, k = rope(q, cos, sin), rope(k, cos, sin)
        if s.g != s.a and self.gqa_native:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        else:
            if s.g != s.a:
                k = k.repeat_interleave(s.a // s.g, dim=1)
                v = v.repeat_interleave(s.a // s.g, dim=1)
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(B, S, s.a * s.d))


class Mlp(nn.Module):
    def __init__(self, s):
        super().__init__()
        self.gpt, self.f = s.gpt, s.f
        self.fc1 = nn.Linear(s.h, s.f if s.gpt else 2 * s.f, bias=s.gpt)
        self.fc2 = nn.Linear(s.f, s.h, bias=s.gpt)

    def forward(self, x):
        z = self.fc1(x)
        if self.gpt:
            return self.fc2(F.gelu(z, approximate="none"))
        gate, up = z.split(self.f, dim=-1)
        return self.fc2(F.silu(gate) * up)


def norm(s):
    return nn.LayerNorm(s.h, eps=s.eps) if s.gpt else nn.RMSNorm(s.h, eps=s.eps)


class Block(nn.Module):
    def __init__(self, s, gqa_native):
        super().__init__()
        self.norm1, self.attn = norm(s), Attention(s, gqa_native)
        self.norm2, self.mlp = norm(s), Mlp(s)

    def forward(self, x, cos, sin):
        x = x + self.attn(self.norm1(x), cos, sin)
        return x + self.mlp(self.norm2(x))


class Model(nn.Module):
    def __init__(self, s, gqa_native=True):
        super().__init__()
        self.s = s
        self.word = nn.Embedding(s.Vp, s.h)
        self.position = nn.Embedding(s.S, s.h) if s.gpt else None
        self.layers = nn.ModuleList(Block(s, gqa_native) for _ in range(s.L))
        self.final_norm = norm(s)
        self.output = None if s.gpt else nn.Linear(s.h, s.Vp, bias=False)
        if s.gpt:
            self.cos = self.sin = None
        else:
            cos, sin = rope_tables(s.S, s.d, s.theta, device=self.word.weight.device)
            self.register_buffer("cos", cos, persistent=False)
            self.register_buffer("sin", sin, persistent=False)

    def init_weights(self):
        std, out_std = 0.02, 0.02 / math.sqrt(2 * self.s.L)
        for name, p in self.named_parameters():
            if p.dim() == 1 and "norm" in name and name.endswith("weight"):
                nn.init.ones_(p)
            elif p.dim() == 1:
                nn.init.zeros_(p)
            elif name.endswith("proj.weight") or name.endswith("fc2.weight"):
                nn.init.normal_(p, 0.0, out_std)
            else:
                nn.init.normal_(p, 0.0, std)

    def forward(self, tokens, targets):
        s = self.s
        x = self.word(tokens)
        if s.gpt:
            x = x + self.position.weight[: tokens.shape[1]]
        for layer in self.layers:
            x = layer(x, self.cos, self.sin)
        x = self.final_norm(x)
        logits = F.linear(x, self.word.weight) if s.gpt else self.output(x)
        return F.cross_entropy(logits.view(-1, s.Vp).float(), targets.view(-1))


def psi(model):
    """paralab's Psi: every parameter, the vocabulary padding rows left out."""
    s = model.s
    pad = (s.Vp - s.V) * s.h * (1 if s.gpt else 2)
    return sum(p.numel() for p in model.parameters()) - pad


def make_optimizer(model, c, fused):
    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": float(c["weight-decay"])},
              {"params": rest, "weight_decay": 0.0}]
    kw = dict(lr=float(c["lr"]), betas=(float(c["adam-beta1"]), float(c["adam-beta2"])),
              eps=float(c["adam-eps"]))
    if fused:
        kw["fused"] = True
    return torch.optim.AdamW(groups, **kw)


def flash_only():
    from torch.nn.attention import SDPBackend, sdpa_kernel
    return sdpa_kernel([SDPBackend.FLASH_ATTENTION])


def gqa_probe(device, dtype):
    """Does the flash backend take enable_gqa here? (else K and V are repeated per head)"""
    try:
        q = torch.randn(1, 4, 128, 64, device=device, dtype=dtype)
        k = torch.randn(1, 2, 128, 64, device=device, dtype=dtype)
        with flash_only():
            F.scaled_dot_product_attention(q, k, k, is_causal=True, enable_gqa=True)
        return True
    except Exception:  # noqa: BLE001  (any refusal means: repeat K and V)
        return False


class Timer:
    def __init__(self, cuda):
        self.cuda = cuda

    def __call__(self, fn):
        if self.cuda:
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            b.synchronize()
            return a.elapsed_time(b)
        t = time.perf_counter()
        fn()
        return (time.perf_counter() - t) * 1e3


def measure(name, c, mode, args, device, gqa_native):
    s = Shape(c)
    cuda = device.type == "cuda"
    row = {"name": name, "impl": "torch " + mode, "status": "failed", "tokens_per_step": s.B * s.S,
           "model_flops": s.model_flops(), "peak_tflops": args.peak_tflops,
           "attention": ("sdpa flash" if args.sdpa == "flash" else "sdpa default") + (
               "" if s.g == s.a else ", GQA native" if gqa_native else ", GQA by repeated K/V")}
    model = opt = None
    try:
        gc.collect()
        if cuda:
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
        torch.manual_seed(1234)
        with torch.device(device):
            model = Model(s, gqa_native)
        model.init_weights()
        row["params"] = psi(model)
        opt = make_optimizer(model, c, fused=cuda)
        run = torch.compile(model) if mode == "compile" else model
        gen = torch.Generator(device=device).manual_seed(5)
        tokens = torch.randint(0, s.V, (s.B, s.S), device=device, generator=gen)
        targets = torch.randint(0, s.V, (s.B, s.S), device=device, generator=gen)
        clip = float(c["clip-grad"])
        amp = torch.autocast(device.type, dtype=torch.bfloat16)

        def step():
            with amp:
                loss = run(tokens, targets)
            loss.backward()
            if clip > 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
            opt.step()
            opt.zero_grad(set_to_none=True)
            return loss

        ctx = flash_only() if args.sdpa == "flash" else contextlib.nullcontext()
        timer = Timer(cuda)
        with ctx:
            t0 = time.perf_counter()
            loss = step()
            if cuda:
                torch.cuda.synchronize()
            row["first_step_s"] = time.perf_counter() - t0
            row["first_loss"] = loss.item()
            for _ in range(args.warmup - 1):
                step()
            rounds = [[timer(step) for _ in range(args.steps)] for _ in range(2)]
        row["step_ms"] = [statistics.median(r) for r in rounds]
        row["step_ms_all"] = rounds
        best = min(row["step_ms"])
        row["tokens_per_s"] = s.B * s.S / (best / 1e3)
        row["mfu"] = s.model_flops() / (best / 1e3) / (args.peak_tflops * 1e12)
        if cuda:
            row["peak_memory_bytes"] = torch.cuda.max_memory_allocated()
        row["status"] = "ok"
    except Exception as e:  # noqa: BLE001  (a failure is a row; the next row still runs)
        row["error"] = f"{type(e).__name__}: {e}"[:400]
    finally:
        del model, opt
        if mode == "compile":
            torch._dynamo.reset()
        if cuda:
            torch.cuda.empty_cache()
    return row


def dry_run_shape(c):
    """--dry-run: the row's family and ratios at a size two CPU cores train in seconds."""
    c = dict(c)
    c["num-layers"] = min(c["num-layers"], 2)
    c["seq-length"] = min(c["seq-length"], 64)
    c["micro-batch-size"] = min(c["micro-batch-size"], 2)
    while c["hidden-size"] > 1024:
        c["hidden-size"] //= 8
        c["ffn-hidden-size"] = (c["ffn-hidden-size"] or 4 * c["hidden-size"] * 8) // 8
        c["kv-channels"] = c["kv-channels"] // 8 if c["kv-channels"] else 0
    return c


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--row", action="append", required=True, help="NAME=CONFIG[,key=value...]")
    p.add_argument("--modes", default="eager,compile")
    p.add_argument("--compile-rows", default="",
                   help="comma-separated row names that get the compile mode (default: all)")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--steps", type=int, default=10, help="steps per timed round (two rounds)")
    p.add_argument("--peak-tflops", type=float, default=989.0)
    p.add_argument("--sdpa", choices=["flash", "default"], default=None,
                   help="flash (default on CUDA): the flash backend alone")
    p.add_argument("--device", default="cuda")
    p.add_argument("--dry-run", action="store_true", help="tiny shapes (see dry_run_shape)")
    p.add_argument("--params-only", action="store_true",
                   help="print each row's Psi and model FLOPs (meta device), run nothing")
    p.add_argument("--out", default=None, help="JSON lines, appended, one per (row, mode)")
    args = p.parse_args()
    rows = [parse_row(r) for r in args.row]

    if args.params_only:
        for name, c in rows:
            with torch.device("meta"):
                m = Model(Shape(c))
            s = m.s
            print(json.dumps({"name": name, "params": psi(m), "matmul_params": s.matmul_params(),
                              "model_flops": s.model_flops(), "padded_vocab": s.Vp}))
        return 0

    device = torch.device(args.device)
    if args.sdpa is None:
        args.sdpa = "flash" if device.type == "cuda" else "default"
    if device.type == "cuda":
        print(f"step_torch: torch {torch.__version__}, {torch.cuda.get_device_name()}", flush=True)
    gqa_native = gqa_probe(device, torch.bfloat16) if args.sdpa == "flash" else True
    if args.dry_run:
        rows = [(n, dry_run_shape(c)) for n, c in rows]
    compile_rows = set(filter(None, args.compile_rows.split(",")))
    plan = []
    for mode in args.modes.split(","):  # every eager row first: a slow compile costs only itself
        for name, c in rows:
            if mode == "compile" and compile_rows and name not in compile_rows:
                continue
            plan.append((name, c, mode))
    failed = 0
    for name, c, mode in plan:
        row = measure(name, c, mode, args, device, gqa_native)
        failed += row["status"] != "ok"
        line = json.dumps(row)
        if args.out:
            with open(args.out, "a") as f:
                f.write(line + "\n")
        brief = {k: row.get(k) for k in ("name", "impl", "status", "step_ms", "tokens_per_s",
                                          "mfu", "first_step_s", "error")}
        print("step_torch: " + json.dumps(brief), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
