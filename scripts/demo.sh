#!/bin/sh
# demo.sh - what `make demo` runs once the programs are built: convert the
# shipped demo model (testdata/demo/awq: a 7.3M-parameter DeepSeek-V2 model
# trained on Jane Austen, AWQ INT4) and run the pipeline on it.
# Usage: scripts/demo.sh BIN_DIR [--chat]
#   default  ds-tok | ds-run on testdata/demo/prompt.txt, then the tokens/s
#   --chat   a few user lines through ds-run --chat (the model's template)
# Greedy with a repeat penalty gives the most English-looking continuation
# (plain greedy loops on "the same, and"); the chat answers are sampled with
# a fixed seed, since greedy answers every question with the same opening.
set -eu
bin=${1:-bin}
mode=${2:-}
src=testdata/demo/awq
m=build/demo/model
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ds-demo.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM

say() { printf 'demo: %s\n' "$*"; }

# The tokens/s line of ds-run --verbose (on stderr), or all of stderr and a
# failure if ds-run did not succeed.
report() {
	if [ "$1" != 0 ] || [ -e "$tmp/fail" ]; then
		cat "$tmp/err" >&2
		say "failed" >&2
		exit 1
	fi
	grep 'tokens/s' "$tmp/err" | sed 's/^ds-run: /demo: ds-run --verbose: /'
}

say "the demo model: $src (deepseek_v2, 7.3M parameters, trained on Jane" \
	"Austen; AWQ INT4, group 64; see testdata/demo/README.md)"
say "$bin/ds-convert --model-path $src --output-dir $m --force"
mkdir -p build/demo
"$bin/ds-convert" --model-path "$src" --output-dir "$m" --force

if [ "$mode" = --chat ]; then
	opts="--chat -n 48 --temp 0.5 --seed 3 --repeat-penalty 1.2"
	say "each line one user message, single-turn (a terminal on stdin would" \
		"make them one conversation):"
	say "$bin/ds-run -m $m $opts -p LINE --verbose"
	echo
	for q in "What do you think of Mr. Darcy?" \
		"Shall we walk to Meryton this morning?" \
		"Are you fond of dancing?"; do
		printf 'User: %s\nAssistant: ' "$q"
		rc=0
		# shellcheck disable=SC2086
		"$bin/ds-run" -m "$m" $opts -p "$q" --verbose 2>"$tmp/err" || rc=$?
		report "$rc"
		echo
	done
	exit 0
fi

opts="-n 64 --temp 0 --repeat-penalty 1.3"
say "$bin/ds-tok -m $m < testdata/demo/prompt.txt |" \
	"$bin/ds-run -m $m $opts --verbose"
echo
printf '%s ' "$(cat testdata/demo/prompt.txt)"
rc=0
# shellcheck disable=SC2086
{ "$bin/ds-tok" -m "$m" < testdata/demo/prompt.txt || : > "$tmp/fail"; } |
	"$bin/ds-run" -m "$m" $opts --verbose 2>"$tmp/err" || rc=$?
echo
report "$rc"
