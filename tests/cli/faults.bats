#!/usr/bin/env bats
# faults.bats - the faults users hit, injected: a full disk (a small tmpfs
# when this user may mount one, and a file-size limit), SIGKILL in the
# middle of a conversion, input files nobody may read, an output directory
# nobody may write, a ds-tune state that cannot be written or was torn.
# What must hold: exit status 1 and one line naming the file; never a
# loadable partial model; an existing model left exactly as it was; the
# temporary removed, at once or by the next run.  (ds-convert.bats has
# SIGTERM/SIGINT and a stale temporary; ds-tune.bats an apply killed
# half-way and a read-only setting: not repeated here.)

PY=/usr/bin/python3
GOLD=testdata/golden

setup_file() {
	F=$(mktemp -d /dev/shm/ds-faults.XXXXXX 2>/dev/null || mktemp -d)
	chmod 755 "$F"
	export F
	# 33 MB of bf16 weights: long enough to be caught in the middle
	$PY scripts/gen-fixture.py --arch llama --hidden 512 --ff 2048 --layers 4 \
		--heads 8 --kv-heads 8 --out "$F/big" >/dev/null
	"$DS_BIN/ds-convert" --model-path "$GOLD/llama" --output-dir "$F/small" --quiet
	chmod -R a+rX "$F"
}

teardown_file() {
	rm -rf "$F"
}

setup() {
	T=$F/t$BATS_TEST_NUMBER
	mkdir -p "$T"
	chmod 755 "$T"
}

teardown() {
	mountpoint -q "$T/fs" 2>/dev/null && umount "$T/fs"
	rm -rf "$T"
}

conv() { "$DS_BIN/ds-convert" "$@"; }

# old MODEL: MODEL is the small golden conversion, untouched and loadable
old_intact() {
	cmp "$F/small/model.meta" "$1/model.meta"
	cmp "$F/small/model.bin" "$1/model.bin"
	run conv --verify "$1"
	[ "$status" -eq 0 ]
}

no_tmp() {
	! compgen -G "$1.tmp-*"
}

# a tmpfs of $1 at $T/fs, or skip saying why
small_fs() {
	mkdir -p "$T/fs"
	mount -t tmpfs -o "size=$1,mode=755" tmpfs "$T/fs" 2>/dev/null ||
		skip "cannot mount a tmpfs here (needs root with CAP_SYS_ADMIN); the ulimit -f test covers a full disk"
}

# as nobody (root ignores permissions), or as ourselves when not root
as_user() {
	if [ "$(id -u)" = 0 ]; then
		command -v setpriv >/dev/null || skip "no setpriv to drop root"
		setpriv --reuid=65534 --regid=65534 --clear-groups "$@"
	else
		"$@"
	fi
}

# one line "ds-convert: ..." with every further argument in it
one_line() {
	echo "status $status: $output"
	[ "$status" -eq 1 ]
	[ "${#lines[@]}" -eq 1 ]
	[[ "${lines[0]}" == "ds-convert: "* ]]
	for w in "$@"; do
		[[ "$output" == *"$w"* ]] || { echo "missing: $w"; return 1; }
	done
}

@test "disk full (8 MB tmpfs): ENOSPC named, the old model kept, no temporary" {
	small_fs 8m
	cp -r "$F/small" "$T/fs/m"
	run conv --model-path "$F/big" --output-dir "$T/fs/m" --force --quiet
	one_line "No space left on device"
	old_intact "$T/fs/m"
	no_tmp "$T/fs/m"
	# and a new model: nothing appears
	rm -rf "$T/fs/m"
	run conv --model-path "$F/big" --output-dir "$T/fs/new" --quiet
	one_line "No space left on device"
	[ ! -e "$T/fs/new" ]
	no_tmp "$T/fs/new"
	[ "$(du -s "$T/fs" | cut -f1)" -lt 100 ]
}

@test "a file-size limit (ulimit -f, EFBIG): the same" {
	cp -r "$F/small" "$T/m"
	# SIGXFSZ ignored, as a shell ignores it: the write fails with EFBIG
	run bash -c 'trap "" XFSZ; ulimit -f 4096; exec "$0" "$@"' \
		"$DS_BIN/ds-convert" --model-path "$F/big" --output-dir "$T/m" --force --quiet
	one_line "File too large"
	old_intact "$T/m"
	no_tmp "$T/m"
}

@test "SIGKILL in the middle: the old model intact, the temporary not loadable, then removed" {
	cp -r "$F/small" "$T/m"
	# (the program itself in the background, not a function: kill hits it)
	"$DS_BIN/ds-convert" --model-path "$F/big" --output-dir "$T/m" --force \
		--quantize q4 --threads 1 --quiet &
	pid=$!
	# until the new model.bin has data in it
	until compgen -G "$T/m.tmp-*/model.bin" >/dev/null &&
		[ -s "$(compgen -G "$T/m.tmp-*/model.bin" | head -n 1)" ]; do
		kill -0 $pid 2>/dev/null || break
	done
	kill -KILL $pid
	rc=0
	wait $pid || rc=$?
	[ "$rc" -eq 137 ]
	old_intact "$T/m"
	tmp=$(compgen -G "$T/m.tmp-*")
	[ -d "$tmp" ]
	[ ! -e "$tmp/model.meta" ]   # written last: a partial model never loads
	run "$DS_BIN/ds-run" -m "$tmp" --ids -n 1 <<<"1"
	[ "$status" -eq 1 ]
	[[ "$output" == *"model.meta"* ]]
	# the next run (some seconds later: younger ones may be in use) cleans up
	touch -d '1 minute ago' "$tmp"
	conv --model-path "$GOLD/llama" --output-dir "$T/other" --quiet
	[ -d "$tmp" ]                 # only temporaries of its own DST
	conv --model-path "$GOLD/llama" --output-dir "$T/m" --force --quiet
	[ ! -e "$tmp" ]
	old_intact "$T/m"
}

@test "SIGKILL while an archive is extracted: the next run removes what it left" {
	tar -C "$F" -cf "$T/big.tar" big
	"$DS_BIN/ds-convert" --model-path "$T/big.tar" --output-dir "$T/m" --quiet &
	pid=$!
	until compgen -G "$T/m.tmp-*/big/model.safetensors" >/dev/null; do
		kill -0 $pid 2>/dev/null || break
	done
	kill -KILL $pid
	wait $pid || true
	[ ! -e "$T/m" ]
	for d in $(compgen -G "$T/m.tmp-*"); do touch -d '1 minute ago' "$d"; done
	conv --model-path "$GOLD/llama" --output-dir "$T/m" --quiet
	no_tmp "$T/m"
	[ -e "$T/m/model.meta" ]
}

@test "unreadable inputs: the file and the reason named, nothing written" {
	for f in config.json model.safetensors tokenizer.json tokenizer_config.json; do
		rm -rf "$T/src" "$T/out"
		cp -r "$GOLD/llama" "$T/src"
		chmod -R a+rX "$T/src"
		chmod 000 "$T/src/$f"
		mkdir "$T/out"
		chmod 777 "$T/out"
		run as_user "$DS_BIN/ds-convert" --model-path "$T/src" --output-dir "$T/out/m" --quiet
		one_line "$f" "Permission denied"
		[ ! -e "$T/out/m" ]
		no_tmp "$T/out/m"
	done
}

@test "an output directory nobody may write: refused before any work" {
	mkdir "$T/ro"
	chmod 555 "$T/ro"
	run as_user "$DS_BIN/ds-convert" --model-path "$GOLD/llama" --output-dir "$T/ro/m" --quiet
	one_line "$T/ro" "Permission denied"
	[ -z "$(ls -A "$T/ro")" ]
	# a read-only file system, even for root
	small_fs 1m
	mount -o remount,ro "$T/fs"
	run conv --model-path "$GOLD/llama" --output-dir "$T/fs/m" --quiet
	one_line "Read-only file system"
}

# ---- ds-tune ----------------------------------------------------------------

tune_tree() {
	tests/cli/mkfakeroot.sh amd "$T/amd"
	cp -a "$T/amd" "$T/amd.orig"
	tests/cli/mkmodel.py "$T/model" llama 32 1073741824
}

@test "ds-tune apply: a state that cannot be saved (full disk) changes nothing" {
	small_fs 1m
	tune_tree
	mkdir -p "$T/fs/state"
	cat /dev/zero >"$T/fs/filler" 2>/dev/null || true
	run "$DS_BIN/ds-tune" apply -m "$T/model" --root "$T/amd" --state "$T/fs/state/st.json"
	echo "$output"
	[ "$status" -eq 1 ]
	[[ "$output" == "ds-tune: $T/fs/state/st.json"* ]]
	run diff -r "$T/amd.orig" "$T/amd"
	[ -z "$output" ]
}

@test "ds-tune revert: a torn state file is refused and names itself; a stale .tmp is ignored" {
	tune_tree
	"$DS_BIN/ds-tune" apply -m "$T/model" --root "$T/amd" --state "$T/st.json"
	cp "$T/st.json" "$T/st.good"
	head -c $(($(stat -c %s "$T/st.json") / 2)) "$T/st.good" >"$T/st.json"
	cp -a "$T/amd" "$T/amd.applied"
	run "$DS_BIN/ds-tune" revert --root "$T/amd" --state "$T/st.json"
	echo "$output"
	[ "$status" -eq 1 ]
	[[ "$output" == "ds-tune: $T/st.json: line "* ]]
	run diff -r "$T/amd.applied" "$T/amd"
	[ -z "$output" ]
	# a crash between writing the temporary and the rename leaves st.json.tmp
	cp "$T/st.good" "$T/st.json"
	printf '{"format": "ds-tu' >"$T/st.json.tmp"
	run "$DS_BIN/ds-tune" revert --root "$T/amd" --state "$T/st.json"
	[ "$status" -eq 0 ]
	run diff -r "$T/amd.orig" "$T/amd"
	[ -z "$output" ]
	[ ! -e "$T/st.json" ] && [ ! -e "$T/st.json.tmp" ]
}
