/* fuzz_sysparse.c - the formats of kernel files ds-tune and ds-run read
 * (libcore/host/sysinfo/parse.c, cpuset.c; threads.c): CPU lists, CPU masks,
 * /proc/interrupts, meminfo, "[selected]" words, cpuinfo flags.  The
 * first byte picks the parser; the rest is the file.  What parses must
 * print back to text that parses to the same set. */
#include "fuzz.h"
#include "host/sysinfo/sysinfo.h"
#include "pool/threads.h"

static void cpulist(const char *s)
{
	ds_cpuset a, b;
	ds_err err;
	char buf[DS_CPULIST_MAX];
	int cpus[DS_CPU_MAX], n = 0;

	if (ds_cpuset_parse(s, &a, &err) == 0) {
		ds_cpuset_format(&a, buf);
		FZ_CHECK(strlen(buf) < sizeof buf);
		FZ_CHECK(ds_cpuset_parse(buf, &b, &err) == 0);
		FZ_CHECK(ds_cpuset_equal(&a, &b));
		FZ_CHECK(ds_cpuset_count(&a) <= DS_CPU_MAX);
		ds_cpumask_format(&a, 1, buf);
		FZ_CHECK(ds_cpumask_parse(buf, &b, &err) == 0);
		FZ_CHECK(ds_cpuset_equal(&a, &b));
	}
	if (ds_cpulist_parse(s, cpus, DS_CPU_MAX, &n, &err) == 0)
		FZ_CHECK(n >= 0 && n <= DS_CPU_MAX);
	(void)ds_cpulist_parse(s, cpus, 4, &n, &err);
}

static void cpumask(const char *s)
{
	ds_cpuset a, b;
	ds_err err;
	char buf[DS_CPULIST_MAX];

	if (ds_cpumask_parse(s, &a, &err) != 0)
		return;
	ds_cpumask_format(&a, 4, buf);
	FZ_CHECK(ds_cpumask_parse(buf, &b, &err) == 0);
	FZ_CHECK(ds_cpuset_equal(&a, &b));
}

static void interrupts(const char *s)
{
	ds_irq *irq = NULL;
	ds_err err;
	int n = 0;

	if (ds_interrupts_parse(s, &irq, &n, &err) == 0) {
		FZ_CHECK(n >= 0);
		for (int i = 0; i < n; i++) {
			FZ_CHECK(memchr(irq[i].name, '\0', sizeof irq[i].name));
			FZ_CHECK(irq[i].affinity[0] == '\0');
		}
	}
	free(irq);
}

static void words(const char *s)
{
	static const char *const keys[] = { "MemTotal", "MemFree",
					    "MemAvailable", "HugePages_Total",
					    "Hugepagesize", "" };
	char buf[64];
	uint64_t v;

	for (size_t i = 0; i < sizeof keys / sizeof *keys; i++)
		(void)ds_meminfo_get(s, keys[i], &v);
	ds_sys_selected(s, buf, sizeof buf);
	FZ_CHECK(strlen(buf) < sizeof buf);
	ds_sys_selected(s, buf, 1);
	FZ_CHECK(buf[0] == '\0');
	FZ_CHECK(ds_isa_from_flags(s) != NULL);
	(void)ds_word_in(s, "cpuset");
	(void)ds_word_in(s, "");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *s;

	if (size < 1)
		return 0;
	s = fz_strdup(data + 1, size - 1);
	switch (data[0] % 4) {
	case 0: cpulist(s); break;
	case 1: cpumask(s); break;
	case 2: interrupts(s); break;
	case 3: words(s); break;
	}
	free(s);
	return 0;
}
