#!/usr/bin/python3
"""Independent PyTorch reference forward pass for ds (llama, qwen2,
deepseek_v2, deepseek_v3), written from the published modeling semantics
(DeepSeek's remote modeling_deepseek.py, DeepSeek-V3 inference/model.py,
transformers' llama/qwen2/deepseek_v2/deepseek_v3) as summarised in
docs/deepseek.md, docs/formats/awq.md, gptq.md and safetensors.md.

Reads a Hugging Face checkpoint directory (config.json + *.safetensors, sharded
or not; BF16/F16/F32 or AWQ-GEMM / GPTQ INT4 dequantized to float) and writes
the logits of every prompt position as raw little-endian float32
[n_positions][n_vocab], the format of `ds-run --logits-out`.

  forward.py --model DIR (--ids "1 2 3" | --ids-file F) --out logits.f32
             [--dtype float64|float32] [--mla both|naive|absorbed]
  forward.py --model DIR --ids-file F --perplexity --ctx-size N [--json]

The module is also imported by scripts/train-demo.py: CausalLM's parameter
names are the Hugging Face checkpoint names, so state_dict() is a checkpoint.
"""

import argparse
import json
import math
import os
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

# ----------------------------------------------------------------------------
# safetensors (docs/formats/safetensors.md)

_NP_DTYPES = {
    "F64": np.float64, "F32": np.float32, "F16": np.float16,
    "I64": np.int64, "I32": np.int32, "I16": np.int16, "I8": np.int8,
    "U8": np.uint8, "U16": np.uint16, "U32": np.uint32, "U64": np.uint64,
    "BOOL": np.bool_,
}


def _no_dup_pairs(pairs):
    d = {}
    for k, v in pairs:
        if k in d:
            raise ValueError("duplicate key %r" % k)
        d[k] = v
    return d


def read_safetensors(path):
    """Return {name: numpy array}; BF16 is widened to float32 exactly."""
    with open(path, "rb") as f:
        buf = f.read()
    name = os.path.basename(path)
    if len(buf) < 8:
        raise ValueError("%s: file shorter than 8 bytes" % name)
    n = int.from_bytes(buf[:8], "little")
    if n == 0 or n > 100_000_000 or 8 + n > len(buf):
        raise ValueError("%s: header length %d invalid" % (name, n))
    hdr = json.loads(buf[8:8 + n].decode("utf-8"), object_pairs_hook=_no_dup_pairs)
    data = memoryview(buf)[8 + n:]
    ents = sorted(((k, v) for k, v in hdr.items() if k != "__metadata__"),
                  key=lambda kv: tuple(kv[1]["data_offsets"]))
    out, expect = {}, 0
    for k, v in ents:
        b, e = v["data_offsets"]
        dt, shape = v["dtype"], [int(s) for s in v["shape"]]
        if b != expect or e < b:
            raise ValueError("%s: tensor %s: data_offsets [%d,%d] out of order" % (name, k, b, e))
        expect = e
        count = int(np.prod(shape, dtype=np.int64)) if shape else 1
        if dt == "BF16":
            if e - b != 2 * count:
                raise ValueError("%s: tensor %s: size mismatch" % (name, k))
            u = np.frombuffer(data[b:e], dtype="<u2").astype(np.uint32) << 16
            arr = u.view(np.float32)
        elif dt in _NP_DTYPES:
            npdt = np.dtype(_NP_DTYPES[dt]).newbyteorder("<")
            if e - b != npdt.itemsize * count:
                raise ValueError("%s: tensor %s: size mismatch" % (name, k))
            arr = np.frombuffer(data[b:e], dtype=npdt)
        else:
            raise ValueError("%s: tensor %s: unsupported dtype %s" % (name, k, dt))
        out[k] = arr.reshape(shape).copy()
    if expect != len(data):
        raise ValueError("%s: %d trailing bytes after the last tensor" % (name, len(data) - expect))
    return out


def load_checkpoint(d):
    """Return (config dict, {name: numpy array}) merged over all shards."""
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    idx = os.path.join(d, "model.safetensors.index.json")
    if os.path.exists(idx):
        with open(idx) as f:
            wmap = json.load(f)["weight_map"]
        files = sorted(set(wmap.values()))
    else:
        wmap = None
        files = sorted(x for x in os.listdir(d) if x.endswith(".safetensors"))
    if not files:
        raise ValueError("%s: no .safetensors files" % d)
    tensors = {}
    for fn in files:
        for k, v in read_safetensors(os.path.join(d, fn)).items():
            if k in tensors:
                raise ValueError("%s: tensor %s in two shards" % (fn, k))
            if wmap is not None and wmap.get(k) != fn:
                raise ValueError("%s: tensor %s not mapped to this shard by the index" % (fn, k))
            tensors[k] = v
    if wmap is not None:
        missing = set(wmap) - set(tensors)
        if missing:
            raise ValueError("index names missing tensors: %s" % sorted(missing)[:5])
    return cfg, tensors


# ----------------------------------------------------------------------------
# dequantization (docs/formats/awq.md §1, gptq.md §1-4)

AWQ_ORDER = [0, 2, 4, 6, 1, 3, 5, 7]   # nibble slot i holds column 8c + AWQ_ORDER[i]


def _nibbles(words, bits):
    """int32 words [..., W] -> unsigned fields [..., W, 32/bits], field i = bits [b*i, b*i+b)."""
    u = words.astype(np.int64) & 0xFFFFFFFF
    per = 32 // bits
    sh = np.arange(per, dtype=np.int64) * bits
    return (u[..., None] >> sh) & ((1 << bits) - 1)


def awq_gemm_dequant(qweight, qzeros, scales, group_size):
    """AutoAWQ GEMM -> nn.Linear weight [N, K] (float64)."""
    K, n8 = qweight.shape
    N = n8 * 8
    g = K if group_size in (-1, None) else group_size
    inv = np.argsort(AWQ_ORDER)                     # column j lives in slot inv[j]
    q = _nibbles(qweight, 4)[:, :, inv].reshape(K, N)
    z = _nibbles(qzeros, 4)[:, :, inv].reshape(-1, N)
    s = scales.astype(np.float64)
    gi = np.arange(K) // g
    W = (q - z[gi]).astype(np.float64) * s[gi]      # [K, N] = W_lin^T
    return W.T.copy()


def gptq_dequant(qweight, qzeros, scales, g_idx, bits, group_size, v1):
    """GPTQ (v1: stored zero = z-1, v2: z) -> nn.Linear weight [N, K] (float64)."""
    per = 32 // bits
    N = qweight.shape[1]
    K = qweight.shape[0] * per
    maxq = (1 << bits) - 1
    q = _nibbles(qweight, bits)                     # [K/per, N, per]
    q = q.transpose(0, 2, 1).reshape(K, N)          # row r*per+i = field i of row r
    z = _nibbles(qzeros, bits).reshape(qzeros.shape[0], -1)[:, :N]
    if v1:
        z = (z + 1) & maxq
    if g_idx is None:
        g = K if group_size in (-1, None) else group_size
        g_idx = np.arange(K) // g
    g_idx = g_idx.astype(np.int64)
    s = scales.astype(np.float64)
    W = (q - z[g_idx]).astype(np.float64) * s[g_idx]
    return W.T.copy()


def quant_config(d, cfg):
    qc = cfg.get("quantization_config")
    if qc is None:
        for fn in ("quantize_config.json", "quant_config.json"):
            p = os.path.join(d, fn)
            if os.path.exists(p):
                with open(p) as f:
                    qc = json.load(f)
                break
    return qc


def dequantize_all(tensors, qc):
    """Replace every <prefix>.qweight group by a float <prefix>.weight."""
    prefixes = [k[:-len(".qweight")] for k in tensors if k.endswith(".qweight")]
    if not prefixes:
        return tensors
    if qc is None:
        raise ValueError("qweight tensors but no quantization_config")
    method = qc.get("quant_method", "gptq" if "desc_act" in qc else "awq")
    bits = qc.get("bits", qc.get("w_bit", 4))
    gs = qc.get("group_size", qc.get("q_group_size", -1))
    for p in prefixes:
        qw, qz, sc = tensors.pop(p + ".qweight"), tensors.pop(p + ".qzeros"), tensors.pop(p + ".scales")
        gidx = tensors.pop(p + ".g_idx", None)
        if method == "awq":
            ver = str(qc.get("version", "gemm")).lower()
            if ver != "gemm" or bits != 4:
                raise ValueError("AWQ version %s bits %s not supported" % (ver, bits))
            W = awq_gemm_dequant(qw, qz, sc, gs)
        elif method == "gptq":
            fmt = qc.get("checkpoint_format", qc.get("format", "gptq"))
            if fmt not in ("gptq", "gptq_v2"):
                raise ValueError("GPTQ checkpoint_format %s not supported" % fmt)
            W = gptq_dequant(qw, qz, sc, gidx, bits, gs, fmt == "gptq")
        else:
            raise ValueError("quant_method %s not supported" % method)
        tensors[p + ".weight"] = W
    return tensors


# ----------------------------------------------------------------------------
# rotary embeddings (docs/deepseek.md §4, §9)

def yarn_get_mscale(scale, m):
    return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0


def _yarn_corr_dim(rot, dim, base, L0):
    return dim * math.log(L0 / (rot * 2 * math.pi)) / (2 * math.log(base))


def rope_params(cfg, dim):
    """Return (inv_freq float64 [dim/2], attention_factor) for one model."""
    base = float(cfg.get("rope_theta", 10000.0))
    i = torch.arange(0, dim, 2, dtype=torch.float64)
    inv = 1.0 / base ** (i / dim)
    rs = cfg.get("rope_scaling")
    if not rs:
        return inv, 1.0
    kind = rs.get("rope_type", rs.get("type"))
    s = float(rs.get("factor", 1.0))
    if kind == "default":
        return inv, 1.0
    if kind == "linear":
        return inv / s, 1.0
    if kind == "llama3":
        L0 = float(rs["original_max_position_embeddings"])
        lff, hff = float(rs["low_freq_factor"]), float(rs["high_freq_factor"])
        wl = 2 * math.pi / inv
        smooth = (L0 / wl - lff) / (hff - lff)
        mid = (1 - smooth) * inv / s + smooth * inv
        out = torch.where(wl > L0 / lff, inv / s, torch.where(wl < L0 / hff, inv, mid))
        return out, 1.0
    if kind == "yarn":
        L0 = float(rs.get("original_max_position_embeddings", 4096))
        bf, bs = float(rs.get("beta_fast", 32)), float(rs.get("beta_slow", 1))
        low = max(math.floor(_yarn_corr_dim(bf, dim, base, L0)), 0)
        high = min(math.ceil(_yarn_corr_dim(bs, dim, base, L0)), dim - 1)
        if low == high:
            high += 0.001
        ramp = ((torch.arange(dim // 2, dtype=torch.float64) - low) / (high - low)).clamp(0, 1)
        out = (inv / s) * ramp + inv * (1 - ramp)
        # remote-code defaults: mscale 1, mscale_all_dim 0
        af = yarn_get_mscale(s, float(rs.get("mscale", 1))) / \
            yarn_get_mscale(s, float(rs.get("mscale_all_dim", 0)))
        return out, af
    raise ValueError("rope_scaling type %r not supported" % kind)


class Rope:
    """cos/sin tables [T, dim/2] for positions 0..T-1 (attention factor folded in)."""

    def __init__(self, inv_freq, factor, T, dtype, interleaved):
        t = torch.arange(T, dtype=torch.float64)
        ang = torch.outer(t, inv_freq)
        self.cos = (ang.cos() * factor).to(dtype)
        self.sin = (ang.sin() * factor).to(dtype)
        self.interleaved = interleaved

    def apply(self, x):
        """x [B, T, heads, dim] -> rotated. DeepSeek: adjacent pairs (x[2i], x[2i+1]);
        Llama/Qwen2: half split (x[i], x[i+dim/2])."""
        c = self.cos[None, :, None, :]
        s = self.sin[None, :, None, :]
        if self.interleaved:
            x0, x1 = x[..., 0::2], x[..., 1::2]
            return torch.stack((x0 * c - x1 * s, x0 * s + x1 * c), dim=-1).flatten(-2)
        h = x.shape[-1] // 2
        x0, x1 = x[..., :h], x[..., h:]
        return torch.cat((x0 * c - x1 * s, x1 * c + x0 * s), dim=-1)


# ----------------------------------------------------------------------------
# building blocks

class RMSNorm(nn.Module):
    def __init__(self, n, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.eps = eps

    def forward(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))


class MLP(nn.Module):
    """down(silu(gate(x)) * up(x))"""

    def __init__(self, H, I):
        super().__init__()
        self.gate_proj = nn.Linear(H, I, bias=False)
        self.up_proj = nn.Linear(H, I, bias=False)
        self.down_proj = nn.Linear(I, H, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Gate(nn.Module):
    """DeepSeek MoE router (docs/deepseek.md §7)."""

    def __init__(self, cfg, H):
        super().__init__()
        self.E = cfg["n_routed_experts"]
        self.k = cfg["num_experts_per_tok"]
        self.scoring = cfg.get("scoring_func", "softmax")
        self.method = cfg.get("topk_method", "greedy")
        self.n_group = cfg.get("n_group") or 1
        self.topk_group = cfg.get("topk_group") or 1
        self.norm = bool(cfg.get("norm_topk_prob", False))
        self.rsf = float(cfg.get("routed_scaling_factor", 1.0) or 1.0)
        self.v3 = cfg.get("model_type") == "deepseek_v3"
        self.weight = nn.Parameter(torch.empty(self.E, H))
        if self.method == "noaux_tc":
            self.e_score_correction_bias = nn.Parameter(torch.zeros(self.E), requires_grad=False)
        self.margins = None     # a list to collect routing margins into, for --stats

    def _margin(self, b, sel):
        """Per token: how close the selection came to changing, the smaller of
        the gap at the top-k boundary of the selection scores and, with groups,
        the gap at the topk_group boundary of the group scores."""
        T, G = b.shape[0], self.n_group
        v = sel.detach().sort(-1, descending=True).values
        m = v[:, self.k - 1] - v[:, self.k]
        if self.method in ("group_limited_greedy", "noaux_tc") and self.topk_group < G:
            if self.method == "noaux_tc":
                gs = b.view(T, G, -1).topk(2, dim=-1).values.sum(-1)
            else:
                gs = b.view(T, G, -1).max(-1).values
            g = gs.detach().sort(-1, descending=True).values
            m = torch.minimum(m, g[:, self.topk_group - 1] - g[:, self.topk_group])
        return m

    def forward(self, h):
        """h [T, H] -> (expert ids [T, k], weights [T, k], scores [T, E])."""
        logits = h @ self.weight.t()
        if self.scoring == "softmax":
            s = logits.softmax(-1)
        elif self.scoring == "sigmoid":
            s = logits.sigmoid()
        else:
            raise ValueError("scoring_func %s not supported" % self.scoring)
        T = s.shape[0]
        G = self.n_group
        if self.method in ("greedy", "gready"):
            sel = b = s
        elif self.method in ("group_limited_greedy", "noaux_tc"):
            if self.method == "noaux_tc":
                b = s + self.e_score_correction_bias
                gs = b.view(T, G, -1).topk(2, dim=-1).values.sum(-1)
            else:
                b = s
                gs = b.view(T, G, -1).max(-1).values
            keep = gs.topk(self.topk_group, dim=-1).indices
            gmask = torch.zeros(T, G, dtype=torch.bool).scatter_(1, keep, True)
            emask = gmask[:, :, None].expand(T, G, self.E // G).reshape(T, self.E)
            sel = b.masked_fill(~emask, float("-inf"))
        else:
            raise ValueError("topk_method %s not supported" % self.method)
        idx = sel.detach().topk(self.k, dim=-1).indices
        if self.margins is not None:
            self.margins.append(self._margin(b if self.method != "greedy" and self.method != "gready"
                                             else s, sel))
        w = s.gather(1, idx)
        if self.v3:
            if self.k > 1 and self.norm:
                w = w / (w.sum(-1, keepdim=True) + 1e-20)
            w = w * self.rsf
        elif self.k > 1 and self.norm:
            w = w / (w.sum(-1, keepdim=True) + 1e-20)
        else:
            w = w * self.rsf
        return idx, w, s


class MoE(nn.Module):
    def __init__(self, cfg, H):
        super().__init__()
        I = cfg["moe_intermediate_size"]
        self.experts = nn.ModuleList(MLP(H, I) for _ in range(cfg["n_routed_experts"]))
        self.gate = Gate(cfg, H)
        ns = cfg.get("n_shared_experts")
        self.shared_experts = MLP(H, I * ns) if ns else None
        self.last = None        # (ids, scores) of the last call, for a training aux loss

    def forward(self, x):
        shp = x.shape
        h = x.reshape(-1, shp[-1])
        idx, w, s = self.gate(h)
        self.last = (idx, s)
        y = torch.zeros_like(h)
        for e in idx.unique().tolist():
            tok, slot = (idx == e).nonzero(as_tuple=True)
            y = y.index_add(0, tok, (self.experts[e](h[tok]) * w[tok, slot, None]).to(y.dtype))
        if self.shared_experts is not None:
            y = y + self.shared_experts(h)
        return y.view(shp)


def _causal_softmax(scores):
    """scores [B, heads, T, T] -> probabilities with s > t masked."""
    T = scores.shape[-1]
    mask = torch.ones(T, T, dtype=torch.bool).triu(1)
    return scores.masked_fill(mask, float("-inf")).softmax(-1)


class MLA(nn.Module):
    """DeepSeek multi-head latent attention (docs/deepseek.md §5, §6)."""

    def __init__(self, cfg):
        super().__init__()
        H = cfg["hidden_size"]
        self.nh = cfg["num_attention_heads"]
        self.dn, self.dr = cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"]
        self.dv, self.r = cfg["v_head_dim"], cfg["kv_lora_rank"]
        self.rq = cfg.get("q_lora_rank")
        ab = bool(cfg.get("attention_bias", False))
        dqk = self.dn + self.dr
        if self.rq is None:
            self.q_proj = nn.Linear(H, self.nh * dqk, bias=False)
        else:
            self.q_a_proj = nn.Linear(H, self.rq, bias=ab)
            self.q_a_layernorm = RMSNorm(self.rq, 1e-6)
            self.q_b_proj = nn.Linear(self.rq, self.nh * dqk, bias=False)
        self.kv_a_proj_with_mqa = nn.Linear(H, self.r + self.dr, bias=ab)
        self.kv_a_layernorm = RMSNorm(self.r, 1e-6)
        self.kv_b_proj = nn.Linear(self.r, self.nh * (self.dn + self.dv), bias=False)
        self.o_proj = nn.Linear(self.nh * self.dv, H, bias=ab)
        self.scale = dqk ** -0.5
        rs = cfg.get("rope_scaling")
        if rs:
            mad = rs.get("mscale_all_dim", 0)
            if mad:
                m = yarn_get_mscale(float(rs["factor"]), float(mad))
                self.scale *= m * m
        self.mode = "naive"     # "naive", "absorbed" or "both" (assert they agree)

    def forward(self, x, rope):
        B, T, _ = x.shape
        if self.rq is None:
            q = self.q_proj(x)
        else:
            q = self.q_b_proj(self.q_a_layernorm(self.q_a_proj(x)))
        q = q.view(B, T, self.nh, self.dn + self.dr)
        q_nope, q_pe = q[..., :self.dn], rope.apply(q[..., self.dn:])
        a = self.kv_a_proj_with_mqa(x)
        c = self.kv_a_layernorm(a[..., :self.r])                  # [B, T, r]
        k_pe = rope.apply(a[..., None, self.r:])[:, :, 0]         # [B, T, dr], shared by heads
        pe = torch.einsum("bthd,bsd->bhts", q_pe, k_pe)
        if self.mode in ("naive", "both"):
            o = self._naive(q_nope, pe, c)
        if self.mode in ("absorbed", "both"):
            oa = self._absorbed(q_nope, pe, c)
            if self.mode == "both":
                err = (o - oa).abs().max().item()
                tol = 1e-9 if o.dtype == torch.float64 else 1e-4
                if err > tol * (1 + o.abs().max().item()):
                    raise AssertionError("MLA naive vs absorbed differ by %g" % err)
            else:
                o = oa
        return self.o_proj(o.reshape(B, T, self.nh * self.dv))

    def _naive(self, q_nope, pe, c):
        """Expand the latent into per-head K-nope and V, then ordinary MHA."""
        B, T = c.shape[:2]
        kv = self.kv_b_proj(c).view(B, T, self.nh, self.dn + self.dv)
        k_nope, v = kv[..., :self.dn], kv[..., self.dn:]
        sc = (torch.einsum("bthd,bshd->bhts", q_nope, k_nope) + pe) * self.scale
        p = _causal_softmax(sc)
        return torch.einsum("bhts,bshd->bthd", p, v)

    def _absorbed(self, q_nope, pe, c):
        """Fold kv_b_proj into the query (W_UK) and output (W_UV) sides: attention
        over the latent c only, as decode with the compressed cache does."""
        W = self.kv_b_proj.weight.view(self.nh, self.dn + self.dv, self.r)
        W_UK, W_UV = W[:, :self.dn], W[:, self.dn:]               # [nh, dn, r], [nh, dv, r]
        q_c = torch.einsum("bthd,hdr->bthr", q_nope, W_UK)
        sc = (torch.einsum("bthr,bsr->bhts", q_c, c) + pe) * self.scale
        p = _causal_softmax(sc)
        o_c = torch.einsum("bhts,bsr->bthr", p, c)
        return torch.einsum("bthr,hdr->bthd", o_c, W_UV)


class GQA(nn.Module):
    """Llama / Qwen2 grouped-query attention."""

    def __init__(self, cfg, qkv_bias, o_bias):
        super().__init__()
        H = cfg["hidden_size"]
        self.nh = cfg["num_attention_heads"]
        self.nkv = cfg.get("num_key_value_heads") or self.nh
        self.hd = cfg.get("head_dim") or H // self.nh
        self.q_proj = nn.Linear(H, self.nh * self.hd, bias=qkv_bias)
        self.k_proj = nn.Linear(H, self.nkv * self.hd, bias=qkv_bias)
        self.v_proj = nn.Linear(H, self.nkv * self.hd, bias=qkv_bias)
        self.o_proj = nn.Linear(self.nh * self.hd, H, bias=o_bias)
        self.mode = "naive"

    def forward(self, x, rope):
        B, T, _ = x.shape
        q = rope.apply(self.q_proj(x).view(B, T, self.nh, self.hd))
        k = rope.apply(self.k_proj(x).view(B, T, self.nkv, self.hd))
        v = self.v_proj(x).view(B, T, self.nkv, self.hd)
        rep = self.nh // self.nkv                  # query head h uses kv head h // rep
        k = k.repeat_interleave(rep, dim=2)
        v = v.repeat_interleave(rep, dim=2)
        sc = torch.einsum("bthd,bshd->bhts", q, k) * self.hd ** -0.5
        o = torch.einsum("bhts,bshd->bthd", _causal_softmax(sc), v)
        return self.o_proj(o.reshape(B, T, self.nh * self.hd))


def is_moe_layer(cfg, L):
    return (cfg.get("n_routed_experts") is not None
            and L >= cfg.get("first_k_dense_replace", 0)
            and L % cfg.get("moe_layer_freq", 1) == 0)


class Layer(nn.Module):
    def __init__(self, cfg, L):
        super().__init__()
        H, eps = cfg["hidden_size"], cfg.get("rms_norm_eps", 1e-6)
        mt = cfg["model_type"]
        self.input_layernorm = RMSNorm(H, eps)
        self.post_attention_layernorm = RMSNorm(H, eps)
        if mt in ("deepseek_v2", "deepseek_v3"):
            self.self_attn = MLA(cfg)
            self.mlp = MoE(cfg, H) if is_moe_layer(cfg, L) else MLP(H, cfg["intermediate_size"])
        else:
            if mt == "qwen2":
                qkv_bias, o_bias = True, False
            else:
                qkv_bias = o_bias = bool(cfg.get("attention_bias", False))
            self.self_attn = GQA(cfg, qkv_bias, o_bias)
            if cfg.get("mlp_bias"):
                raise ValueError("mlp_bias not supported")
            self.mlp = MLP(H, cfg["intermediate_size"])

    def forward(self, x, rope):
        x = x + self.self_attn(self.input_layernorm(x), rope)
        return x + self.mlp(self.post_attention_layernorm(x))


class Backbone(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        V, H = cfg["vocab_size"], cfg["hidden_size"]
        self.embed_tokens = nn.Embedding(V, H)
        self.layers = nn.ModuleList(Layer(cfg, L) for L in range(cfg["num_hidden_layers"]))
        self.norm = RMSNorm(H, cfg.get("rms_norm_eps", 1e-6))


SUPPORTED = ("llama", "qwen2", "deepseek_v2", "deepseek_v3")


class CausalLM(nn.Module):
    """The whole model; parameter names are the HF checkpoint's tensor names."""

    def __init__(self, cfg):
        super().__init__()
        mt = cfg.get("model_type")
        if mt not in SUPPORTED:
            raise ValueError("model_type %r not supported" % mt)
        self.cfg = cfg
        self.model = Backbone(cfg)
        self.tied = bool(cfg.get("tie_word_embeddings", False))
        if not self.tied:
            self.lm_head = nn.Linear(cfg["hidden_size"], cfg["vocab_size"], bias=False)
        self.deepseek = mt.startswith("deepseek")
        dim = cfg["qk_rope_head_dim"] if self.deepseek else \
            (cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"])
        self.inv_freq, self.attn_factor = rope_params(cfg, dim)
        self._rope = None

    def set_mla_mode(self, mode):
        for m in self.modules():
            if isinstance(m, MLA):
                m.mode = mode

    def rope(self, T, dtype):
        r = self._rope
        if r is None or r.cos.shape[0] < T or r.cos.dtype != dtype:
            r = self._rope = Rope(self.inv_freq, self.attn_factor, max(T, 1), dtype, self.deepseek)
        if r.cos.shape[0] == T:
            return r
        v = Rope.__new__(Rope)
        v.cos, v.sin, v.interleaved = r.cos[:T], r.sin[:T], r.interleaved
        return v

    def hidden(self, ids):
        """ids [B, T] (positions 0..T-1) -> final-normed hidden states [B, T, H]."""
        x = self.model.embed_tokens(ids)
        rope = self.rope(ids.shape[1], x.dtype)
        for layer in self.model.layers:
            x = layer(x, rope)
        return self.model.norm(x)

    def forward(self, ids):
        h = self.hidden(ids)
        if self.tied:
            return h @ self.model.embed_tokens.weight.t()
        return self.lm_head(h)


def build_model(d, dtype=torch.float64):
    """Load a checkpoint directory into a CausalLM in `dtype` (eval mode)."""
    cfg, tensors = load_checkpoint(d)
    tensors = dequantize_all(tensors, quant_config(d, cfg))
    m = CausalLM(cfg)
    n_layer = cfg["num_hidden_layers"]
    sd = {}
    for k, v in tensors.items():
        if k.startswith("model.layers."):
            if int(k.split(".")[2]) >= n_layer:     # V3 MTP layer: not used for decoding
                continue
        if k.endswith("rotary_emb.inv_freq"):
            continue
        sd[k] = torch.from_numpy(np.asarray(v, dtype=np.float64))
    if m.tied:
        sd.pop("lm_head.weight", None)
    own = m.state_dict()
    missing = sorted(set(own) - set(sd))
    extra = sorted(set(sd) - set(own))
    if missing or extra:
        raise ValueError("%s: missing tensors %s, unexpected tensors %s" % (d, missing[:6], extra[:6]))
    for k in own:
        if tuple(own[k].shape) != tuple(sd[k].shape):
            raise ValueError("%s: tensor %s: shape %s, expected %s"
                             % (d, k, list(sd[k].shape), list(own[k].shape)))
    m.load_state_dict(sd)
    return m.to(dtype).eval()


# ----------------------------------------------------------------------------
# perplexity (llama-perplexity's scheme)

def perplexity(model, ids, n_ctx, dtype=torch.float64):
    """Non-overlapping windows of n_ctx tokens, ids taken verbatim (no BOS
    inserted); in each window the tokens after the first half are scored, as
    llama.cpp's perplexity does: logits at j predict token j+1 for
    j = n_ctx/2 .. n_ctx-2. Returns (ppl, n_scored, n_windows, nll_sum)."""
    n_chunk = len(ids) // n_ctx
    if n_ctx < 4 or n_chunk < 1:
        raise ValueError("need at least one window of %d tokens (have %d)" % (n_ctx, len(ids)))
    first = n_ctx // 2
    nll, count = 0.0, 0
    with torch.no_grad():
        for c in range(n_chunk):
            w = torch.tensor(ids[c * n_ctx:(c + 1) * n_ctx], dtype=torch.long)[None]
            lp = model(w)[0].to(torch.float64).log_softmax(-1)
            tgt = w[0, first + 1:]
            nll -= lp[first:n_ctx - 1].gather(1, tgt[:, None]).sum().item()
            count += n_ctx - 1 - first
    return math.exp(nll / count), count, n_chunk, nll


# ----------------------------------------------------------------------------
# command line

def read_ids(args):
    if args.ids is not None:
        lines = [args.ids]
    else:
        with open(args.ids_file) as f:
            lines = f.read().split("\n")
        if lines and lines[-1] == "":
            lines.pop()
    return [[int(t) for t in ln.split()] for ln in lines]


def write_stats(args, seqs, outs):
    """Facts a tolerance can be judged by: logit range, the smallest gap
    between the best and second-best logit (positions closer than an engine's
    error may legitimately flip top-1), and how far a float32 run of this
    reference lands from float64."""
    m32 = build_model(args.model, torch.float32)
    m32.set_mla_mode("naive")
    d32 = 0.0
    for s, lg in zip((s for s in seqs if s), outs):
        l32 = m32(torch.tensor(s, dtype=torch.long)[None])[0].double().numpy()
        d32 = max(d32, float(np.abs(l32 - lg).max()))
    allg = np.concatenate(outs)
    gates = [g for g in m32.modules() if isinstance(g, Gate)]
    top2 = np.sort(allg, axis=-1)[:, -2:]
    st = {"positions": int(allg.shape[0]), "vocab": int(allg.shape[1]),
          "max_abs_logit": float(np.abs(allg).max()),
          "min_top1_margin": float((top2[:, 1] - top2[:, 0]).min()),
          "float32_vs_float64_max_abs": d32}
    if gates:
        m64 = build_model(args.model, torch.float64)
        rm = []
        for s in seqs:
            if not s:
                continue
            gs = [g for g in m64.modules() if isinstance(g, Gate)]
            for g in gs:
                g.margins = []
            m64(torch.tensor(s, dtype=torch.long)[None])
            rm += torch.stack([torch.cat(g.margins) for g in gs]).min(0).values.tolist()
        st["routing_margin_min"] = min(rm)
        st["routing_margin"] = [float("%.3g" % x) for x in rm]
    with open(args.stats, "w") as f:
        json.dump(st, f, indent=2)
        f.write("\n")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="HF checkpoint directory")
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--ids", help="prompt token ids, space separated")
    src.add_argument("--ids-file", help="file of id lines (one prompt per line)")
    ap.add_argument("--out", help="write float32 LE logits [n_positions][n_vocab] here")
    ap.add_argument("--dtype", choices=("float64", "float32"), default="float64")
    ap.add_argument("--mla", choices=("both", "naive", "absorbed"), default="both",
                    help="MLA form; 'both' runs both and asserts they agree (default)")
    ap.add_argument("--perplexity", action="store_true",
                    help="print perplexity over windows of --ctx-size of all ids")
    ap.add_argument("--ctx-size", type=int, default=0)
    ap.add_argument("--json", action="store_true", help="perplexity result as JSON")
    ap.add_argument("--top1", action="store_true", help="print the argmax id per position")
    ap.add_argument("--stats", help="write JSON facts about the logits (sizes, top-1 margins, "
                    "float32-vs-float64 difference) for a golden file's README")
    args = ap.parse_args(argv)
    dtype = getattr(torch, args.dtype)
    torch.set_grad_enabled(False)
    model = build_model(args.model, dtype)
    model.set_mla_mode(args.mla)
    seqs = read_ids(args)
    V = model.cfg["vocab_size"]
    for i, s in enumerate(seqs):
        for t in s:
            if not 0 <= t < V:
                ap.error("line %d: id %d >= vocab %d" % (i + 1, t, V))
    if args.perplexity:
        flat = [t for s in seqs for t in s]
        ppl, n, nw, nll = perplexity(model, flat, args.ctx_size, dtype)
        if args.json:
            print(json.dumps({"perplexity": ppl, "tokens": n, "windows": nw,
                              "ctx_size": args.ctx_size, "nll_sum": nll}))
        else:
            print("perplexity %.6f tokens %d windows %d ctx %d" % (ppl, n, nw, args.ctx_size))
        return 0
    if not args.out and not args.top1:
        ap.error("nothing to do: give --out and/or --top1")
    outs = []
    for s in seqs:
        if not s:
            continue
        lg = model(torch.tensor(s, dtype=torch.long)[None])[0]
        outs.append(lg.to(torch.float64).numpy())
        if args.top1:
            print(" ".join(str(int(x)) for x in lg.argmax(-1)))
    if args.stats:
        write_stats(args, seqs, outs)
    if args.out:
        arr = np.concatenate(outs).astype("<f4") if outs else np.zeros((0, V), "<f4")
        tmp = args.out + ".tmp"
        arr.tofile(tmp)
        os.replace(tmp, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
