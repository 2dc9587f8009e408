#!/usr/bin/python3
"""dist-plan.py - the paper plan of docs/distributed.md: DeepSeek-V3/R1
(671B) run by ds-run --mpi over R machines, from the model's shapes
(docs/deepseek.md section 3) and a few machine figures.

Usage: scripts/dist-plan.py [--bw GB/s] [--seed N]

Prints, per weight type, the bytes each rank holds and reads per decoded
token, the bytes per token on each machine's link, the time budget of a
MoE layer, and the decode rate beside one machine's bandwidth limit.
Every figure is arithmetic on the constants below; the expert counts of
the busiest rank come from simulating V3's router (8 groups of 32
experts, 4 groups kept, 8 experts among them, uniformly).
"""
import argparse
import random

# DeepSeek-V3 / R1 (docs/deepseek.md section 3)
H, LAYERS, DENSE, VOCAB = 7168, 61, 3, 129280
NH, RQ, RKV, DNOPE, DROPE, DV = 128, 1536, 512, 128, 64, 128
FF, FF_EXP, E, K, GROUPS, KEEP = 18432, 2048, 256, 8, 8, 4
MOE = LAYERS - DENSE

# bytes per weight: q4g32 = 4 bits + an fp16 scale and a u8 zero per 32;
# q8g32 = 8 bits + an fp16 scale per 32 (kernels/types.h)
TYPES = {"q4g32": 4.75 / 8, "q8g32": 8.5 / 8}


def params():
    attn = (RQ * H + NH * (DNOPE + DROPE) * RQ + (RKV + DROPE) * H
            + NH * (DNOPE + DV) * RKV + H * NH * DV)
    expert = 3 * H * FF_EXP
    return {
        "attn": attn * LAYERS,
        "dense": 3 * H * FF * DENSE,
        "shared": expert * MOE,
        "router": E * H * MOE,             # f32
        "embed": VOCAB * H,                # bf16, a row per token
        "output": VOCAB * H,               # q8g32, rank 0 alone
        "derived": NH * RKV * DNOPE * LAYERS,  # bf16 W_UK^T (forward.h)
        "expert": expert,
    }


def busiest(R, n, rng):
    """Mean, over n tokens, of the most experts one rank computes."""
    per, tot = E // R, 0
    for _ in range(n):
        gs = rng.sample(range(GROUPS), KEEP)
        pool = [g * (E // GROUPS) + i for g in gs for i in range(E // GROUPS)]
        cnt = [0] * R
        for e in rng.sample(pool, K):
            cnt[e // per] += 1
        tot += max(cnt)
    return tot / n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bw", type=float, default=150.0,
                    help="sustained memory read bandwidth per machine, GB/s")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    p = params()
    row = H * 4                      # an expert's output row, f32
    links = {"25 Gb/s": 25e9 / 8, "100 Gb/s": 100e9 / 8}
    alpha = {"25 Gb/s": 25e-6, "100 Gb/s": 15e-6}   # TCP, one message
    mx = {R: busiest(R, 200000, rng) if R > 1 else K for R in (1, 2, 4, 8)}
    print("busiest rank's experts per MoE layer:",
          ", ".join("R=%d %.2f" % (R, mx[R]) for R in mx))
    for t, b in TYPES.items():
        rep_mem = ((p["attn"] + p["dense"] + p["shared"]) * b + p["router"] * 4
                   + p["embed"] * 2 + p["derived"] * 2)
        rep_read = ((p["attn"] + p["dense"] + p["shared"]) * b + p["router"] * 4
                    + p["derived"] * 2 + p["output"] * TYPES["q8g32"])
        exp_b = p["expert"] * b
        total = rep_mem + p["output"] * TYPES["q8g32"] + exp_b * E * MOE
        one = rep_read + exp_b * K * MOE
        print("\n%s: %.1f GB in all; %.1f GB read per token; one machine "
              "(if it held it): %.2f tokens/s at %.0f GB/s"
              % (t, total / 1e9, one / 1e9, a.bw * 1e9 / one, a.bw))
        print("| R | GB per rank | GB read per token (rank 0) | MB per token per link "
              "| MoE layer: compute, exchange 25 / 100 Gb/s | tokens/s 25 / 100 Gb/s |")
        for R in (2, 4, 8):
            mem = rep_mem + exp_b * E * MOE / R
            read = rep_read + exp_b * mx[R] * MOE
            link = MOE * (K - K / R) * row
            layer = (rep_read / LAYERS + exp_b * mx[R]) / (a.bw * 1e9)
            ex, tps = [], []
            for name, bw in links.items():
                x = (R - 1) * alpha[name] + (K - K / R) * row / bw
                ex.append(x)
                tps.append(1 / (read / (a.bw * 1e9) + MOE * x + 2 * alpha[name]))
            print("| %d | %.0f (+%.1f on rank 0) | %.1f | %.2f | %.2f ms, %.0f / %.0f us "
                  "| %.2f / %.2f |" % (R, mem / 1e9, p["output"] * TYPES["q8g32"] / 1e9,
                                      read / 1e9, link / 1e6, layer * 1e3, ex[0] * 1e6,
                                      ex[1] * 1e6, tps[0], tps[1]))
        lim = rep_read + exp_b * MOE
        print("R -> infinity (one expert per layer on the busiest rank): %.2f tokens/s"
              % (a.bw * 1e9 / lim))


if __name__ == "__main__":
    main()
