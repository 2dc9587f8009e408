#!/usr/bin/python3
"""fp8-copy.py SRC DST [--block R,C] [--dequant] - an FP8 copy of a float
checkpoint, as DeepSeek publishes its models (docs/formats/fp8.md).

Every linear weight of the decoder layers (what scripts/ckpt.py's
quantizable() names, 2-D, in a float dtype) becomes F8_E4M3 codes with an
F32 weight_scale_inv per block (amax / 448, ckpt.fp8_quantize); every
other tensor and file is copied as it is, and config.json gains the
quantization_config DeepSeek's configs carry.  --dequant writes those
weights instead as the F32 the FP8 stands for (the twin a conversion of
the FP8 copy must match).  One safetensors file out; the source is read
whole (for the small checkpoints the tests and the quality table use).
"""
import argparse
import glob
import json
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ckpt  # noqa: E402


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("src")
    p.add_argument("dst")
    p.add_argument("--block", default="128,128")
    p.add_argument("--dequant", action="store_true")
    o = p.parse_args(argv)
    blk = tuple(int(v) for v in o.block.split(","))
    os.makedirs(o.dst, exist_ok=True)
    for f in os.listdir(o.src):
        s = os.path.join(o.src, f)
        if os.path.isfile(s) and ".safetensors" not in f and f != "config.json":
            shutil.copy(s, os.path.join(o.dst, f))
    tensors, dtypes = {}, {}
    for f in sorted(glob.glob(os.path.join(o.src, "*.safetensors"))):
        tensors.update(ckpt.read_safetensors(f))
        with open(f, "rb") as fh:
            n = int.from_bytes(fh.read(8), "little")
            dtypes.update({k: v["dtype"] for k, v in json.loads(fh.read(n)).items()
                           if k != "__metadata__"})
    out = []
    for name, a in tensors.items():
        module = name[:-len(".weight")] if name.endswith(".weight") else None
        if module and a.ndim == 2 and ckpt.quantizable(module) and \
                dtypes[name] in ("BF16", "F16", "F32"):
            codes, scale = ckpt.fp8_quantize(a, blk)
            if o.dequant:
                out.append(ckpt.Entry(name, "F32", a.shape, ckpt.fp8_dequant(codes, scale, blk)))
            else:
                out += [ckpt.Entry(name, "F8_E4M3", a.shape, codes),
                        ckpt.Entry(name + "_scale_inv", "F32", scale.shape, scale)]
        else:
            out.append(ckpt.Entry(name, dtypes[name], a.shape, a))
    ckpt.write_safetensors(os.path.join(o.dst, "model.safetensors"), out)
    with open(os.path.join(o.src, "config.json")) as f:
        cfg = json.load(f)
    if not o.dequant:
        cfg["quantization_config"] = {"activation_scheme": "dynamic", "fmt": "e4m3",
                                      "quant_method": "fp8",
                                      "weight_block_size": list(blk)}
    with open(os.path.join(o.dst, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)


if __name__ == "__main__":
    main()
