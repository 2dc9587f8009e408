/* tok.c - loading (tokenizer.bin mapped in place, or a tokenizer.json /
 * .model compiled in memory), compiling to tokenizer.bin, settings. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/afile.h"
#include "tok_int.h"
#include "unitab.h"

static const char *base_name(const char *p)
{
	const char *s = strrchr(p, '/');

	return s ? s + 1 : p;
}

enum src_kind { SRC_BIN, SRC_JSON, SRC_SP };

/* What a file is, from its first bytes (and, for refusals, its name). */
static int sniff(const char *path, enum src_kind *k, ds_err *err)
{
	uint8_t h[64] = { 0 };
	FILE *f = fopen(path, "rb");
	size_t n, i = 0;

	if (f == NULL)
		return ds_errf(err, "%s: %s", path, strerror(errno));
	n = fread(h, 1, sizeof h, f);
	fclose(f);
	if (n >= 8 && memcmp(h, TB_MAGIC, 8) == 0) {
		*k = SRC_BIN;
		return 0;
	}
	while (i < n && (h[i] == ' ' || h[i] == '\n' || h[i] == '\r' || h[i] == '\t'))
		i++;
	if (i < n && h[i] == '{') {
		*k = SRC_JSON;
		return 0;
	}
	/* a ModelProto starts with field 1 (pieces, length-delimited) */
	if (n > 0 && h[0] == 0x0a) {
		*k = SRC_SP;
		return 0;
	}
	{
		/* tiktoken: lines of "base64 rank" */
		const uint8_t *sp = memchr(h, ' ', n);

		if (sp != NULL && sp > h && sp + 1 < h + n && sp[1] >= '0' &&
		    sp[1] <= '9')
			return ds_errf(err, "%s: a tiktoken file is not supported "
				       "(use the checkpoint's tokenizer.json)", path);
	}
	if (strstr(base_name(path), "vocab.txt") != NULL)
		return ds_errf(err, "%s: a WordPiece vocabulary is not supported",
			       path);
	return ds_errf(err, "%s: not a tokenizer.json, SentencePiece .model or "
		       "ds tokenizer.bin", path);
}

/* tokenizer_config.json beside path, if there is one (malloc'd). */
static char *sibling_config(const char *path)
{
	const char *s = strrchr(path, '/');
	size_t d = s ? (size_t)(s - path) : 0;
	char *c = malloc(d + 32);

	if (c == NULL)
		return NULL;
	if (s != NULL)
		memcpy(c, path, d + 1);
	strcpy(c + (s ? d + 1 : 0), "tokenizer_config.json");
	/* one that is there but unreadable is an error, not ignored */
	if (access(c, F_OK) != 0) {
		free(c);
		return NULL;
	}
	return c;
}

static void set_name(ds_tok *t, const char *path)
{
	snprintf(t->name, sizeof t->name, "%s", base_name(path));
}

static int open_image(ds_tok *t, ds_err *err)
{
	if (tb_open(t, err) != 0)
		return -1;
	return tk_compile_regexes(t, err);
}

/* Added tokens marked normalized match their content as the normalizer
 * leaves it: compile once, normalize those contents, compile again. */
static int fix_normalized(struct tb_builder *b, uint8_t **img, size_t *len,
			  ds_err *err)
{
	ds_tok t = { 0 };
	pcre2_match_data *md = NULL;
	tb_buf out = { 0 };
	int rc = -1, any = 0;

	for (uint32_t i = 0; i < b->n_tok; i++)
		any |= (b->tok[i].attr & TA_NORMALIZED) != 0;
	if (!any || b->n_norm == 0)
		return 0;
	t.base = *img;
	t.size = *len;
	snprintf(t.name, sizeof t.name, "tokenizer");
	md = pcre2_match_data_create(4, NULL);
	if (md == NULL || open_image(&t, err) != 0)
		goto out;
	for (uint32_t i = 0; i < b->n_tok; i++) {
		struct tb_token *e = &b->tok[i];
		int64_t off;

		if (!(e->attr & TA_NORMALIZED))
			continue;
		out.n = 0;
		if (tk_normalize_hf(&t, b->pool.p + e->piece_off, e->piece_len,
				    &out, md, err) != 0)
			goto out;
		if ((off = tb_str(b, out.p, out.n, err)) < 0)
			goto out;
		e->text_off = (uint32_t)off;
		e->text_len = (uint32_t)out.n;
	}
	tk_free_regexes(&t);
	free(*img);
	*img = NULL;
	rc = tb_finish(b, img, len, err);
out:
	tk_free_regexes(&t);
	pcre2_match_data_free(md);
	tb_buf_free(&out);
	return rc;
}

int ds_tok_compile(const char *src, const char *config, uint8_t **out,
		   size_t *len, ds_err *err)
{
	struct tb_builder b;
	enum src_kind k;
	char *cfg = NULL;
	int rc;

	*out = NULL;
	if (sniff(src, &k, err) != 0)
		return -1;
	if (k == SRC_BIN)
		return ds_errf(err, "%s: already a tokenizer.bin", src);
	if (config == NULL)
		config = cfg = sibling_config(src);
	tb_init(&b);
	rc = k == SRC_JSON ? ds_tok_read_hfjson(&b, src, config, err)
			   : ds_tok_read_spmodel(&b, src, config, err);
	if (rc == 0)
		rc = tb_finish(&b, out, len, err);
	if (rc == 0 && b.model == TB_HF_BPE)
		rc = fix_normalized(&b, out, len, err);
	if (rc != 0) {
		free(*out);
		*out = NULL;
	}
	tb_free(&b);
	free(cfg);
	return rc;
}

int ds_tok_compile_file(const char *src, const char *config, const char *dst,
			ds_err *err)
{
	uint8_t *img;
	size_t len;
	ds_afile a;
	int rc = -1;

	if (ds_tok_compile(src, config, &img, &len, err) != 0)
		return -1;
	if (ds_afile_open(&a, dst, err) == 0) {
		if (fwrite(img, 1, len, a.f) != len) {
			ds_errf(err, "%s: write failed", dst);
			ds_afile_abort(&a);
		} else {
			rc = ds_afile_commit(&a, err);
		}
	}
	free(img);
	return rc;
}

int ds_tok_load(ds_tok **out, const char *path, ds_err *err)
{
	ds_tok *t;
	enum src_kind k;

	*out = NULL;
	if (sniff(path, &k, err) != 0)
		return -1;
	t = calloc(1, sizeof *t);
	if (t == NULL)
		return ds_errf(err, "out of memory");
	t->map.fd = -1;
	set_name(t, path);
	if (k == SRC_BIN) {
		if (ds_map_open(&t->map, path, 0, err) != 0) {
			free(t);
			return -1;
		}
		t->base = t->map.data;
		t->size = t->map.size;
	} else {
		if (ds_tok_compile(path, NULL, &t->owned, &t->size, err) != 0) {
			free(t);
			return -1;
		}
		t->base = t->owned;
	}
	if (open_image(t, err) != 0) {
		ds_tok_free(t);
		return -1;
	}
	*out = t;
	return 0;
}

void ds_tok_free(ds_tok *t)
{
	if (t == NULL)
		return;
	tk_free_regexes(t);
	if (t->map.fd >= 0 || t->map.data != NULL)
		ds_map_close(&t->map);
	free(t->owned);
	free(t);
}

void ds_tok_get_info(const ds_tok *t, ds_tok_info *i)
{
	const struct tb_header *h = t->h;

	memset(i, 0, sizeof *i);
	i->type = h->model == TB_SP_UNIGRAM ? "sp-unigram" :
		  h->model == TB_SP_BPE ? "sp-bpe" :
		  (h->flags & TBF_BYTE_LEVEL) ? "bpe-bytelevel" : "bpe";
	i->chat_template = t->chat;
	i->n_vocab = h->n_vocab;
	i->bos = h->bos;
	i->eos = h->eos;
	i->eot = h->eot;
	i->unk = h->unk;
	i->pad = h->pad;
	i->add_bos = !!(h->flags & TBF_ADD_BOS);
	i->add_eos = !!(h->flags & TBF_ADD_EOS);
}

uint32_t ds_tok_n_vocab(const ds_tok *t) { return t->h->n_vocab; }
int32_t ds_tok_bos(const ds_tok *t) { return t->h->bos; }
int32_t ds_tok_eos(const ds_tok *t) { return t->h->eos; }
int32_t ds_tok_eot(const ds_tok *t) { return t->h->eot; }

int ds_tok_is_special(const ds_tok *t, int32_t id)
{
	if (id < 0 || (uint32_t)id >= t->h->n_vocab)
		return 0;
	return (t->tok[id].attr & (TA_SPECIAL | TA_CONTROL)) != 0;
}

const char *ds_tok_unicode_version(void)
{
	return ds_uni_version;
}
