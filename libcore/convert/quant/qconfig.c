/* qconfig.c - which quantization a checkpoint uses, and the per-module
 * checks and dispatch to the AWQ / GPTQ re-packers. */
#include <ctype.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "quant.h"

#define MAX_QCONFIG_BYTES (1u << 20)

static const char *const method_names[] = { "none", "awq", "gptq", "fp8" };

/* ---- finding the settings ------------------------------------------------------ */

static int lower_eq(const char *a, const char *b)
{
	while (*a && *b && tolower((unsigned char)*a) == *b)
		a++, b++;
	return *a == '\0' && *b == '\0';
}

static const json_t *get2(const json_t *o, const char *a, const char *b)
{
	const json_t *v = json_object_get(o, a);

	if (v == NULL || json_is_null(v))
		v = json_object_get(o, b);
	return v == NULL || json_is_null(v) ? NULL : v;
}

static int get_bool(const json_t *o, const char *key, int def)
{
	const json_t *v = json_object_get(o, key);

	return json_is_boolean(v) ? json_is_true(v) : def;
}

static int group_size(ds_qconfig *q, const json_t *v, const char *what,
		      ds_err *err)
{
	json_int_t g;

	if (v == NULL)
		return ds_errf(err, "%s: %s group_size missing", q->file, what);
	if (!json_is_integer(v))
		return ds_errf(err, "%s: %s group_size is not an integer", q->file,
			       what);
	g = json_integer_value(v);
	if (g != -1 && (g < 32 || g > 8192 || g % 32 != 0))
		return ds_errf(err, "%s: %s group size %lld is not supported (-1 "
			       "or a multiple of 32 up to 8192)", q->file, what,
			       (long long)g);
	q->group_size = (int32_t)g;
	return 0;
}

static int read_awq(ds_qconfig *q, const json_t *o, ds_err *err)
{
	const json_t *bits = get2(o, "bits", "w_bit");
	const json_t *ver = json_object_get(o, "version");
	const json_t *be = json_object_get(o, "backend");
	const char *v = json_is_string(ver) ? json_string_value(ver) : "gemm";

	q->method = DS_QM_AWQ;
	if (!json_is_integer(bits) || json_integer_value(bits) != 4)
		return ds_errf(err, "%s: AWQ with %s bits is not supported (only 4)",
			       q->file, json_is_integer(bits) ? "other than 4" :
			       "no integer for");
	q->bits = 4;
	if (group_size(q, get2(o, "group_size", "q_group_size"), "AWQ", err))
		return -1;
	if (json_is_string(be) && strcmp(json_string_value(be), "autoawq") != 0)
		return ds_errf(err, "%s: AWQ backend \"%.32s\" is not supported "
			       "(autoawq GEMM)", q->file, json_string_value(be));
	/* exllama and ipex are load-time kernels over the GEMM file layout */
	if (!lower_eq(v, "gemm") && !lower_eq(v, "exllama") && !lower_eq(v, "ipex"))
		return ds_errf(err, "%s: AWQ version \"%.32s\" is not supported "
			       "(only GEMM packing: GEMV, GEMV-fast and Marlin are "
			       "not)", q->file, v);
	q->zero_point = get_bool(o, "zero_point", 1);
	if (!q->zero_point)
		return ds_errf(err, "%s: AWQ with zero_point false is not supported "
			       "(AutoAWQ packs symmetric AWQ only for Marlin)",
			       q->file);
	strcpy(q->variant, "gemm");
	return 0;
}

static int read_gptq(ds_qconfig *q, const json_t *o, ds_err *err)
{
	const json_t *bits = json_object_get(o, "bits");
	const json_t *fmt = get2(o, "checkpoint_format", "format");
	const json_t *pd = json_object_get(o, "pack_dtype");
	const json_t *dyn = json_object_get(o, "dynamic");
	const char *f = json_is_string(fmt) ? json_string_value(fmt) : "gptq";

	q->method = DS_QM_GPTQ;
	if (!json_is_integer(bits))
		return ds_errf(err, "%s: GPTQ bits missing", q->file);
	if (json_integer_value(bits) != 4 && json_integer_value(bits) != 8)
		return ds_errf(err, "%s: GPTQ %lld-bit is not supported (4 and 8 "
			       "are)", q->file, (long long)json_integer_value(bits));
	q->bits = (uint32_t)json_integer_value(bits);
	if (group_size(q, json_object_get(o, "group_size"), "GPTQ", err))
		return -1;
	if (get_bool(o, "is_marlin_format", 0) || strcmp(f, "marlin") == 0)
		return ds_errf(err, "%s: GPTQ Marlin format is not supported", q->file);
	if (strcmp(f, "gptq") != 0 && strcmp(f, "gptq_v2") != 0)
		return ds_errf(err, "%s: GPTQ checkpoint_format \"%.32s\" is not "
			       "supported (gptq, gptq_v2)", q->file, f);
	if (pd != NULL && !(json_is_string(pd) &&
			    strcmp(json_string_value(pd), "int32") == 0))
		return ds_errf(err, "%s: GPTQ pack_dtype other than int32 is not "
			       "supported", q->file);
	if (dyn != NULL && !json_is_null(dyn) &&
	    !(json_is_object(dyn) && json_object_size(dyn) == 0))
		return ds_errf(err, "%s: GPTQ \"dynamic\" per-module overrides are "
			       "not supported", q->file);
	q->v2 = strcmp(f, "gptq_v2") == 0;
	q->sym = get_bool(o, "sym", 1);
	q->desc_act = get_bool(o, "desc_act", 0);
	strcpy(q->variant, f);
	return 0;
}

/* DeepSeek-V3's block-scaled FP8: fmt e4m3, weight_block_size [bo, bi],
 * dynamic activations (nothing of them is stored). */
static int read_fp8(ds_qconfig *q, const json_t *o, ds_err *err)
{
	const json_t *fmt = json_object_get(o, "fmt");
	const json_t *bs = json_object_get(o, "weight_block_size");
	const json_t *act = json_object_get(o, "activation_scheme");
	const json_t *sf = json_object_get(o, "scale_fmt");
	size_t i;

	q->method = DS_QM_FP8;
	q->bits = 8;
	strcpy(q->variant, "e4m3");
	if (fmt != NULL && !(json_is_string(fmt) &&
			     lower_eq(json_string_value(fmt), "e4m3")))
		return ds_errf(err, "%s: fp8 fmt %s%.16s%s is not supported (e4m3)",
			       q->file, json_is_string(fmt) ? "\"" : "",
			       json_is_string(fmt) ? json_string_value(fmt) :
			       "that is not a string", json_is_string(fmt) ? "\"" : "");
	if (bs == NULL || json_is_null(bs))
		return ds_errf(err, "%s: fp8 weight_block_size missing (only "
			       "block-scaled FP8 is supported)", q->file);
	if (!json_is_array(bs) || json_array_size(bs) != 2)
		return ds_errf(err, "%s: fp8 weight_block_size is not two integers",
			       q->file);
	for (i = 0; i < 2; i++) {
		const json_t *v = json_array_get(bs, i);

		if (!json_is_integer(v) || json_integer_value(v) < 1 ||
		    json_integer_value(v) > 65536)
			return ds_errf(err, "%s: fp8 weight_block_size[%zu] is not "
				       "an integer in [1, 65536]", q->file, i);
		q->block[i] = (uint32_t)json_integer_value(v);
	}
	q->group_size = (int32_t)q->block[1];
	if (act != NULL && !json_is_null(act) &&
	    !(json_is_string(act) && strcmp(json_string_value(act), "dynamic") == 0))
		return ds_errf(err, "%s: fp8 activation_scheme other than "
			       "\"dynamic\" is not supported", q->file);
	/* V3.1 trains its scales as powers of two; they are stored as F32 and
	 * dequantize by the same rule */
	if (sf != NULL && !json_is_null(sf) &&
	    !(json_is_string(sf) && strcmp(json_string_value(sf), "ue8m0") == 0))
		return ds_errf(err, "%s: fp8 scale_fmt is not supported (only "
			       "\"ue8m0\")", q->file);
	return 0;
}

/* The method of settings object o from file `file`. */
static int read_settings(ds_qconfig *q, const json_t *o, ds_err *err)
{
	const json_t *m = get2(o, "quant_method", "method");
	const char *s;

	if (!json_is_object(o))
		return ds_errf(err, "%s: quantization settings are not an object",
			       q->file);
	if (m == NULL) {
		/* pre-0.2 AutoAWQ quant_config.json / old AutoGPTQ files */
		if (json_object_get(o, "w_bit") != NULL)
			return read_awq(q, o, err);
		if (json_object_get(o, "bits") != NULL &&
		    strcmp(q->file, "quantize_config.json") == 0)
			return read_gptq(q, o, err);
		return ds_errf(err, "%s: quantization settings without quant_method",
			       q->file);
	}
	if (!json_is_string(m))
		return ds_errf(err, "%s: quant_method is not a string", q->file);
	s = json_string_value(m);
	if (lower_eq(s, "awq"))
		return read_awq(q, o, err);
	if (lower_eq(s, "gptq"))
		return read_gptq(q, o, err);
	if (lower_eq(s, "fp8"))
		return read_fp8(q, o, err);
	return ds_errf(err, "%s: quant_method \"%.32s\" is not supported (awq, "
		       "gptq, fp8)", q->file, s);
}

static json_t *load_json(const char *dir, const char *name, ds_err *err,
			 int *bad)
{
	char *p = ds_path_join(dir, name), *text = NULL;
	json_error_t jerr;
	json_t *o = NULL;

	*bad = 0;
	if (p == NULL || access(p, F_OK) != 0) {
		free(p);
		return NULL;
	}
	if (ds_read_file(p, MAX_QCONFIG_BYTES, &text, NULL, err) == 0) {
		o = json_loads(text, JSON_REJECT_DUPLICATES, &jerr);
		if (o == NULL)
			ds_errf(err, "%s: line %d: %s", name, jerr.line, jerr.text);
	}
	*bad = o == NULL;
	free(text);
	free(p);
	return o;
}

static int check_want(const ds_qconfig *q, enum ds_qformat want, ds_err *err)
{
	static const char *const fmt[] = { "auto", "awq", "gptq", "none", "fp8" };
	enum ds_qmethod need = want == DS_QF_AWQ ? DS_QM_AWQ
			       : want == DS_QF_GPTQ ? DS_QM_GPTQ
			       : want == DS_QF_FP8 ? DS_QM_FP8 : DS_QM_NONE;

	if (want == DS_QF_AUTO || q->method == need)
		return 0;
	if (q->method == DS_QM_NONE)
		return ds_errf(err, "--quant-format %s, but no quantization settings "
			       "found (config.json quantization_config, "
			       "quantize_config.json, quant_config.json)", fmt[want]);
	return ds_errf(err, "--quant-format %s, but %s describes %s quantization",
		       fmt[want], q->file, method_names[q->method]);
}

int ds_qconfig_detect(ds_qconfig *q, const char *dir, const json_t *cfg,
		      enum ds_qformat want, ds_err *err)
{
	static const char *const files[] = { "quantize_config.json",
					     "quant_config.json" };
	const json_t *o = cfg ? json_object_get(cfg, "quantization_config") : NULL;
	json_t *owned = NULL;
	size_t i;
	int rc = 0, bad;

	memset(q, 0, sizeof *q);
	q->method = DS_QM_NONE;
	strcpy(q->variant, "none");
	if (o != NULL && !json_is_null(o)) {
		strcpy(q->file, "config.json: quantization_config");
	} else {
		o = NULL;
		for (i = 0; i < 2 && o == NULL; i++) {
			o = owned = load_json(dir, files[i], err, &bad);
			if (bad)
				return -1;
			snprintf(q->file, sizeof q->file, "%s", files[i]);
		}
	}
	if (o != NULL)
		rc = read_settings(q, o, err);
	json_decref(owned);
	if (rc)
		return -1;
	return check_want(q, want, err);
}

/* ---- per module ------------------------------------------------------------------ */

static const char *fname(const ds_qlinear *l, const ds_st_tensor *t)
{
	return l->st->files[t->file].name;
}

/* t must be dtype dt of shape [a, b]. */
static int want2(const ds_qlinear *l, const ds_st_tensor *t, const char *what,
		 enum ds_st_dtype dt, uint64_t a, uint64_t b, const char *layout,
		 ds_err *err)
{
	char have[96];

	if (t == NULL)
		return ds_errf(err, "%s: %s.%s missing", l->module, l->module, what);
	if (t->dtype != dt)
		return ds_errf(err, "%s: tensor %s: dtype %s, %s needs %s",
			       fname(l, t), t->name, ds_st_dtype_name(t->dtype),
			       layout, ds_st_dtype_name(dt));
	if (t->ndim != 2 || t->shape[0] != a || t->shape[1] != b)
		return ds_errf(err, "%s: tensor %s: shape %s, %s needs [%llu, %llu]",
			       fname(l, t), t->name,
			       ds_st_shape_str(t->ndim, t->shape, have, sizeof have),
			       layout, (unsigned long long)a, (unsigned long long)b);
	return 0;
}

/* The runtime group for a source group size (g = -1: all of k). */
static uint32_t runtime_group(int32_t g, uint64_t k)
{
	if (g > 0)
		return (uint32_t)g;
	return k % 128 == 0 ? 128 : k % 64 == 0 ? 64 : 32;
}

static int check_awq(const ds_qconfig *q, const ds_qlinear *l, ds_err *err)
{
	uint64_t n = l->n, k = l->k, G;
	const ds_st_tensor *w = l->qweight;

	if (w->dtype == DS_ST_I16)
		return ds_errf(err, "%s: tensor %s: I16 qweight is AWQ GEMV-fast "
			       "packing, which is not supported", fname(l, w), w->name);
	if (q->group_size > 0 && k % (uint64_t)q->group_size)
		return ds_errf(err, "%s: in_features %llu is not a multiple of the "
			       "AWQ group size %d", l->module, (unsigned long long)k,
			       q->group_size);
	if (n % 8)
		return ds_errf(err, "%s: out_features %llu is not a multiple of 8",
			       l->module, (unsigned long long)n);
	if (w->ndim == 2 && w->shape[0] == n && w->shape[1] == k / 8 &&
	    !(w->shape[0] == k && w->shape[1] == n / 8))
		return ds_errf(err, "%s: tensor %s: shape [N, K/8] is AWQ GEMV "
			       "packing, which is not supported", fname(l, w), w->name);
	G = q->group_size > 0 ? k / (uint64_t)q->group_size : 1;
	if (l->g_idx != NULL)
		return ds_errf(err, "%s: tensor %s: AWQ has no g_idx", fname(l, l->g_idx),
			       l->g_idx->name);
	return want2(l, w, "qweight", DS_ST_I32, k, n / 8, "AWQ GEMM", err) ||
	       want2(l, l->qzeros, "qzeros", DS_ST_I32, G, n / 8, "AWQ GEMM", err) ||
	       want2(l, l->scales, "scales", DS_ST_F16, G, n, "AWQ GEMM", err) ? -1 : 0;
}

/* g_idx as int32 (malloc'd) or NULL with *trivial set when it is k / g. */
static int32_t *read_gidx(const ds_qlinear *l, uint64_t gsrc, int *trivial,
			  ds_err *err)
{
	int32_t *g = malloc(4 * l->k + 4);
	uint64_t i;

	*trivial = 1;
	if (g == NULL) {
		ds_errf(err, "%s: out of memory", l->module);
		return NULL;
	}
	memcpy(g, l->g_idx->data, 4 * l->k);
	for (i = 0; i < l->k; i++)
		if ((uint64_t)g[i] != i / gsrc)
			*trivial = 0;
	return g;
}

static int gptq_perm(const ds_qconfig *q, const ds_qlinear *l, int32_t *perm,
		     int *needs, ds_err *err)
{
	uint64_t gsrc = q->group_size > 0 ? (uint64_t)q->group_size : l->k;
	uint64_t G = (l->k + gsrc - 1) / gsrc;
	int32_t *tmp = NULL, *g;
	int trivial, r;

	*needs = 0;
	if (l->g_idx == NULL)
		return 0;
	g = read_gidx(l, gsrc, &trivial, err);
	if (g == NULL)
		return -1;
	if (!trivial) {
		if (perm == NULL)
			perm = tmp = malloc(4 * l->k + 4);
		r = perm ? ds_gptq_perm(g, l->k, gsrc, G, perm) : -2;
		if (r < 0) {
			free(g), free(tmp);
			return r == -2 ? ds_errf(err, "%s: out of memory", l->module)
				: ds_errf(err, "%s: tensor %s: groups are not %llu "
					  "channels each", fname(l, l->g_idx),
					  l->g_idx->name, (unsigned long long)gsrc);
		}
		*needs = r == 0;
	}
	free(g), free(tmp);
	return 0;
}

static int check_gptq(const ds_qconfig *q, const ds_qlinear *l, int *needs,
		      ds_err *err)
{
	uint64_t n = l->n, k = l->k, per = 32 / q->bits, G;

	if (k % per || n % per)
		return ds_errf(err, "%s: in_features %llu or out_features %llu is "
			       "not a multiple of %llu", l->module,
			       (unsigned long long)k, (unsigned long long)n,
			       (unsigned long long)per);
	G = q->group_size > 0 ? (k + (uint64_t)q->group_size - 1) /
					(uint64_t)q->group_size : 1;
	if (want2(l, l->qweight, "qweight", DS_ST_I32, k / per, n, "GPTQ", err) ||
	    want2(l, l->qzeros, "qzeros", DS_ST_I32, G, n / per, "GPTQ", err) ||
	    want2(l, l->scales, "scales", DS_ST_F16, G, n, "GPTQ", err))
		return -1;
	if (l->g_idx != NULL && (l->g_idx->dtype != DS_ST_I32 ||
				 l->g_idx->ndim != 1 || l->g_idx->shape[0] != k))
		return ds_errf(err, "%s: tensor %s: g_idx must be I32 [%llu]",
			       fname(l, l->g_idx), l->g_idx->name,
			       (unsigned long long)k);
	if (q->desc_act && l->g_idx == NULL)
		return ds_errf(err, "%s: desc_act is set but %s.g_idx is missing",
			       q->file, l->module);
	return gptq_perm(q, l, NULL, needs, err);
}

int ds_quant_check(const ds_qconfig *q, const ds_qlinear *l, ds_ttype *rt,
		   int *needs_perm, ds_err *err)
{
	*needs_perm = 0;
	rt->dt = q->bits == 8 ? DS_Q8 : DS_Q4;
	rt->group = runtime_group(q->group_size, l->k);
	if (l->qweight == NULL)
		return ds_errf(err, "%s: %s.qweight missing", l->module, l->module);
	if (q->method == DS_QM_AWQ)
		return check_awq(q, l, err);
	if (q->method == DS_QM_GPTQ)
		return check_gptq(q, l, needs_perm, err);
	if (q->method == DS_QM_FP8)
		return ds_errf(err, "%s: tensor %s: AWQ/GPTQ packing in an FP8 "
			       "checkpoint", l->module, l->qweight->name);
	return ds_errf(err, "%s: quantized tensors (%s) but no quantization "
		       "settings (quantization_config, quantize_config.json)",
		       l->module, l->qweight->name);
}

int ds_quant_repack(const ds_qconfig *q, const ds_qlinear *l, ds_ttype rt,
		    uint8_t *dst, int32_t *perm, ds_qstats *stats, int threads,
		    ds_err *err)
{
	uint64_t gsrc = q->group_size > 0 ? (uint64_t)q->group_size : l->k;
	int needs = 0, rc;

	if (q->method == DS_QM_AWQ) {
		rc = ds_awq_repack(dst, l->qweight->data, l->qzeros->data,
				   l->scales->data, l->n, l->k, gsrc, rt.group,
				   threads);
		stats->groups += l->n * (ds_kpad(rt, l->k) / rt.group);
	} else {
		if (gptq_perm(q, l, perm, &needs, err))
			return -1;
		DS_ASSERT(!needs || perm != NULL);
		rc = ds_gptq_repack(dst, l->qweight->data, l->qzeros->data,
				    l->scales->data, needs ? perm : NULL, l->n,
				    l->k, gsrc, rt.group, q->bits, q->v2, threads,
				    stats);
	}
	if (rc)
		return ds_errf(err, "%s: out of memory re-packing", l->module);
	return 0;
}
