#!/bin/sh
# make-golden.sh - regenerate testdata/golden/: per case a tiny random
# checkpoint (scripts/gen-fixture.py), prompt ids, and the reference logits
# of every prompt position (scripts/ref/forward.py, float64).
# Usage: scripts/ref/make-golden.sh [OUTDIR]   (default testdata/golden)
# Needs scripts/deps.sh --ref (python3-torch). Deterministic: same files every run.
set -eu
cd "$(dirname "$0")/../.."
out=${1:-testdata/golden}
py=/usr/bin/python3
mkdir -p "$out"

"$py" scripts/ref/selftest.py >/dev/null || {
	echo "make-golden.sh: scripts/ref/selftest.py failed; not writing golden files" >&2
	exit 1
}

# Small shapes: hidden 64, 2 heads, kv_lora_rank 128, 8 experts of 32 (top 2
# + 1 shared), 2 or 3 layers (the first dense), vocab 384: each case < 1 MB.
DS="--hidden 64 --heads 2 --ff 128 --moe-ff 32"
LL="--hidden 64 --heads 4 --kv-heads 2 --ff 128"

# case  prompt-length  seed  gen-fixture flags  [@config_key=json_value: set in
# config.json after generating; the weights do not depend on it]
cases="
llama                 48 11 --arch llama $LL
qwen2                 40 12 --arch qwen2 $LL
qwen2-f16-untied      24 13 --arch qwen2 $LL --dtype f16 --no-tie
ds2-lite              80 21 --arch deepseek_v2 $DS --q-lora-rank null
ds2-qlora-grouped     72 22 --arch deepseek_v2 $DS --layers 2 --q-lora-rank 64 --topk-method group_limited_greedy @num_experts_per_tok=3 @routed_scaling_factor=2.0
ds2-norope-scaling    24 23 --arch deepseek_v2 $DS --layers 2 --q-lora-rank null --rope-scaling none
ds3                   80 31 --arch deepseek_v3 $DS --q-lora-rank 64
ds2-lite-awq          80 41 --arch deepseek_v2 $DS --q-lora-rank null --quant awq --group-size 32
ds3-awq               64 42 --arch deepseek_v3 $DS --layers 2 --q-lora-rank 64 --quant awq --group-size 32
llama-awq             40 43 --arch llama $LL --quant awq --group-size 64
llama-gptq            40 44 --arch llama $LL --quant gptq --bits 4 --sym --group-size 64
qwen2-gptq-actorder   40 45 --arch qwen2 $LL --quant gptq --bits 4 --asym --desc-act --format gptq_v2 --group-size 32
ds2-gptq-actorder     72 46 --arch deepseek_v2 $DS --layers 2 --q-lora-rank 64 --quant gptq --bits 4 --sym --desc-act --group-size 32
"

echo "$cases" | while read -r name len seed flags; do
	[ -n "$name" ] || continue
	d="$out/$name"
	rm -rf "$d"
	gen="" patch=""
	for f in $flags; do
		case "$f" in
		@*) patch="$patch ${f#@}" ;;
		*) gen="$gen $f" ;;
		esac
	done
	# shellcheck disable=SC2086
	"$py" scripts/gen-fixture.py --out "$d" --seed "$seed" $gen
	# shellcheck disable=SC2086
	[ -z "$patch" ] || "$py" -c 'import json, sys
p = sys.argv[1]
c = json.load(open(p))
for kv in sys.argv[2:]:
    k, v = kv.split("=", 1)
    c[k] = json.loads(v)
json.dump(c, open(p, "w"), indent=2)' "$d/config.json" $patch
	vocab=$("$py" -c 'import json,sys; print(json.load(open(sys.argv[1]))["vocab_size"])' "$d/config.json")
	# prompt: random ids below the byte-level tokenizer's special tokens
	"$py" -c 'import sys, numpy as np
n, seed, v = map(int, sys.argv[1:4])
r = np.random.default_rng(seed)
print(" ".join(str(int(x)) for x in r.integers(0, min(v, 256), n)))' "$len" "$seed" "$vocab" >"$d/prompt.ids"
	"$py" scripts/ref/forward.py --model "$d" --ids-file "$d/prompt.ids" \
		--out "$d/logits.f32" --stats "$d/stats.json" --dtype float64 --mla both
	echo "make-golden.sh: $name: $(wc -c <"$d/logits.f32") bytes of logits" >&2
done
