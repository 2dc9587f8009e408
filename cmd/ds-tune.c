/* ds-tune - report, plan, apply and revert the host settings that make
 * CPU inference fast.  See ds-tune(8). */
#define _GNU_SOURCE
#include <err.h>
#include <getopt.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "host/sysinfo/sysinfo.h"
#include "host/tune/tune.h"
#include "base/cli.h"
#include "base/util.h"

#define PROG "ds-tune"
#define SHOW_IRQS 8

static void usage(FILE *f)
{
	fprintf(f,
		"usage: ds-tune show [--json] [--root DIR]\n"
		"       ds-tune plan -m DIR [--ctx-size N] [--instances N] [--json]\n"
		"                    [--root DIR] [--threads N]\n"
		"       ds-tune plan -m DIR --ranks R|numa [--hosts H,...] [--ctx-size N]\n"
		"                    [--json] [--root DIR] [--threads N]\n"
		"       ds-tune apply [--plan FILE | -m DIR [--ctx-size N] [--instances N]\n"
		"                    [--threads N]] [--dry-run] [--root DIR] [--state FILE]\n"
		"       ds-tune revert [--root DIR] [--state FILE]\n"
		"       ds-tune -h | --help | --version\n");
}

typedef struct args {
	const char *cmd;
	const char *model, *plan, *root, *state;
	int json, dry_run;
	long instances, threads, ctx;
	int has_sizing;    /* one of --instances, --threads, --ctx-size */
	long ranks;        /* --ranks (DS_TUNE_RANKS_NUMA: numa), 0: none */
	const char *hosts;
} args;

static int die(const char *msg)
{
	warnx("%s", msg);
	return 1;
}

static int bad_usage(const char *fmt, const char *arg)
{
	ds_warnx(fmt, arg);
	usage(stderr);
	return 2;
}

/* ---- show ------------------------------------------------------------------ */

static void advice_for(const ds_tune_advice *adv, int n, const char *key)
{
	for (int i = 0; i < n; i++)
		if (strcmp(adv[i].setting, key) == 0)
			printf("  ! should be %s: %s\n", adv[i].should, adv[i].why);
}

/* "2 MiB", "1 GiB" */
static const char *page_size(uint32_t kb, char buf[32])
{
	if (kb % (1024 * 1024) == 0)
		snprintf(buf, 32, "%u GiB", kb / (1024 * 1024));
	else if (kb % 1024 == 0)
		snprintf(buf, 32, "%u MiB", kb / 1024);
	else
		snprintf(buf, 32, "%u KiB", kb);
	return buf;
}

static void show_nodes(const ds_sysinfo *si)
{
	char list[DS_CPULIST_MAX], sz[32];

	printf("%-16s %d node%s (%s)\n", "numa", si->n_nodes,
	       si->n_nodes == 1 ? "" : "s", si->numa_from);
	for (int i = 0; i < si->n_nodes; i++) {
		const ds_node *nd = &si->nodes[i];

		printf("  node%-10d CPUs %s", nd->id,
		       ds_cpuset_format(&nd->cpus, list));
		if (nd->mem_total_kb >= 0)
			printf("; memory %lld MiB, %lld MiB free",
			       (long long)nd->mem_total_kb / 1024,
			       (long long)nd->mem_free_kb / 1024);
		for (int h = 0; h < nd->n_hp; h++)
			printf("; %s pages %lld (%lld free)",
			       page_size(nd->hp[h].size_kb, sz),
			       (long long)nd->hp[h].nr, (long long)nd->hp[h].free);
		printf("\n");
	}
}

static void show_cpufreq(const ds_sysinfo *si, const ds_tune_advice *adv,
			 int nadv)
{
	char list[DS_CPULIST_MAX];

	if (si->n_policies == 0) {
		printf("%-16s none (no cpufreq: a virtual machine or a "
		       "container)\n", "cpufreq");
		return;
	}
	printf("%-16s %s, %d polic%s\n", "cpufreq", si->policies[0].driver,
	       si->n_policies, si->n_policies == 1 ? "y" : "ies");
	/* one line per distinct governor (and energy preference) */
	for (int i = 0; i < si->n_policies; i++) {
		const ds_cpufreq *p = &si->policies[i];
		ds_cpuset cpus;
		int seen = 0;

		for (int j = 0; j < i; j++)
			seen |= strcmp(si->policies[j].governor, p->governor) == 0 &&
				strcmp(si->policies[j].epp, p->epp) == 0;
		if (seen)
			continue;
		ds_cpuset_zero(&cpus);
		for (int j = i; j < si->n_policies; j++)
			if (strcmp(si->policies[j].governor, p->governor) == 0 &&
			    strcmp(si->policies[j].epp, p->epp) == 0)
				ds_cpuset_or(&cpus, &si->policies[j].cpus);
		printf("%-16s %s on CPUs %s (available: %s)%s%s\n", "governor",
		       p->governor[0] ? p->governor : "unknown",
		       ds_cpuset_format(&cpus, list),
		       p->available[0] ? p->available : "unknown",
		       p->epp[0] ? "; energy preference " : "", p->epp);
	}
	advice_for(adv, nadv, "governor");
}

static void show_memory(const ds_sysinfo *si, const ds_tune_advice *adv,
			int nadv)
{
	char sz[32];

	printf("%-16s %lld MiB, %lld MiB available\n", "memory",
	       (long long)si->mem_total_kb / 1024,
	       (long long)si->mem_avail_kb / 1024);
	printf("%-16s %s\n", "thp.enabled",
	       si->thp_enabled[0] ? si->thp_enabled : "unavailable");
	advice_for(adv, nadv, "thp.enabled");
	printf("%-16s %s\n", "thp.defrag",
	       si->thp_defrag[0] ? si->thp_defrag : "unavailable");
	advice_for(adv, nadv, "thp.defrag");
	if (si->n_hp == 0)
		printf("%-16s unsupported (no /sys/kernel/mm/hugepages)\n",
		       "hugepages");
	for (int i = 0; i < si->n_hp; i++)
		printf("%-16s %s: %lld total, %lld free, %lld reserved, "
		       "%lld surplus\n", i == 0 ? "hugepages" : "",
		       page_size(si->hp[i].size_kb, sz), (long long)si->hp[i].nr,
		       (long long)si->hp[i].free, (long long)si->hp[i].resv,
		       (long long)si->hp[i].surplus);
	advice_for(adv, nadv, "hugepages");
}

static void show_irqs(const ds_sysinfo *si, const ds_tune_advice *adv,
		      int nadv)
{
	if (si->n_irq == 0)
		printf("%-16s unknown (no /proc/interrupts)\n", "interrupts");
	else
		printf("%-16s %d IRQs; default affinity %s; busiest:\n",
		       "interrupts", si->n_irq,
		       si->irq_default[0] ? si->irq_default : "unknown");
	for (int i = 0; i < si->n_irq && i < SHOW_IRQS; i++)
		printf("  irq %-10d %llu on CPUs %s: %s\n", si->irqs[i].irq,
		       (unsigned long long)si->irqs[i].count,
		       si->irqs[i].affinity[0] ? si->irqs[i].affinity : "?",
		       si->irqs[i].name);
	printf("%-16s %s\n", "irqbalance", si->irqbalance ? "running"
	       : "not running");
	advice_for(adv, nadv, "irqbalance");
}

static void show_text(const ds_sysinfo *si, const ds_tune_advice *adv,
		      int nadv)
{
	char list[DS_CPULIST_MAX];

	printf("%-16s %s (%s)\n", "cpu", si->cpu_model[0] ? si->cpu_model
	       : "unknown", si->cpu_vendor[0] ? si->cpu_vendor : "unknown");
	printf("%-16s %d socket%s, %d cores, %d CPUs online (%s), %d "
	       "thread%s per core%s\n", "topology", si->n_packages,
	       si->n_packages == 1 ? "" : "s", si->n_cores,
	       ds_cpuset_count(&si->online), ds_cpuset_format(&si->online, list),
	       si->threads_per_core, si->threads_per_core == 1 ? "" : "s",
	       si->topo_known ? "" : " (no topology files: one core per CPU)");
	printf("%-16s %s\n", "smt", si->smt_control[0] ? si->smt_control
	       : "unknown");
	if (si->isa_err[0] != '\0')
		printf("%-16s %s (ds-run will refuse to start)\n", "isa",
		       si->isa_err);
	else
		printf("%-16s %s (from %s)\n", "isa", si->isa, si->isa_from);
	show_nodes(si);
	if (si->numa_balancing >= 0)
		printf("%-16s %d\n", "numa_balancing", si->numa_balancing);
	advice_for(adv, nadv, "numa_balancing");
	show_cpufreq(si, adv, nadv);
	if (si->boost >= 0)
		printf("%-16s %s (%s = %d)\n", "boost", si->boost ? "on" : "off",
		       si->boost_path, si->boost_inverted ? !si->boost
		       : si->boost);
	else
		printf("%-16s unknown\n", "boost");
	advice_for(adv, nadv, "boost");
	show_memory(si, adv, nadv);
	show_irqs(si, adv, nadv);
	if (si->cg_mount[0] == '\0')
		printf("%-16s not mounted\n", "cgroup2");
	else
		printf("%-16s %s: controllers %s; enabled below: %s\n", "cgroup2",
		       si->cg_mount, si->cg_controllers[0] ? si->cg_controllers
		       : "none", si->cg_subtree[0] ? si->cg_subtree : "none");
	advice_for(adv, nadv, "cgroup2");
	if (nadv == 0)
		printf("nothing here hurts inference\n");
	else
		printf("%d setting%s hurt%s inference; ds-tune plan -m DIR "
		       "lists the changes\n", nadv, nadv == 1 ? "" : "s",
		       nadv == 1 ? "s" : "");
}

/* -1 (unknown) becomes null. */
static json_t *jint(int64_t v)
{
	return v < 0 ? json_null() : json_integer((json_int_t)v);
}

static json_t *jstr(const char *s)
{
	return s[0] ? json_string(s) : json_null();
}

static json_t *json_hp(const ds_hugepages *hp, int n)
{
	json_t *a = json_array();

	for (int i = 0; i < n; i++)
		json_array_append_new(a, json_pack("{s:i, s:o, s:o, s:o, s:o}",
			"size_kb", (int)hp[i].size_kb, "total", jint(hp[i].nr),
			"free", jint(hp[i].free), "reserved", jint(hp[i].resv),
			"surplus", jint(hp[i].surplus)));
	return a;
}

static json_t *json_numa(const ds_sysinfo *si)
{
	char list[DS_CPULIST_MAX];
	json_t *nodes = json_array();

	for (int i = 0; i < si->n_nodes; i++) {
		const ds_node *nd = &si->nodes[i];

		json_array_append_new(nodes, json_pack("{s:i, s:s, s:o, s:o, s:o}",
			"node", nd->id, "cpus", ds_cpuset_format(&nd->cpus, list),
			"mem_total_kb", jint(nd->mem_total_kb),
			"mem_free_kb", jint(nd->mem_free_kb),
			"hugepages", json_hp(nd->hp, nd->n_hp)));
	}
	return json_pack("{s:s, s:o, s:o}", "from", si->numa_from, "balancing",
			 jint(si->numa_balancing), "nodes", nodes);
}

static json_t *json_cpufreq(const ds_sysinfo *si)
{
	char list[DS_CPULIST_MAX];
	json_t *pols = json_array();

	for (int i = 0; i < si->n_policies; i++) {
		const ds_cpufreq *p = &si->policies[i];

		json_array_append_new(pols, json_pack("{s:s, s:s, s:o, s:o, s:o, s:o}",
			"dir", p->dir, "cpus", ds_cpuset_format(&p->cpus, list),
			"driver", jstr(p->driver), "governor", jstr(p->governor),
			"available", jstr(p->available), "epp", jstr(p->epp)));
	}
	return json_pack("{s:o, s:o, s:o, s:o}", "driver", si->n_policies
			 ? jstr(si->policies[0].driver) : json_null(),
			 "policies", pols, "boost", si->boost < 0 ? json_null()
			 : json_boolean(si->boost), "boost_path",
			 jstr(si->boost_path));
}

static json_t *json_irqs(const ds_sysinfo *si)
{
	json_t *a = json_array();

	for (int i = 0; i < si->n_irq && i < 2 * SHOW_IRQS; i++)
		json_array_append_new(a, json_pack("{s:i, s:I, s:s, s:o}",
			"irq", si->irqs[i].irq, "count",
			(json_int_t)si->irqs[i].count, "name", si->irqs[i].name,
			"affinity", jstr(si->irqs[i].affinity)));
	return json_pack("{s:i, s:o, s:b, s:o}", "count", si->n_irq,
			 "default_affinity", jstr(si->irq_default),
			 "irqbalance", si->irqbalance, "busiest", a);
}

static json_t *json_advice(const ds_tune_advice *adv, int n)
{
	json_t *a = json_array();

	for (int i = 0; i < n; i++)
		json_array_append_new(a, json_pack("{s:s, s:s, s:s, s:s}",
			"setting", adv[i].setting, "value", adv[i].value,
			"should", adv[i].should, "why", adv[i].why));
	return a;
}

static int show_json(const ds_sysinfo *si, const ds_tune_advice *adv,
		     int nadv)
{
	char list[DS_CPULIST_MAX];
	json_t *o = json_pack(
		"{s:{s:o, s:o, s:i, s:i, s:i, s:i, s:s, s:o, s:b},"
		" s:{s:o, s:s, s:o}, s:o, s:o, s:{s:o, s:o}, s:o, s:{s:o, s:o},"
		" s:o, s:{s:o, s:o, s:o}, s:o}",
		"cpu", "model", jstr(si->cpu_model), "vendor", jstr(si->cpu_vendor),
		"sockets", si->n_packages, "cores", si->n_cores,
		"cpus", ds_cpuset_count(&si->online),
		"threads_per_core", si->threads_per_core,
		"online", ds_cpuset_format(&si->online, list),
		"smt", jstr(si->smt_control), "topology_known", si->topo_known,
		"isa", "name", jstr(si->isa), "from", si->isa_from,
		"error", jstr(si->isa_err),
		"numa", json_numa(si), "cpufreq", json_cpufreq(si),
		"thp", "enabled", jstr(si->thp_enabled),
		"defrag", jstr(si->thp_defrag),
		"hugepages", json_hp(si->hp, si->n_hp),
		"memory", "total_kb", jint(si->mem_total_kb),
		"available_kb", jint(si->mem_avail_kb),
		"interrupts", json_irqs(si),
		"cgroup2", "mount", jstr(si->cg_mount),
		"controllers", si->cg_mount[0] ? json_string(si->cg_controllers)
		: json_null(), "subtree_control", si->cg_mount[0]
		? json_string(si->cg_subtree) : json_null(),
		"advice", json_advice(adv, nadv));
	char *s = o != NULL ? json_dumps(o, JSON_INDENT(2)) : NULL;

	json_decref(o);
	if (s == NULL)
		return die("show: cannot make JSON (a value that is not UTF-8?)");
	printf("%s\n", s);
	free(s);
	return 0;
}

static int cmd_show(const args *a)
{
	ds_tune_advice *adv;
	ds_sysinfo si;
	ds_err err;
	int nadv, rc;

	if (ds_sysinfo_read(&si, a->root, &err) != 0)
		return die(err.msg);
	if (ds_tune_advise(&si, &adv, &nadv, &err) != 0) {
		ds_sysinfo_free(&si);
		return die(err.msg);
	}
	rc = 0;
	if (a->json)
		rc = show_json(&si, adv, nadv);
	else
		show_text(&si, adv, nadv);
	free(adv);
	ds_sysinfo_free(&si);
	return rc;
}

/* ---- plan, apply, revert ----------------------------------------------------- */

static int make_plan(const args *a, ds_tune_plan *p)
{
	ds_tune_opts o = { .model_dir = a->model, .instances = (int)a->instances,
			   .threads = (int)a->threads, .ctx_size = (int)a->ctx,
			   .ranks = (int)a->ranks, .hosts = a->hosts };
	ds_tune_model m;
	ds_sysinfo si;
	ds_err err;
	int rc;

	if (ds_tune_model_read(a->model, &m, &err) != 0)
		return die(err.msg);
	if (ds_sysinfo_read(&si, a->root, &err) != 0)
		return die(err.msg);
	rc = ds_tune_plan_make(p, &si, &m, &o, &err);
	ds_sysinfo_free(&si);
	return rc != 0 ? die(err.msg) : 0;
}

static int read_plan(const char *file, ds_tune_plan *p)
{
	char *text;
	ds_err err;
	int rc;

	if (ds_read_file(file, 64u << 20, &text, NULL, &err) != 0)
		return die(err.msg);
	rc = ds_tune_plan_parse(p, text, file, &err);
	free(text);
	return rc != 0 ? die(err.msg) : 0;
}

static int cmd_plan(const args *a)
{
	ds_tune_plan p;
	ds_err err;
	char *s;

	if (make_plan(a, &p) != 0)
		return 1;
	s = ds_tune_plan_format(&p, a->json, &err);
	ds_tune_plan_free(&p);
	if (s == NULL)
		return die(err.msg);
	fputs(s, stdout);
	if (a->json)
		putchar('\n');
	free(s);
	return 0;
}

static int dry_run(const args *a, const ds_tune_plan *p)
{
	ds_tune_change *c;
	ds_err err;
	int n = 0;

	if (ds_tune_preview(p, a->root, &c, &err) != 0)
		return die(err.msg);
	for (int i = 0; i < p->n_act; i++) {
		const ds_tune_action *x = c[i].act;

		if (x->op == DS_TUNE_MKDIR)
			printf(c[i].same ? "%s: exists\n" : "mkdir %s\n", x->path);
		else if (c[i].same)
			printf("%s: already %s\n", x->path, x->value);
		else
			printf("%s: %s -> %s\n", x->path, c[i].before, x->value);
		n += !c[i].same;
	}
	printf("dry run: %d change%s, nothing written\n", n, n == 1 ? "" : "s");
	free(c);
	return 0;
}

static char *state_file(const args *a)
{
	return a->state != NULL ? strdup(a->state)
				: ds_tune_state_default(a->root);
}

/* The caller has checked ds_tune_may_write. */
static int do_apply(const args *a, const ds_tune_plan *p)
{
	ds_tune_report r;
	char *state;
	ds_err err;
	int rc;

	state = state_file(a);
	if (state == NULL)
		return die("out of memory");
	rc = ds_tune_apply(p, a->root, state, &r, &err);
	for (int i = 0; i < r.n_warn; i++)
		warnx("warning: %s (left as it is)", r.warn[i]);
	if (rc != 0)
		die(err.msg);
	else if (r.changed == 0)
		printf("nothing to change: the %d planned setting%s already in "
		       "effect\n", r.same, r.same == 1 ? " is" : "s are");
	else
		printf("applied %d change%s (%d already in effect); ds-tune "
		       "revert restores them from %s\n", r.changed,
		       r.changed == 1 ? "" : "s", r.same, state);
	ds_tune_report_free(&r);
	free(state);
	return rc != 0;
}

static int cmd_apply(const args *a)
{
	ds_tune_plan p;
	ds_err err;
	int rc;

	if ((a->plan != NULL) == (a->model != NULL))
		return bad_usage("apply needs --plan FILE or -m DIR%s", "");
	if (a->plan != NULL && a->has_sizing)
		return bad_usage("--instances, --threads and --ctx-size go with "
				 "-m, not --plan%s", "");
	if (!a->dry_run && ds_tune_may_write(a->root, &err) != 0)
		return die(err.msg);
	if ((a->plan != NULL ? read_plan(a->plan, &p) : make_plan(a, &p)) != 0)
		return 1;
	rc = a->dry_run ? dry_run(a, &p) : do_apply(a, &p);
	ds_tune_plan_free(&p);
	return rc;
}

static int cmd_revert(const args *a)
{
	ds_tune_report r;
	char *state;
	ds_err err;
	int rc;

	if (ds_tune_may_write(a->root, &err) != 0)
		return die(err.msg);
	state = state_file(a);
	if (state == NULL)
		return die("out of memory");
	rc = ds_tune_revert(a->root, state, &r, &err);
	if (rc != 0)
		die(err.msg);
	else
		printf("restored %d setting%s recorded in %s\n", r.changed,
		       r.changed == 1 ? "" : "s", state);
	ds_tune_report_free(&r);
	free(state);
	return rc != 0;
}

/* ---- arguments ------------------------------------------------------------------ */

enum { O_CTX = 256, O_DRY, O_INST, O_JSON, O_PLAN, O_ROOT, O_STATE, O_THREADS,
       O_VERSION, O_RANKS, O_HOSTS };

static const struct option longopts[] = {
	{ "ctx-size", required_argument, NULL, O_CTX },
	{ "dry-run", no_argument, NULL, O_DRY },
	{ "help", no_argument, NULL, 'h' },
	{ "hosts", required_argument, NULL, O_HOSTS },
	{ "instances", required_argument, NULL, O_INST },
	{ "json", no_argument, NULL, O_JSON },
	{ "model", required_argument, NULL, 'm' },
	{ "plan", required_argument, NULL, O_PLAN },
	{ "ranks", required_argument, NULL, O_RANKS },
	{ "root", required_argument, NULL, O_ROOT },
	{ "state", required_argument, NULL, O_STATE },
	{ "threads", required_argument, NULL, O_THREADS },
	{ "version", no_argument, NULL, O_VERSION },
	{ NULL, 0, NULL, 0 },
};

/* 0: go on; 1: done, exit 0; -1: usage error. */
static int parse_opt(int c, args *a)
{
	switch (c) {
	case O_CTX:
		a->has_sizing = 1;
		return ds_opt_long("--ctx-size", optarg, 1, 1 << 24, &a->ctx) ? -1 : 0;
	case O_DRY:
		a->dry_run = 1;
		return 0;
	case 'h':
		usage(stdout);
		return 1;
	case O_INST:
		a->has_sizing = 1;
		return ds_opt_long("--instances", optarg, 1, DS_CPU_MAX, &a->instances) ? -1 : 0;
	case O_JSON:
		a->json = 1;
		return 0;
	case 'm':
		a->model = optarg;
		return 0;
	case O_PLAN:
		a->plan = optarg;
		return 0;
	case O_RANKS:
		if (strcmp(optarg, "numa") == 0) {
			a->ranks = DS_TUNE_RANKS_NUMA;
			return 0;
		}
		return ds_opt_long("--ranks", optarg, 1, 65536, &a->ranks) ? -1 : 0;
	case O_HOSTS:
		a->hosts = optarg;
		return 0;
	case O_ROOT:
		a->root = optarg;
		return 0;
	case O_STATE:
		a->state = optarg;
		return 0;
	case O_THREADS:
		a->has_sizing = 1;
		return ds_opt_long("--threads", optarg, 1, DS_CPU_MAX, &a->threads) ? -1 : 0;
	case O_VERSION:
		printf(PROG " %s\n", DS_VERSION);
		return 1;
	default:
		return -1;
	}
}

/* Which options each command takes. */
static int check_args(const args *a)
{
	int show = !strcmp(a->cmd, "show"), plan = !strcmp(a->cmd, "plan");
	int apply = !strcmp(a->cmd, "apply"), revert = !strcmp(a->cmd, "revert");

	if (!show && !plan && !apply && !revert)
		return bad_usage("unknown command \"%s\"", a->cmd);
	if (a->json && !show && !plan)
		return bad_usage("--json goes with show and plan%s", "");
	if ((a->model != NULL || a->has_sizing) && !plan && !apply)
		return bad_usage("-m, --instances, --threads and --ctx-size go "
				 "with plan and apply%s", "");
	if (plan && a->model == NULL)
		return bad_usage("plan needs -m DIR%s", "");
	if ((a->ranks != 0 || a->hosts != NULL) && !plan)
		return bad_usage("--ranks and --hosts go with plan (apply a "
				 "saved plan with --plan)%s", "");
	if (a->hosts != NULL && a->ranks == 0)
		return bad_usage("--hosts needs --ranks%s", "");
	if (a->ranks != 0 && a->instances != 1)
		return bad_usage("--ranks and --instances exclude each other%s", "");
	if ((a->plan != NULL || a->dry_run) && !apply)
		return bad_usage("--plan and --dry-run go with apply%s", "");
	if (a->state != NULL && !apply && !revert)
		return bad_usage("--state goes with apply and revert%s", "");
	return 0;
}

/* --root as an absolute path without links, so that apply and revert
 * agree on it however it is spelt; "--root /" is the running system. */
static int check_root(args *a, char buf[PATH_MAX])
{
	if (a->root == NULL)
		return 0;
	if (!ds_is_dir(a->root) || realpath(a->root, buf) == NULL) {
		warnx("--root %s: not a directory", a->root);
		return 1;
	}
	a->root = strcmp(buf, "/") != 0 ? buf : NULL;
	return 0;
}

int main(int argc, char **argv)
{
	args a = { .instances = 1 };
	char root[PATH_MAX];
	int c, r;

	if (argc > 1 && argv[1][0] != '-') {
		a.cmd = argv[1];
		argv++;
		argc--;
	}
	while ((c = getopt_long(argc, argv, "hm:", longopts, NULL)) != -1) {
		r = parse_opt(c, &a);
		if (r != 0) {
			if (r < 0)
				usage(stderr);
			return r > 0 ? 0 : 2;
		}
	}
	if (optind < argc)
		return bad_usage("unexpected argument \"%s\"", argv[optind]);
	if (a.cmd == NULL)
		return bad_usage("a command is needed: show, plan, apply or "
				 "revert%s", "");
	if ((r = check_args(&a)) != 0)
		return r;
	if (check_root(&a, root) != 0)
		return 1;
	if (!strcmp(a.cmd, "show"))
		return cmd_show(&a);
	if (!strcmp(a.cmd, "plan"))
		return cmd_plan(&a);
	if (!strcmp(a.cmd, "apply"))
		return cmd_apply(&a);
	return cmd_revert(&a);
}
