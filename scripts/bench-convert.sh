#!/bin/sh
# bench-convert.sh - ds-convert throughput, beside plain copies of the same
# bytes in the same run; appends a section per checkpoint to
# bench/report.md.
# Usage: scripts/bench-convert.sh BIN_DIR
#
# The checkpoints are generated once under bench/ (git-ignored) and kept:
# about 1 GB of a Llama-shaped AWQ GEMM model (g128, random packed words)
# and 0.84 GB of DeepSeek's FP8 (two V3-like layers, 64 experts of [1408,
# 2048] with 128x128 block scales, random codes; scripts/bench-fp8-big.sh
# is the same shape at 8.6 GB).
set -eu
bin=${1:-bin}
dir=bench/convert
mkdir -p "$dir"

# gen NAME ARGS: the checkpoint $dir/NAME, made again when ARGS changed
gen() {
	ck=$dir/$1
	shift
	if [ "$(cat "$ck.args" 2>/dev/null)" != "$*" ]; then
		echo "bench-convert: generating $ck" >&2
		rm -rf "$ck" "$ck.args"
		# shellcheck disable=SC2068
		/usr/bin/python3 scripts/gen-fixture.py $@ --out "$ck"
		echo "$*" > "$ck.args"
	fi
}

mb() { awk -v b="$bytes" -v s="$1" 'BEGIN { printf "%.0f", b / s / 1e6 }'; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b - a }'; }
now() { date +%s.%N; }

# timed CMD...: "wall-seconds cpu-seconds maxrss-KiB"
timed() {
	/usr/bin/time -f "%e %U %S %M" -o "$dir/time.txt" "$@"
	awk '{ printf "%s %.2f %s\n", $1, $2 + $3, $4 }' "$dir/time.txt"
}
row() { # WHAT WALL CPU RSS
	printf '| %s | %s | %s | %s | %s | %s |\n' "$1" "$2" "$(mb "$2")" "$3" \
		"$(mb "$3")" "${4:+$(($4 / 1024)) MiB}"
}
# one destination: disk (beside the checkpoint) or memory (/dev/shm)
bench_at() { # LABEL DIR
	rm -rf "$2/ds-bench-copy" "$2/ds-bench-out"
	set -- "$1" "$2" $(timed sh -c "cp -r '$ck' '$2/ds-bench-copy' && sync")
	row "cp -r + sync, $1" "$3" "$4" ""
	rm -rf "$2/ds-bench-copy"
	for th in 1 2; do
		sync
		set -- "$1" "$2" $(timed "$bin/ds-convert" --quiet --threads $th \
			--model-path "$ck" --output-dir "$2/ds-bench-out")
		row "ds-convert --threads $th, $1" "$3" "$4" "$5"
		out=$(wc -c < "$2/ds-bench-out/model.bin")
		"$bin/ds-convert" --verify "$2/ds-bench-out" > /dev/null
		rm -rf "$2/ds-bench-out"
	done
}

# section TITLE WHAT: the table for checkpoint $ck
section() {
	bytes=$(cat "$ck"/*.safetensors | wc -c)
	cat "$ck"/*.safetensors > /dev/null # into the page cache for everyone
	t0=$(now); cat "$ck"/*.safetensors > /dev/null; t1=$(now)
	cat_s=$(secs "$t0" "$t1")
	echo
	echo "## ds-convert: $1 throughput"
	echo
	echo "Input: $bytes bytes of safetensors ($ck: $2), read from the page"
	echo "cache. MB/s are of input bytes per wall second and per CPU second"
	echo "(user + system); every row comes from the same run. ds-convert"
	echo "includes its fsync, as cp its sync."
	echo
	echo "| what | wall s | MB/s | CPU s | MB/s per CPU s | peak RSS |"
	echo "| --- | ---: | ---: | ---: | ---: | ---: |"
	echo "| cat > /dev/null | $cat_s | $(mb "$cat_s") | | | |"
	bench_at disk "$dir"
	free=$(df -k /dev/shm 2>/dev/null | awk 'NR == 2 { print $4 }')
	if [ "${free:-0}" -gt $((3 * bytes / 1024)) ]; then
		bench_at "/dev/shm" /dev/shm
	fi
	echo
	echo "model.bin: $out bytes. Command: \`scripts/bench-convert.sh $bin\`"
	echo "(part of \`make bench\`)."
}

gen ckpt-awq --arch llama --quant awq --fast --group-size 128 --dtype f16 \
	--hidden 4096 --ff 11008 --heads 32 --kv-heads 8 --vocab 8192 --layers 10 \
	--shards 4
gen ckpt-fp8 --arch deepseek_v3 --quant fp8 --fast --hidden 2048 --heads 16 \
	--ff 8192 --moe-ff 1408 --experts 64 --vocab 32000 --layers 2 --mtp none \
	--shards 4
{
	ck=$dir/ckpt-awq
	section "AWQ GEMM -> q4g128" "10 Llama-7B-shaped layers plus f16 embeddings"
	ck=$dir/ckpt-fp8
	section "DeepSeek FP8 -> q8g32 (the default)" "a dense and an MoE layer of
64 experts of [1408, 2048], F8_E4M3 with 128x128 block scales, BF16
embeddings and head"
} >> bench/report.md
echo "bench-convert: appended to bench/report.md" >&2
