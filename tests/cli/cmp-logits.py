#!/usr/bin/python3
"""cmp-logits.py - hold ds-run --logits-out to reference logits.

  cmp-logits.py OURS REF VOCAB TOL [FLIPS]

Both files are raw little-endian float32 [rows][VOCAB].  Passes (exit 0)
when the row counts match and
  - every row's largest |ours - ref| is at most TOL, except at most FLIPS
    rows (MoE models: a token whose router scores nearly tie may pick
    another expert, which moves its logits by more than the activation
    rounding does), and
  - the top-1 token agrees on every row within TOL where the reference's
    margin between its two best logits exceeds 2 * TOL (where it is
    smaller the rounding may legitimately swap them).
Prints one line: rows, max and mean error, top-1 agreement, rows over TOL.
"""
import sys

import numpy as np


def main(argv):
    ours, ref, vocab, tol = argv[1], argv[2], int(argv[3]), float(argv[4])
    flips = int(argv[5]) if len(argv) > 5 else 0
    a = np.fromfile(ours, dtype="<f4")
    b = np.fromfile(ref, dtype="<f4")
    if a.size != b.size or a.size % vocab:
        print("size mismatch: %d vs %d floats" % (a.size, b.size))
        return 1
    a = a.reshape(-1, vocab).astype(np.float64)
    b = b.reshape(-1, vocab).astype(np.float64)
    err = np.abs(a - b).max(axis=1)
    top = np.sort(b, axis=1)
    margin = top[:, -1] - top[:, -2]
    agree = a.argmax(axis=1) == b.argmax(axis=1)
    over = int((err > tol).sum())
    must = (margin > 2 * tol) & (err <= tol)
    bad_top1 = int((~agree & must).sum())
    print("rows %d max_abs %.4g mean_abs %.3g top1 %d/%d (%d of the %d with "
          "margin > 2 tol disagree) rows_over_tol %d (allowed %d)"
          % (len(err), err.max(), np.abs(a - b).mean(), agree.sum(), len(err),
             bad_top1, must.sum(), over, flips))
    if not np.isfinite(a).all():
        print("non-finite logits")
        return 1
    return 0 if over <= flips and bad_top1 == 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
