#!/bin/sh
# bench-model.sh - whole models on this machine (ds-bench(1) --synthetic):
# TinyLlama-1.1B at q4 and q8 and DeepSeek-V2-Lite at q4, full depth,
# prefill 512 and decode 128 tokens with 1 and 2 threads; appends a
# section to bench/report.md.  DeepSeek-V2-Lite (about 9 GiB) is skipped
# with a note when the memory or the disk under TMPDIR cannot hold it
# (ds-bench checks both before writing anything).
# Usage: scripts/bench-model.sh BIN_DIR
# Environment: BENCH_REPS (repetitions, default 3).
set -eu
bin=${1:-bin}
reps=${BENCH_REPS:-3}
out=bench/report.md
err=$(mktemp)
trap 'rm -f "$err"' EXIT INT TERM

# run TITLE ARGS...: one ds-bench table, or the reason it did not run
run() {
	title=$1
	shift
	{
		echo
		echo "### $title"
		echo
		echo "\`ds-bench $* -p 512 -n 128 -t 1,2 -r $reps\`, load before: $(uptime | sed 's/.*load average/load average/')"
		echo
	} >> "$out"
	if nice -n 10 "$bin/ds-bench" "$@" -p 512 -n 128 -t 1,2 -r "$reps" >> "$out" 2>"$err"; then
		echo "load after: $(uptime | sed 's/.*load average/load average/')" >> "$out"
	else
		echo "skipped: $(tail -n 1 "$err")" >> "$out"
	fi
}

{
	echo
	echo "## Models"
	echo
	echo "Random weights of the published shapes (ds-bench --synthetic);"
	echo "decode GB/s = weight bytes read per token x tokens/s, \"of probe\" its"
	echo "ratio to the read probe at the same threads in the same process;"
	echo "prefill GOP/s = 2 x active parameters x tokens/s, \"of peak\" its ratio"
	echo "to the int8 dot-product peak.  $(free -g | awk '/^Mem/ {print $7}') GiB available, $(nproc) CPUs."
} >> "$out"
run "TinyLlama-1.1B, q4 (q4g32)" --synthetic tinyllama-1.1b --type q4
run "TinyLlama-1.1B, q8 (q8g32)" --synthetic tinyllama-1.1b --type q8
run "DeepSeek-V2-Lite, q4 (q4g32), 27 layers" --synthetic deepseek-v2-lite --type q4
