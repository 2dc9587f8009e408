/* fuzz_tokids.c - the token stream (ds_tok_ids_parse, what ds-run reads
 * on stdin and ds-tok -d decodes): each input line parsed under a few
 * vocabulary sizes.  What parses is below the limit, came from digits
 * and blanks only, and prints back to a line that parses the same. */
#include <inttypes.h>

#include "fuzz.h"
#include "tokenizer/tokenizer.h"

static void line(const char *s, size_t n, uint32_t limit)
{
	ds_tok_ids ids = { 0 }, again = { 0 };
	ds_err err;
	size_t i, k = 0;
	char *buf;

	if (ds_tok_ids_parse(s, n, limit, &ids, &err) != 0) {
		FZ_CHECK(memchr(err.msg, '\0', sizeof err.msg) != NULL);
		ds_tok_ids_free(&ids);
		return;
	}
	for (i = 0; i < n; i++)
		FZ_CHECK((s[i] >= '0' && s[i] <= '9') || s[i] == ' ' ||
			 s[i] == '\t' || s[i] == '\r');
	buf = malloc(ids.n * 12 + 1);
	FZ_CHECK(buf != NULL);
	for (i = 0; i < ids.n; i++) {
		FZ_CHECK(ids.v[i] >= 0 && (uint32_t)ids.v[i] < limit);
		k += (size_t)sprintf(buf + k, "%s%" PRId32, i ? " " : "", ids.v[i]);
	}
	FZ_CHECK(ds_tok_ids_parse(buf, k, limit, &again, &err) == 0);
	FZ_CHECK(again.n == ids.n && (ids.n == 0 ||
				      memcmp(again.v, ids.v, ids.n * 4) == 0));
	free(buf);
	ds_tok_ids_free(&ids);
	ds_tok_ids_free(&again);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const uint32_t limits[] = { 1, 384, 129280, UINT32_MAX };
	const char *s = (const char *)data, *end = s + size;

	while (s <= end) {
		const char *nl = memchr(s, '\n', (size_t)(end - s));
		size_t n = nl ? (size_t)(nl - s) : (size_t)(end - s);

		for (size_t i = 0; i < sizeof limits / sizeof *limits; i++)
			line(s, n, limits[i]);
		if (nl == NULL)
			break;
		s = nl + 1;
	}
	return 0;
}
