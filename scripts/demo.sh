#!/bin/sh
# demo.sh - what `make demo` runs once the programs are built.
# Usage: scripts/demo.sh BIN_DIR
# Until the demo model exists, it generates a small DeepSeek-V3-shaped AWQ
# checkpoint, converts it and shows what the conversion wrote.
set -eu
bin=${1:-bin}
d=build/demo
mkdir -p "$d"
echo "demo: generating a small random DeepSeek-V3-shaped AWQ checkpoint in $d/ckpt"
rm -rf "$d/ckpt"
/usr/bin/python3 scripts/gen-fixture.py --arch deepseek_v3 --quant awq \
	--group-size 64 --shards 2 --out "$d/ckpt"
echo "demo: $bin/ds-convert --model-path $d/ckpt --output-dir $d/model --force"
"$bin/ds-convert" --model-path "$d/ckpt" --output-dir "$d/model" --force
"$bin/ds-convert" --verify "$d/model"
echo "demo: $bin/ds-convert --inspect $d/model"
"$bin/ds-convert" --inspect "$d/model" | head -n 16
echo "... ($(($("$bin/ds-convert" --inspect "$d/model" | wc -l) - 16)) more lines)"
