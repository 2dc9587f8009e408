#!/bin/sh
# bench-fp8-big.sh - ds-convert on a large synthetic FP8 checkpoint: its
# throughput and peak RSS (/usr/bin/time -v) beside cat of the same bytes.
# Usage: scripts/bench-fp8-big.sh BIN_DIR WORK_DIR [THREADS] [LAYERS]
#
# The checkpoint is DeepSeek-V3-shaped in what dominates its bytes (MoE
# layers of 64 experts of [1408, 2048], F8_E4M3 with 128x128 block scales,
# BF16 embeddings and head; random codes: gen-fixture.py --fast), in 16
# shards, written one tensor at a time. 14 layers (and the MTP layer) make
# 8.6 GB. It and its
# conversion are deleted at the end.
set -eu
bin=$1 work=$2 th=${3:-2} layers=${4:-14}
ck=$work/fp8-big out=$work/fp8-big-q8
rm -rf "$ck" "$out"
mkdir -p "$work"
t0=$(date +%s)
/usr/bin/python3 scripts/gen-fixture.py --arch deepseek_v3 --quant fp8 --fast \
	--hidden 2048 --heads 16 --ff 8192 --moe-ff 1408 --experts 64 \
	--vocab 32000 --layers "$layers" --shards 16 --out "$ck"
echo "generated in $(($(date +%s) - t0)) s" >&2
bytes=$(cat "$ck"/*.safetensors | wc -c)
largest=$(ls -l "$ck"/*.safetensors | awk '$5 > m { m = $5 } END { print m }')
sync
t0=$(date +%s.%N)
cat "$ck"/*.safetensors > /dev/null
cat_s=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { print b - a }')
/usr/bin/time -v "$bin/ds-convert" --quiet --threads "$th" --model-path "$ck" \
	--output-dir "$out" 2> "$work/time-v.txt"
"$bin/ds-convert" --verify "$out"
wall=$(awk -F': ' '/Elapsed \(wall clock\)/ { n = split($2, a, ":"); s = 0;
	for (i = 1; i <= n; i++) s = s * 60 + a[i]; print s }' "$work/time-v.txt")
cpu=$(awk -F': ' '/User time/ { u = $2 } /System time/ { s = $2 } END { print u + s }' "$work/time-v.txt")
rss=$(awk -F': ' '/Maximum resident set size/ { print $2 }' "$work/time-v.txt")
awk -v b="$bytes" -v c="$cat_s" -v w="$wall" -v p="$cpu" -v r="$rss" -v l="$largest" \
    -v t="$th" -v o="$(wc -c < "$out/model.bin")" 'BEGIN {
	printf "input %.2f GB in 16 shards (largest %.0f MB); model.bin %.2f GB (q8g32)\n", b / 1e9, l / 1e6, o / 1e9
	printf "cat (page cache as it was): %.1f s, %.0f MB/s\n", c, b / c / 1e6
	printf "ds-convert --threads %d: %.1f s wall, %.1f s CPU: %.0f MB/s, %.0f MB/s per CPU second\n", t, w, p, b / w / 1e6, b / p / 1e6
	printf "peak RSS %.0f MiB\n", r / 1024
}'
rm -rf "$ck" "$out"
