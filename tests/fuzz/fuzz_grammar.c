/* fuzz_grammar.c - grammar text (libcore/grammar/gbnf.c) and the matcher
 * over it (match.c): the input is grammar text, a NUL byte, then bytes
 * that drive the matcher.  A refusal is one line "L:C: problem".  A
 * grammar that parses is matched: each driving byte is offered as is,
 * then picks one of the tokens the mask allows, which must be accepted;
 * now and then the mask is checked against accepting every token, and a
 * rollback must give back the state it had. */
#include "gfz.h"

static void check_refusal(const ds_err *err)
{
	unsigned line, col;
	int n = 0;

	FZ_CHECK(memchr(err->msg, '\0', sizeof err->msg) != NULL);
	FZ_CHECK(strchr(err->msg, '\n') == NULL);
	FZ_CHECK(sscanf(err->msg, "%u:%u: %n", &line, &col, &n) == 2 && n > 0 &&
		 line >= 1 && col >= 1);
}

static void drive(const ds_grammar *g, const uint8_t *d, size_t n)
{
	const gfz_vocab *gv = gfz_vocab_get();
	uint64_t bits[(GFZ_N + 63) / 64];
	ds_gmatch *m;
	ds_err err;
	size_t i;

	if (ds_gmatch_new(g, &m, &err) != 0) {
		FZ_CHECK(memchr(err.msg, '\0', sizeof err.msg) != NULL);
		return;
	}
	for (i = 0; i < n && i < 64; i++) {
		int32_t t;
		int r = ds_gmatch_accept_bytes(m, &d[i], 1, &err), comp;

		FZ_CHECK(r == DS_GMATCH_OK || r == DS_GMATCH_REJECT || r == -1);
		if (ds_gmatch_mask(m, gv->v, bits, &err) != 0)
			break;
		FZ_CHECK(gfz_bit(bits, (size_t)gv->eos) == ds_gmatch_complete(m));
		FZ_CHECK(ds_gmatch_complete(m) || ds_gmatch_can_continue(m));
		if (i % 16 == 0)
			gfz_check_mask(m, gv, bits);
		t = gfz_pick(gv, bits, d[i]);
		if (t < 0 || t == gv->eos)
			break;
		comp = ds_gmatch_complete(m);
		r = ds_gmatch_accept_token(m, gv->v, t, &err);
		if (r == -1)
			break;
		FZ_CHECK(r == DS_GMATCH_OK);
		FZ_CHECK(ds_gmatch_rollback(m, 1) == 0 && ds_gmatch_complete(m) == comp);
		FZ_CHECK(ds_gmatch_accept_token(m, gv->v, t, &err) == DS_GMATCH_OK);
	}
	ds_gmatch_free(m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const uint8_t *nul = memchr(data, '\0', size);
	size_t tlen = nul ? (size_t)(nul - data) : size;
	ds_grammar *g;
	ds_err err;

	if (tlen > 1 << 16)
		return 0;
	if (ds_grammar_parse((const char *)data, tlen, &g, &err) != 0) {
		check_refusal(&err);
		return 0;
	}
	if (nul)
		drive(g, nul + 1, size - tlen - 1);
	ds_grammar_free(g);
	return 0;
}
