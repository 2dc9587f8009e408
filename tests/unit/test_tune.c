/* test_tune.c - model sizes, plan files, and the apply/revert engine on
 * temporary trees: rollback, best-effort IRQ writes, the states an
 * interrupted apply leaves, apply twice then revert. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "harness.h"
#include "format/hfconfig.h"
#include "format/modelfile.h"
#include "host/tune/internal.h"
#include "host/tune/tune.h"

static uint64_t seed;

static char *tmpdir(void)
{
	char *d = strdup("/tmp/test_tune.XXXXXX");

	if (d == NULL || mkdtemp(d) == NULL) {
		free(d);
		return NULL;
	}
	return d;
}

static void put(const char *root, const char *path, const char *text)
{
	char full[512];
	FILE *f;

	snprintf(full, sizeof full, "%s%s", root, path);
	for (char *p = full + strlen(root) + 1; (p = strchr(p, '/')); p++) {
		*p = '\0';
		mkdir(full, 0755);
		*p = '/';
	}
	f = fopen(full, "w");
	if (f != NULL) {
		fputs(text, f);
		fclose(f);
	}
}

/* The exact content of root+path, "(none)" when absent. */
static const char *get(const char *root, const char *path, char *buf,
		       size_t n)
{
	char full[512], *t;

	snprintf(full, sizeof full, "%s%s", root, path);
	if (ds_sys_read(full, 1 << 20, &t, NULL, NULL) != 0)
		return "(none)";
	snprintf(buf, n, "%s", t);
	free(t);
	return buf;
}

static int exists(const char *root, const char *path)
{
	char full[512];

	snprintf(full, sizeof full, "%s%s", root, path);
	return access(full, F_OK) == 0;
}

static void plan_of(ds_tune_plan *p, const char *const *kv)
{
	ds_err err;

	memset(p, 0, sizeof *p);
	for (; kv[0] != NULL; kv += 2)
		ds_tune_act_add(p, kv[1] ? DS_TUNE_WRITE : DS_TUNE_MKDIR, kv[0],
				kv[1], NULL, &err);
}

/* ---- model sizes -------------------------------------------------------------- */

/* Write a complete model (ds_mwriter, the tensors ds_arch_tensors lists,
 * f32, random bytes) for an HF config; 0 on success. */
static int write_model(const char *dst, const char *cfg_text)
{
	json_t *cfg = json_loads(cfg_text, 0, NULL), *meta;
	ds_hparams hp;
	ds_tdesc *d = NULL;
	ds_mwriter w;
	size_t n = 0;
	ds_err err;
	int rc = -1;

	if (cfg == NULL || ds_hparams_from_hf_json(&hp, cfg, "config.json", &err) ||
	    ds_arch_tensors(&hp, &d, &n, &err) || ds_mwriter_open(&w, dst, 1, &err)) {
		printf("# %s\n", err.msg);
		json_decref(cfg);
		free(d);
		return -1;
	}
	for (size_t i = 0; i < n; i++) {
		ds_ttype t = { DS_F32, 0 };
		uint64_t bytes;
		uint8_t *data;

		if (ds_tensor_bytes(t, d[i].ndim, d[i].shape, &bytes) ||
		    (data = malloc(bytes)) == NULL)
			goto out;
		for (uint64_t j = 0; j < bytes; j++)
			data[j] = (uint8_t)t_rand(&seed);
		rc = ds_mwriter_tensor(&w, d[i].name, t, d[i].ndim, d[i].shape,
				       data, &err);
		free(data);
		if (rc != 0)
			goto out;
	}
	meta = json_pack("{s:s, s:i, s:s, s:o, s:{s:s, s:i, s:i, s:s}}", "format",
			 "ds-model", "version", DS_MODEL_VERSION, "arch", ds_arch_name(hp.arch),
			 "hparams", ds_hparams_to_json(&hp), "quant", "source",
			 "none", "bits", 16, "group_size", 0, "type", "f32");
	rc = ds_mwriter_commit(&w, meta, &err);
	json_decref(meta);
out:
	if (rc != 0)
		printf("# %s\n", err.msg);
	ds_mwriter_abort(&w);
	json_decref(cfg);
	free(d);
	return rc;
}

static uint64_t file_size(const char *dir, const char *name)
{
	char p[1024];
	struct stat st;

	snprintf(p, sizeof p, "%s/%s", dir, name);
	return stat(p, &st) == 0 ? (uint64_t)st.st_size : 0;
}

/* KV bytes per token from the HF config's own numbers: MLA caches
 * kv_lora_rank + qk_rope_head_dim per layer, others 2 x kv heads x
 * head width; f16. */
static void test_model_kv(void)
{
	char *d = tmpdir(), dst[512], cfg[1024];
	ds_tune_model m;
	ds_err err;

	snprintf(dst, sizeof dst, "%s/m", d);
	for (int it = 0; it < 6; it++) {
		long L = 1 + (long)(t_rand(&seed) % 3), want;
		long heads = 2 << (t_rand(&seed) % 2), kvh = 1 + (long)(t_rand(&seed) % 2);
		long rank = 16 << (t_rand(&seed) % 2), rope = 8 << (t_rand(&seed) % 2);
		long ctx = 64 + (long)(t_rand(&seed) % 1000);

		if (it % 2 == 0) {
			snprintf(cfg, sizeof cfg, "{\"model_type\":\"llama\",\"vocab_size\":"
				 "64,\"hidden_size\":32,\"num_hidden_layers\":%ld,"
				 "\"num_attention_heads\":%ld,\"num_key_value_heads\":%ld,"
				 "\"intermediate_size\":48,\"max_position_embeddings\":%ld,"
				 "\"rms_norm_eps\":1e-5,\"bos_token_id\":1,"
				 "\"eos_token_id\":2}", L, heads, kvh * (heads / 2), ctx);
			want = L * 2 * (kvh * (heads / 2)) * (32 / heads) * 2;
		} else {
			snprintf(cfg, sizeof cfg, "{\"model_type\":\"deepseek_v2\","
				 "\"vocab_size\":64,\"hidden_size\":32,"
				 "\"num_hidden_layers\":%ld,\"num_attention_heads\":2,"
				 "\"num_key_value_heads\":2,\"intermediate_size\":48,"
				 "\"moe_intermediate_size\":16,\"max_position_embeddings\":"
				 "%ld,\"rms_norm_eps\":1e-6,\"q_lora_rank\":null,"
				 "\"kv_lora_rank\":%ld,\"qk_nope_head_dim\":8,"
				 "\"qk_rope_head_dim\":%ld,\"v_head_dim\":8,"
				 "\"n_routed_experts\":4,\"num_experts_per_tok\":2,"
				 "\"n_shared_experts\":1,\"first_k_dense_replace\":1,"
				 "\"topk_method\":\"greedy\",\"bos_token_id\":0,"
				 "\"eos_token_id\":1}", L, ctx, rank, rope);
			want = L * (rank + rope) * 2;
		}
		if (write_model(dst, cfg) != 0) {
			T_CHECK(0);
			continue;
		}
		T_CHECKF(ds_tune_model_read(dst, &m, &err) == 0, "%s", err.msg);
		T_CHECKF(m.kv_token_bytes == (uint64_t)want, "%s: %llu vs %ld",
			 m.arch, (unsigned long long)m.kv_token_bytes, want);
		T_CHECK(m.bytes == file_size(dst, "model.bin") && m.bytes > 0);
		T_CHECK(m.n_ctx_train == (uint32_t)ctx);
		T_CHECK(!strcmp(m.arch, it % 2 ? "deepseek2" : "llama"));
	}
	/* whatever the loader refuses, ds-tune refuses, naming the file */
	put(dst, "/model.meta", "{\"format\": \"ds-model\", \"version\": 3}");
	T_CHECK(ds_tune_model_read(dst, &m, &err) == -1);
	T_CHECKF(strstr(err.msg, "model.meta: format version 3"), "%s", err.msg);
	put(dst, "/model.meta", "{ not json");
	T_CHECK(ds_tune_model_read(dst, &m, &err) == -1 && strstr(err.msg, "line 1"));
	ds_remove_tree(d);
	free(d);
}

/* ---- plan files ---------------------------------------------------------------- */

static void test_plan_parse(void)
{
	const char *text =
		"# a comment\n\n"
		"/sys/kernel/mm/transparent_hugepage/enabled = madvise\n"
		"   mkdir   /sys/fs/cgroup/ds-tune  \n"
		"/sys/fs/cgroup/ds-tune/cpu.max = max 100000\n"
		"/proc/irq/5/smp_affinity_list=8-15\n"
		"run.0 = ds-run -m x --threads 4\n"
		"serve.12 = ds-serve\ncgroup.0 = /sys/fs/cgroup/ds-tune/inst0\n";
	static const char *bad[][2] = {
		{ "/etc/shadow = x\n", "p:1: \"/etc/shadow\" is not under" },
		{ "\n\n/sys//a = x\n", "p:3: \"/sys//a\" is not a plain" },
		{ "/sys/a/. = x\n", "not a plain" },
		{ "/sys/a/.. = x\n", "not a plain" },
		{ "mkdir /sys/a/\n", "not a plain" },
		{ "/sys/a\n", "p:1: expected \"PATH = VALUE\"" },
		{ "run = x\n", "unknown key \"run\"" },
		{ "run.x = x\n", "unknown key" },
		{ "/sys/a = b\tc\n", "control or non-ASCII character" },
		{ "{\"format\": \"ds-tune-plan\", \"version\": 1, \"actions\": "
		  "[{\"op\": \"write\", \"path\": \"/sys/a=b\", \"value\": \"c\"}]}",
		  "'=' in path \"/sys/a=b\"" },
		{ "{\"format\": \"ds-tune-plan\", \"version\": 1, \"actions\": "
		  "[{\"op\": \"write\", \"path\": \"/sys/a\", \"value\": \" 1\"}]}",
		  "value \" 1\" begins or ends with a blank" },
		{ "{\"format\": \"ds-tune-plan\", \"version\": 1, \"actions\": "
		  "[{\"op\": \"write\", \"path\": \"/sys/a\", \"value\": \"1 \"}]}",
		  "begins or ends with a blank" },
		{ "{\"format\": \"ds-tune-plan\", \"version\": 2, \"actions\": []}",
		  "not a ds-tune plan" },
		{ "{\"format\": \"ds-tune-plan\", \"version\": 1, \"actions\": "
		  "[{\"op\": \"write\", \"path\": \"/sys/a\"}]}", "actions[0]: needs" },
	};
	ds_tune_plan p;
	ds_err err;

	T_CHECKF(ds_tune_plan_parse(&p, text, "p", &err) == 0, "%s", err.msg);
	T_CHECK(p.n_act == 4);
	if (p.n_act == 4) {
		T_CHECK(p.act[1].op == DS_TUNE_MKDIR && p.act[1].value == NULL &&
			!strcmp(p.act[1].path, "/sys/fs/cgroup/ds-tune"));
		T_CHECK(!strcmp(p.act[2].value, "max 100000"));
		T_CHECK(!strcmp(p.act[3].path, "/proc/irq/5/smp_affinity_list") &&
			!strcmp(p.act[3].value, "8-15"));
	}
	ds_tune_plan_free(&p);
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		T_CHECKF(ds_tune_plan_parse(&p, bad[i][0], "p", &err) == -1, "%s",
			 bad[i][0]);
		T_CHECKF(strstr(err.msg, bad[i][1]) != NULL, "%s", err.msg);
	}
}

/* format(plan) parses back to the same actions, as text and as JSON */
static void test_plan_roundtrip(void)
{
	for (int json = 0; json < 2; json++) {
		ds_tune_plan p, q;
		char path[64], val[64];
		ds_err err;
		char *s;

		memset(&p, 0, sizeof p);
		snprintf(p.model.arch, sizeof p.model.arch, "llama");
		for (int i = 0; i < 30; i++) {
			int mk = t_rand(&seed) % 5 == 0;

			snprintf(path, sizeof path, "/sys/x/%llu/f%d",
				 (unsigned long long)(t_rand(&seed) % 1000), i);
			snprintf(val, sizeof val, "v %llu +x",
				 (unsigned long long)t_rand(&seed));
			ds_tune_act_add(&p, mk ? DS_TUNE_MKDIR : DS_TUNE_WRITE, path,
					mk ? NULL : val, i % 2 ? "why" : NULL, &err);
		}
		s = ds_tune_plan_format(&p, json, &err);
		T_CHECK(s != NULL);
		T_CHECKF(s != NULL && ds_tune_plan_parse(&q, s, "s", &err) == 0,
			 "%s", err.msg);
		T_CHECK(q.n_act == p.n_act);
		for (int i = 0; i < p.n_act && i < q.n_act; i++) {
			T_CHECK(p.act[i].op == q.act[i].op);
			T_CHECK(!strcmp(p.act[i].path, q.act[i].path));
			T_CHECK((p.act[i].value == NULL) == (q.act[i].value == NULL));
			T_CHECK(p.act[i].value == NULL ||
				!strcmp(p.act[i].value, q.act[i].value));
		}
		free(s);
		ds_tune_plan_free(&p);
		ds_tune_plan_free(&q);
	}
}

/* ---- apply and revert ------------------------------------------------------------- */

static char *state_in(const char *root)
{
	return ds_tune_state_default(root);
}

/* A write fails half-way: what was written is restored, the failing path
 * is named, no state is left. */
static void test_apply_rollback(void)
{
	char *r = tmpdir(), *st = state_in(r), b[128], link[512];
	static const char *const kv[] = {
		"/sys/a", "new", "/sys/c", "[x]", "/sys/b", "x", NULL,
	};
	ds_tune_report rep;
	ds_tune_plan p;
	ds_err err;

	put(r, "/sys/a", "old\n");
	put(r, "/sys/c", "[y] x\n");
	put(r, "/var/lib/.keep", "");
	/* readable, never writable, even by root */
	snprintf(link, sizeof link, "%s/sys/b", r);
	T_CHECK(symlink("/proc/version", link) == 0);
	plan_of(&p, kv);
	T_CHECK(ds_tune_apply(&p, r, st, &rep, &err) == -1);
	T_CHECKF(strstr(err.msg, "/sys/b: ") && strstr(err.msg, "restored the 2 "
		 "changes made before it"), "%s", err.msg);
	T_CHECK(!strcmp(get(r, "/sys/a", b, sizeof b), "old\n"));
	T_CHECK(!strcmp(get(r, "/sys/c", b, sizeof b), "[y] x\n"));
	T_CHECK(!exists(r, "/var/lib/ds-tune"));
	ds_tune_report_free(&rep);
	ds_tune_plan_free(&p);
	ds_remove_tree(r);
	free(r);
	free(st);
}

/* The kernel refuses to move some IRQs: a warning, not a failure, and
 * nothing recorded for them. */
static void test_irq_best_effort(void)
{
	char *r = tmpdir(), *st = state_in(r), b[4096], link[512];
	static const char *const kv[] = {
		"/proc/irq/5/smp_affinity_list", "2-3",
		"/proc/irq/6/smp_affinity_list", "2-3", NULL,
	};
	ds_tune_report rep;
	ds_tune_plan p;
	ds_err err;

	put(r, "/proc/irq/5/smp_affinity_list", "0-3\n");
	put(r, "/var/lib/.keep", "");
	snprintf(link, sizeof link, "%s/proc/irq/6", r);
	mkdir(link, 0755);
	snprintf(link, sizeof link, "%s/proc/irq/6/smp_affinity_list", r);
	T_CHECK(symlink("/proc/version", link) == 0);
	plan_of(&p, kv);
	T_CHECKF(ds_tune_apply(&p, r, st, &rep, &err) == 0, "%s", err.msg);
	T_CHECK(rep.changed == 1 && rep.n_warn == 1);
	T_CHECK(rep.n_warn == 1 && strstr(rep.warn[0], "/proc/irq/6/"));
	T_CHECK(!strcmp(get(r, "/proc/irq/5/smp_affinity_list", b, sizeof b), "2-3\n"));
	T_CHECK(strstr(get(st, "", b, sizeof b), "/proc/irq/5/") != NULL);
	T_CHECK(strstr(b, "/proc/irq/6/") == NULL);
	ds_tune_report_free(&rep);
	T_CHECK(ds_tune_revert(r, st, &rep, &err) == 0);
	T_CHECK(!strcmp(get(r, "/proc/irq/5/smp_affinity_list", b, sizeof b), "0-3\n"));
	ds_tune_report_free(&rep);
	ds_tune_plan_free(&p);
	ds_remove_tree(r);
	free(r);
	free(st);
}

/* What an apply killed at each point leaves: a state saved before the
 * first write, then any prefix of the changes made.  Revert restores the
 * original from every one of them. */
static void test_interrupted_states(void)
{
	static const char *const kv[] = {
		"/sys/a", "1", "/sys/fs/g", NULL, "/sys/fs/g/w", "10",
		"/sys/mode", "never", NULL,
	};
	char b[128];

	for (int done = 0; done <= 4; done++) {
		char *r = tmpdir(), *st = state_in(r);
		ds_tune_report rep;
		ds_tune_plan p;
		ds_tstate s;
		ds_err err;

		put(r, "/sys/a", "0\n");
		put(r, "/sys/mode", "always [madvise] never\n");
		put(r, "/sys/fs/.keep", "");
		put(r, "/var/lib/.keep", "");
		/* the record apply writes before its first change */
		T_CHECK(ds_tstate_open(&s, st, r, 1, &err) == 0);
		ds_tstate_add(&s, DS_TUNE_WRITE, "/sys/a", "0\n", 2, &err);
		ds_tstate_add(&s, DS_TUNE_MKDIR, "/sys/fs/g", NULL, 0, &err);
		ds_tstate_add(&s, DS_TUNE_WRITE, "/sys/fs/g/w", NULL, 0, &err);
		ds_tstate_add(&s, DS_TUNE_WRITE, "/sys/mode",
			      "always [madvise] never\n", 23, &err);
		T_CHECK(ds_tstate_save(&s, &err) == 0);
		ds_tstate_close(&s);
		/* then the first `done` changes, as apply makes them */
		plan_of(&p, kv);
		ds_tune_plan q = p;
		q.n_act = done;
		ds_tune_report r2;
		T_CHECKF(ds_tune_apply(&q, r, st, &r2, &err) == 0, "%s", err.msg);
		T_CHECK(r2.changed == done);
		ds_tune_report_free(&r2);
		T_CHECKF(ds_tune_revert(r, st, &rep, &err) == 0, "%d: %s", done,
			 err.msg);
		T_CHECK(!strcmp(get(r, "/sys/a", b, sizeof b), "0\n"));
		T_CHECK(!strcmp(get(r, "/sys/mode", b, sizeof b),
				"always [madvise] never\n"));
		T_CHECK(!exists(r, "/sys/fs/g"));
		T_CHECK(!exists(r, "/var/lib/ds-tune"));
		ds_tune_report_free(&rep);
		ds_tune_plan_free(&p);
		ds_remove_tree(r);
		free(r);
		free(st);
	}
}

/* Apply, apply another plan on top, revert once: the original. */
static void test_apply_twice(void)
{
	static const char *const kv1[] = { "/sys/a", "1", "/sys/b", "1", NULL };
	static const char *const kv2[] = { "/sys/a", "2", "/sys/d", NULL,
					   "/sys/d/f", "2", "/sys/c", "2", NULL };
	char *r = tmpdir(), *st = state_in(r), b[128];
	ds_tune_report rep;
	ds_tune_plan p1, p2;
	ds_err err;
	char *a0 = malloc(40);

	snprintf(a0, 40, "%llx\n", (unsigned long long)t_rand(&seed));
	put(r, "/sys/a", a0);
	put(r, "/sys/b", "b\n");
	put(r, "/sys/c", "c");
	put(r, "/var/lib/.keep", "");
	plan_of(&p1, kv1);
	plan_of(&p2, kv2);
	T_CHECK(ds_tune_apply(&p1, r, st, &rep, &err) == 0 && rep.changed == 2);
	ds_tune_report_free(&rep);
	T_CHECK(ds_tune_apply(&p1, r, st, &rep, &err) == 0 && rep.changed == 0 &&
		rep.same == 2);
	ds_tune_report_free(&rep);
	T_CHECK(ds_tune_apply(&p2, r, st, &rep, &err) == 0 && rep.changed == 4);
	ds_tune_report_free(&rep);
	T_CHECK(!strcmp(get(r, "/sys/d/f", b, sizeof b), "2\n"));
	T_CHECK(ds_tune_revert(r, st, &rep, &err) == 0 && rep.changed == 5);
	ds_tune_report_free(&rep);
	T_CHECK(!strcmp(get(r, "/sys/a", b, sizeof b), a0));
	T_CHECK(!strcmp(get(r, "/sys/b", b, sizeof b), "b\n"));
	T_CHECK(!strcmp(get(r, "/sys/c", b, sizeof b), "c"));
	T_CHECK(!exists(r, "/sys/d"));
	T_CHECK(ds_tune_revert(r, st, &rep, &err) == -1 &&
		strstr(err.msg, "nothing applied"));
	ds_tune_plan_free(&p1);
	ds_tune_plan_free(&p2);
	ds_remove_tree(r);
	free(a0);
	free(r);
	free(st);
}

/* A file may be missing only in a directory the plan makes. */
static void test_missing_file(void)
{
	static const char *const kv[] = { "/sys/nothere", "1", NULL };
	char *r = tmpdir(), *st = state_in(r);
	ds_tune_report rep;
	ds_tune_plan p;
	ds_err err;

	put(r, "/var/lib/.keep", "");
	plan_of(&p, kv);
	T_CHECK(ds_tune_apply(&p, r, st, &rep, &err) == -1);
	T_CHECKF(strstr(err.msg, "/sys/nothere: No such file"), "%s", err.msg);
	T_CHECK(!exists(r, "/var/lib/ds-tune"));
	ds_tune_plan_free(&p);
	ds_remove_tree(r);
	free(r);
	free(st);
}

static void test_may_write(void)
{
	char *r = tmpdir();
	ds_err err;

	/* the owner of a tree may change it; the system needs root */
	T_CHECK(ds_tune_may_write(r, &err) == 0);
	T_CHECK(ds_tune_may_write(NULL, &err) == (geteuid() == 0 ? 0 : -1));
	T_CHECK(geteuid() == 0 || ds_tune_may_write("/", &err) == -1);
	rmdir(r);
	free(r);
}

int main(void)
{
	seed = t_seed();
	T_RUN(test_model_kv);
	T_RUN(test_plan_parse);
	T_RUN(test_plan_roundtrip);
	T_RUN(test_apply_rollback);
	T_RUN(test_irq_best_effort);
	T_RUN(test_interrupted_states);
	T_RUN(test_apply_twice);
	T_RUN(test_missing_file);
	T_RUN(test_may_write);
	return t_done();
}
