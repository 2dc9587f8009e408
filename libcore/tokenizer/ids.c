/* ids.c - one line of the token stream (ds-tok(1), ds-run(1)): decimal
 * ids separated by blanks. */
#include <string.h>

#include "tok_int.h"

static int blank(char c)
{
	return c == ' ' || c == '\t' || c == '\r';
}

/* The offending text for a message: at most 20 bytes from s. */
#define AT(s, end) (int)((end) - (s) < 20 ? (end) - (s) : 20), (s)

int ds_tok_ids_parse(const char *s, size_t len, uint32_t limit,
		     ds_tok_ids *out, ds_err *err)
{
	const char *end = s + len;

	out->n = 0;
	for (;;) {
		const char *d;
		uint64_t v = 0;

		while (s < end && blank(*s))
			s++;
		if (s == end)
			return 0;
		for (d = s; d < end && *d >= '0' && *d <= '9'; d++)
			if (v <= UINT32_MAX) /* past it: too big, however long */
				v = v * 10 + (uint64_t)(*d - '0');
		if (d == s || (d < end && !blank(*d))) {
			while (d < end && !blank(*d))
				d++;
			return ds_errf(err, "\"%.*s\" is not a token id", AT(s, d));
		}
		if (v > INT32_MAX)
			return ds_errf(err, "\"%.*s\" is not a token id", AT(s, d));
		if (v >= limit)
			return ds_errf(err, "token id %.*s is not below the "
				       "vocabulary size %u", AT(s, d), limit);
		if (tk_ids_push(out, (int32_t)v, err) != 0)
			return -1;
		s = d;
	}
}
