#!/bin/sh
# demo-ppl.sh - the demo model's perplexity table: ds-run --perplexity on
# testdata/demo/heldout.ids for each conversion, against the PyTorch
# reference's figures in testdata/demo/perplexity.json (same tokens, same
# windows: --ctx-size from that file, llama-perplexity's scheme).
# Usage: scripts/demo-ppl.sh [BIN_DIR]      (after `make`)
# Writes the conversions under build/demo/ppl-* (and the demo's FP8 copy,
# scripts/fp8-copy.py, under build/demo/fp8), prints a Markdown table.
set -eu
bin=${1:-bin}
d=testdata/demo
out=build/demo
ref=$d/perplexity.json

# A number from perplexity.json: jf KEY [SUBKEY]
jf() {
	python3 -c 'import json, sys
v = json.load(open(sys.argv[1]))
for k in sys.argv[2:]:
    v = v[k]
print(v)' "$ref" "$@"
}

ctx=$(jf ctx_size)
pt_bf16=$(jf bf16 perplexity)
pt_awq=$(jf awq_dequant perplexity)
mkdir -p "$out"

# row NAME SOURCE REF_NAME REF_PPL TARGET_PCT [ds-convert options]
row() {
	name=$1 src=$2 rname=$3 rppl=$4 tgt=$5
	shift 5
	opts="--model-path $src${*:+ $*}"
	"$bin/ds-convert" --model-path "$src" --output-dir "$out/ppl-$name" \
		--force --quiet "$@"
	r=$("$bin/ds-run" -m "$out/ppl-$name" --perplexity --ctx-size "$ctx" \
		< "$d/heldout.ids")
	set -- $r
	[ "$1" = perplexity ] || { echo "demo-ppl.sh: ds-run said: $r" >&2; exit 1; }
	awk -v n="$name" -v p="$2" -v r="$rppl" -v rn="$rname" -v t="$tgt" \
	    -v b="$pt_bf16" -v o="$opts" 'BEGIN {
		d = 100 * (p / r - 1); a = d < 0 ? -d : d
		printf "| %s | `%s` | %.4f | %.4f (%s) | %+.3f%% | %+.2f%% | %s%% %s |\n",
		    n, o, p, r, rn, d, 100 * (p / b - 1), t, a <= t ? "ok" : "MISSED"
	}'
}

echo "ds-run --perplexity --ctx-size $ctx on $d/heldout.ids ($(tr ' ' '\n' \
	< "$d/heldout.ids" | grep -c .) ids); PyTorch: $ref"
echo
echo "| conversion | ds-convert | ds-run | PyTorch | vs PyTorch | vs PyTorch BF16 | target |"
echo "| --- | --- | ---: | ---: | ---: | ---: | --- |"
row bf16 "$d" bf16 "$pt_bf16" 0.5
row q8 "$d" bf16 "$pt_bf16" 1 --quantize q8
row q4-awq "$d/awq" "AWQ dequantized" "$pt_awq" 10
row q4-rtn "$d" bf16 "$pt_bf16" 10 --quantize q4
# the demo as DeepSeek publishes its models: FP8 with 128x128 block scales
/usr/bin/python3 scripts/fp8-copy.py "$d" "$out/fp8"
row fp8-bf16 "$out/fp8" bf16 "$pt_bf16" 1 --quantize keep
row fp8-q8 "$out/fp8" bf16 "$pt_bf16" 1
row fp8-q4 "$out/fp8" bf16 "$pt_bf16" 10 --quantize q4
