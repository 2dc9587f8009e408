/* hfconfig.c - config.json -> ds_hparams <-> model.meta "hparams". */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hfconfig.h"

#define MAX_CONFIG_BYTES (16u << 20)

static const char *const arch_names[] = { "llama", "qwen2", "deepseek2" };
static const char *const rope_style_names[] = { "neox", "interleaved" };
static const char *const scaling_names[] = { "none", "linear", "yarn",
					     "llama3" };
static const char *const scoring_names[] = { "none", "softmax", "sigmoid" };
static const char *const topk_names[] = { "none", "greedy",
					  "group_limited_greedy", "noaux_tc" };

#define NELEM(a) (sizeof(a) / sizeof((a)[0]))

static int lookup(const char *s, const char *const *names, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		if (strcmp(s, names[i]) == 0)
			return (int)i;
	return -1;
}

const char *ds_arch_name(enum ds_arch a)
{
	return (unsigned)a < NELEM(arch_names) ? arch_names[a] : "?";
}

int ds_arch_parse(const char *s, enum ds_arch *a)
{
	int i = lookup(s, arch_names, NELEM(arch_names));

	if (i < 0)
		return -1;
	*a = (enum ds_arch)i;
	return 0;
}

int ds_hparams_is_moe(const ds_hparams *hp, uint32_t layer)
{
	return hp->n_expert > 0 && layer >= hp->first_k_dense &&
	       hp->moe_layer_freq > 0 && layer % hp->moe_layer_freq == 0;
}

/* ---- reading JSON fields ------------------------------------------------------ */

/* A reader over one object; the first failure is kept in err. */
typedef struct rd {
	const json_t *o;
	const char *file, *obj;   /* obj: "" or "rope_scaling." for messages */
	ds_err *err;
	int bad;
} rd;

static void rd_fail(rd *r, const char *key, const char *what)
{
	if (!r->bad)
		ds_errf(r->err, "%s: %s%s %s", r->file, r->obj, key, what);
	r->bad = 1;
}

/* The value of key, or NULL when absent or JSON null. */
static const json_t *rd_get(rd *r, const char *key)
{
	const json_t *v = json_object_get(r->o, key);

	return v == NULL || json_is_null(v) ? NULL : v;
}

static uint32_t rd_u32(rd *r, const char *key, int required, uint32_t def,
		       uint32_t lo, uint32_t hi)
{
	const json_t *v = rd_get(r, key);
	json_int_t i;
	char msg[96];

	if (v == NULL) {
		if (required)
			rd_fail(r, key, "missing");
		return def;
	}
	if (!json_is_integer(v)) {
		rd_fail(r, key, "is not an integer");
		return def;
	}
	i = json_integer_value(v);
	if (i < (json_int_t)lo || i > (json_int_t)hi) {
		snprintf(msg, sizeof msg, "= %lld is outside [%u, %u]",
			 (long long)i, lo, hi);
		rd_fail(r, key, msg);
		return def;
	}
	return (uint32_t)i;
}

static double rd_num(rd *r, const char *key, int required, double def)
{
	const json_t *v = rd_get(r, key);
	double d;

	if (v == NULL) {
		if (required)
			rd_fail(r, key, "missing");
		return def;
	}
	if (!json_is_number(v)) {
		rd_fail(r, key, "is not a number");
		return def;
	}
	d = json_number_value(v);
	if (!isfinite(d)) {
		rd_fail(r, key, "is not finite");
		return def;
	}
	return d;
}

static int rd_bool(rd *r, const char *key, int def)
{
	const json_t *v = rd_get(r, key);

	if (v == NULL)
		return def;
	if (json_is_boolean(v))
		return json_is_true(v);
	if (json_is_integer(v) && (json_integer_value(v) == 0 ||
				   json_integer_value(v) == 1))
		return (int)json_integer_value(v);
	rd_fail(r, key, "is not a boolean");
	return def;
}

static const char *rd_str(rd *r, const char *key, int required,
			  const char *def)
{
	const json_t *v = rd_get(r, key);

	if (v == NULL) {
		if (required)
			rd_fail(r, key, "missing");
		return def;
	}
	if (!json_is_string(v)) {
		rd_fail(r, key, "is not a string");
		return def;
	}
	return json_string_value(v);
}

/* A string key that must be one of names. */
static int rd_enum(rd *r, const char *key, int required, int def,
		   const char *const *names, size_t n)
{
	const char *s = rd_str(r, key, required, NULL);
	int i;

	if (s == NULL)
		return def;
	i = lookup(s, names, n);
	if (i < 0) {
		char msg[128];

		snprintf(msg, sizeof msg, "\"%.60s\" is not supported", s);
		rd_fail(r, key, msg);
		return def;
	}
	return i;
}

/* ---- config.json ----------------------------------------------------------------- */

static const char *const rope_keys[] = {
	"type", "rope_type", "factor", "original_max_position_embeddings",
	"beta_fast", "beta_slow", "mscale", "mscale_all_dim",
	"low_freq_factor", "high_freq_factor",
};

static void hf_rope_scaling(ds_hparams *hp, rd *top)
{
	rd r = *top;
	const json_t *o = rd_get(top, "rope_scaling"), *v;
	const char *type, *key;

	if (o == NULL || top->bad)
		return;
	if (!json_is_object(o)) {
		rd_fail(top, "rope_scaling", "is not an object");
		return;
	}
	r.o = o;
	r.obj = "rope_scaling.";
	json_object_foreach((json_t *)o, key, v)
		if (lookup(key, rope_keys, NELEM(rope_keys)) < 0)
			rd_fail(&r, key, "is not supported");
	type = rd_str(&r, "rope_type", 0, NULL);
	if (type == NULL)
		type = rd_str(&r, "type", 1, "default");
	if (r.bad) {
		top->bad = 1;
		return;
	}
	if (strcmp(type, "default") == 0)
		return;
	if (strcmp(type, "linear") == 0) {
		hp->rope_scaling.type = DS_ROPE_SCALING_LINEAR;
	} else if (strcmp(type, "yarn") == 0) {
		hp->rope_scaling.type = DS_ROPE_SCALING_YARN;
		hp->rope_scaling.original_ctx = rd_u32(
			&r, "original_max_position_embeddings", 1, 0, 1, 1u << 30);
		hp->rope_scaling.beta_fast = rd_num(&r, "beta_fast", 0, 32);
		hp->rope_scaling.beta_slow = rd_num(&r, "beta_slow", 0, 1);
		hp->rope_scaling.mscale = rd_num(&r, "mscale", 0, 1);
		hp->rope_scaling.mscale_all_dim = rd_num(&r, "mscale_all_dim", 0, 0);
	} else if (strcmp(type, "llama3") == 0) {
		hp->rope_scaling.type = DS_ROPE_SCALING_LLAMA3;
		hp->rope_scaling.original_ctx = rd_u32(
			&r, "original_max_position_embeddings", 1, 0, 1, 1u << 30);
		hp->rope_scaling.low_freq_factor = rd_num(&r, "low_freq_factor", 1, 0);
		hp->rope_scaling.high_freq_factor = rd_num(&r, "high_freq_factor", 1, 0);
	} else {
		char msg[96];

		snprintf(msg, sizeof msg, "\"%.40s\" is not supported", type);
		rd_fail(&r, "type", msg);
	}
	hp->rope_scaling.factor = rd_num(&r, "factor", 1, 1);
	if (r.bad)
		top->bad = 1;
}

/* bos_token_id (an integer or null) and eos_token_id (also a list). */
static void hf_token_ids(ds_hparams *hp, rd *r)
{
	const json_t *e = rd_get(r, "eos_token_id");
	size_t i;

	hp->bos_token_id = -1;
	hp->eos_token_id = -1;
	if (rd_get(r, "bos_token_id") != NULL)
		hp->bos_token_id = rd_u32(r, "bos_token_id", 0, 0, 0, 1u << 30);
	if (e == NULL)
		return;
	if (json_is_integer(e)) {
		hp->eos_ids[0] = rd_u32(r, "eos_token_id", 0, 0, 0, 1u << 30);
		hp->n_eos = 1;
	} else if (json_is_array(e) && json_array_size(e) >= 1 &&
		   json_array_size(e) <= DS_MAX_EOS) {
		for (i = 0; i < json_array_size(e); i++) {
			const json_t *x = json_array_get(e, i);

			if (!json_is_integer(x) || json_integer_value(x) < 0 ||
			    json_integer_value(x) > (1 << 30)) {
				rd_fail(r, "eos_token_id", "has a bad entry");
				return;
			}
			hp->eos_ids[hp->n_eos++] = json_integer_value(x);
		}
	} else {
		rd_fail(r, "eos_token_id", "is not an integer or a list of 1 to 8");
		return;
	}
	hp->eos_token_id = hp->eos_ids[0];
}

/* Fields every architecture has. */
static void hf_common(ds_hparams *hp, rd *r)
{
	const char *act = rd_str(r, "hidden_act", 0, "silu");

	if (strcmp(act, "silu") != 0)
		rd_fail(r, "hidden_act", "is not \"silu\"");
	hp->n_vocab = rd_u32(r, "vocab_size", 1, 0, 1, 1u << 22);
	hp->n_embd = rd_u32(r, "hidden_size", 1, 0, 1, 1u << 16);
	hp->n_layer = rd_u32(r, "num_hidden_layers", 1, 0, 1, 1024);
	hp->n_head = rd_u32(r, "num_attention_heads", 1, 0, 1, 1024);
	hp->n_head_kv = rd_u32(r, "num_key_value_heads", 0, hp->n_head, 1, 1024);
	hp->n_ff = rd_u32(r, "intermediate_size", 1, 0, 1, 1u << 20);
	hp->n_ctx_train = rd_u32(r, "max_position_embeddings", 1, 0, 1, 1u << 30);
	hp->norm_eps = rd_num(r, "rms_norm_eps", 1, 0);
	hp->rope_theta = rd_num(r, "rope_theta", 0, 10000);
	hp->tie_embeddings = rd_bool(r, "tie_word_embeddings", 0);
	hf_rope_scaling(hp, r);
	hf_token_ids(hp, r);
}

static void hf_dense(ds_hparams *hp, rd *r, int qwen2)
{
	hp->rope_style = DS_ROPE_NEOX;
	hp->head_dim = rd_u32(r, "head_dim", 0,
			      hp->n_head ? hp->n_embd / hp->n_head : 0, 1, 1024);
	if (rd_get(r, "head_dim") == NULL && hp->n_head &&
	    hp->n_embd % hp->n_head)
		rd_fail(r, "hidden_size", "is not a multiple of num_attention_heads");
	if (qwen2) {
		hp->qkv_bias = 1;
		if (rd_bool(r, "use_sliding_window", 0))
			rd_fail(r, "use_sliding_window", "is true: sliding-window "
				"attention is not supported");
	} else {
		if (rd_bool(r, "attention_bias", 0))
			rd_fail(r, "attention_bias", "is true: not supported");
		if (rd_bool(r, "mlp_bias", 0))
			rd_fail(r, "mlp_bias", "is true: not supported");
	}
}

static void hf_deepseek(ds_hparams *hp, rd *r, int v3)
{
	const char *s;
	int topk;

	hp->rope_style = DS_ROPE_INTERLEAVED;
	if (rd_bool(r, "attention_bias", 0))
		rd_fail(r, "attention_bias", "is true: not supported");
	hp->q_lora_rank = rd_u32(r, "q_lora_rank", 0, 0, 0, 1u << 16);
	hp->kv_lora_rank = rd_u32(r, "kv_lora_rank", 1, 0, 1, 1u << 16);
	hp->qk_nope_head_dim = rd_u32(r, "qk_nope_head_dim", 1, 0, 1, 1024);
	hp->qk_rope_head_dim = rd_u32(r, "qk_rope_head_dim", 1, 0, 2, 1024);
	hp->v_head_dim = rd_u32(r, "v_head_dim", 1, 0, 1, 1024);
	hp->head_dim = hp->qk_nope_head_dim + hp->qk_rope_head_dim;
	/* the MTP layers follow the last: V3 ships one, and a checkpoint of
	 * V2's architecture may carry one (testdata/demo's) */
	hp->n_mtp = rd_u32(r, "num_nextn_predict_layers", 0, 0, 0, DS_MAX_MTP);
	hp->n_expert = rd_u32(r, "n_routed_experts", 0, 0, 0, 4096);
	if (hp->n_expert == 0)
		return;
	hp->n_expert_used = rd_u32(r, "num_experts_per_tok", 1, 0, 1, 4096);
	hp->n_expert_shared = rd_u32(r, "n_shared_experts", 0, 0, 0, 64);
	hp->n_ff_exp = rd_u32(r, "moe_intermediate_size", 1, 0, 1, 1u << 20);
	hp->first_k_dense = rd_u32(r, "first_k_dense_replace", 0, 0, 0, 1024);
	hp->moe_layer_freq = rd_u32(r, "moe_layer_freq", 0, 1, 1, 1024);
	hp->expert_scoring = (enum ds_scoring)(1 + rd_enum(
		r, "scoring_func", 0, v3 ? 1 : 0, scoring_names + 1,
		NELEM(scoring_names) - 1));
	/* older remote code spelled greedy "gready" */
	s = rd_str(r, "topk_method", 0, NULL);
	if (s != NULL && strcmp(s, "gready") == 0)
		topk = DS_TOPK_GREEDY;
	else
		topk = 1 + rd_enum(r, "topk_method", 0, v3 ? 2 : 0,
				   topk_names + 1, NELEM(topk_names) - 1);
	hp->topk_method = (enum ds_topk)topk;
	hp->n_group = rd_u32(r, "n_group", 0, v3 ? 8 : 1, 1, 4096);
	hp->topk_group = rd_u32(r, "topk_group", 0, v3 ? 4 : 1, 1, 4096);
	hp->norm_topk_prob = rd_bool(r, "norm_topk_prob", v3);
	hp->routed_scaling_factor = rd_num(r, "routed_scaling_factor", 0,
					   v3 ? 2.5 : 1.0);
}

int ds_hparams_from_hf_json(ds_hparams *hp, const json_t *cfg,
			    const char *file, ds_err *err)
{
	rd r = { cfg, file, "", err, 0 };
	const char *mt;

	memset(hp, 0, sizeof *hp);
	if (!json_is_object(cfg))
		return ds_errf(err, "%s: not a JSON object", file);
	mt = rd_str(&r, "model_type", 1, NULL);
	if (mt == NULL)
		return -1;
	if (strcmp(mt, "llama") == 0)
		hp->arch = DS_ARCH_LLAMA;
	else if (strcmp(mt, "qwen2") == 0)
		hp->arch = DS_ARCH_QWEN2;
	else if (strcmp(mt, "deepseek_v2") == 0 || strcmp(mt, "deepseek_v3") == 0)
		hp->arch = DS_ARCH_DEEPSEEK2;
	else
		return ds_errf(err, "%s: model_type \"%.64s\" is not supported "
			       "(llama, qwen2, deepseek_v2, deepseek_v3)", file, mt);
	hf_common(hp, &r);
	if (hp->arch == DS_ARCH_DEEPSEEK2)
		hf_deepseek(hp, &r, strcmp(mt, "deepseek_v3") == 0);
	else
		hf_dense(hp, &r, hp->arch == DS_ARCH_QWEN2);
	if (r.bad)
		return -1;
	return ds_hparams_check(hp, file, err);
}

int ds_hparams_from_hf(ds_hparams *hp, const char *path, ds_err *err)
{
	const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
	json_error_t jerr;
	json_t *cfg;
	char *text;
	int rc;

	if (ds_read_file(path, MAX_CONFIG_BYTES, &text, NULL, err))
		return -1;
	cfg = json_loads(text, JSON_REJECT_DUPLICATES, &jerr);
	free(text);
	if (cfg == NULL)
		return ds_errf(err, "%s: line %d: %s", base, jerr.line, jerr.text);
	rc = ds_hparams_from_hf_json(hp, cfg, base, err);
	json_decref(cfg);
	return rc;
}

/* ---- consistency ---------------------------------------------------------------- */

#define CHECK(cond, ...)                                                    \
	do {                                                                \
		if (!(cond))                                                \
			return ds_errf(err, __VA_ARGS__);                   \
	} while (0)

static int check_rope(const ds_hparams *hp, const char *file, ds_err *err)
{
	const __typeof__(hp->rope_scaling) *s = &hp->rope_scaling;

	CHECK(hp->rope_theta > 0, "%s: rope_theta %g is not positive", file,
	      hp->rope_theta);
	if (s->type == DS_ROPE_SCALING_NONE)
		return 0;
	CHECK(s->factor > 0 && s->factor <= 1e6, "%s: rope_scaling.factor %g is "
	      "not in (0, 1e6]", file, s->factor);
	if (s->type == DS_ROPE_SCALING_YARN || s->type == DS_ROPE_SCALING_LLAMA3)
		CHECK(s->original_ctx >= 1, "%s: rope_scaling: "
		      "original_max_position_embeddings missing", file);
	if (s->type == DS_ROPE_SCALING_YARN)
		CHECK(s->beta_fast > 0 && s->beta_slow > 0 &&
		      s->beta_fast >= s->beta_slow, "%s: rope_scaling: beta_fast %g, "
		      "beta_slow %g are not positive with fast >= slow", file,
		      s->beta_fast, s->beta_slow);
	if (s->type == DS_ROPE_SCALING_LLAMA3)
		CHECK(s->low_freq_factor > 0 &&
		      s->high_freq_factor > s->low_freq_factor, "%s: rope_scaling: "
		      "need 0 < low_freq_factor < high_freq_factor", file);
	return 0;
}

static int check_moe(const ds_hparams *hp, const char *file, ds_err *err)
{
	if (hp->n_expert == 0)
		return 0;
	CHECK(hp->n_expert_used >= 1 && hp->n_expert_used <= hp->n_expert,
	      "%s: num_experts_per_tok %u is not in [1, %u]", file,
	      hp->n_expert_used, hp->n_expert);
	CHECK(hp->n_ff_exp >= 1, "%s: moe_intermediate_size is 0", file);
	CHECK(hp->moe_layer_freq >= 1, "%s: moe_layer_freq is 0", file);
	CHECK(hp->first_k_dense <= hp->n_layer, "%s: first_k_dense_replace %u is "
	      "more than num_hidden_layers %u", file, hp->first_k_dense,
	      hp->n_layer);
	CHECK(hp->n_group >= 1 && hp->n_expert % hp->n_group == 0,
	      "%s: n_group %u does not divide n_routed_experts %u", file,
	      hp->n_group, hp->n_expert);
	CHECK(hp->topk_group >= 1 && hp->topk_group <= hp->n_group,
	      "%s: topk_group %u is not in [1, n_group %u]", file, hp->topk_group,
	      hp->n_group);
	CHECK(hp->expert_scoring != DS_SCORING_NONE &&
	      hp->topk_method != DS_TOPK_NONE,
	      "%s: MoE without a scoring function or top-k method", file);
	if (hp->topk_method == DS_TOPK_NOAUX_TC)
		CHECK(hp->n_expert / hp->n_group >= 2, "%s: noaux_tc needs at least 2 "
		      "experts per group", file);
	if (hp->topk_method != DS_TOPK_GREEDY)
		CHECK((uint64_t)hp->topk_group * (hp->n_expert / hp->n_group) >=
		      hp->n_expert_used, "%s: topk_group %u groups of %u experts "
		      "cannot supply %u experts", file, hp->topk_group,
		      hp->n_expert / hp->n_group, hp->n_expert_used);
	CHECK(hp->routed_scaling_factor > 0, "%s: routed_scaling_factor %g is not "
	      "positive", file, hp->routed_scaling_factor);
	return 0;
}

int ds_hparams_check(const ds_hparams *hp, const char *file, ds_err *err)
{
	uint32_t i;

	CHECK((unsigned)hp->arch < NELEM(arch_names), "%s: unknown architecture",
	      file);
	CHECK(hp->n_vocab >= 1 && hp->n_embd >= 1 && hp->n_layer >= 1 &&
	      hp->n_head >= 1 && hp->n_ff >= 1 && hp->n_ctx_train >= 1,
	      "%s: a dimension is 0", file);
	CHECK(hp->n_head_kv >= 1 && hp->n_head_kv <= hp->n_head &&
	      hp->n_head % hp->n_head_kv == 0, "%s: num_key_value_heads %u does "
	      "not divide num_attention_heads %u", file, hp->n_head_kv, hp->n_head);
	if (hp->arch == DS_ARCH_DEEPSEEK2) {
		CHECK(hp->kv_lora_rank >= 1 && hp->qk_nope_head_dim >= 1 &&
		      hp->v_head_dim >= 1, "%s: an MLA dimension is 0", file);
		CHECK(hp->qk_rope_head_dim >= 2 && hp->qk_rope_head_dim % 2 == 0,
		      "%s: qk_rope_head_dim %u is not even", file,
		      hp->qk_rope_head_dim);
		CHECK(hp->head_dim == hp->qk_nope_head_dim + hp->qk_rope_head_dim,
		      "%s: head_dim is not qk_nope_head_dim + qk_rope_head_dim", file);
	} else {
		CHECK(hp->q_lora_rank == 0 && hp->kv_lora_rank == 0 &&
		      hp->n_expert == 0, "%s: MLA or MoE fields set for %s", file,
		      ds_arch_name(hp->arch));
	}
	CHECK(hp->head_dim >= 2 && hp->head_dim % 2 == 0, "%s: head dimension %u "
	      "is not even", file, hp->head_dim);
	CHECK(hp->norm_eps > 0 && hp->norm_eps < 1, "%s: rms_norm_eps %g is not in "
	      "(0, 1)", file, hp->norm_eps);
	if (check_rope(hp, file, err) || check_moe(hp, file, err))
		return -1;
	CHECK(hp->bos_token_id < (int64_t)hp->n_vocab, "%s: bos_token_id %lld is "
	      "not below vocab_size %u", file, (long long)hp->bos_token_id,
	      hp->n_vocab);
	CHECK(hp->n_eos <= DS_MAX_EOS, "%s: too many eos ids", file);
	CHECK(hp->n_mtp <= DS_MAX_MTP && (hp->n_mtp == 0 ||
	      hp->arch == DS_ARCH_DEEPSEEK2), "%s: %u MTP layers (at most %d, "
	      "DeepSeek only)", file, hp->n_mtp, DS_MAX_MTP);
	CHECK(hp->n_mtp > 0 || (!hp->mtp_shares_embd && !hp->mtp_shares_head),
	      "%s: mtp_shares_embd or mtp_shares_head set without MTP layers",
	      file);
	for (i = 0; i < hp->n_eos; i++)
		CHECK(hp->eos_ids[i] >= 0 && hp->eos_ids[i] < (int64_t)hp->n_vocab,
		      "%s: eos_token_id %lld is not below vocab_size %u", file,
		      (long long)hp->eos_ids[i], hp->n_vocab);
	return 0;
}

/* ---- model.meta "hparams" ----------------------------------------------------- */

/* The integer keys, in the order they are written. */
#define U32_KEYS(X)                                                         \
	X(n_vocab) X(n_embd) X(n_layer) X(n_head) X(n_head_kv) X(head_dim)  \
	X(n_ff) X(n_ctx_train) X(q_lora_rank) X(kv_lora_rank)               \
	X(qk_nope_head_dim) X(qk_rope_head_dim) X(v_head_dim) X(n_expert)   \
	X(n_expert_used) X(n_expert_shared) X(n_ff_exp) X(first_k_dense)    \
	X(moe_layer_freq) X(n_group) X(topk_group)

json_t *ds_hparams_to_json(const ds_hparams *hp)
{
	const __typeof__(hp->rope_scaling) *s = &hp->rope_scaling;
	json_t *o = json_object(), *eos = json_array();
	uint32_t i;

#define SET_U32(k) json_object_set_new(o, #k, json_integer(hp->k));
	U32_KEYS(SET_U32)
#undef SET_U32
	json_object_set_new(o, "norm_eps", json_real(hp->norm_eps));
	json_object_set_new(o, "rope_theta", json_real(hp->rope_theta));
	json_object_set_new(o, "rope_style",
			    json_string(rope_style_names[hp->rope_style]));
	json_object_set_new(o, "rope_scaling", json_pack(
		"{s:s, s:f, s:i, s:f, s:f, s:f, s:f, s:f, s:f}",
		"type", scaling_names[s->type], "factor", s->factor,
		"original_ctx", (json_int_t)s->original_ctx,
		"beta_fast", s->beta_fast, "beta_slow", s->beta_slow,
		"mscale", s->mscale, "mscale_all_dim", s->mscale_all_dim,
		"low_freq_factor", s->low_freq_factor,
		"high_freq_factor", s->high_freq_factor));
	json_object_set_new(o, "tie_embeddings", json_integer(hp->tie_embeddings));
	json_object_set_new(o, "qkv_bias", json_integer(hp->qkv_bias));
	json_object_set_new(o, "expert_scoring",
			    json_string(scoring_names[hp->expert_scoring]));
	json_object_set_new(o, "topk_method",
			    json_string(topk_names[hp->topk_method]));
	json_object_set_new(o, "norm_topk_prob", json_integer(hp->norm_topk_prob));
	json_object_set_new(o, "routed_scaling_factor",
			    json_real(hp->routed_scaling_factor));
	json_object_set_new(o, "bos_token_id", json_integer(hp->bos_token_id));
	json_object_set_new(o, "eos_token_id", json_integer(hp->eos_token_id));
	for (i = 0; i < hp->n_eos; i++)
		json_array_append_new(eos, json_integer(hp->eos_ids[i]));
	json_object_set_new(o, "eos_token_ids", eos);
	json_object_set_new(o, "n_mtp", json_integer(hp->n_mtp));
	json_object_set_new(o, "mtp_shares_embd", json_integer(hp->mtp_shares_embd));
	json_object_set_new(o, "mtp_shares_head", json_integer(hp->mtp_shares_head));
	return o;
}

static const char *const meta_keys[] = {
	"n_vocab", "n_embd", "n_layer", "n_head", "n_head_kv", "head_dim",
	"n_ff", "n_ctx_train", "q_lora_rank", "kv_lora_rank",
	"qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "n_expert",
	"n_expert_used", "n_expert_shared", "n_ff_exp", "first_k_dense",
	"moe_layer_freq", "n_group", "topk_group", "norm_eps", "rope_theta",
	"rope_style", "rope_scaling", "tie_embeddings", "qkv_bias",
	"expert_scoring", "topk_method", "norm_topk_prob",
	"routed_scaling_factor", "bos_token_id", "eos_token_id",
	"eos_token_ids", "n_mtp", "mtp_shares_embd", "mtp_shares_head",
};

/* Keys a model.meta written before they existed lacks: absent means 0. */
static const char *const meta_optional_keys[] = {
	"n_mtp", "mtp_shares_embd", "mtp_shares_head",
};

static const char *const meta_rope_keys[] = {
	"type", "factor", "original_ctx", "beta_fast", "beta_slow", "mscale",
	"mscale_all_dim", "low_freq_factor", "high_freq_factor",
};

/* Every key present but the optional ones, no other key. */
static int exact_keys(rd *r, const char *const *keys, size_t n,
		      const char *const *optional, size_t n_optional)
{
	const char *key;
	json_t *v;
	size_t i;

	json_object_foreach((json_t *)r->o, key, v)
		if (lookup(key, keys, n) < 0)
			rd_fail(r, key, "is not a known key");
	for (i = 0; i < n; i++)
		if (json_object_get(r->o, keys[i]) == NULL &&
		    lookup(keys[i], optional, n_optional) < 0)
			rd_fail(r, keys[i], "missing");
	return r->bad ? -1 : 0;
}

static int64_t rd_id(rd *r, const char *key)
{
	const json_t *v = json_object_get(r->o, key);

	if (json_is_integer(v) && json_integer_value(v) >= -1 &&
	    json_integer_value(v) <= (1 << 30))
		return json_integer_value(v);
	rd_fail(r, key, "is not a token id or -1");
	return -1;
}

static void meta_rope(ds_hparams *hp, rd *top)
{
	__typeof__(hp->rope_scaling) *s = &hp->rope_scaling;
	rd r = *top;

	r.o = json_object_get(top->o, "rope_scaling");
	r.obj = "hparams.rope_scaling.";
	if (!json_is_object(r.o)) {
		rd_fail(top, "rope_scaling", "is not an object");
		return;
	}
	if (exact_keys(&r, meta_rope_keys, NELEM(meta_rope_keys), NULL, 0) == 0) {
		s->type = (enum ds_rope_scaling)rd_enum(&r, "type", 1, 0,
			scaling_names, NELEM(scaling_names));
		s->factor = rd_num(&r, "factor", 1, 0);
		s->original_ctx = rd_u32(&r, "original_ctx", 1, 0, 0, 1u << 30);
		s->beta_fast = rd_num(&r, "beta_fast", 1, 0);
		s->beta_slow = rd_num(&r, "beta_slow", 1, 0);
		s->mscale = rd_num(&r, "mscale", 1, 0);
		s->mscale_all_dim = rd_num(&r, "mscale_all_dim", 1, 0);
		s->low_freq_factor = rd_num(&r, "low_freq_factor", 1, 0);
		s->high_freq_factor = rd_num(&r, "high_freq_factor", 1, 0);
	}
	if (r.bad)
		top->bad = 1;
}

static void meta_eos(ds_hparams *hp, rd *r)
{
	const json_t *a = json_object_get(r->o, "eos_token_ids");
	size_t i;

	if (!json_is_array(a) || json_array_size(a) > DS_MAX_EOS) {
		rd_fail(r, "eos_token_ids", "is not a list of at most 8 ids");
		return;
	}
	for (i = 0; i < json_array_size(a); i++) {
		const json_t *x = json_array_get(a, i);

		if (!json_is_integer(x) || json_integer_value(x) < 0) {
			rd_fail(r, "eos_token_ids", "has a bad entry");
			return;
		}
		hp->eos_ids[hp->n_eos++] = json_integer_value(x);
	}
	if (hp->eos_token_id != (hp->n_eos ? hp->eos_ids[0] : -1))
		rd_fail(r, "eos_token_id", "is not the first of eos_token_ids");
}

int ds_hparams_from_json(ds_hparams *hp, const json_t *obj, const char *file,
			 ds_err *err)
{
	rd r = { obj, file, "hparams.", err, 0 };
	enum ds_arch arch = hp->arch; /* set by the caller from "arch" */

	memset(hp, 0, sizeof *hp);
	hp->arch = arch;
	if (!json_is_object(obj))
		return ds_errf(err, "%s: hparams is not an object", file);
	if (exact_keys(&r, meta_keys, NELEM(meta_keys), meta_optional_keys,
		       NELEM(meta_optional_keys)))
		return -1;
#define GET_U32(k) hp->k = rd_u32(&r, #k, 1, 0, 0, 1u << 30);
	U32_KEYS(GET_U32)
#undef GET_U32
	hp->norm_eps = rd_num(&r, "norm_eps", 1, 0);
	hp->rope_theta = rd_num(&r, "rope_theta", 1, 0);
	hp->rope_style = (enum ds_rope_style)rd_enum(&r, "rope_style", 1, 0,
		rope_style_names, NELEM(rope_style_names));
	meta_rope(hp, &r);
	hp->tie_embeddings = rd_bool(&r, "tie_embeddings", 0);
	hp->qkv_bias = rd_bool(&r, "qkv_bias", 0);
	hp->expert_scoring = (enum ds_scoring)rd_enum(&r, "expert_scoring", 1, 0,
		scoring_names, NELEM(scoring_names));
	hp->topk_method = (enum ds_topk)rd_enum(&r, "topk_method", 1, 0,
		topk_names, NELEM(topk_names));
	hp->norm_topk_prob = rd_bool(&r, "norm_topk_prob", 0);
	hp->routed_scaling_factor = rd_num(&r, "routed_scaling_factor", 1, 0);
	hp->bos_token_id = rd_id(&r, "bos_token_id");
	hp->eos_token_id = rd_id(&r, "eos_token_id");
	hp->n_mtp = rd_u32(&r, "n_mtp", 0, 0, 0, DS_MAX_MTP);
	hp->mtp_shares_embd = rd_bool(&r, "mtp_shares_embd", 0);
	hp->mtp_shares_head = rd_bool(&r, "mtp_shares_head", 0);
	if (!r.bad)
		meta_eos(hp, &r);
	if (r.bad)
		return -1;
	return ds_hparams_check(hp, file, err);
}

/* ---- tensor table -------------------------------------------------------------- */

typedef struct tab {
	ds_tdesc *d;
	size_t n, cap;
	int oom;
} tab;

static ds_tdesc *tab_add(tab *t, enum ds_tkind kind, const char *hf,
			 int ndim, uint64_t a, uint64_t b, uint64_t c,
			 const char *fmt, ...) __attribute__((format(printf, 8, 9)));

static ds_tdesc *tab_add(tab *t, enum ds_tkind kind, const char *hf,
			 int ndim, uint64_t a, uint64_t b, uint64_t c,
			 const char *fmt, ...)
{
	ds_tdesc *d;
	va_list ap;

	if (t->n == t->cap) {
		size_t cap = t->cap ? 2 * t->cap : 64;
		ds_tdesc *nd = realloc(t->d, cap * sizeof *nd);

		if (nd == NULL) {
			t->oom = 1;
			return NULL;
		}
		t->d = nd;
		t->cap = cap;
	}
	d = &t->d[t->n++];
	memset(d, 0, sizeof *d);
	va_start(ap, fmt);
	vsnprintf(d->name, sizeof d->name, fmt, ap);
	va_end(ap);
	snprintf(d->hf, sizeof d->hf, "%s", hf);
	d->kind = kind;
	d->ndim = ndim;
	d->shape[0] = a;
	d->shape[1] = b;
	d->shape[2] = c;
	return d;
}

/* Shorthands for one layer: the HF name is the layer prefix + rest. */
#define MAT(nm, rest, n, k)                                                 \
	do {                                                                \
		snprintf(hf, sizeof hf, "%s%s", pre, rest);                 \
		tab_add(t, DS_TK_MATRIX, hf, 2, n, k, 0, "blk.%u." nm, L);  \
	} while (0)
#define VEC(nm, rest, n)                                                    \
	do {                                                                \
		snprintf(hf, sizeof hf, "%s%s", pre, rest);                 \
		tab_add(t, DS_TK_VECTOR, hf, 1, n, 0, 0, "blk.%u." nm, L);  \
	} while (0)

static void layer_dense_attn(const ds_hparams *hp, tab *t, uint32_t L,
			     const char *pre)
{
	uint64_t H = hp->n_embd, q = (uint64_t)hp->n_head * hp->head_dim;
	uint64_t kv = (uint64_t)hp->n_head_kv * hp->head_dim;
	char hf[96];

	MAT("attn_q", "self_attn.q_proj", q, H);
	MAT("attn_k", "self_attn.k_proj", kv, H);
	MAT("attn_v", "self_attn.v_proj", kv, H);
	if (hp->qkv_bias) {
		VEC("attn_q.bias", "self_attn.q_proj.bias", q);
		VEC("attn_k.bias", "self_attn.k_proj.bias", kv);
		VEC("attn_v.bias", "self_attn.v_proj.bias", kv);
	}
	MAT("attn_output", "self_attn.o_proj", H, q);
}

static void layer_mla(const ds_hparams *hp, tab *t, uint32_t L,
		      const char *pre)
{
	uint64_t H = hp->n_embd, nh = hp->n_head;
	uint64_t qk = hp->qk_nope_head_dim + hp->qk_rope_head_dim;
	char hf[96];

	if (hp->q_lora_rank) {
		MAT("attn_q_a", "self_attn.q_a_proj", hp->q_lora_rank, H);
		VEC("attn_q_a_norm", "self_attn.q_a_layernorm.weight",
		    hp->q_lora_rank);
		MAT("attn_q_b", "self_attn.q_b_proj", nh * qk, hp->q_lora_rank);
	} else {
		MAT("attn_q", "self_attn.q_proj", nh * qk, H);
	}
	MAT("attn_kv_a", "self_attn.kv_a_proj_with_mqa",
	    hp->kv_lora_rank + hp->qk_rope_head_dim, H);
	VEC("attn_kv_a_norm", "self_attn.kv_a_layernorm.weight", hp->kv_lora_rank);
	MAT("attn_kv_b", "self_attn.kv_b_proj",
	    nh * (hp->qk_nope_head_dim + hp->v_head_dim), hp->kv_lora_rank);
	MAT("attn_output", "self_attn.o_proj", H, nh * hp->v_head_dim);
}

static void layer_moe(const ds_hparams *hp, tab *t, uint32_t L,
		      const char *pre)
{
	uint64_t H = hp->n_embd, E = hp->n_expert, F = hp->n_ff_exp;
	uint64_t S = (uint64_t)hp->n_ff_exp * hp->n_expert_shared;
	static const char *const names[3] = { "gate", "up", "down" };
	char hf[96];
	int i;

	snprintf(hf, sizeof hf, "%smlp.gate", pre);
	tab_add(t, DS_TK_ROUTER, hf, 2, E, H, 0, "blk.%u.ffn_gate_inp", L);
	if (hp->topk_method == DS_TOPK_NOAUX_TC)
		VEC("exp_probs_b", "mlp.gate.e_score_correction_bias", E);
	snprintf(hf, sizeof hf, "%smlp.experts.", pre);
	for (i = 0; i < 3; i++) {
		ds_tdesc *d = tab_add(t, DS_TK_MATRIX, hf, 3, E, i < 2 ? F : H,
				      i < 2 ? H : F, "blk.%u.ffn_%s_exps", L,
				      names[i]);
		if (d != NULL)
			snprintf(d->hf2, sizeof d->hf2, ".%s_proj", names[i]);
	}
	if (S == 0)
		return;
	MAT("ffn_gate_shexp", "mlp.shared_experts.gate_proj", S, H);
	MAT("ffn_up_shexp", "mlp.shared_experts.up_proj", S, H);
	MAT("ffn_down_shexp", "mlp.shared_experts.down_proj", H, S);
}

/* Decoder layer L: blk.L.*, from model.layers.L.* */
static void layer(const ds_hparams *hp, tab *t, uint32_t L)
{
	uint64_t H = hp->n_embd, F = hp->n_ff;
	char pre[48], hf[96];

	snprintf(pre, sizeof pre, "model.layers.%u.", L);
	VEC("attn_norm", "input_layernorm.weight", H);
	if (hp->arch == DS_ARCH_DEEPSEEK2)
		layer_mla(hp, t, L, pre);
	else
		layer_dense_attn(hp, t, L, pre);
	VEC("ffn_norm", "post_attention_layernorm.weight", H);
	if (ds_hparams_is_moe(hp, L)) {
		layer_moe(hp, t, L, pre);
	} else {
		MAT("ffn_gate", "mlp.gate_proj", F, H);
		MAT("ffn_up", "mlp.up_proj", F, H);
		MAT("ffn_down", "mlp.down_proj", H, F);
	}
}

static int tab_done(tab *tb, ds_tdesc **out, size_t *n, ds_err *err)
{
	if (tb->oom) {
		free(tb->d);
		return ds_errf(err, "out of memory building the tensor table");
	}
	*out = tb->d;
	*n = tb->n;
	return 0;
}

/* An MTP norm: mtp.NAME [n_embd] from model.layers.L.REST */
#define VEC_MTP(nm, rest)                                                   \
	do {                                                                \
		snprintf(hf, sizeof hf, "%s%s", pre, rest);                 \
		tab_add(t, DS_TK_VECTOR, hf, 1, H, 0, 0, nm);               \
	} while (0)

int ds_arch_tensors(const ds_hparams *hp, ds_tdesc **out, size_t *n,
		    ds_err *err)
{
	uint64_t H = hp->n_embd;
	tab tb = { NULL, 0, 0, 0 }, *t = &tb;
	uint32_t L;

	tab_add(t, DS_TK_EMBED, "model.embed_tokens", 2, hp->n_vocab, H, 0,
		"token_embd");
	for (L = 0; L < hp->n_layer; L++)
		layer(hp, t, L);
	tab_add(t, DS_TK_VECTOR, "model.norm.weight", 1, H, 0, 0, "output_norm");
	if (!hp->tie_embeddings)
		tab_add(t, DS_TK_OUTPUT, "lm_head", 2, hp->n_vocab, H, 0, "output");
	return tab_done(&tb, out, n, err);
}

int ds_arch_mtp_tensors(const ds_hparams *hp, ds_tdesc **out, size_t *n,
			ds_err *err)
{
	uint64_t H = hp->n_embd, V = hp->n_vocab;
	tab tb = { NULL, 0, 0, 0 }, *t = &tb;
	char pre[48], hf[96];
	uint32_t L;

	for (L = hp->n_layer; L < hp->n_layer + hp->n_mtp; L++) {
		snprintf(pre, sizeof pre, "model.layers.%u.", L);
		if (!hp->mtp_shares_embd) {
			snprintf(hf, sizeof hf, "%sembed_tokens", pre);
			tab_add(t, DS_TK_EMBED, hf, 2, V, H, 0, "mtp.embd");
		}
		VEC_MTP("mtp.enorm", "enorm.weight");
		VEC_MTP("mtp.hnorm", "hnorm.weight");
		snprintf(hf, sizeof hf, "%seh_proj", pre);
		tab_add(t, DS_TK_MATRIX, hf, 2, H, 2 * H, 0, "mtp.eh_proj");
		layer(hp, t, L);
		VEC_MTP("mtp.head_norm", "shared_head.norm.weight");
		if (!hp->mtp_shares_head) {
			snprintf(hf, sizeof hf, "%sshared_head.head", pre);
			tab_add(t, DS_TK_OUTPUT, hf, 2, V, H, 0, "mtp.head");
		}
	}
	return tab_done(&tb, out, n, err);
}

const char *ds_tdesc_hf_expert(const ds_tdesc *d, uint32_t e, char *buf,
			       size_t len)
{
	snprintf(buf, len, "%s%u%s", d->hf, e, d->hf2);
	return buf;
}
