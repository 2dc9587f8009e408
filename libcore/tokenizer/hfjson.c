/* hfjson.c - read a Hugging Face tokenizer.json (BPE model) into the
 * tokenizer.bin builder.  Anything this reader does not implement exactly
 * is refused with a message naming it, never approximated. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "tok_int.h"

/* GPT-2's byte <-> char map (bytes_char): printable Latin-1 bytes stand for
 * themselves, the other 68 become U+0100 + n in byte order. */
static void byte_map(uint32_t cp_of[256])
{
	uint32_t n = 0;

	for (int b = 0; b < 256; b++) {
		int keep = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) ||
			   (b >= 0xae);
		cp_of[b] = keep ? (uint32_t)b : 0x100 + n++;
	}
}

/* Un-map a byte-level piece into the bytes it stands for; 0 if some char
 * is not in the map (then the piece stands for its own UTF-8). */
static int unmap(const char *s, size_t n, const int16_t *byte_of, tb_buf *out)
{
	size_t i = 0;

	out->n = 0;
	while (i < n) {
		uint32_t cp;
		size_t l = tk_utf8_len((const uint8_t *)s + i, n - i, &cp);
		uint8_t b;

		if (l == 0 || cp >= 0x144 || byte_of[cp] < 0)
			return 0;
		b = (uint8_t)byte_of[cp];
		if (tb_buf_put(out, &b, 1) != 0)
			return -1;
		i += l;
	}
	return 1;
}

static const char *jstr(json_t *o, const char *k)
{
	json_t *v = json_object_get(o, k);

	return json_is_string(v) ? json_string_value(v) : NULL;
}

static int jbool(json_t *o, const char *k, int dflt)
{
	json_t *v = json_object_get(o, k);

	return json_is_boolean(v) ? json_is_true(v) : dflt;
}

static int add_op(struct tb_builder *b, int pre, struct tb_op *op,
		  const char *s1, size_t n1, const char *s2, size_t n2,
		  ds_err *err)
{
	struct tb_op *ops = pre ? b->pretok : b->norm;
	uint32_t *n = pre ? &b->n_pretok : &b->n_norm;
	int64_t o1 = tb_str(b, s1 ? s1 : "", s1 ? n1 : 0, err);
	int64_t o2 = o1 < 0 ? -1 : tb_str(b, s2 ? s2 : "", s2 ? n2 : 0, err);

	if (o2 < 0)
		return -1;
	if (*n >= TB_MAX_OPS)
		return ds_errf(err, "more than %u %s steps", TB_MAX_OPS,
			       pre ? "pre-tokenizer" : "normalizer");
	op->s1_off = (uint32_t)o1;
	op->s1_len = s1 ? (uint32_t)n1 : 0;
	op->s2_off = (uint32_t)o2;
	op->s2_len = s2 ? (uint32_t)n2 : 0;
	ops[(*n)++] = *op;
	return 0;
}

/* A {"String": s} or {"Regex": r} pattern. */
static const char *pattern(json_t *p, int *literal)
{
	const char *s;

	if ((s = jstr(p, "String")) != NULL) {
		*literal = 1;
		return s;
	}
	*literal = 0;
	return jstr(p, "Regex");
}

static int read_normalizer(struct tb_builder *b, json_t *n, ds_err *err)
{
	const char *type;
	struct tb_op op = { 0 };

	if (n == NULL || json_is_null(n))
		return 0;
	type = jstr(n, "type");
	if (type == NULL)
		return ds_errf(err, "normalizer without a type");
	if (strcmp(type, "Sequence") == 0) {
		json_t *l = json_object_get(n, "normalizers"), *e;
		size_t i;

		json_array_foreach(l, i, e)
			if (read_normalizer(b, e, err) != 0)
				return -1;
		return 0;
	}
	if (strcmp(type, "NFC") == 0)
		op.op = OP_NFC;
	else if (strcmp(type, "NFD") == 0)
		op.op = OP_NFD;
	else if (strcmp(type, "NFKC") == 0)
		op.op = OP_NFKC;
	else if (strcmp(type, "NFKD") == 0)
		op.op = OP_NFKD;
	else if (strcmp(type, "Lowercase") == 0)
		op.op = OP_LOWER;
	else if (strcmp(type, "Strip") == 0) {
		op.op = OP_STRIP;
		op.a = (uint32_t)jbool(n, "strip_left", 1);
		op.b = (uint32_t)jbool(n, "strip_right", 1);
	} else if (strcmp(type, "Prepend") == 0) {
		const char *s = jstr(n, "prepend");

		if (s == NULL)
			return ds_errf(err, "normalizer Prepend without prepend");
		op.op = OP_PREPEND;
		return add_op(b, 0, &op, s, strlen(s), NULL, 0, err);
	} else if (strcmp(type, "Replace") == 0) {
		int lit;
		const char *p = pattern(json_object_get(n, "pattern"), &lit);
		const char *c = jstr(n, "content");

		if (p == NULL || c == NULL)
			return ds_errf(err, "normalizer Replace without pattern "
				       "or content");
		op.op = lit ? OP_REPLACE : OP_REPLACE_RE;
		return add_op(b, 0, &op, p, strlen(p), c, strlen(c), err);
	} else {
		return ds_errf(err, "normalizer %s is not supported", type);
	}
	return add_op(b, 0, &op, NULL, 0, NULL, 0, err);
}

static int behavior(const char *s, uint32_t *out)
{
	static const char *const names[] = { "Removed", "Isolated",
		"MergedWithPrevious", "MergedWithNext", "Contiguous" };

	for (uint32_t i = 0; s != NULL && i < 5; i++)
		if (strcmp(s, names[i]) == 0) {
			*out = i;
			return 0;
		}
	return -1;
}

static int prepend_scheme(json_t *n, uint32_t *out)
{
	const char *s = jstr(n, "prepend_scheme");

	if (s == NULL) { /* older files: add_prefix_space */
		*out = jbool(n, "add_prefix_space", 1) ? PREPEND_ALWAYS
						       : PREPEND_NEVER;
		return 0;
	}
	if (strcmp(s, "always") == 0)
		*out = PREPEND_ALWAYS;
	else if (strcmp(s, "first") == 0)
		*out = PREPEND_FIRST;
	else if (strcmp(s, "never") == 0)
		*out = PREPEND_NEVER;
	else
		return -1;
	return 0;
}

static int read_pretok(struct tb_builder *b, json_t *n, ds_err *err)
{
	const char *type;
	struct tb_op op = { 0 };

	if (n == NULL || json_is_null(n))
		return 0;
	type = jstr(n, "type");
	if (type == NULL)
		return ds_errf(err, "pre_tokenizer without a type");
	if (strcmp(type, "Sequence") == 0) {
		json_t *l = json_object_get(n, "pretokenizers"), *e;
		size_t i;

		json_array_foreach(l, i, e)
			if (read_pretok(b, e, err) != 0)
				return -1;
		return 0;
	}
	if (strcmp(type, "Split") == 0) {
		int lit;
		const char *p = pattern(json_object_get(n, "pattern"), &lit);

		if (p == NULL || behavior(jstr(n, "behavior"), &op.a) != 0)
			return ds_errf(err, "pre_tokenizer Split: bad pattern or "
				       "behavior");
		op.op = OP_SPLIT;
		op.b = (uint32_t)jbool(n, "invert", 0);
		op.c = (uint32_t)lit;
		if (!lit) {
			/* translated now, so that loading need not */
			char *tr = tk_onig_to_pcre2(p, strlen(p), err);
			int rc;

			if (tr == NULL)
				return -1;
			rc = add_op(b, 1, &op, p, strlen(p), tr, strlen(tr), err);
			free(tr);
			pcre2_config(PCRE2_CONFIG_UNICODE_VERSION, b->pcre_unicode);
			return rc;
		}
		return add_op(b, 1, &op, p, strlen(p), NULL, 0, err);
	}
	if (strcmp(type, "ByteLevel") == 0) {
		op.op = OP_BYTELEVEL;
		op.a = (uint32_t)jbool(n, "add_prefix_space", 1);
		op.b = (uint32_t)jbool(n, "use_regex", 1);
		b->flags |= TBF_BYTE_LEVEL;
	} else if (strcmp(type, "Digits") == 0) {
		op.op = OP_DIGITS;
		op.a = (uint32_t)jbool(n, "individual_digits", 0);
	} else if (strcmp(type, "WhitespaceSplit") == 0) {
		op.op = OP_WSSPLIT;
	} else if (strcmp(type, "Metaspace") == 0) {
		const char *r = jstr(n, "replacement");

		if (r == NULL || prepend_scheme(n, &op.a) != 0)
			return ds_errf(err, "pre_tokenizer Metaspace: bad "
				       "replacement or prepend_scheme");
		op.op = OP_METASPACE;
		op.b = (uint32_t)jbool(n, "split", 1);
		return add_op(b, 1, &op, r, strlen(r), NULL, 0, err);
	} else {
		return ds_errf(err, "pre_tokenizer %s is not supported", type);
	}
	return add_op(b, 1, &op, NULL, 0, NULL, 0, err);
}

/* The decoder chains that occur with BPE models, as flags. */
static int read_decoder(struct tb_builder *b, json_t *d, ds_err *err)
{
	const char *type = d ? jstr(d, "type") : NULL;

	if (type == NULL)
		return ds_errf(err, "decoder missing or without a type");
	if (strcmp(type, "ByteLevel") == 0) {
		if (!(b->flags & TBF_BYTE_LEVEL))
			return ds_errf(err, "ByteLevel decoder without a "
				       "ByteLevel pre_tokenizer");
		return 0;
	}
	if (b->flags & TBF_BYTE_LEVEL)
		return ds_errf(err, "decoder %s with a ByteLevel pre_tokenizer "
			       "is not supported", type);
	if (strcmp(type, "Metaspace") == 0) {
		uint32_t ps;

		if (prepend_scheme(d, &ps) != 0)
			return ds_errf(err, "decoder Metaspace: bad "
				       "prepend_scheme");
		b->flags |= TBF_DEC_META;
		if (ps != PREPEND_NEVER)
			b->flags |= TBF_DEC_STRIP1;
		return 0;
	}
	if (strcmp(type, "Sequence") == 0) {
		json_t *l = json_object_get(d, "decoders"), *e;
		size_t i;
		int fused = 0;

		json_array_foreach(l, i, e) {
			const char *t = jstr(e, "type");

			if (t == NULL)
				return ds_errf(err, "decoder without a type");
			if (strcmp(t, "Replace") == 0) {
				int lit;
				const char *p = pattern(json_object_get(e, "pattern"), &lit);
				const char *c = jstr(e, "content");

				if (!lit || p == NULL || c == NULL ||
				    strcmp(p, "\xe2\x96\x81") != 0 ||
				    strcmp(c, " ") != 0)
					return ds_errf(err, "decoder Replace other "
						       "than U+2581 -> ' ' is not "
						       "supported");
				b->flags |= TBF_DEC_META;
			} else if (strcmp(t, "ByteFallback") == 0) {
				b->flags |= TBF_DEC_BYTES_ALL;
			} else if (strcmp(t, "Fuse") == 0) {
				fused = 1;
			} else if (strcmp(t, "Strip") == 0) {
				const char *c = jstr(e, "content");
				json_int_t st = json_integer_value(json_object_get(e, "start"));
				json_int_t sp = json_integer_value(json_object_get(e, "stop"));

				if (!fused || c == NULL || strcmp(c, " ") != 0 ||
				    st > 1 || sp != 0)
					return ds_errf(err, "decoder Strip other "
						       "than one leading space "
						       "after Fuse is not "
						       "supported");
				if (st == 1)
					b->flags |= TBF_DEC_STRIP1;
			} else {
				return ds_errf(err, "decoder %s is not supported",
					       t);
			}
		}
		return 0;
	}
	return ds_errf(err, "decoder %s is not supported", type);
}

/* BOS/EOS from a TemplateProcessing post-processor's "single" template. */
static int read_post(struct tb_builder *b, json_t *p, json_t *vocab,
		     ds_err *err)
{
	const char *type = p ? jstr(p, "type") : NULL;
	json_t *single, *e;
	size_t i, n;

	if (type == NULL || strcmp(type, "ByteLevel") == 0)
		return 0;
	if (strcmp(type, "Sequence") == 0) {
		json_t *l = json_object_get(p, "processors");

		json_array_foreach(l, i, e)
			if (read_post(b, e, vocab, err) != 0)
				return -1;
		return 0;
	}
	if (strcmp(type, "TemplateProcessing") != 0)
		return ds_errf(err, "post_processor %s is not supported", type);
	single = json_object_get(p, "single");
	n = json_array_size(single);
	json_array_foreach(single, i, e) {
		json_t *st = json_object_get(e, "SpecialToken");
		const char *name = st ? jstr(st, "id") : NULL;
		json_t *spec, *ids;

		if (st == NULL)
			continue;
		spec = json_object_get(json_object_get(p, "special_tokens"), name ? name : "");
		ids = json_object_get(spec, "ids");
		if (json_array_size(ids) != 1)
			return ds_errf(err, "post_processor: special token %s "
				       "is not one id", name ? name : "?");
		if (i == 0) {
			b->bos = (int32_t)json_integer_value(json_array_get(ids, 0));
			b->flags |= TBF_ADD_BOS;
		} else if (i == n - 1) {
			b->eos = (int32_t)json_integer_value(json_array_get(ids, 0));
			b->flags |= TBF_ADD_EOS;
		} else {
			return ds_errf(err, "post_processor: a special token "
				       "inside the template is not supported");
		}
	}
	(void)vocab;
	return 0;
}

static int set_token(struct tb_builder *b, uint32_t id, const char *piece,
		     size_t pn, const void *text, size_t tn, uint32_t attr,
		     ds_err *err)
{
	int64_t po = tb_str(b, piece, pn, err), to;

	if (po < 0)
		return -1;
	to = (text == piece && tn == pn) ? po : tb_str(b, text, tn, err);
	if (to < 0)
		return -1;
	b->tok[id].piece_off = (uint32_t)po;
	b->tok[id].piece_len = (uint32_t)pn;
	b->tok[id].text_off = (uint32_t)to;
	b->tok[id].text_len = (uint32_t)tn;
	b->tok[id].attr = attr;
	return 0;
}

/* The largest id in the model's vocab, or -1 when it is empty. */
static int vocab_max_id(json_t *vocab, json_int_t *maxid, ds_err *err)
{
	const char *k;
	json_t *v;

	*maxid = -1;
	json_object_foreach(vocab, k, v) {
		json_int_t id = json_integer_value(v);

		if (!json_is_integer(v) || id < 0 || id >= TB_MAX_VOCAB)
			return ds_errf(err, "vocab: %s: bad id", k);
		*maxid = id > *maxid ? id : *maxid;
	}
	return 0;
}

/* Added tokens get their ids as Hugging Face assigns them on load
 * (AddedVocabulary::add_tokens), whatever "id" says: the model vocab's
 * id if the content is in it, else the id of an earlier added token
 * with the same content, else the next after the largest so far (at
 * least the vocab's size).  AID[i] gets added_tokens[i]'s id. */
static int added_ids(json_t *vocab, json_t *added, json_int_t *aid,
		     json_int_t *maxid, ds_err *err)
{
	json_int_t amax = -1, nv = (json_int_t)json_object_size(vocab);
	json_t *e;
	size_t i;

	json_array_foreach(added, i, e) {
		const char *c = jstr(e, "content");
		json_t *inv = c ? json_object_get(vocab, c) : NULL;
		json_int_t id = inv ? json_integer_value(inv) : -1;

		if (c == NULL)
			return ds_errf(err, "added_tokens[%zu]: no content", i);
		for (size_t j = 0; j < i && id < 0; j++)
			if (strcmp(jstr(json_array_get(added, j), "content"), c) == 0)
				id = aid[j];
		if (id < 0)
			id = amax >= nv ? amax + 1 : nv;
		if (id >= TB_MAX_VOCAB)
			return ds_errf(err, "added_tokens[%zu]: id %lld", i,
				       (long long)id);
		aid[i] = id;
		amax = id > amax ? id : amax;
		*maxid = id > *maxid ? id : *maxid;
	}
	return 0;
}

/* A table of maxid + 1 entries is allocated: ids far past the number of
 * tokens given would make a tiny file take gigabytes (real vocabularies
 * are dense). */
static int size_vocab(struct tb_builder *b, json_int_t maxid, size_t given,
		      ds_err *err)
{
	if (maxid < 0)
		return ds_errf(err, "empty vocabulary");
	if ((size_t)maxid > 2 * given + 1024)
		return ds_errf(err, "vocab: id %lld for %zu tokens: too sparse",
			       (long long)maxid, given);
	return tb_set_vocab_size(b, (uint32_t)maxid + 1, err);
}

/* A SentencePiece-style byte piece "<0xAB>" (upper-case hex). */
static void mark_byte_piece(struct tb_builder *b, uint32_t id, const char *k,
			    size_t kn)
{
	char *end;
	long bv;

	if (kn != 6 || k[0] != '<' || k[1] != '0' || k[2] != 'x' || k[5] != '>' ||
	    (b->flags & TBF_BYTE_LEVEL))
		return;
	bv = strtol(k + 3, &end, 16);
	if (end == k + 5 && k[3] != '-' && k[3] != '+' &&
	    !(k[3] >= 'a' && k[3] <= 'f') && !(k[4] >= 'a' && k[4] <= 'f')) {
		b->tok[id].attr |= TA_BYTE | (uint32_t)bv << 24;
		b->byte_ids[bv] = (int32_t)id;
	}
}

/* The model's pieces; byte-level ones also get their raw bytes. */
static int set_pieces(struct tb_builder *b, json_t *vocab,
		      const uint32_t cp_of[256], ds_err *err)
{
	int16_t byte_of[0x144];
	tb_buf tmp = { 0 };
	const char *k;
	json_t *v;
	int rc = 0;

	memset(byte_of, 0xff, sizeof byte_of);
	for (int c = 0; c < 256; c++)
		byte_of[cp_of[c]] = (int16_t)c;
	json_object_foreach(vocab, k, v) {
		uint32_t id = (uint32_t)json_integer_value(v);
		size_t kn = strlen(k);
		int m = 0;

		if (b->tok[id].piece_len > 0 || b->tok[id].attr)
			{ rc = ds_errf(err, "vocab: id %u given twice", id); break; }
		if ((b->flags & TBF_BYTE_LEVEL) &&
		    (m = unmap(k, kn, byte_of, &tmp)) < 0)
			{ rc = ds_errf(err, "out of memory"); break; }
		if ((rc = m ? set_token(b, id, k, kn, tmp.p, tmp.n, TA_ENC, err)
			    : set_token(b, id, k, kn, k, kn,
					(b->flags & TBF_BYTE_LEVEL) ? 0 : TA_ENC,
					err)) != 0)
			break;
		mark_byte_piece(b, id, k, kn);
	}
	tb_buf_free(&tmp);
	return rc;
}

/* Byte-level models: each byte's token is the piece of its code point. */
static void byte_level_ids(struct tb_builder *b, json_t *vocab,
			   const uint32_t cp_of[256])
{
	for (int c = 0; c < 256; c++) {
		char key[5];
		size_t l = tk_utf8_put(cp_of[c], (uint8_t *)key);
		json_t *idv;

		key[l] = '\0';
		idv = json_object_get(vocab, key);
		b->byte_ids[c] = idv ? (int32_t)json_integer_value(idv) : -1;
	}
}

static uint32_t added_attr(json_t *e)
{
	int special = jbool(e, "special", 0);
	uint32_t attr = TA_ADDED | (special ? TA_SPECIAL : 0);

	if (jbool(e, "normalized", !special))
		attr |= TA_NORMALIZED;
	if (jbool(e, "lstrip", 0))
		attr |= TA_LSTRIP;
	if (jbool(e, "rstrip", 0))
		attr |= TA_RSTRIP;
	if (jbool(e, "single_word", 0))
		attr |= TA_SINGLE_WORD;
	return attr;
}

static int set_added(struct tb_builder *b, json_t *added, const json_int_t *aid,
		     ds_err *err)
{
	json_t *e;
	size_t i;

	json_array_foreach(added, i, e) {
		uint32_t id = (uint32_t)aid[i], attr = added_attr(e);
		const char *c = jstr(e, "content");
		size_t cn = strlen(c);

		if (cn == 0)
			return ds_errf(err, "added_tokens[%zu]: empty content", i);
		/* An added token that is also a model piece stays reachable
		 * by the model only if it is the very same piece. */
		if (b->tok[id].piece_len == cn &&
		    memcmp(b->pool.p + b->tok[id].piece_off, c, cn) == 0)
			attr |= b->tok[id].attr & TA_ENC;
		if (set_token(b, id, c, cn, c, cn, attr, err))
			return -1;
	}
	return 0;
}

static int read_vocab(struct tb_builder *b, json_t *vocab, json_t *added,
		      ds_err *err)
{
	uint32_t cp_of[256];
	json_int_t maxid, *aid;
	size_t given = json_object_size(vocab) + json_array_size(added);
	int rc = -1;

	if (vocab_max_id(vocab, &maxid, err) != 0)
		return -1;
	aid = calloc(json_array_size(added) + 1, sizeof *aid);
	if (aid == NULL)
		return ds_errf(err, "out of memory");
	byte_map(cp_of);
	if (added_ids(vocab, added, aid, &maxid, err) == 0 &&
	    size_vocab(b, maxid, given, err) == 0 &&
	    set_pieces(b, vocab, cp_of, err) == 0) {
		if (b->flags & TBF_BYTE_LEVEL)
			byte_level_ids(b, vocab, cp_of);
		rc = set_added(b, added, aid, err);
	}
	free(aid);
	return rc;
}

static int read_merges(struct tb_builder *b, json_t *merges, json_t *vocab,
		       ds_err *err)
{
	json_t *m;
	size_t i;
	tb_buf cat = { 0 };
	int rc = -1;

	json_array_foreach(merges, i, m) {
		const char *l, *r;
		char *sp = NULL;
		json_t *a, *bb, *ab;

		if (json_is_string(m)) {
			const char *s = json_string_value(m);

			if (i == 0 && strncmp(s, "#version", 8) == 0)
				continue;
			sp = strchr(s, ' ');
			if (sp == NULL || strchr(sp + 1, ' ') != NULL) {
				ds_errf(err, "merges[%zu]: \"%s\" is not two parts",
					i, s);
				goto out;
			}
			cat.n = 0;
			if (tb_buf_put(&cat, s, (size_t)(sp - s)) || tb_buf_put(&cat, "", 1))
				goto oom;
			l = (const char *)cat.p;
			r = sp + 1;
		} else if (json_array_size(m) == 2 &&
			   json_is_string(json_array_get(m, 0)) &&
			   json_is_string(json_array_get(m, 1))) {
			l = json_string_value(json_array_get(m, 0));
			r = json_string_value(json_array_get(m, 1));
		} else {
			ds_errf(err, "merges[%zu]: neither \"a b\" nor [a, b]", i);
			goto out;
		}
		a = json_object_get(vocab, l);
		bb = json_object_get(vocab, r);
		{
			size_t ln = strlen(l), rn = strlen(r);
			char *both = malloc(ln + rn + 1);

			if (both == NULL)
				goto oom;
			memcpy(both, l, ln);
			memcpy(both + ln, r, rn + 1);
			ab = json_object_get(vocab, both);
			if (a == NULL || bb == NULL || ab == NULL) {
				ds_errf(err, "merges[%zu]: \"%s\" + \"%s\": %s not "
					"in the vocabulary", i, l, r,
					ab == NULL ? "the merge" : "a part");
				free(both);
				goto out;
			}
			free(both);
		}
		if (tb_add_merge(b, (uint32_t)json_integer_value(a),
				 (uint32_t)json_integer_value(bb),
				 (uint32_t)json_integer_value(ab), err) != 0)
			goto out;
	}
	rc = 0;
	goto out;
oom:
	ds_errf(err, "out of memory");
out:
	tb_buf_free(&cat);
	return rc;
}

static int read_model(struct tb_builder *b, json_t *root, ds_err *err)
{
	json_t *model = json_object_get(root, "model");
	json_t *vocab = json_object_get(model, "vocab");
	json_t *merges = json_object_get(model, "merges");
	json_t *dropout = json_object_get(model, "dropout");
	const char *type = jstr(model, "type"), *s, *unk;

	if (type == NULL)
		return ds_errf(err, "model without a type");
	if (strcmp(type, "BPE") != 0)
		return ds_errf(err, "model type %s is not supported (only BPE "
			       "tokenizer.json files, and SentencePiece .model)",
			       type);
	if (!json_is_object(vocab) || !json_is_array(merges))
		return ds_errf(err, "BPE model without vocab or merges");
	if (dropout != NULL && !json_is_null(dropout) &&
	    json_number_value(dropout) != 0.0)
		return ds_errf(err, "BPE dropout is not supported");
	if (((s = jstr(model, "continuing_subword_prefix")) && *s) ||
	    ((s = jstr(model, "end_of_word_suffix")) && *s))
		return ds_errf(err, "BPE continuing_subword_prefix / "
			       "end_of_word_suffix \"%s\" is not supported", s);
	b->model = TB_HF_BPE;
	if (jbool(model, "byte_fallback", 0))
		b->flags |= TBF_BYTE_FALLBACK;
	if (jbool(model, "ignore_merges", 0))
		b->flags |= TBF_IGNORE_MERGES;
	if (jbool(model, "fuse_unk", 0))
		b->flags |= TBF_FUSE_UNK;
	if (read_vocab(b, vocab, json_object_get(root, "added_tokens"), err) ||
	    read_merges(b, merges, vocab, err))
		return -1;
	if ((unk = jstr(model, "unk_token")) != NULL) {
		json_t *u = json_object_get(vocab, unk);

		if (u == NULL)
			return ds_errf(err, "unk_token %s not in the vocabulary",
				       unk);
		b->unk = (int32_t)json_integer_value(u);
	}
	return 0;
}

int ds_tok_read_hfjson(struct tb_builder *b, const char *path,
		       const char *config, ds_err *err)
{
	json_error_t je;
	json_t *root;
	const char *bn = strrchr(path, '/');
	int rc = -1;

	bn = bn ? bn + 1 : path;
	{
		/* read whole under a limit: jansson would take any size */
		char *text;
		size_t len;

		if (ds_read_file(path, TB_MAX_JSON, &text, &len, err) != 0)
			return -1;
		root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
		free(text);
	}
	if (root == NULL)
		return ds_errf(err, "%s: line %d: %s", path, je.line, je.text);
	if (read_pretok(b, json_object_get(root, "pre_tokenizer"), err) ||
	    read_normalizer(b, json_object_get(root, "normalizer"), err) ||
	    read_model(b, root, err) ||
	    read_decoder(b, json_object_get(root, "decoder"), err) ||
	    read_post(b, json_object_get(root, "post_processor"),
		      json_object_get(json_object_get(root, "model"), "vocab"),
		      err) ||
	    ds_tok_read_config(b, config, err)) {
		ds_err_prefix(err, "%s", bn);
		goto out;
	}
	rc = 0;
out:
	json_decref(root);
	return rc;
}
