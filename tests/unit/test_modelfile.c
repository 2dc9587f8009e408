/* test_modelfile.c - model writer / loader round trip and every check the
 * loader makes on model.meta and model.bin. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"
#include "format/modelfile.h"

static uint64_t seed;
static char dir[64], dst[96];

/* A small DeepSeek-V3-like model: MLA with a query rank, one dense layer,
 * then MoE layers with a shared expert and noaux_tc routing. */
static const char *cfg_text =
	"{\"model_type\":\"deepseek_v3\",\"vocab_size\":96,\"hidden_size\":64,"
	"\"num_hidden_layers\":2,\"num_attention_heads\":2,"
	"\"num_key_value_heads\":2,\"intermediate_size\":96,"
	"\"moe_intermediate_size\":32,\"max_position_embeddings\":256,"
	"\"rms_norm_eps\":1e-6,\"q_lora_rank\":32,\"kv_lora_rank\":32,"
	"\"qk_nope_head_dim\":16,\"qk_rope_head_dim\":16,\"v_head_dim\":16,"
	"\"n_routed_experts\":4,\"num_experts_per_tok\":2,\"n_shared_experts\":1,"
	"\"first_k_dense_replace\":1,\"n_group\":2,\"topk_group\":1,"
	"\"bos_token_id\":0,\"eos_token_id\":1}";

static ds_hparams hp;

static ds_ttype type_for(const ds_tdesc *d, int i)
{
	static const char *const mats[] = { "q4g32", "q8g32", "bf16", "f16",
					    "q4g64", "f32" };
	ds_ttype t = { DS_F32, 0 };

	if (strcmp(d->name, "blk.0.attn_q_a") == 0)
		ds_ttype_parse("q4g32", &t); /* it gets a .perm */
	else if (strcmp(d->name, "output") == 0)
		ds_ttype_parse("bf16", &t);
	else if (d->kind == DS_TK_MATRIX || d->kind == DS_TK_EMBED ||
		 d->kind == DS_TK_OUTPUT)
		ds_ttype_parse(mats[i % 6], &t);
	return t;
}

static json_t *meta_base(void)
{
	return json_pack("{s:s, s:i, s:s, s:o, s:{s:s, s:i, s:i, s:s}}",
			 "format", "ds-model", "version", DS_MODEL_VERSION, "arch",
			 "deepseek2", "hparams", ds_hparams_to_json(&hp), "quant",
			 "source", "rtn", "bits", 4, "group_size", 32, "type", "q4g32");
}

/* The tensor table of hp, the MTP layer's after the main model's. */
static int all_tensors(ds_tdesc **d, size_t *n, ds_err *err)
{
	ds_tdesc *m;
	size_t nm;

	if (ds_arch_tensors(&hp, d, n, err))
		return -1;
	if (ds_arch_mtp_tensors(&hp, &m, &nm, err)) {
		free(*d);
		return -1;
	}
	*d = realloc(*d, (*n + nm + 1) * sizeof **d);
	if (nm > 0)
		memcpy(*d + *n, m, nm * sizeof *m);
	*n += nm;
	free(m);
	return 0;
}

/* Write a complete model to dst; *datas keeps each tensor's bytes. */
static int write_model(uint8_t ***datas, size_t *count, int force,
		       const char *extra)
{
	ds_tdesc *d;
	size_t n, i;
	ds_mwriter w;
	ds_err err;
	json_t *meta;
	int rc;

	if (all_tensors(&d, &n, &err) || ds_mwriter_open(&w, dst, force, &err)) {
		printf("# %s\n", err.msg);
		return -1;
	}
	*datas = calloc(n, sizeof **datas);
	*count = n;
	for (i = 0; i < n; i++) {
		ds_ttype t = type_for(&d[i], (int)i);
		uint64_t bytes, j;

		T_CHECK(ds_tensor_bytes(t, d[i].ndim, d[i].shape, &bytes) == 0);
		(*datas)[i] = malloc(bytes + 1);
		for (j = 0; j < bytes; j++)
			(*datas)[i][j] = (uint8_t)t_rand(&seed);
		/* stream the big ones in two pieces */
		if (bytes > 100) {
			T_CHECK(ds_mwriter_begin(&w, d[i].name, t, d[i].ndim,
						 d[i].shape, &err) == 0);
			T_CHECK(ds_mwriter_write(&w, (*datas)[i], 100, &err) == 0);
			T_CHECK(ds_mwriter_write(&w, (*datas)[i] + 100, bytes - 100,
						 &err) == 0);
			T_CHECK(ds_mwriter_end(&w, &err) == 0);
		} else {
			T_CHECK(ds_mwriter_tensor(&w, d[i].name, t, d[i].ndim,
						  d[i].shape, (*datas)[i], &err) == 0);
		}
	}
	{
		/* a GPTQ act-order companion: i32 [64] for q_a's 64 inputs */
		int32_t perm[64];
		uint64_t ps = 64;

		for (i = 0; i < 64; i++)
			perm[i] = (int32_t)(63 - i);
		T_CHECK(ds_mwriter_tensor(&w, "blk.0.attn_q_a.perm",
					  (ds_ttype){ DS_I32, 0 }, 1, &ps, perm,
					  &err) == 0);
	}
	if (extra != NULL) {
		char *p = ds_path_join(ds_mwriter_dir(&w), extra);
		FILE *f = fopen(p, "w");

		fputs("extra", f);
		fclose(f);
		free(p);
	}
	meta = meta_base();
	rc = ds_mwriter_commit(&w, meta, &err);
	if (rc)
		printf("# %s\n", err.msg);
	ds_mwriter_abort(&w);
	json_decref(meta);
	free(d);
	return rc;
}

static void free_datas(uint8_t **datas, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		free(datas[i]);
	free(datas);
}

static int count_tmp(void)
{
	char cmd[256];
	FILE *p;
	int n = 0;

	snprintf(cmd, sizeof cmd, "ls -d %s.tmp-* 2>/dev/null | wc -l", dst);
	p = popen(cmd, "r");
	if (p == NULL || fscanf(p, "%d", &n) != 1)
		n = -1;
	if (p)
		pclose(p);
	return n;
}

static void rm_dst(void)
{
	char cmd[256];

	snprintf(cmd, sizeof cmd, "rm -rf %s %s.tmp-*", dst, dst);
	T_CHECK(system(cmd) == 0);
}

static void test_round_trip(void)
{
	uint8_t **datas;
	size_t n, i;
	ds_tdesc *d;
	ds_model m;
	ds_err err;
	int ok = 1;

	rm_dst();
	T_CHECK(write_model(&datas, &n, 0, "tokenizer.bin") == 0);
	T_CHECK(count_tmp() == 0);
	T_CHECK(ds_model_load(&m, dst, DS_LOAD_POPULATE, &err) == 0);
	T_CHECK(ds_arch_tensors(&hp, &d, &n, &err) == 0);
	T_CHECK(m.n_tensors == n + 1 && m.hp.arch == DS_ARCH_DEEPSEEK2 &&
		m.hp.n_expert == 4 && m.hp.topk_method == DS_TOPK_NOAUX_TC);
	T_CHECK(strcmp(m.quant.source, "rtn") == 0 && m.quant.bits == 4 &&
		strcmp(m.quant.type, "q4g32") == 0);
	for (i = 0; i < n; i++) {
		const ds_tensor *t = ds_model_tensor(&m, d[i].name);
		ds_ttype want = type_for(&d[i], (int)i);

		if (t == NULL || t->type.dt != want.dt || t->type.group != want.group ||
		    t->ndim != d[i].ndim || t->shape[0] != d[i].shape[0] ||
		    t->offset % DS_MODEL_ALIGN || (uintptr_t)t->data % 64 ||
		    memcmp(t->data, datas[i], t->size) != 0)
			ok = 0;
	}
	T_CHECK(ok);
	T_CHECK(ds_model_tensor(&m, "blk.1.ffn_gate_exps")->ndim == 3);
	T_CHECK(ds_model_tensor(&m, "nope") == NULL);
	T_CHECK(ds_model_verify(&m, &err) == 0);
	ds_model_free(&m);
	{
		char p[160];

		snprintf(p, sizeof p, "%s/tokenizer.bin", dst);
		T_CHECK(access(p, F_OK) == 0);
	}
	free(d);
	free_datas(datas, n);
}

static void test_verify_flip(void)
{
	char p[160];
	ds_model m;
	ds_err err;
	off_t off;
	int fd;
	uint8_t b;

	snprintf(p, sizeof p, "%s/model.bin", dst);
	T_CHECK(ds_model_load(&m, dst, 0, &err) == 0);
	off = (off_t)ds_model_tensor(&m, "blk.0.attn_kv_b")->offset + 7;
	ds_model_free(&m);
	fd = open(p, O_RDWR);
	T_CHECK(pread(fd, &b, 1, off) == 1);
	b ^= 0x10;
	T_CHECK(pwrite(fd, &b, 1, off) == 1);
	T_CHECK(ds_model_load(&m, dst, 0, &err) == 0);
	T_CHECK(ds_model_verify(&m, &err) == -1);
	T_CHECKF(strstr(err.msg, "tensor blk.0.attn_kv_b: CRC-32") != NULL, "%s",
		 err.msg);
	ds_model_free(&m);
	b ^= 0x10;
	T_CHECK(pwrite(fd, &b, 1, off) == 1);
	close(fd);
	T_CHECK(ds_model_load(&m, dst, 0, &err) == 0 && ds_model_verify(&m, &err) == 0);
	ds_model_free(&m);
}

static void test_writer_dst(void)
{
	uint8_t **datas;
	size_t n;
	ds_mwriter w;
	ds_err err;
	char p[200];

	rm_dst();
	T_CHECK(write_model(&datas, &n, 0, NULL) == 0);
	free_datas(datas, n);
	/* exists: refused without force, replaced with it */
	T_CHECK(ds_mwriter_open(&w, dst, 0, &err) == -1);
	T_CHECK(strstr(err.msg, "already exists") != NULL);
	T_CHECK(write_model(&datas, &n, 1, "marker") == 0);
	free_datas(datas, n);
	snprintf(p, sizeof p, "%s/marker", dst);
	T_CHECK(access(p, F_OK) == 0);
	T_CHECK(count_tmp() == 0);
	/* not a model directory: never replaced */
	rm_dst();
	T_CHECK(mkdir(dst, 0755) == 0);
	snprintf(p, sizeof p, "%s/precious", dst);
	fclose(fopen(p, "w"));
	T_CHECK(ds_mwriter_open(&w, dst, 1, &err) == -1);
	T_CHECK(strstr(err.msg, "not a ds model directory") != NULL);
	T_CHECK(access(p, F_OK) == 0);
	/* abort leaves nothing */
	rm_dst();
	T_CHECK(ds_mwriter_open(&w, dst, 0, &err) == 0);
	T_CHECK(access(ds_mwriter_dir(&w), F_OK) == 0 && count_tmp() == 1);
	ds_mwriter_abort(&w);
	T_CHECK(count_tmp() == 0 && access(dst, F_OK) != 0);
}

/* Tensors across the writer's 2 MiB blocks, streamed in odd pieces: the
 * file holds each at its aligned offset, zeros between, and ends where the
 * last one ends; DS_MAP_HUGE maps it 2 MiB-aligned with the same bytes. */
static void test_writer_blocks(void)
{
	static const uint64_t counts[] = { 700001, 3, 524288, 1 };
	uint64_t off[4], end = 0, i, j;
	uint8_t *want;
	char *got = NULL;
	ds_mwriter w;
	ds_err err;
	ds_map m;
	json_t *meta;
	char p[200], name[8];
	size_t bytes;

	rm_dst();
	T_CHECK(ds_mwriter_open(&w, dst, 0, &err) == 0);
	want = calloc(1, 8 << 20);
	for (i = 0; i < 4; i++) {
		uint64_t n = counts[i] * 4, k;

		off[i] = ds_round_up(end, DS_MODEL_ALIGN);
		for (k = 0; k < n; k++)
			want[off[i] + k] = (uint8_t)(t_rand(&seed) | 1);
		snprintf(name, sizeof name, "t%d", (int)i);
		T_CHECK(ds_mwriter_begin(&w, name, (ds_ttype){ DS_F32, 0 }, 1,
					 &counts[i], &err) == 0);
		for (j = 0; j < n; j += 333331)
			T_CHECK(ds_mwriter_write(&w, want + off[i] + j, n - j <
						 333331 ? n - j : 333331, &err) == 0);
		T_CHECK(ds_mwriter_end(&w, &err) == 0);
		end = off[i] + n;
	}
	meta = meta_base();
	T_CHECK(ds_mwriter_commit(&w, meta, &err) == 0);
	json_decref(meta);
	snprintf(p, sizeof p, "%s/model.bin", dst);
	T_CHECK(ds_read_file(p, 16 << 20, &got, &bytes, &err) == 0);
	T_CHECK(got != NULL && bytes == end);
	T_CHECK(got != NULL && memcmp(got, want, end) == 0);
	T_CHECK(ds_map_open(&m, p, DS_MAP_HUGE | DS_MAP_POPULATE, &err) == 0);
	T_CHECK(m.size == end && ((uintptr_t)m.data & (DS_HUGE_2M - 1)) == 0);
	T_CHECK(memcmp(m.data, want, end) == 0);
	ds_map_close(&m);
	free(got);
	free(want);
}

static void test_stale_tmp(void)
{
	ds_mwriter w;
	ds_err err;
	char p[200], q[200];
	struct timespec old[2] = { { 1000000000, 0 }, { 1000000000, 0 } };

	rm_dst();
	snprintf(p, sizeof p, "%s.tmp-abc123", dst);
	snprintf(q, sizeof q, "%s.tmp-abc123/model.bin", dst);
	T_CHECK(mkdir(p, 0755) == 0);
	fclose(fopen(q, "w"));
	T_CHECK(utimensat(AT_FDCWD, p, old, 0) == 0);
	/* a live one (locked by this writer) is left alone */
	T_CHECK(ds_mwriter_open(&w, dst, 0, &err) == 0);
	T_CHECK(access(p, F_OK) != 0);
	T_CHECK(ds_tmpdir_clean_stale(dst) == 0);
	T_CHECK(access(ds_mwriter_dir(&w), F_OK) == 0);
	/* names we did not make are never touched */
	snprintf(p, sizeof p, "%s.tmp-keep", dst);
	T_CHECK(mkdir(p, 0755) == 0);
	T_CHECK(utimensat(AT_FDCWD, p, old, 0) == 0);
	T_CHECK(ds_tmpdir_clean_stale(dst) == 0 && access(p, F_OK) == 0);
	rmdir(p);
	ds_mwriter_abort(&w);
}

/* ---- the loader's checks ---------------------------------------------------------- */

static json_t *meta;  /* the good model's meta, edited by each case */
static char *good_meta;

static void save_meta(json_t *m)
{
	char p[160];

	snprintf(p, sizeof p, "%s/model.meta", dst);
	T_CHECK(json_dump_file(m, p, 0) == 0);
}

static void restore(void)
{
	json_decref(meta);
	meta = json_loads(good_meta, 0, NULL);
}

static json_t *entry(const char *name)
{
	json_t *ts = json_object_get(meta, "tensors"), *e;
	size_t i;

	json_array_foreach(ts, i, e)
		if (strcmp(json_string_value(json_object_get(e, "name")), name) == 0)
			return e;
	return NULL;
}

static void refuse_meta(const char *what)
{
	ds_model m;
	ds_err err = { "" };

	save_meta(meta);
	T_CHECKF(ds_model_load(&m, dst, 0, &err) == -1, "accepted (%s)", what);
	T_CHECKF(strstr(err.msg, what) != NULL, "\"%s\" lacks \"%s\"", err.msg, what);
	T_CHECKF(strstr(err.msg, dst) != NULL, "\"%s\" lacks the directory", err.msg);
	restore();
}

static void test_loader_top(void)
{
	json_object_set_new(meta, "format", json_string("gguf"));
	refuse_meta("format is not \"ds-model\"");
	json_object_set_new(meta, "version", json_integer(3));
	refuse_meta("format version 3; this build reads version 2");
	json_object_del(meta, "version");
	refuse_meta("version missing");
	json_object_set_new(meta, "arch", json_string("mistral"));
	refuse_meta("arch missing or unknown");
	json_object_del(json_object_get(meta, "hparams"), "n_embd");
	refuse_meta("hparams.n_embd missing");
	json_object_set_new(json_object_get(meta, "hparams"), "n_foo", json_integer(1));
	refuse_meta("hparams.n_foo is not a known key");
	json_object_set_new(json_object_get(meta, "hparams"), "topk_method",
			    json_string("best"));
	refuse_meta("hparams.topk_method \"best\" is not supported");
	json_object_set_new(json_object_get(meta, "hparams"), "n_head_kv",
			    json_integer(3));
	refuse_meta("num_key_value_heads 3");
	json_object_del(meta, "quant");
	refuse_meta("quant is not");
	json_object_set_new(json_object_get(meta, "quant"), "zero_point", json_true());
	refuse_meta("quant has keys other than");
	json_object_set_new(meta, "tensors", json_object());
	refuse_meta("tensors is not an array");
}

static void test_loader_tensors(void)
{
	json_t *e;

	json_object_set_new(entry("blk.0.attn_q_a"), "type", json_string("q3g32"));
	refuse_meta("tensor blk.0.attn_q_a: unknown type");
	json_object_set_new(entry("blk.0.attn_q_a"), "shape", json_pack("[i,i,i,i,i]",
									1, 1, 1, 1, 1));
	refuse_meta("shape is not 1 to 4 dimensions");
	json_object_set_new(entry("blk.0.attn_q_a"), "shape", json_pack("[i,i]", 0, 64));
	refuse_meta("shape[0] is not in [1, 2^40]");
	e = entry("blk.0.attn_q_a");
	json_object_set_new(e, "size", json_integer(json_integer_value(
						 json_object_get(e, "size")) + 64));
	refuse_meta("tensor blk.0.attn_q_a: size");
	e = entry("blk.0.attn_q_a");
	json_object_set_new(e, "offset", json_integer(json_integer_value(
						   json_object_get(e, "offset")) + 32));
	refuse_meta("offset");
	json_object_set_new(entry("output"), "offset", json_integer(1ll << 40));
	refuse_meta("tensor output: bytes");
	json_object_set_new(entry("blk.0.attn_q_b"), "offset", json_object_get(
				    entry("blk.0.attn_q_a"), "offset"));
	refuse_meta("overlaps");
	json_object_set_new(entry("blk.0.attn_q_b"), "name", json_string("blk.0.attn_q_a"));
	refuse_meta("blk.0.attn_q_a listed twice");
	json_object_set_new(entry("blk.0.attn_q_b"), "name", json_string("blk.0.bogus"));
	refuse_meta("model.meta: tensor blk.0.attn_q_b missing");
	json_object_set_new(entry("blk.0.attn_norm"), "type", json_string("f16"));
	json_object_set_new(entry("blk.0.attn_norm"), "size", json_integer(128));
	refuse_meta("tensor blk.0.attn_norm: type f16 not allowed here");
	json_object_set_new(entry("blk.0.attn_norm"), "shape", json_pack("[i]", 32));
	json_object_set_new(entry("blk.0.attn_norm"), "size", json_integer(128));
	refuse_meta("tensor blk.0.attn_norm: shape differs");
	json_object_set_new(entry("blk.0.attn_norm"), "crc32", json_string("xyz"));
	refuse_meta("crc32 is not 8 hexadecimal digits");
	json_object_set_new(entry("blk.0.attn_norm"), "extra", json_true());
	refuse_meta("unknown key \"extra\"");
	json_object_set_new(entry("blk.0.attn_norm"), "name", json_integer(3));
	refuse_meta("tensors[");
}

static void test_loader_extra_and_perm(void)
{
	json_t *p = entry("blk.0.attn_q_a.perm");

	json_object_set_new(p, "name", json_string("output.perm"));
	refuse_meta("tensor output.perm: no quantized matrix output");
	p = entry("blk.0.attn_q_a.perm");
	json_object_set_new(p, "shape", json_pack("[i]", 32));
	json_object_set_new(p, "size", json_integer(128));
	refuse_meta("tensor blk.0.attn_q_a.perm: not i32 of blk.0.attn_q_a's input");
	p = entry("blk.0.attn_q_a.perm");
	json_object_set_new(p, "type", json_string("f32"));
	refuse_meta("tensor blk.0.attn_q_a.perm: not i32");
	p = entry("blk.0.attn_q_a.perm");
	json_object_set_new(p, "name", json_string("blk.9.attn_norm"));
	json_object_set_new(p, "type", json_string("f32"));
	refuse_meta("unexpected tensor blk.9.attn_norm");
}

/* The MTP layer: checked as all others, handed out only when asked for,
 * and last; a model.meta without its keys is one without it. */
static void test_mtp(void)
{
	uint8_t **datas;
	size_t n, nmain, nmtp, i;
	ds_tdesc *d, *dm;
	ds_model m;
	ds_err err = { "" };
	json_t *saved;
	char p[160];
	int ok = 1;

	hp.n_mtp = 1;
	hp.mtp_shares_embd = 1;
	rm_dst();
	T_CHECK(write_model(&datas, &n, 0, NULL) == 0);
	T_CHECK(ds_arch_tensors(&hp, &d, &nmain, &err) == 0);
	T_CHECK(ds_arch_mtp_tensors(&hp, &dm, &nmtp, &err) == 0);
	/* blk.2.* (17 tensors of an MoE layer), enorm, hnorm, eh_proj,
	 * head_norm, head: not the shared embedding */
	T_CHECKF(nmtp == 22 && n == nmain + nmtp, "%zu MTP tensors", nmtp);
	T_CHECK(strcmp(dm[nmtp - 1].name, "mtp.head") == 0 &&
		strcmp(dm[2].name, "mtp.eh_proj") == 0 && dm[2].shape[1] == 128);
	T_CHECK(ds_model_load(&m, dst, 0, &err) == 0);
	T_CHECK(m.hp.n_mtp == 1 && m.n_tensors == nmain + 1 &&
		m.n_mtp_tensors == 0);
	T_CHECK(ds_model_tensor(&m, "mtp.eh_proj") == NULL &&
		ds_model_tensor(&m, "blk.2.attn_kv_a") == NULL &&
		ds_model_tensor(&m, "blk.1.attn_kv_a") != NULL);
	ds_model_free(&m);
	T_CHECK(ds_model_load(&m, dst, DS_LOAD_MTP, &err) == 0);
	T_CHECK(m.n_tensors == n + 1 && m.n_mtp_tensors == nmtp);
	for (i = 0; i < nmtp; i++) {
		const ds_tensor *t = ds_model_tensor(&m, dm[i].name);

		if (t == NULL || t < m.tensors + m.n_tensors - nmtp ||
		    memcmp(t->data, datas[nmain + i], t->size) != 0)
			ok = 0;
	}
	T_CHECK(ok);
	T_CHECK(ds_model_verify(&m, &err) == 0);
	ds_model_free(&m);
	snprintf(p, sizeof p, "%s/model.meta", dst);
	saved = meta;
	meta = json_load_file(p, 0, NULL);
	json_object_set_new(json_object_get(meta, "hparams"), "n_mtp", json_integer(2));
	save_meta(meta);
	T_CHECK(ds_model_load(&m, dst, 0, &err) == -1 &&
		strstr(err.msg, "hparams.n_mtp = 2 is outside [0, 1]") != NULL);
	json_object_set_new(json_object_get(meta, "hparams"), "n_mtp", json_integer(1));
	json_object_set_new(json_object_get(meta, "hparams"), "mtp_shares_embd",
			    json_integer(0));
	save_meta(meta);
	T_CHECK(ds_model_load(&m, dst, 0, &err) == -1 &&
		strstr(err.msg, "tensor mtp.embd missing") != NULL);
	json_object_set_new(json_object_get(meta, "hparams"), "mtp_shares_embd",
			    json_integer(1));
	json_object_set_new(json_object_get(meta, "hparams"), "n_mtp", json_integer(0));
	save_meta(meta);
	T_CHECK(ds_model_load(&m, dst, 0, &err) == -1 &&
		strstr(err.msg, "mtp_shares_embd or mtp_shares_head set without") != NULL);
	json_decref(meta);
	meta = saved;
	hp.n_mtp = 0;
	hp.mtp_shares_embd = 0;
	free(d);
	free(dm);
	free_datas(datas, n);
	rm_dst();
}

/* A model.meta written before the MTP keys existed loads as before. */
static void test_loader_no_mtp_keys(void)
{
	ds_model m;
	ds_err err = { "" };
	json_t *h = json_object_get(meta, "hparams");

	T_CHECK(json_object_get(h, "n_mtp") != NULL);
	json_object_del(h, "n_mtp");
	json_object_del(h, "mtp_shares_embd");
	json_object_del(h, "mtp_shares_head");
	save_meta(meta);
	T_CHECKF(ds_model_load(&m, dst, 0, &err) == 0, "%s", err.msg);
	T_CHECK(m.hp.n_mtp == 0);
	ds_model_free(&m);
	restore();
	save_meta(meta);
}

static void test_loader_files(void)
{
	char p[160];
	ds_model m;
	ds_err err;
	struct stat st;

	snprintf(p, sizeof p, "%s/model.bin", dst);
	T_CHECK(stat(p, &st) == 0);
	T_CHECK(truncate(p, st.st_size - 1) == 0);
	T_CHECK(ds_model_load(&m, dst, 0, &err) == -1);
	T_CHECKF(strstr(err.msg, "past the end of model.bin") != NULL, "%s", err.msg);
	T_CHECK(truncate(p, st.st_size) == 0);
	snprintf(p, sizeof p, "%s/model.meta", dst);
	{
		FILE *f = fopen(p, "w");

		fputs("{\"format\": ", f);
		fclose(f);
	}
	T_CHECK(ds_model_load(&m, dst, 0, &err) == -1);
	T_CHECKF(strstr(err.msg, "model.meta: line 1") != NULL, "%s", err.msg);
	save_meta(meta);
	T_CHECK(ds_model_load(&m, dst, DS_LOAD_POPULATE, &err) == 0);
	ds_model_free(&m);
	T_CHECK(ds_model_load(&m, "/nonexistent/dir", 0, &err) == -1);
}

int main(void)
{
	json_t *cfg;
	ds_err err;
	char p[160], cmd[128];
	int rc;

	seed = t_seed();
	strcpy(dir, "/tmp/ds-test-mf-XXXXXX");
	if (mkdtemp(dir) == NULL)
		return 1;
	snprintf(dst, sizeof dst, "%s/model", dir);
	cfg = json_loads(cfg_text, 0, NULL);
	rc = ds_hparams_from_hf_json(&hp, cfg, "config.json", &err);
	json_decref(cfg);
	if (rc) {
		printf("# %s\n", err.msg);
		return 1;
	}
	T_RUN(test_round_trip);
	T_RUN(test_verify_flip);
	T_RUN(test_writer_dst);
	T_RUN(test_writer_blocks);
	T_RUN(test_stale_tmp);
	{
		uint8_t **datas;
		size_t n;

		rm_dst();
		write_model(&datas, &n, 0, NULL);
		free_datas(datas, n);
		snprintf(p, sizeof p, "%s/model.meta", dst);
		meta = json_load_file(p, 0, NULL);
		good_meta = json_dumps(meta, 0);
	}
	T_RUN(test_loader_top);
	T_RUN(test_loader_tensors);
	T_RUN(test_loader_extra_and_perm);
	T_RUN(test_loader_no_mtp_keys);
	T_RUN(test_loader_files);
	T_RUN(test_mtp);
	json_decref(meta);
	free(good_meta);
	snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
	if (system(cmd) != 0)
		return 1;
	return t_done();
}
