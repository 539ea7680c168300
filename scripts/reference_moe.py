"""scripts/reference_moe.py: the mixture-of-experts part of scripts/reference.py.

Megatron-Core's MoE layer (llama family: SwiGLU experts, no biases), written plainly in
float64 for the golden files tests/data/golden_moe{,_shared}.bin. reference.py imports this
module; it shares none of its code (silu is restated) so that it can be read alone.

For u = norm2's output (N, h), N = B*S tokens, token t = b*S + s, one MoE layer computes
  logits = u router^T                                    (N, E)
  idx_t  = the k largest logits of token t, gates_t = softmax over those k logits
  routed = sum over e in idx_t of (silu(u Wg_e^T) * (u Wu_e^T) * gate_te) W2_e^T
           (the gate multiplies after the activation, before fc2, as Megatron's experts;
            dropless: every expert takes every token routed to it)
  shared = (silu(u Wsg^T) * (u Wsu^T)) Ws2^T,  times sigmoid(u gate^T) with the gate
  output = routed + shared                (the residual adds it, as the dense MLP's)
and two losses that join the training objective (Megatron's MoEAuxLossAutoScaler):
  aux = alpha E / (k N^2) sum_e (sum_t softmax(logits)_te) c_e
        c_e = the number of tokens whose top k contains e (a count, not differentiated);
        switch load balancing, "aux_loss": alpha at perfect balance
  z   = beta mean_t logsumexp(logits_t)^2
The top-k choice is not differentiated (topk's indices, then gather); the router gets
gradients through the gates, aux and z.
"""
import math

import torch

# The two MoE golden models: llama's golden model with MoE MLPs. Names follow model/config.h
# (config.moe_* for the fields of struct Moe, config.num_experts for moe.num_experts).
_BASE = dict(arch="llama", num_layers=2, hidden_size=32, num_attention_heads=4,
             num_query_groups=2, seq_length=16, vocab_size=64, ffn_hidden_size=48,
             micro_batch_size=2)
_MOE = dict(num_experts=4, moe_ffn_hidden_size=24, moe_layer_pattern=[1, 1], moe_topk=2,
            moe_aux_loss_coeff=1e-2, moe_z_loss_coeff=1e-3, moe_shared_expert_size=0,
            moe_shared_expert_gate=0)
MOE_CONFIGS = {
    "moe": dict(_BASE, **_MOE),
    "moe_shared": dict(_BASE, **dict(_MOE, moe_layer_pattern=[1, 0],  # layer 1 dense
                                     moe_shared_expert_size=32, moe_shared_expert_gate=1)),
}

# A float32 model must route every token as the float64 reference does: the gap between a
# token's k-th and (k+1)-th largest logit, over the largest |logit| of that layer and
# forward, must stay above this in every forward a golden file holds.
MIN_RELATIVE_MARGIN = 1e-3


def silu(x):
    return x * torch.sigmoid(x)


def is_moe_layer(c, i):
    return c.get("num_experts", 0) > 0 and c["moe_layer_pattern"][i] != 0


def moe_param_table(c, p):
    """[(name, shape)] of MoE layer prefix p, in the table's order (after norm2.weight)."""
    h, E, fe = c["hidden_size"], c["num_experts"], c["moe_ffn_hidden_size"]
    fs = c["moe_shared_expert_size"]
    t = [(p + "mlp.router.weight", (E, h)),
         (p + "mlp.experts.fc1.weight", (E, 2 * fe, h)),  # rows [gate | up] per expert
         (p + "mlp.experts.fc2.weight", (E, h, fe))]
    if fs > 0:
        t.append((p + "mlp.shared.fc1.weight", (2 * fs, h)))
        t.append((p + "mlp.shared.fc2.weight", (h, fs)))
        if c["moe_shared_expert_gate"]:
            t.append((p + "mlp.shared.gate.weight", (1, h)))
    return t


# ---- routing and the two losses ------------------------------------------------------------

def route(logits, k):
    """Top-k of each row, then softmax over the k chosen logits: (indices, gates), (N, k)."""
    top, idx = torch.topk(logits, k, dim=1)  # descending; the indices carry no gradient
    return idx, torch.softmax(top, dim=-1)


def expert_counts(logits, k):
    """c_e: tokens whose top k contains expert e (float64 counts, no gradient)."""
    idx = torch.topk(logits.detach(), k, dim=1).indices
    return torch.zeros(logits.shape[1]).index_add(0, idx.reshape(-1),
                                                  torch.ones(idx.numel()))


def aux_loss(logits, k, alpha):
    """Megatron's switch_load_balancing_loss_func on softmax scores over all E."""
    N, E = logits.shape
    scores = torch.softmax(logits, dim=-1)
    return alpha * E / (k * N * N) * (scores.sum(0) * expert_counts(logits, k)).sum()


def z_loss(logits, beta):
    return beta * (torch.logsumexp(logits, dim=-1) ** 2).mean()


def routing_margin(logits, k):
    """(min over tokens of the k-th minus the (k+1)-th largest logit, max |logit|)."""
    s = torch.sort(logits.detach(), dim=1, descending=True).values
    return float((s[:, k - 1] - s[:, k]).min()), float(logits.detach().abs().max())


# ---- the MoE MLP -----------------------------------------------------------------------------

def swiglu(u, w1, w2, f, gate=None):
    """(silu(u Wg^T) * (u Wu^T) [* gate]) W2^T; w1 rows [gate | up] of f each."""
    z = u @ w1.T
    m = silu(z[:, :f]) * z[:, f:]
    if gate is not None:
        m = m * gate[:, None]
    return m @ w2.T


def shared_expert(u, P, p, c):
    fs = c["moe_shared_expert_size"]
    s = swiglu(u, P[p + "mlp.shared.fc1.weight"], P[p + "mlp.shared.fc2.weight"], fs)
    if c["moe_shared_expert_gate"]:
        s = torch.sigmoid(u @ P[p + "mlp.shared.gate.weight"].T) * s  # (N, 1) broadcast
    return s


def moe_mlp(u, P, p, c):
    """u (N, h) -> (output (N, h), stats). stats: aux and z (tensors in the graph), the
    routing margin and logit scale, tokens_per_expert (list of E ints).

    Written densely: every expert runs on every token, weighted by a gate matrix that is
    zero off each token's top k (so unrouted tokens add nothing, to the output or to any
    gradient). moe_mlp_dispatch is the same layer the way Megatron dispatches tokens."""
    E, k, fe = c["num_experts"], c["moe_topk"], c["moe_ffn_hidden_size"]
    logits = u @ P[p + "mlp.router.weight"].T
    idx, gates = route(logits, k)
    G = torch.zeros(u.shape[0], E).scatter(1, idx, gates)  # (N, E), differentiable in gates
    W1, W2 = P[p + "mlp.experts.fc1.weight"], P[p + "mlp.experts.fc2.weight"]
    y = sum(swiglu(u, W1[e], W2[e], fe, G[:, e]) for e in range(E))
    if c["moe_shared_expert_size"] > 0:
        y = y + shared_expert(u, P, p, c)
    return y, layer_stats(logits, c)


def layer_stats(logits, c):
    k = c["moe_topk"]
    margin, scale = routing_margin(logits, k)
    return dict(aux=aux_loss(logits, k, c["moe_aux_loss_coeff"]),
                z=z_loss(logits, c["moe_z_loss_coeff"]), margin=margin, scale=scale,
                tokens_per_expert=[int(x) for x in expert_counts(logits, k).tolist()])


def moe_mlp_dispatch(u, P, p, c):
    """The same layer as Megatron runs it: permute the (token, expert) pairs to their
    experts, run each expert on its rows only, scale by the gate, add back per token."""
    F = torch.nn.functional
    E, k, fe = c["num_experts"], c["moe_topk"], c["moe_ffn_hidden_size"]
    logits = F.linear(u, P[p + "mlp.router.weight"])
    idx, gates = route(logits, k)
    y = torch.zeros_like(u)
    for e in range(E):
        tok, slot = (idx == e).nonzero(as_tuple=True)
        w1 = P[p + "mlp.experts.fc1.weight"][e]
        gate, up = F.linear(u[tok], w1).chunk(2, dim=-1)
        out = F.linear(F.silu(gate) * up * gates[tok, slot][:, None],
                       P[p + "mlp.experts.fc2.weight"][e])
        y = y.index_add(0, tok, out)
    if c["moe_shared_expert_size"] > 0:
        gate, up = F.linear(u, P[p + "mlp.shared.fc1.weight"]).chunk(2, dim=-1)
        s = F.linear(F.silu(gate) * up, P[p + "mlp.shared.fc2.weight"])
        if c["moe_shared_expert_gate"]:
            s = s * torch.sigmoid(F.linear(u, P[p + "mlp.shared.gate.weight"]))
        y = y + s
    return y, logits


# ---- the golden file's MoE tensors -----------------------------------------------------------

def summarise(stats):
    """One forward's per-layer stats -> (aux, z) summed over the MoE layers (floats), and
    the smallest routing margin of its layers: relative (over that layer's max |logit|)
    and absolute."""
    aux = sum(float(s["aux"].detach()) for s in stats)
    z = sum(float(s["z"].detach()) for s in stats)
    rel = min(s["margin"] / s["scale"] for s in stats)
    return aux, z, rel, min(s["margin"] for s in stats)


def golden_tensors(c, stats, step_stats):
    """The MoE tensors of a golden file from the stats of its single step and of each step:
    (after loss: aux_loss, z_loss, tokens_per_expert), (after steps.losses: steps.aux_losses,
    steps.z_losses), a summary for the log (and the margin check). Dense: [], [], None."""
    if not stats:
        return [], [], None
    aux, z, margin, abs_margin = summarise(stats)
    layers = iter(stats)
    counts = [next(layers)["tokens_per_expert"] if is_moe_layer(c, i) else
              [0] * c["num_experts"] for i in range(c["num_layers"])]
    single = [("aux_loss", "f", (), [aux]), ("z_loss", "f", (), [z]),
              ("tokens_per_expert", "i", (c["num_layers"], c["num_experts"]), sum(counts, []))]
    per_step = [summarise(st) for st in step_stats]
    T = len(per_step)
    steps = [("steps.aux_losses", "f", (T,), [s[0] for s in per_step]),
             ("steps.z_losses", "f", (T,), [s[1] for s in per_step])]
    summary = dict(aux=aux, z=z, step_aux=[s[0] for s in per_step],
                   step_z=[s[1] for s in per_step],
                   margin=min([margin] + [s[2] for s in per_step]),
                   abs_margin=min([abs_margin] + [s[3] for s in per_step]))
    return single, steps, summary


def config_tensors(c):
    """config.* of the MoE fields (int32 scalars, float32 coefficients, int32 pattern)."""
    out = []
    for key in _MOE:
        val = c[key]
        if isinstance(val, list):
            out.append(("config." + key, "i", (len(val),), val))
        else:
            out.append(("config." + key, "f" if isinstance(val, float) else "i", (), [val]))
    return out


# ---- self-test -------------------------------------------------------------------------------

SMALL = dict(arch="llama", num_layers=1, hidden_size=8, num_attention_heads=4,
             num_query_groups=2, seq_length=4, vocab_size=11, ffn_hidden_size=6,
             micro_batch_size=2, num_experts=4, moe_ffn_hidden_size=5, moe_layer_pattern=[1],
             moe_topk=2, moe_aux_loss_coeff=0.3, moe_z_loss_coeff=0.2,
             moe_shared_expert_size=3, moe_shared_expert_gate=1)


def self_test(init_params):
    """Gradcheck of the MoE MLP and its losses, the dense and dispatch forms against each
    other, and aux / z against a second formulation. init_params: reference.py's."""
    gen = torch.Generator().manual_seed(3)
    c = SMALL
    P = init_params(c, gen)
    p = "layers.0."
    names = [n for n, _ in moe_param_table(c, p)]
    u = torch.randn(7, c["hidden_size"], generator=gen)
    margin, _ = routing_margin(u @ P[p + "mlp.router.weight"].T, c["moe_topk"])
    assert margin > 1e-3, margin  # finite differences (eps 1e-6) must not re-route

    def layer(u, *weights):
        y, stats = moe_mlp(u, dict(zip(names, weights)), p, c)
        return y, stats["aux"], stats["z"]

    inputs = (u.clone().requires_grad_(True),) + tuple(
        P[n].clone().requires_grad_(True) for n in names)
    assert torch.autograd.gradcheck(layer, inputs, eps=1e-6, atol=1e-7, rtol=1e-5)
    print("moe: gradcheck of the MoE MLP (output, aux, z) in u and every weight passed")

    for shared in (0, 3):
        for gate in (0, 1):
            cc = dict(c, moe_shared_expert_size=shared, moe_shared_expert_gate=gate)
            Pc = init_params(cc, torch.Generator().manual_seed(4))
            y, _ = moe_mlp(u, Pc, p, cc)
            y2, _ = moe_mlp_dispatch(u, Pc, p, cc)
            err = float((y - y2).abs().max())
            assert err < 1e-12, (shared, gate, err)
    print(f"moe: dense-gate form matches the dispatch form (max diff {err:.1e})")

    for trial in range(5):
        N, E, k = 16 + trial, 4 + trial % 3, 1 + trial % 2
        logits = 1.5 * torch.randn(N, E, generator=gen)
        check_losses(logits, k, alpha=0.01 * (trial + 1), beta=0.001 * (trial + 1))
    check_perfect_balance()
    print("moe: aux = alpha E sum_i f_i P_i, z = beta mean lse^2, aux = alpha when balanced")


def check_losses(logits, k, alpha, beta, got_aux=None, got_z=None):
    """aux and z (got_*: by default aux_loss and z_loss of these logits) against Megatron's
    docstring form, aux = alpha E sum_i f_i P_i, and an explicit log-sum-exp."""
    logits = logits.detach()
    N, E = logits.shape
    scores = torch.exp(logits) / torch.exp(logits).sum(-1, keepdim=True)
    # f_i: the fraction of the N k (token, expert) pairs sent to i; P_i: i's mean score.
    chosen = scores.argsort(dim=1, descending=True)[:, :k]
    f = torch.tensor([float((chosen == i).sum()) for i in range(E)]) / (N * k)
    Pm = scores.mean(0)
    want_aux = alpha * E * float((f * Pm).sum())
    got_aux = float(aux_loss(logits, k, alpha)) if got_aux is None else got_aux
    assert abs(got_aux - want_aux) < 1e-14 * max(1.0, abs(want_aux)), (got_aux, want_aux)
    lse = logits.max(-1).values + torch.log(torch.exp(logits - logits.max(-1, True).values)
                                            .sum(-1))
    want_z = beta * float((lse * lse).sum()) / N
    got_z = float(z_loss(logits, beta)) if got_z is None else got_z
    assert abs(got_z - want_z) < 1e-13 * want_z, (got_z, want_z)
    # the count carries no gradient: d aux / d logits is that of the scores' sum alone
    leaf = logits.clone().requires_grad_(True)
    aux_loss(leaf, k, alpha).backward()
    c = expert_counts(logits, k)
    ref = leaf.detach().clone().requires_grad_(True)
    (alpha * E / (k * N * N) * (torch.softmax(ref, -1).sum(0) * c).sum()).backward()
    assert torch.allclose(leaf.grad, ref.grad, rtol=1e-13, atol=0)


def check_perfect_balance():
    """Tokens whose logits are the E cyclic rotations of one row: every expert gets N k / E
    pairs and a mean score of 1/E, so aux = alpha exactly (Megatron's normalisation)."""
    E, k, alpha = 4, 2, 0.01
    row = torch.tensor([2.0, 1.0, 0.0, -1.0])
    logits = torch.stack([row.roll(r) for r in range(E)] * 3)  # N = 12
    assert abs(float(aux_loss(logits, k, alpha)) - alpha) < 1e-16
    assert expert_counts(logits, k).tolist() == [6.0] * E
    assert math.isclose(float(z_loss(logits, 1.0)),
                        float(torch.logsumexp(row, 0)) ** 2, rel_tol=1e-14)
