#!/usr/bin/env python3
"""ajv-texts.py SCHEMA [TEXTS]: validate each text (one JSON string per line
of TEXTS, or stdin: the JSON encoding of each answer's text) against SCHEMA
with ajv (scripts/ref/ajv-check.js, npm ajv 8.17.1).  Prints "N valid" or
each failure; exit 1 when any text does not parse or validate, or no text
was given."""
import json
import os
import subprocess
import sys
import tempfile

schema = json.load(open(sys.argv[1]))
src = open(sys.argv[2]) if len(sys.argv) > 2 else sys.stdin
texts = [json.loads(line) for line in src if line.strip()]
if not texts:
    sys.exit("ajv-texts: no texts")
with tempfile.TemporaryDirectory() as d:
    inp, out = os.path.join(d, "in.json"), os.path.join(d, "out.json")
    json.dump([{"schema": schema, "texts": texts}], open(inp, "w"))
    subprocess.run(["node", "scripts/ref/ajv-check.js", "validate", inp, out],
                   check=True)
    res = json.load(open(out))[0]
bad = [(t, r["why"]) for t, r in zip(texts, res) if not r["ok"]]
for t, why in bad:
    print(f"invalid: {t!r}: {why}")
print(f"{len(texts) - len(bad)} valid of {len(texts)}")
sys.exit(1 if bad else 0)
