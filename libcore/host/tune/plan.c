/* plan.c - from a machine and a model to the settings that run it well:
 * CPU sets of physical cores per instance, huge pages per node, governor,
 * boost, THP, NUMA balancing, cgroups, interrupt affinity, and the
 * command line of each instance. */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "tune.h"
#include "internal.h"

#define HP_KB 2048u
#define CG_GROUP "ds-tune"
#define CG_TOP_WEIGHT "10000" /* the most cgroup v2 allows */
#define CG_INST_WEIGHT "100"  /* the default: instances are equals */
#define CG_NO_QUOTA "max 100000"

/* ---- building the plan ---------------------------------------------------- */

int ds_tune_act_add(ds_tune_plan *p, int op, const char *path,
		   const char *value, const char *why, ds_err *err)
{
	ds_tune_action *nv = realloc(p->act, (size_t)(p->n_act + 1) * sizeof *nv);
	ds_tune_action *a;

	if (nv == NULL)
		return ds_errf(err, "plan: out of memory");
	p->act = nv;
	a = &p->act[p->n_act];
	a->op = op;
	a->why = why;
	a->path = strdup(path);
	a->value = value != NULL ? strdup(value) : NULL;
	if (a->path == NULL || (value != NULL && a->value == NULL)) {
		free(a->path);
		free(a->value);
		return ds_errf(err, "plan: out of memory");
	}
	p->n_act++;
	return 0;
}

static int note_add(ds_tune_plan *p, ds_err *err, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static int note_add(ds_tune_plan *p, ds_err *err, const char *fmt, ...)
{
	char **nv = realloc(p->notes, (size_t)(p->n_notes + 1) * sizeof *nv);
	va_list ap;
	int r;

	if (nv == NULL)
		return ds_errf(err, "plan: out of memory");
	p->notes = nv;
	va_start(ap, fmt);
	r = vasprintf(&p->notes[p->n_notes], fmt, ap);
	va_end(ap);
	if (r < 0)
		return ds_errf(err, "plan: out of memory");
	p->n_notes++;
	return 0;
}

/* Write `want` to `path` unless the root already holds it. */
static int set_if(ds_tune_plan *p, const ds_sysinfo *si, const char *path,
		  const char *want, const char *why, ds_err *err)
{
	char cur[256], sel[256];

	if (ds_sys_line(si->root, path, cur, sizeof cur) == 0) {
		ds_sys_selected(cur, sel, sizeof sel);
		if (strcmp(sel, want) == 0)
			return 0;
	}
	return ds_tune_act_add(p, DS_TUNE_WRITE, path, want, why, err);
}

/* ---- CPU sets ---------------------------------------------------------------- */

/* The physical cores (lowest thread of each) of one node. */
typedef struct node_cores {
	int node, n, used;
	int *cpu;
} node_cores;

static node_cores *collect_cores(const ds_sysinfo *si, ds_err *err)
{
	node_cores *nc = ds_calloc((size_t)si->n_nodes, sizeof *nc, err);

	if (nc == NULL)
		return NULL;
	for (int i = 0; i < si->n_nodes; i++) {
		nc[i].node = si->nodes[i].id;
		nc[i].cpu = ds_calloc((size_t)si->n_cpu, sizeof(int), err);
		if (nc[i].cpu == NULL) {
			while (i-- > 0)
				free(nc[i].cpu);
			free(nc);
			return NULL;
		}
	}
	for (int c = 0; c < si->n_cpu; c++) {
		const ds_cpu *cpu = &si->cpus[c];
		int i = 0;

		if (!cpu->online || !cpu->primary)
			continue;
		while (i < si->n_nodes && nc[i].node != cpu->node)
			i++;
		if (i == si->n_nodes)
			i = 0; /* a CPU no node claims: count it in the first */
		nc[i].cpu[nc[i].n++] = c;
	}
	return nc;
}

static void free_cores(node_cores *nc, int n)
{
	for (int i = 0; nc != NULL && i < n; i++)
		free(nc[i].cpu);
	free(nc);
}

/* Take k unused cores of node i into instance `in`. */
static void take(node_cores *nc, int i, int k, ds_tune_instance *in)
{
	for (int j = 0; j < k; j++)
		ds_cpuset_add(&in->cpus, nc[i].cpu[nc[i].used++]);
	ds_cpuset_add(&in->nodes, nc[i].node);
}

/* No --threads: split the cores evenly.  With at least as many instances
 * as nodes, each instance stays on one node; with fewer, each spans a run
 * of whole nodes. */
static int place_even(ds_tune_plan *p, node_cores *nc, int nn, ds_err *err)
{
	int N = p->n_inst, used_nodes = 0, map[DS_CPU_MAX];

	for (int i = 0; i < nn; i++)
		if (nc[i].n > 0)
			map[used_nodes++] = i;
	if (N < used_nodes) {
		for (int k = 0; k < N; k++)
			for (int j = k * used_nodes / N;
			     j < (k + 1) * used_nodes / N; j++)
				take(nc, map[j], nc[map[j]].n, &p->inst[k]);
		return 0;
	}
	for (int j = 0, k = 0; j < used_nodes; j++) {
		int here = N / used_nodes + (j < N % used_nodes);
		int per = nc[map[j]].n / here;

		if (per == 0)
			return ds_errf(err, "%d instances: node %d has %d "
				       "physical cores for %d of them", N,
				       nc[map[j]].node, nc[map[j]].n, here);
		for (int q = 0; q < here; q++)
			take(nc, map[j], per, &p->inst[k++]);
	}
	return 0;
}

/* --threads T: each instance on the node with the most free cores when
 * T fit there, otherwise across the fullest nodes. */
static int place_threads(ds_tune_plan *p, node_cores *nc, int nn, int T,
			 int total, ds_err *err)
{
	int N = p->n_inst;

	if ((long)N * T > total)
		return ds_errf(err, "%d instances of %d threads need %ld "
			       "physical cores; there are %d (SMT siblings "
			       "are left out)", N, T, (long)N * T, total);
	for (int k = 0; k < N; k++) {
		int left = T;

		while (left > 0) {
			int best = 0;

			for (int i = 1; i < nn; i++)
				if (nc[i].n - nc[i].used > nc[best].n - nc[best].used)
					best = i;
			int fit = nc[best].n - nc[best].used;
			take(nc, best, fit < left ? fit : left, &p->inst[k]);
			left -= fit < left ? fit : left;
		}
	}
	return 0;
}

static int place(ds_tune_plan *p, const ds_sysinfo *si, int T, ds_err *err)
{
	node_cores *nc = collect_cores(si, err);
	int total = 0, rc;

	if (nc == NULL)
		return -1;
	for (int i = 0; i < si->n_nodes; i++)
		total += nc[i].n;
	/* Without SMT siblings nothing is left for interrupts and the system:
	 * keep the first core for them when there are enough. */
	if (T == 0 && si->threads_per_core == 1 && total >= 4) {
		for (int i = 0; i < si->n_nodes; i++)
			if (nc[i].n > 0) {
				if (note_add(p, err, "CPU %d is left out of the "
					     "instances for interrupts and the "
					     "system (no SMT siblings to take "
					     "them)", nc[i].cpu[0]) != 0) {
					free_cores(nc, si->n_nodes);
					return -1;
				}
				memmove(nc[i].cpu, nc[i].cpu + 1,
					(size_t)--nc[i].n * sizeof(int));
				total--;
				break;
			}
	}
	if (T > 0)
		rc = place_threads(p, nc, si->n_nodes, T, total, err);
	else if (p->n_inst > total)
		rc = ds_errf(err, "%d instances need at least %d physical "
			     "cores; there are %d", p->n_inst, p->n_inst, total);
	else
		rc = place_even(p, nc, si->n_nodes, err);
	free_cores(nc, si->n_nodes);
	return rc;
}

/* ---- memory -------------------------------------------------------------------- */

static int node_index(const ds_sysinfo *si, int id)
{
	for (int i = 0; i < si->n_nodes; i++)
		if (si->nodes[i].id == id)
			return i;
	return -1;
}

static const ds_hugepages *node_hp(const ds_node *nd)
{
	for (int i = 0; i < nd->n_hp; i++)
		if (nd->hp[i].size_kb == HP_KB)
			return &nd->hp[i];
	return NULL;
}

/* Reserve `need` pages at `path` (which has `cur`), never shrinking what
 * is reserved already; warn when the new pages exceed `free_kb`. */
static int hp_write(ds_tune_plan *p, const char *path, int64_t cur,
		    uint64_t need, int64_t free_kb, const char *where,
		    ds_err *err)
{
	uint64_t more = need - (uint64_t)(cur > 0 ? cur : 0);
	char v[32];

	if (cur >= 0 && (uint64_t)cur >= need)
		return 0;
	snprintf(v, sizeof v, "%llu", (unsigned long long)need);
	if (ds_tune_act_add(p, DS_TUNE_WRITE, path, v, WHY_HUGEPAGES, err) != 0)
		return -1;
	if (free_kb >= 0 && more * HP_KB > (uint64_t)free_kb)
		return note_add(p, err, "%s: %llu more huge pages (%llu MiB) "
				"are more than its %lld MiB of free memory: "
				"the kernel will reserve fewer", where,
				(unsigned long long)more,
				(unsigned long long)more * (HP_KB / 1024),
				(long long)free_kb / 1024);
	return 0;
}

/* Each instance's pages on its own nodes (split evenly when it spans
 * several); per node when the kernel has per-node files, else in total. */
static int plan_hugepages(ds_tune_plan *p, const ds_sysinfo *si, ds_err *err)
{
	uint64_t *need, total = 0;
	int per_node = strcmp(si->numa_from, "none") != 0, rc = 0, g = -1;
	char path[160], where[32];

	for (int i = 0; i < si->n_hp; i++)
		if (si->hp[i].size_kb == HP_KB)
			g = i;
	if (g < 0) {
		p->pages = 0;
		return note_add(p, err, "no 2 MiB huge pages on this kernel: "
				"instances run without --hugepages");
	}
	need = ds_calloc((size_t)si->n_nodes, sizeof *need, err);
	if (need == NULL)
		return -1;
	for (int k = 0; k < p->n_inst; k++) {
		ds_tune_instance *in = &p->inst[k];
		int nn = ds_cpuset_count(&in->nodes);

		in->pages = p->pages;
		for (int id = ds_cpuset_next(&in->nodes, -1); id >= 0;
		     id = ds_cpuset_next(&in->nodes, id))
			need[node_index(si, id)] += (p->pages + (uint64_t)nn - 1) /
						    (uint64_t)nn;
	}
	for (int i = 0; i < si->n_nodes; i++) {
		total += need[i];
		if (need[i] > 0 && node_hp(&si->nodes[i]) == NULL)
			per_node = 0;
	}
	for (int i = 0; per_node && rc == 0 && i < si->n_nodes; i++) {
		const ds_node *nd = &si->nodes[i];

		if (need[i] == 0)
			continue;
		snprintf(path, sizeof path, "/sys/devices/system/node/node%d/"
			 "hugepages/hugepages-%ukB/nr_hugepages", nd->id, HP_KB);
		snprintf(where, sizeof where, "node %d", nd->id);
		rc = hp_write(p, path, node_hp(nd)->nr, need[i],
			      nd->mem_free_kb, where, err);
	}
	if (!per_node) {
		snprintf(path, sizeof path, "/sys/kernel/mm/hugepages/"
			 "hugepages-%ukB/nr_hugepages", HP_KB);
		rc = hp_write(p, path, si->hp[g].nr, total, si->mem_avail_kb,
			      "the machine", err);
	}
	free(need);
	return rc;
}

static int plan_memory(ds_tune_plan *p, const ds_sysinfo *si, ds_err *err)
{
	const char *thp = "/sys/kernel/mm/transparent_hugepage/";
	char path[96];

	/* an MPI job's ranks copy their share into transparent hugepages */
	if (p->mpi.ranks == 0 && plan_hugepages(p, si, err) != 0)
		return -1;
	snprintf(path, sizeof path, "%senabled", thp);
	if (si->thp_enabled[0] != '\0' && strcmp(si->thp_enabled, "madvise") &&
	    ds_tune_act_add(p, DS_TUNE_WRITE, path, "madvise",
		    strcmp(si->thp_enabled, "never") == 0 ? WHY_THP_NEVER
		    : WHY_THP_ALWAYS, err) != 0)
		return -1;
	snprintf(path, sizeof path, "%sdefrag", thp);
	if (si->thp_defrag[0] != '\0' && strcmp(si->thp_defrag, "madvise") &&
	    strcmp(si->thp_defrag, "defer+madvise") &&
	    ds_tune_act_add(p, DS_TUNE_WRITE, path, "madvise", WHY_DEFRAG, err) != 0)
		return -1;
	if (si->n_nodes > 1 && si->numa_balancing > 0 &&
	    ds_tune_act_add(p, DS_TUNE_WRITE, "/proc/sys/kernel/numa_balancing", "0",
		    WHY_NUMA_BALANCING, err) != 0)
		return -1;
	return 0;
}

/* ---- clocks ---------------------------------------------------------------------- */

static int plan_cpufreq(ds_tune_plan *p, const ds_sysinfo *si, ds_err *err)
{
	char path[96], list[DS_CPULIST_MAX];

	if (si->n_policies == 0 &&
	    note_add(p, err, "no cpufreq: the clock is not ours to set "
		     "(a virtual machine or a container)") != 0)
		return -1;
	for (int i = 0; i < si->n_policies; i++) {
		const ds_cpufreq *pol = &si->policies[i];

		if (pol->governor[0] == '\0' ||
		    strcmp(pol->governor, "performance") == 0)
			continue;
		if (!ds_word_in(pol->available, "performance")) {
			if (note_add(p, err, "CPUs %s: no performance governor "
				     "(available: %s)",
				     ds_cpuset_format(&pol->cpus, list),
				     pol->available) != 0)
				return -1;
			continue;
		}
		snprintf(path, sizeof path, "%s/scaling_governor", pol->dir);
		if (ds_tune_act_add(p, DS_TUNE_WRITE, path, "performance", WHY_GOVERNOR,
			    err) != 0)
			return -1;
	}
	if (si->boost == 0)
		return ds_tune_act_add(p, DS_TUNE_WRITE, si->boost_path,
			       si->boost_inverted ? "0" : "1", WHY_BOOST, err);
	return 0;
}

/* ---- cgroups ----------------------------------------------------------------------- */

/* "+cpu +cpuset", those of the two `have` lacks; "" when none. */
static void missing_ctrl(const char *have, char *buf, size_t n)
{
	snprintf(buf, n, "%s%s%s", ds_word_in(have, "cpu") ? "" : "+cpu",
		 !ds_word_in(have, "cpu") && !ds_word_in(have, "cpuset") ? " " : "",
		 ds_word_in(have, "cpuset") ? "" : "+cpuset");
}

static int cg_dir(ds_tune_plan *p, const ds_sysinfo *si, const char *dir,
		  ds_err *err)
{
	char full[512];

	if (ds_sys_path(si->root, dir, full, sizeof full) != 0)
		return ds_errf(err, "%s%s: path too long", si->root, dir);
	if (ds_is_dir(full))
		return 0;
	return ds_tune_act_add(p, DS_TUNE_MKDIR, dir, NULL, WHY_CG_GROUP, err);
}

static int plan_cg_instance(ds_tune_plan *p, const ds_sysinfo *si,
			    const char *top, int k, ds_err *err)
{
	ds_tune_instance *in = &p->inst[k];
	char path[256], list[DS_CPULIST_MAX];

	snprintf(in->cgroup, sizeof in->cgroup, "%s/inst%d", top, k);
	if (cg_dir(p, si, in->cgroup, err) != 0)
		return -1;
	snprintf(path, sizeof path, "%s/cpuset.cpus", in->cgroup);
	if (set_if(p, si, path, ds_cpuset_format(&in->cpus, list),
		   WHY_CG_GROUP, err) != 0)
		return -1;
	snprintf(path, sizeof path, "%s/cpuset.mems", in->cgroup);
	if (set_if(p, si, path, ds_cpuset_format(&in->nodes, list),
		   WHY_CG_GROUP, err) != 0)
		return -1;
	snprintf(path, sizeof path, "%s/cpu.weight", in->cgroup);
	if (set_if(p, si, path, CG_INST_WEIGHT, WHY_CG_GROUP, err) != 0)
		return -1;
	snprintf(path, sizeof path, "%s/cpu.max", in->cgroup);
	return set_if(p, si, path, CG_NO_QUOTA, WHY_CG_GROUP, err);
}

static int plan_cgroups(ds_tune_plan *p, const ds_sysinfo *si, ds_err *err)
{
	char top[160], path[256], cur[128] = "", miss[32];

	if (si->cg_mount[0] == '\0')
		return note_add(p, err, "no cgroup v2: instances run without "
				"a cgroup (--cpus still pins them)");
	if (!ds_word_in(si->cg_controllers, "cpu") ||
	    !ds_word_in(si->cg_controllers, "cpuset"))
		return note_add(p, err, "cgroup v2 at %s has no %s controller: "
				"instances run without a cgroup (--cpus still "
				"pins them)", si->cg_mount,
				ds_word_in(si->cg_controllers, "cpuset")
				? "cpu" : "cpuset");
	missing_ctrl(si->cg_subtree, miss, sizeof miss);
	snprintf(path, sizeof path, "%s/cgroup.subtree_control", si->cg_mount);
	if (miss[0] != '\0' &&
	    ds_tune_act_add(p, DS_TUNE_WRITE, path, miss, WHY_CG_SUBTREE, err) != 0)
		return -1;
	snprintf(top, sizeof top, "%s/" CG_GROUP, si->cg_mount);
	if (cg_dir(p, si, top, err) != 0)
		return -1;
	snprintf(path, sizeof path, "%s/cgroup.subtree_control", top);
	ds_sys_line(si->root, path, cur, sizeof cur);
	missing_ctrl(cur, miss, sizeof miss);
	if (miss[0] != '\0' &&
	    ds_tune_act_add(p, DS_TUNE_WRITE, path, miss, WHY_CG_SUBTREE, err) != 0)
		return -1;
	snprintf(path, sizeof path, "%s/cpu.weight", top);
	if (set_if(p, si, path, CG_TOP_WEIGHT, WHY_CG_WEIGHT, err) != 0)
		return -1;
	for (int k = 0; k < p->n_inst; k++)
		if (plan_cg_instance(p, si, top, k, err) != 0)
			return -1;
	return 0;
}

/* ---- interrupts --------------------------------------------------------------------- */

static int cmp_irq_num(const void *a, const void *b)
{
	return ((const ds_irq *)a)->irq - ((const ds_irq *)b)->irq;
}

/* cur minus the inference CPUs, or the housekeeping CPUs if that leaves
 * nothing. */
static ds_cpuset moved(const ds_cpuset *cur, const ds_cpuset *inst,
		       const ds_cpuset *house)
{
	ds_cpuset s = *cur;

	ds_cpuset_andnot(&s, inst);
	return ds_cpuset_empty(&s) ? *house : s;
}

static int plan_irq_default(ds_tune_plan *p, const ds_sysinfo *si,
			    const ds_cpuset *inst, const ds_cpuset *house,
			    ds_err *err)
{
	char buf[DS_CPULIST_MAX];
	ds_cpuset cur, to;
	int words = 1;

	if (si->irq_default[0] == '\0' ||
	    ds_cpumask_parse(si->irq_default, &cur, NULL) != 0)
		return 0;
	for (const char *q = si->irq_default; *q; q++)
		words += *q == ',';
	to = moved(&cur, inst, house);
	if (ds_cpuset_equal(&to, &cur))
		return 0;
	return ds_tune_act_add(p, DS_TUNE_WRITE, "/proc/irq/default_smp_affinity",
		       ds_cpumask_format(&to, words, buf), WHY_IRQ, err);
}

static int plan_irqs(ds_tune_plan *p, const ds_sysinfo *si, ds_err *err)
{
	ds_cpuset inst, house = si->online, cur, to;
	char path[64], buf[DS_CPULIST_MAX];
	ds_irq *irqs;
	int rc = 0;

	ds_cpuset_zero(&inst);
	for (int k = 0; k < p->n_inst; k++)
		ds_cpuset_or(&inst, &p->inst[k].cpus);
	ds_cpuset_andnot(&house, &inst);
	if (ds_cpuset_empty(&house))
		return note_add(p, err, "every CPU runs an instance: interrupts "
				"stay where they are");
	if (si->n_irq == 0)
		return plan_irq_default(p, si, &inst, &house, err);
	irqs = ds_calloc((size_t)si->n_irq, sizeof *irqs, err);
	if (irqs == NULL)
		return -1;
	memcpy(irqs, si->irqs, (size_t)si->n_irq * sizeof *irqs);
	qsort(irqs, (size_t)si->n_irq, sizeof *irqs, cmp_irq_num);
	for (int i = 0; rc == 0 && i < si->n_irq; i++) {
		ds_cpuset hit;

		if (irqs[i].affinity[0] == '\0' ||
		    ds_cpuset_parse(irqs[i].affinity, &cur, NULL) != 0)
			continue;
		hit = cur;
		ds_cpuset_and(&hit, &inst);
		if (ds_cpuset_empty(&hit))
			continue;
		to = moved(&cur, &inst, &house);
		snprintf(path, sizeof path, "/proc/irq/%d/smp_affinity_list",
			 irqs[i].irq);
		rc = ds_tune_act_add(p, DS_TUNE_WRITE, path,
			     ds_cpuset_format(&to, buf), WHY_IRQ, err);
	}
	free(irqs);
	if (rc == 0)
		rc = plan_irq_default(p, si, &inst, &house, err);
	if (rc == 0 && si->irqbalance)
		rc = note_add(p, err, "irqbalance is running: it will move the "
			      "interrupts back; stop it, or start it with "
			      "IRQBALANCE_BANNED_CPULIST=%s",
			      ds_cpuset_format(&inst, buf));
	return rc;
}

/* ---- command lines -------------------------------------------------------------------- */

/* `s` as one shell word. */
static char *shell_word(const char *s)
{
	size_t n = strlen(s), k = 0;
	int plain = n > 0;
	char *q;

	for (const char *c = s; *c; c++)
		plain &= strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
				"0123456789_./-+:@%=,", *c) != NULL;
	if (plain)
		return strdup(s);
	q = malloc(4 * n + 3);
	if (q == NULL)
		return NULL;
	q[k++] = '\'';
	for (const char *c = s; *c; c++) {
		if (*c == '\'') {
			memcpy(q + k, "'\\''", 4);
			k += 4;
		} else {
			q[k++] = *c;
		}
	}
	q[k++] = '\'';
	q[k] = '\0';
	return q;
}

static int commands(ds_tune_plan *p, const ds_sysinfo *si, ds_err *err)
{
	char *dir = shell_word(p->model_dir);
	char list[DS_CPULIST_MAX], numa[32] = "";

	if (dir == NULL)
		return ds_errf(err, "plan: out of memory");
	for (int k = 0; k < p->n_inst; k++) {
		ds_tune_instance *in = &p->inst[k];
		int r1, r2;

		if (si->n_nodes > 1)
			snprintf(numa, sizeof numa, " --numa %s",
				 ds_cpuset_count(&in->nodes) == 1 ? "node"
				 : "interleave");
		ds_cpuset_format(&in->cpus, list);
		r1 = asprintf(&in->run, "ds-run -m %s --threads %d --cpus %s%s%s "
			      "--ctx-size %d", dir, ds_cpuset_count(&in->cpus),
			      list, numa, p->pages ? " --hugepages" : "",
			      p->ctx_size);
		r2 = asprintf(&in->serve, "ds-serve -m %s --threads %d --cpus %s"
			      "%s%s --ctx-size %d --host 127.0.0.1 --port %d",
			      dir, ds_cpuset_count(&in->cpus), list, numa,
			      p->pages ? " --hugepages" : "", p->ctx_size,
			      8080 + k);
		if (r1 < 0 || r2 < 0) {
			in->run = in->serve = NULL;
			free(dir);
			return ds_errf(err, "plan: out of memory");
		}
	}
	free(dir);
	return 0;
}

/* ---- an MPI job (ds-run --mpi) ------------------------------------------------------- */

static int host_ok(const char *h, size_t n)
{
	if (n == 0 || n > 255)
		return 0;
	for (size_t i = 0; i < n; i++)
		if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
			    "0123456789.-_:", h[i]))
			return 0;
	return 1;
}

/* The hosts of the comma-separated list (NULL: "localhost"). */
static int mpi_hosts(ds_tune_mpi *j, const char *list, ds_err *err)
{
	const char *s = list ? list : "localhost";

	while (*s) {
		size_t n = strcspn(s, ",");
		char **nv;

		if (!host_ok(s, n))
			return ds_errf(err, "--hosts: \"%.*s\" is not a host name",
				       (int)(n < 64 ? n : 64), s);
		if (j->n_hosts == DS_CPU_MAX)
			return ds_errf(err, "--hosts: more than %d hosts", DS_CPU_MAX);
		nv = realloc(j->hosts, (size_t)(j->n_hosts + 1) * sizeof *nv);
		if (nv == NULL || (nv[j->n_hosts] = strndup(s, n)) == NULL) {
			j->hosts = nv ? nv : j->hosts;
			return ds_errf(err, "plan: out of memory");
		}
		j->hosts = nv;
		j->n_hosts++;
		s += n + (s[n] == ',');
	}
	return j->n_hosts ? 0 : ds_errf(err, "--hosts: no host named");
}

/* Ranks per host, and what each holds: the shared weights, and at most
 * ceil(n_expert / ranks) experts (ds_ep_range's split). */
static int mpi_sizes(ds_tune_plan *p, const ds_sysinfo *si,
		     const ds_tune_model *m, const ds_tune_opts *o, ds_err *err)
{
	ds_tune_mpi *j = &p->mpi;
	int nodes = 0;

	for (int i = 0; i < si->n_nodes; i++)
		nodes += !ds_cpuset_empty(&si->nodes[i].cpus);
	j->ranks = o->ranks == DS_TUNE_RANKS_NUMA ? (nodes ? nodes : 1) * j->n_hosts
						  : o->ranks;
	if (j->ranks < 1 || j->ranks % j->n_hosts != 0)
		return ds_errf(err, "--ranks %d over %d hosts: a multiple of the "
			       "hosts", j->ranks, j->n_hosts);
	j->per_host = j->ranks / j->n_hosts;
	if (m->n_expert == 0 || m->exp_bytes == 0)
		return ds_errf(err, "--ranks: the ranks split a MoE model's routed "
			       "experts; %s has none", p->model_dir);
	if ((uint32_t)j->ranks > m->n_expert)
		return ds_errf(err, "--ranks %d: more ranks than the model's %u "
			       "routed experts", j->ranks, m->n_expert);
	j->shared_bytes = m->bytes - m->exp_bytes - m->mtp_bytes;
	j->rank_exp_bytes = m->exp_bytes / m->n_expert *
			    ((m->n_expert + (uint32_t)j->ranks - 1) / (uint32_t)j->ranks);
	p->pages = 0;
	return 0;
}

/* Whether a rank's share and cache fit the memory of the nodes it runs
 * on; a note when they do not. */
static int mpi_fit(ds_tune_plan *p, const ds_sysinfo *si, ds_err *err)
{
	const ds_tune_mpi *j = &p->mpi;
	uint64_t need = j->shared_bytes + j->rank_exp_bytes + p->kv_bytes;

	for (int k = 0; k < p->n_inst; k++) {
		int64_t kb = 0;

		for (int id = ds_cpuset_next(&p->inst[k].nodes, -1); id >= 0;
		     id = ds_cpuset_next(&p->inst[k].nodes, id)) {
			int i = node_index(si, id);

			kb += i >= 0 && si->nodes[i].mem_total_kb > 0 ? si->nodes[i].mem_total_kb : 0;
		}
		if (kb > 0 && need > (uint64_t)kb * 1024 &&
		    note_add(p, err, "rank %d of each host: its %llu MiB of weights "
			     "and cache exceed the %lld MiB of its node%s: more "
			     "ranks, or more hosts", k,
			     (unsigned long long)(need >> 20), (long long)kb / 1024,
			     ds_cpuset_count(&p->inst[k].nodes) == 1 ? "" : "s") != 0)
			return -1;
	}
	return 0;
}

/* The mpirun line: the ranks where the hostfile and the rankfile put
 * them (each bound to its CPUs, its memory on its node), all with the
 * same command (it takes every CPU its rank is bound to). */
static char *mpi_line(const ds_tune_plan *p, const char *prog, const char *dir,
		      const char *extra)
{
	char *s;

	if (asprintf(&s, "mpirun --hostfile ds-hosts --rankfile ds-ranks --mca "
		     "rmaps_rank_file_physical 1 --mca hwloc_base_mem_alloc_policy "
		     "local_only -n %d %s --mpi -m %s --hugepages --ctx-size %d%s",
		     p->mpi.ranks, prog, dir, p->ctx_size, extra) < 0)
		return NULL;
	return s;
}

static int mpi_commands(ds_tune_plan *p, ds_err *err)
{
	char *dir = shell_word(p->model_dir);

	if (dir == NULL)
		return ds_errf(err, "plan: out of memory");
	p->mpi.run = mpi_line(p, "ds-run", dir, "");
	p->mpi.serve = mpi_line(p, "ds-serve", dir, " --host 127.0.0.1 --port 8080");
	free(dir);
	if (p->mpi.run == NULL || p->mpi.serve == NULL)
		return ds_errf(err, "plan: out of memory");
	return 0;
}

/* The job: each host's ranks placed as instances, their settings, the
 * mpirun lines.  No hugetlb pages (the shares go to transparent
 * hugepages) and no cgroups (mpirun starts the ranks). */
static int plan_mpi(ds_tune_plan *p, const ds_sysinfo *si,
		    const ds_tune_model *m, const ds_tune_opts *o, ds_err *err)
{
	if (mpi_hosts(&p->mpi, o->hosts, err) != 0 ||
	    mpi_sizes(p, si, m, o, err) != 0)
		return -1;
	p->inst = ds_calloc((size_t)p->mpi.per_host, sizeof *p->inst, err);
	if (p->inst == NULL)
		return -1;
	p->n_inst = p->mpi.per_host;
	if (place(p, si, o->threads, err) != 0 || plan_memory(p, si, err) != 0 ||
	    plan_cpufreq(p, si, err) != 0 || plan_irqs(p, si, err) != 0 ||
	    mpi_fit(p, si, err) != 0 || mpi_commands(p, err) != 0)
		return -1;
	if (p->mpi.n_hosts > 1)
		return note_add(p, err, "every host is taken to be like this one "
				"(its nodes, cores and memory): run ds-tune plan "
				"on each to check");
	return 0;
}

/* ---- all of it ------------------------------------------------------------------------ */

static int sizes(ds_tune_plan *p, const ds_tune_model *m,
		 const ds_tune_opts *o, ds_err *err)
{
	uint64_t bytes;
	const uint64_t page = (uint64_t)HP_KB * 1024;

	p->model = *m;
	snprintf(p->model_dir, sizeof p->model_dir, "%s", o->model_dir);
	p->ctx_size = o->ctx_size;
	if (p->ctx_size == 0)
		p->ctx_size = m->n_ctx_train > 0 && m->n_ctx_train < 4096
			      ? (int)m->n_ctx_train : 4096;
	if (ds_mul_u64(m->kv_token_bytes, (uint64_t)p->ctx_size,
		       &p->kv_bytes) != 0 ||
	    ds_add_u64(m->bytes, p->kv_bytes, &bytes) != 0 ||
	    bytes > UINT64_MAX - page)
		return ds_errf(err, "plan: model + KV cache size overflows");
	p->pages = (bytes + page - 1) / page;
	return 0;
}

int ds_tune_plan_make(ds_tune_plan *p, const ds_sysinfo *si,
		      const ds_tune_model *m, const ds_tune_opts *o,
		      ds_err *err)
{
	memset(p, 0, sizeof *p);
	if (o->instances < 1 || o->instances > DS_CPU_MAX || o->threads < 0 ||
	    o->ctx_size < 0)
		return ds_errf(err, "plan: bad instances, threads or ctx-size");
	if (sizes(p, m, o, err) != 0)
		return -1;
	if (o->ranks != 0) {
		if (plan_mpi(p, si, m, o, err) != 0) {
			ds_tune_plan_free(p);
			return -1;
		}
		return 0;
	}
	p->inst = ds_calloc((size_t)o->instances, sizeof *p->inst, err);
	if (p->inst == NULL)
		return -1;
	p->n_inst = o->instances;
	if (place(p, si, o->threads, err) != 0 ||
	    plan_memory(p, si, err) != 0 || plan_cpufreq(p, si, err) != 0 ||
	    plan_cgroups(p, si, err) != 0 || plan_irqs(p, si, err) != 0 ||
	    commands(p, si, err) != 0) {
		ds_tune_plan_free(p);
		return -1;
	}
	return 0;
}

void ds_tune_plan_free(ds_tune_plan *p)
{
	for (int i = 0; i < p->n_act; i++) {
		free(p->act[i].path);
		free(p->act[i].value);
	}
	for (int i = 0; i < p->n_inst; i++) {
		free(p->inst[i].run);
		free(p->inst[i].serve);
	}
	for (int i = 0; i < p->n_notes; i++)
		free(p->notes[i]);
	for (int i = 0; i < p->mpi.n_hosts; i++)
		free(p->mpi.hosts[i]);
	free(p->mpi.hosts);
	free(p->mpi.run);
	free(p->mpi.serve);
	free(p->act);
	free(p->inst);
	free(p->notes);
	memset(p, 0, sizeof *p);
}
