#!/bin/sh
# mkfakeroot.sh - build a fake /sys, /proc and /var/lib for ds-tune --root.
# Usage: tests/cli/mkfakeroot.sh KIND DIR
#   intel      2-socket Intel server: 2 NUMA nodes, SMT, intel_pstate
#              (powersave, turbo off), THP always, 2 MiB and 1 GiB pages,
#              NUMA balancing on, cgroup v2, irqbalance running
#   amd        AMD desktop: 1 node, SMT, amd-pstate-epp, boost on, THP
#              madvise, cgroup v2 with cpu and cpuset already enabled
#   container  4 CPUs without topology, cpufreq or NUMA files; THP files
#              read-only; cgroup v2 without cpuset; no /proc/interrupts
#   nohuge     4 cores without SMT, acpi-cpufreq (ondemand, boost off), no
#              huge page or THP support at all, cgroup v1 only
# The files hold what the kernel would show (sysfs values end in a
# newline; cpufreq/cpuN is a link to its policy, as in sysfs).
set -eu
kind=${1:?kind}
R=${2:?dir}
mkdir -p "$R/var/lib"

w() { # w PATH LINE...: a file under the root with one line per argument
	[ -d "$R${1%/*}" ] || mkdir -p "$R${1%/*}"
	f=$1
	shift
	printf '%s\n' "$@" >"$R$f"
}

cpu_online() { # cpu_online N
	last=$(($1 - 1))
	w /sys/devices/system/cpu/online "0-$last"
	w /sys/devices/system/cpu/present "0-$last"
	w /sys/devices/system/cpu/possible "0-$last"
}

# topology CPU PACKAGE CORE SIBLINGS
topology() {
	t=/sys/devices/system/cpu/cpu$1/topology
	w $t/physical_package_id "$2"
	w $t/core_id "$3"
	w $t/thread_siblings_list "$4"
}

# policy CPU DRIVER GOVERNOR AVAILABLE [EPP]
policy() {
	p=/sys/devices/system/cpu/cpufreq/policy$1
	w $p/affected_cpus "$1"
	w $p/related_cpus "$1"
	w $p/scaling_driver "$2"
	w $p/scaling_governor "$3"
	w $p/scaling_available_governors "$4"
	w $p/scaling_min_freq 800000
	w $p/scaling_max_freq 3800000
	[ $# -ge 5 ] && w $p/energy_performance_preference "$5"
	ln -s ../cpufreq/policy$1 "$R/sys/devices/system/cpu/cpu$1/cpufreq"
}

# cpuinfo N VENDOR MODEL FLAGS
cpuinfo() {
	mkdir -p "$R/proc"
	: >"$R/proc/cpuinfo"
	i=0
	while [ $i -lt "$1" ]; do
		printf 'processor\t: %d\nvendor_id\t: %s\nmodel name\t: %s\nflags\t\t: %s\n\n' \
			$i "$2" "$3" "$4" >>"$R/proc/cpuinfo"
		i=$((i + 1))
	done
}

# hugepages DIR SIZE_KB...: the kernel's counters, all 0
hugepages() {
	d=$1
	shift
	for kb in "$@"; do
		for f in nr_hugepages free_hugepages surplus_hugepages; do
			w "$d/hugepages-${kb}kB/$f" 0
		done
		case $d in
		/sys/kernel/*)
			w "$d/hugepages-${kb}kB/resv_hugepages" 0
			w "$d/hugepages-${kb}kB/nr_overcommit_hugepages" 0 ;;
		esac
	done
}

# node ID CPULIST TOTAL_KB FREE_KB [SIZE_KB...]
node() {
	n=/sys/devices/system/node/node$1
	w $n/cpulist "$2"
	w $n/meminfo "Node $1 MemTotal:       $3 kB" \
		"Node $1 MemFree:        $4 kB" "Node $1 MemUsed:        $(($3 - $4)) kB"
	id=$1
	shift 4
	[ $# -gt 0 ] && hugepages $n/hugepages "$@"
	w $n/distance "10 21"
	: "$id"
}

meminfo() { # meminfo TOTAL_KB AVAIL_KB [hugepages]
	w /proc/meminfo "MemTotal:       $1 kB" "MemFree:        $2 kB" \
		"MemAvailable:   $2 kB" "Buffers:           1024 kB"
	if [ "${3:-}" = hugepages ]; then
		printf '%s\n' "HugePages_Total:       0" "HugePages_Free:        0" \
			"HugePages_Rsvd:        0" "HugePages_Surp:        0" \
			"Hugepagesize:       2048 kB" >>"$R/proc/meminfo"
	fi
}

thp() { # thp ENABLED DEFRAG
	w /sys/kernel/mm/transparent_hugepage/enabled "$1"
	w /sys/kernel/mm/transparent_hugepage/defrag "$2"
	w /sys/kernel/mm/transparent_hugepage/khugepaged/defrag 1
}

# interrupts NCPU, then "IRQ AFFINITY PERCPU_COUNT NAME" lines on stdin
interrupts() {
	n=$1
	mkdir -p "$R/proc/irq"
	{
		printf '%11s' ''
		i=0
		while [ $i -lt "$n" ]; do printf ' %10s' "CPU$i"; i=$((i + 1)); done
		printf '\n'
		while read -r irq aff cnt name; do
			printf '%4s:' "$irq"
			i=0
			while [ $i -lt "$n" ]; do printf ' %10s' "$cnt"; i=$((i + 1)); done
			printf '  %s\n' "$name"
			w /proc/irq/$irq/smp_affinity_list "$aff"
			w /proc/irq/$irq/node 0
		done
		printf ' NMI:'
		i=0
		while [ $i -lt "$n" ]; do printf ' %10s' 7; i=$((i + 1)); done
		printf '   Non-maskable interrupts\n'
		printf ' LOC:'
		i=0
		while [ $i -lt "$n" ]; do printf ' %10s' 123456; i=$((i + 1)); done
		printf '   Local timer interrupts\n'
		printf ' ERR:          0\n'
	} >"$R/proc/interrupts.tmp"
	mv "$R/proc/interrupts.tmp" "$R/proc/interrupts"
}

mountinfo() { # mountinfo LINE...: /proc/self/mountinfo after / /proc /sys
	w /proc/self/mountinfo \
		"22 1 8:2 / / rw,relatime - ext4 /dev/sda2 rw" \
		"23 22 0:21 / /proc rw,nosuid,nodev,noexec,relatime - proc proc rw" \
		"24 22 0:22 / /sys rw,nosuid,nodev,noexec,relatime - sysfs sysfs rw" \
		"$@"
}

cgroup2() { # cgroup2 CONTROLLERS SUBTREE
	w /sys/fs/cgroup/cgroup.controllers "$1"
	w /sys/fs/cgroup/cgroup.subtree_control "$2"
	w /sys/fs/cgroup/cgroup.procs 1
	w /sys/fs/cgroup/cpuset.cpus.effective "$(cat "$R/sys/devices/system/cpu/online")"
}

# ---- an Intel server: 2 sockets x 4 cores x 2 threads ----------------------
intel() {
	cpu_online 16
	w /sys/devices/system/cpu/smt/control on
	w /sys/devices/system/cpu/smt/active 1
	c=0
	while [ $c -lt 16 ]; do
		core=$((c % 8))
		topology $c $((core / 4)) $((core % 4)) "$core,$((core + 8))"
		policy $c intel_pstate powersave "performance powersave" \
			balance_performance
		c=$((c + 1))
	done
	w /sys/devices/system/cpu/intel_pstate/no_turbo 1
	w /sys/devices/system/cpu/intel_pstate/status active
	cpuinfo 16 GenuineIntel "Intel(R) Xeon(R) Platinum 8480+" \
		"fpu sse sse2 ssse3 sse4_1 sse4_2 avx f16c fma avx2 bmi2 avx512f avx512dq avx512bw avx512vl avx512_vnni avx512_bf16 amx_tile"
	w /sys/devices/system/node/online 0-1
	w /sys/devices/system/node/possible 0-1
	w /sys/devices/system/node/has_cpu 0-1
	node 0 0-3,8-11 65536000 60000000 2048 1048576
	node 1 4-7,12-15 65536000 61000000 2048 1048576
	w /sys/devices/system/node/node1/distance "21 10"
	w /proc/sys/kernel/numa_balancing 1
	meminfo 131072000 121000000 hugepages
	hugepages /sys/kernel/mm/hugepages 2048 1048576
	thp "[always] madvise never" "always defer defer+madvise [madvise] never"
	interrupts 16 <<-EOF
	0 0 40 IR-IO-APIC 2-edge timer
	8 0 1 IR-IO-APIC 8-edge rtc0
	9 0-15 3 IR-IO-APIC 9-fasteoi acpi
	120 0-15 1000 IR-PCI-MSI-0000:00:1f.0 0-edge nvme0q0
	121 0-3 8000 IR-PCI-MSI-0000:00:1f.0 1-edge nvme0q1
	122 4-7 7000 IR-PCI-MSI-0000:00:1f.0 2-edge nvme0q2
	130 0-15 90000 IR-PCI-MSI-0000:3b:00.0 0-edge eth0-TxRx-0
	131 8-15 50000 IR-PCI-MSI-0000:3b:00.0 1-edge eth0-TxRx-1
	EOF
	w /proc/irq/default_smp_affinity ffff
	w /proc/1/comm systemd
	w /proc/873/comm irqbalance
	mountinfo "30 24 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime - cgroup2 cgroup2 rw,nsdelegate"
	cgroup2 "cpuset cpu io memory hugetlb pids rdma misc" "memory pids"
}

# ---- an AMD desktop: 8 cores x 2 threads, one node --------------------------
amd() {
	cpu_online 16
	w /sys/devices/system/cpu/smt/control on
	w /sys/devices/system/cpu/smt/active 1
	c=0
	while [ $c -lt 16 ]; do
		core=$((c % 8))
		topology $c 0 $core "$core,$((core + 8))"
		policy $c amd-pstate-epp powersave "performance powersave" \
			balance_performance
		c=$((c + 1))
	done
	w /sys/devices/system/cpu/cpufreq/boost 1
	w /sys/devices/system/cpu/amd_pstate/status active
	cpuinfo 16 AuthenticAMD "AMD Ryzen 7 7700X 8-Core Processor" \
		"fpu sse sse2 ssse3 sse4_1 sse4_2 avx f16c fma avx2 bmi2 avx512f avx512dq avx512bw avx512vl avx512_vnni avx512_bf16"
	w /sys/devices/system/node/online 0
	w /sys/devices/system/node/possible 0
	node 0 0-15 32768000 28000000 2048 1048576
	w /proc/sys/kernel/numa_balancing 0
	meminfo 32768000 28000000 hugepages
	hugepages /sys/kernel/mm/hugepages 2048 1048576
	thp "always [madvise] never" "always defer defer+madvise [madvise] never"
	interrupts 16 <<-EOF
	0 0 40 IR-IO-APIC 2-edge timer
	40 0-15 300 IR-PCI-MSI-0000:0a:00.0 0-edge xhci_hcd
	50 0-15 9000 IR-PCI-MSI-0000:03:00.0 0-edge amdgpu
	60 5 2000 IR-PCI-MSI-0000:01:00.0 1-edge nvme0q1
	EOF
	w /proc/irq/default_smp_affinity ffff
	w /proc/1/comm systemd
	mountinfo "30 24 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime - cgroup2 cgroup2 rw,nsdelegate"
	cgroup2 "cpuset cpu io memory pids" "cpuset cpu io memory pids"
}

# ---- a container: little of /sys, some of it read-only ----------------------
container() {
	w /sys/devices/system/cpu/online 0-3
	mkdir -p "$R/sys/devices/system/cpu/cpu0" "$R/sys/devices/system/cpu/cpu1" \
		"$R/sys/devices/system/cpu/cpu2" "$R/sys/devices/system/cpu/cpu3"
	cpuinfo 4 GenuineIntel "Intel(R) Xeon(R) CPU E5-2680 v4 @ 2.40GHz" \
		"fpu sse sse2 ssse3 sse4_1 sse4_2 avx f16c fma avx2 bmi2"
	meminfo 8388608 6000000 hugepages
	hugepages /sys/kernel/mm/hugepages 2048
	thp "[always] madvise never" "[always] defer defer+madvise madvise never"
	chmod 0444 "$R/sys/kernel/mm/transparent_hugepage/enabled" \
		"$R/sys/kernel/mm/transparent_hugepage/defrag"
	w /proc/1/comm sh
	mountinfo "30 24 0:26 / /sys/fs/cgroup ro,nosuid,nodev,noexec,relatime - cgroup2 cgroup2 rw"
	w /sys/fs/cgroup/cgroup.controllers "cpu memory pids"
	w /sys/fs/cgroup/cgroup.subtree_control ""
	chmod 0555 "$R/sys/fs/cgroup"
}

# ---- an old desktop without huge pages --------------------------------------
nohuge() {
	cpu_online 4
	w /sys/devices/system/cpu/smt/control notsupported
	c=0
	while [ $c -lt 4 ]; do
		topology $c 0 $c $c
		policy $c acpi-cpufreq ondemand \
			"conservative ondemand userspace powersave performance schedutil"
		c=$((c + 1))
	done
	w /sys/devices/system/cpu/cpufreq/boost 0
	cpuinfo 4 GenuineIntel "Intel(R) Core(TM) i5-2400 CPU @ 3.10GHz" \
		"fpu sse sse2 ssse3 sse4_1 sse4_2 avx"
	w /sys/devices/system/node/online 0
	node 0 0-3 8388608 7000000
	meminfo 8388608 7000000
	interrupts 4 <<-EOF
	0 0-3 40 IO-APIC 2-edge timer
	16 0-3 5000 IO-APIC 16-fasteoi ehci_hcd:usb1
	27 0-3 12000 PCI-MSI 512000-edge eth0
	EOF
	w /proc/irq/default_smp_affinity f
	w /proc/1/comm init
	mountinfo "30 24 0:26 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu"
}

case $kind in
intel | amd | container | nohuge) "$kind" ;;
*) echo "mkfakeroot.sh: unknown kind $kind (intel, amd, container, nohuge)" >&2
	exit 2 ;;
esac
