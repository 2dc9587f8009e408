#!/usr/bin/env bats
# ds-serve.bats - the server over HTTP on a free loopback port: every
# endpoint, streams, every error status, the API key, cancellation by a
# client that leaves, continuous batching, graceful shutdown, the official
# OpenAI client for Node, and two instances behind nginx.
#
# References independent of the server: ds-run's ids for the same prompt
# (greedy), the same requests sent one at a time (concurrency), Prometheus'
# own parser (python3-prometheus-client) for /metrics, OpenAI's client
# (npm "openai", pinned by scripts/fetch-openai.sh) for the API's shapes.

bats_require_minimum_version 1.5.0

PY=/usr/bin/python3

setup_file() {
	F=$(mktemp -d /dev/shm/ds-serve-bats.XXXXXX 2>/dev/null || mktemp -d)
	export F
	$PY scripts/gen-fixture.py --arch llama --out "$F/src" >/dev/null
	"$DS_BIN/ds-convert" --model-path "$F/src" --output-dir "$F/m" --quiet
}

teardown_file() {
	rm -rf "$F"
}

setup() {
	T=$F/t$BATS_TEST_NUMBER
	mkdir -p "$T"
	PIDS=""                 # killed at the end
	SERVERS=""              # stopped with SIGTERM: each must exit 0
	N=0
}

teardown() {
	local p st bad=0
	for p in $PIDS; do kill -KILL "$p" 2>/dev/null || true; done
	for p in $SERVERS; do
		kill -0 "$p" 2>/dev/null || continue
		kill -TERM "$p"         # then INT: drain nothing (a test may
		kill -INT "$p"          # have failed with requests running)
		st=0
		wait "$p" || st=$?
		# the sanitized build's reports end the server with another status
		[ "$st" -eq 0 ] || { echo "ds-serve $p exited $st"; cat "$T"/*.log; bad=1; }
	done
	wait 2>/dev/null || true
	rm -rf "$T"
	return $bad
}

# ---- helpers -------------------------------------------------------------------

# start [ARGS...]: ds-serve on a free loopback port (--port 0), its model
# loaded; PID, PORT, URL, LOG.  One forward thread: the tiny model needs no
# more, and the long requests some tests run leave a core to the rest.
start() {
	N=$((N + 1))
	LOG=$T/serve.$N.log
	"$DS_BIN/ds-serve" -m "${MODEL:-$F/m}" --port 0 --threads 1 "$@" 2>"$LOG" 3>&- &
	PID=$!
	SERVERS="$SERVERS $PID"
	wait_port && wait_code /health 200
}

wait_port() {
	local i
	PORT=
	for i in $(seq 200); do
		PORT=$(sed -n 's|.*listening on http://127\.0\.0\.1:\([0-9]*\)/.*|\1|p' "$LOG")
		[ -n "$PORT" ] && break
		kill -0 "$PID" 2>/dev/null || { cat "$LOG"; return 1; }
		sleep 0.05
	done
	[ -n "$PORT" ] || return 1
	URL=http://127.0.0.1:$PORT
}

# wait_code PATH CODE: until GET PATH answers CODE (10 s)
wait_code() {
	local i
	for i in $(seq 200); do
		[ "$(curl -s -o /dev/null -w '%{http_code}' "$URL$1")" = "$2" ] && return 0
		sleep 0.05
	done
	echo "GET $1 never answered $2"
	return 1
}

# post PATH BODY [CURL ARGS]: CODE, the body in $T/out, headers in $T/hdr
post() {
	local path=$1 body=$2
	shift 2
	CODE=$(curl -s -o "$T/out" -D "$T/hdr" -w '%{http_code}' "$@" \
		-H 'Content-Type: application/json' --data-binary "$body" "$URL$path")
}

# j FILE EXPR: EXPR of the JSON in FILE (as d)
j() {
	$PY -c 'import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$@"
}

# metric NAME: a sample's value from /metrics
metric() {
	curl -s "$URL/metrics" | awk -v n="$1" '$1 == n { print $2 }'
}

# until_metric NAME VALUE: wait for it (5 s)
until_metric() {
	local i
	for i in $(seq 100); do
		[ "$(metric "$1")" = "$2" ] && return 0
		sleep 0.05
	done
	echo "$1 is $(metric "$1"), not $2"
	return 1
}

# the answer is 400 naming param $1 (null: none); read as text, as the
# JSON is jansson's compact form ("key":value), to keep the loops fast
err_param() {
	local b p=\"$1\"
	b=$(<"$T/out")
	[ "$1" = null ] && p=null
	[ "$CODE" = 400 ] && [[ "$b" == '{"error":{"message":'*',"type":"invalid_request_error","param":'"$p"',"code":null}}' ]] ||
		{ echo "code $CODE, not 400 naming $1: $b"; return 1; }
}

# a request that runs until cancelled (the context of --ctx-size 16384)
LONG='{"prompt": "long", "temperature": 0, "ignore_eos": true}'
LONG_STREAM='{"prompt": "long", "temperature": 0, "ignore_eos": true, "stream": true}'

# ---- the command line -----------------------------------------------------------

@test "ds-serve -h prints the usage to stdout and exits 0; --version" {
	run "$DS_BIN/ds-serve" -h
	[ "$status" -eq 0 ]
	[[ "${lines[0]}" == "usage: ds-serve -m DIR [--host ADDR] [--port N]"* ]]
	[[ "$output" == *"--api-key KEY | --api-key-file FILE"* ]]
	run "$DS_BIN/ds-serve" --version
	[ "$status" -eq 0 ]
	[[ "$output" == "ds-serve "[0-9]* ]]
}

@test "usage errors exit 2 with one message" {
	local a
	for a in "" "-m $F/m --bogus" "-m $F/m --port 65536" "-m $F/m --parallel 0" \
		"-m $F/m --timeout 0" "-m $F/m --max-body 1" "-m $F/m --queue -1" \
		"-m $F/m --ctx-size 2" "-m $F/m --threads x" "-m $F/m extra" \
		"-m $F/m --api-key k --api-key-file f" "-m $F/m --numa all" \
		"-m $F/m --port" "-m $F/m -b 0" "-m $F/m --batch x"; do
		# shellcheck disable=SC2086
		run "$DS_BIN/ds-serve" $a
		[ "$status" -eq 2 ] || { echo "$a: $status $output"; return 1; }
		[[ "${lines[0]}" == "ds-serve: "* ]]
	done
	run "$DS_BIN/ds-serve" -m "$F/m" --api-key "two words"
	[ "$status" -eq 2 ]
}

@test "runtime errors exit 1: no model (after listening), a taken port, a key file" {
	run "$DS_BIN/ds-serve" -m "$T/nope" --port 0
	[ "$status" -eq 1 ]
	[[ "$output" == *"listening on http://127.0.0.1:"* ]]
	[[ "${lines[-1]}" == "ds-serve: $T/nope/model.meta: "* ]]
	mkdir "$T/notok"
	cp "$F/m/model.meta" "$F/m/model.bin" "$T/notok/"
	run "$DS_BIN/ds-serve" -m "$T/notok" --port 0
	[ "$status" -eq 1 ]
	[[ "${lines[-1]}" == "ds-serve: $T/notok/tokenizer.bin: no tokenizer"* ]]
	start
	run "$DS_BIN/ds-serve" -m "$F/m" --port "$PORT"
	[ "$status" -eq 1 ]
	[[ "$output" == "ds-serve: cannot listen on 127.0.0.1 port $PORT: "* ]]
	run "$DS_BIN/ds-serve" -m "$F/m" --api-key-file "$T/nokey"
	[ "$status" -eq 1 ]
	[[ "$output" == *"nokey"* ]]
	printf '\n' >"$T/empty"
	run "$DS_BIN/ds-serve" -m "$F/m" --api-key-file "$T/empty"
	[ "$status" -eq 1 ]
}

@test "it listens on 127.0.0.1 alone unless --host says otherwise" {
	start
	# the listening socket's local address, from /proc/net/tcp
	run $PY -c 'import sys
port = "%04X" % int(sys.argv[1])
for f in ("/proc/net/tcp", "/proc/net/tcp6"):
    for l in open(f).readlines()[1:]:
        a = l.split()
        if a[3] == "0A" and a[1].endswith(":" + port):
            print(a[1].split(":")[0])' "$PORT"
	[ "$output" = 0100007F ]
}

# ---- endpoints ------------------------------------------------------------------

@test "GET /health answers 503 loading while the model loads, then ok; failed load exits 1" {
	mkdir "$T/slow"
	mkfifo "$T/slow/model.meta"     # the load waits until it is opened
	MODEL=$T/slow
	N=1
	LOG=$T/slow.log
	"$DS_BIN/ds-serve" -m "$T/slow" --port 0 2>"$LOG" 3>&- &
	PID=$!
	SERVERS="$SERVERS $PID"
	wait_port
	CODE=$(curl -s -o "$T/out" -w '%{http_code}' "$URL/health")
	[ "$CODE" = 503 ]
	[ "$(j "$T/out" 'd["status"]')" = loading ]
	post /v1/completions '{"prompt": "x"}'
	[ "$CODE" = 503 ]
	[ "$(j "$T/out" 'd["error"]["code"]')" = model_loading ]
	grep -qi '^Retry-After: 1' "$T/hdr"
	CODE=$(curl -s -o "$T/out" -w '%{http_code}' "$URL/v1/models")
	[ "$CODE" = 200 ]
	[ "$(j "$T/out" 'd["data"][0]["meta"]["ready"]')" = False ]
	[ "$(metric ds_ready)" = 0 ]
	: >"$T/slow/model.meta"          # not a regular file: the load fails
	st=0
	wait "$PID" || st=$?
	[ "$st" -eq 1 ]
	grep -q "ds-serve: $T/slow/model.meta: not a regular file" "$LOG"
	unset MODEL
	start
	CODE=$(curl -s -o "$T/out" -w '%{http_code}' "$URL/health")
	[ "$CODE" = 200 ]
	[ "$(j "$T/out" 'd["status"]')" = ok ]
}

@test "GET /v1/models lists the model" {
	start --parallel 3 --ctx-size 256
	CODE=$(curl -s -o "$T/out" -w '%{http_code}' "$URL/v1/models")
	[ "$CODE" = 200 ]
	[ "$(j "$T/out" 'd["object"]')" = list ]
	[ "$(j "$T/out" 'd["data"][0]["id"]')" = m ]
	[ "$(j "$T/out" 'd["data"][0]["object"]')" = model ]
	[ "$(j "$T/out" 'type(d["data"][0]["created"]).__name__')" = int ]
	[ "$(j "$T/out" 'd["data"][0]["meta"]["n_ctx"], d["data"][0]["meta"]["parallel"]')" = "(256, 3)" ]
}

@test "POST /v1/completions: greedy ids equal ds-run's for the same prompt ids" {
	start
	post /v1/completions '{"model": "m", "prompt": [1, 50, 60, 70, 80], "max_tokens": 24,
		"temperature": 0, "return_tokens": true}'
	[ "$CODE" = 200 ]
	want=$(echo "1 50 60 70 80" | "$DS_BIN/ds-run" -m "$F/m" --ids -n 24 --temp 0)
	[ "$(j "$T/out" '" ".join(map(str, d["choices"][0]["tokens"]))')" = "$want" ]
	n=$(echo "$want" | wc -w)
	[ "$(j "$T/out" 'd["usage"]["prompt_tokens"]')" = 5 ]
	fin=$(j "$T/out" 'd["choices"][0]["finish_reason"]')
	# length after 24 tokens, or stop at EOS (counted, not shown)
	if [ "$fin" = length ]; then [ "$n" -eq 24 ]; else [ "$fin" = stop ] && [ "$n" -lt 24 ]; fi
	[ "$(j "$T/out" 'd["usage"]["completion_tokens"]')" = "$([ "$fin" = length ] && echo 24 || echo $((n + 1)))" ]
	[ "$(j "$T/out" 'd["usage"]["total_tokens"] == d["usage"]["prompt_tokens"] + d["usage"]["completion_tokens"]')" = True ]
	[ "$(j "$T/out" 'd["object"]')" = text_completion ]
	[[ "$(j "$T/out" 'd["id"]')" == cmpl-* ]]
}

@test "-b: the prompt in chunks of 2, the same greedy ids; the log names it" {
	start -b 2 --parallel 1
	grep -q "forward passes of up to 2 tokens" "$LOG"
	post /v1/completions '{"model": "m", "prompt": [1, 50, 60, 70, 80, 90, 100], "max_tokens": 12,
		"temperature": 0, "return_tokens": true}'
	[ "$CODE" = 200 ]
	want=$(echo "1 50 60 70 80 90 100" | "$DS_BIN/ds-run" -m "$F/m" --ids -n 12 --temp 0)
	[ "$(j "$T/out" '" ".join(map(str, d["choices"][0]["tokens"]))')" = "$want" ]
}

@test "POST /v1/completions: a text prompt is the tokenizer's ids (BOS as configured)" {
	start
	post /v1/completions '{"prompt": "Hello world", "max_tokens": 16, "temperature": 0, "return_tokens": true}'
	[ "$CODE" = 200 ]
	ids=$(printf 'Hello world' | "$DS_BIN/ds-tok" -t "$F/src/tokenizer.json")
	want=$(echo "$ids" | "$DS_BIN/ds-run" -m "$F/m" --ids -n 16 --temp 0)
	[ "$(j "$T/out" '" ".join(map(str, d["choices"][0]["tokens"]))')" = "$want" ]
	[ "$(j "$T/out" 'd["usage"]["prompt_tokens"]')" = "$(echo "$ids" | wc -w)" ]
	# the text is the tokenizer's decoding of those ids
	post /detokenize "{\"tokens\": [$(echo "$want" | tr ' ' ',')]}"
	cp "$T/out" "$T/detok"
	post /v1/completions '{"prompt": "Hello world", "max_tokens": 16, "temperature": 0}'
	[ "$(j "$T/out" 'd["choices"][0]["text"]')" = "$(j "$T/detok" 'd["content"]')" ]
}

@test "POST /v1/completions: a stop string cuts the text before it" {
	start
	post /v1/completions '{"prompt": [1, 90, 91], "max_tokens": 40, "temperature": 0, "ignore_eos": true}'
	full=$(j "$T/out" 'd["choices"][0]["text"]')
	[ ${#full} -ge 12 ]
	stop=${full:6:3}
	want=${full%%"$stop"*}
	post /v1/completions "$($PY -c 'import json,sys; print(json.dumps({"prompt": [1, 90, 91],
		"max_tokens": 40, "temperature": 0, "ignore_eos": True, "stop": ["\u2603", sys.argv[1]]}))' "$stop")"
	[ "$CODE" = 200 ]
	[ "$(j "$T/out" 'd["choices"][0]["text"]')" = "$want" ]
	[ "$(j "$T/out" 'd["choices"][0]["finish_reason"]')" = stop ]
}

@test "max_tokens: exactly that many; clamped to the context; longer prompts refused" {
	start --ctx-size 32
	post /v1/completions '{"prompt": [1,2,3,4,5,6,7,8,9,10], "max_tokens": 7, "ignore_eos": true}'
	[ "$(j "$T/out" 'd["usage"]["completion_tokens"], d["choices"][0]["finish_reason"]')" = "(7, 'length')" ]
	# tokens are sampled from positions 9 .. 31: 23 of them
	post /v1/completions '{"prompt": [1,2,3,4,5,6,7,8,9,10], "max_tokens": 100000, "ignore_eos": true}'
	[ "$CODE" = 200 ]
	[ "$(j "$T/out" 'd["usage"]["completion_tokens"], d["choices"][0]["finish_reason"]')" = "(23, 'length')" ]
	post /v1/completions '{"prompt": [1,2,3,4,5,6,7,8,9,10], "ignore_eos": true}'
	[ "$(j "$T/out" 'd["usage"]["completion_tokens"]')" = 23 ]
	post /v1/completions "{\"prompt\": [$(seq -s, 1 33)]}"
	err_param prompt
	[[ "$(j "$T/out" 'd["error"]["message"]')" == *"33 tokens, more than the context (32)"* ]]
	post /v1/completions '{"prompt": [5], "max_tokens": 0}'
	[ "$(j "$T/out" 'd["usage"]["completion_tokens"], d["choices"][0]["text"]')" = "(0, '')" ]
}

@test "POST /v1/chat/completions renders the model's template" {
	start
	post /v1/chat/completions '{"model": "m", "messages": [{"role": "system", "content": "Be brief."},
		{"role": "user", "content": "Hi"}], "max_tokens": 10, "temperature": 0, "return_tokens": true}'
	[ "$CODE" = 200 ]
	[ "$(j "$T/out" 'd["object"]')" = chat.completion ]
	[ "$(j "$T/out" 'd["choices"][0]["message"]["role"]')" = assistant ]
	[[ "$(j "$T/out" 'd["id"]')" == chatcmpl-* ]]
	# the checkpoint's own template (which reads a system message as an
	# assistant's), rendered by Jinja2
	$PY - "$F/src/tokenizer_config.json" >"$T/p" <<'EOF'
import json, sys, jinja2.sandbox
c = json.load(open(sys.argv[1]))
env = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
sys.stdout.write(env.from_string(c["chat_template"]).render(
    messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
    add_generation_prompt=True, bos_token=c["bos_token"], eos_token=c["eos_token"]))
EOF
	[ "$(cat "$T/p")" = '<｜begin▁of▁sentence｜><｜Assistant｜>Be brief.<｜end▁of▁sentence｜><｜User｜>Hi<｜Assistant｜>' ]
	ids=$("$DS_BIN/ds-tok" -t "$F/src/tokenizer.json" --no-bos <"$T/p")
	[ "$(j "$T/out" 'd["usage"]["prompt_tokens"]')" = "$(echo "$ids" | wc -w)" ]
	want=$(echo "$ids" | "$DS_BIN/ds-run" -m "$F/m" --ids -n 10 --temp 0)
	[ "$(j "$T/out" '" ".join(map(str, d["choices"][0]["tokens"]))')" = "$want" ]
}

@test "POST /apply-template: the prompt as ds-tok --render makes it" {
	start
	B='{"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]}'
	post /apply-template "$B"
	[ "$CODE" = 200 ]
	[ "$(j "$T/out" 'd["prompt"]')" = "$("$DS_BIN/ds-tok" -m "$F/m" --render <<<"$B")" ]
	[ "$(j "$T/out" 'list(d)')" = "['prompt']" ]
	post /apply-template '{"messages": [{"role": "user", "content": "Hi"}], "add_generation_prompt": false}'
	[ "$(j "$T/out" 'd["prompt"]')" = "<｜begin▁of▁sentence｜><｜User｜>Hi" ]
	post /apply-template '{"messages": [{"role": "user"}]}'
	err_param 'messages[0].content'
	post /apply-template '{"messages": [{"role": "user", "content": "x"}], "add_generation_prompt": "yes"}'
	err_param add_generation_prompt
	[ "$(curl -s -o /dev/null -w '%{http_code}' "$URL/apply-template")" = 405 ]
	[ "$(metric 'ds_requests_total{endpoint="/apply-template",status="200"}')" = 2 ]
	# a template that fails: 400 with its message
	printf "{{ raise_exception('no') }}" >"$T/r.jinja"
	start --chat-template-file "$T/r.jinja"
	post /apply-template "$B"
	[ "$CODE" = 400 ]
	[ "$(j "$T/out" 'd["error"]["message"], d["error"]["param"]')" = "('messages: no', 'messages')" ]
	post /v1/chat/completions "$B"
	err_param messages
}

# sse FILE: checks the events, prints the streamed text
sse() {
	$PY - "$1" <<'EOF'
import json, sys
raw = open(sys.argv[1], encoding="utf-8").read()
assert raw.endswith("data: [DONE]\n\n"), raw[-80:]
events = raw.split("\n\n")[:-1]
assert all(e.startswith("data: ") and "\n" not in e for e in events), events
chunks = [json.loads(e[6:]) for e in events[:-1]]
text, fin, usage = "", None, None
for c in chunks:
    if "usage" in c and c["usage"]:
        usage = c["usage"]
        assert c["choices"] == []
        continue
    ch = c["choices"][0]
    text += ch["text"] if "text" in ch else ch["delta"].get("content", "")
    assert fin is None
    fin = ch["finish_reason"]
print(json.dumps({"text": text, "finish": fin, "usage": usage, "n": len(chunks),
                  "object": chunks[0]["object"], "ids": len({c["id"] for c in chunks}),
                  "first": chunks[0]["choices"][0]}))
EOF
}

@test "stream: true sends SSE chunks then [DONE]; the text equals the answer's" {
	start
	B='"prompt": "Stream me", "max_tokens": 30, "temperature": 0, "ignore_eos": true'
	post /v1/completions "{$B}"
	cp "$T/out" "$T/whole"
	CODE=$(curl -sN -o "$T/sse" -D "$T/hdr" -w '%{http_code}' -d "{$B, \"stream\": true}" "$URL/v1/completions")
	[ "$CODE" = 200 ]
	grep -qi '^Content-Type: text/event-stream' "$T/hdr"
	sse "$T/sse" >"$T/s"
	[ "$(j "$T/s" 'd["text"]')" = "$(j "$T/whole" 'd["choices"][0]["text"]')" ]
	[ "$(j "$T/s" 'd["finish"], d["object"], d["ids"], d["usage"]')" = "('length', 'text_completion', 1, None)" ]
	# text that piled up while the client was not reading goes out as one
	# chunk, so a loaded machine may send the whole answer in one
	[ "$(j "$T/s" 'd["n"] >= 2')" = True ]
	# chat: a role chunk first; include_usage adds the usage chunk
	B='"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 12, "temperature": 0, "ignore_eos": true'
	post /v1/chat/completions "{$B}"
	cp "$T/out" "$T/whole"
	curl -sN -o "$T/sse" -d "{$B, \"stream\": true, \"stream_options\": {\"include_usage\": true}}" \
		"$URL/v1/chat/completions"
	sse "$T/sse" >"$T/s"
	[ "$(j "$T/s" 'd["text"]')" = "$(j "$T/whole" 'd["choices"][0]["message"]["content"]')" ]
	[ "$(j "$T/s" 'd["object"], d["first"]["delta"]["role"], d["finish"]')" = "('chat.completion.chunk', 'assistant', 'length')" ]
	# the same counts; the stream's prompt came second, from the cache
	[ "$(j "$T/s" '{k: v for k, v in d["usage"].items() if k != "prompt_tokens_details"}')" = \
	  "$(j "$T/whole" '{k: v for k, v in d["usage"].items() if k != "prompt_tokens_details"}')" ]
	[ "$(j "$T/s" 'd["usage"]["prompt_tokens_details"]["cached_tokens"]')" = \
	  "$(( $(j "$T/whole" 'd["usage"]["prompt_tokens"]') - 1 ))" ]
}

@test "return_tokens in a stream: each chunk's ids, together the answer's" {
	start
	B='"prompt": "Stream ids", "max_tokens": 20, "temperature": 0, "ignore_eos": true, "return_tokens": true'
	post /v1/completions "{$B}"
	cp "$T/out" "$T/whole"
	curl -sN -o "$T/sse" -d "{$B, \"stream\": true}" "$URL/v1/completions"
	run -0 $PY - "$T/sse" "$T/whole" <<'EOF'
import json, sys
ev = [json.loads(e[6:]) for e in open(sys.argv[1]).read().split("\n\n")[:-2]]
ids = [t for c in ev for ch in c["choices"] for t in ch.get("tokens", [])]
text = "".join(ch["text"] for c in ev for ch in c["choices"])
w = json.load(open(sys.argv[2]))["choices"][0]
assert ids == w["tokens"] and len(ids) == 20, (ids, w["tokens"])
assert text == w["text"]
print("ok")
EOF
}

@test "R1-style templates: the reasoning apart (reasoning_content), or inline with none" {
	# a template that opens the block in its generation prompt, as R1's:
	# the whole answer of this model (which never closes it) is reasoning
	printf "{{ bos_token }}{%% for m in messages %%}<｜User｜>{{ m.content | trim }}{%% endfor %%}<｜Assistant｜><think>\n{%% if 0 %%}</think>{%% endif %%}" >"$T/r1.jinja"
	start --chat-template-file "$T/r1.jinja"
	B='"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 12, "temperature": 0, "ignore_eos": true'
	post /v1/chat/completions "{$B, \"reasoning_format\": \"none\"}"
	cp "$T/out" "$T/raw"
	raw=$(j "$T/raw" 'd["choices"][0]["message"]["content"]')
	[ -n "$raw" ]
	[ "$(j "$T/raw" '"reasoning_content" in d["choices"][0]["message"]')" = False ]
	post /v1/chat/completions "{$B}"
	cp "$T/out" "$T/split"
	[ "$(j "$T/split" 'd["choices"][0]["message"]["content"]')" = "" ]
	[ "$(j "$T/split" 'd["choices"][0]["message"]["reasoning_content"]')" = \
	  "$($PY -c 'import sys; print(sys.argv[1].strip(" \t\r\n"))' "$raw")" ]
	# streamed: delta.reasoning_content, the same text
	curl -sN -o "$T/sse" -d "{$B, \"stream\": true}" "$URL/v1/chat/completions"
	run -0 $PY - "$T/sse" "$T/split" <<'EOF'
import json, sys
ev = [json.loads(e[6:]) for e in open(sys.argv[1]).read().split("\n\n")[:-2]]
d = [c["choices"][0]["delta"] for c in ev if c["choices"]]
r = "".join(x.get("reasoning_content", "") for x in d)
c = "".join(x.get("content", "") for x in d)
m = json.load(open(sys.argv[2]))["choices"][0]["message"]
assert r == m["reasoning_content"] and c == "", (r, c, m)
assert all(set(x) <= {"role", "content", "reasoning_content"} for x in d)
print("ok")
EOF
	# --reasoning-format none: inline unless a request asks
	start --chat-template-file "$T/r1.jinja" --reasoning-format none
	post /v1/chat/completions "{$B}"
	[ "$(j "$T/out" 'd["choices"][0]["message"]')" = "$(j "$T/raw" 'd["choices"][0]["message"]')" ]
	post /v1/chat/completions "{$B, \"reasoning_format\": \"deepseek\"}"
	[ "$(j "$T/out" 'd["choices"][0]["message"]')" = "$(j "$T/split" 'd["choices"][0]["message"]')" ]
	# a template without <think>: nothing is split
	start
	post /v1/chat/completions "{$B}"
	[ "$(j "$T/out" '"reasoning_content" in d["choices"][0]["message"]')" = False ]
}

@test "POST /tokenize and /detokenize (llama.cpp's shapes) agree with ds-tok" {
	start
	post /tokenize '{"content": "Hello wörld"}'
	[ "$CODE" = 200 ]
	want=$(printf 'Hello wörld' | "$DS_BIN/ds-tok" -t "$F/src/tokenizer.json" --no-bos)
	[ "$(j "$T/out" '" ".join(map(str, d["tokens"]))')" = "$want" ]
	post /tokenize '{"content": "Hi", "add_special": true, "with_pieces": true}'
	want=$(printf 'Hi' | "$DS_BIN/ds-tok" -t "$F/src/tokenizer.json")
	[ "$(j "$T/out" '" ".join(str(t["id"]) for t in d["tokens"])')" = "$want" ]
	[ "$(j "$T/out" 'd["tokens"][-1]["piece"]')" = i ]
	post /detokenize "{\"tokens\": [$(printf 'Hello wörld' | "$DS_BIN/ds-tok" -t "$F/src/tokenizer.json" --no-bos | tr ' ' ,)]}"
	[ "$(j "$T/out" 'd["content"]')" = "Hello wörld" ]
	post /detokenize '{"tokens": [1, 99999]}'
	err_param 'tokens[1]'
	post /tokenize '{"content": 3}'
	err_param content
}

@test "GET /metrics is valid Prometheus text and counts what happened" {
	start --parallel 2
	pt=0 gt=0
	for p in '"a"' '"bb"' '[1, 2, 3]'; do
		post /v1/completions "{\"prompt\": $p, \"max_tokens\": 5, \"temperature\": 0}"
		pt=$((pt + $(j "$T/out" 'd["usage"]["prompt_tokens"]')))
		gt=$((gt + $(j "$T/out" 'd["usage"]["completion_tokens"]')))
	done
	post /v1/completions '{"prompt": 5}'
	curl -s -o /dev/null "$URL/nothing"
	curl -s -D "$T/hdr" -o "$T/metrics" "$URL/metrics"
	grep -qi '^Content-Type: text/plain; version=0.0.4' "$T/hdr"
	run $PY - "$T/metrics" <<'EOF'
import sys
from prometheus_client.parser import text_string_to_metric_families
fams = {f.name: f for f in text_string_to_metric_families(open(sys.argv[1]).read())}
def val(fam, sample, **labels):
    return [s.value for s in fams[fam].samples
            if s.name == sample and all(s.labels.get(k) == v for k, v in labels.items())]
types = {n: f.type for n, f in fams.items()}
print(types["ds_requests"], types["ds_prompt_tokens"], types["ds_queue_depth"],
      types["ds_request_duration_seconds"], types["ds_time_to_first_token_seconds"])
print(val("ds_requests", "ds_requests_total", endpoint="/v1/completions", status="200"),
      val("ds_requests", "ds_requests_total", endpoint="/v1/completions", status="400"),
      val("ds_requests", "ds_requests_total", endpoint="other", status="404"))
print(val("ds_prompt_tokens", "ds_prompt_tokens_total")[0],
      val("ds_generated_tokens", "ds_generated_tokens_total")[0])
print(val("ds_request_duration_seconds", "ds_request_duration_seconds_count")[0],
      val("ds_request_duration_seconds", "ds_request_duration_seconds_bucket", le="+Inf")[0],
      val("ds_time_to_first_token_seconds", "ds_time_to_first_token_seconds_count")[0])
print(val("ds_slots", "ds_slots")[0], val("ds_active_slots", "ds_active_slots")[0],
      val("ds_queue_depth", "ds_queue_depth")[0], val("ds_ready", "ds_ready")[0])
print(val("ds_generation_tokens_per_second", "ds_generation_tokens_per_second")[0] >= 0)
EOF
	echo "$output"
	[ "$status" -eq 0 ]
	[ "${lines[0]}" = "counter counter gauge histogram histogram" ]
	[ "${lines[1]}" = "[3.0] [1.0] [1.0]" ]
	[ "${lines[2]}" = "$pt.0 $gt.0" ]
	[ "${lines[3]}" = "3.0 3.0 3.0" ]
	[ "${lines[4]}" = "2.0 0.0 0.0 1.0" ]
	[ "${lines[5]}" = True ]
}

# ---- the prompt cache ---------------------------------------------------------------

# turn BODY_FILE: a greedy chat turn; its answer's text, prompt and cached
# token counts in $T/turn.json
turn() {
	post /v1/chat/completions "$(cat "$1")"
	[ "$CODE" = 200 ] || { cat "$T/out"; return 1; }
	cp "$T/out" "$T/turn.json"
}

@test "prompt cache: the next turn starts from the last; answers as without it; /metrics counts it" {
	local k
	for k in cached plain; do
		if [ $k = cached ]; then start --parallel 2; else start --parallel 2 --cache-ram 0; fi
		printf '{"messages": [{"role": "user", "content": "Hi there"}], "max_tokens": 16, "temperature": 0}' >"$T/b1"
		turn "$T/b1"
		cp "$T/turn.json" "$T/$k.1"
		a1=$(j "$T/turn.json" 'd["choices"][0]["message"]["content"]')
		$PY - "$a1" >"$T/b2" <<'EOF'
import json, sys
print(json.dumps({"messages": [{"role": "user", "content": "Hi there"},
    {"role": "assistant", "content": sys.argv[1]}, {"role": "user", "content": "And?"}],
    "max_tokens": 16, "temperature": 0}))
EOF
		turn "$T/b2"
		cp "$T/turn.json" "$T/$k.2"
		[ $k = cached ] && metric ds_prompt_cache_hits_total >"$T/hits" &&
			metric ds_prompt_cache_tokens_total >"$T/saved"
		kill -TERM "$PID"
		wait "$PID"
	done
	for n in 1 2; do
		[ "$(j "$T/cached.$n" 'd["choices"][0]["message"]')" = "$(j "$T/plain.$n" 'd["choices"][0]["message"]')" ]
		[ "$(j "$T/plain.$n" 'd["usage"]["prompt_tokens_details"]')" = "{'cached_tokens': 0}" ]
	done
	[ "$(j "$T/cached.1" 'd["usage"]["prompt_tokens_details"]["cached_tokens"]')" = 0 ]
	p1=$(j "$T/cached.1" 'd["usage"]["prompt_tokens"]')
	c2=$(j "$T/cached.2" 'd["usage"]["prompt_tokens_details"]["cached_tokens"]')
	# all of turn 1's prompt at least, kept in its slot
	[ "$c2" -ge "$p1" ]
	[ "$(cat "$T/hits")" = 1 ]
	[ "$(cat "$T/saved")" = "$c2" ]
}

# the depth of a cache file (its header's)
depth() {
	$PY -c 'import struct, sys; print(struct.unpack_from("<I", open(sys.argv[1], "rb").read(), 60)[0])' "$1"
}

@test "--cache-dir: the cache outlives a restart; damaged and foreign files are ignored with a warning" {
	mkdir "$T/cd"
	ids=$(seq 3 102 | tr '\n' ',' | sed 's/,$//')
	start --cache-dir "$T/cd"
	post /v1/completions "{\"prompt\": [$ids], \"max_tokens\": 4, \"temperature\": 0}"
	[ "$CODE" = 200 ]
	kill -TERM "$PID"
	wait "$PID"
	# 100 prompt positions and 3 generated: six blocks of 16, a file each
	[ "$(ls "$T/cd" | grep -c '^[0-9a-f]\{16\}\.dskv$')" = 6 ]
	for f in "$T"/cd/*.dskv; do
		[ "$(depth "$f")" = 5 ] && last=$f
	done
	printf '\1' | dd of="$last" bs=1 seek=200 conv=notrunc 2>/dev/null
	printf 'not a cache file, though long enough to hold a header: %0128d' 0 >"$T/cd/ffffffffffffffff.dskv"
	start --cache-dir "$T/cd"
	grep -q "warning: --cache-dir $T/cd: $(basename "$last"): its token ids' CRC-32 does not match: ignored" "$LOG"
	grep -q "warning: --cache-dir $T/cd: ffffffffffffffff.dskv: not a ds prompt cache file: ignored" "$LOG"
	post /v1/completions "{\"prompt\": [$ids, 7, 8], \"max_tokens\": 6, \"temperature\": 0}"
	cp "$T/out" "$T/warm"
	# five good blocks: 80 positions
	[ "$(j "$T/warm" 'd["usage"]["prompt_tokens_details"]["cached_tokens"]')" = 80 ]
	start --cache-ram 0
	post /v1/completions "{\"prompt\": [$ids, 7, 8], \"max_tokens\": 6, \"temperature\": 0}"
	[ "$(j "$T/warm" 'd["choices"][0]["text"]')" = "$(j "$T/out" 'd["choices"][0]["text"]')" ]
	run "$DS_BIN/ds-serve" -m "$F/m" --cache-dir "$T/cd" --cache-ram 0
	[ "$status" -eq 2 ]
	touch "$T/notadir"
	run "$DS_BIN/ds-serve" -m "$F/m" --port 0 --cache-dir "$T/notadir"
	[ "$status" -eq 1 ]
	[[ "${lines[-1]}" == "ds-serve: --cache-dir $T/notadir: "* ]]
}

# ---- errors -----------------------------------------------------------------------

@test "400: malformed JSON, invalid UTF-8, and each wrong field named" {
	start
	# one client for all the cases: path, raw body, the param expected
	# (None: the body as a whole); each answer must be OpenAI's error object
	run $PY - "$PORT" <<'EOF'
import http.client, json, sys
cases = [
    ("/v1/completions", b"", None), ("/v1/completions", b"{", None),
    ("/v1/completions", b"[1]", None), ("/v1/completions", b'{"prompt": "a"} x', None),
    ("/v1/completions", b'{"prompt": "a", "prompt": "b"}', None),
    ("/v1/completions", b'{"prompt": "\\u0000"}', None),
    ("/v1/completions", b'{"prompt": "\\ud800"}', None),
    ("/v1/completions", b'{"prompt": "\xff\xfe"}', None),
    ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": "\xc0\xaf"}]}', None),
    ("/v1/completions", b'{"prompt": [1, 2, 1000]}', "prompt[2]"),
    ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": "x"},'
     b' {"role": "robot", "content": "y"}]}', "messages[1].role"),
    ("/v1/chat/completions", b'{"messages": "hi"}', "messages"),
]
for field, body in [
        ("max_tokens", '"max_tokens": "10"'), ("max_tokens", '"max_tokens": -5'),
        ("temperature", '"temperature": 9'), ("temperature", '"temperature": "warm"'),
        ("top_p", '"top_p": -1'), ("top_k", '"top_k": 0.5'), ("min_p", '"min_p": []'),
        ("seed", '"seed": "x"'), ("stop", '"stop": 3'), ("stop[1]", '"stop": ["a", {}]'),
        ("stream", '"stream": "yes"'), ("n", '"n": 3'), ("logprobs", '"logprobs": 2'),
        ("presence_penalty", '"presence_penalty": 1')]:
    cases.append(("/v1/completions", ('{"prompt": "p", %s}' % body).encode(), field))
c = http.client.HTTPConnection("127.0.0.1", int(sys.argv[1]), timeout=10)
bad = 0
for path, body, param in cases:
    c.request("POST", path, body, {"Content-Type": "application/json"})
    r = c.getresponse()
    d = json.loads(r.read())
    e = d.get("error", {})
    ok = (r.status == 400 and e.get("param") == param and
          e.get("type") == "invalid_request_error" and "code" in e and
          isinstance(e.get("message"), str) and
          (param is None or e["message"].startswith(param)))
    if b"\xff" in body:
        ok = ok and "0xff" in e["message"]
    if not ok:
        bad += 1
        print("wrong answer to", path, body, r.status, d)
print(len(cases), "cases,", bad, "wrong")
EOF
	echo "$output"
	[ "${lines[-1]}" = "26 cases, 0 wrong" ]
}

@test "401 without the API key (constant-time check); /health stays open" {
	printf 'k3y-%s\n' "$BATS_TEST_NUMBER" >"$T/key"
	start --api-key-file "$T/key"
	post /v1/completions '{"prompt": "a", "max_tokens": 1}'
	[ "$CODE" = 401 ]
	grep -qi '^WWW-Authenticate: Bearer' "$T/hdr"
	[ "$(j "$T/out" 'd["error"]["type"], d["error"]["code"]')" = "('authentication_error', 'invalid_api_key')" ]
	for h in "Bearer k3y-" "Bearer k3y-${BATS_TEST_NUMBER}x" "Basic k3y-$BATS_TEST_NUMBER" "k3y-$BATS_TEST_NUMBER"; do
		post /v1/completions '{"prompt": "a", "max_tokens": 1}' -H "Authorization: $h"
		[ "$CODE" = 401 ] || { echo "$h: $CODE"; return 1; }
	done
	for p in /v1/models /metrics; do
		[ "$(curl -s -o /dev/null -w '%{http_code}' "$URL$p")" = 401 ]
		[ "$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer k3y-$BATS_TEST_NUMBER" "$URL$p")" = 200 ]
	done
	[ "$(curl -s -o /dev/null -w '%{http_code}' "$URL/health")" = 200 ]
	post /v1/completions '{"prompt": "a", "max_tokens": 1}' -H "Authorization: Bearer k3y-$BATS_TEST_NUMBER"
	[ "$CODE" = 200 ]
	post /tokenize '{"content": "a"}'
	[ "$CODE" = 401 ]
}

@test "404 for other paths, 405 with Allow for other methods" {
	start
	CODE=$(curl -s -o "$T/out" -w '%{http_code}' "$URL/v1/embeddings")
	[ "$CODE" = 404 ]
	[ "$(j "$T/out" 'd["error"]["type"]')" = not_found_error ]
	CODE=$(curl -s -o "$T/out" -D "$T/hdr" -w '%{http_code}' "$URL/v1/completions")
	[ "$CODE" = 405 ]
	grep -qi '^Allow: POST' "$T/hdr"
	CODE=$(curl -s -o /dev/null -D "$T/hdr" -w '%{http_code}' -X POST "$URL/health")
	[ "$CODE" = 405 ]
	grep -qi '^Allow: GET, HEAD' "$T/hdr"
	[ "$(curl -s -o /dev/null -w '%{http_code}' -I "$URL/health")" = 200 ]
}

@test "413 for bodies over --max-body, by Content-Length or chunked" {
	start --max-body 256
	big=$($PY -c 'print("{\"prompt\": \"%s\"}" % ("a" * 300))')
	post /v1/completions "$big"
	[ "$CODE" = 413 ]
	[ "$(j "$T/out" 'd["error"]["code"]')" = request_too_large ]
	post /v1/completions "$big" -H 'Transfer-Encoding: chunked'
	[ "$CODE" = 413 ]
	post /v1/completions '{"prompt": "small", "max_tokens": 1}' -H 'Transfer-Encoding: chunked'
	[ "$CODE" = 200 ]
	# far past the limit, a chunked body is cut off: the connection closes
	$PY -c 'print("{\"prompt\": \"%s\"}" % ("a" * 200000))' >"$T/huge"
	CODE=$(curl -s -o /dev/null -w '%{http_code}' -H 'Transfer-Encoding: chunked' \
		--data-binary @"$T/huge" "$URL/v1/completions") || true
	[ "$CODE" = 000 ] || [ "$CODE" = 413 ]
	wait_code /health 200
}

@test "503 with Retry-After when the slots and the queue are full" {
	start --parallel 1 --queue 1 --ctx-size 16384
	curl -s -o /dev/null -d "$LONG" "$URL/v1/completions" 3>&- &
	PIDS="$PIDS $!"
	a=$!
	until_metric ds_active_slots 1
	curl -s -o /dev/null -d "$LONG" "$URL/v1/completions" 3>&- &
	PIDS="$PIDS $!"
	b=$!
	until_metric ds_queue_depth 1
	post /v1/completions '{"prompt": "c", "max_tokens": 1}'
	[ "$CODE" = 503 ]
	grep -qi '^Retry-After: 1' "$T/hdr"
	[ "$(j "$T/out" 'd["error"]["code"], d["error"]["type"]')" = "('queue_full', 'unavailable_error')" ]
	kill "$a" "$b"
	until_metric ds_active_slots 0
	until_metric ds_queue_depth 0
	post /v1/completions '{"prompt": "c", "max_tokens": 1}'
	[ "$CODE" = 200 ]
}

@test "--timeout closes idle and slow connections" {
	start --timeout 1
	# connected, nothing sent
	run $PY - "$PORT" <<'EOF'
import socket, sys, time
def closed_after(send, every):
    s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
    s.settimeout(6)
    t0 = time.time()
    try:
        for b in send:
            s.sendall(b)
            time.sleep(every)
        s.recv(1)
        got = s.recv(65536)
    except (BrokenPipeError, ConnectionResetError):
        got = b""
    return got, time.time() - t0
head = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 40\r\n\r\n"
cases = {"idle": ([], 0), "stalled": ([head + b'{"pro'], 0),
         # a byte every 0.3 s: never idle for 1 s, still cut off
         "dribbled": ([head] + [b" "] * 20, 0.3)}
res = {}
def run(k):
    res[k] = closed_after(*cases[k])
import threading
th = [threading.Thread(target=run, args=(k,)) for k in cases]
for t in th: t.start()
for t in th: t.join()
for k in cases:
    got, dt = res[k]
    print(k, got == b"", 0.8 < dt < 3)
EOF
	echo "$output"
	[ "${lines[0]}" = "idle True True" ]
	[ "${lines[1]}" = "stalled True True" ]
	[ "${lines[2]}" = "dribbled True True" ]
	wait_code /health 200
}

# ---- scheduling ---------------------------------------------------------------------

@test "a client that disconnects cancels its request and frees its slot" {
	start --parallel 1 --ctx-size 16384
	curl -sN -o "$T/sse" -d "$LONG_STREAM" "$URL/v1/completions" 3>&- &
	PIDS="$PIDS $!"
	c=$!
	until_metric ds_active_slots 1
	for i in $(seq 100); do [ -s "$T/sse" ] && break; sleep 0.05; done
	[ -s "$T/sse" ]
	kill "$c"
	until_metric ds_active_slots 0
	[ "$(metric 'ds_generations_total{finish_reason="cancelled"}')" = 1 ]
	# not streamed: the client gives up after a second
	run curl -s --max-time 1 -d "$LONG" "$URL/v1/completions"
	[ "$status" -eq 28 ]
	until_metric ds_active_slots 0
	[ "$(metric 'ds_generations_total{finish_reason="cancelled"}')" = 2 ]
	# the slot serves the next request
	post /v1/completions '{"prompt": "next", "max_tokens": 3, "ignore_eos": true}'
	[ "$CODE" = 200 ]
	[ "$(j "$T/out" 'd["usage"]["completion_tokens"]')" = 3 ]
}

@test "continuous batching: a new request joins while another decodes" {
	start --parallel 2 --ctx-size 16384
	curl -sN -o "$T/sse" -d "$LONG_STREAM" "$URL/v1/completions" 3>&- &
	PIDS="$PIDS $!"
	c=$!
	until_metric ds_active_slots 1
	post /v1/completions '{"prompt": "short", "max_tokens": 8, "ignore_eos": true}'
	[ "$CODE" = 200 ]
	[ "$(j "$T/out" 'd["usage"]["completion_tokens"]')" = 8 ]
	# the long one is still running: the short one did not wait for it
	[ "$(metric ds_active_slots)" = 1 ]
	kill -0 "$c"
	kill "$c"
}

@test "greedy answers of concurrent requests equal the same requests one at a time" {
	start --parallel 4
	body() { echo "{\"prompt\": \"Request $1 $(printf '%*s' "$1" '' | tr ' ' x)\", \"max_tokens\": $((20 + 3 * $1)), \"temperature\": 0, \"return_tokens\": true}"; }
	for i in 1 2 3 4 5 6 7; do
		curl -s -o "$T/seq.$i" -d "$(body $i)" "$URL/v1/completions"
	done
	pids=""
	for i in 1 2 3 4 5 6 7; do
		curl -s -o "$T/par.$i" -d "$(body $i)" "$URL/v1/completions" 3>&- &
		pids="$pids $!"
	done
	# shellcheck disable=SC2086
	wait $pids
	run $PY -c 'import json, sys
for i in range(1, 8):
    a, b = (json.load(open("%s/%s.%d" % (sys.argv[1], k, i)))["choices"][0]
            for k in ("seq", "par"))
    print(i, a["tokens"] == b["tokens"] and a["text"] == b["text"] and
          len(a["tokens"]) > 0)' "$T"
	echo "$output"
	[ "$output" = "$(printf '%s True\n' 1 2 3 4 5 6 7)" ]
}

@test "--spec ngram: greedy answers as without it, concurrent or not; \"speculative\": false" {
	body() { echo "{\"prompt\": \"Request $1 $1 $1 Request $1 $1 $1 Request\", \"max_tokens\": $((16 + 3 * $1)), \"temperature\": 0, \"return_tokens\": true$2}"; }
	start --parallel 3
	for i in 1 2 3 4; do
		curl -s -o "$T/plain.$i" -d "$(body $i)" "$URL/v1/completions"
	done
	kill -TERM "$PID"
	wait "$PID"
	start --parallel 3 --spec ngram --spec-k 4
	pids=""
	for i in 1 2 3 4; do
		curl -s -o "$T/spec.$i" -d "$(body $i)" "$URL/v1/completions" 3>&- &
		pids="$pids $!"
		curl -s -o "$T/off.$i" -d "$(body $i ', "speculative": false')" "$URL/v1/completions" 3>&- &
		pids="$pids $!"
	done
	# shellcheck disable=SC2086
	wait $pids
	run $PY -c 'import json, sys
for i in range(1, 5):
    a, b, c = (json.load(open("%s/%s.%d" % (sys.argv[1], k, i)))["choices"][0]
               for k in ("plain", "spec", "off"))
    print(i, a["tokens"] == b["tokens"] == c["tokens"] and len(a["tokens"]) > 0)' "$T"
	echo "$output"
	[ "$output" = "$(printf '%s True\n' 1 2 3 4)" ]
	post /v1/completions '{"prompt": "a", "speculative": "no"}'
	err_param speculative
}

@test "--spec: a drafter's name, --draft and --spec-k checked" {
	run "$DS_BIN/ds-serve" -m "$F/m" --spec medusa
	[ "$status" -eq 2 ]
	[[ "$output" == *"--spec medusa: not a drafter (mtp, ngram or draft)"* ]]
	run "$DS_BIN/ds-serve" -m "$F/m" --spec draft
	[ "$status" -eq 2 ]
	run "$DS_BIN/ds-serve" -m "$F/m" --spec-k 2
	[ "$status" -eq 2 ]
	run "$DS_BIN/ds-serve" -m "$F/m" --spec ngram --spec-k 0
	[ "$status" -eq 2 ]
}

# ---- signals ---------------------------------------------------------------------------

@test "SIGTERM: stop accepting, finish what runs, exit 0; SIGHUP is ignored" {
	# long enough (about 1 s of the fixture) that both are still running
	# when the signal comes; the drain (bounded by --timeout) waits for
	# them even on the sanitizer build, ten times slower
	start --parallel 2 --ctx-size 16384 --timeout 300
	kill -HUP "$PID"
	wait_code /health 200
	curl -s -o "$T/a" -d '{"prompt": "a", "max_tokens": 4000, "ignore_eos": true}' "$URL/v1/completions" 3>&- &
	PIDS="$PIDS $!"
	a=$!
	curl -sN -o "$T/b" -d '{"prompt": "b", "max_tokens": 4000, "ignore_eos": true, "stream": true}' "$URL/v1/completions" 3>&- &
	PIDS="$PIDS $!"
	b=$!
	until_metric ds_active_slots 2
	kill -TERM "$PID"
	for i in $(seq 40); do ! curl -s -o /dev/null "$URL/health" && break; sleep 0.05; done
	run curl -s -o /dev/null "$URL/health"
	[ "$status" -eq 7 ]        # refused: nothing listens any more
	wait "$a" "$b"
	[ "$(j "$T/a" 'd["usage"]["completion_tokens"]')" = 4000 ]
	sse "$T/b" >"$T/s"
	[ "$(j "$T/s" 'd["finish"]')" = length ]
	st=0
	wait "$PID" || st=$?
	[ "$st" -eq 0 ]
	grep -q "ds-serve: SIGTERM: stopping" "$LOG"
	grep -q "ds-serve: finishing 2 requests" "$LOG"
	[ "$(tail -1 "$LOG")" = "ds-serve: stopped" ]
}

@test "the drain is bounded by --timeout (and a second signal ends it); SIGINT too" {
	start --parallel 2 --ctx-size 16384 --timeout 1
	curl -s -o "$T/a" -d "$LONG" "$URL/v1/completions" 3>&- &
	PIDS="$PIDS $!"
	a=$!
	curl -sN -o "$T/b" -d "$LONG_STREAM" "$URL/v1/completions" 3>&- &
	PIDS="$PIDS $!"
	b=$!
	until_metric ds_active_slots 2
	t0=$(date +%s%N)
	kill -INT "$PID"
	st=0
	wait "$PID" || st=$?
	[ "$st" -eq 0 ]
	[ $(( ($(date +%s%N) - t0) / 1000000 )) -lt 4000 ]
	wait "$a" "$b" || true
	[ "$(j "$T/a" 'd["error"]["code"]')" = shutting_down ]
	grep -q '^data: {"error":' "$T/b"
	grep -q "cancelling 2 requests" "$LOG"
	# a second signal does not wait at all
	start --parallel 1 --ctx-size 16384
	curl -s -o /dev/null -d "$LONG" "$URL/v1/completions" 3>&- &
	PIDS="$PIDS $!"
	until_metric ds_active_slots 1
	t0=$(date +%s%N)
	kill -TERM "$PID"
	sleep 0.2
	kill -TERM "$PID"
	st=0
	wait "$PID" || st=$?
	[ "$st" -eq 0 ]
	[ $(( ($(date +%s%N) - t0) / 1000000 )) -lt 3000 ]
}

# ---- clients and scale-out ----------------------------------------------------------------

@test "the official openai npm client: chat, completion, streams, errors" {
	scripts/fetch-openai.sh ||
		{ echo "the openai npm package is not in testdata/cache and cannot be fetched"; return 1; }
	printf 'sk-test-%s\n' "$BATS_TEST_NUMBER" >"$T/key"
	start --api-key-file "$T/key"
	run node tests/cli/helpers/openai-client.cjs "$URL/v1" "sk-test-$BATS_TEST_NUMBER"
	echo "$output"
	[ "$status" -eq 0 ]
	[ "${lines[-1]}" = "openai-client: all checks passed" ]
}

@test "two instances from ds-tune plan behind nginx: both answer" {
	command -v nginx >/dev/null || { echo "nginx missing: scripts/deps.sh installs it"; return 1; }
	"$DS_BIN/ds-tune" plan -m "$F/m" --instances 2 --json >"$T/plan.json"
	read -r p0 p1 lb < <($PY -c 'import socket
s = [socket.socket() for _ in range(3)]
for x in s: x.bind(("127.0.0.1", 0))
print(*[x.getsockname()[1] for x in s])')
	scripts/nginx-ds.py "$T/plan.json" --commands --ports "$p0,$p1" >"$T/cmds"
	[ "$(wc -l <"$T/cmds")" -eq 2 ]
	k=0
	while read -r -a cmd; do
		[ "${cmd[0]}" = ds-serve ]
		"$DS_BIN/ds-serve" "${cmd[@]:1}" 2>"$T/inst.$k.log" 3>&- &
		SERVERS="$SERVERS $!"
		k=$((k + 1))
	done <"$T/cmds"
	chmod 755 "$T"
	mkdir "$T/nginx"
	scripts/nginx-ds.py "$T/plan.json" --ports "$p0,$p1" --listen "127.0.0.1:$lb" \
		--standalone "$T/nginx" >"$T/nginx/nginx.conf"
	nginx -e stderr -p "$T/nginx" -c nginx.conf 2>"$T/nginx.log" 3>&- &
	PIDS="$PIDS $!"
	for URL in "http://127.0.0.1:$p0" "http://127.0.0.1:$p1" "http://127.0.0.1:$lb"; do
		wait_code /health 200 || { cat "$T"/*.log; return 1; }
	done
	for i in 1 2 3 4 5 6; do
		post /v1/completions "{\"prompt\": \"via nginx $i\", \"max_tokens\": 4}"
		[ "$CODE" = 200 ] || { cat "$T/out"; return 1; }
	done
	curl -sN -o "$T/sse" -d '{"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 5, "stream": true}' \
		"$URL/v1/chat/completions"
	sse "$T/sse" >/dev/null
	total=0
	for p in "$p0" "$p1"; do
		URL=http://127.0.0.1:$p
		n=$(metric 'ds_requests_total{endpoint="/v1/completions",status="200"}')
		[ "${n:-0}" -ge 1 ] ||
			{ echo "instance on port $p answered none"; cat "$T"/*.log; return 1; }
		total=$((total + n))
	done
	[ "$total" -eq 6 ]
}
