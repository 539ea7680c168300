"""lessons/11-low-precision/qwen3_fp8.py: part 6 of check.sh, Qwen3-30B-A3B's plan in bf16 and in
FP8 (delayed hybrid; the experts' GEMMs in FP8 too), each number of the README's section 6
against its formula, and the model state of fp32 and of bf16 moments (check.sh holds the
section's table of each precision to the plans). Imported by check.sh's python part (its
`check` tallies)."""
import json

from checks import check

# configs/models/qwen3-30b-a3b.toml, and the layout check.sh plans (--world-size 64 --ep 8)
L, h, a, g, d, E, k, fe = 48, 2048, 32, 4, 128, 128, 8, 768
ep, world, N, act = 8, 64, 4096, 2
dp, edp, El = world, world // ep, E // ep     # tp 1: dense dp 64; experts' edp 8, 16 local
one_expert = 3 * h * fe                       # SwiGLU fc1 (2 f_e, h) + fc2 (h, f_e)


def run(work):
    print("part 6: Qwen3-30B-A3B in bf16 and in FP8 (ep 8, dp 64, ZeRO-1; experts in FP8)")
    b = json.load(open(f"{work}/qwen3_bf16.json"))
    f = json.load(open(f"{work}/qwen3_fp8.json"))
    mb, mf = b["memory"][0], f["memory"][0]
    psi = mb["param_count"]
    psi_e = L * El * one_expert               # the rank's experts
    psi_d = psi - psi_e                       # its dense share: attention, norms, routers, vocab
    check("per rank: experts 48 x 16 x 3 h f_e = 3,623,878,656, dense 1,541,093,376",
          (psi_e, psi_d), (3623878656, 1541093376))
    bf16 = 4 * psi + 12 * psi_d / dp + 12 * psi_e / edp    # ZeRO-1: 2 + 2 + 12/N, N per vector
    state = 4 * (1 + 1) * 3 * 2 * El * L                   # delayed, history 1: per expert linear
    check("bf16: bytes of model state per parameter, (4 Psi + 12 Psi_d/64 + 12 Psi_e/8) / Psi",
          mb["resident"]["total"] / psi, bf16 / psi)
    resident = lambda name: json.load(open(f"{work}/qwen3_{name}.json"))["memory"][0]["resident"]
    per_param = lambda name: resident(name)["total"] / psi
    check("fp32 (no master): (8 Psi + 8 Psi_d/64 + 8 Psi_e/8) / Psi = 8.74",
          (per_param("fp32"), round((8 * psi + 8 * psi_d / dp + 8 * psi_e / edp) / psi, 2)),
          ((8 * psi + 8 * psi_d / dp + 8 * psi_e / edp) / psi, 8.74))
    check("bf16 moments: (4 Psi + 8 Psi_d/64 + 8 Psi_e/8) / Psi = 4.74",
          (per_param("moments"), round((4 * psi + 8 * psi_d / dp + 8 * psi_e / edp) / psi, 2)),
          ((4 * psi + 8 * psi_d / dp + 8 * psi_e / edp) / psi, 4.74))
    check("FP8: the same model state; the experts' delayed state, 4 (len + 1) 3 x 2 x 16 x 48 = "
          "36,864 B, is fp8_state", (mf["resident"]["total"] - mb["resident"]["total"], state),
          (0, 36864))
    # the dense FP8 scratch: every layer is MoE, so qkv and proj only (tp 1: whole widths)
    linears = [(h, (a + 2 * g) * d), (a * d, h)]
    A = max(N * max(i, o) for i, o in linears)
    B = max(max(o * i, N * i) for i, o in linears)
    history = 4 * (1 + 1) * 3 * 4 * L                      # 4 dense slots per layer
    check("fp8_operands: A = N (a + 2g) d, B = N a d, 2 factors = 37,748,744 B",
          (A, B, mf["fp8_operands"]), (20971520, 16777216, A + B + 2 * 4))
    check("fp8_state: dense histories (4 slots per layer) 4,608 B + the experts' 36,864 B",
          (history, mf["fp8_state"]), (4608, history + state))
    # the experts' operands, a transient at R = N k rows (dropless, ep 8's allgather), fc1 2 f_e
    R = N * k
    experts = R * max(h, 2 * fe) + max(2 * fe * h, R * h, h * fe, R * fe) + 2 * 4
    gathered = ep * N * h * act                            # the allgather's P N h beside y
    check("experts' FP8 operands at R = N k = 32,768 rows: 2 R h + 8 = 134,217,736 B",
          (R, experts), (32768, 134217736))
    check("FP8 workspace = what the experts' operands add over the gathered rows (P N h x2) "
          "they replace in the experts' phase: 8 B",
          (mf["workspace"] - mb["workspace"], experts - gathered), (8, 8))
    check("both fit an 80 GiB H100", (b["fit"]["fits"], f["fit"]["fits"]), (True, True))
    rows = lambda p: {(c["group"], c["op"]): c for c in p["comm"]}
    rb, rf = rows(b), rows(f)
    delta = lambda grp: (rf[(grp, "all-reduce")]["calls"] - rb[(grp, "all-reduce")]["calls"],
                         rf[(grp, "all-reduce")]["payload_bytes"] - rb[(grp, "all-reduce")]["payload_bytes"])
    check("amax all-reduces: dense on dp, 2 calls of 4 x 3 x 4 x 48 B in all",
          delta("dp"), (2, 4 * 3 * 4 * L))
    check("amax all-reduces: each expert over its edp copies, 2 calls of 4 x 3 x 2 x 16 x 48 B",
          delta("edp"), (2, 4 * 3 * 2 * El * L))
    x = f["fp8"]
    print("      projected (H100 SXM, not asserted): linears' GEMMs %.2f s -> %.2f s at the FP8 "
          "peak (the experts' included), casts %.2f s; step %.2f s -> %.2f s (%+.1f%%); peak "
          "%.2f -> %.2f GiB of 80" % (x["gemm_s"], x["gemm_fp8_s"], x["cast_s"], x["step_s"],
          x["step_fp8_s"], 100 * (x["step_fp8_s"] / x["step_s"] - 1),
          b["fit"]["peak_bytes"] / 2 ** 30, f["fit"]["peak_bytes"] / 2 ** 30))
