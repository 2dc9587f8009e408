/* normalize.c - normalizers: Hugging Face's normalizer steps (NFC, NFKC,
 * NFD, NFKD and lowercasing through ICU; Prepend, Replace, Strip) and
 * SentencePiece's normalizer (precompiled_charsmap, a Darts-clone double
 * array, plus its whitespace rules). */
#include <stdlib.h>
#include <string.h>
#include <unicode/uchar.h>
#include <unicode/unorm2.h>
#include <unicode/ustring.h>

#include "tok_int.h"

/* ---- Hugging Face ------------------------------------------------------------ */

static int oom(ds_err *err)
{
	return ds_errf(err, "out of memory");
}

static int is_ascii(const uint8_t *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (s[i] >= 0x80)
			return 0;
	return 1;
}

/* UTF-8 -> UTF-16 -> f -> UTF-8. */
static int via_utf16(const uint8_t *s, size_t n, tb_buf *out, int op,
		     ds_err *err)
{
	UErrorCode e = U_ZERO_ERROR;
	int32_t n16 = 0, m = 0, cap;
	UChar *a = NULL, *b = NULL;
	int rc = -1;

	if (n > INT32_MAX / 4)
		return ds_errf(err, "normalizer: text of %zu bytes too long", n);
	a = malloc((n + 1) * sizeof *a);
	cap = (int32_t)n * 3 + 16;
	b = malloc((size_t)cap * sizeof *b);
	if (a == NULL || b == NULL)
		goto oom;
	u_strFromUTF8(a, (int32_t)n + 1, &n16, (const char *)s, (int32_t)n, &e);
	if (U_FAILURE(e))
		goto icu;
	if (op == OP_LOWER) {
		/* per code point, as Rust's char::to_lowercase: no context */
		for (int32_t i = 0; i < n16;) {
			int32_t j = i;
			UChar32 c;

			U16_NEXT(a, j, n16, c);
			(void)c;
			if (m + 8 > cap)
				goto oom;
			m += u_strToLower(b + m, cap - m, a + i, j - i, "", &e);
			if (U_FAILURE(e))
				goto icu;
			i = j;
		}
	} else {
		const UNormalizer2 *nz =
			op == OP_NFC ? unorm2_getNFCInstance(&e) :
			op == OP_NFD ? unorm2_getNFDInstance(&e) :
			op == OP_NFKC ? unorm2_getNFKCInstance(&e) :
					unorm2_getNFKDInstance(&e);

		if (U_FAILURE(e))
			goto icu;
		m = unorm2_normalize(nz, a, n16, b, cap, &e);
		if (U_FAILURE(e))
			goto icu;
	}
	{
		int32_t n8 = 0;
		size_t at = out->n;

		u_strToUTF8(NULL, 0, &n8, b, m, &e);
		if (e != U_BUFFER_OVERFLOW_ERROR && U_FAILURE(e))
			goto icu;
		e = U_ZERO_ERROR;
		if (tb_buf_reserve(out, (size_t)n8 + 1))
			goto oom;
		u_strToUTF8((char *)out->p + at, n8 + 1, NULL, b, m, &e);
		if (U_FAILURE(e))
			goto icu;
		out->n = at + (size_t)n8;
	}
	rc = 0;
	goto out;
icu:
	ds_errf(err, "normalizer: ICU: %s", u_errorName(e));
	goto out;
oom:
	oom(err);
out:
	free(a);
	free(b);
	return rc;
}

/* Replace every (non-overlapping, leftmost) match of re in s by rep. */
static int replace(pcre2_code *re, const uint8_t *s, size_t n,
		   const uint8_t *rep, size_t rn, tb_buf *out,
		   pcre2_match_data *md, ds_err *err)
{
	size_t start = 0, prev = 0, last_end = (size_t)-1;

	while (start <= n) {
		int rc = pcre2_match(re, s, n, start, PCRE2_NO_UTF_CHECK, md, NULL);
		PCRE2_SIZE *ov;

		if (rc == PCRE2_ERROR_NOMATCH)
			break;
		if (rc < 0)
			return ds_errf(err, "normalizer Replace: match error %d", rc);
		ov = pcre2_get_ovector_pointer(md);
		if (ov[0] == ov[1] && ov[1] == last_end) {
			uint32_t cp;
			size_t l;

			if (start >= n)
				break;
			l = tk_utf8_len(s + start, n - start, &cp);
			start += l ? l : 1;
			continue;
		}
		if (tb_buf_put(out, s + prev, ov[0] - prev) ||
		    tb_buf_put(out, rep, rn))
			return oom(err);
		prev = start = last_end = ov[1];
	}
	return tb_buf_put(out, s + prev, n - prev) ? oom(err) : 0;
}

static int hf_step(const ds_tok *t, uint32_t k, const uint8_t *s, size_t n,
		   tb_buf *out, pcre2_match_data *md, ds_err *err)
{
	const struct tb_op *o = &t->norm[k];

	switch (o->op) {
	case OP_NFC: case OP_NFD: case OP_NFKC: case OP_NFKD:
		if (is_ascii(s, n))
			return tb_buf_put(out, s, n) ? oom(err) : 0;
		return via_utf16(s, n, out, (int)o->op, err);
	case OP_LOWER:
		if (is_ascii(s, n)) {
			size_t at = out->n;

			if (tb_buf_put(out, s, n))
				return oom(err);
			for (size_t i = 0; i < n; i++)
				if (out->p[at + i] >= 'A' && out->p[at + i] <= 'Z')
					out->p[at + i] += 32;
			return 0;
		}
		return via_utf16(s, n, out, OP_LOWER, err);
	case OP_PREPEND:
		if (n > 0 && tb_buf_put(out, t->pool + o->s1_off, o->s1_len))
			return oom(err);
		return tb_buf_put(out, s, n) ? oom(err) : 0;
	case OP_REPLACE: case OP_REPLACE_RE:
		return replace(t->norm_re[k], s, n, t->pool + o->s2_off,
			       o->s2_len, out, md, err);
	case OP_STRIP: {
		size_t a = 0, b = n;
		uint32_t cp;
		size_t l;

		while (o->a && a < b && (l = tk_utf8_len(s + a, b - a, &cp)) &&
		       tk_is_space(cp))
			a += l;
		while (o->b && b > a) {
			size_t j = b - 1;

			while (j > a && (s[j] & 0xc0) == 0x80)
				j--;
			if (!tk_utf8_len(s + j, b - j, &cp) || !tk_is_space(cp))
				break;
			b = j;
		}
		return tb_buf_put(out, s + a, b - a) ? oom(err) : 0;
	}
	}
	return ds_errf(err, "normalizer op %u", o->op);
}

int tk_normalize_hf(const ds_tok *t, const uint8_t *src, size_t n, tb_buf *dst,
		    pcre2_match_data *md, ds_err *err)
{
	tb_buf a = { 0 }, b = { 0 };
	const uint8_t *cur = src;
	size_t cn = n;
	int rc = 0;

	for (uint32_t k = 0; k < t->n_norm && rc == 0; k++) {
		tb_buf *o = (k % 2) ? &b : &a;

		o->n = 0;
		rc = hf_step(t, k, cur, cn, o, md, err);
		cur = o->p;
		cn = o->n;
	}
	if (rc == 0 && tb_buf_put(dst, cur, cn))
		rc = oom(err);
	tb_buf_free(&a);
	tb_buf_free(&b);
	return rc;
}

/* ---- SentencePiece ------------------------------------------------------------ */

#define SP_SPACE "\xe2\x96\x81" /* U+2581 */
#define SP_MAX_TRIE_RESULTS 32  /* Normalizer::kMaxTrieResultsSize */

/* SentencePiece's own UTF-8 check (util.h IsValidDecodeUTF8): the length of
 * one char, or 0 if malformed (the encoded U+FFFD counts as valid). */
static size_t sp_char_len(const uint8_t *s, size_t n)
{
	uint32_t cp;

	return tk_utf8_len(s, n, &cp);
}

static uint32_t unit(const ds_tok *t, uint32_t i)
{
	uint32_t u;

	memcpy(&u, t->charsmap + 4 + (size_t)i * 4, 4);
	return u;
}

/* Longest rule of the charsmap that prefixes s: its length, and in *repl
 * the replacement (NUL-terminated in the blob); 0 if none. */
static size_t charsmap_match(const ds_tok *t, const uint8_t *s, size_t n,
			     const char **repl, size_t *rlen)
{
	uint32_t tsize, nunits, pos, u;
	size_t best = 0, found = 0;
	uint32_t val = 0;
	const char *pool;
	size_t plen;

	if (t->charsmap == NULL)
		return 0;
	memcpy(&tsize, t->charsmap, 4);
	nunits = tsize / 4;
	if (nunits == 0 || (uint64_t)tsize + 4 > t->charsmap_len)
		return 0;
	pool = (const char *)t->charsmap + 4 + tsize;
	plen = t->charsmap_len - 4 - tsize;
	u = unit(t, 0);
	pos = (u >> 10) << ((u & 0x200) >> 6);
	for (size_t i = 0; i < n; i++) {
		pos ^= s[i];
		if (pos >= nunits)
			break;
		u = unit(t, pos);
		if ((u & 0x800000ffu) != s[i])
			break;
		pos ^= (u >> 10) << ((u & 0x200) >> 6);
		if ((u >> 8) & 1) {
			if (pos >= nunits)
				break;
			if (found++ < SP_MAX_TRIE_RESULTS) {
				best = i + 1;
				val = unit(t, pos) & 0x7fffffffu;
			}
		}
	}
	if (best == 0 || val >= plen)
		return 0;
	*repl = pool + val;
	*rlen = strnlen(pool + val, plen - val);
	return best;
}

size_t tk_added_match(const ds_tok *t, const uint8_t *s, size_t n,
		      uint32_t mask, int any, int32_t *id)
{
	uint32_t cur = 0;
	size_t best = 0;

	for (size_t k = 0; k < n && k < t->max_added_len; k++) {
		int32_t x;

		if ((cur = tb_trie_step(t, 0, cur, s[k], &x)) == 0)
			break;
		if (x >= 0 && !!(t->tok[x].attr & mask) == any) {
			best = k + 1;
			if (id != NULL)
				*id = x;
		}
	}
	return best;
}

size_t tk_user_match(const ds_tok *t, const uint8_t *s, size_t n)
{
	/* not the CONTROL and UNKNOWN pieces a config names special */
	return tk_added_match(t, s, n, TA_CONTROL | TA_UNKNOWN, 0, NULL);
}

/* One normalized prefix: the replacement and how much input it consumed. */
static size_t sp_prefix(const ds_tok *t, const uint8_t *s, size_t n,
			const char **r, size_t *rn)
{
	size_t m = tk_user_match(t, s, n);

	if (m > 0) {
		*r = (const char *)s;
		*rn = m;
		return m;
	}
	m = charsmap_match(t, s, n, r, rn);
	if (m > 0)
		return m;
	m = sp_char_len(s, n);
	if (m == 0) {
		*r = "\xef\xbf\xbd"; /* a malformed byte: U+FFFD, 1 byte eaten */
		*rn = 3;
		return 1;
	}
	*r = (const char *)s;
	*rn = m;
	return m;
}

int tk_normalize_sp(const ds_tok *t, const uint8_t *s, size_t n, tb_buf *out,
		    ds_err *err)
{
	uint32_t f = t->h->flags;
	int remove_ws = !!(f & TBF_SP_REMOVE_WS), escape = !!(f & TBF_SP_ESCAPE_WS);
	int suffix = !!(f & TBF_SP_WS_SUFFIX), dummy = !!(f & TBF_SP_DUMMY_PREFIX);
	const char *sp_sym = escape ? SP_SPACE : " ";
	size_t sp_len = escape ? 3 : 1, start = out->n;
	int prev_space;

	if (remove_ws)
		while (n > 0) {
			const char *r;
			size_t rn, m = sp_prefix(t, s, n, &r, &rn);

			if (!(rn == 1 && r[0] == ' '))
				break;
			s += m;
			n -= m;
		}
	if (n == 0)
		return 0;
	if (!suffix && dummy && tb_buf_put(out, sp_sym, sp_len))
		return oom(err);
	prev_space = remove_ws;
	while (n > 0) {
		const char *r;
		size_t rn, m = sp_prefix(t, s, n, &r, &rn);

		while (prev_space && rn > 0 && r[0] == ' ') {
			r++;
			rn--;
		}
		if (rn > 0) {
			const char *p = r, *e = r + rn, *sp;

			while (p < e) {
				sp = escape ? memchr(p, ' ', (size_t)(e - p)) : NULL;
				if (tb_buf_put(out, p, (size_t)((sp ? sp : e) - p)))
					return oom(err);
				if (sp == NULL)
					break;
				if (tb_buf_put(out, SP_SPACE, 3))
					return oom(err);
				p = sp + 1;
			}
			prev_space = r[rn - 1] == ' ';
		}
		s += m;
		n -= m;
		if (!remove_ws)
			prev_space = 0;
	}
	if (remove_ws)
		while (out->n - start >= sp_len &&
		       memcmp(out->p + out->n - sp_len, sp_sym, sp_len) == 0)
			out->n -= sp_len;
	if (suffix && dummy && tb_buf_put(out, sp_sym, sp_len))
		return oom(err);
	return 0;
}
