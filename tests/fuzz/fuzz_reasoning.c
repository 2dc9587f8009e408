/* fuzz_reasoning.c - an answer split into reasoning and content
 * (libcore/chat/reasoning.c), the text being a model's: any bytes.  The
 * first byte gives whether the prompt opened the block (bit 0) and how
 * many cuts there are (bits 1-3); that many bytes place the cuts; the
 * rest is the text.  Pushed whole or in the pieces, the outputs must be
 * the same, no longer than the text, and the text itself when it holds
 * no marker. */
#include "fuzz.h"
#include "chat/reasoning.h"

static void split(int opened, const uint8_t *s, size_t n, const size_t *cuts,
		  size_t nc, ds_reason_out *o)
{
	ds_reason r;
	size_t at = 0, i;
	ds_err err;

	memset(o, 0, sizeof *o);
	ds_reason_init(&r, opened);
	for (i = 0; i <= nc; i++) {
		size_t end = i < nc ? cuts[i] : n;

		FZ_CHECK(ds_reason_push(&r, (const char *)s + at, end - at, o, &err) == 0);
		at = end;
	}
	FZ_CHECK(ds_reason_finish(&r, o, &err) == 0);
	ds_reason_free(&r);
}

static int eq(const char *a, size_t na, const char *b, size_t nb)
{
	return na == nb && (na == 0 || memcmp(a, b, na) == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	ds_reason_out whole, cut;
	size_t cuts[8], nc, i, n;
	const uint8_t *s;
	int opened;

	if (size < 1)
		return 0;
	opened = data[0] & 1;
	nc = (data[0] >> 1) & 7;
	if (size < 1 + nc)
		return 0;
	s = data + 1 + nc;
	n = size - 1 - nc;
	for (i = 0; i < nc; i++) {
		cuts[i] = (size_t)data[1 + i] * n / 255;
		if (i > 0 && cuts[i] < cuts[i - 1])
			cuts[i] = cuts[i - 1];
	}
	split(opened, s, n, NULL, 0, &whole);
	split(opened, s, n, cuts, nc, &cut);
	FZ_CHECK(eq(whole.think, whole.n_think, cut.think, cut.n_think));
	FZ_CHECK(eq(whole.content, whole.n_content, cut.content, cut.n_content));
	FZ_CHECK(whole.n_think + whole.n_content <= n);
	if (!opened && memmem(s, n, "<think>", 7) == NULL)
		FZ_CHECK(whole.n_think == 0 && eq(whole.content, whole.n_content,
						  (const char *)s, n));
	ds_reason_out_free(&whole);
	ds_reason_out_free(&cut);
	return 0;
}
