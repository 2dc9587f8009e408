/* json.c - writing JSON (json.h). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"

/* The well-formed UTF-8 sequence at s (n bytes left): its length, or 0
 * with *bad the length of the maximal subpart to replace (at least 1). */
static size_t utf8_seq(const unsigned char *s, size_t n, size_t *bad)
{
	unsigned char lo = 0x80, hi = 0xbf;
	size_t len, i;

	*bad = 1;
	if (s[0] < 0x80)
		return 1;
	if (s[0] >= 0xc2 && s[0] <= 0xdf)
		len = 2;
	else if (s[0] >= 0xe0 && s[0] <= 0xef)
		len = 3, lo = s[0] == 0xe0 ? 0xa0 : 0x80, hi = s[0] == 0xed ? 0x9f : 0xbf;
	else if (s[0] >= 0xf0 && s[0] <= 0xf4)
		len = 4, lo = s[0] == 0xf0 ? 0x90 : 0x80, hi = s[0] == 0xf4 ? 0x8f : 0xbf;
	else
		return 0;
	for (i = 1; i < len; i++) {
		if (i >= n || s[i] < lo || s[i] > hi) {
			*bad = i;
			return 0;
		}
		lo = 0x80;
		hi = 0xbf;
	}
	return len;
}

char *ds_utf8_repair(const char *s, size_t n, size_t *out_len)
{
	const unsigned char *p = (const unsigned char *)s;
	char *o, *q;
	size_t i = 0;

	/* each input byte becomes at most one 3-byte U+FFFD */
	if (n > (SIZE_MAX - 1) / 3 || (o = malloc(n * 3 + 1)) == NULL)
		return NULL;
	q = o;
	while (i < n) {
		size_t bad, l = utf8_seq(p + i, n - i, &bad);

		if (l == 0) {
			memcpy(q, "\xef\xbf\xbd", 3);
			q += 3;
			i += bad;
		} else {
			memcpy(q, p + i, l);
			q += l;
			i += l;
		}
	}
	*q = '\0';
	if (out_len)
		*out_len = (size_t)(q - o);
	return o;
}

json_t *ds_json_text(const char *s, size_t n)
{
	size_t len;
	char *t = ds_utf8_repair(s ? s : "", s ? n : 0, &len);
	json_t *j;

	if (t == NULL)
		return NULL;
	j = json_stringn(t, len);
	free(t);
	return j;
}

int ds_json_put(FILE *f, const json_t *j)
{
	return json_dumpf(j, f, DS_JSON_FLAGS) == 0 ? 0 : -1;
}

int ds_json_line(FILE *f, const json_t *j)
{
	if (ds_json_put(f, j) || fputc('\n', f) == EOF || fflush(f) != 0)
		return -1;
	return 0;
}
