#!/usr/bin/python3
"""gen-fixture.py - write a small random Hugging Face checkpoint.

  gen-fixture.py --arch llama|qwen2|deepseek_v2|deepseek_v3 --out DIR
                 [--quant none|awq|gptq|fp8] [--dtype bf16|f16|f32] [--seed N]
                 [--block R,C] [--dequant] [--mtp shared|own|absent|none]
                 [--shards N] [--group-size 32|64|128|-1]
                 [--bits 4|8] [--sym|--asym] [--desc-act] [--format gptq|gptq_v2]
                 [--qconfig config|quantize_config.json|quant_config.json]
                 [--not-convert SUBSTR]... [--q-lora-rank N|null]
                 [--topk-method greedy|group_limited_greedy]
                 [--rope-scaling default|none|yarn|llama3|linear] [--tie|--no-tie]
                 [--layers N] [--hidden N] [--ff N] [--moe-ff N] [--experts N]
                 [--vocab N] [--heads N] [--kv-heads N] [--raw FILE] [--fast]

Writes config.json, the safetensors (one file or --shards N with an
index), tokenizer.json and tokenizer_config.json (a byte-level BPE).
Weights are random (fixed by --seed); AWQ and GPTQ modules are quantized
from them and packed exactly as AutoAWQ / AutoGPTQ pack (scripts/ckpt.py).
--raw FILE also writes the plain integers of every quantized module, as a
reader of the packed checkpoint recovers them, into a safetensors file:
MODULE.q U8 [N,K], MODULE.z U8 [N,G], MODULE.s F16 [N,G], MODULE.g_idx
I32 [K].  --fast draws the packed words directly (no quantization; for
the throughput benchmark's large checkpoints).

--quant fp8 writes DeepSeek-V3's FP8 format (docs/formats/fp8.md): every
linear weight of the decoder layers as F8_E4M3 codes with its F32
weight_scale_inv per --block (default 128,128) block; --dequant writes
the same fixture with those weights already dequantized to F32 (code *
scale in float32), the twin an FP8 conversion must match.
deepseek_v3's multi-token-prediction layer (layer num_hidden_layers):
--mtp shared (default) writes it whole with its embedding and head copies
of the main ones, as DeepSeek ships it; own gives them their own values;
absent leaves its tensors out (config.json still names it); none sets
num_nextn_predict_layers to 0.
"""

import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ckpt  # noqa: E402


def parse(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    a = p.add_argument
    a("--arch", required=True, choices=["llama", "qwen2", "deepseek_v2", "deepseek_v3"])
    a("--out", required=True)
    a("--quant", default="none", choices=["none", "awq", "gptq", "fp8"])
    a("--block", default="128,128")
    a("--dequant", action="store_true")
    a("--mtp", default="shared", choices=["shared", "own", "absent", "none"])
    a("--dtype", default="bf16", choices=["bf16", "f16", "f32"])
    a("--seed", type=int, default=1)
    a("--shards", type=int, default=1)
    a("--group-size", type=int, default=64, choices=[32, 64, 128, -1])
    a("--bits", type=int, default=4, choices=[4, 8])
    a("--sym", dest="sym", action="store_true", default=True)
    a("--asym", dest="sym", action="store_false")
    a("--desc-act", action="store_true")
    a("--format", default="gptq", choices=["gptq", "gptq_v2"])
    a("--qconfig", default="config",
      choices=["config", "quantize_config.json", "quant_config.json"])
    a("--not-convert", action="append", default=[])
    a("--q-lora-rank", default=None)
    a("--topk-method", default="greedy", choices=["greedy", "group_limited_greedy"])
    a("--rope-scaling", default="default",
      choices=["default", "none", "yarn", "llama3", "linear"])
    a("--tie", dest="tie", action="store_true", default=None)
    a("--no-tie", dest="tie", action="store_false")
    for k in ("layers", "hidden", "ff", "moe-ff", "experts", "vocab", "heads",
              "kv-heads"):
        a("--" + k, type=int, default=None)
    a("--raw", default=None)
    a("--fast", action="store_true")
    return p.parse_args(argv)


def make_config(o):
    kw = {}
    for k, name in (("layers", "layers"), ("hidden", "hidden"), ("ff", "ff"),
                    ("vocab", "vocab"), ("heads", "heads")):
        if getattr(o, k) is not None:
            kw[name] = getattr(o, k)
    rs = None if o.rope_scaling == "none" else o.rope_scaling
    if o.arch in ("llama", "qwen2"):
        if o.kv_heads is not None:
            kw["kv_heads"] = o.kv_heads
        if o.rope_scaling != "default":
            kw["rope_scaling"] = rs
        if o.tie is not None:
            kw["tie"] = o.tie
        return (ckpt.config_llama if o.arch == "llama" else ckpt.config_qwen2)(**kw)
    for k, name in (("moe_ff", "moe_ff"), ("experts", "experts")):
        if getattr(o, k) is not None:
            kw[name] = getattr(o, k)
    if o.rope_scaling != "default":
        kw["rope_scaling"] = rs
    if o.q_lora_rank is not None:
        kw["q_lora_rank"] = None if o.q_lora_rank == "null" else int(o.q_lora_rank)
    if o.arch == "deepseek_v2":
        return ckpt.config_deepseek_v2(topk_method=o.topk_method, **kw)
    return ckpt.config_deepseek_v3(nextn=0 if o.mtp == "none" else 1, **kw)


def block(o):
    return tuple(int(v) for v in o.block.split(","))


def qsettings(o):
    if o.quant == "fp8":
        return {"activation_scheme": "dynamic", "fmt": "e4m3",
                "quant_method": "fp8", "weight_block_size": list(block(o))}
    if o.quant == "awq":
        return {"quant_method": "awq", "bits": 4, "group_size": o.group_size,
                "zero_point": True, "version": "gemm",
                "modules_to_not_convert": o.not_convert or None}
    return {"quant_method": "gptq", "bits": o.bits, "group_size": o.group_size,
            "desc_act": o.desc_act, "sym": o.sym, "static_groups": False,
            "true_sequential": True, "damp_percent": 0.01,
            "checkpoint_format": o.format, "lm_head": False}


class Gen:
    """Random tensors in file order; quantized modules expand to their
    packed tensors.  Each entry's data is made when written."""

    def __init__(self, o, cfg):
        self.o, self.cfg = o, cfg
        self.fdt = {"bf16": "BF16", "f16": "F16", "f32": "F32"}[o.dtype]
        self.raw = []

    def rng(self, name):
        h = np.frombuffer(name.encode(), np.uint8).astype(np.uint64)
        return np.random.default_rng([self.o.seed, int((h * 1000003).sum() % (1 << 63))])

    def float_entry(self, name, shape, kind, seed_name=None):
        def make():
            r = self.rng(seed_name or name)
            if kind in ("norm", "mtp_norm") and len(shape) == 1:
                return (1 + 0.1 * r.standard_normal(shape)).astype(np.float32)
            if kind in ("bias", "bias_f32"):
                return (0.1 * r.standard_normal(shape)).astype(np.float32)
            return (r.standard_normal(shape) / np.sqrt(shape[-1])).astype(np.float32)
        dt = "F32" if kind == "bias_f32" else self.fdt
        return ckpt.Entry(name, dt, shape, make)

    def quantized(self, module):
        o = self.o
        return o.quant != "none" and ckpt.quantizable(module) and \
            not any(s in module for s in o.not_convert)

    def fp8_entries(self, module, shape):
        """module.weight (F8_E4M3) and module.weight_scale_inv (F32), or
        with --dequant module.weight as the F32 they stand for."""
        o, (N, K), blk = self.o, shape, block(self.o)
        R, C = -(-N // blk[0]), -(-K // blk[1])
        cache = {}

        def make():
            r = self.rng(module)
            if o.fast:
                c = r.integers(0, 0x7E, (N, K), dtype=np.uint8)
                c |= r.integers(0, 2, (N, K), dtype=np.uint8) << 7
                return c, (1e-4 + 1e-3 * r.random((R, C))).astype(np.float32)
            W = r.standard_normal((N, K)).astype(np.float32) / np.sqrt(K)
            return ckpt.fp8_quantize(W, blk)

        def codes():
            # made once; the scale, written next, takes it back
            cache["p"] = make()
            return cache["p"][0]
        name = module + ".weight"
        if o.dequant:
            return [ckpt.Entry(name, "F32", shape, lambda: ckpt.fp8_dequant(*make(), blk))]
        return [ckpt.Entry(name, "F8_E4M3", shape, codes),
                ckpt.Entry(module + ".weight_scale_inv", "F32", (R, C),
                           lambda: cache.pop("p")[1])]

    def qentries(self, module, shape):
        o, (N, K) = self.o, shape
        g = K if o.group_size == -1 else o.group_size
        G = -(-K // g)
        per = 32 // (4 if o.quant == "awq" else o.bits)
        cache = {"left": 3 if o.quant == "awq" else 4}

        def packed():
            # pack once, keep the arrays only until the last one is written
            if "p" not in cache:
                cache["p"] = self.pack(module, shape)
            p = cache["p"]
            cache["left"] -= 1
            if cache["left"] == 0:
                del cache["p"]
            return p
        if o.quant == "awq":
            specs = [("qweight", "I32", (K, N // 8)), ("qzeros", "I32", (G, N // 8)),
                     ("scales", "F16", (G, N))]
        else:
            specs = [("qweight", "I32", (K // per, N)), ("qzeros", "I32", (G, N // per)),
                     ("scales", "F16", (G, N)), ("g_idx", "I32", (K,))]
        return [ckpt.Entry("%s.%s" % (module, s), dt, shp,
                           (lambda i=i: packed()[i])) for i, (s, dt, shp) in enumerate(specs)]

    def pack(self, module, shape):
        o, (N, K) = self.o, shape
        r = self.rng(module)
        if o.fast:
            return self.fast_pack(r, shape)
        W = r.standard_normal((N, K)).astype(np.float32) / np.sqrt(K)
        if o.quant == "awq":
            q, z, s = ckpt.awq_quantize(W, o.group_size)
            packed = ckpt.awq_pack(q, z, s)
            g_idx = np.arange(K) // (K if o.group_size == -1 else o.group_size)
        else:
            order = r.permutation(K) if o.desc_act else None
            q, z, s, g_idx = ckpt.gptq_quantize(W, o.bits, o.group_size, o.sym, order)
            packed = ckpt.gptq_pack(q, z, s, g_idx, o.bits, o.format == "gptq_v2")
            # what a reader recovers (v1 asymmetric zeros of 0 spill)
            z = ckpt.gptq_zeros(packed[1], o.bits, o.format == "gptq_v2", N).T
        if o.raw:
            self.raw += [ckpt.Entry(module + ".q", "U8", q.shape, q),
                         ckpt.Entry(module + ".z", "U8", z.shape, z.astype(np.uint8)),
                         ckpt.Entry(module + ".s", "F16", s.shape, s),
                         ckpt.Entry(module + ".g_idx", "I32", (K,), g_idx.astype(np.int32))]
        return packed

    def fast_pack(self, r, shape):
        o, (N, K) = self.o, shape
        g = K if o.group_size == -1 else o.group_size
        G = K // g
        words = lambda a, b: r.integers(0, 1 << 32, (a, b), dtype=np.uint32).view(np.int32)
        s = (0.001 + 0.01 * r.random((G, N))).astype(np.float16)
        if o.quant == "awq":
            return words(K, N // 8), words(G, N // 8), s
        per = 32 // o.bits
        return words(K // per, N), words(G, N // per), s, (np.arange(K) // g).astype(np.int32)

    def mtp_seed(self, name, kind):
        """The MTP layer's embedding and head are copies of the main
        model's unless --mtp own."""
        if self.o.mtp == "own":
            return None
        if kind == "mtp_embed" or (kind == "mtp_head" and self.cfg.get("tie_word_embeddings")):
            return "model.embed_tokens.weight"
        return "lm_head.weight" if kind == "mtp_head" else None

    def entries(self):
        out = []
        for name, shape, kind in ckpt.hf_tensors(self.cfg):
            mtp = name.startswith("model.layers.%d." % self.cfg["num_hidden_layers"])
            if mtp and self.o.mtp == "absent":
                continue
            if kind == "linear" and self.quantized(name):
                out += self.fp8_entries(name, shape) if self.o.quant == "fp8" \
                    else self.qentries(name, shape)
            elif kind in ("linear", "mtp_linear", "mtp_head"):
                out.append(self.float_entry(name + ".weight", shape, kind,
                                            self.mtp_seed(name, kind)))
            else:
                out.append(self.float_entry(name, shape, kind, self.mtp_seed(name, kind)))
        return out


def main(argv=None):
    o = parse(argv)
    cfg = make_config(o)
    if o.quant == "fp8" and not o.dequant:
        cfg["quantization_config"] = qsettings(o)
    elif o.quant not in ("none", "fp8"):
        qs = qsettings(o)
        if o.qconfig == "config":
            cfg["quantization_config"] = qs
        cfg["torch_dtype"] = "float16"
    os.makedirs(o.out, exist_ok=True)
    gen = Gen(o, cfg)
    ckpt.write_checkpoint(o.out, gen.entries(), o.shards)
    if o.quant not in ("none", "fp8") and o.qconfig != "config":
        with open(os.path.join(o.out, o.qconfig), "w") as f:
            json.dump(qs, f, indent=2)
    with open(os.path.join(o.out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    tok, tcfg = ckpt.byte_level_tokenizer()
    with open(os.path.join(o.out, "tokenizer.json"), "w") as f:
        json.dump(tok, f, ensure_ascii=False)
    with open(os.path.join(o.out, "tokenizer_config.json"), "w") as f:
        json.dump(tcfg, f, ensure_ascii=False, indent=2)
    if o.raw:
        ckpt.write_safetensors(o.raw, gen.raw)


if __name__ == "__main__":
    main()
