#!/usr/bin/env bats
# chat-load.bats - the multi-turn load test of the prompt cache
# (scripts/loadtest-chat.sh), small: 4 conversations of 3 turns on the demo
# model.  The answers with and without the cache must be the same and
# every turn after the first must take the earlier turns from the cache;
# the times are shown, not judged (the full test, 16 x 10, judges them:
# docs/perf.md).

setup_file() {
	F=$(mktemp -d)
	export F
	"$DS_BIN/ds-convert" --model-path testdata/demo/awq --output-dir "$F/m" --quiet
}

teardown_file() {
	rm -rf "$F"
}

@test "4 conversations x 3 turns: the same answers, the history from the cache" {
	run scripts/loadtest-chat.sh -m "$F/m" -c 4 -t 3 -n 12 -T 1 -r 0 -b "$DS_BIN" -o "$F/out"
	echo "$output"
	[ "$status" -eq 0 ]
	[[ "$output" == *"greedy answers the same with and without the cache"* ]]
	[ "${lines[-1]}" = PASS ]
	# turn 3: the earlier turns came from the cache, not turn 3's message
	run /usr/bin/python3 - "$F/out/cache.json" "$F/out/nocache.json" <<'EOF'
import json, sys
c, n = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
assert all(x == 0 for x in n["cached_tokens"][2])
for p, k, p2 in zip(c["prompt_tokens"][2], c["cached_tokens"][2], c["prompt_tokens"][1]):
    assert p2 <= k < p, (p, k, p2)
print("ok")
EOF
	[ "$output" = ok ]
}
