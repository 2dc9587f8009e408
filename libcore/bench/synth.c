/*
 * synth.c - random-weight models of published shapes (synth.h).
 */
#include "synth.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>

#include "format/modelfile.h"
#include "host/sysinfo/sysinfo.h"

/* ---- the shapes ------------------------------------------------------------------------
 * The published config.json values of each model (Hugging Face
 * deepseek-ai/ and TinyLlama/ repositories; the DeepSeek ones as in
 * docs/deepseek.md section 3). */

#define YARN_707 "\"rope_scaling\": {\"type\": \"yarn\", \"factor\": 40, " \
	"\"original_max_position_embeddings\": 4096, \"beta_fast\": 32, "  \
	"\"beta_slow\": 1, \"mscale\": 0.707, \"mscale_all_dim\": 0.707}, "
#define MLA "\"kv_lora_rank\": 512, \"qk_nope_head_dim\": 128, "            \
	"\"qk_rope_head_dim\": 64, \"v_head_dim\": 128, "                  \
	"\"max_position_embeddings\": 163840, \"rope_theta\": 10000, "     \
	"\"rms_norm_eps\": 1e-06, \"hidden_act\": \"silu\", "              \
	"\"tie_word_embeddings\": false, \"moe_layer_freq\": 1, "

static const ds_synth_shape shapes[] = {
	{ "deepseek-v2-lite", "deepseek-ai/DeepSeek-V2-Lite-Chat (15.7B, 2.4B active)",
	  "{\"model_type\": \"deepseek_v2\", \"vocab_size\": 102400, "
	  "\"hidden_size\": 2048, \"intermediate_size\": 10944, "
	  "\"moe_intermediate_size\": 1408, \"num_hidden_layers\": 27, "
	  "\"num_attention_heads\": 16, \"num_key_value_heads\": 16, "
	  "\"n_shared_experts\": 2, \"n_routed_experts\": 64, "
	  "\"num_experts_per_tok\": 6, \"first_k_dense_replace\": 1, "
	  "\"q_lora_rank\": null, " MLA YARN_707
	  "\"topk_method\": \"greedy\", \"n_group\": 1, \"topk_group\": 1, "
	  "\"norm_topk_prob\": false, \"routed_scaling_factor\": 1.0, "
	  "\"scoring_func\": \"softmax\", \"bos_token_id\": 100000, "
	  "\"eos_token_id\": 100001}", 0 },
	{ "deepseek-v2", "deepseek-ai/DeepSeek-V2-Chat (236B, 21B active)",
	  "{\"model_type\": \"deepseek_v2\", \"vocab_size\": 102400, "
	  "\"hidden_size\": 5120, \"intermediate_size\": 12288, "
	  "\"moe_intermediate_size\": 1536, \"num_hidden_layers\": 60, "
	  "\"num_attention_heads\": 128, \"num_key_value_heads\": 128, "
	  "\"n_shared_experts\": 2, \"n_routed_experts\": 160, "
	  "\"num_experts_per_tok\": 6, \"first_k_dense_replace\": 1, "
	  "\"q_lora_rank\": 1536, " MLA YARN_707
	  "\"topk_method\": \"group_limited_greedy\", \"n_group\": 8, "
	  "\"topk_group\": 3, \"norm_topk_prob\": false, "
	  "\"routed_scaling_factor\": 16.0, \"scoring_func\": \"softmax\", "
	  "\"bos_token_id\": 100000, \"eos_token_id\": 100001}", 0 },
	{ "deepseek-v3", "deepseek-ai/DeepSeek-V3, R1 (671B, 37B active)",
	  "{\"model_type\": \"deepseek_v3\", \"vocab_size\": 129280, "
	  "\"hidden_size\": 7168, \"intermediate_size\": 18432, "
	  "\"moe_intermediate_size\": 2048, \"num_hidden_layers\": 61, "
	  "\"num_attention_heads\": 128, \"num_key_value_heads\": 128, "
	  "\"n_shared_experts\": 1, \"n_routed_experts\": 256, "
	  "\"num_experts_per_tok\": 8, \"first_k_dense_replace\": 3, "
	  "\"q_lora_rank\": 1536, " MLA
	  "\"rope_scaling\": {\"type\": \"yarn\", \"factor\": 40, "
	  "\"original_max_position_embeddings\": 4096, \"beta_fast\": 32, "
	  "\"beta_slow\": 1, \"mscale\": 1.0, \"mscale_all_dim\": 1.0}, "
	  "\"topk_method\": \"noaux_tc\", \"n_group\": 8, \"topk_group\": 4, "
	  "\"norm_topk_prob\": true, \"routed_scaling_factor\": 2.5, "
	  "\"scoring_func\": \"sigmoid\", \"bos_token_id\": 0, "
	  "\"eos_token_id\": 1}", 0 },
	{ "r1-distill-qwen-1.5b", "deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B",
	  "{\"model_type\": \"qwen2\", \"vocab_size\": 151936, "
	  "\"hidden_size\": 1536, \"intermediate_size\": 8960, "
	  "\"num_hidden_layers\": 28, \"num_attention_heads\": 12, "
	  "\"num_key_value_heads\": 2, \"max_position_embeddings\": 131072, "
	  "\"rms_norm_eps\": 1e-06, \"rope_theta\": 10000, "
	  "\"use_sliding_window\": false, \"tie_word_embeddings\": false, "
	  "\"hidden_act\": \"silu\", \"bos_token_id\": 151643, "
	  "\"eos_token_id\": 151643}", 0 },
	{ "r1-distill-qwen-7b", "deepseek-ai/DeepSeek-R1-Distill-Qwen-7B",
	  "{\"model_type\": \"qwen2\", \"vocab_size\": 152064, "
	  "\"hidden_size\": 3584, \"intermediate_size\": 18944, "
	  "\"num_hidden_layers\": 28, \"num_attention_heads\": 28, "
	  "\"num_key_value_heads\": 4, \"max_position_embeddings\": 131072, "
	  "\"rms_norm_eps\": 1e-06, \"rope_theta\": 10000, "
	  "\"use_sliding_window\": false, \"tie_word_embeddings\": false, "
	  "\"hidden_act\": \"silu\", \"bos_token_id\": 151643, "
	  "\"eos_token_id\": 151643}", 0 },
	{ "r1-distill-llama-8b", "deepseek-ai/DeepSeek-R1-Distill-Llama-8B",
	  "{\"model_type\": \"llama\", \"vocab_size\": 128256, "
	  "\"hidden_size\": 4096, \"intermediate_size\": 14336, "
	  "\"num_hidden_layers\": 32, \"num_attention_heads\": 32, "
	  "\"num_key_value_heads\": 8, \"max_position_embeddings\": 131072, "
	  "\"rms_norm_eps\": 1e-05, \"rope_theta\": 500000.0, "
	  "\"rope_scaling\": {\"factor\": 8.0, \"high_freq_factor\": 4.0, "
	  "\"low_freq_factor\": 1.0, \"original_max_position_embeddings\": 8192, "
	  "\"rope_type\": \"llama3\"}, \"tie_word_embeddings\": false, "
	  "\"hidden_act\": \"silu\", \"bos_token_id\": 128000, "
	  "\"eos_token_id\": 128001}", 0 },
	{ "deepseek-coder-1.3b", "deepseek-ai/deepseek-coder-1.3b-base",
	  "{\"model_type\": \"llama\", \"vocab_size\": 32256, "
	  "\"hidden_size\": 2048, \"intermediate_size\": 5504, "
	  "\"num_hidden_layers\": 24, \"num_attention_heads\": 16, "
	  "\"num_key_value_heads\": 16, \"max_position_embeddings\": 16384, "
	  "\"rms_norm_eps\": 1e-06, \"rope_theta\": 100000, "
	  "\"rope_scaling\": {\"factor\": 4.0, \"type\": \"linear\"}, "
	  "\"tie_word_embeddings\": false, \"hidden_act\": \"silu\", "
	  "\"bos_token_id\": 32013, \"eos_token_id\": 32014}", 0 },
	{ "tinyllama-1.1b", "TinyLlama/TinyLlama-1.1B-Chat-v1.0",
	  "{\"model_type\": \"llama\", \"vocab_size\": 32000, "
	  "\"hidden_size\": 2048, \"intermediate_size\": 5632, "
	  "\"num_hidden_layers\": 22, \"num_attention_heads\": 32, "
	  "\"num_key_value_heads\": 4, \"max_position_embeddings\": 2048, "
	  "\"rms_norm_eps\": 1e-05, \"rope_theta\": 10000.0, "
	  "\"tie_word_embeddings\": false, \"hidden_act\": \"silu\", "
	  "\"bos_token_id\": 1, \"eos_token_id\": 2}", 0 },
	{ "test-llama", "a tiny llama for the tests",
	  "{\"model_type\": \"llama\", \"vocab_size\": 512, \"hidden_size\": 64, "
	  "\"intermediate_size\": 128, \"num_hidden_layers\": 2, "
	  "\"num_attention_heads\": 4, \"num_key_value_heads\": 2, "
	  "\"max_position_embeddings\": 256, \"rms_norm_eps\": 1e-05, "
	  "\"bos_token_id\": 1, \"eos_token_id\": 2}", 1 },
	{ "test-deepseek2", "a tiny DeepSeek-V2 (MLA, MoE) for the tests",
	  "{\"model_type\": \"deepseek_v2\", \"vocab_size\": 512, "
	  "\"hidden_size\": 64, \"intermediate_size\": 128, "
	  "\"moe_intermediate_size\": 32, \"num_hidden_layers\": 3, "
	  "\"num_attention_heads\": 4, \"n_shared_experts\": 1, "
	  "\"n_routed_experts\": 8, \"num_experts_per_tok\": 2, "
	  "\"first_k_dense_replace\": 1, \"moe_layer_freq\": 1, "
	  "\"q_lora_rank\": null, \"kv_lora_rank\": 32, \"qk_nope_head_dim\": 16, "
	  "\"qk_rope_head_dim\": 8, \"v_head_dim\": 16, "
	  "\"max_position_embeddings\": 256, \"rms_norm_eps\": 1e-06, "
	  "\"topk_method\": \"greedy\", \"scoring_func\": \"softmax\", "
	  "\"bos_token_id\": 1, \"eos_token_id\": 2}", 1 },
};

const ds_synth_shape *ds_synth_shapes(size_t *n)
{
	*n = sizeof shapes / sizeof shapes[0];
	return shapes;
}

int ds_synth_hparams(const char *name, uint32_t layers, ds_hparams *hp,
		     ds_err *err)
{
	size_t i, n = sizeof shapes / sizeof shapes[0];
	json_error_t je;
	json_t *cfg;
	int rc;

	for (i = 0; i < n && strcmp(shapes[i].name, name) != 0; i++)
		;
	if (i == n)
		return ds_errf(err, "--synthetic %.64s: unknown shape "
			       "(--synthetic list shows them)", name);
	cfg = json_loads(shapes[i].config, 0, &je);
	DS_ASSERT(cfg != NULL);
	if (layers) {
		/* at least one MoE layer is left to a MoE model */
		json_t *fk = json_object_get(cfg, "first_k_dense_replace");

		json_object_set_new(cfg, "num_hidden_layers", json_integer(layers));
		if (json_is_integer(fk) && json_integer_value(fk) >= layers)
			json_object_set_new(cfg, "first_k_dense_replace",
					    json_integer(layers - 1));
	}
	rc = ds_hparams_from_hf_json(hp, cfg, shapes[i].name, err);
	json_decref(cfg);
	return rc;
}

/* ---- sizes ---------------------------------------------------------------------------- */

/* The runtime type of table entry d when the matrices are t. */
static ds_ttype tensor_type(const ds_tdesc *d, ds_ttype t)
{
	ds_ttype f32 = { .dt = DS_F32 }, bf16 = { .dt = DS_BF16 };

	if (d->kind == DS_TK_VECTOR || d->kind == DS_TK_ROUTER)
		return f32;
	if (d->kind == DS_TK_EMBED)
		return bf16;
	if (d->kind == DS_TK_OUTPUT && t.dt == DS_Q4)
		t.dt = DS_Q8;   /* as ds-convert --quantize q4 */
	return t;
}

static int desc_bytes(const ds_tdesc *d, ds_ttype t, uint64_t *bytes)
{
	return ds_tensor_bytes(tensor_type(d, t), d->ndim, d->shape, bytes);
}

int ds_synth_bytes(const ds_hparams *hp, ds_ttype t, uint64_t *bytes,
		   ds_err *err)
{
	ds_tdesc *d;
	size_t n, i;
	uint64_t b;

	if (ds_arch_tensors(hp, &d, &n, err))
		return -1;
	*bytes = 0;
	for (i = 0; i < n; i++) {
		if (desc_bytes(&d[i], t, &b) ||
		    ds_add_u64(ds_round_up(*bytes, DS_MODEL_ALIGN), b, bytes)) {
			free(d);
			return ds_errf(err, "%s: too large", d[i].name);
		}
	}
	free(d);
	return 0;
}

/* MemAvailable in bytes, 0 when it cannot be read. */
static uint64_t mem_available(void)
{
	char *text;
	uint64_t kib = 0;
	ds_err err;

	if (ds_sys_read("/proc/meminfo", 1 << 20, &text, NULL, &err) != 0)
		return 0;
	if (ds_meminfo_get(text, "MemAvailable", &kib) != 0)
		kib = 0;
	free(text);
	return kib << 10;
}

int ds_synth_check_fit(const char *dir, uint64_t bytes, uint64_t extra,
		       ds_err *err)
{
	struct statvfs sv;
	uint64_t disk, mem = mem_available(), margin = (uint64_t)256 << 20;

	if (statvfs(dir, &sv) != 0)
		return ds_errf(err, "%s: cannot read the free space", dir);
	disk = (uint64_t)sv.f_bavail * sv.f_frsize;
	if (bytes + margin > disk)
		return ds_errf(err, "%s: the model's %.2f GiB do not fit in the "
			       "%.2f GiB free there", dir, bytes / 1073741824.0,
			       disk / 1073741824.0);
	if (mem && bytes + extra + margin > mem)
		return ds_errf(err, "the model's %.2f GiB (and %.2f GiB of cache "
			       "and copies) do not fit in the %.2f GiB of "
			       "available memory (MemAvailable)",
			       bytes / 1073741824.0, extra / 1073741824.0,
			       mem / 1073741824.0);
	return 0;
}

/* ---- writing ---------------------------------------------------------------------------- */

typedef struct packed {
	ds_ttype t;
	uint64_t n, k, bytes;
	uint8_t *data;
} packed;

#define MAX_CACHE 16

typedef struct wctx {
	const ds_synth_opts *o;
	ds_mwriter w;
	uint64_t rng;
	packed cache[MAX_CACHE];
	int n_cache;
} wctx;

static uint64_t next(wctx *c)
{
	return ds_xorshift64s(&c->rng);
}

/* Uniform in [-1, 1). */
static float unif(wctx *c)
{
	return (float)((next(c) >> 40) * (2.0 / 16777216.0) - 1.0);
}

/* One row-set (rows <= 16 rows of k) of random weights of type t into
 * dst, scaled so that a row's product with an activation of RMS 1 has a
 * variance of about 1: the weights' variance is 1/k. */
static int fill_rowset(wctx *c, uint8_t *dst, ds_ttype t, uint64_t rows,
		       uint64_t k)
{
	uint64_t ng = t.group ? (k + t.group - 1) / t.group : 0, i, n = rows * k;
	void *src = malloc(n * 4 + 1);
	uint16_t *sc = malloc(rows * ng * 2 + 2);
	uint8_t *zero = malloc(rows * ng + 1);

	if (src == NULL || sc == NULL || zero == NULL) {
		free(src);
		free(sc);
		free(zero);
		return -1;
	}
	if (t.dt == DS_Q4) {          /* q - 8 in [-8, 7]: variance 21.25 */
		uint16_t s = ds_f32_to_f16((float)(1.0 / sqrt(21.25 * (double)k)));

		for (i = 0; i < n; i++)
			((uint8_t *)src)[i] = (uint8_t)(next(c) >> 60);
		for (i = 0; i < rows * ng; i++) {
			sc[i] = s;
			zero[i] = 8;
		}
		ds_pack_q4(dst, src, sc, zero, rows, k, t.group);
	} else if (t.dt == DS_Q8) {   /* uniform in [-127, 127]: 5376 */
		uint16_t s = ds_f32_to_f16((float)(1.0 / sqrt(5376.0 * (double)k)));

		for (i = 0; i < n; i++)
			((int8_t *)src)[i] = (int8_t)((int)((next(c) >> 32) % 255) - 127);
		for (i = 0; i < rows * ng; i++)
			sc[i] = s;
		ds_pack_q8(dst, src, sc, rows, k, t.group);
	} else {                      /* uniform in [-a, a]: a^2 / 3 */
		float a = (float)sqrt(3.0 / (double)k);

		for (i = 0; i < n; i++)
			((uint16_t *)src)[i] = ds_f32_to_bf16(a * unif(c));
		ds_pack_bf16(dst, src, rows, k);
	}
	free(src);
	free(sc);
	free(zero);
	return 0;
}

/* A random [n, k] matrix of type t (row-major f32 for routers), packed
 * once and reused by every tensor of the same type and shape. */
static const packed *matrix(wctx *c, ds_ttype t, uint64_t n, uint64_t k,
			    ds_err *err)
{
	uint64_t shape[2] = { n, k }, r, rs;
	packed *p;
	int i;

	for (i = 0; i < c->n_cache; i++) {
		p = &c->cache[i];
		if (p->t.dt == t.dt && p->t.group == t.group && p->n == n && p->k == k)
			return p;
	}
	DS_ASSERT(c->n_cache < MAX_CACHE);
	p = &c->cache[c->n_cache];
	p->t = t;
	p->n = n;
	p->k = k;
	if (ds_tensor_bytes(t, 2, shape, &p->bytes) ||
	    (p->data = ds_aligned_alloc(64, p->bytes, err)) == NULL) {
		ds_errf(err, "a [%llu, %llu] matrix: out of memory",
			(unsigned long long)n, (unsigned long long)k);
		return NULL;
	}
	c->n_cache++;
	if (t.dt == DS_F32) {
		float a = (float)sqrt(3.0 / (double)k);

		for (r = 0; r < n * k; r++)
			((float *)p->data)[r] = a * unif(c);
		return p;
	}
	rs = ds_rowset_bytes(t, k);
	for (r = 0; r < n; r += DS_ROWSET)
		if (fill_rowset(c, p->data + r / DS_ROWSET * rs, t,
				n - r < DS_ROWSET ? n - r : DS_ROWSET, k)) {
			ds_errf(err, "out of memory");
			return NULL;
		}
	return p;
}

/* Drop the cached matrix of a tensor that appears once (the embedding,
 * the output projection). */
static void drop_last(wctx *c)
{
	free(c->cache[--c->n_cache].data);
}

static int cancelled(const wctx *c, ds_err *err)
{
	if (c->o->cancel != NULL && *c->o->cancel)
		return ds_errf(err, "interrupted");
	return 0;
}

/* Norm weights 1, biases and the router's correction bias 0. */
static int write_vector(wctx *c, const ds_tdesc *d, ds_err *err)
{
	float *v = ds_calloc(d->shape[0], sizeof *v, err);
	uint64_t i;
	int rc;

	if (v == NULL)
		return -1;
	if (strstr(d->name, "norm") != NULL)
		for (i = 0; i < d->shape[0]; i++)
			v[i] = 1.0f;
	rc = ds_mwriter_write(&c->w, v, d->shape[0] * sizeof *v, err);
	free(v);
	return rc;
}

static int write_tensor(wctx *c, const ds_tdesc *d, ds_err *err)
{
	ds_ttype t = tensor_type(d, c->o->type);
	uint64_t e, n_mat = d->ndim == 3 ? d->shape[0] : 1;
	const packed *p;

	if (ds_mwriter_begin(&c->w, d->name, t, d->ndim, d->shape, err))
		return -1;
	if (d->kind == DS_TK_VECTOR)
		return write_vector(c, d, err) || ds_mwriter_end(&c->w, err) ? -1 : 0;
	p = matrix(c, t, d->shape[d->ndim - 2], d->shape[d->ndim - 1], err);
	if (p == NULL)
		return -1;
	for (e = 0; e < n_mat; e++)
		if (cancelled(c, err) ||
		    ds_mwriter_write(&c->w, p->data, p->bytes, err))
			return -1;
	if (d->kind == DS_TK_EMBED || d->kind == DS_TK_OUTPUT)
		drop_last(c);
	return ds_mwriter_end(&c->w, err);
}

static json_t *synth_meta(const ds_synth_opts *o)
{
	char tn[16];
	int q = o->type.dt == DS_Q4 || o->type.dt == DS_Q8;

	return json_pack("{s:s, s:i, s:s, s:o, s:{s:s, s:i, s:i, s:s}}",
			 "format", DS_MODEL_FORMAT, "version", DS_MODEL_VERSION,
			 "arch", ds_arch_name(o->hp.arch), "hparams",
			 ds_hparams_to_json(&o->hp), "quant", "source",
			 q ? "rtn" : "none", "bits",
			 (json_int_t)(o->type.dt == DS_Q4 ? 4 : q ? 8 : 0),
			 "group_size", (json_int_t)(q ? o->type.group : 0), "type",
			 ds_ttype_name(o->type, tn));
}

int ds_synth_write(const ds_synth_opts *o, uint64_t *bytes, ds_err *err)
{
	wctx c;
	ds_tdesc *d = NULL;
	ds_progress prog;
	json_t *meta = NULL;
	size_t n = 0, i;
	uint64_t total;
	int rc = -1;

	memset(&c, 0, sizeof c);
	c.o = o;
	c.rng = o->seed ? o->seed : 0x853C49E6748FEA9BULL;
	if (ds_synth_bytes(&o->hp, o->type, &total, err) ||
	    ds_arch_tensors(&o->hp, &d, &n, err) ||
	    ds_mwriter_open(&c.w, o->dst, 0, err)) {
		free(d);
		return -1;
	}
	ds_progress_init(&prog, o->progress, "writing", (uint32_t)n, total);
	for (i = 0; i < n; i++) {
		uint64_t b = 0;

		if (write_tensor(&c, &d[i], err))
			break;
		desc_bytes(&d[i], o->type, &b);
		ds_progress_add(&prog, 1, b);
	}
	if (i == n && (meta = synth_meta(o)) == NULL)
		ds_errf(err, "%s: out of memory", o->dst);
	else if (i == n && ds_mwriter_commit(&c.w, meta, err) == 0) {
		ds_progress_done(&prog);
		*bytes = total;
		rc = 0;
	}
	ds_mwriter_abort(&c.w);   /* the temporary, or what commit left */
	json_decref(meta);
	while (c.n_cache > 0)
		drop_last(&c);
	free(d);
	return rc;
}
