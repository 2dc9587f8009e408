#!/usr/bin/env bats
# ds-tok.bats - the ds-tok command line: options, stream formats, exit codes.
# Conformance of the ids themselves is tests/unit/test_tokgolden.c; here the
# expected ids come from the same SentencePiece golden files.

setup() {
	DS_BIN=${DS_BIN:-bin}
	SP=testdata/tok/sp/bpe.model
	V3=testdata/cache/hf/v3/tokenizer.json
	T=$(mktemp -d)
}

teardown() {
	rm -rf "$T"
}

# text and SentencePiece's ids of corpus case NAME for model M
corpus_text() {
	/usr/bin/python3 -c 'import json,sys
for l in open("testdata/tok/corpus.jsonl"):
    c = json.loads(l)
    if c["name"] == sys.argv[1]: sys.stdout.write(c["text"])' "$1"
}
golden_ids() {
	/usr/bin/python3 -c 'import json,sys
names = [json.loads(l)["name"] for l in open("testdata/tok/corpus.jsonl")]
g = [json.loads(l) for l in open("testdata/tok/sp-%s.jsonl" % sys.argv[1])]
print(" ".join(map(str, g[names.index(sys.argv[2])]["ids"])))' "$1" "$2"
}

@test "ds-tok -h prints the usage to stdout and exits 0" {
	run "$DS_BIN/ds-tok" -h
	[ "$status" -eq 0 ]
	[ "${lines[0]}" = "usage: ds-tok (-m DIR | -t FILE) [-l] [--bos|--no-bos] [--no-special] [--pieces] [--count] [-d]" ]
	[ "${lines[1]}" = "       ds-tok (-m DIR | -t FILE) --chat [--render] [-l] [--pieces] [--count]" ]
}

@test "ds-tok --version prints the version" {
	run "$DS_BIN/ds-tok" --version
	[ "$status" -eq 0 ]
	[[ "$output" == "ds-tok "[0-9]* ]]
}

@test "usage errors exit 2: no tokenizer, both, an unknown flag, --pieces with --count" {
	run "$DS_BIN/ds-tok"
	[ "$status" -eq 2 ]
	run "$DS_BIN/ds-tok" -m "$T" -t "$SP"
	[ "$status" -eq 2 ]
	run "$DS_BIN/ds-tok" -t "$SP" --bogus
	[ "$status" -eq 2 ]
	run "$DS_BIN/ds-tok" -t "$SP" --pieces --count
	[ "$status" -eq 2 ]
}

@test "a missing or unreadable tokenizer exits 1 with one message" {
	run "$DS_BIN/ds-tok" -t "$T/nope.json"
	[ "$status" -eq 1 ]
	[[ "$output" == "ds-tok: "*"nope.json"* ]]
	run "$DS_BIN/ds-tok" -m "$T"
	[ "$status" -eq 1 ]
	[[ "$output" == *"tokenizer.bin"* ]]
	echo "not a tokenizer" > "$T/x.json"
	run "$DS_BIN/ds-tok" -t "$T/x.json"
	[ "$status" -eq 1 ]
}

@test "encode: all of stdin is one text, ids on one line, as SentencePiece gives them" {
	corpus_text c > "$T/in"
	run sh -c "'$DS_BIN/ds-tok' -t $SP < '$T/in'"
	[ "$status" -eq 0 ]
	[ "$output" = "$(golden_ids bpe c)" ]
	[ "${#lines[@]}" -eq 1 ]
}

@test "-l: one text per line, one line of ids each" {
	printf 'hello world\n\nsecond line\n' > "$T/in"
	run sh -c "'$DS_BIN/ds-tok' -t $SP -l < '$T/in'"
	[ "$status" -eq 0 ]
	[ "${#output}" -gt 0 ]
	a=$(printf 'hello world' | "$DS_BIN/ds-tok" -t $SP)
	b=$(printf 'second line' | "$DS_BIN/ds-tok" -t $SP)
	[ "$output" = "$(printf '%s\n\n%s' "$a" "$b")" ]
}

@test "empty input gives an empty line; -l on empty input gives nothing" {
	run sh -c "'$DS_BIN/ds-tok' -t $SP < /dev/null | od -c | head -1"
	[ "$output" = "0000000  \\n" ]
	run sh -c "'$DS_BIN/ds-tok' -t $SP -l < /dev/null | wc -c"
	[ "$output" -eq 0 ]
}

@test "--pieces prints id TAB piece per token; --count the number" {
	run sh -c "printf 'hello world' | '$DS_BIN/ds-tok' -t $SP --pieces"
	[ "$status" -eq 0 ]
	ids=$(printf 'hello world' | "$DS_BIN/ds-tok" -t $SP)
	[ "$(echo "$output" | cut -f1 | tr '\n' ' ' | sed 's/ $//')" = "$ids" ]
	[[ "${lines[0]}" == [0-9]*$'\t'"▁"* ]]
	run sh -c "printf 'hello world' | '$DS_BIN/ds-tok' -t $SP --count"
	[ "$output" -eq "$(echo "$ids" | wc -w)" ]
}

@test "-d decodes id lines back to text as SentencePiece does" {
	corpus_text prose > "$T/in"
	"$DS_BIN/ds-tok" -t $SP < "$T/in" > "$T/ids"
	run sh -c "'$DS_BIN/ds-tok' -t $SP -d < '$T/ids'"
	[ "$status" -eq 0 ]
	[ "$output" = "$(cat "$T/in")" ]
}

@test "-d: an id outside the vocabulary is named with its line and position, exit 1" {
	printf '5 6\n5 999999 7\n' > "$T/ids"
	run sh -c "'$DS_BIN/ds-tok' -t $SP -d < '$T/ids'"
	[ "$status" -eq 1 ]
	[[ "$output" == *"ds-tok: line 2: position 2: token 999999 is outside the vocabulary"* ]]
	printf '5 x\n' > "$T/ids"
	run sh -c "'$DS_BIN/ds-tok' -t $SP -d < '$T/ids'"
	[ "$status" -eq 1 ]
	[[ "$output" == *"line 1"*"not a token id"* ]]
}

@test "BOS as tokenizer_config.json says, --bos and --no-bos override" {
	cp $SP "$T/tokenizer.model"
	printf '{"add_bos_token": true, "bos_token": "<s>"}' > "$T/tokenizer_config.json"
	plain=$(printf 'hello' | "$DS_BIN/ds-tok" -t $SP)
	run sh -c "printf hello | '$DS_BIN/ds-tok' -t '$T/tokenizer.model'"
	[ "$output" = "1 $plain" ]
	run sh -c "printf hello | '$DS_BIN/ds-tok' -t '$T/tokenizer.model' --no-bos"
	[ "$output" = "$plain" ]
	run sh -c "printf hello | '$DS_BIN/ds-tok' -t $SP --bos"
	[ "$output" = "1 $plain" ]
}

@test "invalid UTF-8 never fails: SentencePiece's U+FFFD per bad byte" {
	run sh -c "printf 'caf\\351 ok' | '$DS_BIN/ds-tok' -t $SP"
	[ "$status" -eq 0 ]
	[ -n "$output" ]
}

@test "DeepSeek-V3: special tokens match as added tokens unless --no-special" {
	scripts/ref/fetch-npm.sh >&2
	[ -f "$V3" ]
	run sh -c "printf '<｜User｜>hi' | '$DS_BIN/ds-tok' -t $V3"
	[ "$status" -eq 0 ]
	[ "$output" = "0 128803 6366" ]
	# <｜User｜> is not a special token in V3's file: it matches even so;
	# <｜end▁of▁sentence｜> is one
	run sh -c "printf '<｜User｜>hi<｜end▁of▁sentence｜>' | '$DS_BIN/ds-tok' -t $V3 --no-bos"
	[ "$output" = "128803 6366 1" ]
	run sh -c "printf '<｜User｜>hi<｜end▁of▁sentence｜>' | '$DS_BIN/ds-tok' -t $V3 --no-special --no-bos"
	[[ "$output" == "128803 6366 "* ]]
	[[ " $output " != *" 1 "* ]]
	run sh -c "echo '0 128803 6366' | '$DS_BIN/ds-tok' -t $V3 -d"
	[ "$output" = "<｜begin▁of▁sentence｜><｜User｜>hi" ]
	run sh -c "echo '0 128803 6366' | '$DS_BIN/ds-tok' -t $V3 -d --no-special"
	[ "$output" = "<｜User｜>hi" ]
}

@test "ds-convert writes DST/tokenizer.bin and the meta's tokenizer keys; -m reads it" {
	/usr/bin/python3 scripts/gen-fixture.py --arch llama --out "$T/ckpt" >/dev/null
	run "$DS_BIN/ds-convert" --model-path "$T/ckpt" --output-dir "$T/m" --quiet
	[ "$status" -eq 0 ]
	[ -f "$T/m/tokenizer.bin" ]
	run /usr/bin/python3 -c 'import json, sys, zlib
m = json.load(open(sys.argv[1] + "/model.meta"))
t = m["tokenizer"]
b = open(sys.argv[1] + "/tokenizer.bin", "rb").read()
assert t["file"] == "tokenizer.bin" and t["source"] == "tokenizer.json", t
assert t["type"] == "bpe-bytelevel" and t["add_bos"] is True, t
assert t["bos"] == 256 and t["eos"] == 257 and t["eot"] == 257, t
assert t["bos_token"] == "<｜begin▁of▁sentence｜>", t
assert t["size"] == len(b) and t["crc32"] == "%08x" % zlib.crc32(b), t
assert m["chat_template"] == "deepseek3", m.get("chat_template")
print("ok")' "$T/m"
	[ "$output" = "ok" ]
	printf 'the cat sat<｜end▁of▁sentence｜>' > "$T/in"
	a=$("$DS_BIN/ds-tok" -m "$T/m" < "$T/in")
	b=$("$DS_BIN/ds-tok" -t "$T/ckpt/tokenizer.json" < "$T/in")
	[ "$a" = "$b" ]
	[[ "$a" == "256 "*" 257" ]]
	run sh -c "echo '$a' | '$DS_BIN/ds-tok' -m '$T/m' -d"
	[ "$output" = "<｜begin▁of▁sentence｜>the cat sat<｜end▁of▁sentence｜>" ]
}
