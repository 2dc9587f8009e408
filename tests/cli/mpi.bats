#!/usr/bin/env bats
# mpi.bats - one model over the ranks of an MPI job (--mpi, expert
# parallelism: docs/distributed.md), 2 and 3 ranks on this machine.
#
# Reference: the single process.  The ranks add the experts' outputs in
# its order with its kernels, so the logits must be equal byte for byte
# (tolerance 0; the single process is held to the PyTorch reference by
# ds-run.bats), and so must greedy and seeded continuations.  Failures:
# a rank killed or stopped ends the job with a line and a non-zero
# status, well before the guard's timeout.
#
# Only shared memory and loopback: Open MPI's ob1 over the self and vader
# transports, its out-of-band channel on lo; --oversubscribe for 3 ranks
# on 2 cores; root allowed (CI runs as root).

G=testdata/golden

setup_file() {
	F=$(mktemp -d /dev/shm/ds-mpi-bats.XXXXXX 2>/dev/null || mktemp -d)
	export F
	local c
	for c in ds2-lite ds3 ds3-awq llama; do
		"$DS_BIN"/ds-convert --model-path "$G/$c" --output-dir "$F/$c" --quiet
	done
	# a long input for the failure tests: the job is still running when
	# a rank is killed (its end does not matter)
	awk '{ for (i = 0; i < 4000; i++) printf "%s ", $0; print "" }' "$G/ds3/prompt.ids" >"$F/long.ids"
	export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
	export OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,vader
	export OMPI_MCA_btl_vader_single_copy_mechanism=none
	export OMPI_MCA_oob_tcp_if_include=lo PMIX_MCA_ptl_tcp_if_include=lo
	export OMPI_MCA_rmaps_base_oversubscribe=1
	# make sanitize: Open MPI's leaks are suppressed by library name
	# (tests/lsan-mpi.supp), which only the slow unwinder sees
	[ -z "${ASAN_OPTIONS:-}" ] || export ASAN_OPTIONS="$ASAN_OPTIONS:fast_unwind_on_malloc=0"
}

teardown_file() {
	rm -rf "$F"
}

setup() {
	T=$F/t$BATS_TEST_NUMBER
	mkdir -p "$T"
}

teardown() {
	[ -z "${JOB:-}" ] || kill -KILL "$JOB" 2>/dev/null || true
	rm -rf "$T"
}

# mpi N PROG ARGS...: PROG on N ranks (a hang ends after 60 s, status 124)
mpi() {
	local n=$1 p=$2
	shift 2
	timeout 60 mpirun --oversubscribe -n "$n" "$DS_BIN/$p" --mpi "$@"
}

# same CASE N: the prompt's logits (-n 0 positions) and a greedy
# continuation on N ranks, against one process, byte for byte
same() {
	local c=$1 n=$2
	"$DS_BIN"/ds-run -m "$F/$c" --ids -n 24 --temp 0 --logits-out "$T/one.f32" \
		<"$G/$c/prompt.ids" >"$T/one.ids"
	mpi "$n" ds-run -m "$F/$c" --ids -n 24 --temp 0 --logits-out "$T/n.f32" --verbose \
		<"$G/$c/prompt.ids" >"$T/n.ids" 2>"$T/err" || { cat "$T/err"; return 1; }
	cmp "$T/one.f32" "$T/n.f32"
	cmp "$T/one.ids" "$T/n.ids"
	[ "$(wc -c <"$T/one.f32")" -gt 100000 ]
	# every rank said which experts it holds
	[ "$(grep -c "rank [0-9] of $n (pid" "$T/err")" -eq "$n" ]
}

@test "golden ds2-lite (V2: softmax greedy): 2 ranks give the single process's logits and tokens" {
	same ds2-lite 2
}

@test "golden ds2-lite: 3 ranks (experts 0-2, 3-5, 6-7)" {
	same ds2-lite 3
	grep -q "rank 0 of 3 (pid [0-9]*): experts 0-2 of 8" "$T/err"
	grep -q "rank 1 of 3 (pid [0-9]*): experts 3-5 of 8" "$T/err"
	grep -q "rank 2 of 3 (pid [0-9]*): experts 6-7 of 8" "$T/err"
}

@test "golden ds3 (V3: sigmoid, noaux_tc): 2 ranks" {
	same ds3 2
}

@test "golden ds3: 3 ranks" {
	same ds3 3
}

@test "golden ds3-awq (q4 experts): 3 ranks" {
	same ds3-awq 3
}

@test "--hugepages (each rank's share copied) and --verify: the single process's logits" {
	"$DS_BIN"/ds-run -m "$F/ds3" --ids -n 0 --logits-out "$T/one.f32" <"$G/ds3/prompt.ids"
	run mpi 2 ds-run -m "$F/ds3" --ids -n 0 --logits-out "$T/n.f32" --hugepages --verify \
		<"$G/ds3/prompt.ids"
	[ "$status" -eq 0 ]
	echo "$output" | grep -q "share of the experts is copied into transparent hugepages"
	cmp "$T/one.f32" "$T/n.f32"
	run mpi 2 ds-run -m "$F/ds3" --ids -n 0 --numa node <"$G/ds3/prompt.ids"
	[ "$status" -ne 0 ]
	echo "$output" | grep -q -- "--numa with expert parallelism"
}

@test "--parallel 3, sampled with a seed: the same tokens on 3 ranks" {
	local p=$G/ds3/prompt.ids
	{ cut -d' ' -f1-20 "$p"; cut -d' ' -f5-9 "$p"; cut -d' ' -f30-70 "$p"; cut -d' ' -f2-3 "$p"; } >"$T/in.ids"
	"$DS_BIN"/ds-run -m "$F/ds3" --ids --seed 7 --temp 0.8 -n 30 --parallel 3 <"$T/in.ids" >"$T/one"
	mpi 3 ds-run -m "$F/ds3" --ids --seed 7 --temp 0.8 -n 30 --parallel 3 <"$T/in.ids" >"$T/n"
	[ "$(wc -l <"$T/one")" -eq 4 ]
	cmp "$T/one" "$T/n"
}

@test "--verbose: each rank's share of the weights, what it exchanged and waited" {
	run mpi 2 ds-run -m "$F/ds3" --ids -n 4 --temp 0 --verbose <"$G/ds3/prompt.ids"
	[ "$status" -eq 0 ]
	echo "$output" | grep -q "rank 1 of 2 (pid [0-9]*): experts 4-7 of 8, [0-9.]* MiB of the weights, RSS"
	# 2 MoE layers, 4 forward passes (the prompt, then the first 3
	# tokens sampled: the 4th is not fed back)
	echo "$output" | grep -q "rank 0: 8 exchanges, [0-9.]* MiB sent, [0-9.]* MiB received, [0-9.]* s waiting in them; 4 batches"
	echo "$output" | grep -q "rank 1: 8 exchanges"
}

@test "a killed rank ends the job: a line from the survivor, a non-zero status, no hang" {
	mpi 2 ds-run -m "$F/ds3" --perplexity --ctx-size 256 --verbose <"$F/long.ids" \
		>/dev/null 2>"$T/err" &
	JOB=$!
	local i pid=
	for i in $(seq 200); do
		pid=$(sed -n 's/.*rank 1 of 2 (pid \([0-9]*\)).*/\1/p' "$T/err")
		[ -n "$pid" ] && break
		sleep 0.05
	done
	[ -n "$pid" ]
	sleep 0.3
	kill -KILL "$pid"
	local st=0
	wait "$JOB" || st=$?
	JOB=
	cat "$T/err"
	[ "$st" -ne 0 ] && [ "$st" -ne 124 ]
	grep -q "ds-run: rank 0: SIGTERM: the MPI job is ending" "$T/err"
	grep -q "process rank 1 .* exited on signal 9" "$T/err"
}

@test "a stopped rank: rank 0 gives up after --mpi-timeout with one line" {
	mpi 2 ds-run -m "$F/ds3" --perplexity --ctx-size 256 --verbose --mpi-timeout 1 \
		<"$F/long.ids" >/dev/null 2>"$T/err" &
	JOB=$!
	local i pid=
	for i in $(seq 200); do
		pid=$(sed -n 's/.*rank 1 of 2 (pid \([0-9]*\)).*/\1/p' "$T/err")
		[ -n "$pid" ] && break
		sleep 0.05
	done
	[ -n "$pid" ]
	sleep 0.3
	kill -STOP "$pid"
	local st=0
	wait "$JOB" || st=$?
	JOB=
	kill -KILL "$pid" 2>/dev/null || true
	cat "$T/err"
	[ "$st" -ne 0 ] && [ "$st" -ne 124 ]
	grep -Eq "ds-run: rank 0: (the experts' exchange|a batch message): no answer from the other ranks in 1 s" "$T/err"
}

@test "ranks on different kernels are refused, by rank 0, before loading" {
	run timeout 60 mpirun -n 1 -x DS_ISA=avx2 "$DS_BIN"/ds-run --mpi -m "$F/ds3" --ids -n 1 : \
		-n 1 -x DS_ISA=scalar "$DS_BIN"/ds-run --mpi -m "$F/ds3" --ids -n 1 <"$G/ds3/prompt.ids"
	[ "$status" -eq 1 ]
	echo "$output" | grep -q "ds-run: rank 1 runs the scalar kernels, rank 0 avx2.*: every rank must compute alike"
}

@test "a model without routed experts is refused in one line" {
	run mpi 2 ds-run -m "$F/llama" --ids -n 1 <"$G/llama/prompt.ids"
	[ "$status" -eq 1 ]
	[ "$(echo "$output" | grep -c 'this model has none')" -eq 1 ]
}

@test "--mpi without mpirun: one rank, the single process's tokens" {
	"$DS_BIN"/ds-run -m "$F/ds3" --ids -n 12 --temp 0 <"$G/ds3/prompt.ids" >"$T/one"
	"$DS_BIN"/ds-run --mpi -m "$F/ds3" --ids -n 12 --temp 0 <"$G/ds3/prompt.ids" >"$T/n"
	cmp "$T/one" "$T/n"
}

@test "--mpi-timeout needs --mpi" {
	run "$DS_BIN"/ds-run -m "$F/ds3" --mpi-timeout 5
	[ "$status" -eq 2 ]
	run "$DS_BIN"/ds-serve -m "$F/ds3" --mpi-timeout 5
	[ "$status" -eq 2 ]
	echo "$output" | grep -q "needs --mpi"
}

@test "ds-serve --mpi: rank 0 answers as ds-run alone; SIGTERM to it ends every rank, status 0" {
	local ids port= i pid0=
	ids=$(cut -d' ' -f1-16 "$G/ds3/prompt.ids")
	want=$(echo "$ids" | "$DS_BIN"/ds-run -m "$F/ds3" --ids -n 12 --temp 0)
	mpi 2 ds-serve -m "$F/ds3" --port 0 --threads 1 2>"$T/log" &
	JOB=$!
	for i in $(seq 200); do
		port=$(sed -n 's|.*listening on http://127\.0\.0\.1:\([0-9]*\)/.*|\1|p' "$T/log")
		pid0=$(sed -n 's/.*rank 0 of 2 (pid \([0-9]*\)).*/\1/p' "$T/log")
		[ -n "$port" ] && [ -n "$pid0" ] && grep -q "following rank 0" "$T/log" && break
		sleep 0.05
	done
	[ -n "$port" ]
	for i in $(seq 200); do
		[ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/health")" = 200 ] && break
		sleep 0.05
	done
	got=$(curl -s "http://127.0.0.1:$port/v1/completions" -d "{\"prompt\": [${ids// /,}],
		\"max_tokens\": 12, \"temperature\": 0, \"return_tokens\": true}" |
		python3 -c 'import json, sys; print(*json.load(sys.stdin)["choices"][0]["tokens"])')
	[ "$got" = "$want" ]
	kill -TERM "$pid0"
	local st=0
	wait "$JOB" || st=$?
	JOB=
	cat "$T/log"
	[ "$st" -eq 0 ]
	grep -q "ds-serve: stopped" "$T/log"
}

@test "ds-bench --mpi: one report, with the bytes the ranks moved per token and the wait" {
	run mpi 2 ds-bench -m "$F/ds3" -p 16 -n 8 -r 1 -t 1 -o jsonl
	[ "$status" -eq 0 ]
	echo "$output" | grep '^{' | python3 -c '
import json, sys
rows = [json.loads(l) for l in sys.stdin]
assert len(rows) == 1, rows          # rank 0 alone reports
r = rows[0]
assert r["ranks"] == 2
# a decoded token: 2 MoE layers x 2 experts x 64 floats from the rank
# that holds each, and rank 0 sends the batch (4 + 5 int32s: the header,
# token, position, slot and prompt flag, the length of the slot)
assert r["tg_comm_bytes"] == 2 * 2 * 64 * 4 + 36, r
# a prompt of 16 in one pass: the same rows per token, and one batch of
# 4 + 4 x 16 + 1 int32s
assert r["pp_comm_bytes"] == 2 * 2 * 64 * 4 + (4 + 65) * 4 / 16, r
assert 0 < r["tg_comm_share"] < 1 and r["tg_comm_ms"] > 0, r
assert r["tg_wait_max_ms"] >= 0 and r["pp_comm_ms"] > 0, r
'
}

@test "ds-bench --mpi needs -m" {
	run "$DS_BIN"/ds-bench --mpi --synthetic deepseek-v2-lite
	[ "$status" -eq 2 ]
	echo "$output" | grep -q -- "--mpi needs -m DIR"
}

@test "ds-serve --mpi: a port rank 0 cannot bind ends every rank in one line, no hang" {
	python3 -c 'import socket, sys, time
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen()
print(s.getsockname()[1], flush=True); time.sleep(60)' >"$T/port" &
	JOB=$!
	local i
	for i in $(seq 100); do [ -s "$T/port" ] && break; sleep 0.05; done
	run mpi 2 ds-serve -m "$F/ds3" --port "$(cat "$T/port")"
	[ "$status" -eq 1 ]
	echo "$output" | grep -q "ds-serve: cannot listen on 127.0.0.1 port"
}
