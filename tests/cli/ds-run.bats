#!/usr/bin/env bats
# ds-run.bats - ds-run against the PyTorch reference's golden logits
# (testdata/golden, scripts/ref/forward.py in float64), its own
# consistency (batch vs decode, threads, ISAs, --parallel, seeds), its
# output formats and every bad input.
#
# Tolerances (max |ours - reference| per logits row; the logits' scale is
# about 1, their largest about 4):
#   bf16 checkpoints   0.1   the kernels round the activations to bf16
#                            (at most 2^-8 relative) before each product: the same
#                            rounding simulated in the reference moves its
#                            logits by up to 0.03 (dense), 0.075 (MoE)
#   f16 checkpoints    0.01  fp32 activations; the f16 KV cache alone
#                            (1e-4 with --cache-type f32, tested too)
#   q4 (AWQ, GPTQ)     0.25  against the dequantized weights: the int8
#                            activation blocks (error up to 1/254 of a
#                            block's largest) simulated in the reference
#                            move it by up to 0.12 (dense)
#   q8 (--quantize)    0.25  a bf16 checkpoint rounded to q8g32 (error up
#                            to 1/254 of a group's largest weight) and
#                            the int8 activations, against the bf16
#                            reference: 0.13-0.15 seen (llama, qwen2; MoE
#                            cases route differently and are left out)
# MoE cases may have a few rows past the tolerance: a token whose router
# scores nearly tie picks another expert under the rounding (the simulated
# rounding does the same at the same rows).  Top-1 must agree on every row
# within tolerance whose reference margin exceeds twice the tolerance.

bats_require_minimum_version 1.5.0

load_lib() {
	: "${DS_BIN:=bin}"
	G=testdata/golden
	CMP="/usr/bin/python3 tests/cli/cmp-logits.py"
	T=$BATS_FILE_TMPDIR
	M=$T/m
}

# gen NAME SEED gen-fixture-options...: a random checkpoint
# (scripts/gen-fixture.py), converted to $M/NAME, and 48 prompt ids in
# $M/NAME.ids
gen() {
	local n=$1 seed=$2
	shift 2
	/usr/bin/python3 scripts/gen-fixture.py --out "$T/hf-$n" --seed "$seed" "$@" >/dev/null
	"$DS_BIN"/ds-convert --model-path "$T/hf-$n" --output-dir "$M/$n" --quiet
	/usr/bin/python3 -c 'import random, sys
r = random.Random(int(sys.argv[1]))
print(" ".join(str(r.randrange(256)) for _ in range(48)))' "$seed" >"$M/$n.ids"
}

setup_file() {
	load_lib
	mkdir -p "$M"
	gen llama 1 --arch llama
	gen qwen2 2 --arch qwen2 --tie
	gen ds2-lite 3 --arch deepseek_v2 --q-lora-rank null
	gen ds3-awq 4 --arch deepseek_v3 --quant awq --group-size 32
	gen ds2-gptq 5 --arch deepseek_v2 --q-lora-rank 64 --topk-method group_limited_greedy \
		--quant gptq --bits 4 --desc-act --group-size 32
	if [ -d "$G" ]; then
		for d in "$G"/*/; do
			"$DS_BIN"/ds-convert --model-path "$d" --output-dir "$T/golden-$(basename "$d")" --quiet
		done
		for n in llama qwen2; do
			"$DS_BIN"/ds-convert --model-path "$G/$n" --output-dir "$T/golden-$n@q8" \
				--quantize q8 --quiet
		done
	fi
}

setup() {
	load_lib
}

# n_vocab of a model directory
vocab() {
	/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["hparams"]["n_vocab"])' "$1/model.meta"
}

# golden CASE TOL FLIPS [ds-run options]; CASE@q8: the case's checkpoint
# converted with --quantize q8, against the same reference
# (scripts/test-arm64.sh runs these lines too, as they are)
golden() {
	local n=$1 tol=$2 flips=$3 g=$G/${1%@*}
	shift 3
	[ -d "$g" ] || { echo "no golden files ($g)"; return 1; }
	run "$DS_BIN"/ds-run -m "$T/golden-$n" --ids -n 0 --logits-out "$T/$n.out" "$@" <"$g/prompt.ids"
	[ "$status" -eq 0 ]
	run $CMP "$T/$n.out" "$g/logits.f32" "$(vocab "$T/golden-$n")" "$tol" "$flips"
	echo "$n: $output" >&3
	[ "$status" -eq 0 ]
}

@test "golden llama (bf16, llama3 rope)" { golden llama 0.1 0; }
@test "golden qwen2 (bf16, biases, tied)" { golden qwen2 0.1 0; }
@test "golden qwen2-f16-untied" { golden qwen2-f16-untied 0.01 0; }
@test "golden qwen2-f16-untied, f32 cache: 1e-4" { golden qwen2-f16-untied 1e-4 0 --cache-type f32; }
@test "golden ds2-lite (MLA, q_lora null, YaRN, greedy)" { golden ds2-lite 0.1 4; }
@test "golden ds2-qlora-grouped (q_lora, group_limited_greedy)" { golden ds2-qlora-grouped 0.1 4; }
@test "golden ds2-norope-scaling" { golden ds2-norope-scaling 0.1 1; }
@test "golden ds3 (sigmoid, noaux_tc)" { golden ds3 0.1 10; }
@test "golden ds2-lite-awq" { golden ds2-lite-awq 0.25 4; }
@test "golden ds3-awq" { golden ds3-awq 0.25 4; }
@test "golden llama-awq" { golden llama-awq 0.25 0; }
@test "golden llama-gptq" { golden llama-gptq 0.25 0; }
@test "golden qwen2-gptq-actorder" { golden qwen2-gptq-actorder 0.25 0; }
@test "golden ds2-gptq-actorder (MLA with a permuted kv_b)" { golden ds2-gptq-actorder 0.25 4; }
@test "golden ds2-lite with a q8 cache" { golden ds2-lite 0.25 4 --cache-type q8; }
@test "golden ds2-lite, the prompt in chunks of 5 (-b)" { golden ds2-lite 0.1 4 -b 5; }
@test "golden ds3, the prompt in chunks of 13 (-b)" { golden ds3 0.1 10 -b 13; }
@test "-b: the logits of every chunk size byte for byte those of one chunk" {
	for n in ds2-lite ds3-awq llama; do
		"$DS_BIN"/ds-run -m "$M/$n" --ids -n 0 --logits-out "$T/a.f32" <"$M/$n.ids"
		for b in 2 7 47; do
			run "$DS_BIN"/ds-run -m "$M/$n" --ids -n 0 --logits-out "$T/b.f32" -b "$b" <"$M/$n.ids"
			[ "$status" -eq 0 ]
			cmp "$T/a.f32" "$T/b.f32"
		done
	done
}
@test "golden llama converted to q8" { golden llama@q8 0.25 0; }
@test "golden qwen2 converted to q8" { golden qwen2@q8 0.25 0; }
@test "golden ds3 on the scalar kernels" { DS_ISA=scalar golden ds3 0.1 10; }
@test "golden llama-gptq on the scalar kernels" { DS_ISA=scalar golden llama-gptq 0.25 0; }
@test "--hugepages, --mlock, --numa interleave, --no-populate: the same logits" {
	for n in ds2-lite llama; do
		"$DS_BIN"/ds-run -m "$M/$n" --ids -n 0 --logits-out "$T/a.f32" <"$M/$n.ids"
		run --separate-stderr "$DS_BIN"/ds-run -m "$M/$n" --ids -n 0 --logits-out "$T/b.f32" \
			--hugepages --mlock --numa interleave <"$M/$n.ids"
		[ "$status" -eq 0 ]
		# no hugetlb pages reserved: transparent hugepages, with a warning
		if [ "$(cat /proc/sys/vm/nr_hugepages)" -eq 0 ]; then
			[[ "$stderr" == *"warning: --hugepages"* ]]
		fi
		"$DS_BIN"/ds-run -m "$M/$n" --ids -n 0 --logits-out "$T/c.f32" --no-populate <"$M/$n.ids"
		cmp "$T/a.f32" "$T/b.f32"
		cmp "$T/a.f32" "$T/c.f32"
	done
}

@test "decode one token at a time agrees with the batched prompt" {
	local form
	# MLA in each form alone: by default the generated tokens, read
	# back as a prompt, would attend in the other form (ds-run(1))
	for form in absorbed mha; do
		for n in llama ds2-lite ds3-awq ds2-gptq; do
			cut -d' ' -f1-15 "$M/$n.ids" >"$T/p.ids"
			DS_MLA_FORM=$form "$DS_BIN"/ds-run -m "$M/$n" --ids --temp 0 -n 12 \
				--logits-out "$T/dec.f32" <"$T/p.ids" >"$T/gen.ids"
			printf '%s %s\n' "$(cat "$T/p.ids")" "$(cat "$T/gen.ids")" >"$T/all.ids"
			DS_MLA_FORM=$form "$DS_BIN"/ds-run -m "$M/$n" --ids -n 0 \
				--logits-out "$T/pre.f32" <"$T/all.ids"
			# rows: prompt + 11 decode steps; the batched run has one more
			V=$(vocab "$M/$n")
			head -c $(( (15 + 11) * 4 * V )) "$T/pre.f32" >"$T/pre-cut.f32"
			run $CMP "$T/dec.f32" "$T/pre-cut.f32" "$V" 1e-5
			echo "$form $n: $output" >&3
			[ "$status" -eq 0 ]
		done
	done
}

@test "--threads 1 and 2 give the same bytes" {
	for n in qwen2 ds3-awq ds2-gptq; do
		"$DS_BIN"/ds-run -m "$M/$n" --ids -n 4 --temp 0 --threads 1 --logits-out "$T/t1.f32" <"$M/$n.ids" >"$T/t1.ids"
		"$DS_BIN"/ds-run -m "$M/$n" --ids -n 4 --temp 0 --threads 2 --logits-out "$T/t2.f32" <"$M/$n.ids" >"$T/t2.ids"
		cmp "$T/t1.f32" "$T/t2.f32"
		cmp "$T/t1.ids" "$T/t2.ids"
	done
}

# Prompts: lines of the model's prompt, cut to different lengths.
prompts() {
	for k in 3 17 1 30 9 24 5; do
		cut -d' ' -f1-$k "$M/$1.ids"
	done
}

@test "--parallel 3 gives what --parallel 1 gives, in input order" {
	for n in llama ds2-gptq; do
		prompts "$n" >"$T/in.ids"
		"$DS_BIN"/ds-run -m "$M/$n" --ids -n 10 --temp 0.9 --seed 42 <"$T/in.ids" >"$T/p1"
		"$DS_BIN"/ds-run -m "$M/$n" --ids -n 10 --temp 0.9 --seed 42 --parallel 3 <"$T/in.ids" >"$T/p3"
		[ "$(wc -l <"$T/p1")" -eq 7 ]
		cmp "$T/p1" "$T/p3"
		"$DS_BIN"/ds-run -m "$M/$n" -n 6 --jsonl --temp 0 --parallel 4 --logits-out "$T/l4.f32" <"$T/in.ids" >"$T/j4"
		"$DS_BIN"/ds-run -m "$M/$n" -n 6 --jsonl --temp 0 --logits-out "$T/l1.f32" <"$T/in.ids" >"$T/j1"
		cmp "$T/l1.f32" "$T/l4.f32"
		diff <(sed 's/"timings".*//' "$T/j1") <(sed 's/"timings".*//' "$T/j4")
	done
}

@test "seeded sampling is reproducible, whatever the threads; other seeds differ" {
	n=ds2-lite
	prompts "$n" >"$T/in.ids"
	"$DS_BIN"/ds-run -m "$M/$n" --ids -n 16 --temp 1.2 --top-k 0 --top-p 1 --min-p 0 --seed 7 --threads 1 <"$T/in.ids" >"$T/a"
	"$DS_BIN"/ds-run -m "$M/$n" --ids -n 16 --temp 1.2 --top-k 0 --top-p 1 --min-p 0 --seed 7 --threads 2 <"$T/in.ids" >"$T/b"
	"$DS_BIN"/ds-run -m "$M/$n" --ids -n 16 --temp 1.2 --top-k 0 --top-p 1 --min-p 0 --seed 8 --threads 2 <"$T/in.ids" >"$T/c"
	cmp "$T/a" "$T/b"
	! cmp -s "$T/a" "$T/c"
	# the other sampling options change the draw, deterministically
	"$DS_BIN"/ds-run -m "$M/$n" --ids -n 16 --temp 0.7 --top-k 5 --top-p 0.9 --min-p 0.1 --repeat-penalty 1.3 --repeat-last-n 8 --seed 7 <"$T/in.ids" >"$T/d"
	"$DS_BIN"/ds-run -m "$M/$n" --ids -n 16 --temp 0.7 --top-k 5 --top-p 0.9 --min-p 0.1 --repeat-penalty 1.3 --repeat-last-n 8 --seed 7 <"$T/in.ids" >"$T/e"
	cmp "$T/d" "$T/e"
	! cmp -s "$T/a" "$T/d"
}

@test "greedy decoding follows the reference's argmax" {
	n=qwen2-f16-untied
	[ -d "$G/$n" ] || { echo "no golden files ($G/$n)"; return 1; }
	"$DS_BIN"/ds-run -m "$T/golden-$n" --ids --temp 0 -n 1 <"$G/$n/prompt.ids" >"$T/g"
	want=$(/usr/bin/python3 -c 'import numpy as np, sys
l = np.fromfile(sys.argv[1], "<f4").reshape(-1, int(sys.argv[2]))
print(int(l[-1].argmax()))' "$G/$n/logits.f32" "$(vocab "$T/golden-$n")")
	[ "$(cat "$T/g")" = "$want" ]
}

@test "--logits-out rows: the prompt's with -n 0, one more per generated token after the first" {
	n=llama
	V=$(vocab "$M/$n")
	printf '1 2 3 4 5\n6 7\n' >"$T/in.ids"
	"$DS_BIN"/ds-run -m "$M/$n" --ids -n 0 --logits-out "$T/a.f32" <"$T/in.ids" >"$T/o"
	[ "$(stat -c %s "$T/a.f32")" -eq $((7 * 4 * V)) ]
	[ "$(cat "$T/o")" = "$(printf '\n\n')" ]
	"$DS_BIN"/ds-run -m "$M/$n" --ids -n 3 --temp 0 --logits-out "$T/b.f32" <"$T/in.ids" >"$T/o"
	[ "$(stat -c %s "$T/b.f32")" -eq $(((5 + 2 + 2 + 2) * 4 * V)) ]
	[ "$(wc -w <"$T/o")" -eq 6 ]
	# the first request's prompt rows lead, the second's follow
	cmp -n $((5 * 4 * V)) "$T/a.f32" "$T/b.f32"
}

@test "--jsonl: one object per line, every field" {
	n=ds2-lite
	printf '1 2 3\n\n4 5 6 7\n' >"$T/in.ids"
	run "$DS_BIN"/ds-run -m "$M/$n" --jsonl -n 5 --temp 0 <"$T/in.ids"
	[ "$status" -eq 0 ]
	[ "${#lines[@]}" -eq 3 ]
	/usr/bin/python3 - "$output" <<'EOF'
import json, sys
objs = [json.loads(l) for l in sys.argv[1].split("\n")]
for i, o in enumerate(objs):
    assert set(o) == {"index", "tokens", "text", "finish_reason", "prompt_tokens",
                      "cached_tokens", "completion_tokens", "timings"}, o
    assert o["index"] == i
    assert set(o["timings"]) >= {"prompt_ms", "predicted_ms"}
assert [o["prompt_tokens"] for o in objs] == [3, 0, 4]
assert [o["cached_tokens"] for o in objs] == [0, 0, 0]
assert objs[0]["completion_tokens"] == len(objs[0]["tokens"]) <= 5
assert objs[0]["finish_reason"] in ("length", "stop")
assert objs[1]["tokens"] == [] and objs[1]["completion_tokens"] == 0
EOF
}

@test "the prompt cache: --parallel inputs sharing a prefix take it; answers as with --cache-ram 0" {
	local n opt
	for n in llama qwen2 ds2-lite ds3-awq ds2-gptq; do
		V=$(vocab "$M/$n")
		/usr/bin/python3 - "$V" >"$T/in.ids" <<'EOF'
import random, sys
v = int(sys.argv[1]); r = random.Random(5)
pre = [r.randrange(3, v) for _ in range(45)]
for i in range(7):
    print(" ".join(map(str, pre[: 45 if i % 3 else 20] + [r.randrange(3, v) for _ in range(1 + 5 * i)])))
EOF
		for opt in "--temp 0" "--temp 0.9 --seed 11"; do
			# shellcheck disable=SC2086
			"$DS_BIN"/ds-run -m "$M/$n" --jsonl -n 12 $opt --parallel 3 <"$T/in.ids" >"$T/c"
			# shellcheck disable=SC2086
			"$DS_BIN"/ds-run -m "$M/$n" --jsonl -n 12 $opt --parallel 3 --cache-ram 0 <"$T/in.ids" >"$T/p"
			run -0 /usr/bin/python3 - "$T/c" "$T/p" <<'EOF'
import json, sys
c = [json.loads(l) for l in open(sys.argv[1])]
p = [json.loads(l) for l in open(sys.argv[2])]
assert [o["tokens"] for o in c] == [o["tokens"] for o in p]
assert all(o["cached_tokens"] == 0 for o in p)
# the first computes; the others share 20 or 45 with an earlier one
assert c[0]["cached_tokens"] == 0
assert all(o["cached_tokens"] >= 20 for o in c[1:]), [o["cached_tokens"] for o in c]
print(sum(o["cached_tokens"] for o in c))
EOF
			echo "$n $opt: $output cached" >&3
		done
	done
}

@test "--cache-dir: a later run starts from what an earlier one computed" {
	mkdir "$T/cd"
	seq 3 60 | tr '\n' ' ' >"$T/p1.ids"
	echo >>"$T/p1.ids"
	"$DS_BIN"/ds-run -m "$M/ds2-lite" --ids -n 8 --temp 0 --cache-dir "$T/cd" <"$T/p1.ids" >"$T/o1"
	echo "$(cat "$T/p1.ids") $(cat "$T/o1") 9 9" >"$T/p2.ids"
	run -0 "$DS_BIN"/ds-run -m "$M/ds2-lite" --jsonl -n 8 --temp 0 --cache-dir "$T/cd" <"$T/p2.ids"
	# 58 prompt and 7 generated positions: 4 blocks of 16
	[[ "$output" == *'"cached_tokens": 64,'* ]]
	a=$(echo "$output" | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["tokens"])')
	run -0 "$DS_BIN"/ds-run -m "$M/ds2-lite" --jsonl -n 8 --temp 0 --cache-ram 0 <"$T/p2.ids"
	[ "$(echo "$output" | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["tokens"])')" = "$a" ]
	# another model's files: ignored, said on stderr
	run -0 "$DS_BIN"/ds-run -m "$M/llama" --ids -n 1 --temp 0 --cache-dir "$T/cd" <"$T/p1.ids"
	[[ "$output" == *"ds-run: warning: --cache-dir $T/cd: "*".dskv: made for another model (or by another ds version): ignored"* ]]
	run "$DS_BIN"/ds-run -m "$M/llama" --cache-ram 0 --cache-dir "$T/cd" <"$T/p1.ids"
	[ "$status" -eq 2 ]
	run "$DS_BIN"/ds-run -m "$M/llama" --cache-ram -1 <"$T/p1.ids"
	[ "$status" -eq 2 ]
}

@test "--ids: a line per request, the empty line an empty answer" {
	printf '5 6 7\n\n8\n' | "$DS_BIN"/ds-run -m "$M/llama" --ids -n 4 --temp 0 >"$T/o"
	[ "$(wc -l <"$T/o")" -eq 3 ]
	[ "$(sed -n 2p "$T/o")" = "" ]
	[ "$(sed -n 1p "$T/o" | wc -w)" -eq 4 ]
}

@test "--perplexity matches the reference logits' perplexity" {
	n=ds2-lite
	[ -d "$G/$n" ] || { echo "no golden files ($G/$n)"; return 1; }
	V=$(vocab "$T/golden-$n")
	np=$(wc -w <"$G/$n/prompt.ids")
	run "$DS_BIN"/ds-run -m "$T/golden-$n" --perplexity --ctx-size "$np" <"$G/$n/prompt.ids"
	[ "$status" -eq 0 ]
	echo "$output" >&3
	/usr/bin/python3 - "$output" "$G/$n/logits.f32" "$G/$n/prompt.ids" "$V" <<'EOF'
import math, sys, numpy as np
words = sys.argv[1].split()
ppl, tokens, windows, ctx = float(words[1]), int(words[3]), int(words[5]), int(words[7])
V = int(sys.argv[4])
l = np.fromfile(sys.argv[2], "<f4").reshape(-1, V).astype(np.float64)
ids = [int(t) for t in open(sys.argv[3]).read().split()]
first = len(ids) // 2
lp = l - l.max(1, keepdims=True)
lp = lp - np.log(np.exp(lp).sum(1, keepdims=True))
nll = -sum(lp[j, ids[j + 1]] for j in range(first, len(ids) - 1))
want = math.exp(nll / (len(ids) - 1 - first))
assert windows == 1 and ctx == len(ids) and tokens == len(ids) - 1 - first, words
assert abs(ppl / want - 1) < 0.01, (ppl, want)
EOF
}

@test "--perplexity: windows of --ctx-size, and too few tokens refused" {
	run "$DS_BIN"/ds-run -m "$M/llama" --perplexity --ctx-size 16 <"$M/llama.ids"
	[ "$status" -eq 0 ]
	[[ "$output" =~ ^perplexity\ [0-9.]+\ tokens\ 21\ windows\ 3\ ctx\ 16$ ]]
	run "$DS_BIN"/ds-run -m "$M/llama" --perplexity --ctx-size 1000 <"$M/llama.ids"
	[ "$status" -eq 1 ]
	[[ "$output" == *"fewer than one window"* ]]
}

@test "--verbose: ISA, threads, load time, KV cache size and RSS on stderr" {
	run --separate-stderr "$DS_BIN"/ds-run -m "$M/ds2-lite" --ids -n 2 --temp 0 --verbose --ctx-size 100 <<<"1 2 3"
	[ "$status" -eq 0 ]
	[ "$(echo "$output" | wc -w)" -eq 2 ]
	[[ "$stderr" == *"kernels "*", forward passes of up to 2048 tokens"* ]]
	[[ "$stderr" == *"loaded in"* ]]
	[[ "$stderr" == *"KV cache f16: 1 slots x 100 positions"* ]]
	[[ "$stderr" == *"RSS"* ]]
	# -b, at least a token of every slot
	run --separate-stderr "$DS_BIN"/ds-run -m "$M/ds2-lite" --ids -n 0 --verbose --parallel 4 -b 3 <<<"1 2 3"
	[[ "$stderr" == *", forward passes of up to 5 tokens"* ]]
}

@test "stops at EOS: generation ends there, finish_reason stop" {
	n=llama
	printf '1 2 3 4 5 6 7 8\n' >"$T/in.ids"
	"$DS_BIN"/ds-run -m "$M/$n" --ids --temp 0 -n 8 <"$T/in.ids" >"$T/g"
	second=$(cut -d' ' -f2 "$T/g")
	# a model whose EOS is the second token it would generate
	cp -r "$M/$n" "$T/eos"
	/usr/bin/python3 - "$T/eos/model.meta" "$second" <<'EOF'
import json, sys
m = json.load(open(sys.argv[1]))
m["hparams"]["eos_token_id"] = int(sys.argv[2])
if "eos_token_ids" in m["hparams"]:
    m["hparams"]["eos_token_ids"] = [int(sys.argv[2])]
json.dump(m, open(sys.argv[1], "w"))
EOF
	run "$DS_BIN"/ds-run -m "$T/eos" --jsonl --temp 0 -n 8 <"$T/in.ids"
	[ "$status" -eq 0 ]
	[[ "$output" == *"\"tokens\": [$(cut -d' ' -f1 "$T/g")]"* ]]
	[[ "$output" == *'"finish_reason": "stop"'* ]]
}

@test "the context limit: generation stops at --ctx-size (finish length)" {
	run "$DS_BIN"/ds-run -m "$M/llama" --jsonl --temp 0 --ctx-size 8 <<<"1 2 3 4 5"
	[ "$status" -eq 0 ]
	[[ "$output" == *'"completion_tokens": 4'* ]]
	[[ "$output" == *'"finish_reason": "length"'* ]]
}

# ---- bad input: one line on stderr, exit 1 (usage: 2) ----------------------------------

@test "an id outside the vocabulary names it and its line" {
	V=$(vocab "$M/llama")
	run "$DS_BIN"/ds-run -m "$M/llama" --ids -n 1 <<<"$(printf '1 2\n3 %d 4\n' "$V")"
	[ "$status" -eq 1 ]
	[ "${#lines[@]}" -eq 1 ]
	[[ "$output" == "ds-run: line 2: token id $V is not below the vocabulary size $V" ]]
	run "$DS_BIN"/ds-run -m "$M/llama" --ids -n 1 <<<"1 x2"
	[ "$status" -eq 1 ]
	[[ "$output" == *"line 1: \"x2\" is not a token id"* ]]
	run "$DS_BIN"/ds-run -m "$M/llama" --ids -n 1 <<<"1 -2"
	[ "$status" -eq 1 ]
}

@test "a prompt longer than the context: an error, unless --truncate" {
	run "$DS_BIN"/ds-run -m "$M/llama" --ids -n 2 --ctx-size 4 <<<"1 2 3 4 5 6"
	[ "$status" -eq 1 ]
	[[ "$output" == "ds-run: line 1: prompt of 6 tokens is longer than the context (4)"* ]]
	run "$DS_BIN"/ds-run -m "$M/llama" --jsonl -n 1 --temp 0 --ctx-size 4 --truncate <<<"1 2 3 4 5 6"
	[ "$status" -eq 0 ]
	[[ "$output" == *'"prompt_tokens": 3'* ]]
	# the kept tokens are the last ones
	run "$DS_BIN"/ds-run -m "$M/llama" --ids -n 1 --temp 0 --ctx-size 8 --logits-out "$T/x.f32" <<<"4 5 6"
	run "$DS_BIN"/ds-run -m "$M/llama" --ids -n 1 --temp 0 --ctx-size 4 --truncate --logits-out "$T/y.f32" <<<"1 2 3 4 5 6"
	cmp "$T/x.f32" "$T/y.f32"
}

@test "a model of another format version" {
	cp -r "$M/llama" "$T/v2"
	sed -i 's/"version": 2/"version": 3/' "$T/v2/model.meta"
	run "$DS_BIN"/ds-run -m "$T/v2" --ids -n 1 <<<"1 2"
	[ "$status" -eq 1 ]
	[ "${#lines[@]}" -eq 1 ]
	[[ "$output" == *"format version 3"* ]]
}

@test "--verify finds a flipped byte; without it the model still loads" {
	cp -r "$M/llama" "$T/bad"
	printf '\377' | dd of="$T/bad/model.bin" bs=1 seek=5000 conv=notrunc 2>/dev/null
	run "$DS_BIN"/ds-run -m "$T/bad" --ids -n 1 --verify <<<"1 2"
	[ "$status" -eq 1 ]
	[ "${#lines[@]}" -eq 1 ]
	[[ "$output" == *"CRC-32"* ]]
	run "$DS_BIN"/ds-run -m "$M/llama" --ids -n 1 --verify <<<"1 2"
	[ "$status" -eq 0 ]
}

@test "text without a tokenizer: one clear line" {
	cp -r "$M/llama" "$T/notok"
	rm -f "$T/notok/tokenizer.bin"
	for args in "-p hello" "-n 1" "--chat -n 1" "--stop x --ids"; do
		run "$DS_BIN"/ds-run -m "$T/notok" $args <<<"1 2"
		[ "$status" -eq 1 ]
		[ "${#lines[@]}" -eq 1 ]
		[[ "$output" == *"tokenizer.bin: no tokenizer"* ]]
	done
	# ids and JSON lines need none
	run "$DS_BIN"/ds-run -m "$T/notok" --jsonl -n 1 --temp 0 <<<"1 2"
	[ "$status" -eq 0 ]
	[[ "$output" == *'"text": null'* ]]
}

@test "a missing model directory" {
	run "$DS_BIN"/ds-run -m "$T/nonexistent" --ids <<<"1"
	[ "$status" -eq 1 ]
	[ "${#lines[@]}" -eq 1 ]
	[[ "$output" == "ds-run: "*"nonexistent"* ]]
}

@test "usage errors exit 2; --help and --version exit 0 on stdout" {
	for args in "" "-m" "--bogus -m x" "-m x --temp abc" "-m x --top-p 2" "-m x --parallel 0" \
		    "-m x --cache-type q5" "-m x --numa sideways" "-m x -p a -f b" "-m x extra" \
		    "-m x --ctx-size 2" "-m x --perplexity --parallel 2" "-m x -b 0" "-m x --batch 65537"; do
		run "$DS_BIN"/ds-run $args
		[ "$status" -eq 2 ]
		[[ "$output" == "ds-run: "* ]]
	done
	run --separate-stderr "$DS_BIN"/ds-run --help
	[ "$status" -eq 0 ]
	[[ "$output" == "usage: ds-run -m DIR"* ]]
	[ -z "$stderr" ]
	run "$DS_BIN"/ds-run --version
	[ "$status" -eq 0 ]
	[[ "$output" == "ds-run "[0-9]* ]]
}

@test "--cpus pins the pool; --sched-fifo without CAP_SYS_NICE is refused" {
	"$DS_BIN"/ds-run -m "$M/llama" --ids -n 0 --logits-out "$T/a.f32" <"$M/llama.ids"
	"$DS_BIN"/ds-run -m "$M/llama" --ids -n 0 --logits-out "$T/b.f32" --cpus 0 --threads 1 <"$M/llama.ids"
	cmp "$T/a.f32" "$T/b.f32"
	run "$DS_BIN"/ds-run -m "$M/llama" --ids -n 1 --cpus 4095 <<<"1 2"
	[ "$status" -eq 1 ]
	[[ "$output" == "ds-run: --cpus: "*"4095"* ]]
	if [ "$(id -u)" -eq 0 ]; then
		skip "running as root: SCHED_FIFO would be granted"
	fi
	run "$DS_BIN"/ds-run -m "$M/llama" --ids -n 1 --sched-fifo 10 <<<"1 2"
	[ "$status" -eq 1 ]
	[[ "$output" == *"CAP_SYS_NICE"* ]]
}

# ---- text (the model's tokenizer) ---------------------------------------------------

need_tok() {
	[ -e "$M/$1/tokenizer.bin" ] || { echo "ds-convert wrote no tokenizer.bin"; return 1; }
	[ -x "$DS_BIN/ds-tok" ] || { echo "no $DS_BIN/ds-tok"; return 1; }
}

@test "text out is the tokenizer's decoding of the ids out" {
	n=ds3-awq
	need_tok $n
	prompts "$n" >"$T/in.ids"
	"$DS_BIN"/ds-run -m "$M/$n" --ids -n 12 --temp 0.8 --seed 3 <"$T/in.ids" >"$T/o.ids"
	"$DS_BIN"/ds-run -m "$M/$n" -n 12 --temp 0.8 --seed 3 --parallel 2 <"$T/in.ids" >"$T/o.txt"
	# ids the tokenizer does not have (the fixture's vocabulary is padded)
	# decode to nothing, as ds-run decodes them
	V=$(/usr/bin/python3 -c 'import json,sys
j = json.load(open(sys.argv[1]))
print(1 + max(list(j["model"]["vocab"].values()) + [t["id"] for t in j.get("added_tokens", [])]))' "$T/hf-$n/tokenizer.json")
	while read -r line; do
		ids=$(for t in $line; do if [ "$t" -lt "$V" ]; then printf '%s ' "$t"; fi; done)
		echo "$ids" | "$DS_BIN"/ds-tok -m "$M/$n" -d     # a line each
	done <"$T/o.ids" >"$T/want.txt"
	cmp "$T/want.txt" "$T/o.txt"
	# --jsonl's text is the same text
	"$DS_BIN"/ds-run -m "$M/$n" --jsonl -n 12 --temp 0.8 --seed 3 <"$T/in.ids" >"$T/o.jsonl"
	/usr/bin/python3 - "$T/o.jsonl" "$T/o.txt" <<'PY'
import json, sys
texts = [json.loads(l)["text"] for l in open(sys.argv[1], encoding="utf-8")]
got = open(sys.argv[2], encoding="utf-8", errors="surrogateescape").read()
assert got == "".join(t + "\n" for t in texts), (got, texts)
PY
}

@test "-p and -f: the text encoded with the tokenizer's BOS" {
	n=ds2-lite
	need_tok $n
	printf 'The quick brown fox' >"$T/p.txt"
	"$DS_BIN"/ds-tok -m "$M/$n" <"$T/p.txt" >"$T/p.ids"
	"$DS_BIN"/ds-run -m "$M/$n" --ids -n 6 --temp 0 <"$T/p.ids" >"$T/a"
	"$DS_BIN"/ds-run -m "$M/$n" --ids -n 6 --temp 0 -p "The quick brown fox" >"$T/b"
	"$DS_BIN"/ds-run -m "$M/$n" --ids -n 6 --temp 0 -f "$T/p.txt" >"$T/c"
	cmp "$T/a" "$T/b"
	cmp "$T/a" "$T/c"
	run "$DS_BIN"/ds-run -m "$M/$n" --jsonl -n 1 -p "The quick brown fox"
	[[ "$output" == *"\"prompt_tokens\": $(wc -w <"$T/p.ids")"* ]]
}

@test "--stop: the answer ends before the stop string" {
	n=llama
	need_tok $n
	"$DS_BIN"/ds-run -m "$M/$n" --jsonl -n 40 --temp 0 -p "abc" >"$T/full"
	stop=$(/usr/bin/python3 -c 'import json,sys
t = json.load(open(sys.argv[1]))["text"]
# a printable stretch from the middle of the answer
for i in range(len(t) // 3, len(t) - 2):
    s = t[i:i + 2]
    if s.isprintable() and s.strip() == s and s:
        print(s); break' "$T/full")
	[ -n "$stop" ]
	want=$(/usr/bin/python3 -c 'import json,sys
t = json.load(open(sys.argv[1]))["text"]
print(t[:t.index(sys.argv[2])])' "$T/full" "$stop")
	run "$DS_BIN"/ds-run -m "$M/$n" -n 40 --temp 0 -p "abc" --stop "$stop" --stop "never-there"
	[ "$status" -eq 0 ]
	[ "$output" = "$want" ]
	run "$DS_BIN"/ds-run -m "$M/$n" --jsonl -n 40 --temp 0 -p "abc" --stop "$stop"
	[[ "$output" == *'"finish_reason": "stop"'* ]]
}

@test "--chat: each line a user turn in the template; on a terminal, one conversation" {
	n=ds3-awq
	need_tok $n
	# deepseek3: BOS, <｜User｜>message, <｜Assistant｜> (the tokenizer's
	# special tokens, no other BOS)
	printf '<｜begin▁of▁sentence｜><｜User｜>hi there<｜Assistant｜>' |
		"$DS_BIN"/ds-tok -m "$M/$n" --no-bos >"$T/want.ids"
	"$DS_BIN"/ds-run -m "$M/$n" --ids -n 5 --temp 0 <"$T/want.ids" >"$T/a"
	printf 'hi there\nhi there\n' |
		"$DS_BIN"/ds-run -m "$M/$n" --chat --chat-template deepseek3 --ids -n 5 --temp 0 >"$T/b"
	[ "$(sed -n 1p "$T/b")" = "$(cat "$T/a")" ]
	[ "$(sed -n 2p "$T/b")" = "$(cat "$T/a")" ]
	# a terminal: the second turn carries the first
	printf 'hi there\nand again\n' | script -qec \
		"$DS_BIN/ds-run -m $M/$n --chat -n 5 --temp 0 --verbose" /dev/null >"$T/tty"
	grep -q "request 1: $(wc -w <"$T/want.ids") prompt tokens" "$T/tty"
	p2=$(sed -n 's/.*request 2: \([0-9]*\) prompt tokens.*/\1/p' "$T/tty")
	[ "$p2" -gt "$(( $(wc -w <"$T/want.ids") + 5 ))" ]
	run "$DS_BIN"/ds-run -m "$M/$n" --chat --chat-template nonesuch -n 1 <<<"x"
	[ "$status" -eq 1 ]
	[[ "$output" == *"nonesuch"* ]]
}

@test "an interrupted --logits-out leaves neither the file nor its .tmp" {
	yes "1 2 3 4 5 6 7 8" | head -n 400 >"$T/many.ids"
	"$DS_BIN"/ds-run -m "$M/ds2-lite" --ids -n 200 --logits-out "$T/int.f32" <"$T/many.ids" >/dev/null &
	pid=$!
	tmp="$T/int.f32.tmp-$pid"
	for _ in $(seq 100); do [ -e "$tmp" ] && break; sleep 0.05; done
	[ -e "$tmp" ]
	kill -TERM "$pid"
	wait "$pid" || true
	[ ! -e "$tmp" ]
	[ ! -e "$T/int.f32" ]
}

@test "AMX prefill (avx512+amx): logits byte for byte those of avx512 (48-token prompts: three tiles)" {
	DS_ISA=amx run "$DS_BIN"/ds-run -m "$M/ds3-awq" --ids -n 0 --logits-out "$T/amx.f32" \
		<"$M/ds3-awq.ids"
	[ "$status" -eq 0 ] || skip "no AMX here: $output"
	"$DS_BIN"/ds-convert --model-path "$T/hf-llama" --output-dir "$M/llama-q8" --quantize q8 \
		--quiet
	"$DS_BIN"/ds-convert --model-path "$T/hf-llama" --output-dir "$M/llama-q4g128" \
		--quantize q4 --group-size 128 --quiet
	for n in ds3-awq ds2-gptq llama-q8:llama llama-q4g128:llama; do
		m=${n%%:*} ids=${n##*:}
		for isa in amx avx512; do
			DS_ISA=$isa run "$DS_BIN"/ds-run -m "$M/$m" --ids -n 2 --temp 0 \
				--logits-out "$T/$m-$isa.f32" <"$M/$ids.ids"
			[ "$status" -eq 0 ]
		done
		[ -s "$T/$m-amx.f32" ]
		cmp "$T/$m-amx.f32" "$T/$m-avx512.f32"
	done
}
