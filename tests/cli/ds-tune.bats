#!/usr/bin/env bats
# ds-tune.bats - show, plan, apply and revert on fake /sys and /proc trees
# (tests/cli/mkfakeroot.sh).  Nothing here touches the running system:
# every command that could write has --root.

DS=${DS_BIN:-bin}/ds-tune
PY=/usr/bin/python3

# Each kind of tree and the models are made once; every test copies them.
setup_file() {
	for k in intel amd container nohuge; do
		tests/cli/mkfakeroot.sh $k "$BATS_FILE_TMPDIR/trees/$k"
	done
	tests/cli/mkmodel.py "$BATS_FILE_TMPDIR/llama" llama 32 1073741824
	tests/cli/mkmodel.py "$BATS_FILE_TMPDIR/ds2" deepseek2 27 536870912
}

setup() {
	T=$BATS_TEST_TMPDIR
}

# tree KIND: a fresh fake root in $T/KIND and a pristine copy $T/KIND.orig
tree() {
	rm -rf "$T/$1" "$T/$1.orig"
	cp -a "$BATS_FILE_TMPDIR/trees/$1" "$T/$1"
	cp -a "$T/$1" "$T/$1.orig"
}

# model DIR ARCH LAYERS MODEL_BYTES: a model directory ds-run would load
model() {
	tests/cli/mkmodel.py "$@"
}

# hp DIR KEY...: hyper-parameters from DIR/model.meta, one line
hp() {
	$PY -c 'import json, sys; h = json.load(open(sys.argv[1]))["hparams"]
print(*(h[k] for k in sys.argv[2:]))' "$1/model.meta" "${@:2}"
}

llama() { ln -sfn "$BATS_FILE_TMPDIR/llama" "$T/llama"; }

# the value of a "KEY = VALUE" line of $output
val() {
	local l
	while IFS= read -r l; do
		if [[ $l == "$1 = "* ]]; then
			printf '%s\n' "${l#"$1 = "}"
			return
		fi
	done <<<"$output"
}

# as root, run "$@" without capabilities (root in a container with a
# read-only /sys); as anyone else, just run it
nocaps() {
	if [ "$(id -u)" = 0 ]; then
		setpriv --bounding-set=-all --inh-caps=-all "$@"
	else
		"$@"
	fi
}

need_nocaps() {
	if [ "$(id -u)" = 0 ] && ! setpriv --bounding-set=-all --inh-caps=-all true 2>/dev/null; then
		skip "cannot drop capabilities here"
	fi
}

# ---- usage -------------------------------------------------------------------

@test "ds-tune: -h, --version and usage errors" {
	run "$DS" -h
	[ "$status" -eq 0 ]
	[[ "$output" == *"ds-tune plan -m DIR"* ]]
	run "$DS" --version
	[ "$status" -eq 0 ]
	[[ "$output" == "ds-tune "[0-9]* ]]
	run "$DS" frobnicate
	[ "$status" -eq 2 ]
	[[ "$output" == *'unknown command "frobnicate"'* ]]
	run "$DS" apply --json --root "$T"
	[ "$status" -eq 2 ]
	run "$DS" plan
	[ "$status" -eq 2 ]
	[[ "$output" == *"plan needs -m DIR"* ]]
	run "$DS" plan -m x --instances 0
	[ "$status" -eq 2 ]
	run "$DS" show --root "$T/nonexistent"
	[ "$status" -eq 1 ]
	[[ "$output" == *"not a directory"* ]]
}

# ---- show ---------------------------------------------------------------------

@test "show: Intel server with 2 nodes and SMT, and what hurts" {
	tree intel
	run "$DS" show --root "$T/intel"
	[ "$status" -eq 0 ]
	[[ "$output" == *"Intel(R) Xeon(R) Platinum 8480+ (GenuineIntel)"* ]]
	[[ "$output" == *"2 sockets, 8 cores, 16 CPUs online (0-15), 2 threads per core"* ]]
	[[ "$output" == *"isa              avx512 (from /proc/cpuinfo flags)"* ]]
	[[ "$output" == *"node0          CPUs 0-3,8-11; memory 64000 MiB"* ]]
	[[ "$output" == *"node1          CPUs 4-7,12-15"* ]]
	[[ "$output" == *"cpufreq          intel_pstate, 16 policies"* ]]
	[[ "$output" == *"governor         powersave on CPUs 0-15"* ]]
	[[ "$output" == *"! should be performance:"* ]]
	[[ "$output" == *"boost            off (/sys/devices/system/cpu/intel_pstate/no_turbo = 1)"* ]]
	[[ "$output" == *"! should be on:"* ]]
	[[ "$output" == *"thp.enabled      always"* ]]
	[[ "$output" == *"! should be madvise:"* ]]
	[[ "$output" == *"numa_balancing   1"* ]]
	[[ "$output" == *"! should be 0:"* ]]
	[[ "$output" == *"1 GiB: 0 total"* ]]
	[[ "$output" == *"irqbalance       running"* ]]
	# busiest first: eth0-TxRx-0 counts 16 x 90000
	[[ "$output" == *"irq 130        1440000 on CPUs 0-15: IR-PCI-MSI-0000:3b:00.0 0-edge eth0-TxRx-0"* ]]
	[[ "$output" == *"cgroup2          /sys/fs/cgroup: controllers cpuset cpu"* ]]
	[[ "$output" == *"6 settings hurt inference"* ]]
}

@test "show --json: the same facts as data" {
	tree intel
	run "$DS" show --json --root "$T/intel"
	[ "$status" -eq 0 ]
	printf '%s' "$output" | $PY -c '
import json, sys
s = json.load(sys.stdin)
c = s["cpu"]
assert (c["sockets"], c["cores"], c["cpus"], c["threads_per_core"]) == (2, 8, 16, 2), c
assert c["online"] == "0-15" and c["smt"] == "on"
assert s["isa"] == {"name": "avx512", "from": "/proc/cpuinfo flags", "error": None}, s["isa"]
n = s["numa"]
assert n["from"] == "sysfs" and n["balancing"] == 1
assert [x["cpus"] for x in n["nodes"]] == ["0-3,8-11", "4-7,12-15"]
assert n["nodes"][1]["mem_free_kb"] == 61000000
assert [h["size_kb"] for h in n["nodes"][0]["hugepages"]] == [2048, 1048576]
f = s["cpufreq"]
assert f["driver"] == "intel_pstate" and f["boost"] is False
assert len(f["policies"]) == 16 and f["policies"][3]["cpus"] == "3"
assert all(p["governor"] == "powersave" for p in f["policies"])
assert s["thp"] == {"enabled": "always", "defrag": "madvise"}
assert [(h["size_kb"], h["total"]) for h in s["hugepages"]] == [(2048, 0), (1048576, 0)]
i = s["interrupts"]
assert i["count"] == 8 and i["irqbalance"] is True and i["default_affinity"] == "ffff"
assert i["busiest"][0] == {"irq": 130, "count": 1440000, "affinity": "0-15",
                           "name": "IR-PCI-MSI-0000:3b:00.0 0-edge eth0-TxRx-0"}
counts = [x["count"] for x in i["busiest"]]
assert counts == sorted(counts, reverse=True)
assert s["cgroup2"]["mount"] == "/sys/fs/cgroup"
assert s["cgroup2"]["subtree_control"] == "memory pids"
adv = sorted(a["setting"] for a in s["advice"])
assert adv == ["boost", "governor", "hugepages", "irqbalance", "numa_balancing",
               "thp.enabled"], adv
'
}

@test "show: AMD desktop with amd-pstate, boost on, nothing to say about THP" {
	tree amd
	run "$DS" show --root "$T/amd"
	[ "$status" -eq 0 ]
	[[ "$output" == *"1 socket, 8 cores, 16 CPUs online (0-15), 2 threads per core"* ]]
	[[ "$output" == *"cpufreq          amd-pstate-epp, 16 policies"* ]]
	[[ "$output" == *"energy preference balance_performance"* ]]
	[[ "$output" == *"boost            on (/sys/devices/system/cpu/cpufreq/boost = 1)"* ]]
	[[ "$output" == *"thp.enabled      madvise"* ]]
	[[ "$output" == *"2 settings hurt inference"* ]]
	run "$DS" show --json --root "$T/amd"
	printf '%s' "$output" | $PY -c '
import json, sys
s = json.load(sys.stdin)
assert sorted(a["setting"] for a in s["advice"]) == ["governor", "hugepages"]
assert s["numa"]["nodes"][0]["cpus"] == "0-15"
'
}

@test "show: a container with most files missing" {
	tree container
	run "$DS" show --root "$T/container"
	[ "$status" -eq 0 ]
	[[ "$output" == *"4 CPUs online (0-3), 1 thread per core (no topology files: one core per CPU)"* ]]
	[[ "$output" == *"isa              avx2 (from /proc/cpuinfo flags)"* ]]
	[[ "$output" == *"numa             1 node (none)"* ]]
	[[ "$output" == *"cpufreq          none"* ]]
	[[ "$output" == *"boost            unknown"* ]]
	[[ "$output" == *"interrupts       unknown (no /proc/interrupts)"* ]]
	[[ "$output" == *"controllers cpu memory pids"* ]]
	[[ "$output" == *"! should be cpu and cpuset available:"* ]]
	run "$DS" show --json --root "$T/container"
	printf '%s' "$output" | $PY -c '
import json, sys
s = json.load(sys.stdin)
assert s["cpufreq"]["driver"] is None and s["cpufreq"]["boost"] is None
assert s["numa"]["balancing"] is None and s["cpu"]["smt"] is None
assert s["interrupts"]["count"] == 0
'
}

@test "show: a machine without huge page support" {
	tree nohuge
	run "$DS" show --root "$T/nohuge"
	[ "$status" -eq 0 ]
	[[ "$output" == *"hugepages        unsupported"* ]]
	[[ "$output" == *"thp.enabled      unavailable"* ]]
	[[ "$output" == *"isa              scalar"* ]]
	[[ "$output" == *"governor         ondemand on CPUs 0-3"* ]]
	[[ "$output" == *"cpufreq          acpi-cpufreq, 4 policies"* ]]
	[[ "$output" == *"boost            off (/sys/devices/system/cpu/cpufreq/boost = 0)"* ]]
	[[ "$output" == *"cgroup2          not mounted"* ]]
	[[ "$output" != *"hugepages"*"! should be"*"TLB"* ]]
}

# ---- plan -------------------------------------------------------------------------

@test "plan: Intel, 2 instances: one node each, physical cores only, sizes" {
	tree intel
	llama
	run "$DS" plan -m "$T/llama" --instances 2 --root "$T/intel"
	[ "$status" -eq 0 ]
	# llama: KV = n_layer x 2 x n_head_kv x head_dim x 2 bytes per token,
	# at min(n_ctx_train, 4096) tokens; pages of 2 MiB for model + KV
	read -r L H D <<<"$(hp "$T/llama" n_layer n_head_kv head_dim)"
	kv=$((L * 2 * H * D * 2 * 4096))
	pages=$(( (1073741824 + kv + 2097151) / 2097152 ))
	[ "$(val /sys/devices/system/node/node0/hugepages/hugepages-2048kB/nr_hugepages)" = "$pages" ]
	[ "$(val /sys/devices/system/node/node1/hugepages/hugepages-2048kB/nr_hugepages)" = "$pages" ]
	[[ "$output" == *"# huge pages: $pages of 2 MiB per instance"* ]]
	[ "$(val /sys/kernel/mm/transparent_hugepage/enabled)" = madvise ]
	[ "$(val /proc/sys/kernel/numa_balancing)" = 0 ]
	[ "$(val /sys/devices/system/cpu/intel_pstate/no_turbo)" = 0 ]
	[ "$(printf '%s\n' "$output" | grep -c '/scaling_governor = performance$')" -eq 16 ]
	# node 0 has cores 0-3 (siblings 8-11), node 1 cores 4-7
	[ "$(val /sys/fs/cgroup/ds-tune/inst0/cpuset.cpus)" = 0-3 ]
	[ "$(val /sys/fs/cgroup/ds-tune/inst0/cpuset.mems)" = 0 ]
	[ "$(val /sys/fs/cgroup/ds-tune/inst1/cpuset.cpus)" = 4-7 ]
	[ "$(val /sys/fs/cgroup/ds-tune/inst1/cpuset.mems)" = 1 ]
	[ "$(val /sys/fs/cgroup/ds-tune/inst1/cpu.max)" = "max 100000" ]
	[ "$(val /sys/fs/cgroup/ds-tune/inst1/cpu.weight)" = 100 ]
	[ "$(val /sys/fs/cgroup/cgroup.subtree_control)" = "+cpu +cpuset" ]
	[[ "$output" == *"mkdir /sys/fs/cgroup/ds-tune/inst1"* ]]
	[ "$(val run.0)" = "ds-run -m $T/llama --threads 4 --cpus 0-3 --numa node --hugepages --ctx-size 4096" ]
	[ "$(val serve.1)" = "ds-serve -m $T/llama --threads 4 --cpus 4-7 --numa node --hugepages --ctx-size 4096 --host 127.0.0.1 --port 8081" ]
	# every interrupt that touched 0-7 now avoids it, and only those move
	printf '%s\n' "$output" | $PY -c '
import sys
lines = [l for l in sys.stdin.read().splitlines() if l.startswith("/proc/irq/")]
def cpus(s):
    out = set()
    for part in s.split(","):
        a, _, b = part.partition("-")
        out |= set(range(int(a), int(b or a) + 1))
    return out
moved = {}
for l in lines:
    path, value = l.split(" = ")
    if path.endswith("smp_affinity_list"):
        moved[int(path.split("/")[3])] = cpus(value)
    else:
        assert path == "/proc/irq/default_smp_affinity" and value == "ff00", l
assert sorted(moved) == [0, 8, 9, 120, 121, 122, 130], sorted(moved)
assert all(v and not v & set(range(8)) for v in moved.values()), moved
assert moved[121] == set(range(8, 16))
'
	[[ "$output" == *"# note: irqbalance is running"* ]]
}

@test "plan --json: the same plan as data" {
	tree intel
	llama
	run "$DS" plan -m "$T/llama" --instances 2 --root "$T/intel" --json
	[ "$status" -eq 0 ]
	printf '%s' "$output" >"$T/plan.json"
	run "$DS" plan -m "$T/llama" --instances 2 --root "$T/intel"
	printf '%s\n' "$output" >"$T/plan.txt"
	$PY - "$T/plan.json" "$T/plan.txt" "$T/llama" <<-'EOF'
	import json, os, sys
	p = json.load(open(sys.argv[1]))
	hp = json.load(open(sys.argv[3] + "/model.meta"))["hparams"]
	assert p["format"] == "ds-tune-plan" and p["version"] == 1
	m = p["model"]
	assert m["bytes"] == os.stat(sys.argv[3] + "/model.bin").st_size
	assert m["kv_bytes_per_token"] == hp["n_layer"] * 2 * hp["n_head_kv"] * hp["head_dim"] * 2
	assert m["ctx_size"] == 4096 and m["kv_bytes"] == m["kv_bytes_per_token"] * 4096
	assert p["hugepages_per_instance"] == -(-(m["bytes"] + m["kv_bytes"]) // 2097152)
	text = {}
	mk = set()
	for l in open(sys.argv[2]).read().splitlines():
	    if l.startswith("mkdir "):
	        mk.add(l[6:])
	    elif l.startswith("/"):
	        k, v = l.split(" = ")
	        text[k] = v
	js = {a["path"]: a["value"] for a in p["actions"] if a["op"] == "write"}
	assert js == text
	assert {a["path"] for a in p["actions"] if a["op"] == "mkdir"} == mk
	i = p["instances"]
	assert [(x["cpus"], x["nodes"], x["threads"]) for x in i] == [("0-3", "0", 4), ("4-7", "1", 4)]
	assert i[0]["run"] == "ds-run -m %s --threads 4 --cpus 0-3 --numa node --hugepages --ctx-size 4096" % sys.argv[3]
	assert i[1]["cgroup"] == "/sys/fs/cgroup/ds-tune/inst1"
	EOF
}

@test "plan: --threads, --ctx-size and a DeepSeek (MLA) model" {
	tree intel
	ln -sfn "$BATS_FILE_TMPDIR/ds2" "$T/ds2"
	run "$DS" plan -m "$T/ds2" --instances 3 --threads 2 --ctx-size 1000 --root "$T/intel"
	[ "$status" -eq 0 ]
	# MLA caches kv_lora_rank + qk_rope_head_dim values per layer
	read -r L R P <<<"$(hp "$T/ds2" n_layer kv_lora_rank qk_rope_head_dim)"
	kv=$((L * (R + P) * 2 * 1000))
	pages=$(( (536870912 + kv + 2097151) / 2097152 ))
	[[ "$output" == *"# huge pages: $pages of 2 MiB per instance"* ]]
	# 3 instances of 2: node 0, node 1, then node 0 again (most free cores)
	[ "$(val /sys/fs/cgroup/ds-tune/inst0/cpuset.cpus)" = 0-1 ]
	[ "$(val /sys/fs/cgroup/ds-tune/inst1/cpuset.cpus)" = 4-5 ]
	[ "$(val /sys/fs/cgroup/ds-tune/inst2/cpuset.cpus)" = 2-3 ]
	[ "$(val /sys/devices/system/node/node0/hugepages/hugepages-2048kB/nr_hugepages)" = $((2 * pages)) ]
	[ "$(val /sys/devices/system/node/node1/hugepages/hugepages-2048kB/nr_hugepages)" = "$pages" ]
	[ "$(val run.2)" = "ds-run -m $T/ds2 --threads 2 --cpus 2-3 --numa node --hugepages --ctx-size 1000" ]
	# more threads than one node has: the instance spans both
	run "$DS" plan -m "$T/ds2" --threads 6 --root "$T/intel"
	[ "$status" -eq 0 ]
	[[ "$(val run.0)" == *"--threads 6 --cpus 0-5 --numa interleave "* ]]
	[ "$(val /sys/fs/cgroup/ds-tune/inst0/cpuset.mems)" = 0-1 ]
}

@test "plan: what cannot be had is refused with a reason" {
	tree intel
	llama
	run "$DS" plan -m "$T/llama" --instances 3 --threads 3 --root "$T/intel"
	[ "$status" -eq 1 ]
	[[ "$output" == *"3 instances of 3 threads need 9 physical cores; there are 8"* ]]
	run "$DS" plan -m "$T/llama" --instances 9 --root "$T/intel"
	[ "$status" -eq 1 ]
	run "$DS" plan -m "$T/nomodel" --root "$T/intel"
	[ "$status" -eq 1 ]
	[[ "$output" == *"$T/nomodel/model.meta: No such file or directory"* ]]
	mkdir -p "$T/bad"
	echo '{"format": "ds-model", "version": 3}' >"$T/bad/model.meta"
	: >"$T/bad/model.bin"
	run "$DS" plan -m "$T/bad" --root "$T/intel"
	[ "$status" -eq 1 ]
	[[ "$output" == "ds-tune: $T/bad: model.meta: format version 3; this build reads version 2"* ]]
}

# a DeepSeek model with routed experts (the golden V3 fixture: 8 experts)
moe() {
	[ -d "$BATS_FILE_TMPDIR/moe" ] ||
		"${DS_BIN:-bin}"/ds-convert --model-path testdata/golden/ds3 \
			--output-dir "$BATS_FILE_TMPDIR/moe" --quiet
	ln -sfn "$BATS_FILE_TMPDIR/moe" "$T/moe"
}

@test "plan --ranks numa: an MPI job, a rank per node bound to its cores and memory" {
	tree intel
	moe
	run "$DS" plan -m "$T/moe" --ranks numa --root "$T/intel"
	[ "$status" -eq 0 ]
	[[ "$output" == *"an MPI job of 2 ranks"* ]]
	[ "$(val mpi.hostfile.0)" = "localhost slots=2" ]
	# node 0 has cores 0-3, node 1 cores 4-7 (SMT siblings left out)
	[ "$(val mpi.rankfile.0)" = "rank 0=localhost slot=0-3" ]
	[ "$(val mpi.rankfile.1)" = "rank 1=localhost slot=4-7" ]
	# the fixture was trained at 256 positions (below 4096)
	[ "$(val mpi.run)" = "mpirun --hostfile ds-hosts --rankfile ds-ranks --mca rmaps_rank_file_physical 1 --mca hwloc_base_mem_alloc_policy local_only -n 2 ds-run --mpi -m $T/moe --hugepages --ctx-size 256" ]
	[[ "$(val mpi.serve)" == *" -n 2 ds-serve --mpi -m $T/moe --hugepages --ctx-size 256 --host 127.0.0.1 --port 8080" ]]
	# the shares go to transparent hugepages: no hugetlb pages, no cgroups
	[[ "$output" != *nr_hugepages* && "$output" != *cgroup* ]]
	[ "$(val /sys/kernel/mm/transparent_hugepage/enabled)" = madvise ]
	# a saved plan applies (the job's lines are information)
	printf '%s\n' "$output" >"$T/plan.txt"
	run "$DS" apply --plan "$T/plan.txt" --dry-run --root "$T/intel"
	[ "$status" -eq 0 ]
}

@test "plan --ranks over --hosts, as JSON; what cannot be had is refused" {
	tree intel
	moe
	run "$DS" plan -m "$T/moe" --ranks 4 --hosts a,b.example --root "$T/intel" --json
	[ "$status" -eq 0 ]
	printf '%s' "$output" | $PY -c '
import json, os, sys
p = json.load(sys.stdin)
j = p["mpi"]
assert j["ranks"] == 4 and j["per_host"] == 2 and j["hosts"] == ["a", "b.example"], j
meta = json.load(open(sys.argv[1] + "/model.meta"))
# the multi-token-prediction layer (blk.N, mtp.*) is loaded only to draft
n = meta["hparams"]["n_layer"]
mtp = lambda name: name.startswith("mtp.") or name.startswith("blk.%d." % n)
main = [t for t in meta["tensors"] if not mtp(t["name"])]
exps = sum(t["size"] for t in main if t["name"].endswith("_exps"))
mtp_bytes = sum(t["size"] for t in meta["tensors"] if mtp(t["name"]))
out = [t["size"] for t in main if t["name"] == "output"][0]
assert j["shared_bytes"] == os.stat(sys.argv[1] + "/model.bin").st_size - exps - mtp_bytes
assert j["rank_exp_bytes"] == exps // 8 * 2 and j["out_bytes"] == out, j
assert " -n 4 ds-run --mpi " in j["run"]
assert [i["cpus"] for i in p["instances"]] == ["0-3", "4-7"]
assert any("every host is taken to be like this one" in n for n in p["notes"])
' "$T/moe"
	run "$DS" plan -m "$T/moe" --ranks 4 --hosts a,b --root "$T/intel"
	[ "$(val mpi.rankfile.3)" = "rank 3=b slot=4-7" ]
	[ "$(val mpi.hostfile.1)" = "b slots=2" ]
	run "$DS" plan -m "$T/moe" --ranks 3 --hosts a,b --root "$T/intel"
	[ "$status" -eq 1 ]
	[[ "$output" == *"--ranks 3 over 2 hosts: a multiple of the hosts"* ]]
	run "$DS" plan -m "$T/moe" --ranks 9 --root "$T/intel"
	[ "$status" -eq 1 ]
	[[ "$output" == *"more ranks than the model's 8 routed experts"* ]]
	run "$DS" plan -m "$T/moe" --ranks 2 --hosts 'a;b' --root "$T/intel"
	[ "$status" -eq 1 ]
	[[ "$output" == *'"a;b" is not a host name'* ]]
	llama
	run "$DS" plan -m "$T/llama" --ranks 2 --root "$T/intel"
	[ "$status" -eq 1 ]
	[[ "$output" == *"has none"* ]]
	run "$DS" plan -m "$T/moe" --ranks 2 --instances 2
	[ "$status" -eq 2 ]
	run "$DS" plan -m "$T/moe" --hosts a
	[ "$status" -eq 2 ]
	run "$DS" show --ranks 2
	[ "$status" -eq 2 ]
}

@test "plan: AMD desktop: one node, no --numa, SMT siblings left out" {
	tree amd
	llama
	run "$DS" plan -m "$T/llama" --instances 2 --root "$T/amd"
	[ "$status" -eq 0 ]
	[ "$(val run.0)" = "ds-run -m $T/llama --threads 4 --cpus 0-3 --hugepages --ctx-size 4096" ]
	[ "$(val run.1)" = "ds-run -m $T/llama --threads 4 --cpus 4-7 --hugepages --ctx-size 4096" ]
	[ "$(printf '%s\n' "$output" | grep -c 'scaling_governor = performance')" -eq 16 ]
	[[ "$output" != *"/sys/fs/cgroup/cgroup.subtree_control = "*"+cpu"* ]]
	[ -z "$(val /sys/fs/cgroup/cgroup.subtree_control)" ]
	[ "$(val /proc/irq/50/smp_affinity_list)" = 8-15 ]
	[ "$(val /proc/irq/60/smp_affinity_list)" = 8-15 ]
	[ -z "$(val /sys/kernel/mm/transparent_hugepage/enabled)" ]
}

@test "plan: no huge pages, no SMT: no --hugepages, CPU 0 kept for interrupts" {
	tree nohuge
	llama
	run "$DS" plan -m "$T/llama" --root "$T/nohuge"
	[ "$status" -eq 0 ]
	[ "$(val run.0)" = "ds-run -m $T/llama --threads 3 --cpus 1-3 --ctx-size 4096" ]
	[[ "$output" == *"# note: no 2 MiB huge pages on this kernel"* ]]
	[[ "$output" == *"# note: CPU 0 is left out of the instances"* ]]
	[[ "$output" == *"# note: no cgroup v2"* ]]
	[ "$(val /sys/devices/system/cpu/cpufreq/boost)" = 1 ]
	[ "$(val /proc/irq/27/smp_affinity_list)" = 0 ]
	[ "$(val /proc/irq/default_smp_affinity)" = 1 ]
	[[ "$output" != *"nr_hugepages"* ]]
	[[ "$output" != *"mkdir"* ]]
}

@test "plan: container: global huge pages, THP, no cgroup without cpuset" {
	tree container
	llama
	run "$DS" plan -m "$T/llama" --root "$T/container"
	[ "$status" -eq 0 ]
	read -r L H D <<<"$(hp "$T/llama" n_layer n_head_kv head_dim)"
	kv=$((L * 2 * H * D * 2 * 4096))
	[ "$(val /sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages)" = $(( (1073741824 + kv + 2097151) / 2097152 )) ]
	[ "$(val /sys/kernel/mm/transparent_hugepage/enabled)" = madvise ]
	[ "$(val /sys/kernel/mm/transparent_hugepage/defrag)" = madvise ]
	[[ "$output" == *"has no cpuset controller"* ]]
	[ "$(val run.0)" = "ds-run -m $T/llama --threads 3 --cpus 1-3 --hugepages --ctx-size 4096" ]
}

# ---- apply and revert -----------------------------------------------------------------

@test "apply: files change as planned; revert: the tree is as it was" {
	tree intel
	llama
	"$DS" plan -m "$T/llama" --instances 2 --root "$T/intel" >"$T/plan"
	run "$DS" apply --plan "$T/plan" --root "$T/intel"
	[ "$status" -eq 0 ]
	[[ "$output" == *"applied"*"$T/intel/var/lib/ds-tune/state.json"* ]]
	[ -f "$T/intel/var/lib/ds-tune/state.json" ]
	n=0
	while IFS= read -r line; do
		case $line in
		mkdir\ *) [ -d "$T/intel/${line#mkdir }" ] ;;
		/*" = "*)
			path=${line%% = *} want=${line#* = }
			read -r got <"$T/intel$path" || true
			case $path in
			*/cgroup.subtree_control) [ "$got" = "$want" ] || [[ "$got" == *cpuset* ]] ;;
			*) [ "$got" = "$want" ] || { echo "$path: $got, not $want"; false; } ;;
			esac
			n=$((n + 1)) ;;
		esac
	done <"$T/plan"
	[ "$n" -gt 30 ]
	run "$DS" revert --root "$T/intel"
	[ "$status" -eq 0 ]
	[[ "$output" == *"restored"* ]]
	run diff -r "$T/intel.orig" "$T/intel"
	[ "$status" -eq 0 ]
	[ -z "$output" ]
}

@test "apply twice, revert once: the original comes back" {
	tree intel
	llama
	"$DS" plan -m "$T/llama" --instances 2 --root "$T/intel" >"$T/plan"
	"$DS" apply --plan "$T/plan" --root "$T/intel"
	run "$DS" apply --plan "$T/plan" --root "$T/intel"
	[ "$status" -eq 0 ]
	[[ "$output" == *"nothing to change"* ]]
	# a different plan on top: more instances, other CPU sets
	run "$DS" apply -m "$T/llama" --instances 4 --root "$T/intel"
	[ "$status" -eq 0 ]
	[ "$(cat "$T/intel/sys/fs/cgroup/ds-tune/inst3/cpuset.cpus")" = 6-7 ]
	run "$DS" revert --root "$T/intel"
	[ "$status" -eq 0 ]
	run diff -r "$T/intel.orig" "$T/intel"
	[ -z "$output" ]
	[ "$status" -eq 0 ]
	run "$DS" revert --root "$T/intel"
	[ "$status" -eq 1 ]
	[[ "$output" == *"nothing applied"* ]]
}

@test "apply with a JSON plan and --state FILE" {
	tree amd
	llama
	"$DS" plan -m "$T/llama" --root "$T/amd" --json >"$T/plan.json"
	run "$DS" apply --plan "$T/plan.json" --root "$T/amd" --state "$T/st.json"
	[ "$status" -eq 0 ]
	[ -f "$T/st.json" ]
	[ ! -e "$T/amd/var/lib/ds-tune" ]
	[ "$(cat "$T/amd/sys/devices/system/cpu/cpufreq/policy7/scaling_governor")" = performance ]
	run "$DS" revert --root "$T/amd" --state "$T/st.json"
	[ "$status" -eq 0 ]
	[ ! -e "$T/st.json" ]
	run diff -r "$T/amd.orig" "$T/amd"
	[ -z "$output" ]
}

@test "--dry-run writes nothing, and needs no root" {
	tree intel
	llama
	run "$DS" apply -m "$T/llama" --root "$T/intel" --dry-run
	[ "$status" -eq 0 ]
	[[ "$output" == *"/sys/kernel/mm/transparent_hugepage/enabled: always -> madvise"* ]]
	[[ "$output" == *"/sys/devices/system/cpu/intel_pstate/no_turbo: 1 -> 0"* ]]
	[[ "$output" == *"mkdir /sys/fs/cgroup/ds-tune/inst0"* ]]
	[[ "$output" == *"nothing written"* ]]
	run diff -r "$T/intel.orig" "$T/intel"
	[ "$status" -eq 0 ]
	[ -z "$output" ]
}

@test "apply failing half-way (a read-only file): rolled back, the path named" {
	need_nocaps
	tree container
	llama
	# the plan writes the (writable) huge page count, then the
	# read-only THP files
	"$DS" plan -m "$T/llama" --root "$T/container" >"$T/plan"
	grep -q '^/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages = ' "$T/plan"
	run nocaps "$DS" apply --plan "$T/plan" --root "$T/container"
	[ "$status" -eq 1 ]
	[[ "$output" == "ds-tune: $T/container/sys/kernel/mm/transparent_hugepage/enabled: Permission denied (restored the 1 change made before it)" ]]
	run diff -r "$T/container.orig" "$T/container"
	[ "$status" -eq 0 ]
	[ -z "$output" ]
}

@test "no root: apply and revert are refused" {
	if [ "$(id -u)" = 0 ]; then
		# a tree that is not nobody's, where nobody can read it
		R=$(mktemp -d /tmp/ds-tune-bats.XXXXXX)
		chmod 755 "$R"
		cp -a "$BATS_FILE_TMPDIR/trees/intel" "$R/t"
		cp -a "$R/t" "$R/orig"
		cp -a "$BATS_FILE_TMPDIR/llama" "$R/m"
		chmod -R a+rX "$R"
		run setpriv --reuid=65534 --regid=65534 --clear-groups \
			"$DS" apply -m "$R/m" --root "$R/t"
		[ "$status" -eq 1 ]
		[[ "$output" == "ds-tune: changing $R/t needs root or its owner (uid 0, not 65534)" ]]
		run setpriv --reuid=65534 --regid=65534 --clear-groups \
			"$DS" revert --root "$R/t"
		[ "$status" -eq 1 ]
		[[ "$output" == *"needs root or its owner"* ]]
		run diff -r "$R/orig" "$R/t"
		rm -rf "$R"
		[ "$status" -eq 0 ]
	else
		# refused before anything is read or written
		run "$DS" apply --plan /nonexistent
		[ "$status" -eq 1 ]
		[[ "$output" == "ds-tune: changing the system needs root (effective uid 0, not $(id -u))" ]]
		run "$DS" revert
		[ "$status" -eq 1 ]
		[[ "$output" == *"needs root"* ]]
	fi
}

@test "interrupted apply (SIGKILL, SIGTERM): revert restores everything" {
	command -v mkfifo >/dev/null || skip "no mkfifo"
	llama
	for sig in KILL TERM; do
		tree intel
		"$DS" plan -m "$T/llama" --root "$T/intel" >"$T/plan"
		# IRQ 130 is the last interrupt the plan moves: make it a FIFO,
		# feed apply's read of its old value, and apply blocks when it
		# opens it to write, every earlier change made
		F=$T/intel/proc/irq/130/smp_affinity_list
		grep -q '^/proc/irq/130/smp_affinity_list = 8-15$' "$T/plan"
		rm "$F"
		mkfifo "$F"
		"$DS" apply --plan "$T/plan" --root "$T/intel" >"$T/out" 2>&1 &
		pid=$!
		printf '0-15\n' >"$F"
		i=0
		until [ "$(cat "$T/intel/proc/irq/122/smp_affinity_list")" = 8-15 ]; do
			i=$((i + 1))
			[ $i -lt 200 ] || { kill -KILL $pid; false; }
			sleep 0.05
		done
		[ "$(cat "$T/intel/sys/kernel/mm/transparent_hugepage/enabled")" = madvise ]
		kill -$sig $pid
		wait $pid || true
		rm "$F"
		printf '0-15\n' >"$F"
		run "$DS" revert --root "$T/intel"
		[ "$status" -eq 0 ]
		run diff -r "$T/intel.orig" "$T/intel"
		[ "$status" -eq 0 ]
		[ -z "$output" ]
	done
}

@test "a plan file may only name kernel settings" {
	tree amd
	printf '/etc/passwd = x\n' >"$T/p1"
	run "$DS" apply --plan "$T/p1" --root "$T/amd"
	[ "$status" -eq 1 ]
	[[ "$output" == *"$T/p1:1: \"/etc/passwd\" is not under /sys/, /proc/sys/ or /proc/irq/"* ]]
	printf '# ok\n\n/sys/../etc/passwd = x\n' >"$T/p2"
	run "$DS" apply --plan "$T/p2" --root "$T/amd"
	[ "$status" -eq 1 ]
	[[ "$output" == *"$T/p2:3: \"/sys/../etc/passwd\" is not a plain absolute path"* ]]
	printf 'speed = 11\n' >"$T/p3"
	run "$DS" apply --plan "$T/p3" --root "$T/amd"
	[ "$status" -eq 1 ]
	[[ "$output" == *"$T/p3:1: unknown key \"speed\""* ]]
	printf '{"format": "ds-tune-plan", "version": 1, "actions": [{"op": "write", "path": "/proc/self/mem", "value": "x"}]}' >"$T/p4"
	run "$DS" apply --plan "$T/p4" --root "$T/amd"
	[ "$status" -eq 1 ]
	[[ "$output" == *"actions[0]: \"/proc/self/mem\" is not under"* ]]
	run diff -r "$T/amd.orig" "$T/amd"
	[ -z "$output" ]
}

@test "revert: nothing applied, or a state for another root, is refused" {
	tree amd
	tree nohuge
	llama
	run "$DS" revert --root "$T/amd"
	[ "$status" -eq 1 ]
	[[ "$output" == *"no ds-tune state (nothing applied)"* ]]
	"$DS" apply -m "$T/llama" --root "$T/amd" --state "$T/st.json"
	run "$DS" revert --root "$T/nohuge" --state "$T/st.json"
	[ "$status" -eq 1 ]
	[[ "$output" == *"recorded for root $T/amd, not $T/nohuge"* ]]
	run "$DS" revert --root "$T/amd" --state "$T/st.json"
	[ "$status" -eq 0 ]
	run diff -r "$T/amd.orig" "$T/amd"
	[ -z "$output" ]
}
