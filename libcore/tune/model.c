/* model.c - the two numbers a plan needs from a model directory: its
 * weight bytes and its KV-cache bytes per token.
 *
 * This reads model.meta with jansson directly until the loader
 * (libcore/modelfile) is on main; then it should ask the loader. */
#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "tune/tune.h"

#define META_MAX (256u << 20)

/* hparams.KEY as an integer in [lo, hi]. */
static int hparam(json_t *hp, const char *path, const char *key, long lo,
		  long hi, long *out, ds_err *err)
{
	json_t *v = json_object_get(hp, key);

	if (!json_is_integer(v))
		return ds_errf(err, "%s: hparams.%s: missing or not an integer",
			       path, key);
	if (json_integer_value(v) < lo || json_integer_value(v) > hi)
		return ds_errf(err, "%s: hparams.%s: %lld out of range %ld-%ld",
			       path, key, (long long)json_integer_value(v), lo,
			       hi);
	*out = (long)json_integer_value(v);
	return 0;
}

/* Values cached per token and layer: MLA's latent + rope key, or K and V. */
static int kv_values(json_t *hp, const char *arch, const char *path,
		     long *per_layer, ds_err *err)
{
	long a, b;

	if (strcmp(arch, "deepseek2") == 0) {
		if (hparam(hp, path, "kv_lora_rank", 1, 1 << 16, &a, err) != 0 ||
		    hparam(hp, path, "qk_rope_head_dim", 0, 1 << 16, &b, err) != 0)
			return -1;
		*per_layer = a + b;
		return 0;
	}
	if (strcmp(arch, "llama") == 0 || strcmp(arch, "qwen2") == 0) {
		if (hparam(hp, path, "n_head_kv", 1, 1 << 16, &a, err) != 0 ||
		    hparam(hp, path, "head_dim", 1, 1 << 16, &b, err) != 0)
			return -1;
		*per_layer = 2 * a * b;
		return 0;
	}
	return ds_errf(err, "%s: arch \"%s\" is not one ds-tune knows", path,
		       arch);
}

static int read_meta(json_t *root, const char *path, ds_tune_model *m,
		     ds_err *err)
{
	json_t *hp = json_object_get(root, "hparams");
	const char *fmt = json_string_value(json_object_get(root, "format"));
	const char *arch = json_string_value(json_object_get(root, "arch"));
	json_t *ver = json_object_get(root, "version");
	long n_layer, ctx, per_layer = 0;
	uint64_t v;

	if (fmt == NULL || strcmp(fmt, "ds-model") != 0)
		return ds_errf(err, "%s: format is not \"ds-model\"", path);
	if (!json_is_integer(ver) || json_integer_value(ver) != 1)
		return ds_errf(err, "%s: version %lld, this ds-tune reads 1",
			       path, json_is_integer(ver)
			       ? (long long)json_integer_value(ver) : -1ll);
	if (arch == NULL)
		return ds_errf(err, "%s: arch missing", path);
	if (!json_is_object(hp))
		return ds_errf(err, "%s: hparams missing", path);
	snprintf(m->arch, sizeof m->arch, "%s", arch);
	if (kv_values(hp, arch, path, &per_layer, err) != 0 ||
	    hparam(hp, path, "n_layer", 1, 1 << 16, &n_layer, err) != 0 ||
	    hparam(hp, path, "n_ctx_train", 0, 1 << 30, &ctx, err) != 0)
		return -1;
	if (ds_mul_u64((uint64_t)per_layer, (uint64_t)n_layer, &v) != 0 ||
	    ds_mul_u64(v, 2, &m->kv_token_bytes) != 0)
		return ds_errf(err, "%s: KV cache size overflows", path);
	m->n_ctx_train = (uint32_t)ctx;
	return 0;
}

/* The end of the last tensor, checked against model.bin's size. */
static int check_tensors(json_t *root, const char *path, uint64_t bin_size,
			 ds_err *err)
{
	json_t *ts = json_object_get(root, "tensors"), *t;
	size_t i;

	if (!json_is_array(ts))
		return ds_errf(err, "%s: tensors missing", path);
	json_array_foreach(ts, i, t) {
		json_t *o = json_object_get(t, "offset");
		json_t *s = json_object_get(t, "size");
		uint64_t end;

		if (!json_is_integer(o) || !json_is_integer(s) ||
		    json_integer_value(o) < 0 || json_integer_value(s) < 0 ||
		    ds_add_u64((uint64_t)json_integer_value(o),
			       (uint64_t)json_integer_value(s), &end) != 0)
			return ds_errf(err, "%s: tensor %zu: bad offset or size",
				       path, i);
		if (end > bin_size)
			return ds_errf(err, "%s: tensor %zu ends at %llu, past "
				       "model.bin's %llu bytes", path, i,
				       (unsigned long long)end,
				       (unsigned long long)bin_size);
	}
	return 0;
}

int ds_tune_model_read(const char *dir, ds_tune_model *m, ds_err *err)
{
	char *meta = ds_path_join(dir, "model.meta");
	char *bin = ds_path_join(dir, "model.bin");
	char *text = NULL;
	json_t *root = NULL;
	json_error_t je;
	struct stat st;
	int rc = -1;

	memset(m, 0, sizeof *m);
	if (meta == NULL || bin == NULL) {
		ds_errf(err, "%s: out of memory", dir);
		goto out;
	}
	if (stat(bin, &st) != 0) {
		ds_errf(err, "%s: %s", bin, strerror(errno));
		goto out;
	}
	m->bytes = (uint64_t)st.st_size;
	if (ds_read_file(meta, META_MAX, &text, NULL, err) != 0)
		goto out;
	root = json_loads(text, 0, &je);
	if (root == NULL) {
		ds_errf(err, "%s: line %d: %s", meta, je.line, je.text);
		goto out;
	}
	if (!json_is_object(root)) {
		ds_errf(err, "%s: not a JSON object", meta);
		goto out;
	}
	if (read_meta(root, meta, m, err) != 0 ||
	    check_tensors(root, meta, m->bytes, err) != 0)
		goto out;
	rc = 0;
out:
	json_decref(root);
	free(text);
	free(meta);
	free(bin);
	return rc;
}
