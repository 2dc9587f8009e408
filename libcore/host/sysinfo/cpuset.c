/* cpuset.c - CPU sets, the kernel's list and mask formats, pinning and
 * SCHED_FIFO. */
#define _GNU_SOURCE
#include <ctype.h>
#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sysinfo.h"
#include "pool/threads.h"

/* ---- set operations ------------------------------------------------------- */

void ds_cpuset_zero(ds_cpuset *s)
{
	memset(s, 0, sizeof *s);
}

void ds_cpuset_add(ds_cpuset *s, int cpu)
{
	DS_ASSERT(cpu >= 0 && cpu < DS_CPU_MAX);
	s->w[cpu / 64] |= 1ull << (cpu % 64);
}

void ds_cpuset_del(ds_cpuset *s, int cpu)
{
	DS_ASSERT(cpu >= 0 && cpu < DS_CPU_MAX);
	s->w[cpu / 64] &= ~(1ull << (cpu % 64));
}

int ds_cpuset_has(const ds_cpuset *s, int cpu)
{
	if (cpu < 0 || cpu >= DS_CPU_MAX)
		return 0;
	return (s->w[cpu / 64] >> (cpu % 64)) & 1;
}

int ds_cpuset_count(const ds_cpuset *s)
{
	int n = 0;

	for (size_t i = 0; i < DS_CPU_MAX / 64; i++)
		n += __builtin_popcountll(s->w[i]);
	return n;
}

int ds_cpuset_empty(const ds_cpuset *s)
{
	return ds_cpuset_count(s) == 0;
}

int ds_cpuset_equal(const ds_cpuset *a, const ds_cpuset *b)
{
	return memcmp(a->w, b->w, sizeof a->w) == 0;
}

int ds_cpuset_next(const ds_cpuset *s, int after)
{
	for (int c = after + 1; c < DS_CPU_MAX; c++) {
		uint64_t rest = s->w[c / 64] >> (c % 64);

		if (rest != 0)
			return c + __builtin_ctzll(rest);
		c |= 63; /* nothing left in this word */
	}
	return -1;
}

int ds_cpuset_nth(const ds_cpuset *s, int n)
{
	int c = -1;

	if (n < 0)
		return -1;
	do
		c = ds_cpuset_next(s, c);
	while (c >= 0 && n-- > 0);
	return c;
}

void ds_cpuset_or(ds_cpuset *d, const ds_cpuset *a)
{
	for (size_t i = 0; i < DS_CPU_MAX / 64; i++)
		d->w[i] |= a->w[i];
}

void ds_cpuset_and(ds_cpuset *d, const ds_cpuset *a)
{
	for (size_t i = 0; i < DS_CPU_MAX / 64; i++)
		d->w[i] &= a->w[i];
}

void ds_cpuset_andnot(ds_cpuset *d, const ds_cpuset *a)
{
	for (size_t i = 0; i < DS_CPU_MAX / 64; i++)
		d->w[i] &= ~a->w[i];
}

/* ---- list format ---------------------------------------------------------- */

/* The grammar is threads.c's (the thread pool's --cpus); this adds
 * surrounding white space (sysfs ends values with a newline) and the
 * empty list (an empty cpuset.cpus, a memory-only node). */
int ds_cpuset_parse(const char *s, ds_cpuset *out, ds_err *err)
{
	int cpus[DS_CPU_MAX], n = 0;
	char buf[DS_CPULIST_MAX];
	size_t a = 0, e = strlen(s);

	ds_cpuset_zero(out);
	while (isspace((unsigned char)s[a]))
		a++;
	while (e > a && isspace((unsigned char)s[e - 1]))
		e--;
	if (e == a)
		return 0;
	if (e - a >= sizeof buf)
		return ds_errf(err, "CPU list \"%.40s...\": too long", s + a);
	memcpy(buf, s + a, e - a);
	buf[e - a] = '\0';
	if (ds_cpulist_parse(buf, cpus, DS_CPU_MAX, &n, err) != 0)
		return -1;
	for (int i = 0; i < n; i++) {
		if (cpus[i] >= DS_CPU_MAX)
			return ds_errf(err, "CPU list \"%s\": CPU %d is past the "
				       "%d supported", buf, cpus[i], DS_CPU_MAX);
		ds_cpuset_add(out, cpus[i]);
	}
	return 0;
}

char *ds_cpuset_format(const ds_cpuset *s, char *buf)
{
	size_t n = 0;
	int c = ds_cpuset_next(s, -1);

	buf[0] = '\0';
	while (c >= 0) {
		int e = c;

		while (ds_cpuset_has(s, e + 1))
			e++;
		/* worst case 512 items of at most 10 bytes: fits */
		n += (size_t)snprintf(buf + n, DS_CPULIST_MAX - n,
				      e == c ? "%s%d" : "%s%d-%d",
				      n ? "," : "", c, e);
		c = ds_cpuset_next(s, e);
	}
	return buf;
}

/* ---- mask format ---------------------------------------------------------- */

int ds_cpumask_parse(const char *s, ds_cpuset *out, ds_err *err)
{
	const char *p = s, *end;
	int nwords = 1, word = 0;

	ds_cpuset_zero(out);
	while (isspace((unsigned char)*p))
		p++;
	end = p + strlen(p);
	while (end > p && isspace((unsigned char)end[-1]))
		end--;
	for (const char *q = p; q < end; q++)
		nwords += *q == ',';
	if (p == end)
		return ds_errf(err, "CPU mask \"%s\": empty", s);
	/* words run most significant first: the first one is nwords-1 */
	while (p < end) {
		int idx = nwords - 1 - word, digits = 0;
		uint32_t v = 0;

		while (p < end && *p != ',') {
			if (!isxdigit((unsigned char)*p) || ++digits > 8)
				return ds_errf(err, "CPU mask \"%s\": bad word "
					       "at \"%.*s\"", s,
					       (int)(end - p), p);
			v = v << 4 | (uint32_t)(isdigit((unsigned char)*p)
				? *p - '0' : (tolower((unsigned char)*p) - 'a' + 10));
			p++;
		}
		if (digits == 0)
			return ds_errf(err, "CPU mask \"%s\": empty word", s);
		if (v != 0 && (size_t)idx >= DS_CPU_MAX / 32)
			return ds_errf(err, "CPU mask \"%s\": CPUs past the %d "
				       "supported", s, DS_CPU_MAX);
		for (int b = 0; b < 32; b++)
			if (v >> b & 1)
				ds_cpuset_add(out, idx * 32 + b);
		if (p < end)
			p++;
		word++;
	}
	return 0;
}

char *ds_cpumask_format(const ds_cpuset *s, int words, char *buf)
{
	int last = -1, n = 0;

	for (int c = ds_cpuset_next(s, -1); c >= 0; c = ds_cpuset_next(s, c))
		last = c;
	if (words < last / 32 + 1)
		words = last / 32 + 1;
	if (words < 1)
		words = 1;
	if (words > DS_CPU_MAX / 32)
		words = DS_CPU_MAX / 32;
	for (int i = words - 1; i >= 0; i--) {
		uint32_t v = (uint32_t)(s->w[i / 2] >> (32 * (i % 2)));

		n += snprintf(buf + n, DS_CPULIST_MAX - (size_t)n,
			      i == words - 1 ? "%x" : ",%08x", v);
	}
	return buf;
}

/* ---- pinning and real-time scheduling ------------------------------------- */

static void to_cpu_set(const ds_cpuset *s, cpu_set_t *cs)
{
	CPU_ZERO(cs);
	for (int c = ds_cpuset_next(s, -1); c >= 0; c = ds_cpuset_next(s, c))
		CPU_SET(c, cs);
}

int ds_affinity_get(int tid, ds_cpuset *s, ds_err *err)
{
	cpu_set_t cs;

	ds_cpuset_zero(s);
	if (sched_getaffinity(tid, sizeof cs, &cs) != 0)
		return ds_errf(err, "sched_getaffinity: %s", strerror(errno));
	for (int c = 0; c < DS_CPU_MAX && c < CPU_SETSIZE; c++)
		if (CPU_ISSET(c, &cs))
			ds_cpuset_add(s, c);
	return 0;
}

int ds_affinity_set(int tid, const ds_cpuset *s, ds_err *err)
{
	char list[DS_CPULIST_MAX];
	cpu_set_t cs;

	if (ds_cpuset_empty(s))
		return ds_errf(err, "CPU affinity: empty CPU set");
	to_cpu_set(s, &cs);
	if (sched_setaffinity(tid, sizeof cs, &cs) != 0)
		return ds_errf(err, "CPU affinity %s: %s",
			       ds_cpuset_format(s, list), strerror(errno));
	return 0;
}

int ds_cpus_arg(const char *list, ds_cpuset *out, ds_err *err)
{
	char buf[DS_CPULIST_MAX];
	ds_cpuset allowed, extra;

	if (ds_cpuset_parse(list, out, err) != 0)
		return -1;
	if (ds_cpuset_empty(out))
		return ds_errf(err, "CPU list \"%s\" is empty", list);
	if (ds_affinity_get(0, &allowed, err) != 0)
		return -1;
	extra = *out;
	ds_cpuset_andnot(&extra, &allowed);
	if (!ds_cpuset_empty(&extra))
		return ds_errf(err, "CPU list \"%s\": CPU %d is not available "
			       "to this process (allowed: %s)", list,
			       ds_cpuset_next(&extra, -1),
			       ds_cpuset_format(&allowed, buf));
	return 0;
}

int ds_sched_fifo(int prio, ds_err *err)
{
	struct sched_param sp = { .sched_priority = prio };
	int lo = sched_get_priority_min(SCHED_FIFO);
	int hi = sched_get_priority_max(SCHED_FIFO);

	if (prio < lo || prio > hi)
		return ds_errf(err, "SCHED_FIFO priority %d: out of range "
			       "%d-%d", prio, lo, hi);
	if (sched_setscheduler(0, SCHED_FIFO, &sp) == 0)
		return 0;
	if (errno == EPERM)
		return ds_errf(err, "SCHED_FIFO priority %d: not permitted: "
			       "real-time scheduling needs CAP_SYS_NICE (or "
			       "an RLIMIT_RTPRIO of at least %d)", prio, prio);
	return ds_errf(err, "SCHED_FIFO priority %d: %s", prio,
		       strerror(errno));
}
