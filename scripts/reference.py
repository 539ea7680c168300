#!/usr/bin/env python3
"""scripts/reference.py: an independent PyTorch statement of paralab's model, and the golden
files the C++ tests compare against (tests/test_golden.cpp).

notes/model.md is the contract. This file writes the same maths a second time, plainly, with
PyTorch autograd doing the backward, so that the hand-written forward/backward of
model/transformer.cpp is checked against something that shares none of its code.

    python3 scripts/reference.py                   # writes tests/data/golden_*.bin
    python3 scripts/reference.py --out-dir /tmp/g  # elsewhere
    python3 scripts/reference.py --self-test       # gradcheck and cross-checks, writes nothing

Four files: gpt, llama, and two llama models with mixture-of-experts MLPs (moe: every layer
MoE; moe_shared: layer 0 MoE with a gated shared expert, layer 1 dense), whose maths lives
in scripts/reference_moe.py.

Golden data is computed in float64 from weights that are already float32 values, then saved
as float32: the C++ model starts from exactly the same numbers and only its own float32
rounding separates it from the file. Everything is seeded; reruns write identical bytes.

File layout: checkpoint/tensor_file.h ("PLTF"). Tensors, in order:
  config.*            int32 / float32 scalars: the ModelConfig (and micro_batch_size);
                      MoE files add config.num_experts, moe_ffn_hidden_size, moe_topk,
                      moe_aux_loss_coeff, moe_z_loss_coeff, moe_shared_expert_size,
                      moe_shared_expert_gate and moe_layer_pattern (int32, num_layers)
  train.*             the optimiser hyperparameters (TrainConfig field names)
  <param name>        every weight, named and shaped as model/param_table.cpp; a MoE layer
                      has, instead of mlp.fc1/fc2: mlp.router.weight (E, h),
                      mlp.experts.fc1.weight (E, 2f_e, h) rows [gate | up] per expert,
                      mlp.experts.fc2.weight (E, h, f_e), and with a shared expert
                      mlp.shared.fc1.weight (2f_s, h) [gate | up], mlp.shared.fc2.weight
                      (h, f_s), with its gate mlp.shared.gate.weight (1, h)
  tokens, targets     int32 (B, S) of the single-step check
  logits (B*S, V), loss ()   loss: the mean LM loss over the B*S tokens
  grad.<param name>   d(objective) / d(param); the objective is the LM loss, plus in MoE
                      files the aux and z losses of every MoE layer
  aux_loss (), z_loss ()             MoE files: summed over the MoE layers
  tokens_per_expert   int32 (L, E)   MoE files: per layer (zero rows for dense layers) the
                      tokens routed to each expert
  steps.tokens, steps.targets   int32 (T, B, S): a fresh batch for each of T AdamW steps
  steps.losses (T)    the LM loss of step t, before its update
  steps.aux_losses (T), steps.z_losses (T)   MoE files: step t's, summed over the layers
  steps.grad_norms (T) global norm of the objective's gradient at step t, before clipping
  steps.lr (T)        the learning rate of step t
  final.<param name>  every weight after the T updates
"""
import argparse
import math
import os
import struct
import warnings

# Only tensor.tolist() and struct are used; PyTorch's warning about a missing NumPy is noise.
warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
import torch  # noqa: E402

import reference_moe as moe  # noqa: E402  (scripts/ is on sys.path when this file runs)

# The tiny models of the golden tests (the MoE ones: reference_moe.py). Names follow
# model/config.h.
CONFIGS = {
    "gpt": dict(arch="gpt", num_layers=2, hidden_size=32, num_attention_heads=4,
                num_query_groups=4, seq_length=16, vocab_size=64, ffn_hidden_size=128,
                micro_batch_size=2),
    "llama": dict(arch="llama", num_layers=2, hidden_size=32, num_attention_heads=4,
                  num_query_groups=2, seq_length=16, vocab_size=64, ffn_hidden_size=48,
                  micro_batch_size=2),
    **moe.MOE_CONFIGS,
}
# Each file's seed is --seed plus its offset. The MoE files' offsets are those in 2..61 whose
# forwards (the single step and the ten steps) route with the widest smallest margin, 2.8e-3
# (moe) and 4.0e-3 (moe_shared) of the logit scale; offset 2 left moe a near-tie of 1.3e-4
# that float32 rounding could flip. main() refuses a file under moe.MIN_RELATIVE_MARGIN.
SEED_OFFSETS = {"gpt": 0, "llama": 1, "moe": 9, "moe_shared": 26}
NORM_EPS = 1e-5
ROPE_THETA = 10000.0

# The optimiser run. lr 1e-2 (not the trainer's 1e-3) so ten steps move the loss visibly.
TRAIN = dict(lr=1e-2, min_lr=1e-3, lr_warmup_iters=2, lr_decay_iters=10,
             lr_decay_style="cosine", weight_decay=0.1, clip_grad=1.0,
             adam_beta1=0.9, adam_beta2=0.95, adam_eps=1e-8, train_iters=10)
LR_DECAY_STYLES = ["constant", "linear", "cosine"]  # the order of enum LrDecay

# Init: the notes' 0.02 gives near-uniform logits at h=32 (logit std ~0.1), so the golden
# weights use 0.2, scaled like Megatron's for the output projections.
WEIGHT_STD = 0.2
BIAS_STD = 0.1       # biases and norm weights randomised too, so their gradients matter
NORM_WEIGHT_STD = 0.1


# ---- the parameter table (must name and shape tensors exactly as param_table.cpp) -----------

def ffn(c):
    return c["ffn_hidden_size"] or 4 * c["hidden_size"]


def param_table(c):
    """[(name, shape)] in the table's order."""
    h, V, s = c["hidden_size"], c["vocab_size"], c["seq_length"]
    a, g = c["num_attention_heads"], c["num_query_groups"]
    d = h // a
    gpt = c["arch"] == "gpt"
    fc1 = ffn(c) if gpt else 2 * ffn(c)
    t = [("embedding.word", (V, h))]
    if gpt:
        t.append(("embedding.position", (s, h)))
    for i in range(c["num_layers"]):
        p = f"layers.{i}."
        t.append((p + "norm1.weight", (h,)))
        if gpt: t.append((p + "norm1.bias", (h,)))
        t.append((p + "attn.qkv.weight", ((a + 2 * g) * d, h)))
        if gpt: t.append((p + "attn.qkv.bias", ((a + 2 * g) * d,)))
        t.append((p + "attn.proj.weight", (h, a * d)))
        if gpt: t.append((p + "attn.proj.bias", (h,)))
        t.append((p + "norm2.weight", (h,)))
        if gpt: t.append((p + "norm2.bias", (h,)))
        if moe.is_moe_layer(c, i):
            t += moe.moe_param_table(c, p)
            continue
        t.append((p + "mlp.fc1.weight", (fc1, h)))
        if gpt: t.append((p + "mlp.fc1.bias", (fc1,)))
        t.append((p + "mlp.fc2.weight", (h, ffn(c))))
        if gpt: t.append((p + "mlp.fc2.bias", (h,)))
    t.append(("final_norm.weight", (h,)))
    if gpt:
        t.append(("final_norm.bias", (h,)))
    else:
        t.append(("output.weight", (V, h)))
    return t


def init_params(c, gen):
    """Random weights, rounded to float32 values (then held in float64)."""
    params = {}
    out_std = WEIGHT_STD / math.sqrt(2 * c["num_layers"])
    for name, shape in param_table(c):
        x = torch.randn(shape, generator=gen, dtype=torch.float64)
        if name.endswith("norm1.weight") or name.endswith("norm2.weight") \
                or name == "final_norm.weight":
            x = 1.0 + NORM_WEIGHT_STD * x
        elif len(shape) == 1:
            x = BIAS_STD * x
        elif name.endswith("attn.proj.weight") or name.endswith("fc2.weight"):
            x = out_std * x
        else:
            x = WEIGHT_STD * x
        params[name] = x.float().double()
    return params


# ---- the model, as notes/model.md writes it ---------------------------------------------

def layer_norm(x, w, b):
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)  # biased variance
    return (x - mean) / torch.sqrt(var + NORM_EPS) * w + b


def rms_norm(x, w):
    return x / torch.sqrt((x * x).mean(-1, keepdim=True) + NORM_EPS) * w


def gelu(x):
    return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))


def silu(x):
    return x * torch.sigmoid(x)


def rope(x):
    """x (B, heads, S, d): rotate pair (i, i + d/2) by angle pos * theta^(-2i/d)."""
    S, d = x.shape[-2], x.shape[-1]
    i = torch.arange(d // 2, dtype=x.dtype)
    inv_freq = ROPE_THETA ** (-2.0 * i / d)
    angle = torch.arange(S, dtype=x.dtype)[:, None] * inv_freq[None, :]  # (S, d/2)
    cos, sin = torch.cos(angle), torch.sin(angle)
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


def attention(u, P, p, c, B):
    """Causal self-attention of one layer; u (N, h) -> y (N, h)."""
    S, a, g = c["seq_length"], c["num_attention_heads"], c["num_query_groups"]
    d = c["hidden_size"] // a
    per = a // g  # query heads per group
    qkv = u @ P[p + "attn.qkv.weight"].T
    if c["arch"] == "gpt":
        qkv = qkv + P[p + "attn.qkv.bias"]
    # Row layout per token: g groups of [per query heads | key head | value head], d each.
    qkv = qkv.view(B, S, g, per + 2, d)
    q = qkv[:, :, :, :per, :].reshape(B, S, a, d).transpose(1, 2)  # head j = group*per + i
    k = qkv[:, :, :, per, :].transpose(1, 2)                         # (B, g, S, d)
    v = qkv[:, :, :, per + 1, :].transpose(1, 2)
    if c["arch"] == "llama":
        q, k = rope(q), rope(k)
    # Query head j reads key/value group j // per.
    k = k.repeat_interleave(per, dim=1)
    v = v.repeat_interleave(per, dim=1)
    scores = q @ k.transpose(-1, -2) / math.sqrt(d)                   # (B, a, S, S)
    future = torch.triu(torch.ones(S, S, dtype=torch.bool), diagonal=1)
    scores = scores.masked_fill(future, float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    ctx = (probs @ v).transpose(1, 2).reshape(B * S, a * d)          # head-major per token
    y = ctx @ P[p + "attn.proj.weight"].T
    if c["arch"] == "gpt":
        y = y + P[p + "attn.proj.bias"]
    return y


def mlp(u, P, p, c):
    if c["arch"] == "gpt":
        z = u @ P[p + "mlp.fc1.weight"].T + P[p + "mlp.fc1.bias"]
        return gelu(z) @ P[p + "mlp.fc2.weight"].T + P[p + "mlp.fc2.bias"]
    f = ffn(c)
    z = u @ P[p + "mlp.fc1.weight"].T  # (N, 2f) = [gate | up]
    m = silu(z[:, :f]) * z[:, f:]
    return m @ P[p + "mlp.fc2.weight"].T


def forward(P, c, tokens, moe_stats=None):
    """tokens (B, S) int64 -> logits (B*S, V). Each MoE layer appends its stats (aux and z
    losses in the graph, routing margin; reference_moe.moe_mlp) to moe_stats."""
    B, S = tokens.shape
    gpt = c["arch"] == "gpt"
    tok = tokens.reshape(-1)
    x = P["embedding.word"][tok]
    if gpt:
        x = x + P["embedding.position"][torch.arange(B * S) % S]
    for i in range(c["num_layers"]):
        p = f"layers.{i}."
        if gpt:
            x = x + attention(layer_norm(x, P[p + "norm1.weight"], P[p + "norm1.bias"]),
                              P, p, c, B)
            x = x + mlp(layer_norm(x, P[p + "norm2.weight"], P[p + "norm2.bias"]), P, p, c)
        else:
            x = x + attention(rms_norm(x, P[p + "norm1.weight"]), P, p, c, B)
            if moe.is_moe_layer(c, i):
                y, stats = moe.moe_mlp(rms_norm(x, P[p + "norm2.weight"]), P, p, c)
                if moe_stats is not None:
                    moe_stats.append(stats)
                x = x + y
            else:
                x = x + mlp(rms_norm(x, P[p + "norm2.weight"]), P, p, c)
    if gpt:
        xf = layer_norm(x, P["final_norm.weight"], P["final_norm.bias"])
        return xf @ P["embedding.word"].T  # tied embeddings
    return rms_norm(x, P["final_norm.weight"]) @ P["output.weight"].T


def cross_entropy(logits, targets):
    """Mean over the tokens of -log softmax(logits)[target]."""
    logp = logits - torch.logsumexp(logits, dim=-1, keepdim=True)
    return -logp.gather(1, targets.reshape(-1, 1)).mean()


def objective(logits, targets, moe_stats):
    """(LM loss, training objective): the objective adds every MoE layer's aux and z."""
    lm = total = cross_entropy(logits, targets)
    for s in moe_stats:
        total = total + s["aux"] + s["z"]
    return lm, total


def loss_and_grads(P, c, tokens, targets):
    """-> logits, the LM loss, the objective's gradients, the MoE layers' stats."""
    leaves = {n: t.detach().clone().requires_grad_(True) for n, t in P.items()}
    stats = []
    logits = forward(leaves, c, tokens, stats)
    loss, total = objective(logits, targets, stats)
    total.backward()
    return logits.detach(), loss.detach(), {n: t.grad for n, t in leaves.items()}, stats


# ---- the optimiser, as notes/model.md writes it --------------------------------------------

def learning_rate(t, T):
    """Step t is 1-based: linear warmup to lr, then decay to min_lr at lr_decay_iters."""
    lr, lo, W, D = T["lr"], T["min_lr"], T["lr_warmup_iters"], T["lr_decay_iters"]
    if t <= W:
        return lr * t / W
    if t > D:
        return lo
    progress = (t - W) / (D - W)
    if T["lr_decay_style"] == "cosine":
        return lo + (lr - lo) * 0.5 * (1.0 + math.cos(math.pi * progress))
    if T["lr_decay_style"] == "linear":
        return lo + (lr - lo) * (1.0 - progress)
    return lr


class AdamW:
    """PyTorch AdamW semantics; weight decay on the >= 2-D weights only (the experts' are
    3-D); global-norm clipping."""

    def __init__(self, params, T):
        self.T = T
        self.m = {n: torch.zeros_like(p) for n, p in params.items()}
        self.v = {n: torch.zeros_like(p) for n, p in params.items()}
        self.t = 0

    def step(self, params, grads, lr):
        T = self.T
        norm = math.sqrt(sum(float((g * g).sum()) for g in grads.values()))
        scale = T["clip_grad"] / (norm + 1e-6) if 0 < T["clip_grad"] < norm else 1.0
        self.t += 1
        b1, b2 = T["adam_beta1"], T["adam_beta2"]
        bias1, bias2 = 1 - b1 ** self.t, 1 - b2 ** self.t
        for n, p in params.items():
            g = grads[n] * scale
            self.m[n] = b1 * self.m[n] + (1 - b1) * g
            self.v[n] = b2 * self.v[n] + (1 - b2) * g * g
            wd = T["weight_decay"] if p.dim() >= 2 else 0.0
            update = (self.m[n] / bias1) / (torch.sqrt(self.v[n] / bias2) + T["adam_eps"])
            params[n] = p - lr * (update + wd * p)
        return norm


# ---- data --------------------------------------------------------------------------------

def batch(c, gen, B):
    """Random tokens; the target is a fixed permutation of the token (mostly), so the loss
    has something to learn in ten steps and the gradients are not pure noise."""
    V, S = c["vocab_size"], c["seq_length"]
    tokens = torch.randint(0, V, (B, S), generator=gen)
    targets = (5 * tokens + 3) % V
    noise = torch.rand((B, S), generator=gen) < 0.25
    targets = torch.where(noise, torch.randint(0, V, (B, S), generator=gen), targets)
    return tokens, targets


# ---- the golden file ---------------------------------------------------------------------

def golden(family, seed):
    """-> (tensors, per-step LM losses, per-step gradient norms, MoE summary or None)."""
    c = CONFIGS[family]
    B = c["micro_batch_size"]
    gen = torch.Generator().manual_seed(seed)
    params = init_params(c, gen)
    tokens, targets = batch(c, gen, B)
    logits, loss, grads, stats = loss_and_grads(params, c, tokens, targets)

    steps = TRAIN["train_iters"]
    step_batches = [batch(c, gen, B) for _ in range(steps)]
    P = dict(params)
    opt = AdamW(P, TRAIN)
    losses, norms, lrs, step_stats = [], [], [], []
    for t in range(1, steps + 1):
        tok, tgt = step_batches[t - 1]
        _, step_loss, g, st = loss_and_grads(P, c, tok, tgt)
        lr = learning_rate(t, TRAIN)
        norms.append(opt.step(P, g, lr))
        losses.append(float(step_loss))
        lrs.append(lr)
        step_stats.append(st)

    out = config_tensors(c)
    for key, val in TRAIN.items():
        if key == "lr_decay_style":
            out.append(("train." + key, "i", (), [LR_DECAY_STYLES.index(val)]))
        else:
            out.append(("train." + key, "i" if isinstance(val, int) else "f", (), [val]))
    for name, shape in param_table(c):
        out.append((name, "f", shape, params[name]))
    out.append(("tokens", "i", (B, c["seq_length"]), tokens))
    out.append(("targets", "i", (B, c["seq_length"]), targets))
    out.append(("logits", "f", tuple(logits.shape), logits))
    out.append(("loss", "f", (), loss))
    moe_single, moe_steps, summary = moe.golden_tensors(c, stats, step_stats)
    out += moe_single
    for name, shape in param_table(c):
        out.append(("grad." + name, "f", shape, grads[name]))
    out.append(("steps.tokens", "i", (steps, B, c["seq_length"]),
                torch.stack([tk for tk, _ in step_batches])))
    out.append(("steps.targets", "i", (steps, B, c["seq_length"]),
                torch.stack([tg for _, tg in step_batches])))
    out.append(("steps.losses", "f", (steps,), losses))
    out += moe_steps
    out.append(("steps.grad_norms", "f", (steps,), norms))
    out.append(("steps.lr", "f", (steps,), lrs))
    for name, shape in param_table(c):
        out.append(("final." + name, "f", shape, P[name]))
    return out, losses, norms, summary


def config_tensors(c):
    """config.*: the ModelConfig fields and micro_batch_size, then the MoE fields."""
    out = []
    for key, val in c.items():
        if key.startswith("moe_") or key == "num_experts":
            continue
        if key == "arch":
            out.append(("config.arch", "i", (), [0 if val == "gpt" else 1]))
        else:
            out.append(("config." + key, "i", (), [val]))
    out.append(("config.norm_epsilon", "f", (), [NORM_EPS]))
    out.append(("config.rope_theta", "f", (), [ROPE_THETA]))
    if c.get("num_experts", 0) > 0:
        out += moe.config_tensors(c)
    return out


def write_tensor_file(path, tensors):
    """tensors: [(name, 'f' | 'i', shape, values)] in the format of checkpoint/tensor_file.h."""
    parts = [b"PLTF", struct.pack("<IQ", 1, len(tensors))]
    for name, kind, shape, values in tensors:
        flat = values.reshape(-1).tolist() if torch.is_tensor(values) else list(values)
        assert len(flat) == math.prod(shape), name
        raw = name.encode()
        parts.append(struct.pack("<I", len(raw)) + raw)
        parts.append(struct.pack(f"<II{len(shape)}q", 0 if kind == "f" else 1, len(shape),
                                 *shape))
        parts.append(struct.pack(f"<{len(flat)}{kind}", *flat))
    with open(path, "wb") as f:
        f.write(b"".join(parts))


# ---- self-test: the reference checked against autograd numerics and torch's own ops -------

def self_test():
    torch.manual_seed(0)
    small = {
        "gpt": dict(arch="gpt", num_layers=1, hidden_size=8, num_attention_heads=2,
                    num_query_groups=2, seq_length=4, vocab_size=11, ffn_hidden_size=12,
                    micro_batch_size=2),
        "llama": dict(arch="llama", num_layers=1, hidden_size=8, num_attention_heads=4,
                      num_query_groups=2, seq_length=4, vocab_size=11, ffn_hidden_size=6,
                      micro_batch_size=2),
        # a dense layer after a MoE layer with a gated shared expert, big loss coefficients
        "moe": dict(moe.SMALL, num_layers=2, moe_layer_pattern=[1, 0]),
    }
    for family, c in small.items():
        gen = torch.Generator().manual_seed(1)
        P = init_params(c, gen)
        tokens, targets = batch(c, gen, c["micro_batch_size"])
        names = list(P)

        def loss_of(*tensors):
            stats = []
            logits = forward(dict(zip(names, tensors)), c, tokens, stats)
            return objective(logits, targets, stats)[1]

        inputs = tuple(P[n].clone().requires_grad_(True) for n in names)
        assert torch.autograd.gradcheck(loss_of, inputs, eps=1e-6, atol=1e-7, rtol=1e-5)
        print(f"{family}: gradcheck of every parameter passed")
    moe.self_test(init_params)

    for family, c in CONFIGS.items():
        gen = torch.Generator().manual_seed(2)
        P = init_params(c, gen)
        tokens, targets = batch(c, gen, c["micro_batch_size"])
        stats = []
        mine = forward(P, c, tokens, stats)
        theirs, router_logits = forward_with_torch_ops(P, c, tokens)
        for s, logits in zip(stats, router_logits):  # the aux and z of the dispatch form
            moe.check_losses(logits, c["moe_topk"], c["moe_aux_loss_coeff"],
                             c["moe_z_loss_coeff"], got_aux=float(s["aux"]),
                             got_z=float(s["z"]))
        err = float((mine - theirs).abs().max())
        assert err < 1e-10, (family, err)
        ce = float(torch.nn.functional.cross_entropy(mine, targets.reshape(-1)))
        assert abs(ce - float(cross_entropy(mine, targets))) < 1e-12
        print(f"{family}: forward matches torch.nn.functional ops (max diff {err:.1e})")

        g = {n: torch.randn(p.shape, generator=gen, dtype=torch.float64) * 0.3
             for n, p in P.items()}
        check_adamw_against_torch(P, g)
        print(f"{family}: AdamW + clipping + schedule match torch.optim.AdamW")


def forward_with_torch_ops(P, c, tokens):
    """The same model built from torch.nn.functional, to cross-check the plain formulas;
    MoE layers dispatch tokens to experts (reference_moe.moe_mlp_dispatch). -> (logits,
    [router logits of each MoE layer])."""
    F = torch.nn.functional
    B, S = tokens.shape
    h, a, g = c["hidden_size"], c["num_attention_heads"], c["num_query_groups"]
    d, per, gpt = h // a, a // g, c["arch"] == "gpt"
    x = F.embedding(tokens.reshape(-1), P["embedding.word"])
    if gpt:
        x = x + P["embedding.position"].repeat(B, 1)

    def norm(x, key):
        if gpt:
            return F.layer_norm(x, (h,), P[key + ".weight"], P[key + ".bias"], NORM_EPS)
        return F.rms_norm(x, (h,), P[key + ".weight"], NORM_EPS)

    def rope_by_complex(t):
        # Rotate-half pairs (i, i + d/2) as the complex number x_i + i x_{i+d/2}.
        z = torch.complex(t[..., : d // 2], t[..., d // 2:])
        freqs = ROPE_THETA ** (-torch.arange(0, d, 2, dtype=t.dtype) / d)
        z = z * torch.polar(torch.ones(S, d // 2, dtype=t.dtype),
                            torch.outer(torch.arange(S, dtype=t.dtype), freqs))
        return torch.cat([z.real, z.imag], dim=-1)

    router_logits = []
    for i in range(c["num_layers"]):
        p = f"layers.{i}."
        qkv = F.linear(norm(x, p + "norm1"), P[p + "attn.qkv.weight"],
                       P.get(p + "attn.qkv.bias"))
        groups = qkv.view(B, S, g, per + 2, d)
        q = groups[..., :per, :].flatten(2, 3).transpose(1, 2)
        k = groups[..., per, :].transpose(1, 2)
        v = groups[..., per + 1, :].transpose(1, 2)
        if not gpt:
            q, k = rope_by_complex(q), rope_by_complex(k)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        x = x + F.linear(o.transpose(1, 2).reshape(B * S, h), P[p + "attn.proj.weight"],
                         P.get(p + "attn.proj.bias"))
        if moe.is_moe_layer(c, i):
            y, logits = moe.moe_mlp_dispatch(norm(x, p + "norm2"), P, p, c)
            router_logits.append(logits)
            x = x + y
            continue
        z = F.linear(norm(x, p + "norm2"), P[p + "mlp.fc1.weight"], P.get(p + "mlp.fc1.bias"))
        if gpt:
            m = F.gelu(z)
        else:
            gate, up = z.chunk(2, dim=-1)
            m = F.silu(gate) * up
        x = x + F.linear(m, P[p + "mlp.fc2.weight"], P.get(p + "mlp.fc2.bias"))
    head = P["embedding.word"] if gpt else P["output.weight"]
    return F.linear(norm(x, "final_norm"), head), router_logits


def check_adamw_against_torch(P, g):
    mine = dict(P)
    opt = AdamW(mine, TRAIN)
    leaves = {n: p.clone().requires_grad_(True) for n, p in P.items()}
    groups = [{"params": [t for t in leaves.values() if t.dim() >= 2],
               "weight_decay": TRAIN["weight_decay"]},
              {"params": [t for t in leaves.values() if t.dim() < 2], "weight_decay": 0.0}]
    ref = torch.optim.AdamW(groups, lr=1.0, betas=(TRAIN["adam_beta1"], TRAIN["adam_beta2"]),
                            eps=TRAIN["adam_eps"])
    unit = math.sqrt(sum(float((gi * gi).sum()) for gi in g.values()))
    for t in range(1, TRAIN["train_iters"] + 3):  # past lr_decay_iters too
        lr = learning_rate(t, TRAIN)
        grads = {n: gi * (0.3 * t / unit) for n, gi in g.items()}  # norms 0.3, 0.6, ...
        for n, leaf in leaves.items():
            leaf.grad = grads[n].clone()
        ref_norm = float(torch.nn.utils.clip_grad_norm_(list(leaves.values()),
                                                        TRAIN["clip_grad"]))
        for group in ref.param_groups:
            group["lr"] = lr
        ref.step()
        norm = opt.step(mine, grads, lr)
        assert abs(norm - ref_norm) < 1e-9 * ref_norm
        for n, leaf in leaves.items():
            assert torch.allclose(mine[n], leaf.detach(), rtol=1e-12, atol=1e-14), (t, n)
    assert learning_rate(TRAIN["lr_warmup_iters"], TRAIN) == TRAIN["lr"]
    assert abs(learning_rate(TRAIN["lr_decay_iters"], TRAIN) - TRAIN["min_lr"]) < 1e-15


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap.add_argument("--out-dir", default=os.path.join(repo, "tests", "data"),
                    help="where golden_{gpt,llama,moe,moe_shared}.bin are written")
    ap.add_argument("--seed", type=int, default=1234,
                    help="seed of weights and batches (each file adds its SEED_OFFSETS)")
    ap.add_argument("--self-test", action="store_true",
                    help="check the reference (gradcheck, torch ops, torch AdamW); write nothing")
    args = ap.parse_args()
    torch.set_default_dtype(torch.float64)
    if args.self_test:
        self_test()
        return
    os.makedirs(args.out_dir, exist_ok=True)
    for family in CONFIGS:
        seed = args.seed + SEED_OFFSETS[family]
        tensors, losses, norms, summary = golden(family, seed)
        if summary and summary["margin"] < moe.MIN_RELATIVE_MARGIN:
            raise SystemExit(f"{family}, seed {seed}: a routing near-tie (relative margin "
                             f"{summary['margin']:.1e} < {moe.MIN_RELATIVE_MARGIN:.0e}); a "
                             f"float32 model could pick other experts: change SEED_OFFSETS")
        path = os.path.join(args.out_dir, f"golden_{family}.bin")
        write_tensor_file(path, tensors)
        print(f"{path}: {len(tensors)} tensors, seed {seed}")
        print("  losses     " + " ".join(f"{x:.4f}" for x in losses))
        print("  grad norms " + " ".join(f"{x:.3f}" for x in norms))
        if summary:
            print(f"  aux {summary['aux']:.9g}  z {summary['z']:.9g}")
            print(f"  smallest routing margin over the {len(losses) + 1} forwards: "
                  f"{summary['margin']:.2e} of the logit scale "
                  f"({summary['abs_margin']:.2e} absolute)")
            print("  aux losses " + " ".join(f"{x:.5f}" for x in summary["step_aux"]))
            print("  z losses   " + " ".join(f"{x:.5f}" for x in summary["step_z"]))


if __name__ == "__main__":
    main()
