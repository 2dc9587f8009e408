#!/bin/sh
# loadtest-chat.sh - the prompt cache under a multi-turn load (not part of
# make test; tests/cli/chat-load.bats runs a small one): a fresh ds-serve
# with the prompt cache and one with --cache-ram 0, each given
# CONVERSATIONS conversations of TURNS turns at once
# (scripts/loadtest-chat.js: greedy, streamed, the whole conversation
# sent each turn).  Prints, per turn, the median time to first token with
# and without the cache, the median prompt and cached tokens; then checks
# that the answers are the same both ways and that with the cache the last
# turn's median time to first token is within RATIO (1.5) times the
# first's (exit 1 otherwise; -r 0 leaves the timing out of the verdict).
#
# Usage: scripts/loadtest-chat.sh -m MODEL [-M chat|ids] [-c CONVERSATIONS]
#            [-t TURNS] [-n MAX_TOKENS] [-p PARALLEL] [-x CTX] [-T THREADS]
#            [-r RATIO] [-b BIN] [-o OUTDIR]
# Defaults: chat, 16 conversations, 10 turns, 24 tokens an answer,
# --parallel as many as conversations, the model's context, every CPU.
# MODE ids sends token ids (/v1/completions): for a model without a
# tokenizer or template of its own (a synthetic one: copy a tokenizer.bin
# beside it so ds-serve starts).
set -eu
cd "$(dirname "$0")/.."
model="" mode=chat conv=16 turns=10 ntok=24 par="" ctx="" threads="" bin=bin outdir=""
ratio=1.5
while getopts m:M:c:t:n:p:x:T:r:b:o: o; do
	case $o in
	m) model=$OPTARG ;;
	M) mode=$OPTARG ;;
	c) conv=$OPTARG ;;
	t) turns=$OPTARG ;;
	n) ntok=$OPTARG ;;
	p) par=$OPTARG ;;
	x) ctx=$OPTARG ;;
	T) threads=$OPTARG ;;
	r) ratio=$OPTARG ;;
	b) bin=$OPTARG ;;
	o) outdir=$OPTARG ;;
	*) sed -n '13,17p' "$0" >&2; exit 2 ;;
	esac
done
[ -n "$model" ] || { sed -n '13,17p' "$0" >&2; exit 2; }
export LT_RATIO=$ratio
tmp=$(mktemp -d)
[ -n "$outdir" ] || outdir=$tmp
mkdir -p "$outdir"
srv=""
trap '[ -n "$srv" ] && kill "$srv" 2>/dev/null; rm -rf "$tmp"' EXIT INT TERM

# serve NAME [OPTIONS]: a server, the load, the server stopped
serve() {
	name=$1
	shift
	# shellcheck disable=SC2086
	"$bin/ds-serve" -m "$model" --port 0 --parallel "${par:-$conv}" \
		--queue "$conv" --timeout 600 ${ctx:+--ctx-size $ctx} \
		${threads:+--threads $threads} "$@" 2>"$outdir/$name.log" &
	srv=$!
	port=""
	while [ -z "$port" ]; do
		sleep 0.1
		kill -0 "$srv" 2>/dev/null || { cat "$outdir/$name.log" >&2; exit 1; }
		port=$(sed -n 's|.*listening on http://127\.0\.0\.1:\([0-9]*\)/.*|\1|p' "$outdir/$name.log")
	done
	until curl -sf -o /dev/null "http://127.0.0.1:$port/health"; do sleep 0.2; done
	node scripts/loadtest-chat.js "http://127.0.0.1:$port" "$mode" "$conv" "$turns" \
		"$ntok" "$outdir/$name.json" >"$outdir/$name.out"
	curl -s "http://127.0.0.1:$port/metrics" >"$outdir/$name.metrics"
	kill -TERM "$srv"
	wait "$srv" || true
	srv=""
}

echo "ds-serve multi-turn load: $conv conversations x $turns turns ($mode, greedy," \
	"$ntok tokens an answer, --parallel ${par:-$conv}), model $model, $(nproc) CPUs" \
	"($(sed -n 's/^model name[^:]*: //p' /proc/cpuinfo | head -1)), load average" \
	"$(cut -d' ' -f1-3 /proc/loadavg) at the start"
serve cache
serve nocache --cache-ram 0
/usr/bin/python3 - "$outdir/cache.json" "$outdir/nocache.json" "$outdir/cache.metrics" <<'EOF'
import json, os, statistics, sys
c, n = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
med = statistics.median
print()
print("| turn | prompt tokens | cached tokens | TTFT with the cache, s | TTFT without, s |")
print("| ---: | ---: | ---: | ---: | ---: |")
for t in range(c["turns"]):
    print("| %d | %d | %d | %.3f | %.3f |" % (t + 1, med(c["prompt_tokens"][t]),
          med(c["cached_tokens"][t]), med(c["ttft"][t]), med(n["ttft"][t])))
last = c["turns"] - 1
rc, rn = med(c["ttft"][last]) / med(c["ttft"][0]), med(n["ttft"][last]) / med(n["ttft"][0])
same = c["answers"] == n["answers"]
m = {l.split()[0]: l.split()[1] for l in open(sys.argv[3]) if l.startswith("ds_prompt_cache")}
print()
print("turn %d / turn 1 median TTFT: %.2fx with the cache, %.2fx without; wall %.1f s "
      "with, %.1f s without" % (last + 1, rc, rn, c["wall"], n["wall"]))
print("/metrics: %s cache hits, %s prompt tokens taken from the cache" % (
      m.get("ds_prompt_cache_hits_total"), m.get("ds_prompt_cache_tokens_total")))
print("greedy answers %s with and without the cache" % ("the same" if same else "DIFFER"))
ratio = float(os.environ["LT_RATIO"])
ok = same and (ratio == 0 or rc <= ratio) and \
    all(x > 0 for t in c["cached_tokens"][1:] for x in t)
print("PASS" if ok else "FAIL")
sys.exit(0 if ok else 1)
EOF
