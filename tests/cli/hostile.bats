#!/usr/bin/env bats
# hostile.bats - files made to hurt: counts and lengths that claim far more
# than the file holds, files shorter than they say, a mapped file truncated
# while in use.  Each must be refused with one line naming the file and the
# thing, exit status 1, and without taking the memory it claims: the
# programs run under `ulimit -v` (256 MiB, enough for every real fixture
# here; skipped for ASan builds, which reserve terabytes of shadow).

PY=/usr/bin/python3
GOLD=testdata/golden

setup_file() {
	F=$(mktemp -d /dev/shm/ds-hostile.XXXXXX 2>/dev/null || mktemp -d)
	export F
	"$DS_BIN/ds-convert" --model-path "$GOLD/llama" --output-dir "$F/llama" --quiet
}

teardown_file() {
	rm -rf "$F"
}

setup() {
	T=$F/t$BATS_TEST_NUMBER
	mkdir -p "$T"
}

teardown() {
	rm -rf "$T"
}

# small PROG ARGS...: run $DS_BIN/PROG with at most 256 MiB of address space
small() {
	local p=$DS_BIN/$1
	shift
	if ldd "$p" 2>/dev/null | grep -q libasan; then
		"$p" "$@"
	else
		(ulimit -v 262144 && exec "$p" "$@")
	fi
}

# refused PROG ARGS... -- WORDS...: exit 1, one line "PROG: ..." with WORDS
refused() {
	local prog=$1 args=() words=()
	shift
	while [ $# -gt 0 ] && [ "$1" != -- ]; do args+=("$1"); shift; done
	[ $# -gt 0 ] && shift
	words=("$@")
	run small "$prog" "${args[@]}"
	echo "status $status: $output"
	[ "$status" -eq 1 ]
	[ "${#lines[@]}" -eq 1 ]
	[[ "${lines[0]}" == "$prog: "* ]]
	for w in "${words[@]}"; do
		[[ "$output" == *"$w"* ]] || { echo "missing: $w"; return 1; }
	done
}

# a checkpoint: the golden llama with its model.safetensors replaced by
# the bytes python writes to sys.argv[1]
ckpt() {
	cp -r "$GOLD/llama" "$T/ck"
	$PY -c "$1" "$T/ck/model.safetensors"
	echo "$T/ck"
}

@test "the limit is no obstacle to real files" {
	run small ds-convert --model-path "$GOLD/ds3-awq" --output-dir "$T/m" --quiet
	[ "$status" -eq 0 ]
	run small ds-run -m "$T/m" --ids -n 2 --temp 0 <<<"1 2 3"
	[ "$status" -eq 0 ]
	run small ds-tok -t "$GOLD/llama/tokenizer.json" <<<"hello"
	[ "$status" -eq 0 ]
}

@test "safetensors: header lengths of 2^40 and of 99 MB in a 40-byte file" {
	s=$(ckpt 'import struct,sys; open(sys.argv[1],"wb").write(struct.pack("<Q",1<<40)+b"{}"+b" "*30)')
	refused ds-convert --inspect "$s" -- "model.safetensors" "header length 1099511627776 exceeds"
	s2=$(ckpt 'import struct,sys; open(sys.argv[1],"wb").write(struct.pack("<Q",99999999)+b"{}"+b" "*30)')
	refused ds-convert --inspect "$s2" -- "header length 99999999 past the end of the file"
}

@test "safetensors: a shape of 2^40 x 2^40 elements, and offsets past 2^48" {
	s=$(ckpt 'import json,struct,sys
h=json.dumps({"a":{"dtype":"F32","shape":[1<<40,1<<40],"data_offsets":[0,4]}}).encode()
open(sys.argv[1],"wb").write(struct.pack("<Q",len(h))+h+b"\0"*4)')
	refused ds-convert --inspect "$s" -- "tensor a" "overflows"
	s=$(ckpt 'import json,struct,sys
h=json.dumps({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,1<<50]}}).encode()
open(sys.argv[1],"wb").write(struct.pack("<Q",len(h))+h+b"\0"*4)')
	refused ds-convert --inspect "$s" -- "tensor a" "data_offsets is not two integers"
}

@test "an archive whose 10 kB hold a sparse 1 TB file is refused before extracting" {
	mkdir "$T/a"
	cp "$GOLD/llama/config.json" "$T/a/"
	truncate -s 1T "$T/a/model.safetensors"
	tar -S -C "$T" -cf "$T/a.tar" a
	[ "$(stat -c %s "$T/a.tar")" -lt 100000 ]
	refused ds-convert --model-path "$T/a.tar" --output-dir "$T/out" --quiet -- \
		"a.tar" "model.safetensors\" of 1099511627776 bytes" "bytes free"
	[ ! -e "$T/out" ]
	! compgen -G "$T/out.tmp-*"
}

@test "tokenizer.json: one id of 16777215 in a 60-byte file" {
	printf '{"model":{"type":"BPE","vocab":{"a":0,"b":16777215},"merges":[]}}' \
		>"$T/tokenizer.json"
	refused ds-tok -t "$T/tokenizer.json" -- "tokenizer.json" "id 16777215 for 2 tokens"
}

@test "tokenizer.bin: a vocabulary of 2^24 tokens, sections past the end, a short file" {
	tb=$F/llama/tokenizer.bin
	# header: n_vocab at byte 32; the section table from byte 128, 24 bytes
	# each (kind, count, offset, size); the tokens section is kind 2
	$PY - "$tb" "$T/huge.bin" "$T/past.bin" <<'EOF'
import struct, sys
b = bytearray(open(sys.argv[1], "rb").read())
n_sect = struct.unpack_from("<I", b, 36)[0]
huge = bytearray(b)
struct.pack_into("<I", huge, 32, (1 << 24) - 1)
for i in range(n_sect):
    kind = struct.unpack_from("<I", huge, 128 + 24 * i)[0]
    if kind == 2:
        struct.pack_into("<IQQ", huge, 128 + 24 * i + 4, (1 << 24) - 1,
                         struct.unpack_from("<Q", huge, 128 + 24 * i + 8)[0],
                         ((1 << 24) - 1) * 24)
open(sys.argv[2], "wb").write(huge)
past = bytearray(b)
struct.pack_into("<Q", past, 128 + 8, 1 << 62)
open(sys.argv[3], "wb").write(past)
EOF
	refused ds-tok -t "$T/huge.bin" -- "huge.bin" "outside the file"
	refused ds-tok -t "$T/past.bin" -- "past.bin" "outside the file"
	head -c 1000 "$tb" >"$T/short.bin"
	refused ds-tok -t "$T/short.bin" -- "short.bin" "header says" "the file has 1000"
}

@test "SentencePiece .model: a piece claiming 2^62 bytes" {
	# field 1 (pieces), wire type 2, then a varint length of 2^62
	printf '\x0a\x80\x80\x80\x80\x80\x80\x80\x80\x40abc' >"$T/x.model"
	refused ds-tok -t "$T/x.model" -- "x.model"
}

@test "model.meta: a shape of 2^40 x 2^40, an offset past model.bin, a short model.bin" {
	for case in shape offset; do
		cp -r "$F/llama" "$T/$case"
		$PY - "$T/$case/model.meta" "$case" <<'EOF'
import json, sys
p, case = sys.argv[1], sys.argv[2]
m = json.load(open(p))
t = m["tensors"][0]
if case == "shape":
    t["shape"] = [1 << 40, 1 << 40]
else:
    t["offset"] = 1 << 50
json.dump(m, open(p, "w"))
EOF
	done
	refused ds-run -m "$T/shape" --ids -n 1 <<<"1" -- "tensor token_embd"
	refused ds-run -m "$T/offset" --ids -n 1 <<<"1" -- "tensor token_embd" "past the end of model.bin"
	cp -r "$F/llama" "$T/short"
	truncate -s -4096 "$T/short/model.bin"
	refused ds-run -m "$T/short" --ids -n 1 <<<"1" -- "past the end of model.bin"
}

@test "the token stream: signs, NULs and numbers past 2^31 are not ids" {
	for line in '1 -2' '1 +2' '12345678901234567890' '1\0002'; do
		printf "$line\\n" >"$T/in"
		refused ds-run -m "$F/llama" --ids -n 1 <"$T/in" -- "line 1" "is not a token id"
	done
}

@test "model.bin truncated while ds-run uses it: one line and status 1, not SIGBUS" {
	cp -r "$F/llama" "$T/m"
	mkfifo "$T/in"
	"$DS_BIN/ds-run" -m "$T/m" --ids -n 4 --temp 0 --verbose <"$T/in" \
		>"$T/out" 2>"$T/err" &
	pid=$!
	exec 7<>"$T/in"   # (read-write: never blocks, even if ds-run is gone)
	# loaded once --verbose has described the model; stdin still open
	for _ in $(seq 600); do
		grep -q "KV cache" "$T/err" && break
		sleep 0.1
	done
	truncate -s 4096 "$T/m/model.bin"
	echo "1 2 3" >&7
	exec 7>&-
	rc=0
	wait $pid || rc=$?
	cat "$T/err"
	[ "$rc" -eq 1 ]
	tail -n 1 "$T/err" | grep -q "^ds-run: a mapped file (model.bin, tokenizer.bin or a checkpoint) was truncated while in use"
}

@test "tokenizer.bin truncated while ds-tok uses it: one line and status 1, not SIGBUS" {
	cp "$F/llama/tokenizer.bin" "$T/tokenizer.bin"
	mkfifo "$T/in"
	"$DS_BIN/ds-tok" -t "$T/tokenizer.bin" -l <"$T/in" >"$T/out" 2>"$T/err" 3>&- &
	pid=$!
	exec 7<>"$T/in"   # (after: ds-tok must not hold a writer itself)
	echo "hello world" >&7
	# in use: mapped by the process
	for _ in $(seq 100); do
		grep -q "$T/tokenizer.bin" "/proc/$pid/maps" 2>/dev/null && break
		sleep 0.05
	done
	grep -q "$T/tokenizer.bin" "/proc/$pid/maps"
	truncate -s 0 "$T/tokenizer.bin"
	echo "another line" >&7
	exec 7>&-
	rc=0
	wait $pid || rc=$?
	cat "$T/err"
	[ "$rc" -eq 1 ]
	[ "$(wc -l <"$T/err")" -eq 1 ]
	grep -q "^ds-tok: a mapped file (model.bin, tokenizer.bin or a checkpoint) was truncated while in use" "$T/err"
}
