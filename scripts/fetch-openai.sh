#!/bin/sh
# fetch-openai.sh - the official OpenAI client for Node (npm "openai"),
# pinned by version and sha256, into the git-ignored testdata/cache/:
# tests/cli/ds-serve.bats talks to ds-serve through it.  It has no
# dependencies of its own (its peer dependencies are optional).
# Usage: scripts/fetch-openai.sh     (does nothing when it is in place;
# exit 1 when the registry cannot be reached or the tarball differs)
set -eu
cd "$(dirname "$0")/.."
cache=testdata/cache
spec=openai@6.49.0
sum=e48de0f4c5dbecebdeb864233f5ea49be07cd3e0ff3bd3e1e6745dc5e168cced
dir=$cache/node_modules/openai
tgz=$cache/dl/openai-6.49.0.tgz

[ -f "$dir/.ds-ok" ] && exit 0
mkdir -p "$cache/dl" "$cache/node_modules"
if [ ! -f "$tgz" ] || ! echo "$sum  $tgz" | sha256sum -c --status; then
	rm -f "$tgz"
	(cd "$cache/dl" && npm pack --silent "$spec" >/dev/null) || {
		echo "fetch-openai.sh: npm pack $spec failed (is the npm registry" \
			"reachable?)" >&2
		exit 1
	}
fi
if ! echo "$sum  $tgz" | sha256sum -c --status; then
	echo "fetch-openai.sh: $tgz: sha256 differs from the pinned one" >&2
	exit 1
fi
rm -rf "$dir"
mkdir -p "$dir"
tar xzf "$tgz" -C "$dir" --strip-components=1
touch "$dir/.ds-ok"
