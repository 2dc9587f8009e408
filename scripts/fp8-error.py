#!/usr/bin/python3
"""fp8-error.py FP8_CKPT MODEL... - how far each converted model's linear
weights are from the FP8 weights they came from: over every F8_E4M3
weight of the checkpoint (dequantized, code * scale in float32), the
relative RMS error ||W - W_fp8|| / ||W_fp8|| and the largest error in
units of its row's max |W_fp8| in the group; one Markdown row per model.
Reads the runtime layouts with scripts/ckpt.py (ds-model(5)).
"""
import glob
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ckpt  # noqa: E402


def fp8_weights(d):
    raw = {}
    for f in sorted(glob.glob(os.path.join(d, "*.safetensors"))):
        raw.update(ckpt.read_safetensors(f))
    blk = tuple(json.load(open(os.path.join(d, "config.json")))
                ["quantization_config"]["weight_block_size"])
    return {k: ckpt.fp8_dequant(v, raw[k + "_scale_inv"], blk)
            for k, v in raw.items() if k + "_scale_inv" in raw}


def main(src, models):
    ref = fp8_weights(src)
    print("| model | type | weights | rel. RMS error | max error / max abs (tensor) |")
    print("| --- | --- | ---: | ---: | ---: |")
    for m in models:
        meta, ts = ckpt.read_ds_model(m)
        cache, num, den, worst, n = {}, 0.0, 0.0, 0.0, 0
        for name, w in ref.items():
            ds, e = ckpt.ds_name(name[:-len(".weight")])
            if ds not in cache:
                cache[ds] = ckpt.ds_dequant(*ts[ds]).astype(np.float64)
            got = cache[ds] if e is None else cache[ds][e]
            d = got - w
            num += float((d * d).sum())
            den += float((w.astype(np.float64) ** 2).sum())
            worst = max(worst, float(np.abs(d).max() / np.abs(w).max()))
            n += w.size
        print("| %s | %s | %d | %.3f%% | %.4f |" % (os.path.basename(m.rstrip("/")),
              meta["quant"]["type"], n, 100 * np.sqrt(num / den), worst))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
