#!/usr/bin/python3
"""mkmodel.py - a model directory the loader accepts, for ds-tune's tests.

Usage: tests/cli/mkmodel.py DIR ARCH N_LAYER BIN_BYTES

ARCH is llama or deepseek2 (MLA, every layer dense).  model.meta lists the
architecture's full tensor set as ds-model(5) names and shapes it (f16
matrices, f32 vectors); model.bin is a sparse file of BIN_BYTES (at least
the tensors' end): ds-tune reads only its size.  Tensor data and CRCs are
not real (no test here runs the model).  Until ds-convert and
scripts/gen-fixture.py are on main, this is how ds-tune's tests get one.
"""
import json
import os
import sys

VOCAB, EMBD, HEADS, FF = 1000, 256, 4, 512


def hparams(arch, n_layer):
    mla = arch == "deepseek2"
    scaling = {"type": "none", "factor": 0.0, "original_ctx": 0,
               "beta_fast": 0.0, "beta_slow": 0.0, "mscale": 0.0,
               "mscale_all_dim": 0.0, "low_freq_factor": 0.0,
               "high_freq_factor": 0.0}
    return {
        "n_vocab": VOCAB, "n_embd": EMBD, "n_layer": n_layer,
        "n_head": HEADS, "n_head_kv": HEADS if mla else 2,
        "head_dim": 192 if mla else EMBD // HEADS, "n_ff": FF,
        "n_ctx_train": 163840 if mla else 16384,
        "norm_eps": 1e-6, "rope_theta": 10000.0,
        "rope_style": "interleaved" if mla else "neox",
        "rope_scaling": scaling, "tie_embeddings": 0, "qkv_bias": 0,
        "q_lora_rank": 0, "kv_lora_rank": 512 if mla else 0,
        "qk_nope_head_dim": 128 if mla else 0,
        "qk_rope_head_dim": 64 if mla else 0,
        "v_head_dim": 128 if mla else 0,
        "n_expert": 4 if mla else 0, "n_expert_used": 2 if mla else 0,
        "n_expert_shared": 1 if mla else 0, "n_ff_exp": 64 if mla else 0,
        "first_k_dense": n_layer if mla else 0,
        "moe_layer_freq": 1 if mla else 0,
        "expert_scoring": "softmax" if mla else "none",
        "topk_method": "greedy" if mla else "none",
        "n_group": 1 if mla else 0, "topk_group": 1 if mla else 0,
        "norm_topk_prob": 0, "routed_scaling_factor": 1.0 if mla else 0.0,
        "bos_token_id": 0, "eos_token_id": 1, "eos_token_ids": [1],
    }


def tensors(arch, hp):
    """(name, shape) in file order, vectors 1-D."""
    e = hp["n_embd"]
    out = [("token_embd", [hp["n_vocab"], e])]
    for l in range(hp["n_layer"]):
        b = "blk.%d." % l
        out.append((b + "attn_norm", [e]))
        if arch == "deepseek2":
            qk = hp["qk_nope_head_dim"] + hp["qk_rope_head_dim"]
            r = hp["kv_lora_rank"]
            out += [(b + "attn_q", [hp["n_head"] * qk, e]),
                    (b + "attn_kv_a", [r + hp["qk_rope_head_dim"], e]),
                    (b + "attn_kv_a_norm", [r]),
                    (b + "attn_kv_b", [hp["n_head"] * (hp["qk_nope_head_dim"]
                                                      + hp["v_head_dim"]), r]),
                    (b + "attn_output", [e, hp["n_head"] * hp["v_head_dim"]])]
        else:
            d = hp["head_dim"]
            out += [(b + "attn_q", [hp["n_head"] * d, e]),
                    (b + "attn_k", [hp["n_head_kv"] * d, e]),
                    (b + "attn_v", [hp["n_head_kv"] * d, e]),
                    (b + "attn_output", [e, hp["n_head"] * d])]
        out += [(b + "ffn_norm", [e]), (b + "ffn_gate", [hp["n_ff"], e]),
                (b + "ffn_up", [hp["n_ff"], e]), (b + "ffn_down", [e, hp["n_ff"]])]
    return out + [("output_norm", [e]), ("output", [hp["n_vocab"], e])]


def main():
    d, arch, n_layer, size = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    hp = hparams(arch, n_layer)
    table, off = [], 4096
    for name, shape in tensors(arch, hp):
        n = 1
        for s in shape:
            n *= s
        ty, nbytes = ("f32", 4 * n) if len(shape) == 1 else ("f16", 2 * n)
        table.append({"name": name, "type": ty, "shape": shape, "offset": off,
                      "size": nbytes, "crc32": "00000000"})
        off = (off + nbytes + 4095) // 4096 * 4096
    if size < off:
        sys.exit("mkmodel.py: BIN_BYTES %d is less than the tensors' %d" % (size, off))
    os.makedirs(d, exist_ok=True)
    meta = {"format": "ds-model", "version": 2, "arch": arch, "hparams": hp,
            "quant": {"source": "none", "bits": 16, "group_size": 0, "type": "f16"},
            "tensors": table}
    with open(os.path.join(d, "model.meta"), "w") as f:
        json.dump(meta, f, indent=1)
    with open(os.path.join(d, "model.bin"), "wb") as f:
        f.truncate(size)


if __name__ == "__main__":
    main()
