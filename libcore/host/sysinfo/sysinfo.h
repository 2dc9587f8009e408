/*
 * sysinfo.h - what the host looks like to an inference process: CPU sets
 * and lists, topology, NUMA, huge pages, THP, cpufreq, interrupts, cgroup
 * v2; and the two calls a program makes to use it (pin to a CPU set,
 * SCHED_FIFO).
 *
 * Every reader takes a `root` prefix: "" (or NULL) reads the running
 * system, "/tmp/fake" reads /tmp/fake/sys/... and /tmp/fake/proc/...
 * instead, and nothing outside it.  A missing file is not an error (a
 * container hides most of /sys): the field is left unknown (-1 or "").
 */
#ifndef DS_SYSINFO_H
#define DS_SYSINFO_H

#include <stdint.h>

#include "base/util.h"

/* ---- CPU sets ------------------------------------------------------------ */

/* CPU_SETSIZE: the most sched_setaffinity(2) takes through glibc. */
#define DS_CPU_MAX 1024
/* Long enough for any list of CPUs below DS_CPU_MAX ("0,2,4,...,1022"). */
#define DS_CPULIST_MAX 4096

typedef struct ds_cpuset {
	uint64_t w[DS_CPU_MAX / 64]; /* bit c of w[c / 64]: CPU c */
} ds_cpuset;

void ds_cpuset_zero(ds_cpuset *s);
void ds_cpuset_add(ds_cpuset *s, int cpu); /* 0 <= cpu < DS_CPU_MAX */
void ds_cpuset_del(ds_cpuset *s, int cpu);
int ds_cpuset_has(const ds_cpuset *s, int cpu);
int ds_cpuset_count(const ds_cpuset *s);
int ds_cpuset_empty(const ds_cpuset *s);
int ds_cpuset_equal(const ds_cpuset *a, const ds_cpuset *b);
/* The lowest CPU above `after` (-1 for the first), or -1 when none. */
int ds_cpuset_next(const ds_cpuset *s, int after);
/* The n-th CPU (from 0) in increasing order, or -1. */
int ds_cpuset_nth(const ds_cpuset *s, int n);
void ds_cpuset_or(ds_cpuset *d, const ds_cpuset *a);     /* d |= a  */
void ds_cpuset_and(ds_cpuset *d, const ds_cpuset *a);    /* d &= a  */
void ds_cpuset_andnot(ds_cpuset *d, const ds_cpuset *a); /* d &= ~a */

/* The kernel's list format, "0-3,8-11" (ds_cpulist_parse's grammar, see
 * threads.h).  Surrounding white space is ignored; an empty string is the
 * empty set. */
int ds_cpuset_parse(const char *s, ds_cpuset *out, ds_err *err);
/* Shortest list form; "" for the empty set.  buf holds DS_CPULIST_MAX. */
char *ds_cpuset_format(const ds_cpuset *s, char *buf);
/* The kernel's mask format ("ff,00000003": 32-bit hex words, most
 * significant first), as in /proc/irq/default_smp_affinity. */
int ds_cpumask_parse(const char *s, ds_cpuset *out, ds_err *err);
/* At least `words` 32-bit words (to keep a file's width), more if the set
 * needs them.  buf holds DS_CPULIST_MAX. */
char *ds_cpumask_format(const ds_cpuset *s, int words, char *buf);

/* ---- using a CPU set: what ds-run --cpus and --sched-fifo call ----------- */

/* Parse a --cpus argument and check that every CPU in it is one this
 * process may run on (its sched_getaffinity(2) set). */
int ds_cpus_arg(const char *list, ds_cpuset *out, ds_err *err);
/* Pin thread `tid` (0: the calling thread) to the CPUs of `s`.  A thread
 * pool pins worker i to ds_cpuset_nth(s, i % ds_cpuset_count(s)). */
int ds_affinity_set(int tid, const ds_cpuset *s, ds_err *err);
int ds_affinity_get(int tid, ds_cpuset *s, ds_err *err);
/* SCHED_FIFO at `prio` for the calling thread; threads it creates later
 * inherit it (pthread's default PTHREAD_INHERIT_SCHED), so call it before
 * starting the pool.  Fails with a message naming CAP_SYS_NICE when the
 * process may not. */
int ds_sched_fifo(int prio, ds_err *err);

/* ---- reading kernel files ------------------------------------------------ */

/* root + path ("/sys/...") into buf of `n` bytes; -1 if it does not fit. */
int ds_sys_path(const char *root, const char *path, char *buf, size_t n);
/* Read a whole sysfs/procfs file (their sizes are not in st_size) of at
 * most `max` bytes into a malloc'd NUL-terminated buffer.  ENOENT is
 * reported through *missing (when not NULL) as well as err. */
int ds_sys_read(const char *path, size_t max, char **out, int *missing,
		ds_err *err);
/* The first line of a small file, trailing white space removed; 0 on
 * success, -1 when it cannot be read (missing or unreadable). */
int ds_sys_line(const char *root, const char *path, char *buf, size_t n);
/* The selected word of a "always [madvise] never" file, or the whole
 * (trimmed) value when there are no brackets. */
void ds_sys_selected(const char *value, char *buf, size_t n);

/* /proc/meminfo or nodeN/meminfo: the value of `key` in kB ("MemTotal",
 * "HugePages_Total": counts are returned as they are).  -1 if absent. */
int ds_meminfo_get(const char *text, const char *key, uint64_t *out);

/* ---- the machine --------------------------------------------------------- */

typedef struct ds_cpu {
	int online;
	int package;   /* physical_package_id, -1 unknown */
	int core;      /* core_id, -1 unknown */
	int node;      /* NUMA node, -1 unknown */
	int primary;   /* 1: the lowest-numbered thread of its core */
	ds_cpuset siblings; /* thread_siblings_list (itself when unknown) */
} ds_cpu;

typedef struct ds_hugepages {
	uint32_t size_kb;   /* 2048, 1048576 */
	int64_t nr, free, resv, surplus; /* pages; -1 unknown (resv is
					  * not kept per node) */
} ds_hugepages;

#define DS_HP_SIZES 4

typedef struct ds_node {
	int id;
	ds_cpuset cpus;
	int64_t mem_total_kb, mem_free_kb; /* -1 unknown */
	int n_hp;
	ds_hugepages hp[DS_HP_SIZES];
} ds_node;

/* One cpufreq policy: the CPUs that share a clock. */
typedef struct ds_cpufreq {
	char dir[64];        /* "/sys/devices/system/cpu/cpufreq/policy0" */
	ds_cpuset cpus;      /* affected_cpus, or the CPU itself */
	char driver[32], governor[32], available[128], epp[32];
} ds_cpufreq;

typedef struct ds_irq {
	int irq;
	uint64_t count;      /* summed over CPUs since boot */
	char name[96];       /* chip, hardware irq and device, one space apart */
	char affinity[64];   /* smp_affinity_list, "" when unreadable */
} ds_irq;

typedef struct ds_sysinfo {
	char root[256];       /* "" for the running system */
	char cpu_model[128], cpu_vendor[32];
	char isa[16];         /* what ds-run will use: "avx512", "avx2", ... */
	const char *isa_from; /* "cpuid" or "hwcap", "DS_ISA", "/proc/cpuinfo
				 flags" or "... Features" (ds_isa_src) */
	char isa_err[200];    /* DS_ISA refused (ds-run would not start) */

	int n_cpu;            /* entries of cpus[]: highest CPU id + 1 */
	ds_cpu *cpus;
	ds_cpuset online;
	int n_packages, n_cores, threads_per_core;
	int topo_known;       /* 0: no topology files, one core per CPU */
	char smt_control[16]; /* "on", "off", "notsupported", "" */

	int n_nodes;
	ds_node *nodes;
	const char *numa_from; /* "libnuma", "sysfs" or "none" */
	int numa_balancing;   /* /proc/sys/kernel/numa_balancing, -1 */

	int n_policies;
	ds_cpufreq *policies;
	int boost;            /* 1 on, 0 off, -1 unknown */
	char boost_path[96];  /* the file that says so */
	int boost_inverted;   /* 1 for intel_pstate/no_turbo */

	char thp_enabled[16], thp_defrag[24]; /* selected words, "" absent */
	int n_hp;             /* 0: no huge page support */
	ds_hugepages hp[DS_HP_SIZES];
	int64_t mem_total_kb, mem_avail_kb;

	int n_irq;
	ds_irq *irqs;         /* numeric IRQs, busiest first */
	char irq_default[DS_CPULIST_MAX / 4]; /* default_smp_affinity, "" */
	int irqbalance;       /* 1: an irqbalance process is running */

	char cg_mount[128];   /* cgroup v2 mount point, "" when none */
	char cg_controllers[128]; /* its cgroup.controllers */
	char cg_subtree[128]; /* its cgroup.subtree_control */
} ds_sysinfo;

/* Read everything under `root`.  Fails only for what makes the result
 * meaningless (no readable list of CPUs) or out of memory. */
int ds_sysinfo_read(ds_sysinfo *si, const char *root, ds_err *err);
void ds_sysinfo_free(ds_sysinfo *si);

/* 1 when `word` is one of the white-space separated words of `list`
 * (a leading '+' on a word is ignored, as subtree_control takes it). */
int ds_word_in(const char *list, const char *word);

/* ---- parsers the reader uses, public for tests ---------------------------- */

/* /proc/interrupts: the numeric IRQs, in file order, with their summed
 * counts and names (affinity left ""). */
int ds_interrupts_parse(const char *text, ds_irq **out, int *n, ds_err *err);

/* How the architecture ds was built for names its CPU features
 * (isa_x86.c, isa_arm.c). */
typedef struct ds_isa_source {
	const char *key;        /* /proc/cpuinfo's line of feature words:
				   "flags" (x86), "Features" (AArch64) */
	const char *detect;     /* what the kernels read: "cpuid", "hwcap" */
	const char *from_flags; /* isa_from when the words decide */
} ds_isa_source;
extern const ds_isa_source ds_isa_src;

/* The kernel ISA (ds_isa_name's names) of a CPU with these /proc/cpuinfo
 * feature words (ds_isa_src.key's line), by the rule the kernels apply.
 * x86-64, to CPUID: avx2 needs AVX, FMA, F16C and AVX2; avx2+avxvnni adds
 * AVX-VNNI; avx512 adds AVX-512 F, DQ, BW, VL, VNNI and BF16; avx512+amx
 * adds AMX-TILE and AMX-INT8 (Linux lists them only where it supports
 * their state; the kernels also ask it for the state, which a seccomp
 * filter could refuse).  AArch64, to HWCAP: neon needs fp and asimd;
 * dotprod adds asimddp; dotprod+i8mm adds i8mm and bf16. */
const char *ds_isa_from_flags(const char *flags);

#endif
