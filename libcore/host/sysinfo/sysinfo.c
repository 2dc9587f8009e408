/* sysinfo.c - read the machine: CPUs, topology, NUMA, cpufreq, memory,
 * huge pages, THP, interrupts, cgroup v2.  Everything under si->root. */
#define _GNU_SOURCE
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <numa.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/kernels.h"
#include "sysinfo.h"

#define CPU_DIR "/sys/devices/system/cpu"
#define NODE_DIR "/sys/devices/system/node"
#define HP_DIR "/sys/kernel/mm/hugepages"

/* A small file under the root as a trimmed line; "" when unreadable. */
static int line_at(const ds_sysinfo *si, char *buf, size_t n,
		   const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static int line_at(const ds_sysinfo *si, char *buf, size_t n,
		   const char *fmt, ...)
{
	char path[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(path, sizeof path, fmt, ap);
	va_end(ap);
	return ds_sys_line(si->root, path, buf, n);
}

/* An integer file; -1 when unreadable or not a number. */
static int64_t int_at(const ds_sysinfo *si, const char *path)
{
	char buf[64], *end;
	long long v;

	if (ds_sys_line(si->root, path, buf, sizeof buf) != 0 || buf[0] == '\0')
		return -1;
	errno = 0;
	v = strtoll(buf, &end, 10);
	return errno != 0 || *end != '\0' || v < 0 ? -1 : v;
}

static int list_at(const ds_sysinfo *si, const char *path, ds_cpuset *s)
{
	char buf[DS_CPULIST_MAX];

	ds_cpuset_zero(s);
	if (ds_sys_line(si->root, path, buf, sizeof buf) != 0)
		return -1;
	return ds_cpuset_parse(buf, s, NULL);
}

/* A whole file under the root, or NULL. */
static char *text_at(const ds_sysinfo *si, const char *path, size_t max)
{
	char full[512], *t;

	if (ds_sys_path(si->root, path, full, sizeof full) != 0 ||
	    ds_sys_read(full, max, &t, NULL, NULL) != 0)
		return NULL;
	return t;
}

/* ---- /proc/cpuinfo ---------------------------------------------------------- */

/* The value of the first "key : value" line of `text`, into buf. */
static void cpuinfo_field(const char *text, const char *key, char *buf,
			  size_t n)
{
	size_t kl = strlen(key);

	buf[0] = '\0';
	for (const char *l = text; l != NULL && *l; l = strchr(l, '\n')) {
		const char *v, *e;

		while (*l == '\n')
			l++;
		if (strncmp(l, key, kl) != 0 || (l[kl] != ' ' && l[kl] != '\t' &&
						  l[kl] != ':'))
			continue;
		v = strchr(l, ':');
		e = strchr(l, '\n');
		if (v == NULL || (e != NULL && v > e))
			continue;
		for (v++; *v == ' ' || *v == '\t'; v++)
			;
		if (e == NULL)
			e = v + strlen(v);
		snprintf(buf, n, "%.*s", (int)(e - v), v);
		return;
	}
}

static void read_cpuinfo(ds_sysinfo *si, int *nproc)
{
	char *t = text_at(si, "/proc/cpuinfo", 64u << 20);
	char *flags = malloc(8192);
	const char *env = getenv("DS_ISA");

	*nproc = 0;
	if (t != NULL && flags != NULL) {
		cpuinfo_field(t, "model name", si->cpu_model,
			      sizeof si->cpu_model);
		cpuinfo_field(t, "vendor_id", si->cpu_vendor,
			      sizeof si->cpu_vendor);
		cpuinfo_field(t, ds_isa_src.key, flags, 8192);
		for (const char *p = t; (p = strstr(p, "processor")); p++)
			if (p == t || p[-1] == '\n')
				(*nproc)++;
	}
	if (si->root[0] == '\0') {
		ds_err err;

		/* the kernels' own choice: CPUID or HWCAP, or DS_ISA when set */
		si->isa_from = env != NULL && *env != '\0' ? "DS_ISA" : ds_isa_src.detect;
		if (ds_kernels_init(&err) == 0)
			snprintf(si->isa, sizeof si->isa, "%s", ds_kernels_name());
		else
			snprintf(si->isa_err, sizeof si->isa_err, "%.199s", err.msg);
	} else {
		snprintf(si->isa, sizeof si->isa, "%s",
			 ds_isa_from_flags(flags != NULL && t != NULL ? flags : ""));
		si->isa_from = ds_isa_src.from_flags;
	}
	free(flags);
	free(t);
}

/* ---- CPUs and topology ------------------------------------------------------ */

static int read_online(ds_sysinfo *si, int nproc, ds_err *err)
{
	if (list_at(si, CPU_DIR "/online", &si->online) != 0 &&
	    list_at(si, CPU_DIR "/present", &si->online) != 0) {
		if (nproc <= 0 || nproc > DS_CPU_MAX)
			return ds_errf(err, "%s%s: no list of CPUs, and none in "
				       "/proc/cpuinfo", si->root,
				       CPU_DIR "/online");
		for (int c = 0; c < nproc; c++)
			ds_cpuset_add(&si->online, c);
	}
	if (ds_cpuset_empty(&si->online))
		return ds_errf(err, "%s%s: no CPU online", si->root,
			       CPU_DIR "/online");
	return 0;
}

static void read_cpu_topology(ds_sysinfo *si, int c)
{
	ds_cpu *cpu = &si->cpus[c];
	char p[128];

	snprintf(p, sizeof p, CPU_DIR "/cpu%d/topology/physical_package_id", c);
	cpu->package = (int)int_at(si, p);
	snprintf(p, sizeof p, CPU_DIR "/cpu%d/topology/core_id", c);
	cpu->core = (int)int_at(si, p);
	snprintf(p, sizeof p, CPU_DIR "/cpu%d/topology/thread_siblings_list", c);
	if (list_at(si, p, &cpu->siblings) != 0 ||
	    !ds_cpuset_has(&cpu->siblings, c)) {
		ds_cpuset_zero(&cpu->siblings);
		ds_cpuset_add(&cpu->siblings, c);
	} else {
		si->topo_known = 1;
	}
	ds_cpuset_and(&cpu->siblings, &si->online);
	cpu->primary = ds_cpuset_next(&cpu->siblings, -1) == c;
}

static int read_cpus(ds_sysinfo *si, int nproc, ds_err *err)
{
	ds_cpuset pkgs;

	if (read_online(si, nproc, err) != 0)
		return -1;
	for (int c = ds_cpuset_next(&si->online, -1); c >= 0;
	     c = ds_cpuset_next(&si->online, c))
		si->n_cpu = c + 1;
	si->cpus = ds_calloc((size_t)si->n_cpu, sizeof *si->cpus, err);
	if (si->cpus == NULL)
		return -1;
	ds_cpuset_zero(&pkgs);
	si->threads_per_core = 1;
	for (int c = 0; c < si->n_cpu; c++) {
		ds_cpu *cpu = &si->cpus[c];

		cpu->node = -1;
		cpu->online = ds_cpuset_has(&si->online, c);
		if (!cpu->online)
			continue;
		read_cpu_topology(si, c);
		si->n_cores += cpu->primary;
		if (ds_cpuset_count(&cpu->siblings) > si->threads_per_core)
			si->threads_per_core = ds_cpuset_count(&cpu->siblings);
		ds_cpuset_add(&pkgs, cpu->package >= 0 &&
			      cpu->package < DS_CPU_MAX ? cpu->package : 0);
	}
	si->n_packages = ds_cpuset_count(&pkgs);
	line_at(si, si->smt_control, sizeof si->smt_control,
		CPU_DIR "/smt/control");
	return 0;
}

/* ---- NUMA --------------------------------------------------------------------- */

static void read_node_hugepages(ds_sysinfo *si, ds_node *nd)
{
	char p[160];

	nd->n_hp = 0;
	for (int i = 0; i < si->n_hp; i++) {
		ds_hugepages *h = &nd->hp[nd->n_hp];
		const char *base = NODE_DIR "/node%d/hugepages/hugepages-%ukB/%s";

		h->size_kb = si->hp[i].size_kb;
		snprintf(p, sizeof p, base, nd->id, h->size_kb, "nr_hugepages");
		h->nr = int_at(si, p);
		if (h->nr < 0)
			continue;
		snprintf(p, sizeof p, base, nd->id, h->size_kb, "free_hugepages");
		h->free = int_at(si, p);
		snprintf(p, sizeof p, base, nd->id, h->size_kb,
			 "surplus_hugepages");
		h->surplus = int_at(si, p);
		h->resv = -1;
		nd->n_hp++;
	}
}

static void read_node_sysfs(ds_sysinfo *si, ds_node *nd)
{
	char p[128], *t;
	uint64_t kb;

	snprintf(p, sizeof p, NODE_DIR "/node%d/cpulist", nd->id);
	list_at(si, p, &nd->cpus);
	nd->mem_total_kb = nd->mem_free_kb = -1;
	snprintf(p, sizeof p, NODE_DIR "/node%d/meminfo", nd->id);
	t = text_at(si, p, 1u << 20);
	if (t != NULL) {
		if (ds_meminfo_get(t, "MemTotal", &kb) == 0)
			nd->mem_total_kb = (int64_t)kb;
		if (ds_meminfo_get(t, "MemFree", &kb) == 0)
			nd->mem_free_kb = (int64_t)kb;
		free(t);
	}
}

/* libnuma's view of node `id` (the running system only). */
static void read_node_libnuma(ds_node *nd)
{
	struct bitmask *m = numa_allocate_cpumask();
	long long fr = -1, tot;

	ds_cpuset_zero(&nd->cpus);
	if (m != NULL && numa_node_to_cpus(nd->id, m) == 0)
		for (unsigned c = 0; c < m->size && c < DS_CPU_MAX; c++)
			if (numa_bitmask_isbitset(m, c))
				ds_cpuset_add(&nd->cpus, (int)c);
	if (m != NULL)
		numa_free_cpumask(m);
	tot = numa_node_size64(nd->id, &fr);
	nd->mem_total_kb = tot < 0 ? -1 : tot / 1024;
	nd->mem_free_kb = tot < 0 || fr < 0 ? -1 : fr / 1024;
}

static int read_nodes(ds_sysinfo *si, ds_err *err)
{
	ds_cpuset ids;
	int use_libnuma = si->root[0] == '\0' && numa_available() >= 0;

	ds_cpuset_zero(&ids);
	if (use_libnuma) {
		for (int i = 0; i <= numa_max_node() && i < DS_CPU_MAX; i++)
			if (numa_bitmask_isbitset(numa_nodes_ptr, (unsigned)i))
				ds_cpuset_add(&ids, i);
		si->numa_from = "libnuma";
	} else if (list_at(si, NODE_DIR "/online", &ids) == 0 &&
		   !ds_cpuset_empty(&ids)) {
		si->numa_from = "sysfs";
	}
	if (ds_cpuset_empty(&ids)) {
		/* no NUMA information: one node holding everything */
		si->numa_from = "none";
		ds_cpuset_add(&ids, 0);
	}
	si->nodes = ds_calloc((size_t)ds_cpuset_count(&ids), sizeof *si->nodes,
			      err);
	if (si->nodes == NULL)
		return -1;
	for (int id = ds_cpuset_next(&ids, -1); id >= 0;
	     id = ds_cpuset_next(&ids, id)) {
		ds_node *nd = &si->nodes[si->n_nodes++];

		nd->id = id;
		if (use_libnuma)
			read_node_libnuma(nd);
		else
			read_node_sysfs(si, nd);
		if (strcmp(si->numa_from, "none") == 0) {
			nd->cpus = si->online;
			nd->mem_total_kb = si->mem_total_kb;
			nd->mem_free_kb = si->mem_avail_kb;
		} else {
			read_node_hugepages(si, nd);
		}
		ds_cpuset_and(&nd->cpus, &si->online);
		for (int c = ds_cpuset_next(&nd->cpus, -1); c >= 0;
		     c = ds_cpuset_next(&nd->cpus, c))
			if (c < si->n_cpu)
				si->cpus[c].node = id;
	}
	si->numa_balancing = (int)int_at(si, "/proc/sys/kernel/numa_balancing");
	return 0;
}

/* ---- cpufreq ---------------------------------------------------------------- */

/* The policy directory of CPU c relative to the root (symlinks resolved
 * so CPUs sharing a policy find the same one), or -1 when none. */
static int policy_dir(const ds_sysinfo *si, int c, char *out, size_t n)
{
	char p[512], real[PATH_MAX], rroot[PATH_MAX] = "";
	size_t rl;

	snprintf(p, sizeof p, "%s" CPU_DIR "/cpu%d/cpufreq", si->root, c);
	if (!ds_is_dir(p))
		return -1;
	if (realpath(p, real) == NULL)
		return -1;
	if (si->root[0] != '\0' && realpath(si->root, rroot) == NULL)
		return -1;
	rl = strlen(rroot);
	if (strncmp(real, rroot, rl) != 0 || real[rl] != '/')
		snprintf(out, n, CPU_DIR "/cpu%d/cpufreq", c);
	else
		snprintf(out, n, "%s", real + rl);
	return 0;
}

/* affected_cpus is "0 1 2 3", not a list: spaces become commas. */
static void read_affected(const ds_sysinfo *si, ds_cpufreq *pol, int c)
{
	char buf[DS_CPULIST_MAX];

	ds_cpuset_zero(&pol->cpus);
	if (line_at(si, buf, sizeof buf, "%s/affected_cpus", pol->dir) == 0) {
		for (char *q = buf; *q; q++)
			if (*q == ' ')
				*q = ',';
		if (ds_cpuset_parse(buf, &pol->cpus, NULL) != 0)
			ds_cpuset_zero(&pol->cpus);
	}
	ds_cpuset_add(&pol->cpus, c);
}

static void read_policy(const ds_sysinfo *si, ds_cpufreq *pol, int c)
{
	read_affected(si, pol, c);
	line_at(si, pol->driver, sizeof pol->driver, "%s/scaling_driver",
		pol->dir);
	line_at(si, pol->governor, sizeof pol->governor,
		"%s/scaling_governor", pol->dir);
	line_at(si, pol->available, sizeof pol->available,
		"%s/scaling_available_governors", pol->dir);
	line_at(si, pol->epp, sizeof pol->epp,
		"%s/energy_performance_preference", pol->dir);
}

static int read_cpufreq(ds_sysinfo *si, ds_err *err)
{
	si->policies = ds_calloc((size_t)si->n_cpu, sizeof *si->policies, err);
	if (si->policies == NULL)
		return -1;
	for (int c = ds_cpuset_next(&si->online, -1); c >= 0;
	     c = ds_cpuset_next(&si->online, c)) {
		char dir[64];
		int i;

		if (policy_dir(si, c, dir, sizeof dir) != 0)
			continue;
		for (i = 0; i < si->n_policies; i++)
			if (strcmp(si->policies[i].dir, dir) == 0)
				break;
		if (i < si->n_policies) {
			ds_cpuset_add(&si->policies[i].cpus, c);
			continue;
		}
		snprintf(si->policies[i].dir, sizeof si->policies[i].dir, "%s",
			 dir);
		read_policy(si, &si->policies[i], c);
		si->n_policies++;
	}
	return 0;
}

static void read_boost(ds_sysinfo *si)
{
	int64_t v;

	si->boost = -1;
	if ((v = int_at(si, CPU_DIR "/cpufreq/boost")) >= 0) {
		snprintf(si->boost_path, sizeof si->boost_path,
			 CPU_DIR "/cpufreq/boost");
	} else if ((v = int_at(si, CPU_DIR "/intel_pstate/no_turbo")) >= 0) {
		snprintf(si->boost_path, sizeof si->boost_path,
			 CPU_DIR "/intel_pstate/no_turbo");
		si->boost_inverted = 1;
		v = !v;
	} else if (si->n_policies > 0) {
		char p[96];

		snprintf(p, sizeof p, "%s/boost", si->policies[0].dir);
		if ((v = int_at(si, p)) >= 0)
			snprintf(si->boost_path, sizeof si->boost_path, "%s", p);
	}
	si->boost = v < 0 ? -1 : v != 0;
}

/* ---- memory, huge pages, THP -------------------------------------------------- */

static int cmp_hp(const void *a, const void *b)
{
	const ds_hugepages *x = a, *y = b;

	return x->size_kb < y->size_kb ? -1 : x->size_kb > y->size_kb;
}

static void read_hugepages(ds_sysinfo *si)
{
	char dir[512], p[320];
	struct dirent *de;
	DIR *d;

	if (ds_sys_path(si->root, HP_DIR, dir, sizeof dir) != 0 ||
	    (d = opendir(dir)) == NULL)
		return;
	while ((de = readdir(d)) != NULL && si->n_hp < DS_HP_SIZES) {
		ds_hugepages *h = &si->hp[si->n_hp];
		unsigned kb;
		char tail;

		if (sscanf(de->d_name, "hugepages-%ukB%c", &kb, &tail) != 1)
			continue;
		h->size_kb = kb;
		snprintf(p, sizeof p, HP_DIR "/%s/nr_hugepages", de->d_name);
		if ((h->nr = int_at(si, p)) < 0)
			continue;
		snprintf(p, sizeof p, HP_DIR "/%s/free_hugepages", de->d_name);
		h->free = int_at(si, p);
		snprintf(p, sizeof p, HP_DIR "/%s/resv_hugepages", de->d_name);
		h->resv = int_at(si, p);
		snprintf(p, sizeof p, HP_DIR "/%s/surplus_hugepages", de->d_name);
		h->surplus = int_at(si, p);
		si->n_hp++;
	}
	closedir(d);
	qsort(si->hp, (size_t)si->n_hp, sizeof si->hp[0], cmp_hp);
}

static void read_memory(ds_sysinfo *si)
{
	char buf[64];
	char *t = text_at(si, "/proc/meminfo", 1u << 20);
	uint64_t kb;

	si->mem_total_kb = si->mem_avail_kb = -1;
	if (t != NULL) {
		if (ds_meminfo_get(t, "MemTotal", &kb) == 0)
			si->mem_total_kb = (int64_t)kb;
		if (ds_meminfo_get(t, "MemAvailable", &kb) == 0)
			si->mem_avail_kb = (int64_t)kb;
		free(t);
	}
	if (ds_sys_line(si->root, "/sys/kernel/mm/transparent_hugepage/enabled",
			buf, sizeof buf) == 0)
		ds_sys_selected(buf, si->thp_enabled, sizeof si->thp_enabled);
	if (ds_sys_line(si->root, "/sys/kernel/mm/transparent_hugepage/defrag",
			buf, sizeof buf) == 0)
		ds_sys_selected(buf, si->thp_defrag, sizeof si->thp_defrag);
	read_hugepages(si);
}

/* ---- interrupts --------------------------------------------------------------- */

static int cmp_irq(const void *a, const void *b)
{
	const ds_irq *x = a, *y = b;

	if (x->count != y->count)
		return x->count > y->count ? -1 : 1;
	return x->irq - y->irq;
}

/* Unreadable or unparsable: reported as no interrupts. */
static void read_irqs(ds_sysinfo *si)
{
	char *t = text_at(si, "/proc/interrupts", 64u << 20);

	line_at(si, si->irq_default, sizeof si->irq_default,
		"/proc/irq/default_smp_affinity");
	if (t == NULL)
		return;
	if (ds_interrupts_parse(t, &si->irqs, &si->n_irq, NULL) != 0) {
		free(t);
		return;
	}
	free(t);
	for (int i = 0; i < si->n_irq; i++)
		line_at(si, si->irqs[i].affinity, sizeof si->irqs[i].affinity,
			"/proc/irq/%d/smp_affinity_list", si->irqs[i].irq);
	if (si->n_irq > 1)          /* (no table at all when none parsed) */
		qsort(si->irqs, (size_t)si->n_irq, sizeof *si->irqs, cmp_irq);
}

/* Is an irqbalance daemon running?  It would move the IRQs back. */
static void read_irqbalance(ds_sysinfo *si)
{
	char dir[512], comm[32];
	struct dirent *de;
	DIR *d;

	if (ds_sys_path(si->root, "/proc", dir, sizeof dir) != 0 ||
	    (d = opendir(dir)) == NULL)
		return;
	while ((de = readdir(d)) != NULL && !si->irqbalance) {
		if (!isdigit((unsigned char)de->d_name[0]))
			continue;
		if (line_at(si, comm, sizeof comm, "/proc/%s/comm",
			    de->d_name) == 0 && strcmp(comm, "irqbalance") == 0)
			si->irqbalance = 1;
	}
	closedir(d);
}

/* ---- cgroup v2 ------------------------------------------------------------------ */

/* mountinfo escapes blanks as \040; undo it in place. */
static void unescape_octal(char *s)
{
	char *w = s;

	for (; *s; s++) {
		if (s[0] == '\\' && s[1] >= '0' && s[1] <= '3' &&
		    s[2] >= '0' && s[2] <= '7' && s[3] >= '0' && s[3] <= '7') {
			*w++ = (char)((s[1] - '0') << 6 | (s[2] - '0') << 3 |
				      (s[3] - '0'));
			s += 3;
		} else {
			*w++ = *s;
		}
	}
	*w = '\0';
}

static void find_cgroup2(ds_sysinfo *si)
{
	char *t = text_at(si, "/proc/self/mountinfo", 16u << 20);
	char mnt[128], fstype[64], probe[512];

	for (char *l = t; l != NULL && *l; ) {
		char *nl = strchr(l, '\n'), *dash;

		if (nl != NULL)
			*nl = '\0';
		/* "ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTS ... - FSTYPE SRC SUPER" */
		dash = strstr(l, " - ");
		if (dash != NULL && sscanf(dash + 3, "%63s", fstype) == 1 &&
		    strcmp(fstype, "cgroup2") == 0 &&
		    sscanf(l, "%*s %*s %*s %*s %127s", mnt) == 1) {
			unescape_octal(mnt);
			snprintf(si->cg_mount, sizeof si->cg_mount, "%s", mnt);
			break;
		}
		l = nl != NULL ? nl + 1 : NULL;
	}
	free(t);
	if (si->cg_mount[0] == '\0' &&
	    ds_sys_path(si->root, "/sys/fs/cgroup/cgroup.controllers", probe,
			sizeof probe) == 0 && access(probe, R_OK) == 0)
		snprintf(si->cg_mount, sizeof si->cg_mount, "/sys/fs/cgroup");
	if (si->cg_mount[0] == '\0')
		return;
	line_at(si, si->cg_controllers, sizeof si->cg_controllers,
		"%s/cgroup.controllers", si->cg_mount);
	line_at(si, si->cg_subtree, sizeof si->cg_subtree,
		"%s/cgroup.subtree_control", si->cg_mount);
}

/* ---- all of it ------------------------------------------------------------------- */

int ds_sysinfo_read(ds_sysinfo *si, const char *root, ds_err *err)
{
	int nproc;
	size_t rl;

	memset(si, 0, sizeof *si);
	if (root != NULL && snprintf(si->root, sizeof si->root, "%s", root) >=
	    (int)sizeof si->root)
		return ds_errf(err, "%s: root path too long", root);
	rl = strlen(si->root);
	while (rl > 0 && si->root[rl - 1] == '/')
		si->root[--rl] = '\0';
	read_cpuinfo(si, &nproc);
	if (read_cpus(si, nproc, err) != 0)
		goto fail;
	read_memory(si);
	if (read_nodes(si, err) != 0 || read_cpufreq(si, err) != 0)
		goto fail;
	read_irqs(si);
	read_boost(si);
	read_irqbalance(si);
	find_cgroup2(si);
	return 0;
fail:
	ds_sysinfo_free(si);
	return -1;
}

void ds_sysinfo_free(ds_sysinfo *si)
{
	free(si->cpus);
	free(si->nodes);
	free(si->policies);
	free(si->irqs);
	si->cpus = NULL;
	si->nodes = NULL;
	si->policies = NULL;
	si->irqs = NULL;
}
