#!/usr/bin/python3
"""Self-checks of the reference forward pass (scripts/ref/forward.py), each
against an independent formulation: published constants, the remote code's
permuted RoPE, per-token loop routers, bit-by-bit packers written from the
spec text, causality, float32 vs float64. Prints TAP; exit 1 on a failure.

  scripts/ref/selftest.py
"""

import math
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import forward as ref  # noqa: E402

torch.set_grad_enabled(False)
_n = 0
_failed = 0


def check(ok, what):
    global _n, _failed
    _n += 1
    if not ok:
        _failed += 1
    print("%s %d - %s" % ("ok" if ok else "not ok", _n, what))


# --- YaRN constants of the released configs (docs/deepseek.md §4.2, §4.3)

def t_yarn_constants():
    d, base, L0 = 64, 10000.0, 4096
    low = max(math.floor(ref._yarn_corr_dim(32, d, base, L0)), 0)
    high = min(math.ceil(ref._yarn_corr_dim(1, d, base, L0)), d - 1)
    check((low, high) == (10, 23), "yarn correction range of V2/V3 is [10, 23]")
    for m, want in ((0.707, 0.114721), (1.0, 0.135234)):
        cfg = {"hidden_size": 8, "num_attention_heads": 1, "qk_nope_head_dim": 128,
               "qk_rope_head_dim": 64, "v_head_dim": 128, "kv_lora_rank": 512,
               "q_lora_rank": None,
               "rope_scaling": {"type": "yarn", "factor": 40, "original_max_position_embeddings": 4096,
                                "beta_fast": 32, "beta_slow": 1, "mscale": m, "mscale_all_dim": m}}
        sc = ref.MLA(cfg).scale
        check(abs(sc - want) < 5e-7, "softmax_scale with mscale_all_dim %g = %.6f" % (m, sc))
        inv, af = ref.rope_params(dict(cfg, rope_theta=10000.0), 64)
        check(abs(af - 1.0) < 1e-12, "attention factor 1.0 when mscale == mscale_all_dim")
        f = 1.0 / 10000.0 ** (torch.arange(0, 64, 2, dtype=torch.float64) / 64)
        check(torch.allclose(inv[:11], f[:11]) and torch.allclose(inv[23:], f[23:] / 40)
              and bool(((inv[11:23] < f[11:23]) & (inv[11:23] > f[11:23] / 40)).all()),
              "yarn pairs 0-10 original, 23+ divided by 40, 11-22 blended")


# --- RoPE: interleaved pairs == remote code's permute + rotate_half (on scores)

def remote_rope(x, cos, sin):
    """modeling_deepseek.py: view(d/2, 2).transpose -> [x0,x2,..,x1,x3,..], then
    the half-split rotation with cos/sin = cat(freqs, freqs)."""
    d = x.shape[-1]
    x = x.reshape(*x.shape[:-1], d // 2, 2).transpose(-1, -2).reshape(x.shape)
    c = torch.cat((cos, cos), -1)[None, :, None, :]
    s = torch.cat((sin, sin), -1)[None, :, None, :]
    rot = torch.cat((-x[..., d // 2:], x[..., :d // 2]), -1)
    return x * c + rot * s


def t_rope():
    T, d = 40, 16
    cfg = {"rope_theta": 10000.0, "rope_scaling": {"type": "yarn", "factor": 4.0,
           "original_max_position_embeddings": 16, "mscale": 1.0, "mscale_all_dim": 0.5}}
    inv, af = ref.rope_params(cfg, d)
    r = ref.Rope(inv, af, T, torch.float64, True)
    q, k = torch.randn(1, T, 3, d, dtype=torch.float64), torch.randn(1, T, 1, d, dtype=torch.float64)
    a = torch.einsum("bthd,bsd->bhts", r.apply(q), r.apply(k)[:, :, 0])
    b = torch.einsum("bthd,bsd->bhts", remote_rope(q, r.cos, r.sin), remote_rope(k, r.cos, r.sin)[:, :, 0])
    check(torch.allclose(a, b, atol=1e-12), "interleaved rope scores == remote-code permuted rope scores")
    check(abs(af - (1 + 0.1 * math.log(4)) / (1 + 0.05 * math.log(4))) < 1e-12,
          "attention factor mscale(s, mscale)/mscale(s, mscale_all_dim)")
    # half split (llama): rotation of pair (i, i+d/2) by pos*inv[i], checked element-wise
    rl = ref.Rope(inv, 1.0, T, torch.float64, False)
    out = rl.apply(q)
    t, h, i = 7, 1, 3
    th = t * inv[i].item()
    x0, x1 = q[0, t, h, i].item(), q[0, t, h, i + d // 2].item()
    check(abs(out[0, t, h, i].item() - (x0 * math.cos(th) - x1 * math.sin(th))) < 1e-12 and
          abs(out[0, t, h, i + d // 2].item() - (x1 * math.cos(th) + x0 * math.sin(th))) < 1e-12,
          "half-split rope rotates (x[i], x[i+d/2])")


def t_llama3():
    rs = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 8192}
    d, base = 128, 500000.0
    inv, _ = ref.rope_params({"rope_theta": base, "rope_scaling": rs}, d)
    ok = True
    for i in range(d // 2):
        f = base ** (-2 * i / d)
        wl = 2 * math.pi / f
        if wl < 8192 / 4:
            want = f
        elif wl > 8192 / 1:
            want = f / 8
        else:
            sm = (8192 / wl - 1) / (4 - 1)
            want = (1 - sm) * f / 8 + sm * f
        ok &= abs(inv[i].item() - want) <= 1e-15 + 1e-12 * want
    check(ok, "llama3 rope frequencies, element-wise loop")


# --- MoE router against a per-token loop

def loop_gate(cfg, W, bias, h):
    E, k = cfg["n_routed_experts"], cfg["num_experts_per_tok"]
    G, tg = cfg.get("n_group", 1), cfg.get("topk_group", 1)
    ids, ws = [], []
    for x in h.tolist():
        lg = [sum(a * b for a, b in zip(x, row)) for row in W.tolist()]
        if cfg["scoring_func"] == "softmax":
            mx = max(lg)
            e = [math.exp(v - mx) for v in lg]
            s = [v / sum(e) for v in e]
        else:
            s = [1 / (1 + math.exp(-v)) for v in lg]
        sel = [s[j] + (bias[j] if cfg["topk_method"] == "noaux_tc" else 0.0) for j in range(E)]
        if cfg["topk_method"] != "greedy":
            n = E // G
            if cfg["topk_method"] == "noaux_tc":
                gsc = [sum(sorted(sel[g * n:(g + 1) * n])[-2:]) for g in range(G)]
            else:
                gsc = [max(sel[g * n:(g + 1) * n]) for g in range(G)]
            keep = sorted(range(G), key=lambda g: -gsc[g])[:tg]
            sel = [sel[j] if j // n in keep else -math.inf for j in range(E)]
        top = sorted(range(E), key=lambda j: -sel[j])[:k]
        w = [s[j] for j in top]
        v3 = cfg["model_type"] == "deepseek_v3"
        if k > 1 and cfg["norm_topk_prob"]:
            w = [v / (sum(w) + 1e-20) for v in w]
            if v3:
                w = [v * cfg["routed_scaling_factor"] for v in w]
        else:
            w = [v * cfg["routed_scaling_factor"] for v in w]
        order = sorted(range(k), key=lambda i: top[i])
        ids.append([top[i] for i in order])
        ws.append([w[i] for i in order])
    return ids, ws


def t_gate():
    base = {"n_routed_experts": 16, "num_experts_per_tok": 3, "routed_scaling_factor": 2.5}
    cases = [
        dict(model_type="deepseek_v2", scoring_func="softmax", topk_method="greedy", norm_topk_prob=False),
        dict(model_type="deepseek_v2", scoring_func="softmax", topk_method="greedy", norm_topk_prob=True),
        dict(model_type="deepseek_v2", scoring_func="softmax", topk_method="group_limited_greedy",
             n_group=4, topk_group=2, norm_topk_prob=False),
        dict(model_type="deepseek_v3", scoring_func="sigmoid", topk_method="noaux_tc",
             n_group=4, topk_group=2, norm_topk_prob=True),
        dict(model_type="deepseek_v3", scoring_func="sigmoid", topk_method="noaux_tc",
             n_group=8, topk_group=3, norm_topk_prob=False),
    ]
    for c in cases:
        cfg = dict(base, **c)
        g = ref.Gate(cfg, 12).double()
        g.weight.copy_(torch.randn(16, 12, dtype=torch.float64))
        bias = [0.0] * 16
        if c["topk_method"] == "noaux_tc":
            b = torch.randn(16, dtype=torch.float64) * 0.5    # both signs: -inf masking matters
            g.e_score_correction_bias.copy_(b)
            bias = b.tolist()
        h = torch.randn(20, 12, dtype=torch.float64)
        idx, w, _ = g(h)
        order = idx.argsort(-1)
        idx, w = idx.gather(1, order), w.gather(1, order)
        li, lw = loop_gate(cfg, g.weight, bias, h)
        check(idx.tolist() == li and np.allclose(w.numpy(), np.array(lw), atol=1e-12),
              "router %s/%s norm=%s groups=%s vs per-token loop"
              % (c["scoring_func"], c["topk_method"], c["norm_topk_prob"], c.get("n_group", 1)))


# --- AWQ / GPTQ unpacking against bit-by-bit packers written from the spec

def pack_awq(q, z):
    """q [K, N], z [G, N] ints 0..15 -> qweight [K, N/8], qzeros [G, N/8] (int32)."""
    order = [0, 2, 4, 6, 1, 3, 5, 7]

    def pk(a):
        out = np.zeros((a.shape[0], a.shape[1] // 8), np.uint32)
        for r in range(a.shape[0]):
            for c in range(a.shape[1] // 8):
                w = 0
                for i in range(8):
                    w |= int(a[r, 8 * c + order[i]]) << (4 * i)
                out[r, c] = w
        return out.view(np.int32)
    return pk(q), pk(z)


def pack_gptq(q, zstored, bits):
    """q [K, N] -> qweight [K*b/32, N]; zstored [G, N] -> qzeros [G, N*b/32]."""
    per = 32 // bits
    K, N = q.shape
    qw = np.zeros((K // per, N), np.uint32)
    for r in range(K // per):
        for n in range(N):
            w = 0
            for i in range(per):
                w |= (int(q[r * per + i, n]) & ((1 << bits) - 1)) << (bits * i)
            qw[r, n] = w
    G = zstored.shape[0]
    qz = np.zeros((G, N // per), np.uint32)
    for g in range(G):
        for c in range(N // per):
            w = 0
            for i in range(per):
                w |= (int(zstored[g, c * per + i]) & 0xFFFFFFFF) << (bits * i)
            qz[g, c] = w & 0xFFFFFFFF
    return qw.view(np.int32), qz.view(np.int32)


def t_quant():
    rng = np.random.default_rng()
    K, N, g = 64, 24, 16
    G = K // g
    q = rng.integers(0, 16, (K, N))
    z = rng.integers(0, 16, (G, N))
    s = rng.uniform(0.01, 0.1, (G, N)).astype(np.float16)
    qw, qz = pack_awq(q, z)
    W = ref.awq_gemm_dequant(qw, qz, s, g)
    gi = np.arange(K) // g
    want = ((q - z[gi]) * s.astype(np.float64)[gi]).T
    check(np.array_equal(W, want), "AWQ GEMM unpack (interleaved nibbles) vs spec packer")
    for bits in (4, 8):
        maxq = (1 << bits) - 1
        q = rng.integers(0, maxq + 1, (K, N))
        z = rng.integers(1, maxq + 1, (G, N))           # v1 cannot store z = 0 exactly
        perm = rng.permutation(K)                         # act-order: scattered groups
        g_idx = (np.argsort(perm) // g).astype(np.int32)
        for v1 in (True, False):
            qw, qz = pack_gptq(q, z - 1 if v1 else z, bits)
            W = ref.gptq_dequant(qw, qz, s, g_idx, bits, g, v1)
            want = ((q - z[g_idx]) * s.astype(np.float64)[g_idx]).T
            check(np.array_equal(W, want), "GPTQ %d-bit %s act-order unpack vs spec packer"
                  % (bits, "v1" if v1 else "v2"))
    # v1 with a true zero point 0: the stored -1 sets every higher field (file semantics)
    q = rng.integers(0, 16, (K, N))
    z = rng.integers(0, 16, (G, N))
    z[0, 0] = 0
    qw, qz = pack_gptq(q, z - 1, 4)
    W = ref.gptq_dequant(qw, qz, s, None, 4, g, True)
    check(W[0, 0] == (q[0, 0] - 0) * float(s[0, 0]) and W[7, 0] == q[0, 7] * float(s[0, 7]),
          "GPTQ v1 zero 0 overflow read as the file holds it")


# --- whole-model checks on random in-memory models

def tiny_cfg(mt, **kw):
    c = dict(model_type=mt, vocab_size=97, hidden_size=32, num_hidden_layers=3, intermediate_size=48,
             num_attention_heads=4, num_key_value_heads=2, rms_norm_eps=1e-6, rope_theta=10000.0,
             tie_word_embeddings=False)
    if mt.startswith("deepseek"):
        c.update(q_lora_rank=None, kv_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=8,
                 v_head_dim=8, n_routed_experts=8, num_experts_per_tok=2, n_shared_experts=1,
                 moe_intermediate_size=16, first_k_dense_replace=1, moe_layer_freq=1,
                 scoring_func="softmax", topk_method="greedy", norm_topk_prob=False,
                 routed_scaling_factor=1.0, num_key_value_heads=4,
                 rope_scaling={"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16,
                               "beta_fast": 32, "beta_slow": 1, "mscale": 0.707, "mscale_all_dim": 0.707})
    c.update(kw)
    return c


def random_model(cfg):
    torch.manual_seed(1)
    m = ref.CausalLM(cfg).double()
    for n, p in m.named_parameters():
        if "norm" in n:
            p.copy_(1 + 0.1 * torch.randn(p.shape))
        elif n.endswith("e_score_correction_bias"):
            p.copy_(0.1 * torch.randn(p.shape))
        else:
            p.copy_(torch.randn(p.shape) / math.sqrt(p.shape[-1]))
    return m.eval()


def t_models():
    cfgs = [tiny_cfg("llama", rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                            "high_freq_factor": 4.0, "original_max_position_embeddings": 16}),
            tiny_cfg("qwen2", tie_word_embeddings=True),
            tiny_cfg("deepseek_v2"),
            tiny_cfg("deepseek_v2", q_lora_rank=12, topk_method="group_limited_greedy", n_group=4,
                     topk_group=2, routed_scaling_factor=2.0),
            tiny_cfg("deepseek_v3", q_lora_rank=12, scoring_func="sigmoid", topk_method="noaux_tc",
                     n_group=4, topk_group=2, norm_topk_prob=True, routed_scaling_factor=2.5)]
    ids = torch.randint(0, 97, (1, 40))
    for cfg in cfgs:
        m = random_model(cfg)
        full = m(ids)[0]
        if m.deepseek:
            m.set_mla_mode("absorbed")
            ab = m(ids)[0]
            m.set_mla_mode("naive")
            check(torch.allclose(full, ab, atol=1e-10, rtol=0),
                  "%s: MLA absorbed (latent-only attention) == naive (expanded K/V)" % cfg["model_type"])
        pre = m(ids[:, :25])[0]
        check(torch.allclose(full[:25], pre, atol=1e-10),
              "%s: causal: logits of a prefix equal the first rows" % cfg["model_type"])
        m32 = random_model(cfg).float()
        l32 = m32(ids)[0].double()
        err = (l32 - full).abs().max().item()
        check(err < 1e-3 * (1 + full.abs().max().item()),
              "%s: float32 within %.1e of float64" % (cfg["model_type"], err))
        if cfg["model_type"] == "deepseek_v2" and cfg.get("q_lora_rank") is None:
            ppl, n, nw, nll = ref.perplexity(m, ids[0].tolist(), 16)
            want = 0.0
            for c in range(2):
                w = ids[:, c * 16:(c + 1) * 16]
                lp = m(w)[0].log_softmax(-1)
                want -= sum(lp[j, w[0, j + 1]].item() for j in range(8, 15))
            check(n == 14 and nw == 2 and abs(nll - want) < 1e-9 * abs(want)
                  and abs(ppl - math.exp(want / 14)) < 1e-9 * ppl,
                  "perplexity: 2 windows of 16, tokens 9..15 of each scored")


def t_safetensors(tmp):
    import json
    vals = np.array([1.0, -2.5, 3.140625, 0.0], np.float32)
    bf = (vals.view(np.uint32) >> 16).astype("<u2").tobytes()
    hdr = json.dumps({"a": {"dtype": "BF16", "shape": [2, 2], "data_offsets": [0, 8]}}).encode()
    p = os.path.join(tmp, "t.safetensors")
    with open(p, "wb") as f:
        f.write(len(hdr).to_bytes(8, "little") + hdr + bf)
    check(np.array_equal(ref.read_safetensors(p)["a"].ravel(), vals), "safetensors BF16 read")
    with open(p, "wb") as f:
        f.write(len(hdr).to_bytes(8, "little") + hdr + bf + b"x")
    try:
        ref.read_safetensors(p)
        check(False, "safetensors trailing byte rejected")
    except ValueError:
        check(True, "safetensors trailing byte rejected")


def main():
    import tempfile
    t_yarn_constants()
    t_rope()
    t_llama3()
    t_gate()
    t_quant()
    t_models()
    with tempfile.TemporaryDirectory() as d:
        t_safetensors(d)
    print("1..%d" % _n)
    print("%d passed, %d failed" % (_n - _failed, _failed))
    return 1 if _failed else 0


if __name__ == "__main__":
    sys.exit(main())
