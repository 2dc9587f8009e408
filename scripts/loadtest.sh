#!/bin/sh
# loadtest.sh - a bounded load test of ds-serve on loopback (not part of
# make test): for each --parallel value, a fresh server, CLIENTS concurrent
# clients sending streamed completions for SECONDS (scripts/loadtest.js),
# the server's RSS sampled every second.  Prints a markdown table: requests
# ok / failed / lost, generated tokens/s, time to first token p50/p99, RSS
# after 10 s, after 60 s and at the end.
#
# Usage: scripts/loadtest.sh [-m MODEL] [-c CLIENTS] [-d SECONDS]
#                            [-n MAX_TOKENS] [-p "1 4 8"] [-b BIN]
# Without -m, a small random llama (gen-fixture.py: 4 layers of 512, bf16)
# is generated and converted in a temporary directory.
set -eu
cd "$(dirname "$0")/.."
model="" clients=64 secs=60 ntok=64 pars="1 4 8" bin=bin
while getopts m:c:d:n:p:b: o; do
	case $o in
	m) model=$OPTARG ;;
	c) clients=$OPTARG ;;
	d) secs=$OPTARG ;;
	n) ntok=$OPTARG ;;
	p) pars=$OPTARG ;;
	b) bin=$OPTARG ;;
	*) sed -n '9,10p' "$0" >&2; exit 2 ;;
	esac
done
tmp=$(mktemp -d)
srv=""
trap '[ -n "$srv" ] && kill "$srv" 2>/dev/null; rm -rf "$tmp"' EXIT INT TERM
if [ -z "$model" ]; then
	/usr/bin/python3 scripts/gen-fixture.py --arch llama --layers 4 --hidden 512 \
		--ff 1536 --heads 8 --kv-heads 4 --vocab 268 --out "$tmp/src" >/dev/null
	"$bin/ds-convert" --model-path "$tmp/src" --output-dir "$tmp/m" --quiet
	model=$tmp/m
fi

rss_kib() { awk '/^VmRSS/ { print $2 }' "/proc/$1/status" 2>/dev/null || echo 0; }

echo "ds-serve load test: $clients clients, $secs s, $ntok tokens per request" \
	"(streamed, ignore_eos), model $model, $(nproc) CPUs, load average" \
	"$(cut -d' ' -f1-3 /proc/loadavg) at the start"
echo
echo "| --parallel | ok | failed | lost | tokens/s | TTFT p50 s | TTFT p99 s | latency p50 s | RSS 10 s MiB | RSS 60 s MiB | RSS end MiB |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
for p in $pars; do
	"$bin/ds-serve" -m "$model" --port 0 --parallel "$p" --queue "$clients" \
		--timeout 120 2>"$tmp/log" &
	srv=$!
	port=""
	while [ -z "$port" ]; do
		sleep 0.1
		port=$(sed -n 's|.*listening on http://127\.0\.0\.1:\([0-9]*\)/.*|\1|p' "$tmp/log")
	done
	until curl -sf -o /dev/null "http://127.0.0.1:$port/health"; do sleep 0.1; done
	: >"$tmp/rss"
	(while kill -0 "$srv" 2>/dev/null; do rss_kib "$srv" >>"$tmp/rss"; sleep 1; done) &
	sampler=$!
	node scripts/loadtest.js "http://127.0.0.1:$port" "$clients" "$secs" "$ntok" >"$tmp/out"
	kill "$sampler" 2>/dev/null || true
	kill -TERM "$srv"
	wait "$srv" || true
	srv=""
	/usr/bin/python3 - "$p" "$tmp/out" "$tmp/rss" <<'EOF'
import json, sys
r = json.load(open(sys.argv[2]))
rss = [int(x) / 1024 for x in open(sys.argv[3]).read().split() if x.strip()]
at = lambda i: "%.1f" % rss[min(i, len(rss) - 1)] if rss else "-"
print("| %s | %d | %d | %d | %.1f | %s | %s | %s | %s | %s | %s |" % (
    sys.argv[1], r["ok"], r["failed"], r["lost"], r["tokens_per_s"], r["ttft_p50"],
    r["ttft_p99"], r["latency_p50"], at(10), at(60), at(len(rss) - 1)))
if r["why"]:
    print("|  | failures: %s |" % json.dumps(r["why"]))
EOF
done
