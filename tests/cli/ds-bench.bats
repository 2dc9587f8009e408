#!/usr/bin/env bats
# ds-bench.bats - options, exit codes and the plumbing formats of ds-bench.

bats_require_minimum_version 1.5.0

setup() {
	: "${DS_BIN:=bin}"
}

@test "ds-bench --help prints the usage and exits 0" {
	run "$DS_BIN/ds-bench" --help
	[ "$status" -eq 0 ]
	[[ "$output" == *"--kernels"* ]]
	[[ "$output" == *"--membw"* ]]
}

@test "ds-bench --version" {
	run "$DS_BIN/ds-bench" --version
	[ "$status" -eq 0 ]
	[[ "$output" == "ds-bench "* ]]
}

@test "ds-bench usage errors exit 2" {
	run "$DS_BIN/ds-bench"
	[ "$status" -eq 2 ]
	run "$DS_BIN/ds-bench" --kernels -o xml
	[ "$status" -eq 2 ]
	[[ "$output" == "ds-bench: -o xml"* ]]
	run "$DS_BIN/ds-bench" --kernels -t 0
	[ "$status" -eq 2 ]
	run "$DS_BIN/ds-bench" --kernels -t 1,x
	[ "$status" -eq 2 ]
	run "$DS_BIN/ds-bench" --kernels -s 4096
	[ "$status" -eq 2 ]
	run "$DS_BIN/ds-bench" --kernels -w q5g32
	[ "$status" -eq 2 ]
	[[ "$output" == "ds-bench: -w q5g32: not a weight type"* ]]
	run "$DS_BIN/ds-bench" --kernels extra
	[ "$status" -eq 2 ]
	run "$DS_BIN/ds-bench" --frobnicate
	[ "$status" -eq 2 ]
	run "$DS_BIN/ds-bench" --synthetic test-llama -b 0
	[ "$status" -eq 2 ]
	[[ "$output" == "ds-bench: --batch 0: expected 1 to 65536"* ]]
	run "$DS_BIN/ds-bench" --kernels -b 64
	[ "$status" -eq 2 ]
	run "$DS_BIN/ds-bench" --synthetic test-llama --verify 2 -b 64
	[ "$status" -eq 2 ]
}

@test "ds-bench refuses an unknown DS_ISA with exit 1" {
	DS_ISA=sse9 run "$DS_BIN/ds-bench" --membw -q -t 1
	[ "$status" -eq 1 ]
	[[ "$output" == "ds-bench: DS_ISA=sse9: unknown ISA"* ]]
}

@test "ds-bench --kernels -s NxK: the first matvec and the matmul rows take that shape" {
	run "$DS_BIN/ds-bench" --kernels -q -t 1 -w q8g32 -s 512x1024 -o csv
	[ "$status" -eq 0 ]
	echo "$output" | /usr/bin/python3 -c '
import csv, sys
rows = [r for r in csv.DictReader(sys.stdin) if r["op"] in ("matvec", "matmul")]
shape = lambda r: (r["n"], r["k"])
assert rows[0]["op"] == "matvec" and shape(rows[0]) == ("512", "1024"), rows[0]
assert all(shape(r) == ("512", "1024") for r in rows if r["op"] == "matmul"), rows
'
}

@test "ds-bench --kernels -o json has every kind of row" {
	run "$DS_BIN/ds-bench" --kernels -q -t 1 -o json
	[ "$status" -eq 0 ]
	echo "$output" | /usr/bin/python3 -c '
import json, sys
d = json.load(sys.stdin)
assert d["isa"], d
ops = {r["op"] for r in d["rows"]}
assert ops == {"membw", "barrier", "peak", "matvec", "matmul"}, ops
for r in d["rows"]:
    assert r["threads"] == 1 and r["sec"] > 0, r
    if r["op"] in ("matvec", "matmul"):
        assert r["ratio"] > 0 and r["gops"] > 0, r
    if r["op"] == "peak":
        # no x86 core clocks past about 6.2 GHz (a chain of immediate
        # adds, folded at rename on recent Intel cores, timed 17)
        assert 0.2 < r["ghz"] < 7 and r["ratio"] > 0, r
'
}

@test "ds-bench --membw -o csv: the header, then two probe and two barrier rows per thread count" {
	DS_ISA=scalar run "$DS_BIN/ds-bench" --membw -q -t 1,2 -o csv
	[ "$status" -eq 0 ]
	[ "${lines[0]}" = "op,type,n,k,t,threads,sec,gbs,gops,ratio,us,ghz" ]
	[ "${#lines[@]}" -eq 9 ]
	[[ "${lines[1]}" == membw,read,*,1,* ]]
	[[ "${lines[2]}" == membw,best,*,1,* ]]
	[[ "${lines[5]}" == membw,read,*,2,* ]]
	[[ "${lines[7]}" == barrier,run,*,2,* ]]
	[[ "${lines[8]}" == barrier,sync,*,2,* ]]
	# the sustained rate is the passes' mean, the best their fastest
	for i in 1 5; do
		IFS=, read -r _ _ _ _ _ _ sread gread _ <<<"${lines[$i]}"
		IFS=, read -r _ _ _ _ _ _ sbest gbest _ <<<"${lines[$((i + 1))]}"
		awk -v a="$sread" -v b="$sbest" -v g="$gread" -v h="$gbest" \
			'BEGIN { exit !(a >= b && g <= h && g > 0) }'
	done
}

# ---- models: -m DIR and --synthetic ----------------------------------------------------

# The fields every plumbing format has, in order (ds-bench(1)).
FIELDS=model,synthetic,arch,type,n_layer,model_bytes,active_bytes,params,active_params,head_params,attn_width,isa,hugepages,load_s,threads,n_prompt,n_gen,n_ctx,reps,pp_ts,pp_sd,tg_ts,tg_sd,ms_per_tok,ms_per_tok_sd,ttft_ms,ttft_sd,probe_gbs,probe_best_gbs,decode_gbs,bw_ratio,peak_kind,peak_gops,pp_gops,pp_ratio,rss_peak_mib,kv_mib,ranks,pp_comm_bytes,pp_comm_ms,pp_comm_share,pp_wait_max_ms,tg_comm_bytes,tg_comm_ms,tg_comm_share,tg_wait_max_ms,cache_type

# A tiny run: 2 rows (p 8,16 x n 4, one thread), 2 repetitions.
tiny() {
	"$DS_BIN/ds-bench" --synthetic test-llama -p 8,16 -n 4 -r 2 -t 1 "$@"
}

@test "ds-bench --synthetic list names every published shape with its size" {
	run "$DS_BIN/ds-bench" --synthetic list
	[ "$status" -eq 0 ]
	for s in deepseek-v2-lite deepseek-v2 r1-distill-qwen-1.5b r1-distill-qwen-7b \
		 r1-distill-llama-8b deepseek-coder-1.3b tinyllama-1.1b; do
		echo "$output" | grep -q "^$s "
	done
	echo "$output" | grep -q '^deepseek-v2-lite .*15.71 B params *2.45 B active'
}

@test "ds-bench --synthetic -o json: an array of rows with every field, sane values" {
	run --separate-stderr tiny -o json
	[ "$status" -eq 0 ]
	echo "$output" | /usr/bin/python3 -c '
import json, sys
rows = json.load(sys.stdin)
want = sys.argv[1].split(",")
assert len(rows) == 2, rows
for r, p in zip(rows, (8, 16)):
    assert list(r) == want, list(r)
    assert r["model"] == "test-llama" and r["synthetic"] is True, r
    assert r["arch"] == "llama" and r["type"] == "q4g32" and r["n_layer"] == 2, r
    assert r["n_prompt"] == p and r["n_gen"] == 4 and r["reps"] == 2, r
    assert r["threads"] == 1 and r["n_ctx"] == 16 + 4, r
    for k in ("pp_ts", "tg_ts", "ms_per_tok", "ttft_ms", "probe_gbs",
              "decode_gbs", "bw_ratio", "peak_gops", "pp_gops", "pp_ratio",
              "rss_peak_mib", "kv_mib", "model_bytes", "active_bytes"):
        assert r[k] > 0, (k, r)
    assert 0 < r["active_bytes"] < r["model_bytes"], r
    assert 0 < r["active_params"] < r["params"], r
    # tg_ts and ms_per_tok: means over the 2 repetitions of tokens/s and
    # of ms a token, so the rates were tg_ts -+ tg_sd / sqrt(2) (a bound of
    # 1000 +- 50% on their product failed when one repetition of this tiny
    # model, 12-64 us a token, took five times the other one)
    d = r["tg_sd"] / 2 ** 0.5
    ms = 500 * (1 / (r["tg_ts"] + d) + 1 / (r["tg_ts"] - d))
    assert abs(r["ms_per_tok"] - ms) < 1e-3 * ms, (ms, r)
    assert abs(r["decode_gbs"] - r["active_bytes"] * r["tg_ts"] / 1e9) < 1e-3 * r["decode_gbs"] + 1e-9, r
    assert abs(r["bw_ratio"] - r["decode_gbs"] / r["probe_gbs"]) < 1e-3, r
    # the ruler is the sustained rate of the passes, beside it the fastest pass
    assert r["probe_best_gbs"] >= r["probe_gbs"] * (1 - 1e-9), r
    assert r["peak_kind"] == "int8", r
    assert r["cache_type"] == "f16", r
    # test-llama: 2 layers of 4 heads of 16: q.k and the values, 32 a pair;
    # a p-token prompt attends (p + 1) / 2 keys a token on average
    assert r["attn_width"] == 2 * 4 * 32, r
    # the output projection (512 x 64) runs for the last prompt token only
    assert r["head_params"] == 512 * 64, r
    g = 2 * (r["active_params"] - r["head_params"] + r["head_params"] / p +
             r["attn_width"] * (p + 1) / 2) * r["pp_ts"] / 1e9
    assert abs(r["pp_gops"] - g) < 1e-3 * g, (g, r)
    assert abs(r["pp_ratio"] - r["pp_gops"] / r["peak_gops"]) < 1e-3 * r["pp_ratio"], r
' "$FIELDS"
}

@test "ds-bench -o jsonl: one object per line; -o csv: the header, then the rows" {
	run --separate-stderr tiny -o jsonl
	[ "$status" -eq 0 ]
	[ "${#lines[@]}" -eq 2 ]
	echo "$output" | /usr/bin/python3 -c '
import json, sys
for line in sys.stdin:
    r = json.loads(line)
    assert ",".join(r) == sys.argv[1], list(r)
' "$FIELDS"
	run --separate-stderr tiny -o csv
	[ "$status" -eq 0 ]
	[ "${lines[0]}" = "$FIELDS" ]
	[ "${#lines[@]}" -eq 3 ]
	echo "$output" | /usr/bin/python3 -c '
import csv, sys
rows = list(csv.DictReader(sys.stdin))
assert len(rows) == 2 and rows[1]["n_prompt"] == "16", rows
assert float(rows[0]["tg_ts"]) > 0 and rows[0]["synthetic"] == "true", rows
'
}

@test "ds-bench: a row's peak RSS is its own, not what the previous thread count freed" {
	# TinyLlama's shape: with 1 then 2 threads the second row's peak
	# held the first's freed activation buffers (5.6 MiB, 0.75% of the
	# model) until the heap was trimmed before each row.  Under make
	# sanitize the heap is ASan's (its quarantine keeps freed blocks).
	[ -z "${ASAN_OPTIONS:-}" ] || skip "ASan's allocator keeps freed memory"
	run --separate-stderr "$DS_BIN/ds-bench" --synthetic tinyllama-1.1b -p 512 -n 4 \
		-t 1,2 -r 1 -o jsonl
	[ "$status" -eq 0 ]
	echo "$output" | /usr/bin/python3 -c '
import json, sys
rows = [json.loads(l) for l in sys.stdin]
assert [r["threads"] for r in rows] == [1, 2], rows
a, b = rows[0]["rss_peak_mib"], rows[1]["rss_peak_mib"]
assert b <= a + 2, (a, b)
mb = rows[0]["model_bytes"] / 2**20
assert (b - rows[1]["kv_mib"]) / mb < 1.05, (b, mb)
'
}

@test "ds-bench md: the model line, a pp and a tg row per combination, the peak RSS" {
	run --separate-stderr tiny
	[ "$status" -eq 0 ]
	[[ "${lines[0]}" == "model test-llama: llama, q4g32, 2 layers, "* ]]
	[ "$(echo "$output" | grep -c '^| test-llama .* | pp8 | ')" -eq 1 ]
	[ "$(echo "$output" | grep -c '^| test-llama .* | tg4 | ')" -eq 2 ]
	[[ "${lines[-1]}" == "peak RSS "*" MiB" ]]
	# progress went to stderr
	[[ "$stderr" == *"ds-bench: loading "* ]]
}

@test "ds-bench --synthetic: MoE (MLA) and every --type; -p 0 / -n 0 skip a test" {
	run --separate-stderr "$DS_BIN/ds-bench" --synthetic test-deepseek2 --type q8g64 \
		-p 0 -n 3 -r 1 -t 1,2 -o jsonl
	[ "$status" -eq 0 ]
	[ "${#lines[@]}" -eq 2 ]
	echo "$output" | /usr/bin/python3 -c '
import json, sys
rows = [json.loads(l) for l in sys.stdin]
assert [r["threads"] for r in rows] == [1, 2], rows
for r in rows:
    assert r["arch"] == "deepseek2" and r["type"] == "q8g64", r
    assert r["pp_ts"] == 0 and r["tg_ts"] > 0 and r["n_prompt"] == 0, r
'
	run --separate-stderr "$DS_BIN/ds-bench" --synthetic test-llama --type bf16 --layers 1 \
		-p 4 -n 0 -r 1 -t 1 -o jsonl
	[ "$status" -eq 0 ]
	[[ "$output" == *'"type": "bf16", "n_layer": 1,'* ]]
	[[ "$output" == *'"tg_ts": 0.0,'* ]]
	[[ "$output" == *'"peak_kind": "bf16"'* ]]
}

@test "ds-bench --cache-type: the cache each row runs on, its size; bad types refused" {
	# test-deepseek2 caches one row of the latent and k_pe (32 + 8) a
	# position and layer, 3 layers
	for t in f32 f16 bf16; do
		run --separate-stderr "$DS_BIN/ds-bench" --synthetic test-deepseek2 --cache-type $t \
			--ctx-size 2048 -p 16 -n 4 -r 1 -t 1 -o jsonl
		[ "$status" -eq 0 ]
		echo "$output" | /usr/bin/python3 -c '
import json, sys
t = sys.argv[1]
r = json.loads(sys.stdin.read())
assert r["cache_type"] == t and r["pp_ts"] > 0 and r["tg_ts"] > 0, r
b = {"f32": 4, "f16": 2, "bf16": 2}[t]
assert r["kv_mib"] * 2**20 == 3 * 2048 * 40 * b, r
' $t
	done
	# q8: blocks of 32 int8 and an f32 scale; TinyLlama's K and V rows
	# are 4 heads of 64
	run --separate-stderr "$DS_BIN/ds-bench" --synthetic tinyllama-1.1b --layers 1 \
		--cache-type q8 --ctx-size 1024 -p 8 -n 2 -r 1 -t 1 -o jsonl
	[ "$status" -eq 0 ]
	[[ "$output" == *'"kv_mib": 0.5625,'* ]]
	[[ "$output" == *'"cache_type": "q8"'* ]]
	run --separate-stderr "$DS_BIN/ds-bench" --synthetic test-deepseek2 --cache-type bf16 \
		-p 8 -n 0 -r 1 -t 1
	[ "$status" -eq 0 ]
	[[ "${lines[0]}" == *", KV cache bf16, "* ]]
	run "$DS_BIN/ds-bench" --synthetic test-deepseek2 --cache-type q4 -p 8
	[ "$status" -eq 2 ]
	[[ "$output" == "ds-bench: --cache-type q4: "*"(f32, f16, bf16, q8)"* ]]
	run "$DS_BIN/ds-bench" --kernels --cache-type f32
	[ "$status" -eq 2 ]
	# test-deepseek2's cache row of 40 does not fill q8's blocks of 32
	run "$DS_BIN/ds-bench" --synthetic test-deepseek2 --cache-type q8 -p 8 -n 0 -r 1 -t 1
	[ "$status" -eq 1 ]
	[[ "$output" == *"cache type q8 needs"*"multiples of 32"* ]]
	run --separate-stderr "$DS_BIN/ds-bench" --synthetic test-deepseek2 --cache-type bf16 \
		--verify 2 -p 8 -r 3 -t 1 -o csv
	[ "$status" -eq 0 ]
	[ "$(wc -l <<<"$output")" -eq 3 ]
}

@test "ds-bench --synthetic leaves nothing in TMPDIR, also when interrupted" {
	d=$BATS_TEST_TMPDIR/tmp
	mkdir -p "$d"
	TMPDIR=$d run --separate-stderr tiny -o csv
	[ "$status" -eq 0 ]
	[ -z "$(ls -A "$d")" ]
	# a long decode, interrupted once the model is written and loaded
	TMPDIR=$d "$DS_BIN/ds-bench" --synthetic test-llama -p 0 -n 100000 -r 64 -t 1 \
		>/dev/null 2>"$d.err" &
	pid=$!
	for _ in $(seq 100); do grep -q "tg100000" "$d.err" 2>/dev/null && break; sleep 0.1; done
	grep -q "loading" "$d.err"
	kill -INT $pid
	wait $pid || true
	[ -z "$(ls -A "$d")" ]
}

@test "ds-bench refuses a shape that does not fit, an unknown shape, bad options" {
	run "$DS_BIN/ds-bench" --synthetic deepseek-v3
	[ "$status" -eq 1 ]
	[[ "$output" == "ds-bench: --synthetic deepseek-v3 (--layers N makes it smaller): "*"do not fit"* ]]
	run "$DS_BIN/ds-bench" --synthetic gpt-9
	[ "$status" -eq 1 ]
	[[ "$output" == *"gpt-9: unknown shape"* ]]
	run "$DS_BIN/ds-bench" --synthetic test-llama --type q5
	[ "$status" -eq 1 ]
	[[ "$output" == "ds-bench: --type q5: expected q4, q8, bf16"* ]]
	run "$DS_BIN/ds-bench" --synthetic test-llama -p x
	[ "$status" -eq 2 ]
	[[ "$output" == "ds-bench: -p x: "* ]]
	run "$DS_BIN/ds-bench" --synthetic test-llama -r 0
	[ "$status" -eq 2 ]
	run "$DS_BIN/ds-bench" --synthetic test-llama --layers 0
	[ "$status" -eq 2 ]
	run "$DS_BIN/ds-bench" -m x --synthetic test-llama
	[ "$status" -eq 2 ]
	run "$DS_BIN/ds-bench" --kernels -p 512
	[ "$status" -eq 2 ]
	run "$DS_BIN/ds-bench" -m x --type q4
	[ "$status" -eq 2 ]
	run "$DS_BIN/ds-bench" --membw -o jsonl
	[ "$status" -eq 2 ]
	run "$DS_BIN/ds-bench" --synthetic test-llama --ctx-size 10 -p 16 -n 4 -r 1 -t 1
	[ "$status" -eq 1 ]
	[[ "$output" == *"--ctx-size 10 is below the longest test"* ]]
}

@test "ds-bench -m: a missing directory, not a model" {
	run "$DS_BIN/ds-bench" -m "$BATS_TEST_TMPDIR/none" -t 1
	[ "$status" -eq 1 ]
	[[ "${lines[-1]}" == "ds-bench: $BATS_TEST_TMPDIR/none/model.meta: "* ]]
	mkdir -p "$BATS_TEST_TMPDIR/bad"
	echo '{' > "$BATS_TEST_TMPDIR/bad/model.meta"
	: > "$BATS_TEST_TMPDIR/bad/model.bin"
	run "$DS_BIN/ds-bench" -m "$BATS_TEST_TMPDIR/bad" -t 1
	[ "$status" -eq 1 ]
	[[ "${lines[-1]}" == "ds-bench: $BATS_TEST_TMPDIR/bad/model.meta"* ]]
}

@test "ds-bench -m on a converted fixture: a qwen2 q4 (GPTQ) model" {
	T=$BATS_TEST_TMPDIR
	/usr/bin/python3 scripts/gen-fixture.py --out "$T/hf" --seed 3 --arch qwen2 --quant gptq >/dev/null
	"$DS_BIN"/ds-convert --model-path "$T/hf" --output-dir "$T/m" --quiet
	run --separate-stderr "$DS_BIN/ds-bench" -m "$T/m" -p 8 -n 4 -r 1 -t 1 -o jsonl
	[ "$status" -eq 0 ]
	echo "$output" | /usr/bin/python3 -c '
import json, sys
r = json.loads(sys.stdin.read())
assert r["arch"] == "qwen2" and r["type"].startswith("q4g"), r
assert r["synthetic"] is False and r["model"] == sys.argv[1], r
assert r["pp_ts"] > 0 and r["tg_ts"] > 0 and r["bw_ratio"] > 0, r
' "$T/m"
}

@test "ds-bench --synthetic --save DIR writes a model that -m runs, and refuses an existing DIR" {
	d=$BATS_TEST_TMPDIR/saved
	run "$DS_BIN/ds-bench" --synthetic test-deepseek2 --type q4g64 --save "$d"
	[ "$status" -eq 0 ]
	[ -f "$d/model.meta" ] && [ -f "$d/model.bin" ]
	run --separate-stderr "$DS_BIN/ds-bench" -m "$d" -p 4 -n 2 -r 1 -t 1 -o csv
	[ "$status" -eq 0 ]
	[[ "${lines[1]}" == "$d,false,deepseek2,q4g64,3,"* ]]
	run "$DS_BIN/ds-bench" --synthetic test-llama --save "$d"
	[ "$status" -eq 1 ]
	[ "$output" = "ds-bench: $d: already exists" ]
	run "$DS_BIN/ds-bench" -m "$d" --save "$d.2"
	[ "$status" -eq 2 ]
}

@test "ds-bench -m on a cp copy: read again into 2 MiB pages, warned while another process holds them" {
	d=$BATS_TEST_TMPDIR/orig c=$BATS_TEST_TMPDIR/copy r=$BATS_TEST_TMPDIR/ready
	"$DS_BIN/ds-bench" --synthetic tinyllama-1.1b --layers 1 --save "$d" 2>/dev/null
	# read cold, a model maps in 2 MiB pages here, or the test cannot see anything
	/usr/bin/python3 -c 'import os, sys
fd = os.open(sys.argv[1], os.O_RDONLY); os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)' "$d/model.bin"
	run --separate-stderr "$DS_BIN/ds-bench" -m "$d" -p 0 -n 1 -r 1 -t 1
	[ "$status" -eq 0 ]
	if [[ "$stderr" == *"maps in 2 MiB pages"* ]]; then
		skip "a cold read gives no 2 MiB pages here"
	fi
	cp -r "$d" "$c"
	/usr/bin/python3 -c 'import mmap, sys, time
f = open(sys.argv[1], "rb"); m = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
s = sum(m[i] for i in range(0, len(m), 4096)); open(sys.argv[2], "w").close(); time.sleep(60)' \
		"$c/model.bin" "$r" &
	holder=$!
	for i in $(seq 100); do [ -f "$r" ] && break; sleep 0.1; done
	run --separate-stderr "$DS_BIN/ds-bench" -m "$c" -p 0 -n 1 -r 1 -t 1
	kill $holder; wait $holder || true
	[ "$status" -eq 0 ]
	[[ "$stderr" == *"ds-bench: warning: 0% of model.bin maps in 2 MiB pages"* ]]
	run --separate-stderr "$DS_BIN/ds-bench" -m "$c" -p 0 -n 1 -r 1 -t 1
	[ "$status" -eq 0 ]
	[[ "$stderr" != *"maps in 2 MiB pages"* ]]
	[[ "$stderr" == *"tg1 1/1"* ]]
}

@test "ds-bench --verify: a cost row per entry count, 1 first, and the speedup bounds" {
	run --separate-stderr "$DS_BIN/ds-bench" --synthetic test-deepseek2 --verify 4 -p 8 -r 3 -t 1
	[ "$status" -eq 0 ]
	[[ "$output" == *"| 1 | "*" | 1.00 |"* ]]
	[[ "$output" == *"| 4 | "* ]]
	[[ "$output" == *"| 0.9 | "*"x | "* ]]
	run --separate-stderr "$DS_BIN/ds-bench" --synthetic test-deepseek2 --verify 3 -p 8 -r 3 -t 1 -o csv
	[ "$status" -eq 0 ]
	[ "$(sed -n 1p <<<"$output")" = "model,threads,ctx,entries,ms,cost" ]
	[ "$(wc -l <<<"$output")" -eq 4 ]
	[[ "$(sed -n 2p <<<"$output")" == test-deepseek2,1,8,1,*,1.0000 ]]
}

@test "ds-bench --spec: plain and speculative in turn, the same tokens, the row's fields" {
	T=$BATS_TEST_TMPDIR
	"$DS_BIN/ds-convert" --model-path testdata/demo/awq --output-dir "$T/demo" --quiet
	run --separate-stderr "$DS_BIN/ds-bench" -m "$T/demo" --spec ngram \
		--prompt-file testdata/demo/prompt.txt -n 32 -r 2 -t 1 -o csv
	[ "$status" -eq 0 ]
	[[ "$(sed -n 1p <<<"$output")" == model,drafter,k,n,reps,threads,plain_ts,spec_ts,speedup,* ]]
	# greedy without a penalty loops on this model: n-gram drafts are kept
	row=$(sed -n 2p <<<"$output")
	[[ "$row" == "$T/demo,ngram,0,32,2,1,"* ]]
	[[ "$row" == *",1" ]]
	run --separate-stderr "$DS_BIN/ds-bench" -m "$T/demo" --spec mtp --spec-k 1 \
		--prompt-file testdata/demo/prompt.txt -n 32 -r 2 -t 1
	[ "$status" -eq 0 ]
	[[ "$output" == *"| mtp | "* ]]
	run "$DS_BIN/ds-bench" -m "$T/demo" --spec ngram
	[ "$status" -eq 2 ]
	run "$DS_BIN/ds-bench" -m "$T/demo" --spec-k 2 --prompt-file testdata/demo/prompt.txt
	[ "$status" -eq 2 ]
	run "$DS_BIN/ds-bench" --synthetic test-llama --verify 17
	[ "$status" -eq 2 ]
	run "$DS_BIN/ds-bench" --synthetic test-llama --verify 2 -n 8
	[ "$status" -eq 2 ]
}
