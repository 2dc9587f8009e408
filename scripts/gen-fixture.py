#!/usr/bin/python3
"""gen-fixture.py - write a small random Hugging Face checkpoint.

  gen-fixture.py --arch llama|qwen2|deepseek_v2|deepseek_v3 --out DIR
                 [--quant none|awq|gptq] [--dtype bf16|f16|f32] [--seed N]
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
    a("--quant", default="none", choices=["none", "awq", "gptq"])
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
    return ckpt.config_deepseek_v3(**kw)


def qsettings(o):
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

    def float_entry(self, name, shape, kind):
        def make():
            r = self.rng(name)
            if kind in ("norm", "mtp") and len(shape) == 1:
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

    def entries(self):
        out = []
        for name, shape, kind in ckpt.hf_tensors(self.cfg):
            if kind == "linear":
                if self.quantized(name):
                    out += self.qentries(name, shape)
                else:
                    out.append(self.float_entry(name + ".weight", shape, kind))
            else:
                out.append(self.float_entry(name, shape, kind))
        return out


def main(argv=None):
    o = parse(argv)
    cfg = make_config(o)
    if o.quant != "none":
        qs = qsettings(o)
        if o.qconfig == "config":
            cfg["quantization_config"] = qs
        cfg["torch_dtype"] = "float16"
    os.makedirs(o.out, exist_ok=True)
    gen = Gen(o, cfg)
    ckpt.write_checkpoint(o.out, gen.entries(), o.shards)
    if o.quant != "none" and o.qconfig != "config":
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
