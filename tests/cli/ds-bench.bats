#!/usr/bin/env bats
# ds-bench.bats - options, exit codes and the plumbing formats of ds-bench.

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
}

@test "ds-bench refuses an unknown DS_ISA with exit 1" {
	DS_ISA=sse9 run "$DS_BIN/ds-bench" --membw -q -t 1
	[ "$status" -eq 1 ]
	[[ "$output" == "ds-bench: DS_ISA=sse9: unknown ISA"* ]]
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
        assert r["ghz"] > 0.2 and r["ratio"] > 0, r
'
}

@test "ds-bench --membw -o csv: the header, then one probe and two barrier rows per thread count" {
	DS_ISA=scalar run "$DS_BIN/ds-bench" --membw -q -t 1,2 -o csv
	[ "$status" -eq 0 ]
	[ "${lines[0]}" = "op,type,n,k,t,threads,sec,gbs,gops,ratio,us,ghz" ]
	[ "${#lines[@]}" -eq 7 ]
	[[ "${lines[1]}" == membw,read,*,1,* ]]
	[[ "${lines[5]}" == barrier,run,*,2,* ]]
	[[ "${lines[6]}" == barrier,sync,*,2,* ]]
}
