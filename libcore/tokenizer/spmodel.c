/* spmodel.c - read a SentencePiece .model (the ModelProto protobuf, parsed
 * directly from its wire format) into the tokenizer.bin builder. */
#include <stdlib.h>
#include <string.h>

#include "tok_int.h"

struct pb {
	const uint8_t *p, *end;
};

static int pb_varint(struct pb *r, uint64_t *v)
{
	uint64_t x = 0;

	for (int s = 0; s < 70; s += 7) {
		if (r->p >= r->end)
			return -1;
		x |= (uint64_t)(*r->p & 0x7f) << s;
		if (!(*r->p++ & 0x80)) {
			*v = x;
			return 0;
		}
	}
	return -1;
}

/* Next field: number, wire type, and for type 2 the payload; 0 at the end,
 * 1 for a field, -1 on malformed data. */
static int pb_next(struct pb *r, uint32_t *field, uint32_t *wt, uint64_t *v,
		   struct pb *sub)
{
	uint64_t key, len;

	if (r->p == r->end)
		return 0;
	if (pb_varint(r, &key) != 0 || (key >> 3) == 0 || (key >> 3) > 0x1fffffff)
		return -1;
	*field = (uint32_t)(key >> 3);
	*wt = (uint32_t)(key & 7);
	switch (*wt) {
	case 0:
		return pb_varint(r, v) == 0 ? 1 : -1;
	case 1:
		if (r->end - r->p < 8)
			return -1;
		memcpy(v, r->p, 8);
		r->p += 8;
		return 1;
	case 5: {
		uint32_t x;

		if (r->end - r->p < 4)
			return -1;
		memcpy(&x, r->p, 4);
		*v = x;
		r->p += 4;
		return 1;
	}
	case 2:
		if (pb_varint(r, &len) != 0 || len > (uint64_t)(r->end - r->p))
			return -1;
		sub->p = r->p;
		sub->end = r->p + len;
		r->p += len;
		return 1;
	}
	return -1; /* groups (3, 4) and 6, 7 */
}

struct sp_spec {
	uint32_t model_type;     /* 1 unigram, 2 bpe */
	int byte_fallback, ws_suffix;
	int32_t unk, bos, eos, pad;
	int dummy_prefix, remove_ws, escape_ws;
	struct pb charsmap, name;
	int denorm;
};

static int read_trainer(struct pb r, struct sp_spec *s)
{
	uint32_t f, wt;
	uint64_t v;
	struct pb sub;
	int k;

	while ((k = pb_next(&r, &f, &wt, &v, &sub)) == 1) {
		if (wt != 0)
			continue;
		switch (f) {
		case 3: s->model_type = (uint32_t)v; break;
		case 24: s->ws_suffix = v != 0; break;
		case 35: s->byte_fallback = v != 0; break;
		case 40: s->unk = (int32_t)v; break;
		case 41: s->bos = (int32_t)v; break;
		case 42: s->eos = (int32_t)v; break;
		case 43: s->pad = (int32_t)v; break;
		}
	}
	return k;
}

static int read_normspec(struct pb r, struct sp_spec *s, int denorm)
{
	uint32_t f, wt;
	uint64_t v;
	struct pb sub;
	int k;

	while ((k = pb_next(&r, &f, &wt, &v, &sub)) == 1) {
		if (denorm) {
			if (f == 2 && wt == 2 && sub.end > sub.p)
				s->denorm = 1;
			continue;
		}
		if (f == 1 && wt == 2)
			s->name = sub;
		else if (f == 2 && wt == 2)
			s->charsmap = sub;
		else if (f == 3 && wt == 0)
			s->dummy_prefix = v != 0;
		else if (f == 4 && wt == 0)
			s->remove_ws = v != 0;
		else if (f == 5 && wt == 0)
			s->escape_ws = v != 0;
	}
	return k;
}

static int add_piece(struct tb_builder *b, uint32_t id, struct pb r,
		     ds_err *err)
{
	uint32_t f, wt, type = 1, attr;
	uint64_t v;
	struct pb sub, piece = { NULL, NULL };
	float score = 0;
	int k;
	int64_t off;

	while ((k = pb_next(&r, &f, &wt, &v, &sub)) == 1) {
		if (f == 1 && wt == 2)
			piece = sub;
		else if (f == 2 && wt == 5) {
			uint32_t x = (uint32_t)v;

			memcpy(&score, &x, 4);
		} else if (f == 3 && wt == 0)
			type = (uint32_t)v;
	}
	if (k < 0)
		return ds_errf(err, "piece %u: malformed", id);
	if (piece.p == NULL || piece.p == piece.end)
		return ds_errf(err, "piece %u: empty", id);
	switch (type) {
	case 1: attr = TA_NORMAL | TA_ENC; break;
	case 2: attr = TA_UNKNOWN; break;
	case 3: attr = TA_CONTROL | TA_SPECIAL; break;
	case 4: attr = TA_ADDED | TA_ENC; break;
	case 5: attr = TA_UNUSED | TA_ENC; break;
	case 6: attr = TA_BYTE; break;
	default: return ds_errf(err, "piece %u: type %u unknown", id, type);
	}
	if (type == 6) {
		char h[3] = { 0 };
		char *end;
		long bv;

		if (piece.end - piece.p != 6 || memcmp(piece.p, "<0x", 3) != 0 ||
		    piece.p[5] != '>')
			return ds_errf(err, "piece %u: byte piece is not <0xHH>",
				       id);
		memcpy(h, piece.p + 3, 2);
		bv = strtol(h, &end, 16);
		if (end != h + 2)
			return ds_errf(err, "piece %u: byte piece is not <0xHH>",
				       id);
		attr |= (uint32_t)bv << 24;
		b->byte_ids[bv] = (int32_t)id;
	}
	off = tb_str(b, piece.p, (size_t)(piece.end - piece.p), err);
	if (off < 0)
		return -1;
	b->tok[id] = (struct tb_token){ (uint32_t)off, (uint32_t)(piece.end - piece.p),
		(uint32_t)off, (uint32_t)(piece.end - piece.p), score, attr };
	if (type == 1) {
		if (score < b->min_score)
			b->min_score = score;
		if (score > b->max_score)
			b->max_score = score;
	}
	return 0;
}

/* Whether BPE merges can be run word by word: no mergeable piece holds
 * U+2581 other than at its start, and there are no UNUSED pieces (whose
 * re-splitting SentencePiece does with a table over the whole text). */
static int words_apart(const struct tb_builder *b)
{
	for (uint32_t i = 0; i < b->n_tok; i++) {
		const struct tb_token *t = &b->tok[i];
		const uint8_t *p = b->pool.p + t->piece_off;

		if (t->attr & TA_UNUSED)
			return 0;
		if (!(t->attr & (TA_NORMAL | TA_ADDED)))
			continue;
		for (uint32_t k = 1; k + 3 <= t->piece_len; k++)
			if (memcmp(p + k, "\xe2\x96\x81", 3) == 0)
				return 0;
	}
	return 1;
}

static int read_model(struct tb_builder *b, const uint8_t *data, size_t n,
		      ds_err *err)
{
	struct pb r = { data, data + n }, sub;
	struct sp_spec s = { .model_type = 1, .unk = 0, .bos = 1, .eos = 2,
			     .pad = -1, .dummy_prefix = 1, .remove_ws = 1,
			     .escape_ws = 1 };
	uint32_t f, wt, npieces = 0, id = 0;
	uint64_t v;
	int k;

	/* count the pieces first, to size the vocabulary */
	while ((k = pb_next(&r, &f, &wt, &v, &sub)) == 1)
		npieces += f == 1 && wt == 2;
	if (k < 0)
		return ds_errf(err, "malformed protobuf");
	if (npieces == 0)
		return ds_errf(err, "no pieces");
	if (tb_set_vocab_size(b, npieces, err) != 0)
		return -1;
	/* FLT_MIN, as SentencePiece starts max_score (a quirk it has) */
	b->min_score = 3.402823466e+38f;
	b->max_score = 1.175494351e-38f;
	r.p = data;
	while ((k = pb_next(&r, &f, &wt, &v, &sub)) == 1) {
		if (wt != 2)
			continue;
		if (f == 1 && add_piece(b, id++, sub, err) != 0)
			return -1;
		if (f == 2 && read_trainer(sub, &s) < 0)
			return ds_errf(err, "trainer_spec: malformed");
		if ((f == 3 || f == 5) && read_normspec(sub, &s, f == 5) < 0)
			return ds_errf(err, "normalizer_spec: malformed");
	}
	if (s.model_type != 1 && s.model_type != 2)
		return ds_errf(err, "model_type %s is not supported (only "
			       "UNIGRAM and BPE)",
			       s.model_type == 3 ? "WORD" :
			       s.model_type == 4 ? "CHAR" : "unknown");
	if (s.denorm)
		return ds_errf(err, "a denormalizer_spec is not supported");
	b->model = s.model_type == 1 ? TB_SP_UNIGRAM : TB_SP_BPE;
	b->flags |= TBF_DEC_SP | TBF_DEC_META;
	if (s.byte_fallback)
		b->flags |= TBF_BYTE_FALLBACK;
	if (s.dummy_prefix)
		b->flags |= TBF_SP_DUMMY_PREFIX;
	if (s.remove_ws)
		b->flags |= TBF_SP_REMOVE_WS;
	if (s.escape_ws)
		b->flags |= TBF_SP_ESCAPE_WS;
	if (s.ws_suffix)
		b->flags |= TBF_SP_WS_SUFFIX;
	if (b->model == TB_SP_BPE && !s.ws_suffix && words_apart(b))
		b->flags |= TBF_SP_WORDS;
	if (s.unk < 0 || (uint32_t)s.unk >= npieces ||
	    !(b->tok[s.unk].attr & TA_UNKNOWN))
		return ds_errf(err, "unk_id %d is not an UNKNOWN piece", s.unk);
	b->unk = s.unk;
	b->bos = s.bos >= 0 && (uint32_t)s.bos < npieces ? s.bos : -1;
	b->eos = s.eos >= 0 && (uint32_t)s.eos < npieces ? s.eos : -1;
	b->pad = s.pad >= 0 && (uint32_t)s.pad < npieces ? s.pad : -1;
	if (s.charsmap.end > s.charsmap.p) {
		uint32_t tsize;

		if (s.charsmap.end - s.charsmap.p <= 4)
			return ds_errf(err, "precompiled_charsmap: too short");
		memcpy(&tsize, s.charsmap.p, 4);
		if (tsize >= (size_t)(s.charsmap.end - s.charsmap.p) - 4 ||
		    tsize % 4 != 0)
			return ds_errf(err, "precompiled_charsmap: trie of %u "
				       "bytes in a blob of %zu", tsize,
				       (size_t)(s.charsmap.end - s.charsmap.p));
		b->charsmap = s.charsmap.p;
		b->charsmap_len = (uint32_t)(s.charsmap.end - s.charsmap.p);
	}
	return 0;
}

int ds_tok_read_spmodel(struct tb_builder *b, const char *path,
			const char *config, ds_err *err)
{
	const char *bn = strrchr(path, '/');
	ds_map m;
	int rc;

	bn = bn ? bn + 1 : path;
	if (ds_map_open(&m, path, 0, err) != 0)
		return -1;
	rc = read_model(b, m.data, m.size, err);
	if (rc == 0)
		rc = ds_tok_read_config(b, config, err);
	if (rc == 0 && b->charsmap != NULL) {
		/* the blob must outlive the mapping: copy it into the pool */
		int64_t off = tb_str(b, b->charsmap, b->charsmap_len, err);

		rc = off < 0 ? -1 : 0;
		b->charsmap = NULL;
		if (rc == 0)
			b->charsmap_off = (uint32_t)off;
	}
	ds_map_close(&m);
	if (rc != 0)
		ds_err_prefix(err, "%s", bn);
	return rc;
}
