/* meta.c - the tokenizer's part of a conversion: DST/tokenizer.bin and the
 * "tokenizer", "chat_template" and "chat_template_jinja" keys of
 * model.meta (ds-model(5)). */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "chat/template.h"
#include "tok_int.h"

static json_t *id_or_null(int32_t id)
{
	return id >= 0 ? json_integer(id) : json_null();
}

static json_t *piece_or_null(const ds_tok *t, int32_t id)
{
	size_t n;
	const char *p = id >= 0 ? ds_tok_piece(t, id, &n) : NULL;

	return p ? json_stringn(p, n) : json_null();
}

int ds_tok_meta(const ds_tok *t, const char *source, struct json_t *meta,
		ds_err *err)
{
	ds_tok_info i;
	json_t *o;
	char crc[16];

	ds_tok_get_info(t, &i);
	snprintf(crc, sizeof crc, "%08x", ds_crc32(0, t->base, t->size));
	o = json_pack("{s:s,s:s,s:s,s:i,s:i,s:o,s:o,s:o,s:o,s:o,s:b,s:b,"
		      "s:o,s:o,s:o,s:I,s:s}",
		      "file", "tokenizer.bin", "source", source, "type", i.type,
		      "version", (int)TB_VERSION, "n_vocab", (int)i.n_vocab,
		      "bos", id_or_null(i.bos), "eos", id_or_null(i.eos),
		      "eot", id_or_null(i.eot), "unk", id_or_null(i.unk),
		      "pad", id_or_null(i.pad), "add_bos", i.add_bos,
		      "add_eos", i.add_eos,
		      "bos_token", piece_or_null(t, i.bos),
		      "eos_token", piece_or_null(t, i.eos),
		      "eot_token", piece_or_null(t, i.eot),
		      "size", (json_int_t)t->size, "crc32", crc);
	if (o == NULL || json_object_set_new(meta, "tokenizer", o) != 0)
		return ds_errf(err, "model.meta: out of memory");
	if (i.chat_template[0] != '\0' &&
	    json_object_set_new(meta, "chat_template",
				json_string(i.chat_template)) != 0)
		return ds_errf(err, "model.meta: out of memory");
	return 0;
}

/* The checkpoint's own chat template, kept whole for the session to
 * render (the name above is the fallback for what cannot be). */
static int chat_jinja(const char *src, json_t *meta, ds_err *err)
{
	json_t *o;

	if (ds_chat_tpl_extract(src, &o, err))
		return -1;
	if (o != NULL && json_object_set_new(meta, "chat_template_jinja", o) != 0)
		return ds_errf(err, "model.meta: out of memory");
	return 0;
}

int ds_tok_convert(const char *src, const char *dst, struct json_t *meta,
		   ds_err *err)
{
	static const char *const names[] = { "tokenizer.json", "tokenizer.model" };
	char *in = NULL, *cfg, *out;
	const char *name = NULL;
	ds_tok *t = NULL;
	int rc = -1;

	for (int k = 0; k < 2 && name == NULL; k++) {
		free(in);
		in = ds_path_join(src, names[k]);
		/* F_OK: one that cannot be read fails naming itself below */
		if (in != NULL && access(in, F_OK) == 0)
			name = names[k];
	}
	if (name == NULL) {
		free(in);
		return ds_errf(err, "%s: no tokenizer.json or tokenizer.model", src);
	}
	cfg = ds_path_join(src, "tokenizer_config.json");
	out = ds_path_join(dst, "tokenizer.bin");
	if (cfg == NULL || out == NULL) {
		ds_errf(err, "out of memory");
		goto done;
	}
	if (ds_tok_compile_file(in, access(cfg, F_OK) == 0 ? cfg : NULL, out,
				err) != 0 ||
	    ds_tok_load(&t, out, err) != 0 || ds_tok_meta(t, name, meta, err) != 0 ||
	    chat_jinja(src, meta, err) != 0)
		goto done;
	rc = 0;
done:
	ds_tok_free(t);
	free(in);
	free(cfg);
	free(out);
	return rc;
}
