/* gutil.c - the grammar files' growable buffers and UTF-8. */
#include <stdarg.h>
#include <stdio.h>

#include "gint.h"

int ggrow(void *pp, size_t *cap, size_t need, size_t sz)
{
	void **p = pp;
	size_t c = *cap ? *cap : 16, bytes;
	void *q;

	if (need <= *cap)
		return 0;
	while (c < need) {
		if (ds_mul_sz(c, 2, &c) != 0)
			return -1;
	}
	if (ds_mul_sz(c, sz, &bytes) != 0)
		return -1;
	q = realloc(*p, bytes);
	if (q == NULL)
		return -1;
	*p = q;
	*cap = c;
	return 0;
}

int gbuf_put(gbuf *b, const void *s, size_t n)
{
	size_t need;

	if (b->oom)
		return -1;
	if (ds_add_sz(b->n, n + 1, &need) != 0 || need > DS_GRAMMAR_MAX_TEXT ||
	    ggrow(&b->p, &b->cap, need, 1) != 0) {
		b->oom = 1;
		return -1;
	}
	memcpy(b->p + b->n, s, n);
	b->n += n;
	b->p[b->n] = '\0';
	return 0;
}

int gbuf_puts(gbuf *b, const char *s)
{
	return gbuf_put(b, s, strlen(s));
}

int gbuf_printf(gbuf *b, const char *fmt, ...)
{
	char tmp[512];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(tmp, sizeof tmp, fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= sizeof tmp) {
		b->oom = 1;
		return -1;
	}
	return gbuf_put(b, tmp, (size_t)n);
}

int gbuf_literal(gbuf *b, const void *s, size_t n)
{
	const uint8_t *p = s;
	size_t i;

	gbuf_put(b, "\"", 1);
	for (i = 0; i < n; i++) {
		if (p[i] == '"' || p[i] == '\\') {
			char e[2] = { '\\', (char)p[i] };
			gbuf_put(b, e, 2);
		} else if (p[i] < 0x20 || p[i] == 0x7f) {
			gbuf_printf(b, "\\x%02X", p[i]);
		} else {
			gbuf_put(b, &p[i], 1);
		}
	}
	return gbuf_put(b, "\"", 1);
}

int gbuf_class_cp(gbuf *b, uint32_t cp)
{
	uint8_t u[4];

	if (cp == ']' || cp == '\\' || cp == '^' || cp == '-' || cp == '[') {
		char e[2] = { '\\', (char)cp };
		return gbuf_put(b, e, 2);
	}
	if (cp < 0x20 || cp == 0x7f)
		return gbuf_printf(b, "\\x%02X", (unsigned)cp);
	return gbuf_put(b, u, gutf8_enc(cp, u));
}

void gbuf_free(gbuf *b)
{
	free(b->p);
	*b = (gbuf){ 0 };
}

size_t gutf8_dec(const uint8_t *s, size_t n, uint32_t *cp)
{
	uint32_t c, min;
	size_t len, i;

	if (n == 0)
		return 0;
	c = s[0];
	if (c < 0x80) {
		*cp = c;
		return 1;
	}
	if (c >= 0xc2 && c <= 0xdf)
		len = 2, c &= 0x1f, min = 0x80;
	else if (c >= 0xe0 && c <= 0xef)
		len = 3, c &= 0x0f, min = 0x800;
	else if (c >= 0xf0 && c <= 0xf4)
		len = 4, c &= 0x07, min = 0x10000;
	else
		return 0;
	if (n < len)
		return 0;
	for (i = 1; i < len; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		c = c << 6 | (s[i] & 0x3f);
	}
	if (c < min || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff))
		return 0;
	*cp = c;
	return len;
}

size_t gutf8_enc(uint32_t cp, uint8_t *out)
{
	if (cp < 0x80) {
		out[0] = (uint8_t)cp;
		return 1;
	}
	if (cp < 0x800) {
		out[0] = (uint8_t)(0xc0 | cp >> 6);
		out[1] = (uint8_t)(0x80 | (cp & 0x3f));
		return 2;
	}
	if (cp < 0x10000) {
		out[0] = (uint8_t)(0xe0 | cp >> 12);
		out[1] = (uint8_t)(0x80 | (cp >> 6 & 0x3f));
		out[2] = (uint8_t)(0x80 | (cp & 0x3f));
		return 3;
	}
	out[0] = (uint8_t)(0xf0 | cp >> 18);
	out[1] = (uint8_t)(0x80 | (cp >> 12 & 0x3f));
	out[2] = (uint8_t)(0x80 | (cp >> 6 & 0x3f));
	out[3] = (uint8_t)(0x80 | (cp & 0x3f));
	return 4;
}

int grv_add(grv *r, uint32_t lo, uint32_t hi)
{
	if (ggrow(&r->p, &r->cap, r->n + 1, 2 * sizeof *r->p) != 0)
		return -1;
	r->p[2 * r->n] = lo;
	r->p[2 * r->n + 1] = hi;
	r->n++;
	return 0;
}

static int cmp_range(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return x < y ? -1 : x > y;
}

static void grv_merge(grv *r)
{
	size_t i, k = 0;

	if (r->n == 0)
		return;
	qsort(r->p, r->n, 2 * sizeof *r->p, cmp_range);
	for (i = 0; i < r->n; i++) {
		uint32_t lo = r->p[2 * i], hi = r->p[2 * i + 1];

		if (k && lo <= r->p[2 * k - 1] + 1) {
			if (hi > r->p[2 * k - 1])
				r->p[2 * k - 1] = hi;
		} else {
			r->p[2 * k] = lo, r->p[2 * k + 1] = hi, k++;
		}
	}
	r->n = k;
}

int grv_norm(grv *r, int neg)
{
	grv out = { 0 };
	uint32_t next = 0;
	size_t i;

	grv_merge(r);
	for (i = 0; i < r->n; i++) {
		uint32_t lo = r->p[2 * i], hi = r->p[2 * i + 1];

		if (neg) {
			if (lo > next && grv_add(&out, next, lo - 1) != 0)
				goto fail;
			next = hi + 1;
			continue;
		}
		if (lo < 0xd800 && grv_add(&out, lo, hi < 0xd800 ? hi : 0xd7ff) != 0)
			goto fail;
		if (hi > 0xdfff && grv_add(&out, lo > 0xe000 ? lo : 0xe000, hi) != 0)
			goto fail;
	}
	if (neg && next <= 0x10ffff && grv_add(&out, next, 0x10ffff) != 0)
		goto fail;
	free(r->p);
	*r = out;
	return neg ? grv_norm(r, 0) : 0;
fail:
	free(out.p);
	return -1;
}

void gerr_oneline(ds_err *err)
{
	char *c;

	if (err == NULL)
		return;
	for (c = err->msg; *c; c++)
		if ((unsigned char)*c < 0x20 || *c == 0x7f)
			*c = '?';
}
