#!/bin/sh
# bench-kernels.sh - kernels against the read-bandwidth probe and the ISA's
# peak (ds-bench(1)); appends a section to bench/report.md.
# Usage: scripts/bench-kernels.sh BIN_DIR
set -eu
bin=${1:-bin}
{
	echo
	echo "## Kernels"
	echo
	echo '`ds-bench --kernels -t 1,2`'
	echo
	"$bin/ds-bench" --kernels -t 1,2
} >> bench/report.md
