#!/usr/bin/env bats
# spec.bats - speculative decoding through ds-run (--spec): greedy output
# with each drafter is plain greedy output, ids and every logits row, on
# every golden model and the fixtures (each architecture, AWQ and GPTQ),
# one request at a time and with --parallel; sampled runs are
# reproducible whatever runs beside them; the demo model's MTP module
# drafts and is kept often; the refusals.  (The sampled distribution is
# tested in tests/unit/test_spec.c, where thousands of seeds are cheap.)

bats_require_minimum_version 1.5.0

load_lib() {
	: "${DS_BIN:=bin}"
	G=testdata/golden
	T=$BATS_FILE_TMPDIR
	M=$T/m
}

# gen NAME SEED gen-fixture-options...: a random checkpoint, converted to
# $M/NAME
gen() {
	local n=$1 seed=$2
	shift 2
	/usr/bin/python3 scripts/gen-fixture.py --out "$T/hf-$n" --seed "$seed" "$@" >/dev/null
	"$DS_BIN"/ds-convert --model-path "$T/hf-$n" --output-dir "$M/$n" --quiet
}

setup_file() {
	load_lib
	mkdir -p "$M"
	gen llama 1 --arch llama
	gen llama-b 11 --arch llama
	gen llama-pad 12 --arch llama --vocab 448
	gen qwen2 2 --arch qwen2 --tie
	gen ds2-lite 3 --arch deepseek_v2 --q-lora-rank null
	gen ds3-awq 4 --arch deepseek_v3 --quant awq --group-size 32
	gen ds2-gptq 5 --arch deepseek_v2 --q-lora-rank 64 --topk-method group_limited_greedy \
		--quant gptq --bits 4 --desc-act --group-size 32
	for d in "$G"/*/; do
		"$DS_BIN"/ds-convert --model-path "$d" --output-dir "$M/golden-$(basename "$d")" --quiet
	done
	"$DS_BIN"/ds-convert --model-path testdata/demo/awq --output-dir "$M/demo-q4" --quiet
	"$DS_BIN"/ds-convert --model-path testdata/demo --output-dir "$M/demo-bf16" --quiet
}

setup() {
	load_lib
}

# prompts MODEL: four prompts of the model's vocabulary, one repeating
# itself (n-gram drafts), one of a single id
prompts() {
	/usr/bin/python3 -c 'import json, random, sys
v = json.load(open(sys.argv[1]))["hparams"]["n_vocab"]
r = random.Random(7)
a = [r.randrange(v) for _ in range(9)]
print(" ".join(map(str, a + a + a[:4])))
print(" ".join(str(r.randrange(v)) for _ in range(17)))
print(r.randrange(v))
print(" ".join(str(r.randrange(v)) for _ in range(30)))' "$1/model.meta"
}

# same MODEL PARALLEL SPEC-OPTIONS...: greedy with a repetition penalty,
# ids and logits rows byte for byte as without a drafter
same() {
	local m=$1 par=$2
	shift 2
	prompts "$m" >"$T/in.ids"
	"$DS_BIN"/ds-run -m "$m" --ids -n 24 --temp 0 --repeat-penalty 1.1 --parallel "$par" \
		--logits-out "$T/a.f32" <"$T/in.ids" >"$T/a.ids"
	run --separate-stderr "$DS_BIN"/ds-run -m "$m" --ids -n 24 --temp 0 --repeat-penalty 1.1 \
		--parallel "$par" --logits-out "$T/b.f32" --verbose "$@" <"$T/in.ids"
	[ "$status" -eq 0 ]
	printf '%s\n' "$output" >"$T/b.ids"
	echo "$(basename "$m") --parallel $par $*: $(grep 'spec:' <<<"$stderr")" >&3
	[[ "$stderr" == *"spec: drafted "* ]]
	cmp "$T/a.ids" "$T/b.ids"
	cmp "$T/a.f32" "$T/b.f32"
}

@test "greedy --spec ngram: plain greedy's ids and logits, every model, --parallel 1 and 3" {
	for m in "$M"/*/; do
		[ "$(basename "$m")" = llama-pad ] && continue
		same "${m%/}" 1 --spec ngram
		same "${m%/}" 3 --spec ngram --spec-k 3
	done
}

@test "greedy --spec draft: plain greedy's ids and logits (drafts kept and rejected)" {
	# a model drafting for itself (every draft kept), another of the same
	# vocabulary (most rejected), one whose vocabulary is padded further
	# (the same tokenizer, as R1-Distill-Qwen 1.5B's beside 7B's)
	same "$M/llama" 1 --spec draft --draft "$M/llama"
	same "$M/llama" 3 --spec draft --draft "$M/llama-b"
	same "$M/llama" 2 --spec draft --draft "$M/llama-pad" --spec-k 4
	same "$M/ds2-lite" 2 --spec draft --draft "$M/ds2-lite" --spec-k 5
	same "$M/demo-bf16" 1 --spec draft --draft "$M/demo-q4"
	same "$M/demo-bf16" 3 --spec draft --draft "$M/demo-q4" --spec-k 2
}

@test "greedy --spec mtp: plain greedy's ids and logits (the demo's module, ds3's random one)" {
	for m in "$M/demo-q4" "$M/demo-bf16" "$M/golden-ds3" "$M/golden-ds3-awq"; do
		same "$m" 1 --spec mtp
		same "$m" 3 --spec mtp --spec-k 4
	done
}

@test "sampled --spec: the same tokens whatever --parallel and --threads, per seed" {
	m=$M/demo-q4
	prompts "$m" >"$T/in.ids"
	for s in "ngram" "mtp" "draft --draft $M/demo-bf16"; do
		# shellcheck disable=SC2086
		"$DS_BIN"/ds-run -m "$m" --ids -n 20 --temp 0.9 --seed 5 --spec $s <"$T/in.ids" >"$T/a"
		# shellcheck disable=SC2086
		"$DS_BIN"/ds-run -m "$m" --ids -n 20 --temp 0.9 --seed 5 --spec $s --parallel 3 \
			--threads 1 <"$T/in.ids" >"$T/b"
		cmp "$T/a" "$T/b"
	done
}

@test "the demo's MTP module: over 0.6 of its drafts kept, greedy, demo prompt" {
	ids=$("$DS_BIN"/ds-tok -m "$M/demo-q4" <testdata/demo/prompt.txt)
	for pen in 1.0 1.3; do
		run --separate-stderr "$DS_BIN"/ds-run -m "$M/demo-q4" --ids -n 128 --temp 0 \
			--repeat-penalty $pen --spec mtp --spec-k 1 --verbose <<<"$ids"
		[ "$status" -eq 0 ]
		line=$(grep 'spec:' <<<"$stderr")
		echo "repeat penalty $pen: $line" >&3
		[[ $line =~ accepted\ [0-9]+\ \(([0-9.]+)\) ]]
		awk -v a="${BASH_REMATCH[1]}" 'BEGIN { exit !(a >= 0.6) }'
	done
}

@test "refusals: a drafter's name, --draft without --spec draft, another vocabulary, no MTP module" {
	run "$DS_BIN"/ds-run -m "$M/llama" --spec eagle <<<"1 2"
	[ "$status" -eq 2 ]
	[[ "$output" == *"--spec eagle: not a drafter (mtp, ngram or draft)"* ]]
	run "$DS_BIN"/ds-run -m "$M/llama" --spec draft <<<"1 2"
	[ "$status" -eq 2 ]
	run "$DS_BIN"/ds-run -m "$M/llama" --draft "$M/llama" <<<"1 2"
	[ "$status" -eq 2 ]
	run "$DS_BIN"/ds-run -m "$M/llama" --spec-k 3 <<<"1 2"
	[ "$status" -eq 2 ]
	run "$DS_BIN"/ds-run -m "$M/llama" --spec ngram --spec-k 17 <<<"1 2"
	[ "$status" -eq 2 ]
	run "$DS_BIN"/ds-run -m "$M/llama" --ids -n 2 --spec draft --draft "$M/demo-q4" <<<"1 2"
	[ "$status" -eq 1 ]
	[[ "$output" == *"$M/demo-q4"*"vocabulary"* ]]
	run "$DS_BIN"/ds-run -m "$M/llama" --ids -n 2 --spec mtp <<<"1 2"
	[ "$status" -eq 1 ]
	[[ "$output" == *"no multi-token-prediction module"* ]]
	run "$DS_BIN"/ds-run -m "$M/llama" --perplexity --spec ngram <<<"1 2 3 4"
	[ "$status" -eq 2 ]
}
