/* test_sysinfo.c - CPU lists and masks, /proc parsers, ISA, affinity,
 * SCHED_FIFO.  References: the kernel's own renderings of the same CPU
 * sets (cpulist vs cpumap files), the kernel documentation's examples,
 * sysinfo(2) and sysconf(3), and naive formatters written here. */
#define _GNU_SOURCE
#include <linux/capability.h>
#include <sched.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/sysinfo.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "kernels/kernels.h"
#include "host/sysinfo/sysinfo.h"

static uint64_t seed;

static ds_cpuset set_of(const int *cpus, int n)
{
	ds_cpuset s;

	ds_cpuset_zero(&s);
	for (int i = 0; i < n; i++)
		ds_cpuset_add(&s, cpus[i]);
	return s;
}

static ds_cpuset random_set(int max)
{
	ds_cpuset s;
	int density = (int)(t_rand(&seed) % 4);

	ds_cpuset_zero(&s);
	for (int c = 0; c < max; c++) {
		uint64_t r = t_rand(&seed) % 8;

		/* runs and holes of varied length */
		if ((int)r < density * 2)
			ds_cpuset_add(&s, c);
	}
	return s;
}

/* The list format the obvious way: every CPU, merged into runs. */
static void naive_list(const ds_cpuset *s, char *buf)
{
	int start = -1, n = 0;

	buf[0] = '\0';
	for (int c = 0; c <= DS_CPU_MAX; c++) {
		int in = c < DS_CPU_MAX && ds_cpuset_has(s, c);

		if (in && start < 0)
			start = c;
		if (!in && start >= 0) {
			n += sprintf(buf + n, "%s%d", n ? "," : "", start);
			if (c - 1 > start)
				n += sprintf(buf + n, "-%d", c - 1);
			start = -1;
		}
	}
}

/* ---- lists ------------------------------------------------------------------- */

static void test_cpulist_known(void)
{
	static const int a[] = { 0, 1, 2, 3, 8, 9, 10, 11 };
	char buf[DS_CPULIST_MAX];
	ds_cpuset s, want;
	ds_err err;

	want = set_of(a, 8);
	T_CHECK(ds_cpuset_parse("0-3,8-11", &s, &err) == 0);
	T_CHECK(ds_cpuset_equal(&s, &want));
	T_CHECK(strcmp(ds_cpuset_format(&s, buf), "0-3,8-11") == 0);
	T_CHECK(ds_cpuset_parse(" 5\n", &s, &err) == 0);
	T_CHECK(ds_cpuset_count(&s) == 1 && ds_cpuset_has(&s, 5));
	T_CHECK(strcmp(ds_cpuset_format(&s, buf), "5") == 0);
	T_CHECK(ds_cpuset_parse("\n", &s, &err) == 0 && ds_cpuset_empty(&s));
	T_CHECK(strcmp(ds_cpuset_format(&s, buf), "") == 0);
	T_CHECK(ds_cpuset_parse("1023", &s, &err) == 0 &&
		ds_cpuset_nth(&s, 0) == 1023);
}

static void test_cpulist_errors(void)
{
	static const char *bad[] = { "3-1", "a", "1,,2", "1-", "1024", "-1",
		"0-3:2/4", "1 2", "1;2", "99999999999" };
	ds_cpuset s;
	ds_err err;

	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		err.msg[0] = '\0';
		T_CHECKF(ds_cpuset_parse(bad[i], &s, &err) == -1, "%s", bad[i]);
		T_CHECKF(strstr(err.msg, bad[i]) != NULL, "%s: %s", bad[i],
			 err.msg);
	}
	T_CHECK(ds_cpuset_parse("3-1", &s, &err) == -1 &&
		strstr(err.msg, "bad range") != NULL);
}

static void test_cpulist_random(void)
{
	char got[DS_CPULIST_MAX], want[DS_CPULIST_MAX];

	for (int it = 0; it < 200; it++) {
		ds_cpuset s = random_set(it % 2 ? DS_CPU_MAX : 70), back;
		ds_err err;

		naive_list(&s, want);
		T_CHECKF(strcmp(ds_cpuset_format(&s, got), want) == 0,
			 "%s vs %s", got, want);
		T_CHECK(ds_cpuset_parse(got, &back, &err) == 0);
		T_CHECK(ds_cpuset_equal(&s, &back));
		/* the same set written one CPU at a time */
		int n = 0;
		for (int c = ds_cpuset_next(&s, -1); c >= 0;
		     c = ds_cpuset_next(&s, c))
			n += snprintf(want + n, sizeof want - (size_t)n, "%s%d",
				      n ? "," : "", c);
		if (n < (int)sizeof want - 1) {
			T_CHECK(ds_cpuset_parse(want, &back, &err) == 0);
			T_CHECK(ds_cpuset_equal(&s, &back));
		}
		T_CHECK(ds_cpuset_count(&s) == ds_cpuset_count(&back));
	}
}

static void test_cpuset_ops(void)
{
	static const int a[] = { 1, 5, 64, 700 }, b[] = { 5, 64, 900 };
	ds_cpuset x = set_of(a, 4), y = set_of(b, 3), z;

	z = x;
	ds_cpuset_and(&z, &y);
	T_CHECK(ds_cpuset_count(&z) == 2 && ds_cpuset_has(&z, 5) &&
		ds_cpuset_has(&z, 64));
	z = x;
	ds_cpuset_or(&z, &y);
	T_CHECK(ds_cpuset_count(&z) == 5);
	z = x;
	ds_cpuset_andnot(&z, &y);
	T_CHECK(ds_cpuset_count(&z) == 2 && ds_cpuset_has(&z, 1) &&
		ds_cpuset_has(&z, 700));
	T_CHECK(ds_cpuset_nth(&x, 0) == 1 && ds_cpuset_nth(&x, 3) == 700 &&
		ds_cpuset_nth(&x, 4) == -1);
	T_CHECK(ds_cpuset_next(&x, 64) == 700 && ds_cpuset_next(&x, 700) == -1);
	ds_cpuset_del(&x, 700);
	T_CHECK(!ds_cpuset_has(&x, 700) && ds_cpuset_count(&x) == 3);
}

/* ---- masks ------------------------------------------------------------------- */

static void test_cpumask(void)
{
	static const int a[] = { 0, 1, 32, 33, 34, 35, 36, 37, 38, 39 };
	char buf[DS_CPULIST_MAX];
	ds_cpuset s, want = set_of(a, 10);
	ds_err err;

	T_CHECK(ds_cpumask_parse("ff,00000003\n", &s, &err) == 0);
	T_CHECK(ds_cpuset_equal(&s, &want));
	T_CHECK(strcmp(ds_cpumask_format(&s, 1, buf), "ff,00000003") == 0);
	T_CHECK(strcmp(ds_cpumask_format(&s, 3, buf), "0,000000ff,00000003") == 0);
	T_CHECK(ds_cpumask_parse("3", &s, &err) == 0 && ds_cpuset_count(&s) == 2);
	T_CHECK(strcmp(ds_cpumask_format(&s, 1, buf), "3") == 0);
	ds_cpuset_zero(&s);
	T_CHECK(strcmp(ds_cpumask_format(&s, 2, buf), "0,00000000") == 0);
	T_CHECK(ds_cpumask_parse("FFFF", &s, &err) == 0 && ds_cpuset_count(&s) == 16);
	T_CHECK(ds_cpumask_parse("", &s, &err) == -1);
	T_CHECK(ds_cpumask_parse("xyz", &s, &err) == -1);
	T_CHECK(ds_cpumask_parse("123456789", &s, &err) == -1);
	T_CHECK(ds_cpumask_parse("1,,2", &s, &err) == -1);
}

static void test_cpumask_random(void)
{
	char got[DS_CPULIST_MAX], want[DS_CPULIST_MAX];

	for (int it = 0; it < 200; it++) {
		ds_cpuset s = random_set(it % 2 ? DS_CPU_MAX : 100), back;
		int words = (int)(t_rand(&seed) % 3) + 1, last = -1, n = 0;
		ds_err err;

		for (int c = ds_cpuset_next(&s, -1); c >= 0; c = ds_cpuset_next(&s, c))
			last = c;
		if (words < last / 32 + 1)
			words = last / 32 + 1;
		/* naive: each 32-bit word from its 32 bits */
		for (int wd = words - 1; wd >= 0; wd--) {
			uint32_t v = 0;

			for (int b = 0; b < 32; b++)
				v |= (uint32_t)ds_cpuset_has(&s, wd * 32 + b) << b;
			n += sprintf(want + n, wd == words - 1 ? "%x" : ",%08x", v);
		}
		T_CHECKF(strcmp(ds_cpumask_format(&s, words, got), want) == 0,
			 "%s vs %s", got, want);
		T_CHECK(ds_cpumask_parse(got, &back, &err) == 0);
		T_CHECK(ds_cpuset_equal(&s, &back));
	}
}

/* The kernel shows some sets both ways; they must agree, and our list
 * must be the kernel's own text. */
static void test_kernel_renderings(void)
{
	static const char *pairs[][2] = {
		{ "/sys/devices/system/node/node0/cpumap",
		  "/sys/devices/system/node/node0/cpulist" },
		{ "/sys/devices/system/cpu/cpu0/topology/core_cpus",
		  "/sys/devices/system/cpu/cpu0/topology/core_cpus_list" },
		{ "/sys/devices/system/cpu/cpu0/topology/package_cpus",
		  "/sys/devices/system/cpu/cpu0/topology/package_cpus_list" },
		{ "/sys/devices/system/cpu/cpu0/topology/thread_siblings",
		  "/sys/devices/system/cpu/cpu0/topology/thread_siblings_list" },
	};
	int checked = 0;

	for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
		char mask[DS_CPULIST_MAX], list[DS_CPULIST_MAX], buf[DS_CPULIST_MAX];
		ds_cpuset a, b;
		ds_err err;

		if (ds_sys_line(NULL, pairs[i][0], mask, sizeof mask) != 0 ||
		    ds_sys_line(NULL, pairs[i][1], list, sizeof list) != 0)
			continue;
		T_CHECKF(ds_cpumask_parse(mask, &a, &err) == 0, "%s", err.msg);
		T_CHECKF(ds_cpuset_parse(list, &b, &err) == 0, "%s", err.msg);
		T_CHECKF(ds_cpuset_equal(&a, &b), "%s vs %s", mask, list);
		T_CHECKF(strcmp(ds_cpuset_format(&b, buf), list) == 0, "%s vs %s",
			 buf, list);
		checked++;
	}
	printf("# %d kernel set renderings compared\n", checked);
}

/* ---- /proc parsers --------------------------------------------------------------- */

static void test_interrupts(void)
{
	for (int it = 0; it < 50; it++) {
		int ncpu = (int)(t_rand(&seed) % 8) + 1, nirq = (int)(t_rand(&seed) % 12);
		uint64_t sums[16];
		int ids[16];
		char text[16384];
		size_t n = 0;
		ds_irq *irqs;
		int got;
		ds_err err;

		n += (size_t)sprintf(text + n, "%11s", "");
		for (int c = 0; c < ncpu; c++)
			n += (size_t)sprintf(text + n, "       CPU%d", c);
		n += (size_t)sprintf(text + n, "\n");
		n += (size_t)sprintf(text + n, " NMI:");
		for (int c = 0; c < ncpu; c++)
			n += (size_t)sprintf(text + n, " %10u", (unsigned)(t_rand(&seed) % 99));
		n += (size_t)sprintf(text + n, "   Non-maskable interrupts\n");
		for (int i = 0; i < nirq; i++) {
			ids[i] = (int)(t_rand(&seed) % 4000) + i * 4000;
			sums[i] = 0;
			n += (size_t)sprintf(text + n, "%4d:", ids[i]);
			for (int c = 0; c < ncpu; c++) {
				uint32_t v = (uint32_t)t_rand(&seed);

				sums[i] += v;
				n += (size_t)sprintf(text + n, " %10u", v);
			}
			n += (size_t)sprintf(text + n, "  IR-PCI-MSI-0000:3b:00.0   %d-edge"
					     "      eth0-TxRx-%d\n", i, i);
		}
		n += (size_t)sprintf(text + n, " ERR:          0\n MIS:          0\n");
		T_CHECK(ds_interrupts_parse(text, &irqs, &got, &err) == 0);
		T_CHECKF(got == nirq, "%d vs %d", got, nirq);
		for (int i = 0; i < got && i < nirq; i++) {
			char name[96];

			snprintf(name, sizeof name, "IR-PCI-MSI-0000:3b:00.0 %d-edge "
				 "eth0-TxRx-%d", i, i);
			T_CHECK(irqs[i].irq == ids[i]);
			T_CHECKF(irqs[i].count == sums[i], "%llu vs %llu",
				 (unsigned long long)irqs[i].count,
				 (unsigned long long)sums[i]);
			T_CHECKF(strcmp(irqs[i].name, name) == 0, "%s", irqs[i].name);
		}
		free(irqs);
	}
}

/* Every numeric row of the running kernel's file, counted by hand. */
static void test_interrupts_real(void)
{
	char *text;
	ds_irq *irqs;
	int got, want = 0;
	ds_err err;

	if (ds_sys_read("/proc/interrupts", 64u << 20, &text, NULL, &err) != 0)
		return;
	for (char *l = strchr(text, '\n'); l != NULL; l = strchr(l + 1, '\n')) {
		char *p = l + 1;

		while (*p == ' ')
			p++;
		if (*p >= '0' && *p <= '9') {
			while (*p >= '0' && *p <= '9')
				p++;
			want += *p == ':';
		}
	}
	T_CHECK(ds_interrupts_parse(text, &irqs, &got, &err) == 0);
	T_CHECKF(got == want, "%d vs %d", got, want);
	free(irqs);
	T_CHECK(ds_interrupts_parse("no header\n 1: 5 x\n", &irqs, &got, &err) == -1);
	free(text);
}

static void test_meminfo(void)
{
	char text[512];
	uint64_t a = t_rand(&seed) % 100000000, b = t_rand(&seed) % 1000, v = 0;
	struct sysinfo si;
	char *real;
	ds_err err;

	snprintf(text, sizeof text, "MemTotal:       %llu kB\nMemFree: 7 kB\n"
		 "HugePages_Total:   %llu\nHugepagesize:       2048 kB\n",
		 (unsigned long long)a, (unsigned long long)b);
	T_CHECK(ds_meminfo_get(text, "MemTotal", &v) == 0 && v == a);
	T_CHECK(ds_meminfo_get(text, "HugePages_Total", &v) == 0 && v == b);
	T_CHECK(ds_meminfo_get(text, "Hugepagesize", &v) == 0 && v == 2048);
	T_CHECK(ds_meminfo_get(text, "Total", &v) == -1);
	T_CHECK(ds_meminfo_get(text, "MemAvailable", &v) == -1);
	snprintf(text, sizeof text, "Node 1 MemTotal:  %llu kB\nNode 1 MemFree: "
		 "%llu kB\n", (unsigned long long)a, (unsigned long long)b);
	T_CHECK(ds_meminfo_get(text, "MemFree", &v) == 0 && v == b);
	/* the running kernel: MemTotal is sysinfo(2)'s totalram */
	if (ds_sys_read("/proc/meminfo", 1 << 20, &real, NULL, &err) == 0 &&
	    sysinfo(&si) == 0) {
		T_CHECK(ds_meminfo_get(real, "MemTotal", &v) == 0);
		T_CHECKF(v == (uint64_t)si.totalram * si.mem_unit / 1024,
			 "%llu vs %llu", (unsigned long long)v,
			 (unsigned long long)si.totalram * si.mem_unit / 1024);
		free(real);
	}
}

static void test_words(void)
{
	char buf[64];

	ds_sys_selected("always [madvise] never", buf, sizeof buf);
	T_CHECK(strcmp(buf, "madvise") == 0);
	ds_sys_selected("[always] defer defer+madvise madvise never\n", buf, sizeof buf);
	T_CHECK(strcmp(buf, "always") == 0);
	ds_sys_selected("  performance\n", buf, sizeof buf);
	T_CHECK(strcmp(buf, "performance") == 0);
	ds_sys_selected("max 100000\n", buf, sizeof buf);
	T_CHECK(strcmp(buf, "max 100000") == 0);
	T_CHECK(ds_word_in("cpuset cpu io", "cpu"));
	T_CHECK(!ds_word_in("cpuset io", "cpu"));
	T_CHECK(ds_word_in("+cpu +cpuset", "cpuset"));
	T_CHECK(!ds_word_in("", "cpu"));
	T_CHECK(!ds_word_in("cpu", ""));
}

/* ---- ISA ---------------------------------------------------------------------------- */

/* The best ISA the kernels' CPUID check finds on this machine. */
static const char *best_isa(void)
{
	int best = DS_ISA_SCALAR;

	for (int i = 0; i < DS_ISA_COUNT; i++)
		if (ds_isa_supported((enum ds_isa)i))
			best = i;
	return ds_isa_name((enum ds_isa)best);
}

/* ds_isa_from_flags on x86-64 flags */
static void isa_flags_x86(void)
{
	static const char *const v4 = "fpu avx f16c fma avx2 avx512f avx512dq "
				      "avx512bw avx512vl avx512_vnni";
	char buf[512];

	snprintf(buf, sizeof buf, "%s avx512_bf16", v4);
	T_CHECK(!strcmp(ds_isa_from_flags(buf), "avx512"));
	snprintf(buf, sizeof buf, "%s avx512_bf16 amx_bf16 amx_tile amx_int8", v4);
	T_CHECK(!strcmp(ds_isa_from_flags(buf), "avx512+amx"));
	snprintf(buf, sizeof buf, "%s avx512_bf16 amx_tile", v4);
	T_CHECK(!strcmp(ds_isa_from_flags(buf), "avx512"));
	T_CHECK(!strcmp(ds_isa_from_flags(v4), "avx2"));
	snprintf(buf, sizeof buf, "%s avx_vnni", v4);
	T_CHECK(!strcmp(ds_isa_from_flags(buf), "avx2+avxvnni"));
	T_CHECK(!strcmp(ds_isa_from_flags("avx fma avx2"), "scalar"));
	T_CHECK(!strcmp(ds_isa_from_flags("avx f16c fma avx2x"), "scalar"));
	T_CHECK(!strcmp(ds_isa_from_flags(""), "scalar"));
}

/* ... and on AArch64 Features (a Neoverse N1's, a V1's) */
static void isa_flags_arm(void)
{
	static const char *const n1 = "fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics "
				      "fphp asimdhp cpuid asimdrdm lrcpc dcpop asimddp ssbs";

	T_CHECK(!strcmp(ds_isa_from_flags(n1), "dotprod"));
	T_CHECK(!strcmp(ds_isa_from_flags("fp asimd evtstrm crc32 cpuid"), "neon"));
	T_CHECK(!strcmp(ds_isa_from_flags("fp asimd asimddp sve i8mm bf16 svei8mm"),
			"dotprod+i8mm"));
	T_CHECK(!strcmp(ds_isa_from_flags("fp asimd asimddp i8mm"), "dotprod"));
	T_CHECK(!strcmp(ds_isa_from_flags("fp asimd i8mm bf16"), "neon"));
	T_CHECK(!strcmp(ds_isa_from_flags("fp asimdx"), "scalar"));
	T_CHECK(!strcmp(ds_isa_from_flags(""), "scalar"));
}

static void test_isa(void)
{
	char *text, flags[8192] = "", key[32], *f;
	ds_err err;

	if (strcmp(ds_isa_src.key, "flags") == 0)
		isa_flags_x86();
	else
		isa_flags_arm();
	/* the kernels' CPUID or HWCAP here against the kernel's words for
	 * the CPU (qemu-user shows the host's /proc/cpuinfo, whose words are
	 * another architecture's: then there is nothing to compare) */
	if (ds_sys_read("/proc/cpuinfo", 64u << 20, &text, NULL, &err) != 0)
		return;
	snprintf(key, sizeof key, "\n%s", ds_isa_src.key);
	f = strstr(text, key);
	if (f != NULL && (f = strchr(f, ':')) != NULL) {
		char *e = strchr(f, '\n');

		snprintf(flags, sizeof flags, "%.*s", e ? (int)(e - f - 1) : 0, f + 1);
		T_CHECKF(!strcmp(best_isa(), ds_isa_from_flags(flags)),
			 "%s %s, %s %s", ds_isa_src.detect, best_isa(), ds_isa_src.key,
			 ds_isa_from_flags(flags));
	} else {
		printf("# no %s line in /proc/cpuinfo: %s not compared\n", ds_isa_src.key,
		       ds_isa_src.detect);
	}
	free(text);
}

/* ---- the running system ------------------------------------------------------------- */

static void test_sysinfo_real(void)
{
	ds_sysinfo si;
	struct sysinfo k;
	ds_err err;

	T_CHECKF(ds_sysinfo_read(&si, NULL, &err) == 0, "%s", err.msg);
	T_CHECK(ds_cpuset_count(&si.online) == sysconf(_SC_NPROCESSORS_ONLN));
	T_CHECK(si.n_cores >= 1 && si.n_cores <= ds_cpuset_count(&si.online));
	T_CHECK(si.n_nodes >= 1);
	if (sysinfo(&k) == 0 && si.mem_total_kb >= 0)
		T_CHECK((uint64_t)si.mem_total_kb == (uint64_t)k.totalram * k.mem_unit / 1024);
	ds_sysinfo_free(&si);
	T_CHECK(ds_sysinfo_read(&si, "/nonexistent-root", &err) == -1);
	T_CHECK(strstr(err.msg, "/nonexistent-root") != NULL);
}

static void test_affinity(void)
{
	ds_cpuset old, one, now, s;
	ds_err err;

	T_CHECK(ds_affinity_get(0, &old, &err) == 0 && !ds_cpuset_empty(&old));
	ds_cpuset_zero(&one);
	ds_cpuset_add(&one, ds_cpuset_nth(&old, (int)(t_rand(&seed) %
		(uint64_t)ds_cpuset_count(&old))));
	T_CHECK(ds_affinity_set(0, &one, &err) == 0);
	T_CHECK(ds_affinity_get(0, &now, &err) == 0 && ds_cpuset_equal(&now, &one));
	T_CHECK(sched_getcpu() == ds_cpuset_nth(&one, 0));
	T_CHECK(ds_affinity_set(0, &old, &err) == 0);
	ds_cpuset_zero(&s);
	T_CHECK(ds_affinity_set(0, &s, &err) == -1);
	T_CHECK(ds_cpus_arg("1023", &s, &err) == -1 || ds_cpuset_has(&old, 1023));
	T_CHECKF(strstr(err.msg, "not available to this process") != NULL,
		 "%s", err.msg);
	T_CHECK(ds_cpus_arg("", &s, &err) == -1 && strstr(err.msg, "empty"));
	T_CHECK(ds_cpus_arg("x", &s, &err) == -1);
	T_CHECK(ds_cpus_arg("0-1023", &s, &err) == -1 || ds_cpuset_count(&old) == 1024);
	char list[DS_CPULIST_MAX];
	T_CHECK(ds_cpus_arg(ds_cpuset_format(&old, list), &s, &err) == 0 &&
		ds_cpuset_equal(&s, &old));
}

/* In a child without capabilities or an RLIMIT_RTPRIO: refused with a
 * message naming CAP_SYS_NICE.  With them (root): granted. */
static int fifo_child(int drop)
{
	struct __user_cap_header_struct h = { _LINUX_CAPABILITY_VERSION_3, 0 };
	struct __user_cap_data_struct d[2];
	struct rlimit rl = { 0, 0 };
	ds_err err;

	memset(d, 0, sizeof d);
	if (drop) {
		setrlimit(RLIMIT_RTPRIO, &rl);
		if (geteuid() == 0 && syscall(SYS_capset, &h, d) != 0)
			return 3;
		if (ds_sched_fifo(1, &err) != -1)
			return 1;
		return strstr(err.msg, "CAP_SYS_NICE") != NULL ? 0 : 2;
	}
	if (ds_sched_fifo(1, &err) != 0)
		return 4;
	return sched_getscheduler(0) == SCHED_FIFO ? 0 : 5;
}

static int run_child(int drop)
{
	int st;
	pid_t pid = fork();

	if (pid == 0)
		_exit(fifo_child(drop));
	if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st))
		return -1;
	return WEXITSTATUS(st);
}

static void test_sched_fifo(void)
{
	ds_err err;
	int r;

	T_CHECK(ds_sched_fifo(0, &err) == -1 && strstr(err.msg, "out of range"));
	T_CHECK(ds_sched_fifo(100, &err) == -1 && strstr(err.msg, "1-99"));
	r = run_child(1);
	T_CHECKF(r == 0, "child without CAP_SYS_NICE: %d", r);
	if (geteuid() == 0) {
		r = run_child(0);
		T_CHECKF(r == 0, "child as root: %d", r);
	}
}

int main(void)
{
	seed = t_seed();
	T_RUN(test_cpulist_known);
	T_RUN(test_cpulist_errors);
	T_RUN(test_cpulist_random);
	T_RUN(test_cpuset_ops);
	T_RUN(test_cpumask);
	T_RUN(test_cpumask_random);
	T_RUN(test_kernel_renderings);
	T_RUN(test_interrupts);
	T_RUN(test_interrupts_real);
	T_RUN(test_meminfo);
	T_RUN(test_words);
	T_RUN(test_isa);
	T_RUN(test_sysinfo_real);
	T_RUN(test_affinity);
	T_RUN(test_sched_fifo);
	return t_done();
}
