#!/usr/bin/env python3
"""bench/gpu/moe_hf.py: Hugging Face transformers' own Qwen3MoeForCausalLM trained at paralab's
Qwen3-30B-A3B layer shape, for bench/gpu/moe.sh (issue 27's baseline a user would pick).

The model: Qwen3MoeConfig built here from configs/models/qwen3-30b-a3b.toml with the
overrides given (moe.sh: 2 layers, micro batch 1, seq 4096): h 2048, 32 query heads of 128
sharing 4 key/value groups, q/k RMSNorm, RoPE base 1e6, 128 experts of SwiGLU width 768, top-8
with the top-k renormalised (norm_topk_prob), every layer MoE, untied head, vocabulary
151936. Random init on the GPU, no download (HF_HUB_OFFLINE=1). bf16 parameters (grouped_mm
runs in bf16 only, and this is how a transformers user trains in bf16), SDPA attention,
torch.optim.AdamW(fused) over them (weight decay on >= 2-D weights, paralab's betas and eps),
global-norm clipping at 1.0; loss from `labels` (transformers' shifted cross-entropy, fp32).
output_router_logits stays false (the config's default): no load-balancing loss is added.

Experts implementations: transformers 5 routes an MoE block's experts through
config._experts_implementation ("eager": the Python loop over experts that have tokens, two
nn.functional.linear each; "grouped_mm": torch's grouped GEMM over the sorted tokens;
"batched_mm": a gathered copy of each (token, expert)'s weights and one bmm; hub kernels
such as "deepgemm" or "sonicmoe"). What this transformers offers is discovered at run time
(transformers.integrations.moe.ALL_EXPERTS_FUNCTIONS and "eager") and printed; the default is
what the model resolves with none requested. Each is measured in turn on the same model
(set_experts_implementation), the default first, then "eager", then "grouped_mm", then the
rest; an implementation whose working set cannot fit is skipped with the reason (batched_mm
gathers every (token, expert) pair's weights: N k x 3 h f_e x 2 bytes, 309 GB at this shape),
one that fails is a row (deepgemm and sonicmoe need the `kernels` package and a download).

Per implementation: WARMUP steps, then two rounds of STEPS steps, each step timed with CUDA
events; per round the median; tokens/s from the faster round; MFU (active) = the model FLOPs
of one step over the step time and --peak-tflops (default 989): 6 N_active T + 12 L a d S T,
N_active = L (h (a + 2g) d + a d h + h E + k 3 h f_e) + h V (the router and the k experts a
token runs; plan/flops.h's MoE rows, the same count `trainer --plan --json` gives for paralab's
grouped row); peak memory torch.cuda.max_memory_allocated. One JSON line per implementation
to --out, as soon as it is measured.

  python3 bench/gpu/moe_hf.py --config configs/models/qwen3-30b-a3b.toml \
      --set num-layers=2,micro-batch-size=1 --out hf.jsonl
  python3 bench/gpu/moe_hf.py ... --device cpu --dry-run     # tiny shape, discovery and a step
  python3 bench/gpu/moe_hf.py ... --list                     # the implementations found, no run
"""
import argparse
import contextlib
import gc
import json
import os
import statistics
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing is fetched: no network on the GPU machine
os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402

from step_torch import Timer, load_config, make_optimizer  # noqa: E402


def shape_of(c):
    a = c["num-attention-heads"]
    return dict(L=c["num-layers"], h=c["hidden-size"], a=a, g=c["num-query-groups"] or a,
                d=c["kv-channels"] or c["hidden-size"] // a, E=c["num-experts"],
                k=c["moe-router-topk"], fe=c["moe-ffn-hidden-size"], V=c["vocab-size"],
                S=c["seq-length"], B=c["micro-batch-size"],
                f=c["ffn-hidden-size"] or 4 * c["hidden-size"])


def active_flops(s):
    """Model FLOPs of one step, active parameters only (see the module docstring)."""
    T = s["B"] * s["S"]
    h, a, g, d = s["h"], s["a"], s["g"], s["d"]
    layer = h * (a + 2 * g) * d + a * d * h + h * s["E"] + s["k"] * 3 * h * s["fe"]
    n_active = s["L"] * layer + h * s["V"]
    return 6 * n_active * T + 12 * s["L"] * a * d * s["S"] * T


def hf_config(s, c):
    from transformers import Qwen3MoeConfig
    kw = dict(vocab_size=s["V"], hidden_size=s["h"], intermediate_size=s["f"],
              num_hidden_layers=s["L"], num_attention_heads=s["a"], num_key_value_heads=s["g"],
              head_dim=s["d"], max_position_embeddings=s["S"],
              rms_norm_eps=float(c["norm-epsilon"]), tie_word_embeddings=False,
              moe_intermediate_size=s["fe"], num_experts_per_tok=s["k"], num_experts=s["E"],
              norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[],
              output_router_logits=False, use_cache=False, attention_dropout=0.0)
    theta = float(c["rotary-base"])
    try:  # transformers 5 names RoPE's settings rope_parameters; older ones rope_theta
        return Qwen3MoeConfig(rope_parameters={"rope_type": "default", "rope_theta": theta}, **kw)
    except TypeError:
        return Qwen3MoeConfig(rope_theta=theta, **kw)


def build(s, c, device, cls):
    """The model on `device`, bf16, random init, SDPA attention."""
    cfg = hf_config(s, c)
    with torch.device(device):
        try:
            return cls._from_config(cfg, dtype=torch.bfloat16, attn_implementation="sdpa")
        except TypeError:  # a transformers without those keywords
            cfg._attn_implementation = "sdpa"
            return cls(cfg).to(torch.bfloat16)


def discover():
    """-> (the registered implementation names, where they came from)."""
    try:
        from transformers.integrations.moe import ALL_EXPERTS_FUNCTIONS
        names = list(ALL_EXPERTS_FUNCTIONS.keys())
        return ["eager"] + [n for n in names if n != "eager"], \
            "transformers.integrations.moe.ALL_EXPERTS_FUNCTIONS + eager"
    except ImportError as e:
        return [], f"none found ({e}): the model's own forward only"


def grouped_mm_native(device):
    """Would transformers' grouped_mm run torch's grouped GEMM here (bf16 inputs), or its
    fallback (a loop over experts inside a custom op)? None when this version cannot say."""
    try:
        from transformers.integrations.moe import _can_use_grouped_mm
        x = torch.zeros(8, 16, device=device, dtype=torch.bfloat16)
        w = torch.zeros(2, 16, 16, device=device, dtype=torch.bfloat16)
        offs = torch.tensor([4, 8], device=device, dtype=torch.int32)
        return bool(_can_use_grouped_mm(x, w, offs))
    except Exception:  # noqa: BLE001  (another version: not known)
        return None


def current_impl(model):
    return getattr(model.config, "_experts_implementation", None)


def set_impl(model, name):
    if hasattr(model, "set_experts_implementation"):
        model.set_experts_implementation(name)
    else:
        model.config._experts_implementation = name
    got = current_impl(model)
    if got != name:
        raise RuntimeError(f"asked for {name!r}, the model runs {got!r}")


def working_set_skip(name, s, device):
    """A reason not to try `name` at this shape, or None."""
    if name == "batched_mm":
        pairs = s["B"] * s["S"] * s["k"]
        need = pairs * 3 * s["h"] * s["fe"] * 2  # the gathered bf16 weights of every pair
        free = torch.cuda.mem_get_info()[0] if device.type == "cuda" else 8 << 30
        if need > 0.5 * free:
            return (f"gathers each (token, expert) pair's weights: {pairs} x 3 h f_e x 2 B = "
                    f"{need / 1e9:.0f} GB > half the free {free / 1e9:.0f} GB")
    return None


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--config", default="configs/models/qwen3-30b-a3b.toml")
    p.add_argument("--set", default="num-layers=2,micro-batch-size=1",
                   help="overrides, paralab flag names: key=value,key=value")
    p.add_argument("--name", default="qwen3-30b-a3b-2l")
    p.add_argument("--impls", default="",
                   help="comma-separated implementations to measure (default: all found)")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--steps", type=int, default=5, help="steps per timed round (two rounds)")
    p.add_argument("--peak-tflops", type=float, default=989.0)
    p.add_argument("--device", default="cuda")
    p.add_argument("--dry-run", action="store_true",
                   help="a tiny shape of the same family (2 layers, h 128, 16 experts, seq 64)")
    p.add_argument("--list", action="store_true", help="print what was found, run nothing")
    p.add_argument("--out", default=None)
    a = p.parse_args()

    c = load_config(a.config + ("," + a.set if a.set else ""))
    if a.dry_run:
        c.update({"num-layers": 2, "hidden-size": 128, "num-attention-heads": 4,
                  "num-query-groups": 2, "kv-channels": 32, "num-experts": 16,
                  "moe-router-topk": 4, "moe-ffn-hidden-size": 64, "seq-length": 64,
                  "vocab-size": 1024, "ffn-hidden-size": 256})
    s = shape_of(c)
    device = torch.device(a.device)
    import transformers
    from transformers import Qwen3MoeForCausalLM
    names, source = discover()
    info = {"transformers": transformers.__version__, "torch": torch.__version__,
            "found": names, "found_from": source}
    if device.type == "cuda":
        info["device_name"] = torch.cuda.get_device_name()
    torch.manual_seed(1234)
    t0 = time.perf_counter()
    try:
        model = build(s, c, device, Qwen3MoeForCausalLM)
    except Exception as e:  # noqa: BLE001  (the failure is the row)
        row = {"name": a.name, "impl": "transformers (model build)", "status": "failed",
               "error": f"{type(e).__name__}: {e}"[:400], "found": names,
               "transformers": info["transformers"]}
        if a.out:
            with open(a.out, "a") as f:
                f.write(json.dumps(row) + "\n")
        print("moe_hf: " + json.dumps(row), flush=True)
        return 1
    info["build_s"] = time.perf_counter() - t0
    info["default"] = current_impl(model)
    info["attention"] = getattr(model.config, "_attn_implementation", None)
    info["params"] = sum(p.numel() for p in model.parameters())
    info["grouped_mm_native"] = grouped_mm_native(device) if device.type != "meta" else None
    info["torch_grouped_mm"] = [n for n in ("torch.nn.functional.grouped_mm", "torch._grouped_mm")
                                if hasattr(torch.nn.functional if "functional" in n else torch,
                                           n.rsplit(".", 1)[1])]
    info["model_flops"] = active_flops(s)
    print("moe_hf: " + json.dumps(info), flush=True)
    if a.list:
        return 0

    wanted = [n for n in a.impls.split(",") if n] or names
    order = []
    for n in [info["default"], "eager", "grouped_mm"] + wanted:
        if n is not None and n not in order and (n in wanted or n == info["default"]):
            order.append(n)
    if not names:  # no switch: only what the model runs
        order = [info["default"]]

    opt = make_optimizer(model, c, fused=device.type == "cuda")
    gen = torch.Generator(device=device).manual_seed(5)
    tokens = torch.randint(0, s["V"], (s["B"], s["S"]), device=device, generator=gen)
    clip = float(c["clip-grad"])
    timer = Timer(device.type == "cuda")

    def step():
        loss = model(input_ids=tokens, labels=tokens).loss
        loss.backward()
        if clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    failed = 0
    for n in order:
        row = {"name": a.name, "impl": f"transformers {n}" + (" (default)" if n == info["default"]
                                                              else ""),
               "experts_implementation": n, "status": "failed", "tokens_per_step": s["B"] * s["S"],
               "model_flops": info["model_flops"], "params": info["params"],
               "peak_tflops": a.peak_tflops, "transformers": info["transformers"],
               "found": names, "grouped_mm_native": info["grouped_mm_native"]}
        reason = working_set_skip(n, s, device)
        if reason:
            row.update(status="skipped", error=reason)
        else:
            try:
                gc.collect()
                if device.type == "cuda":
                    torch.cuda.empty_cache()
                    torch.cuda.reset_peak_memory_stats()
                set_impl(model, n)
                t = time.perf_counter()
                loss = step()
                if device.type == "cuda":
                    torch.cuda.synchronize()
                row["first_step_s"] = time.perf_counter() - t
                row["first_loss"] = loss.item()
                for _ in range(a.warmup - 1):
                    step()
                rounds = [[timer(step) for _ in range(a.steps)] for _ in range(2)]
                row["step_ms"] = [statistics.median(r) for r in rounds]
                row["step_ms_all"] = rounds
                best = min(row["step_ms"])
                row["tokens_per_s"] = row["tokens_per_step"] / (best / 1e3)
                row["mfu"] = info["model_flops"] / (best / 1e3) / (a.peak_tflops * 1e12)
                if device.type == "cuda":
                    row["peak_memory_bytes"] = torch.cuda.max_memory_allocated()
                row["status"] = "ok"
            except Exception as e:  # noqa: BLE001  (a failure is a row; the next one runs)
                row["error"] = f"{type(e).__name__}: {e}"[:400]
                opt.zero_grad(set_to_none=True)
        failed += row["status"] == "failed"
        if a.out:
            with open(a.out, "a") as f:
                f.write(json.dumps(row) + "\n")
        brief = {k: row.get(k) for k in ("impl", "status", "step_ms", "tokens_per_s", "mfu",
                                          "first_step_s", "error")}
        print("moe_hf: " + json.dumps(brief), flush=True)
    with contextlib.suppress(Exception):
        set_impl(model, info["default"])
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
