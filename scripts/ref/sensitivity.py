#!/usr/bin/python3
"""How much each golden case's logits move when one semantic detail is done
wrong (the mistakes an engine could make): proof that the golden files catch
them. Prints a Markdown table for testdata/golden/README.md.

  scripts/ref/sensitivity.py [testdata/golden]
"""
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import forward as ref  # noqa: E402

torch.set_grad_enabled(False)


def logits(m, ids):
    return m(torch.tensor(ids)[None])[0].numpy()


def variants(case):
    """(label, function(model) that breaks one detail) per case."""
    def no_mscale2(m):
        for a in m.modules():
            if isinstance(a, ref.MLA):
                a.scale = (a.dn + a.dr) ** -0.5

    def rope_plain(m):
        m.inv_freq, m.attn_factor = ref.rope_params(dict(m.cfg, rope_scaling=None),
                                                    len(m.inv_freq) * 2)
        m._rope = None

    def rope_other_style(m):
        m.deepseek = not m.deepseek
        m._rope = None

    def gate(attr, val):
        def f(m):
            for g in m.modules():
                if isinstance(g, ref.Gate):
                    setattr(g, attr, val)
        return f

    def all_groups(m):
        for g in m.modules():
            if isinstance(g, ref.Gate):
                g.topk_group = g.n_group

    def zero_bias(m):
        for g in m.modules():
            if isinstance(g, ref.Gate) and hasattr(g, "e_score_correction_bias"):
                g.e_score_correction_bias.zero_()

    v = [("rope half-split <-> interleaved swapped", rope_other_style)]
    cfg = case.cfg
    if cfg.get("rope_scaling"):
        v.append(("rope_scaling ignored", rope_plain))
    if cfg["model_type"].startswith("deepseek"):
        if cfg.get("rope_scaling"):
            v.append(("softmax scale without mscale^2", no_mscale2))
        if cfg.get("topk_method") in ("group_limited_greedy", "noaux_tc"):
            v.append(("groups ignored (plain top-k)", all_groups))
        if cfg.get("routed_scaling_factor", 1.0) != 1.0:
            v.append(("routed_scaling_factor ignored", gate("rsf", 1.0)))
        if cfg.get("topk_method") == "noaux_tc":
            v.append(("e_score_correction_bias ignored", zero_bias))
            v.append(("norm_topk_prob ignored", gate("norm", False)))
    return v


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "testdata/golden"
    print("| case | wrong detail | max abs logit change | top-1 changed |")
    print("| --- | --- | --- | --- |")
    for name in sorted(os.listdir(root)):
        d = os.path.join(root, name)
        if not os.path.isdir(d):
            continue
        ids = [int(t) for t in open(os.path.join(d, "prompt.ids")).read().split()]
        base = ref.build_model(d)
        good = logits(base, ids)
        for label, breaker in variants(base):
            m = ref.build_model(d)
            breaker(m)
            bad = logits(m, ids)
            flips = int((bad.argmax(-1) != good.argmax(-1)).sum())
            print("| %s | %s | %.3g | %d of %d |" % (name, label, np.abs(bad - good).max(),
                                                     flips, len(ids)))


if __name__ == "__main__":
    main()
