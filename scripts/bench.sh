#!/bin/sh
# bench.sh - the benchmark suite behind `make bench`; writes bench/report.md.
# Usage: scripts/bench.sh BIN_DIR
set -eu
bin=${1:-bin}
mkdir -p bench
{
	echo "# ds benchmark report"
	echo
	echo "$(date -u '+%Y-%m-%d %H:%M UTC') on $(uname -n), $(nproc) CPUs"
} > bench/report.md
scripts/bench-convert.sh "$bin"
echo "bench: wrote bench/report.md"
