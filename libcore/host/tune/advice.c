/* advice.c - the host settings that hurt inference, what they should
 * be and why. */
#include <stdlib.h>
#include <string.h>

#include "tune.h"
#include "internal.h"

typedef struct adv_list {
	ds_tune_advice *v;
	int n, cap;
} adv_list;

static int add(adv_list *l, const char *setting, const char *value,
	       const char *should, const char *why, ds_err *err)
{
	if (l->n == l->cap) {
		int cap = l->cap ? l->cap * 2 : 8;
		ds_tune_advice *nv = realloc(l->v, (size_t)cap * sizeof *nv);

		if (nv == NULL)
			return ds_errf(err, "advice: out of memory");
		l->v = nv;
		l->cap = cap;
	}
	ds_tune_advice *a = &l->v[l->n++];
	snprintf(a->setting, sizeof a->setting, "%s", setting);
	snprintf(a->value, sizeof a->value, "%s", value);
	snprintf(a->should, sizeof a->should, "%s", should);
	a->why = why;
	return 0;
}

/* One line per governor that is not "performance", with its CPUs. */
static int advise_governors(const ds_sysinfo *si, adv_list *l, ds_err *err)
{
	for (int i = 0; i < si->n_policies; i++) {
		const char *g = si->policies[i].governor;
		char list[DS_CPULIST_MAX], value[176];
		ds_cpuset cpus;
		int seen = 0;

		if (g[0] == '\0' || strcmp(g, "performance") == 0)
			continue;
		for (int j = 0; j < i; j++)
			seen |= strcmp(si->policies[j].governor, g) == 0;
		if (seen)
			continue;
		ds_cpuset_zero(&cpus);
		for (int j = i; j < si->n_policies; j++)
			if (strcmp(si->policies[j].governor, g) == 0)
				ds_cpuset_or(&cpus, &si->policies[j].cpus);
		snprintf(value, sizeof value, "%.31s on CPUs %.120s", g,
			 ds_cpuset_format(&cpus, list));
		if (add(l, "governor", value, "performance", WHY_GOVERNOR,
			err) != 0)
			return -1;
	}
	return 0;
}

static int advise_memory(const ds_sysinfo *si, adv_list *l, ds_err *err)
{
	const char *e = si->thp_enabled, *d = si->thp_defrag;

	if (strcmp(e, "always") == 0 &&
	    add(l, "thp.enabled", e, "madvise", WHY_THP_ALWAYS, err) != 0)
		return -1;
	if (strcmp(e, "never") == 0 &&
	    add(l, "thp.enabled", e, "madvise", WHY_THP_NEVER, err) != 0)
		return -1;
	if (strcmp(d, "always") == 0 &&
	    add(l, "thp.defrag", d, "madvise", WHY_DEFRAG, err) != 0)
		return -1;
	for (int i = 0; i < si->n_hp; i++)
		if (si->hp[i].size_kb == 2048 && si->hp[i].nr == 0 &&
		    add(l, "hugepages", "0 of 2 MiB reserved",
			"model + KV cache (ds-tune plan -m DIR)", WHY_HUGEPAGES,
			err) != 0)
			return -1;
	if (si->n_nodes > 1 && si->numa_balancing > 0 &&
	    add(l, "numa_balancing", si->numa_balancing == 1 ? "1" : "2", "0",
		WHY_NUMA_BALANCING, err) != 0)
		return -1;
	return 0;
}

static int advise_placement(const ds_sysinfo *si, adv_list *l, ds_err *err)
{
	if (si->boost == 0 &&
	    add(l, "boost", "off", "on", WHY_BOOST, err) != 0)
		return -1;
	if (si->irqbalance &&
	    add(l, "irqbalance", "running", "stopped", WHY_IRQBALANCE,
		err) != 0)
		return -1;
	if (si->cg_mount[0] == '\0')
		return add(l, "cgroup2", "not mounted", "mounted, with cpu and "
			   "cpuset", WHY_CGROUP, err);
	if (!ds_word_in(si->cg_controllers, "cpu") ||
	    !ds_word_in(si->cg_controllers, "cpuset"))
		return add(l, "cgroup2", si->cg_controllers[0] ? si->cg_controllers
			   : "no controllers", "cpu and cpuset available",
			   WHY_CGROUP, err);
	return 0;
}

int ds_tune_advise(const ds_sysinfo *si, ds_tune_advice **out, int *n,
		   ds_err *err)
{
	adv_list l = { 0 };

	*out = NULL;
	*n = 0;
	if (advise_governors(si, &l, err) != 0 ||
	    advise_placement(si, &l, err) != 0 ||
	    advise_memory(si, &l, err) != 0) {
		free(l.v);
		return -1;
	}
	*out = l.v;
	*n = l.n;
	return 0;
}
