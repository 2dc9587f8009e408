#!/bin/sh
# demo.sh - what `make demo` runs once the programs are built.
# Usage: scripts/demo.sh BIN_DIR
set -eu
bin=${1:-bin}
echo "demo: the programs are built in $bin/; the demo model comes with ds-convert."
