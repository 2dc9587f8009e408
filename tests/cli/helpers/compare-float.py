#!/usr/bin/python3
"""compare-float.py CKPT MODEL - every tensor of a model converted from a
float checkpoint against its source: exact when kept (bf16, f16, f32),
within the round-to-nearest bound when quantized to q8 / q4 (half a step
of max|w|/127, or of the 0-containing range / 15, plus what the fp16
scale's rounding adds).  Checks that the tensor set, names and shapes are
those ds-model(5) gives.  Prints "compared N tensors"; exits 1 otherwise.
"""
import glob
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "..", "..", "scripts"))
import ckpt  # noqa: E402


def bound(w, typ):
    """Per-element error bound of RTN type typ on rows of w [N, K]."""
    G = int(typ[3:])
    N, K = w.shape
    pad = -K % G
    x = np.pad(w, ((0, 0), (0, pad)), constant_values=np.nan).reshape(N, -1, G)
    if typ[1] == "8":
        step = np.nanmax(np.abs(x), -1) / 127
        slack = 128 / 2048
    else:
        step = (np.maximum(np.nanmax(x, -1), 0) - np.minimum(np.nanmin(x, -1), 0)) / 15
        slack = 16 / 2048
    return np.repeat(step * (0.5 + slack) + 1e-6, G, axis=1)[:, :K]


def main(src, model):
    cfg = json.load(open(os.path.join(src, "config.json")))
    hf = {}
    for f in sorted(glob.glob(os.path.join(src, "*.safetensors"))):
        hf.update(ckpt.read_safetensors(f))
    meta, tensors = ckpt.read_ds_model(model)
    seen, n, cache = set(), 0, {}
    hp = meta["hparams"]
    shared = {"mtp.embd": "token_embd" if hp.get("mtp_shares_embd") else None,
              "mtp.head": ("token_embd" if hp["tie_embeddings"] else "output")
              if hp.get("mtp_shares_head") else None}
    mtp_pre = "model.layers.%d." % cfg["num_hidden_layers"]
    for name, shape, kind in ckpt.hf_tensors(cfg):
        if name.startswith(mtp_pre) and not hp.get("n_mtp"):
            continue    # not carried (gen-fixture --mtp absent)
        tname = name + ".weight" if kind in ("linear", "mtp_linear", "mtp_head") else name
        ds, e = ckpt.ds_name(name)
        ds = shared.get(ds) or ds
        if ds not in tensors:
            print("%s: no %s in the model" % (name, ds))
            return 1
        seen.add(ds)
        entry, data = tensors[ds]
        if ds not in cache:
            cache[ds] = ckpt.ds_dequant(entry, data)
        got = cache[ds] if e is None else cache[ds][e]
        ref = np.asarray(hf[tname], np.float32)
        if got.shape != ref.shape:
            print("%s: shape %s, source %s" % (ds, got.shape, ref.shape))
            return 1
        typ = entry["type"]
        tol = bound(ref, typ) if typ[0] == "q" else 0
        if not (np.abs(got - ref) <= tol).all():
            print("%s (%s, %s[%s]): differs" % (name, typ, ds, e))
            return 1
        n += 1
    extra = set(tensors) - seen
    if extra:
        print("unexpected tensors in the model: %s" % sorted(extra)[:5])
        return 1
    print("compared %d tensors" % n)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
