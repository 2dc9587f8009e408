/* planio.c - a plan as text or JSON, and back. */
#define _GNU_SOURCE
#include <ctype.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define PLAN_VALUE_MAX 4096

static double mib(uint64_t b)
{
	return (double)b / (1024.0 * 1024.0);
}

/* ---- text ------------------------------------------------------------------ */

static void text_header(FILE *f, const ds_tune_plan *p)
{
	if (p->mpi.ranks > 0)
		fprintf(f, "# ds-tune plan for %s (%s): model %.1f MiB, KV cache %.1f "
			"MiB at --ctx-size %d, an MPI job of %d ranks\n",
			p->model_dir, p->model.arch, mib(p->model.bytes),
			mib(p->kv_bytes), p->ctx_size, p->mpi.ranks);
	else
		fprintf(f, "# ds-tune plan for %s (%s): model %.1f MiB, KV cache %.1f "
			"MiB at --ctx-size %d, %d instance%s\n", p->model_dir,
			p->model.arch, mib(p->model.bytes), mib(p->kv_bytes),
			p->ctx_size, p->n_inst, p->n_inst == 1 ? "" : "s");
	if (p->pages > 0)
		fprintf(f, "# huge pages: %llu of 2 MiB per instance (model + "
			"KV cache)\n", (unsigned long long)p->pages);
	for (int i = 0; i < p->n_notes; i++)
		fprintf(f, "# note: %s\n", p->notes[i]);
}

static void text_actions(FILE *f, const ds_tune_plan *p)
{
	const char *last = NULL;

	for (int i = 0; i < p->n_act; i++) {
		const ds_tune_action *a = &p->act[i];

		if (a->why != NULL && a->why != last)
			fprintf(f, "# %s\n", a->why);
		last = a->why;
		if (a->op == DS_TUNE_MKDIR)
			fprintf(f, "mkdir %s\n", a->path);
		else
			fprintf(f, "%s = %s\n", a->path, a->value);
	}
}

/* The MPI job: its hostfile, each rank's CPUs and node, the lines. */
static void text_mpi(FILE *f, const ds_tune_plan *p)
{
	const ds_tune_mpi *j = &p->mpi;
	char cpus[DS_CPULIST_MAX], nodes[DS_CPULIST_MAX];

	fprintf(f, "# MPI job (ds-run(1) --mpi): %d ranks, %d on each of %d "
		"host%s; each rank holds %.1f MiB of shared weights and at most "
		"%.1f MiB of the routed experts (rank 0 also the output, %.1f "
		"MiB), copied into transparent hugepages of its node, and a KV "
		"cache of %.1f MiB\n", j->ranks, j->per_host, j->n_hosts,
		j->n_hosts == 1 ? "" : "s", mib(j->shared_bytes),
		mib(j->rank_exp_bytes), mib(p->model.out_bytes), mib(p->kv_bytes));
	fprintf(f, "# save the mpi.hostfile.N values as the file ds-hosts and the "
		"mpi.rankfile.N values as ds-ranks, one per line; then every "
		"rank runs the mpi.run line, its options added at the end\n");
	for (int h = 0; h < j->n_hosts; h++)
		fprintf(f, "mpi.hostfile.%d = %s slots=%d\n", h, j->hosts[h],
			j->per_host);
	for (int h = 0; h < j->n_hosts; h++)
		for (int k = 0; k < p->n_inst; k++) {
			int r = h * j->per_host + k;

			fprintf(f, "# rank %d: %s, CPUs %s (%d physical cores), "
				"node%s %s\n", r, j->hosts[h],
				ds_cpuset_format(&p->inst[k].cpus, cpus),
				ds_cpuset_count(&p->inst[k].cpus),
				ds_cpuset_count(&p->inst[k].nodes) == 1 ? "" : "s",
				ds_cpuset_format(&p->inst[k].nodes, nodes));
			fprintf(f, "mpi.rankfile.%d = rank %d=%s slot=%s\n", r, r,
				j->hosts[h], cpus);
		}
	fprintf(f, "mpi.run = %s\n", j->run);
	fprintf(f, "mpi.serve = %s\n", j->serve);
}

static void text_instances(FILE *f, const ds_tune_plan *p)
{
	char cpus[DS_CPULIST_MAX], nodes[DS_CPULIST_MAX];

	if (p->mpi.ranks > 0) {
		text_mpi(f, p);
		return;
	}
	if (p->n_inst > 0 && p->inst[0].cgroup[0] != '\0')
		fprintf(f, "# start each instance inside its cgroup: sh -c "
			"'echo $$ > CGROUP/cgroup.procs && exec COMMAND'\n");
	for (int k = 0; k < p->n_inst; k++) {
		const ds_tune_instance *in = &p->inst[k];

		fprintf(f, "# instance %d: CPUs %s (%d physical cores), node%s "
			"%s\n", k, ds_cpuset_format(&in->cpus, cpus),
			ds_cpuset_count(&in->cpus),
			ds_cpuset_count(&in->nodes) == 1 ? "" : "s",
			ds_cpuset_format(&in->nodes, nodes));
		if (in->cgroup[0] != '\0')
			fprintf(f, "cgroup.%d = %s\n", k, in->cgroup);
		fprintf(f, "run.%d = %s\n", k, in->run);
		fprintf(f, "serve.%d = %s\n", k, in->serve);
	}
}

/* ---- JSON ------------------------------------------------------------------- */

static json_t *json_actions(const ds_tune_plan *p)
{
	json_t *a = json_array();

	for (int i = 0; a != NULL && i < p->n_act; i++) {
		const ds_tune_action *x = &p->act[i];
		json_t *o = json_pack("{s:s, s:s}", "op",
				      x->op == DS_TUNE_MKDIR ? "mkdir" : "write",
				      "path", x->path);

		if (o != NULL && x->value != NULL &&
		    json_object_set_new(o, "value", json_string(x->value)) != 0) {
			json_decref(o);
			o = NULL;
		}
		if (o != NULL && x->why != NULL)
			json_object_set_new(o, "why", json_string(x->why));
		/* never a plan with an action quietly left out */
		if (o == NULL || json_array_append_new(a, o) != 0) {
			json_decref(a);
			return NULL;
		}
	}
	return a;
}

static json_t *json_instances(const ds_tune_plan *p)
{
	char cpus[DS_CPULIST_MAX], nodes[DS_CPULIST_MAX];
	json_t *a = json_array();

	for (int k = 0; a != NULL && k < p->n_inst; k++) {
		const ds_tune_instance *in = &p->inst[k];

		if (json_array_append_new(a, json_pack(
			"{s:i, s:s, s:s, s:i, s:I, s:s?, s:s?, s:s?}",
			"index", k, "cpus", ds_cpuset_format(&in->cpus, cpus),
			"nodes", ds_cpuset_format(&in->nodes, nodes),
			"threads", ds_cpuset_count(&in->cpus),
			"hugepages", (json_int_t)in->pages,
			"cgroup", in->cgroup[0] ? in->cgroup : NULL,
			"run", in->run, "serve", in->serve)) != 0) {
			json_decref(a); /* a model path that is not UTF-8 */
			return NULL;
		}
	}
	return a;
}

/* The MPI job, or null. */
static json_t *json_mpi(const ds_tune_plan *p)
{
	const ds_tune_mpi *j = &p->mpi;
	json_t *hosts = json_array();

	if (j->ranks == 0) {
		json_decref(hosts);
		return json_null();
	}
	for (int h = 0; hosts != NULL && h < j->n_hosts; h++)
		json_array_append_new(hosts, json_string(j->hosts[h]));
	return json_pack("{s:i, s:i, s:o, s:I, s:I, s:I, s:s, s:s}", "ranks",
			 j->ranks, "per_host", j->per_host, "hosts", hosts,
			 "shared_bytes", (json_int_t)j->shared_bytes,
			 "rank_exp_bytes", (json_int_t)j->rank_exp_bytes,
			 "out_bytes", (json_int_t)p->model.out_bytes,
			 "run", j->run, "serve", j->serve);
}

static char *plan_json(const ds_tune_plan *p, ds_err *err)
{
	json_t *notes = json_array(), *root;
	char *s;

	for (int i = 0; notes != NULL && i < p->n_notes; i++)
		json_array_append_new(notes, json_string(p->notes[i]));
	root = json_pack("{s:s, s:i, s:{s:s, s:s, s:I, s:I, s:i, s:I}, s:i, "
			 "s:I, s:o, s:o, s:o, s:o}",
			 "format", "ds-tune-plan", "version", 1,
			 "model", "dir", p->model_dir, "arch", p->model.arch,
			 "bytes", (json_int_t)p->model.bytes,
			 "kv_bytes_per_token", (json_int_t)p->model.kv_token_bytes,
			 "ctx_size", p->ctx_size,
			 "kv_bytes", (json_int_t)p->kv_bytes,
			 "hugepage_kb", 2048,
			 "hugepages_per_instance", (json_int_t)p->pages,
			 "actions", json_actions(p),
			 "instances", json_instances(p), "notes", notes,
			 "mpi", json_mpi(p));
	s = root != NULL ? json_dumps(root, JSON_INDENT(2)) : NULL;
	json_decref(root);
	if (s == NULL)
		ds_errf(err, "plan: cannot make JSON (out of memory or not "
			"UTF-8)");
	return s;
}

char *ds_tune_plan_format(const ds_tune_plan *p, int json, ds_err *err)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f;

	if (json)
		return plan_json(p, err);
	f = open_memstream(&buf, &len);
	if (f == NULL) {
		ds_errf(err, "plan: out of memory");
		return NULL;
	}
	text_header(f, p);
	text_actions(f, p);
	text_instances(f, p);
	if (fclose(f) != 0) {
		free(buf);
		ds_errf(err, "plan: out of memory");
		return NULL;
	}
	return buf;
}

/* ---- parsing ------------------------------------------------------------------- */

/* Only kernel settings, named the one way: an edited plan cannot write
 * anywhere else. */
int ds_tune_check_path(const char *path, const char *where, ds_err *err)
{
	size_t n = strlen(path);

	if (strncmp(path, "/sys/", 5) != 0 && strncmp(path, "/proc/sys/", 10) != 0 &&
	    strncmp(path, "/proc/irq/", 10) != 0)
		return ds_errf(err, "%s: \"%s\" is not under /sys/, /proc/sys/ "
			       "or /proc/irq/", where, path);
	if (n > 400 || strstr(path, "//") || strstr(path, "/./") ||
	    strstr(path, "/../") || (n >= 2 && strcmp(path + n - 2, "/.") == 0) ||
	    (n >= 3 && strcmp(path + n - 3, "/..") == 0) || path[n - 1] == '/')
		return ds_errf(err, "%s: \"%s\" is not a plain absolute path",
			       where, path);
	/* kernel settings are named in ASCII (and JSON needs UTF-8) */
	for (const char *c = path; *c; c++)
		if ((unsigned char)*c <= ' ' || (unsigned char)*c >= 0x7f)
			return ds_errf(err, "%s: blank, control or non-ASCII "
				       "character in path \"%s\"", where, path);
	/* the text form "PATH = VALUE" splits at the first '=' */
	if (strchr(path, '=') != NULL)
		return ds_errf(err, "%s: '=' in path \"%s\"", where, path);
	return 0;
}

static int check_value(const char *v, const char *where, ds_err *err)
{
	if (strlen(v) > PLAN_VALUE_MAX)
		return ds_errf(err, "%s: value longer than %d bytes", where,
			       PLAN_VALUE_MAX);
	for (const char *c = v; *c; c++)
		if ((unsigned char)*c < ' ' || (unsigned char)*c >= 0x7f)
			return ds_errf(err, "%s: control or non-ASCII character "
				       "in value", where);
	/* the text form trims them, so they could not be read back */
	if (*v == ' ' || (*v != '\0' && v[strlen(v) - 1] == ' '))
		return ds_errf(err, "%s: value \"%s\" begins or ends with a "
			       "blank", where, v);
	return 0;
}

static char *trim(char *s)
{
	char *e = s + strlen(s);

	while (isspace((unsigned char)*s))
		s++;
	while (e > s && isspace((unsigned char)e[-1]))
		*--e = '\0';
	return s;
}

/* run.N, serve.N, cgroup.N, mpi.*: what the instances or the MPI job
 * are; apply needs none. */
static int info_key(const char *k)
{
	const char *dot = strchr(k, '.');
	size_t n = dot != NULL ? (size_t)(dot - k) : 0;

	if (n == 3 && strncmp(k, "mpi", 3) == 0 && dot[1] != '\0')
		return 1;
	if (dot == NULL || dot[1] == '\0' ||
	    !((n == 3 && !strncmp(k, "run", 3)) ||
	      (n == 5 && !strncmp(k, "serve", 5)) ||
	      (n == 6 && !strncmp(k, "cgroup", 6))))
		return 0;
	for (const char *c = dot + 1; *c; c++)
		if (!isdigit((unsigned char)*c))
			return 0;
	return 1;
}

static int parse_line(ds_tune_plan *p, char *l, const char *where,
		      ds_err *err)
{
	char *eq, *k, *v;

	l = trim(l);
	if (*l == '\0' || *l == '#')
		return 0;
	if (strncmp(l, "mkdir", 5) == 0 && isspace((unsigned char)l[5])) {
		v = trim(l + 5);
		if (ds_tune_check_path(v, where, err) != 0)
			return -1;
		return ds_tune_act_add(p, DS_TUNE_MKDIR, v, NULL, NULL, err);
	}
	eq = strchr(l, '=');
	if (eq == NULL)
		return ds_errf(err, "%s: expected \"PATH = VALUE\" or "
			       "\"mkdir PATH\"", where);
	*eq = '\0';
	k = trim(l);
	v = trim(eq + 1);
	if (*k != '/') {
		if (info_key(k))
			return 0;
		return ds_errf(err, "%s: unknown key \"%s\"", where, k);
	}
	if (ds_tune_check_path(k, where, err) != 0 || check_value(v, where, err) != 0)
		return -1;
	return ds_tune_act_add(p, DS_TUNE_WRITE, k, v, NULL, err);
}

static int parse_text(ds_tune_plan *p, const char *text, const char *name,
		      ds_err *err)
{
	char *copy = strdup(text), *line, *save = NULL, where[300];
	int no = 0, rc = 0;

	if (copy == NULL)
		return ds_errf(err, "%s: out of memory", name);
	/* strtok_r would merge empty lines and miscount; split by hand */
	for (line = copy; rc == 0 && line != NULL; line = save) {
		char *nl = strchr(line, '\n');

		save = nl != NULL ? nl + 1 : NULL;
		if (nl != NULL)
			*nl = '\0';
		no++;
		snprintf(where, sizeof where, "%s:%d", name, no);
		rc = parse_line(p, line, where, err);
	}
	free(copy);
	return rc;
}

static int parse_json(ds_tune_plan *p, const char *text, const char *name,
		      ds_err *err)
{
	json_error_t je;
	json_t *root = json_loads(text, 0, &je), *acts, *a;
	const char *fmt;
	char where[300];
	size_t i;
	int rc = 0;

	if (root == NULL)
		return ds_errf(err, "%s: line %d: %s", name, je.line, je.text);
	fmt = json_string_value(json_object_get(root, "format"));
	acts = json_object_get(root, "actions");
	if (fmt == NULL || strcmp(fmt, "ds-tune-plan") != 0 ||
	    json_integer_value(json_object_get(root, "version")) != 1 ||
	    !json_is_array(acts)) {
		json_decref(root);
		return ds_errf(err, "%s: not a ds-tune plan (format "
			       "\"ds-tune-plan\", version 1, actions)", name);
	}
	json_array_foreach(acts, i, a) {
		const char *op = json_string_value(json_object_get(a, "op"));
		const char *path = json_string_value(json_object_get(a, "path"));
		const char *val = json_string_value(json_object_get(a, "value"));
		int mk = op != NULL && strcmp(op, "mkdir") == 0;

		snprintf(where, sizeof where, "%s: actions[%zu]", name, i);
		if (op == NULL || path == NULL || (!mk && (strcmp(op, "write") ||
							   val == NULL)))
			rc = ds_errf(err, "%s: needs op \"write\" with path and "
				     "value, or \"mkdir\" with path", where);
		else if (ds_tune_check_path(path, where, err) != 0 ||
			 (!mk && check_value(val, where, err) != 0))
			rc = -1;
		else
			rc = ds_tune_act_add(p, mk ? DS_TUNE_MKDIR : DS_TUNE_WRITE,
					     path, mk ? NULL : val, NULL, err);
		if (rc != 0)
			break;
	}
	json_decref(root);
	return rc;
}

int ds_tune_plan_parse(ds_tune_plan *p, const char *text, const char *name,
		       ds_err *err)
{
	const char *s = text;
	int rc;

	memset(p, 0, sizeof *p);
	while (isspace((unsigned char)*s))
		s++;
	rc = *s == '{' ? parse_json(p, text, name, err)
		       : parse_text(p, text, name, err);
	if (rc != 0)
		ds_tune_plan_free(p);
	return rc;
}
