#!/bin/sh
# bench.sh - the benchmark suite behind `make bench`; writes bench/report.md.
# Usage: scripts/bench.sh BIN_DIR
# Each area has its own scripts/bench-<area>.sh that appends a section to
# bench/report.md; they run in the order below.
set -eu
bin=${1:-bin}
mkdir -p bench
{
	echo "# ds benchmark report"
	echo
	echo "$(date -u '+%Y-%m-%d %H:%M UTC') on $(uname -n), $(nproc) CPUs"
} > bench/report.md
for area in tok convert kernels model; do
	s=scripts/bench-$area.sh
	[ -x "$s" ] && "$s" "$bin"
done
echo "bench: wrote bench/report.md"
