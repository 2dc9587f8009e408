#!/usr/bin/env bats
# demo.bats - the trained demo model (testdata/demo, scripts/train-demo.py)
# through the pipeline: perplexity on the held-out text against the PyTorch
# reference's figures in perplexity.json (same ids, same windows), what
# `make demo` prints, and its chat prompt's ids against those train-demo.py
# encoded with SentencePiece (samples.json).

bats_require_minimum_version 1.5.0

setup_file() {
	: "${DS_BIN:=bin}"
	local t=$BATS_FILE_TMPDIR
	"$DS_BIN/ds-convert" --model-path testdata/demo --output-dir "$t/bf16" --quiet
	"$DS_BIN/ds-convert" --model-path testdata/demo/awq --output-dir "$t/q4" --quiet
}

setup() {
	: "${DS_BIN:=bin}"
	D=testdata/demo
	T=$BATS_FILE_TMPDIR
}

# ref KEY...: a value of perplexity.json
ref() {
	/usr/bin/python3 -c 'import json, sys
v = json.load(open(sys.argv[1]))
for k in sys.argv[2:]:
    v = v[k]
print(v)' "$D/perplexity.json" "$@"
}

# ppl MODEL REF_KEY PCT: ds-run's perplexity within PCT% of the reference's,
# with the same number of scored tokens
ppl() {
	local ctx want n
	ctx=$(ref ctx_size)
	want=$(ref "$2" perplexity)
	n=$(ref "$2" tokens)
	run -0 "$DS_BIN/ds-run" -m "$T/$1" --perplexity --ctx-size "$ctx" < "$D/heldout.ids"
	echo "ds-run: $output; PyTorch $2: $want over $n tokens"
	[[ $output =~ ^perplexity\ ([0-9.]+)\ tokens\ ([0-9]+)\ windows ]]
	[ "${BASH_REMATCH[2]}" = "$n" ]
	awk -v p="${BASH_REMATCH[1]}" -v r="$want" -v t="$3" \
		'BEGIN { d = p / r - 1; exit !(d <= t / 100 && d >= -t / 100) }'
}

@test "bf16 conversion: perplexity within 0.5% of PyTorch's on the same windows" {
	ppl bf16 bf16 0.5
}

@test "q4 (AWQ) conversion: within 10% of the AWQ-dequantized PyTorch model's" {
	ppl q4 awq_dequant 10
}

@test "the demo's greedy continuation: the same twice, printable English-looking text" {
	local a
	"$DS_BIN/ds-tok" -m "$T/q4" < "$D/prompt.txt" > "$T/prompt.ids"
	run -0 "$DS_BIN/ds-run" -m "$T/q4" -n 64 --temp 0 --repeat-penalty 1.3 < "$T/prompt.ids"
	a=$output
	run -0 "$DS_BIN/ds-run" -m "$T/q4" -n 64 --temp 0 --repeat-penalty 1.3 --threads 1 < "$T/prompt.ids"
	echo "$a"
	[ "$output" = "$a" ]
	! printf '%s' "$a" | LC_ALL=C grep -q '[^[:print:][:space:]]'
	# words, mostly letters and spaces
	[ "$(printf '%s' "$a" | wc -w)" -ge 30 ]
	[ "$(printf '%s' "$a" | tr -cd 'A-Za-z ' | wc -c)" -ge $((${#a} * 8 / 10)) ]
}

@test "the chat template's text encodes to train-demo.py's ids: BOS matched as a special token" {
	local want
	want=$(/usr/bin/python3 -c 'import json, sys
s = json.load(open(sys.argv[1]))[1]
assert s["prompt"] == "User: What do you think of Mr. Darcy?\n\nAssistant:"
print(" ".join(map(str, s["ids"])))' "$D/samples.json")
	run -0 bash -c "printf '<｜begin▁of▁sentence｜>User: What do you think of Mr. Darcy?\n\nAssistant:' |
		'$DS_BIN/ds-tok' -m '$T/q4' --no-bos"
	[ "$output" = "$want" ]
	# ds-run --chat renders the same prompt (the model's deepseek2 template)
	run -0 bash -c "echo 'What do you think of Mr. Darcy?' |
		'$DS_BIN/ds-run' -m '$T/q4' --chat -n 1 --jsonl"
	[[ $output == *'"prompt_tokens": 20,'* ]]
}

@test "special tokens' text in a SentencePiece model's input: cut out as Hugging Face does, or kept" {
	# python3-sentencepiece 0.1.97 on this tokenizer.model: encode('What ')
	# = [1367, 4018], encode(' x') = [4018, 4018, 4050], and
	# encode('What <unk> x') = [1367, 4018, 64, 733, 4042, 66, 4018, 4050];
	# Hugging Face's LlamaTokenizer (legacy) encodes the pieces between the
	# special tokens apart
	run -0 bash -c "printf 'What <unk> x' | '$DS_BIN/ds-tok' -m '$T/q4' --no-bos"
	[ "$output" = "1367 4018 2 4018 4018 4050" ]
	run -0 bash -c "printf 'What <unk> x' | '$DS_BIN/ds-tok' -m '$T/q4' --no-bos --no-special"
	[ "$output" = "1367 4018 64 733 4042 66 4018 4050" ]
}
