#!/bin/sh
# fetch-ajv.sh - the JSON schema validator the grammar tests compare with
# (npm "ajv", draft 2020-12, and "ajv-formats" for string formats), with
# ajv's dependencies, pinned by version and sha256, into the git-ignored
# testdata/cache/node_modules/ (scripts/ref/ajv-check.js loads them).
# Usage: scripts/ref/fetch-ajv.sh   (does nothing when all is in place;
# exit 1 when the registry cannot be reached or a tarball differs)
set -eu
cd "$(dirname "$0")/../.."
cache=testdata/cache
mkdir -p "$cache/dl" "$cache/node_modules"

pkgs="ajv@8.17.1 f09dae78b8cc984dbf178eba92a7b19bff9e5f7c990508f3af0bf8f118770308
ajv-formats@3.0.1 f4d6980fd367381fd29199066911e863db8d97496613b6c2c5b91563a150acc5
fast-deep-equal@3.1.3 b019a0980f27638dc3f85836b0e478f188e00d7a6e5852c0819fa86f56e47b8f
fast-uri@3.0.6 8c7120461dab066f21379551862b380fadb724ec90c4a149181079a05bf1e81c
json-schema-traverse@1.0.0 023222622df29fc274bde5d3590e47aa1d4a8e3c1d6e2aba029948ed79799b21
require-from-string@2.0.2 cb694a4965908f7775a0c757f00cf4e624d193cd71d77988fbcca0f597b88d82"

echo "$pkgs" | while read -r spec sum; do
	name=${spec%@*}
	ver=${spec##*@}
	dir="$cache/node_modules/$name"
	[ -f "$dir/.ds-ok" ] && continue
	tgz="$cache/dl/$name-$ver.tgz"
	if [ ! -f "$tgz" ] || ! echo "$sum  $tgz" | sha256sum -c --status; then
		rm -f "$tgz"
		(cd "$cache/dl" && npm pack --silent "$spec" >/dev/null) || {
			echo "fetch-ajv.sh: npm pack $spec failed (is the npm" \
				"registry reachable?)" >&2
			exit 1
		}
	fi
	if ! echo "$sum  $tgz" | sha256sum -c --status; then
		echo "fetch-ajv.sh: $tgz: sha256 differs from the pinned one" >&2
		exit 1
	fi
	rm -rf "$dir"
	mkdir -p "$dir"
	tar xzf "$tgz" -C "$dir" --strip-components=1
	touch "$dir/.ds-ok"
done
