#!/usr/bin/python3
"""ckpt.py - small Hugging Face checkpoints for tests (numpy only).

A module other scripts import (scripts/gen-fixture.py, scripts/ref/,
tests).  Every function below is part of its stable interface; the facts
they encode come from docs/formats/safetensors.md, awq.md, gptq.md and
docs/deepseek.md.  Orientation: W is an nn.Linear weight [N, K] (out, in)
unless a name says otherwise.

safetensors
    bf16_encode(a) -> uint16          round to nearest even, NaN kept
    bf16_decode(u) -> float32
    Entry(name, dtype, shape, data)   data: ndarray or a callable making it
    write_safetensors(path, entries, metadata=None)
    write_checkpoint(dir, entries, shards=1)
                                      model.safetensors, or
                                      model-0000i-of-0000n.safetensors + index
    read_safetensors(path) -> {name: ndarray}  (BF16 widened to float32)

AWQ (AutoAWQ GEMM, zero_point true)
    AWQ_ORDER = [0, 2, 4, 6, 1, 3, 5, 7]
    awq_quantize(W, group) -> q [N,K], z [N,G], s [N,G] float16
    awq_pack(q, z, s) -> qweight I32 [K,N/8], qzeros I32 [G,N/8], scales F16 [G,N]
    awq_unpack(qweight, qzeros, scales) -> q, z, s   (inverse of awq_pack)
    awq_dequant(qweight, qzeros, scales, group) -> W [N,K] float32

GPTQ (AutoGPTQ QuantLinear.pack; "gptq" = v1 stores z-1, "gptq_v2" z)
    gptq_quantize(W, bits, group, sym, order=None) -> q, z, s, g_idx
                                      order: act-order processing order
    gptq_pack(q, z, s, g_idx, bits, v2) -> qweight [K*b/32,N], qzeros [G,N*b/32],
                                      scales [G,N], g_idx [K]
    gptq_zeros(qzeros, bits, v2, n) -> z [G, N] as a reader recovers it
    gptq_dequant(qweight, qzeros, scales, g_idx, bits, v2) -> W [N,K] float32

FP8 (DeepSeek-V3's block-scaled e4m3fn; docs/formats/fp8.md)
    fp8_encode(x) -> uint8            e4m3fn codes, round to nearest even,
                                      saturating at +-448, NaN -> 0x7f
    fp8_decode(u) -> float32          0x7f/0xff -> NaN
    fp8_quantize(W, block=(128, 128)) -> codes uint8 [N,K], scale_inv F32
                                      [ceil(N/bo), ceil(K/bi)]: amax/448
    fp8_dequant(codes, scale_inv, block) -> W [N,K] float32 (code * scale
                                      in float32, as the converter does)

architectures
    config_llama(...), config_qwen2(...), config_deepseek_v2(...),
    config_deepseek_v3(...)           dicts with the real config.json fields
    hf_tensors(cfg) -> [(name, shape, kind)]  kind: "linear" (a module,
                                      shape [N,K]), "norm", "bias", "embed",
                                      "router", "bias_f32"; the MTP layer's
                                      own: "mtp_embed", "mtp_norm",
                                      "mtp_linear" (eh_proj), "mtp_head"
    quantizable(module) -> bool       what AutoAWQ/GPTQ quantize
    ds_name(module or tensor) -> (ds_name, expert or None)   ds-model(5) names

ds-model(5) runtime files (the layouts, written from the man page)
    read_ds_model(dir) -> (meta, {name: (entry, bytes)})
    ds_dequant(entry, data) -> float32 array of entry["shape"]

tokenizer
    byte_level_tokenizer(bos, eos) -> (tokenizer.json dict, tokenizer_config dict)
"""

import json
import os

import numpy as np

# ----------------------------------------------------------------------------
# bf16 and safetensors


def bf16_encode(a):
    """float array -> uint16 bf16 bits, round to nearest even, NaN quiet."""
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    nan = (u & 0x7FFFFFFF) > 0x7F800000
    if nan.any():
        r = np.where(nan, ((u >> 16) | 0x40).astype(np.uint16), r)
    return r


def bf16_decode(u):
    return (np.asarray(u, dtype=np.uint32) << 16).view(np.float32)


_ST_NP = {
    "F64": "<f8", "F32": "<f4", "F16": "<f2", "BF16": "<u2", "I64": "<i8",
    "I32": "<i4", "I16": "<i2", "I8": "i1", "U8": "u1", "U16": "<u2",
    "U32": "<u4", "U64": "<u8", "BOOL": "u1", "F8_E4M3": "u1",
}


class Entry:
    """One tensor to write: dtype is the safetensors string; data is an
    array (converted to dtype's numpy type) or a callable returning one,
    called only when the tensor is written (so big checkpoints stream)."""

    def __init__(self, name, dtype, shape, data):
        self.name, self.dtype, self.shape, self.data = name, dtype, tuple(shape), data

    def nbytes(self):
        return int(np.prod(self.shape, dtype=np.int64)) * np.dtype(_ST_NP[self.dtype]).itemsize

    def array(self):
        a = self.data() if callable(self.data) else self.data
        if self.dtype == "BF16" and a.dtype != np.uint16:
            a = bf16_encode(a)
        a = np.ascontiguousarray(a, dtype=_ST_NP[self.dtype])
        if a.shape != self.shape:
            raise ValueError("%s: shape %s, declared %s" % (self.name, a.shape, self.shape))
        return a


def write_safetensors(path, entries, metadata=None):
    """Tensors back to back in the given order, header padded with spaces
    to a multiple of 8 (as the reference writer does)."""
    hdr, off = {"__metadata__": dict(metadata or {"format": "pt"})}, 0
    for e in entries:
        n = e.nbytes()
        hdr[e.name] = {"dtype": e.dtype, "shape": list(e.shape),
                       "data_offsets": [off, off + n]}
        off += n
    text = json.dumps(hdr, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(len(text).to_bytes(8, "little"))
        f.write(text)
        for e in entries:
            f.write(e.array().tobytes())


def write_checkpoint(d, entries, shards=1):
    """model.safetensors, or `shards` files of about equal size and
    model.safetensors.index.json (huggingface_hub's names)."""
    os.makedirs(d, exist_ok=True)
    if shards <= 1:
        write_safetensors(os.path.join(d, "model.safetensors"), entries)
        return
    total = sum(e.nbytes() for e in entries)
    groups, cur, acc = [], [], 0
    for e in entries:
        cur.append(e)
        acc += e.nbytes()
        if acc >= total * (len(groups) + 1) / shards and len(groups) < shards - 1:
            groups.append(cur)
            cur = []
    groups.append(cur)
    while len(groups) < shards:
        groups.append([])
    wm = {}
    for i, g in enumerate(groups):
        name = "model-%05d-of-%05d.safetensors" % (i + 1, shards)
        write_safetensors(os.path.join(d, name), g)
        for e in g:
            wm[e.name] = name
    with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": wm}, f, indent=2)


def read_safetensors(path):
    with open(path, "rb") as f:
        buf = f.read()
    n = int.from_bytes(buf[:8], "little")
    hdr = json.loads(buf[8:8 + n])
    out = {}
    for k, v in hdr.items():
        if k == "__metadata__":
            continue
        b, e = v["data_offsets"]
        a = np.frombuffer(buf, dtype=_ST_NP[v["dtype"]], count=(e - b) // np.dtype(
            _ST_NP[v["dtype"]]).itemsize, offset=8 + n + b).reshape(v["shape"])
        out[k] = bf16_decode(a) if v["dtype"] == "BF16" else a
    return out


# ----------------------------------------------------------------------------
# FP8 e4m3fn with 128x128 block scales (docs/formats/fp8.md)

FP8_MAX = 448.0


def fp8_decode(u):
    """e4m3fn codes -> float32: bias 7, subnormals m/8 * 2^-6, no
    infinities, S.1111.111 NaN."""
    u = np.asarray(u, np.uint8).astype(np.int32)
    e, m = (u >> 3) & 15, u & 7
    v = np.where(e == 0, np.ldexp(m.astype(np.float64), -9),
                 np.ldexp((8 + m).astype(np.float64), e - 10))
    v = np.where(u & 0x80, -v, v)
    v = np.where((u & 0x7F) == 0x7F, np.nan, v)
    return v.astype(np.float32)


def fp8_encode(x):
    """float -> e4m3fn codes: round to nearest even onto the grid,
    saturating at +-448 (what amax/448 block scaling can reach), NaN ->
    0x7f.  Each step is exact: scaling by powers of two, then np.rint."""
    x = np.asarray(x, np.float32)
    a = np.minimum(np.nan_to_num(np.abs(x).astype(np.float64)), FP8_MAX)
    e = np.floor(np.log2(np.where(a > 0, a, 1.0))).astype(np.int64)
    # log2 may land one off at exact powers of two: fix by comparison
    e = np.where(np.ldexp(1.0, e) > a, e - 1, e)
    e = np.where(np.ldexp(1.0, e + 1) <= a, e + 1, e)
    sub = a < 2.0 ** -6
    m_sub = np.rint(a * 512.0)                      # steps of 2^-9
    m_nor = np.rint(np.ldexp(a, -e) * 8.0) - 8.0    # 0..8
    e2 = np.where(m_nor == 8, e + 1, e)
    m_nor = np.where(m_nor == 8, 0, m_nor)
    code = np.where(sub, m_sub, ((e2 + 7) << 3) + m_nor)
    code = np.minimum(code, 0x7E).astype(np.uint8)  # 448 at most
    code = np.where(np.signbit(x), code | 0x80, code).astype(np.uint8)
    return np.where(np.isnan(x), np.uint8(0x7F), code).astype(np.uint8)


def _blocks(shape, block):
    (N, K), (bo, bi) = shape, block
    return -(-N // bo), -(-K // bi)


def fp8_quantize(W, block=(128, 128)):
    """Per block of bo x bi (the last ones partial): scale = amax/448 (1
    for an all-zero block), codes = fp8_encode(W / scale)."""
    W = np.asarray(W, np.float32)
    (bo, bi), (R, C) = block, _blocks(W.shape, block)
    scale = np.ones((R, C), np.float32)
    codes = np.empty(W.shape, np.uint8)
    for r in range(R):
        for c in range(C):
            x = W[r * bo:(r + 1) * bo, c * bi:(c + 1) * bi]
            amax = np.abs(x).max()
            if amax > 0:
                scale[r, c] = np.float32(amax) / np.float32(FP8_MAX)
            codes[r * bo:(r + 1) * bo, c * bi:(c + 1) * bi] = fp8_encode(x / scale[r, c])
    return codes, scale


def fp8_dequant(codes, scale, block=(128, 128)):
    """code value * its block's scale, one float32 multiply each."""
    bo, bi = block
    N, K = codes.shape
    s = np.repeat(np.repeat(np.asarray(scale, np.float32), bo, 0), bi, 1)[:N, :K]
    return fp8_decode(codes) * s


# ----------------------------------------------------------------------------
# AWQ GEMM (docs/formats/awq.md §1)

AWQ_ORDER = [0, 2, 4, 6, 1, 3, 5, 7]


def _groups(W, group):
    N, K = W.shape
    g = K if group == -1 else group
    if K % g:
        raise ValueError("K %d not a multiple of group %d" % (K, g))
    return g, K // g


def awq_quantize(W, group):
    """AutoAWQ's pseudo_quantize_tensor (zero_point true, 4 bits): per
    row and group s = max(max-min, 1e-5)/15, z = clamp(-round(min/s), 0,
    15), q = clamp(round(w/s) + z, 0, 15).  s is rounded to fp16 first,
    as stored, so q and z are exact for the stored scale."""
    N, K = W.shape
    g, G = _groups(W, group)
    x = np.asarray(W, np.float32).reshape(N, G, g)
    mx, mn = x.max(-1), x.min(-1)
    s = (np.maximum(mx - mn, 1e-5) / 15).astype(np.float16)
    sf = s.astype(np.float32)
    z = np.clip(-np.round(mn / sf), 0, 15)
    q = np.clip(np.round(x / sf[..., None]) + z[..., None], 0, 15)
    return q.reshape(N, K).astype(np.uint8), z.astype(np.uint8), s


def _pack8(v):
    """[R, C] of 4-bit values -> [R, C/8] uint32, value 8c+ORDER[i] in slot i."""
    R, C = v.shape
    v = v.reshape(R, C // 8, 8).astype(np.uint32)
    w = np.zeros((R, C // 8), np.uint32)
    for i, j in enumerate(AWQ_ORDER):
        w |= v[:, :, j] << np.uint32(4 * i)
    return w.view(np.int32)


def _unpack8(w):
    w = np.asarray(w).view(np.uint32)
    R, C8 = w.shape
    v = np.zeros((R, C8, 8), np.uint8)
    for i, j in enumerate(AWQ_ORDER):
        v[:, :, j] = (w >> np.uint32(4 * i)) & 15
    return v.reshape(R, C8 * 8)


def awq_pack(q, z, s):
    """WQLinear_GEMM.from_linear's layout: qweight [K, N/8] (rows are
    inputs), qzeros [G, N/8], scales [G, N] fp16."""
    return _pack8(q.T), _pack8(z.T), np.ascontiguousarray(s.T, np.float16)


def awq_unpack(qweight, qzeros, scales):
    return _unpack8(qweight).T.copy(), _unpack8(qzeros).T.copy(), scales.T.copy()


def awq_dequant(qweight, qzeros, scales, group):
    q, z, s = awq_unpack(qweight, qzeros, scales)
    N, K = q.shape
    g = K if group == -1 else group
    gi = np.arange(K) // g
    return s[:, gi].astype(np.float32) * (q.astype(np.float32) - z[:, gi])


# ----------------------------------------------------------------------------
# GPTQ (docs/formats/gptq.md)


def gptq_quantize(W, bits, group, sym, order=None):
    """Round-to-nearest with GPTQ's find_params grid (the Hessian error
    feedback changes which integers are chosen, not their format).
    Groups are formed along `order` (act-order: the processing order;
    None: 0..K-1), so g_idx[order[p]] = p // g.  Returns q [N,K] in the
    original channel order, z and fp16 s [N,G], g_idx [K]."""
    N, K = W.shape
    g = K if group == -1 else group
    G = (K + g - 1) // g
    maxq = 2 ** bits - 1
    order = np.arange(K) if order is None else np.asarray(order)
    g_idx = np.empty(K, np.int32)
    g_idx[order] = np.arange(K) // g
    q = np.empty((N, K), np.uint8)
    z = np.empty((N, G), np.uint8)
    s = np.empty((N, G), np.float16)
    W = np.asarray(W, np.float32)
    for j in range(G):
        ch = order[j * g:(j + 1) * g]
        x = W[:, ch]
        xmin = np.minimum(x.min(1), 0)
        xmax = np.maximum(x.max(1), 0)
        if sym:
            xmax = np.maximum(np.abs(xmin), xmax)
            xmin = np.where(xmin < 0, -xmax, xmin)
        both = (xmin == 0) & (xmax == 0)
        xmin, xmax = np.where(both, -1, xmin), np.where(both, 1, xmax)
        sc = ((xmax - xmin) / maxq).astype(np.float16)
        sf = sc.astype(np.float32)
        zz = np.full(N, (maxq + 1) // 2) if sym else np.round(-xmin / sf)
        q[:, ch] = np.clip(np.round(x / sf[:, None]) + zz[:, None], 0, maxq)
        z[:, j], s[:, j] = zz, sc
    return q, z, s, g_idx


def gptq_pack(q, z, s, g_idx, bits, v2):
    """QuantLinear.pack: qweight [K*b/32, N], field i of row r = input
    r*32/b + i; qzeros [G, N*b/32], field i = column; v1 ("gptq") stores
    z - 1 cast to uint32 before shifting, so a zero point of 0 spills ones
    into the higher fields of its word, exactly as AutoGPTQ does."""
    N, K = q.shape
    per = 32 // bits
    qt = q.T.astype(np.uint32).reshape(K // per, per, N)
    qweight = np.zeros((K // per, N), np.uint32)
    for i in range(per):
        qweight |= qt[:, i, :] << np.uint32(bits * i)
    zz = z.T.astype(np.int64) - (0 if v2 else 1)
    zz = (zz & 0xFFFFFFFF).astype(np.uint32)
    G = zz.shape[0]
    zt = zz.reshape(G, N // per, per)
    qzeros = np.zeros((G, N // per), np.uint32)
    for i in range(per):
        qzeros |= (zt[:, :, i] << np.uint32(bits * i)) & np.uint32(0xFFFFFFFF)
    return (qweight.view(np.int32), qzeros.view(np.int32),
            np.ascontiguousarray(s.T, np.float16), np.asarray(g_idx, np.int32))


def gptq_zeros(qzeros, bits, v2, n):
    """[G, N] zero points as a reader recovers them (v1: (field+1) & maxq)."""
    w = np.asarray(qzeros).view(np.uint32)
    per, maxq = 32 // bits, 2 ** bits - 1
    G = w.shape[0]
    f = np.zeros((G, w.shape[1], per), np.int64)
    for i in range(per):
        f[:, :, i] = (w >> np.uint32(bits * i)) & maxq
    f = f.reshape(G, n)
    return f if v2 else (f + 1) & maxq


def gptq_dequant(qweight, qzeros, scales, g_idx, bits, v2):
    w = np.asarray(qweight).view(np.uint32)
    per, maxq = 32 // bits, 2 ** bits - 1
    R, N = w.shape
    q = np.zeros((R, per, N), np.int64)
    for i in range(per):
        q[:, i, :] = (w >> np.uint32(bits * i)) & maxq
    q = q.reshape(R * per, N)                   # [K, N]
    z = gptq_zeros(qzeros, bits, v2, N)         # [G, N]
    g = np.asarray(g_idx)
    W = scales[g].astype(np.float32) * (q - z[g]).astype(np.float32)
    return W.T.copy()


# ----------------------------------------------------------------------------
# architectures: configs and tensor names

BOS, EOS = 256, 257


def _base(model_type, vocab, hidden, layers, heads, kv_heads, ff, max_pos, eps,
          theta, tie):
    return {
        "architectures": None, "model_type": model_type, "vocab_size": vocab,
        "hidden_size": hidden, "num_hidden_layers": layers,
        "num_attention_heads": heads, "num_key_value_heads": kv_heads,
        "intermediate_size": ff, "max_position_embeddings": max_pos,
        "rms_norm_eps": eps, "rope_theta": theta, "hidden_act": "silu",
        "tie_word_embeddings": tie, "bos_token_id": BOS, "eos_token_id": EOS,
        "initializer_range": 0.02, "use_cache": True, "torch_dtype": "bfloat16",
        "transformers_version": "4.46.0",
    }


def config_llama(vocab=384, hidden=128, layers=2, heads=4, kv_heads=2, ff=256,
                 max_pos=512, rope_scaling="llama3", tie=False):
    c = _base("llama", vocab, hidden, layers, heads, kv_heads, ff, max_pos, 1e-5,
              500000.0, tie)
    c.update(architectures=["LlamaForCausalLM"], attention_bias=False,
             attention_dropout=0.0, mlp_bias=False, pretraining_tp=1,
             head_dim=hidden // heads)
    c["rope_scaling"] = {"llama3": {"rope_type": "llama3", "factor": 8.0,
                                    "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                    "original_max_position_embeddings": 128},
                         "linear": {"type": "linear", "factor": 2.0},
                         None: None}[rope_scaling]
    return c


def config_qwen2(vocab=384, hidden=128, layers=2, heads=4, kv_heads=2, ff=256,
                 max_pos=512, rope_scaling=None, tie=True):
    c = _base("qwen2", vocab, hidden, layers, heads, kv_heads, ff, max_pos, 1e-6,
              10000.0, tie)
    c.update(architectures=["Qwen2ForCausalLM"], use_sliding_window=False,
             sliding_window=4096, max_window_layers=21, attention_dropout=0.0)
    c["rope_scaling"] = None if rope_scaling is None else {
        "type": "yarn", "factor": 4.0, "original_max_position_embeddings": 128}
    return c


def _yarn(mscale):
    return {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64,
            "beta_fast": 32, "beta_slow": 1, "mscale": mscale,
            "mscale_all_dim": mscale}


def config_deepseek_v2(vocab=384, hidden=128, layers=3, heads=4, q_lora_rank=None,
                       kv_lora_rank=128, qk_nope=32, qk_rope=32, v_head=32,
                       ff=256, moe_ff=128, experts=8, top_k=2, shared=1,
                       first_dense=1, topk_method="greedy", max_pos=256,
                       rope_scaling="yarn"):
    c = _base("deepseek_v2", vocab, hidden, layers, heads, heads, ff, max_pos, 1e-6,
              10000.0, False)
    groups = (1, 1) if topk_method == "greedy" else (4, 2)
    c.update(architectures=["DeepseekV2ForCausalLM"], q_lora_rank=q_lora_rank,
             kv_lora_rank=kv_lora_rank, qk_nope_head_dim=qk_nope,
             qk_rope_head_dim=qk_rope, v_head_dim=v_head,
             moe_intermediate_size=moe_ff, n_routed_experts=experts,
             num_experts_per_tok=top_k, n_shared_experts=shared,
             first_k_dense_replace=first_dense, moe_layer_freq=1,
             topk_method=topk_method, n_group=groups[0], topk_group=groups[1],
             scoring_func="softmax", norm_topk_prob=False,
             routed_scaling_factor=1.0, attention_bias=False,
             attention_dropout=0.0, aux_loss_alpha=0.001, seq_aux=True,
             ep_size=1, pretraining_tp=1,
             rope_scaling=_yarn(0.707) if rope_scaling == "yarn" else None)
    return c


def config_deepseek_v3(vocab=384, hidden=128, layers=3, heads=4, q_lora_rank=128,
                       kv_lora_rank=128, qk_nope=32, qk_rope=32, v_head=32,
                       ff=256, moe_ff=128, experts=8, top_k=2, shared=1,
                       first_dense=1, max_pos=256, rope_scaling="yarn",
                       nextn=1):
    c = config_deepseek_v2(vocab, hidden, layers, heads, q_lora_rank, kv_lora_rank,
                           qk_nope, qk_rope, v_head, ff, moe_ff, experts, top_k,
                           shared, first_dense, "greedy", max_pos, rope_scaling)
    c.update(model_type="deepseek_v3", architectures=["DeepseekV3ForCausalLM"],
             topk_method="noaux_tc", scoring_func="sigmoid", n_group=4,
             topk_group=2, norm_topk_prob=True, routed_scaling_factor=2.5,
             num_nextn_predict_layers=nextn, bos_token_id=BOS, eos_token_id=EOS)
    if rope_scaling == "yarn":
        c["rope_scaling"] = _yarn(1.0)
    return c


def _is_moe(cfg, L):
    e = cfg.get("n_routed_experts")
    return bool(e) and L >= cfg.get("first_k_dense_replace", 0) and \
        L % cfg.get("moe_layer_freq", 1) == 0


def hf_tensors(cfg):
    """Every tensor of the checkpoint in file order: (name, shape, kind);
    for kind "linear" name is the module (its weight is name + ".weight")."""
    H, V = cfg["hidden_size"], cfg["vocab_size"]
    out = [("model.embed_tokens.weight", (V, H), "embed")]
    ds = cfg["model_type"].startswith("deepseek")
    for L in range(cfg["num_hidden_layers"]):
        out += _layer(cfg, L, ds)
    out.append(("model.norm.weight", (H,), "norm"))
    if not cfg.get("tie_word_embeddings"):
        out.append(("lm_head", (V, H), "linear"))
    if ds:
        for L in range(cfg["num_hidden_layers"],
                       cfg["num_hidden_layers"] + cfg.get("num_nextn_predict_layers", 0)):
            out += mtp_tensors(cfg, L)
    return out


def mtp_tensors(cfg, L):
    """DeepSeek-V3's multi-token-prediction layer L (= num_hidden_layers):
    its own embedding and head (DeepSeek ships copies of the main ones),
    enorm, hnorm, eh_proj [H, 2H], a whole decoder layer, shared_head.norm."""
    H, V = cfg["hidden_size"], cfg["vocab_size"]
    p = "model.layers.%d." % L
    return ([(p + "embed_tokens.weight", (V, H), "mtp_embed"),
             (p + "enorm.weight", (H,), "mtp_norm"), (p + "hnorm.weight", (H,), "mtp_norm"),
             (p + "eh_proj", (H, 2 * H), "mtp_linear")] + _layer(cfg, L, True) +
            [(p + "shared_head.norm.weight", (H,), "mtp_norm"),
             (p + "shared_head.head", (V, H), "mtp_head")])


def _layer(cfg, L, ds):
    H = cfg["hidden_size"]
    nh = cfg["num_attention_heads"]
    p = "model.layers.%d." % L
    t = [(p + "input_layernorm.weight", (H,), "norm")]
    if ds:
        qk = cfg["qk_nope_head_dim"] + cfg["qk_rope_head_dim"]
        r, kv = cfg.get("q_lora_rank"), cfg["kv_lora_rank"]
        if r:
            t += [(p + "self_attn.q_a_proj", (r, H), "linear"),
                  (p + "self_attn.q_a_layernorm.weight", (r,), "norm"),
                  (p + "self_attn.q_b_proj", (nh * qk, r), "linear")]
        else:
            t.append((p + "self_attn.q_proj", (nh * qk, H), "linear"))
        t += [(p + "self_attn.kv_a_proj_with_mqa", (kv + cfg["qk_rope_head_dim"], H), "linear"),
              (p + "self_attn.kv_a_layernorm.weight", (kv,), "norm"),
              (p + "self_attn.kv_b_proj",
               (nh * (cfg["qk_nope_head_dim"] + cfg["v_head_dim"]), kv), "linear"),
              (p + "self_attn.o_proj", (H, nh * cfg["v_head_dim"]), "linear")]
    else:
        hd = cfg.get("head_dim", H // nh)
        kvh = cfg["num_key_value_heads"]
        t += [(p + "self_attn.q_proj", (nh * hd, H), "linear"),
              (p + "self_attn.k_proj", (kvh * hd, H), "linear"),
              (p + "self_attn.v_proj", (kvh * hd, H), "linear")]
        if cfg["model_type"] == "qwen2":
            t += [(p + "self_attn.q_proj.bias", (nh * hd,), "bias"),
                  (p + "self_attn.k_proj.bias", (kvh * hd,), "bias"),
                  (p + "self_attn.v_proj.bias", (kvh * hd,), "bias")]
        t.append((p + "self_attn.o_proj", (H, nh * hd), "linear"))
    t.append((p + "post_attention_layernorm.weight", (H,), "norm"))
    if ds and _is_moe(cfg, L):
        E, F = cfg["n_routed_experts"], cfg["moe_intermediate_size"]
        t.append((p + "mlp.gate.weight", (E, H), "router"))
        if cfg.get("topk_method") == "noaux_tc":
            t.append((p + "mlp.gate.e_score_correction_bias", (E,), "bias_f32"))
        for e in range(E):
            q = p + "mlp.experts.%d." % e
            t += [(q + "gate_proj", (F, H), "linear"), (q + "up_proj", (F, H), "linear"),
                  (q + "down_proj", (H, F), "linear")]
        S = F * (cfg.get("n_shared_experts") or 0)
        if S:
            q = p + "mlp.shared_experts."
            t += [(q + "gate_proj", (S, H), "linear"), (q + "up_proj", (S, H), "linear"),
                  (q + "down_proj", (H, S), "linear")]
    else:
        F = cfg["intermediate_size"]
        t += [(p + "mlp.gate_proj", (F, H), "linear"), (p + "mlp.up_proj", (F, H), "linear"),
              (p + "mlp.down_proj", (H, F), "linear")]
    return t


def quantizable(module):
    """The Linear modules inside decoder layers (what AutoAWQ and
    GPTQModel replace); embeddings, lm_head, norms, routers stay float."""
    return module.startswith("model.layers.") and not module.endswith("mlp.gate")


_DS_NAMES = {
    "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
    "self_attn.q_a_proj": "attn_q_a", "self_attn.q_b_proj": "attn_q_b",
    "self_attn.kv_a_proj_with_mqa": "attn_kv_a", "self_attn.kv_b_proj": "attn_kv_b",
    "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down",
    "mlp.shared_experts.gate_proj": "ffn_gate_shexp",
    "mlp.shared_experts.up_proj": "ffn_up_shexp",
    "mlp.shared_experts.down_proj": "ffn_down_shexp",
    "mlp.gate": "ffn_gate_inp",
}


_DS_VECTORS = {
    "input_layernorm.weight": "attn_norm",
    "post_attention_layernorm.weight": "ffn_norm",
    "self_attn.q_a_layernorm.weight": "attn_q_a_norm",
    "self_attn.kv_a_layernorm.weight": "attn_kv_a_norm",
    "self_attn.q_proj.bias": "attn_q.bias", "self_attn.k_proj.bias": "attn_k.bias",
    "self_attn.v_proj.bias": "attn_v.bias",
    "mlp.gate.e_score_correction_bias": "exp_probs_b",
}


_MTP_NAMES = {
    "embed_tokens": "mtp.embd", "enorm.weight": "mtp.enorm",
    "hnorm.weight": "mtp.hnorm", "eh_proj": "mtp.eh_proj",
    "shared_head.norm.weight": "mtp.head_norm", "shared_head.head": "mtp.head",
}


def ds_name(module):
    """HF module ("model.layers.3.mlp.experts.5.up_proj") or tensor
    ("model.layers.3.input_layernorm.weight") -> (ds name, expert or None)."""
    top = {"lm_head": "output", "model.embed_tokens": "token_embd",
           "model.norm.weight": "output_norm", "lm_head.weight": "output",
           "model.embed_tokens.weight": "token_embd"}
    if module in top:
        return top[module], None
    parts = module.split(".")
    L, rest = int(parts[2]), ".".join(parts[3:])
    for k in (rest, rest[:-7] if rest.endswith(".weight") else None):
        if k in _MTP_NAMES:
            return _MTP_NAMES[k], None
    if rest in _DS_VECTORS:
        return "blk.%d.%s" % (L, _DS_VECTORS[rest]), None
    if rest.endswith(".weight"):
        rest = rest[:-7]
    if rest.startswith("mlp.experts."):
        e, proj = int(parts[5]), parts[6]
        return "blk.%d.ffn_%s_exps" % (L, proj[:-5]), e
    return "blk.%d.%s" % (L, _DS_NAMES[rest]), None


# ----------------------------------------------------------------------------
# ds-model(5): reading the runtime layout back (written from the man page)


DS_MODEL_VERSION = 2   # the layouts below (libcore/format/modelfile.h)


def read_ds_model(d):
    with open(os.path.join(d, "model.meta")) as f:
        meta = json.load(f)
    if meta.get("version") != DS_MODEL_VERSION:
        raise ValueError("%s: model.meta version %s; this reader knows %d"
                         % (d, meta.get("version"), DS_MODEL_VERSION))
    with open(os.path.join(d, "model.bin"), "rb") as f:
        binary = f.read()
    return meta, {t["name"]: (t, binary[t["offset"]:t["offset"] + t["size"]])
                  for t in meta["tensors"]}


def _segments(is4, G, ng):
    """(offset, header bytes, first group, groups) of each segment of a q4/q8
    row-set: segments of 4 groups, each a header (scales f16 [n][16],
    then for q4 zeros u8 [n][16], padded to 64 bytes) and the n groups'
    weights (G/8 or G/4 chunks of 64 bytes each)."""
    gb = G * (8 if is4 else 16)
    off, out = 0, []
    for g0 in range(0, ng, 4):
        n = min(4, ng - g0)
        hdr = -(-n * (48 if is4 else 32) // 64) * 64
        out.append((off, hdr, g0, n))
        off += hdr + n * gb
    return out, off


def _rowset_bytes(typ, K):
    if typ == "bf16":
        Kp = -(-K // 32) * 32
        return Kp, 32 * Kp
    G = int(typ[3:])
    Kp = -(-K // G) * G
    return Kp, _segments(typ[1] == "4", G, Kp // G)[1]


def _dequant_matrix(typ, data, N, K):
    Kp, rsb = _rowset_bytes(typ, K)
    S = -(-N // 16)
    rs = np.frombuffer(data, np.uint8, count=S * rsb).reshape(S, rsb)
    if typ == "bf16":
        w = rs[:, :32 * Kp].view("<u2").reshape(S, Kp // 2, 16, 2)
        out = bf16_decode(w.transpose(0, 2, 1, 3).reshape(S * 16, Kp))
        return out[:N, :K]
    G = int(typ[3:])
    ng = Kp // G
    is4 = typ[1] == "4"
    gb = G * (8 if is4 else 16)
    segs, _ = _segments(is4, G, ng)
    wb, sc, zp = [], [], []
    for off, hdr, g0, n in segs:
        sc.append(rs[:, off:off + 32 * n].view("<f2").reshape(S, n, 16))
        if is4:
            zp.append(rs[:, off + 32 * n:off + 48 * n].reshape(S, n, 16))
        wb.append(rs[:, off + hdr:off + hdr + n * gb])
    wb = np.concatenate(wb, axis=1)                         # the groups in order
    s = np.concatenate(sc, axis=1).transpose(0, 2, 1).reshape(S * 16, ng)
    s = s.astype(np.float32)
    if is4:
        b = wb.reshape(S, Kp // 8, 16, 4)                   # set, chunk, lane, byte
        q = np.concatenate([b & 15, b >> 4], axis=3)        # k = 8c + j, 8c + 4 + j
        q = q.transpose(0, 2, 1, 3).reshape(S * 16, Kp).astype(np.float32)
        z = np.concatenate(zp, axis=1).transpose(0, 2, 1).reshape(S * 16, ng)
        z = z.astype(np.float32)
    else:
        u = wb.reshape(S, Kp // 4, 16, 4)
        q = u.transpose(0, 2, 1, 3).reshape(S * 16, Kp).astype(np.float32)
        z = np.full_like(s, 128)
    gi = np.arange(Kp) // G
    w = s[:, gi] * (q - z[:, gi])
    return w[:N, :K]


def ds_dequant(entry, data):
    """A tensor of a ds model as float32, per ds-model(5)'s layouts."""
    typ, shape = entry["type"], entry["shape"]
    if typ in ("f32", "f16", "i32"):
        dt = {"f32": "<f4", "f16": "<f2", "i32": "<i4"}[typ]
        return np.frombuffer(data, dt).reshape(shape).astype(np.float32)
    N, K = shape[-2], shape[-1]
    if len(shape) == 2:
        return _dequant_matrix(typ, data, N, K)
    per = len(data) // shape[0]
    return np.stack([_dequant_matrix(typ, data[e * per:(e + 1) * per], N, K)
                     for e in range(shape[0])])


# ----------------------------------------------------------------------------
# a minimal byte-level BPE tokenizer


def _bytes_to_unicode():
    """GPT-2's byte -> printable character map (ByteLevel pre-tokenizer)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


_MERGES = ["Ġ t", "h e", "Ġt he", "i n", "Ġ a", "e r", "o n", "Ġ s", "r e", "a t"]


def byte_level_tokenizer(bos=BOS, eos=EOS):
    """tokenizer.json and tokenizer_config.json for 256 byte tokens, a few
    merges after them (ids 258...) and BOS/EOS as special tokens."""
    b2u = _bytes_to_unicode()
    vocab = {b2u[b]: b for b in range(256)}
    nid = 258
    for m in _MERGES:
        vocab["".join(m.split())] = nid
        nid += 1
    special = [("<｜begin▁of▁sentence｜>", bos), ("<｜end▁of▁sentence｜>", eos)]
    # in the vocab too: Hugging Face gives an added token that is not in
    # the vocab the next id after the vocab (here 266), whatever its "id"
    for c, i in special:
        vocab[c] = i
    added = [{"id": i, "content": c, "single_word": False, "lstrip": False,
              "rstrip": False, "normalized": False, "special": True} for c, i in special]
    bl = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
          "use_regex": True}
    tok = {"version": "1.0", "truncation": None, "padding": None,
           "added_tokens": added, "normalizer": None, "pre_tokenizer": bl,
           "post_processor": None, "decoder": bl,
           "model": {"type": "BPE", "dropout": None, "unk_token": None,
                     "continuing_subword_prefix": None, "end_of_word_suffix": None,
                     "fuse_unk": False, "byte_fallback": False,
                     "ignore_merges": False, "vocab": vocab, "merges": _MERGES}}
    tcfg = {"add_bos_token": True, "add_eos_token": False,
            "bos_token": special[0][0], "eos_token": special[1][0],
            "model_max_length": 16384, "tokenizer_class": "LlamaTokenizerFast",
            "clean_up_tokenization_spaces": False,
            "chat_template": "{{ bos_token }}{% for m in messages %}"
                             "{% if m['role'] == 'user' %}<｜User｜>{{ m['content'] }}"
                             "{% else %}<｜Assistant｜>{{ m['content'] }}<｜end▁of▁sentence｜>"
                             "{% endif %}{% endfor %}"
                             "{% if add_generation_prompt %}<｜Assistant｜>{% endif %}"}
    return tok, tcfg
