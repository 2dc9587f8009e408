#!/usr/bin/python3
"""gen-sp.py - SentencePiece models and their golden encodings.

Trains small BPE and Unigram models with Debian's python3-sentencepiece
(0.1.97) on Debian's own text (/usr/share/common-licenses, a few man pages,
the hand-written part of the corpus), into testdata/tok/sp/NAME.model, then
encodes every text of testdata/tok/corpus.jsonl with SentencePiece itself:
testdata/tok/sp-NAME.jsonl holds {"ids": [...], "decoded": "..."} per text
(encode(text) and decode(ids)).

Usage: scripts/ref/gen-sp.py   (from anywhere; takes about a minute)
"""
import glob
import gzip
import json
import os
import random
import sys

import sentencepiece as spm

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
TOK = os.path.join(ROOT, "testdata", "tok")

# name -> trainer options (beyond the common ones below)
MODELS = {
    "bpe": dict(model_type="bpe"),
    "bpe-bf": dict(model_type="bpe", byte_fallback=True),
    "bpe-identity": dict(model_type="bpe", normalization_rule_name="identity",
                         remove_extra_whitespaces=False),
    "bpe-user": dict(model_type="bpe", user_defined_symbols=["<|user|>", "<think>", "foo"],
                     control_symbols=["<ctl>"]),
    "uni": dict(model_type="unigram"),
    "uni-bf": dict(model_type="unigram", byte_fallback=True),
    "uni-identity": dict(model_type="unigram", normalization_rule_name="identity",
                         add_dummy_prefix=False, split_digits=True,
                         user_defined_symbols=["<|user|>", "http"]),
    "uni-lowcov": dict(model_type="unigram", character_coverage=0.98),
}


def training_text(corpus):
    parts = []
    for p in sorted(glob.glob("/usr/share/common-licenses/*")):
        if os.path.isfile(p):
            with open(p, encoding="utf-8", errors="replace") as f:
                parts.append(f.read())
    for page in ("bash.1", "ls.1", "tar.1", "grep.1", "sed.1"):
        try:
            with gzip.open(f"/usr/share/man/man1/{page}.gz", "rt", encoding="utf-8",
                           errors="replace") as f:
                parts.append(f.read())
        except OSError:
            pass
    parts += [c["text"] for c in corpus
              if not c["name"].startswith(("random-", "added-", "mix-"))]
    lines = []
    for p in parts:
        lines += [l for l in p.split("\n") if l.strip()]
    return "\n".join(lines) + "\n"


def write_bytes(models):
    """sp-bytes.jsonl: invalid UTF-8 through encode (SentencePiece takes
    bytes), and runs of byte pieces through decode, per model."""
    rng = random.Random(1202)
    inputs = [b"caf\xe9 au lait", b"\xff\xfe\x00abc", b"ok \xe4\xb8 cut",
              b"\xc3\x28 \xa0\xa1 \xf0\x28\x8c\xbc", b"\xed\xa0\x80 surrogate",
              b"\xf4\x90\x80\x80 big", b"\xe2\x82 \xe2\x82\xac euro"]
    inputs += [bytes(rng.randrange(256) for _ in range(rng.randint(1, 24)))
               for _ in range(40)]
    with open(os.path.join(TOK, "sp-bytes.jsonl"), "w", encoding="utf-8") as out:
        for name, sp in models:
            byte_ids = [sp.piece_to_id("<0x%02X>" % b) for b in range(256)]
            for raw in inputs:
                ids = sp.encode(raw)
                out.write(json.dumps({"model": name, "hex": raw.hex(), "ids": ids,
                                      "decoded": sp.decode(ids)}, ensure_ascii=False) + "\n")
            if sp.piece_to_id("<0x41>") == sp.unk_id():
                continue
            for _ in range(30):
                seq = [rng.choice(byte_ids) if rng.random() < 0.8 else
                       rng.randrange(3, sp.get_piece_size()) for _ in range(rng.randint(1, 12))]
                out.write(json.dumps({"model": name, "decode": seq, "decoded": sp.decode(seq)},
                                     ensure_ascii=False) + "\n")


def main():
    with open(os.path.join(TOK, "corpus.jsonl"), encoding="utf-8") as f:
        corpus = [json.loads(l) for l in f if l.strip()]
    os.makedirs(os.path.join(TOK, "sp"), exist_ok=True)
    bytes_cases = []
    # a fixed work directory: the models record their training paths
    tmp = os.path.join(ROOT, "testdata", "cache", "sp-train")
    os.makedirs(tmp, exist_ok=True)
    if True:
        train = os.path.join(tmp, "train.txt")
        with open(train, "w", encoding="utf-8") as f:
            f.write(training_text(corpus))
        for name, opts in MODELS.items():
            prefix = os.path.join(tmp, name)
            spm.SentencePieceTrainer.train(
                input=train, model_prefix=prefix, vocab_size=1500,
                num_threads=1, minloglevel=2, **opts)
            model = os.path.join(TOK, "sp", name + ".model")
            os.replace(prefix + ".model", model)
            sp = spm.SentencePieceProcessor(model_file=model)
            n = 0
            with open(os.path.join(TOK, f"sp-{name}.jsonl"), "w", encoding="utf-8") as out:
                for c in corpus:
                    ids = sp.encode(c["text"])
                    n += len(ids)
                    out.write(json.dumps({"ids": ids, "decoded": sp.decode(ids)},
                                         ensure_ascii=False) + "\n")
            print(f"gen-sp: {name}: {len(corpus)} texts, {n} tokens", file=sys.stderr)
            bytes_cases.append((name, sp))
        write_bytes(bytes_cases)


main()
