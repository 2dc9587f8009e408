#!/usr/bin/python3
"""compare-quant.py RAW MODEL - every quantized matrix of a converted model
equals the plain dequantization s * (q - z) of the generator's integers
(q8: q = 0 of a symmetric group is -127 s; an asymmetric group is
re-quantized, so it is checked within half a step).

RAW is gen-fixture.py --raw's side file (MODULE.q/.z/.s/.g_idx); MODEL a
ds-convert output, read with scripts/ckpt.py's numpy reading of the
ds-model(5) layouts (independent of the C unpacking code).  Exact
equality is required: fp16 times a small integer is exact in float32.
Prints "compared N modules"; exits 1 on the first difference.
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "..", "..", "scripts"))
import ckpt  # noqa: E402


def main(raw_path, model):
    raw = ckpt.read_safetensors(raw_path)
    meta, tensors = ckpt.read_ds_model(model)
    mods = sorted({k.rsplit(".", 1)[0] for k in raw if k.endswith(".q")})
    cache = {}
    for m in mods:
        q, z, s, g = (raw[m + x] for x in (".q", ".z", ".s", ".g_idx"))
        s, q = s.astype(np.float32), q.astype(np.float32)
        zg = z[:, g].astype(np.float32)
        name, e = ckpt.ds_name(m)
        q8 = tensors[name][0]["type"].startswith("q8")
        if q8:  # ds-model(5): u in [1, 255], so q = 0 is stored as 1
            q = np.where(zg == 128, np.maximum(q, 1), q)
        ref = s[:, g] * (q - zg)
        # q8 re-quantizes asymmetric groups: within half a step of max|w|/127
        tol = np.zeros_like(ref)
        if q8:
            G = z.shape[1]
            amax = np.zeros_like(s)
            for j in range(G):
                amax[:, j] = np.abs(ref[:, g == j]).max(1)
            tol = np.where(zg == 128, 0, amax[:, g] / 127 * 0.5 * (1 + 1e-3))
        if name not in cache:
            cache[name] = ckpt.ds_dequant(*tensors[name])
        got = cache[name] if e is None else cache[name][e]
        if name + ".perm" in tensors:
            p = ckpt.ds_dequant(*tensors[name + ".perm"]).astype(np.int64)
            p = p if e is None else p[e]
            ref, tol = ref[:, p], tol[:, p]
        if got.shape != ref.shape or not (np.abs(got - ref) <= tol).all():
            bad = np.argwhere(np.abs(got - ref) > tol) if got.shape == ref.shape \
                else "shape"
            print("%s (%s[%s]): differs at %s" % (m, name, e, bad[:3]))
            return 1
    print("compared %d modules" % len(mods))
    return 0 if mods else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
