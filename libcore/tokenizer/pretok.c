/* pretok.c - the pre-tokenizer: Hugging Face's Split / ByteLevel / Digits /
 * Metaspace / WhitespaceSplit steps over spans of the normalized text.
 *
 * Split regexes come from the tokenizer file, written for Oniguruma (the
 * engine Hugging Face tokenizers uses).  They are compiled with PCRE2 (UTF,
 * UCP, JIT) after a translation that replaces every Unicode class (\p{..},
 * \s, \w, \d, \h and their negations) by explicit code-point ranges from
 * unitab.c, so that characters are classified by Unicode 16.0 as the
 * reference does, not by the older tables of the PCRE2 at hand, and \s, \w
 * and \h mean what they mean in Oniguruma (White_Space; letters, marks,
 * numbers and connectors; hex digits). */
#include <stdlib.h>
#include <string.h>

#include "tok_int.h"
#include "unitab.h"

/* ---- UTF-8 ------------------------------------------------------------------ */

size_t tk_utf8_len(const uint8_t *s, size_t n, uint32_t *cp)
{
	uint32_t c;

	if (n == 0)
		return 0;
	if (s[0] < 0x80) {
		*cp = s[0];
		return 1;
	}
	if (s[0] >= 0xc2 && s[0] <= 0xdf) {
		if (n < 2 || (s[1] & 0xc0) != 0x80)
			return 0;
		*cp = (uint32_t)(s[0] & 0x1f) << 6 | (s[1] & 0x3f);
		return 2;
	}
	if (s[0] >= 0xe0 && s[0] <= 0xef) {
		if (n < 3 || (s[1] & 0xc0) != 0x80 || (s[2] & 0xc0) != 0x80)
			return 0;
		c = (uint32_t)(s[0] & 0x0f) << 12 | (uint32_t)(s[1] & 0x3f) << 6 |
		    (s[2] & 0x3f);
		if (c < 0x800 || (c >= 0xd800 && c <= 0xdfff))
			return 0;
		*cp = c;
		return 3;
	}
	if (s[0] >= 0xf0 && s[0] <= 0xf4) {
		if (n < 4 || (s[1] & 0xc0) != 0x80 || (s[2] & 0xc0) != 0x80 ||
		    (s[3] & 0xc0) != 0x80)
			return 0;
		c = (uint32_t)(s[0] & 0x07) << 18 | (uint32_t)(s[1] & 0x3f) << 12 |
		    (uint32_t)(s[2] & 0x3f) << 6 | (s[3] & 0x3f);
		if (c < 0x10000 || c > 0x10ffff)
			return 0;
		*cp = c;
		return 4;
	}
	return 0;
}

size_t tk_utf8_put(uint32_t c, uint8_t *o)
{
	if (c < 0x80) {
		o[0] = (uint8_t)c;
		return 1;
	}
	if (c < 0x800) {
		o[0] = (uint8_t)(0xc0 | c >> 6);
		o[1] = (uint8_t)(0x80 | (c & 0x3f));
		return 2;
	}
	if (c < 0x10000) {
		o[0] = (uint8_t)(0xe0 | c >> 12);
		o[1] = (uint8_t)(0x80 | ((c >> 6) & 0x3f));
		o[2] = (uint8_t)(0x80 | (c & 0x3f));
		return 3;
	}
	o[0] = (uint8_t)(0xf0 | c >> 18);
	o[1] = (uint8_t)(0x80 | ((c >> 12) & 0x3f));
	o[2] = (uint8_t)(0x80 | ((c >> 6) & 0x3f));
	o[3] = (uint8_t)(0x80 | (c & 0x3f));
	return 4;
}

int tk_spans_push(struct tk_spans *s, size_t off, size_t len, int32_t id,
		  uint32_t first)
{
	if (s->n == s->cap) {
		size_t cap = s->cap ? s->cap * 2 : 64;
		struct tk_span *v = realloc(s->v, cap * sizeof *v);

		if (v == NULL)
			return -1;
		s->v = v;
		s->cap = cap;
	}
	s->v[s->n++] = (struct tk_span){ off, len, id, first };
	return 0;
}

/* ---- Unicode classes as ranges ------------------------------------------- */

/* White_Space (Oniguruma's \s). */
static const uint32_t white[][2] = {
	{ 0x9, 0xd }, { 0x20, 0x20 }, { 0x85, 0x85 }, { 0xa0, 0xa0 },
	{ 0x1680, 0x1680 }, { 0x2000, 0x200a }, { 0x2028, 0x2029 },
	{ 0x202f, 0x202f }, { 0x205f, 0x205f }, { 0x3000, 0x3000 },
};

int ds_uni_cat(uint32_t cp)
{
	uint32_t lo = 0, hi = ds_uni_nruns;

	while (hi - lo > 1) {
		uint32_t mid = (lo + hi) / 2;

		if ((ds_uni_runs[mid] >> 8) <= cp)
			lo = mid;
		else
			hi = mid;
	}
	return (int)(ds_uni_runs[lo] & 0xff);
}

int tk_is_space(uint32_t cp)
{
	for (size_t i = 0; i < sizeof white / sizeof white[0]; i++)
		if (cp >= white[i][0] && cp <= white[i][1])
			return 1;
	return 0;
}

/* A class: a set of general categories (plus \w's extras), or
 * White_Space, or hex digits. */
struct uclass {
	uint32_t cats; /* bit per category index */
	int space, hex, word;
};

static uint32_t cat_bit(const char *name)
{
	for (int i = 0; i < DS_UNI_NCAT; i++)
		if (strcmp(ds_uni_cat_names[i], name) == 0)
			return 1u << i;
	return 0;
}

static uint32_t group_bits(char g)
{
	uint32_t m = 0;

	for (int i = 0; i < DS_UNI_NCAT; i++)
		if (ds_uni_cat_names[i][0] == g)
			m |= 1u << i;
	return m;
}

/* A property name as Oniguruma spells it: case, spaces, '-' and '_' do
 * not matter.  0 if not one we know. */
static uint32_t property(const char *s, size_t n)
{
	static const struct { const char *name; char g; } longs[] = {
		{ "letter", 'L' }, { "mark", 'M' }, { "combiningmark", 'M' },
		{ "number", 'N' }, { "punctuation", 'P' }, { "punct", 'P' },
		{ "symbol", 'S' }, { "separator", 'Z' }, { "other", 'C' },
	};
	char k[32];
	size_t m = 0;

	for (size_t i = 0; i < n; i++) {
		char c = s[i];

		if (c == ' ' || c == '_' || c == '-')
			continue;
		if (m + 1 >= sizeof k)
			return 0;
		k[m++] = (char)(c >= 'A' && c <= 'Z' ? c + 32 : c);
	}
	k[m] = '\0';
	if (m == 1 && strchr("lmnpszc", k[0]))
		return group_bits((char)(k[0] - 32));
	if (m == 2) {
		char c2[3] = { (char)(k[0] - 32), k[1], 0 };

		if (strcmp(k, "lc") == 0 || strcmp(k, "l&") == 0)
			return cat_bit("Lu") | cat_bit("Ll") | cat_bit("Lt");
		return cat_bit(c2);
	}
	for (size_t i = 0; i < sizeof longs / sizeof longs[0]; i++)
		if (strcmp(k, longs[i].name) == 0)
			return group_bits(longs[i].g);
	return 0;
}

static int put(tb_buf *o, const char *s)
{
	return tb_buf_put(o, s, strlen(s));
}

struct ranges {
	uint32_t (*v)[2];
	size_t n, cap;
};

static int range_add(struct ranges *r, uint32_t a, uint32_t b)
{
	if (r->n > 0 && r->v[r->n - 1][0] <= a && r->v[r->n - 1][1] + 1 >= a) {
		if (b > r->v[r->n - 1][1])
			r->v[r->n - 1][1] = b;
		return 0;
	}
	if (r->n == r->cap) {
		size_t cap = r->cap ? r->cap * 2 : 256;
		void *v = realloc(r->v, cap * sizeof *r->v);

		if (v == NULL)
			return -1;
		r->v = v;
		r->cap = cap;
	}
	r->v[r->n][0] = a;
	r->v[r->n][1] = b;
	r->n++;
	return 0;
}

static int cmp_range(const void *x, const void *y)
{
	const uint32_t *a = x, *b = y;

	return a[0] < b[0] ? -1 : a[0] > b[0];
}

/* The class's code points as sorted, merged ranges (surrogates, which a
 * UTF-8 subject never holds, left out), or those of its complement. */
static int class_ranges(const struct uclass *c, int neg, struct ranges *out)
{
	struct ranges r = { 0 };
	int rc = 0;

	out->n = 0;
	if (c->space) {
		for (size_t i = 0; i < sizeof white / sizeof white[0]; i++)
			rc |= range_add(&r, white[i][0], white[i][1]);
	} else if (c->hex) {
		rc |= range_add(&r, '0', '9');
		rc |= range_add(&r, 'A', 'F');
		rc |= range_add(&r, 'a', 'f');
	} else {
		for (uint32_t i = 0; i < ds_uni_nruns; i++) {
			uint32_t a = ds_uni_runs[i] >> 8;
			uint32_t b = i + 1 < ds_uni_nruns ?
				     (ds_uni_runs[i + 1] >> 8) - 1 : 0x10ffff;

			if ((c->cats >> (ds_uni_runs[i] & 0xff)) & 1)
				rc |= range_add(&r, a, b);
		}
		if (c->word) {
			for (uint32_t i = 0; i < ds_uni_nword_extra; i++)
				rc |= range_add(&r, ds_uni_word_extra[i][0],
						ds_uni_word_extra[i][1]);
			qsort(r.v, r.n, sizeof *r.v, cmp_range);
		}
	}
	/* merge (after the sort), complement, cut out the surrogates */
	{
		uint32_t next = 0;

		for (size_t i = 0; i < r.n && rc == 0; i++) {
			uint32_t a = r.v[i][0], b = r.v[i][1];

			if (neg) {
				if (a > next)
					rc |= range_add(out, next, a - 1);
			} else {
				rc |= range_add(out, a, b);
			}
			next = b + 1 > next ? b + 1 : next;
		}
		if (neg && next <= 0x10ffff && rc == 0)
			rc |= range_add(out, next, 0x10ffff);
	}
	free(r.v);
	if (rc == 0) {
		struct ranges cut = { 0 };

		for (size_t i = 0; i < out->n && rc == 0; i++) {
			uint32_t a = out->v[i][0], b = out->v[i][1];

			if (b < 0xd800 || a > 0xdfff) {
				rc |= range_add(&cut, a, b);
				continue;
			}
			if (a < 0xd800)
				rc |= range_add(&cut, a, 0xd7ff);
			if (b > 0xdfff)
				rc |= range_add(&cut, 0xe000, b);
		}
		free(out->v);
		*out = cut;
	}
	return rc;
}

static int emit_list(tb_buf *o, const struct ranges *r)
{
	int rc = 0;

	for (size_t i = 0; i < r->n && rc == 0; i++) {
		char t[40];

		if (r->v[i][0] == r->v[i][1])
			snprintf(t, sizeof t, "\\x{%x}", r->v[i][0]);
		else
			snprintf(t, sizeof t, "\\x{%x}-\\x{%x}", r->v[i][0],
				 r->v[i][1]);
		rc = put(o, t);
	}
	return rc;
}

/* Short form of a category class, when the PCRE2 at hand has the Unicode
 * tables unitab.c was made against: PCRE2's own properties plus the code
 * points whose category changed since (almost all newly assigned ones).
 * 1 if emitted, 0 if the class needs explicit ranges (a code point left
 * one of its categories since, or Cn is in it), -1 on error. */
static int emit_short(tb_buf *o, const struct uclass *c)
{
	static const char groups[] = "LMNPSZC";
	char ver[32] = "";
	struct ranges add = { 0 };
	uint32_t rest = c->cats;
	int rc = 0;

	if (pcre2_config(PCRE2_CONFIG_UNICODE_VERSION, ver) < 0 ||
	    strcmp(ver, ds_uni_base_version) != 0 || (c->cats & 1))
		return 0;
	for (uint32_t i = 0; i < ds_uni_ndiff; i++) {
		int was = (c->cats >> ds_uni_diff[i][2]) & 1;
		int is = (c->cats >> ds_uni_diff[i][3]) & 1;

		if (was && !is) {
			free(add.v);
			return 0;
		}
		if (is && !was)
			rc |= range_add(&add, ds_uni_diff[i][0], ds_uni_diff[i][1]);
	}
	if (c->word)
		for (uint32_t i = 0; i < ds_uni_nword_extra; i++)
			rc |= range_add(&add, ds_uni_word_extra[i][0],
					ds_uni_word_extra[i][1]);
	for (const char *g = groups; *g && rc == 0; g++) {
		uint32_t m = group_bits(*g);
		char t[16];

		if ((rest & m) == m) {
			snprintf(t, sizeof t, "\\p{%c}", *g);
			rc = put(o, t);
			rest &= ~m;
		}
	}
	for (int i = 1; i < DS_UNI_NCAT && rc == 0; i++)
		if ((rest >> i) & 1) {
			char t[16];

			snprintf(t, sizeof t, "\\p{%s}", ds_uni_cat_names[i]);
			rc = put(o, t);
		}
	if (rc == 0)
		rc = emit_list(o, &add);
	free(add.v);
	return rc ? -1 : 1;
}

/* Emit class c (or its complement) for use inside [...]. */
static int emit_ranges(tb_buf *o, const struct uclass *c, int neg)
{
	struct ranges r = { 0 };
	int rc;

	if (!neg && !c->space && !c->hex) {
		int k = emit_short(o, c);

		if (k != 0)
			return k < 0 ? -1 : 0;
	}
	rc = class_ranges(c, neg, &r);

	if (rc == 0)
		rc = emit_list(o, &r);
	free(r.v);
	return rc;
}

/* Parse an escape at p[0] == '\\' that names a class; returns the length
 * consumed (0 if it is no class escape), the class and whether negated. */
static size_t class_escape(const char *p, size_t n, struct uclass *c, int *neg,
			   ds_err *err, int *bad)
{
	char e;

	memset(c, 0, sizeof *c);
	*neg = 0;
	*bad = 0;
	if (n < 2)
		return 0;
	e = p[1];
	switch (e) {
	case 's': case 'S':
		c->space = 1;
		*neg = e == 'S';
		return 2;
	case 'h': case 'H':
		c->hex = 1;
		*neg = e == 'H';
		return 2;
	case 'd': case 'D':
		c->cats = cat_bit("Nd");
		*neg = e == 'D';
		return 2;
	case 'w': case 'W':
		c->cats = group_bits('L') | group_bits('M') | cat_bit("Nd") |
			  cat_bit("Nl") | cat_bit("Pc");
		c->word = 1;
		*neg = e == 'W';
		return 2;
	case 'p': case 'P': {
		const char *q = p + 2, *end;
		size_t len;

		*neg = e == 'P';
		if (n < 4 || *q != '{' || (end = memchr(q, '}', n - 2)) == NULL) {
			*bad = 1;
			ds_errf(err, "regex: \\%c without {name}", e);
			return 0;
		}
		q++;
		if (*q == '^') {
			*neg = !*neg;
			q++;
		}
		len = (size_t)(end - q);
		c->cats = property(q, len);
		if (c->cats == 0) {
			*bad = 1;
			ds_errf(err, "regex: Unicode property \\p{%.*s} is not "
				"supported", (int)len, q);
			return 0;
		}
		return (size_t)(end + 1 - p);
	}
	}
	return 0;
}

/* The translation of one pattern: the input, where it is, the output,
 * and the character-class state (0 outside, 1 inside, 2 right after the
 * opening "[" or "[^", where "]" is a literal). */
struct rx {
	const char *p;
	size_t n, i;
	tb_buf o;
	int in_cls;
	ds_err *err;
};

/* An escape at x->i: a class escape (\d \s \w \p{..} ...) becomes
 * explicit ranges, Ruby's \uHHHH becomes \x{HHHH}, any other escape is
 * copied with the character it escapes.  -1 on a bad escape (err
 * says which), -2 out of memory. */
static int rx_escape(struct rx *x)
{
	const char *s = x->p + x->i;
	size_t left = x->n - x->i, k, l = 0;
	struct uclass uc;
	int neg, bad, rc;
	uint32_t cp;

	if (x->in_cls)
		x->in_cls = 1;
	k = class_escape(s, left, &uc, &neg, x->err, &bad);
	if (bad)
		return -1;
	if (k > 0) {
		if (x->in_cls)
			rc = emit_ranges(&x->o, &uc, neg);
		else /* outside a class: [...] or [^...] */
			rc = put(&x->o, neg ? "[^" : "[") |
			     emit_ranges(&x->o, &uc, 0) | put(&x->o, "]");
		x->i += k;
		return rc ? -2 : 0;
	}
	if (left > 5 && s[1] == 'u') {
		char t[16];

		snprintf(t, sizeof t, "\\x{%.4s}", s + 2);
		x->i += 6;
		return put(&x->o, t) ? -2 : 0;
	}
	if (left > 1 && (l = tk_utf8_len((const uint8_t *)s + 1, left - 1, &cp)) == 0)
		l = 1;
	x->i += 1 + l;
	return tb_buf_put(&x->o, s, 1 + l) ? -2 : 0;
}

/* Inside a class, at x->i: a POSIX [:name:] is copied whole; nested
 * classes and && are refused.  1 when it consumed input, 0 when the
 * character is to be copied, -1 on error (err says which), -2 out of
 * memory. */
static int rx_class(struct rx *x)
{
	const char *s = x->p + x->i;
	size_t left = x->n - x->i;

	if (s[0] == ']') {
		x->in_cls = x->in_cls > 1; /* first char: a literal ']' */
		return 0;
	}
	if (s[0] == '[' && left > 1 && s[1] == ':') {
		for (size_t j = 2; j + 1 < left; j++)
			if (s[j] == ':' && s[j + 1] == ']') {
				x->i += j + 2;
				return tb_buf_put(&x->o, s, j + 2) ? -2 : 1;
			}
		ds_errf(x->err, "regex: unterminated [:class:]");
		return -1;
	}
	if (s[0] == '[' || (s[0] == '&' && left > 1 && s[1] == '&')) {
		ds_errf(x->err, "regex: nested character classes and && are not "
			"supported");
		return -1;
	}
	x->in_cls = 1;
	return 0;
}

/* Translate an Oniguruma pattern (as tokenizer.json files carry) into
 * PCRE2 syntax; a NUL-terminated string to free, NULL on error. */
char *tk_onig_to_pcre2(const char *pat, size_t n, ds_err *err)
{
	struct rx x = { .p = pat, .n = n, .err = err };
	int rc = 0;

	while (x.i < n && rc >= 0) {
		char c = pat[x.i];

		if (c == '\\') {
			rc = rx_escape(&x);
			continue;
		}
		if (x.in_cls) {
			rc = rx_class(&x);
			if (rc != 0)
				continue;
		} else if (c == '[') {
			int caret = x.i + 1 < n && pat[x.i + 1] == '^';

			x.in_cls = 2;
			x.i += 1 + caret;
			rc = put(&x.o, caret ? "[^" : "[") ? -2 : 0;
			continue;
		}
		rc = tb_buf_put(&x.o, &c, 1) ? -2 : 0;
		x.i++;
	}
	if (rc >= 0 && tb_buf_put(&x.o, "", 1) != 0)
		rc = -2;
	if (rc < 0) {
		if (rc == -2)
			ds_errf(err, "out of memory");
		tb_buf_free(&x.o);
		return NULL;
	}
	return (char *)x.o.p;
}

/* ---- compiling -------------------------------------------------------------- */

/* GPT-2's split, ByteLevel's use_regex. */
static const char gpt2_pattern[] =
	"'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|"
	"\\s+(?!\\S)|\\s+";

/* Compile pattern pat (n bytes, Oniguruma syntax, or a literal), or its
 * translation tr (tn bytes) when that was made for the PCRE2 at hand. */
static pcre2_code *compile(const ds_tok *t, const char *pat, size_t n,
			   int literal, const char *tr, size_t tn, ds_err *err)
{
	char *p;
	char ver[32] = "";
	pcre2_code *re;
	int ec;
	PCRE2_SIZE eo;
	uint32_t opts = PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK |
			PCRE2_MULTILINE | PCRE2_ALT_CIRCUMFLEX;

	if (literal) {
		p = malloc(n + 1);
		if (p == NULL) {
			ds_errf(err, "out of memory");
			return NULL;
		}
		memcpy(p, pat, n);
		p[n] = '\0';
		opts |= PCRE2_LITERAL;
		opts &= ~(uint32_t)(PCRE2_MULTILINE | PCRE2_ALT_CIRCUMFLEX |
				    PCRE2_UCP);
	} else if (tn > 0 &&
		   pcre2_config(PCRE2_CONFIG_UNICODE_VERSION, ver) >= 0 &&
		   strncmp(ver, t->h->pcre_unicode, sizeof t->h->pcre_unicode) == 0) {
		p = malloc(tn + 1);
		if (p == NULL) {
			ds_errf(err, "out of memory");
			return NULL;
		}
		memcpy(p, tr, tn);
		p[tn] = '\0';
	} else if ((p = tk_onig_to_pcre2(pat, n, err)) == NULL) {
		ds_err_prefix(err, "%s", t->name);
		return NULL;
	}
	re = pcre2_compile((PCRE2_SPTR)p, PCRE2_ZERO_TERMINATED, opts, &ec, &eo,
			   NULL);
	free(p);
	if (re == NULL) {
		PCRE2_UCHAR msg[160];

		pcre2_get_error_message(ec, msg, sizeof msg);
		ds_errf(err, "%s: regex \"%.*s\": %s", t->name, (int)(n > 60 ? 60 : n),
			pat, (char *)msg);
		return NULL;
	}
	/* Without JIT (not built in, or no executable memory) PCRE2's
	 * interpreter gives the same matches, only slower. */
	(void)pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);
	return re;
}

int tk_compile_regexes(ds_tok *t, ds_err *err)
{
	for (uint32_t i = 0; i < t->n_pretok; i++) {
		const struct tb_op *o = &t->pretok[i];

		if (o->op == OP_SPLIT) {
			t->pretok_re[i] = compile(t, (const char *)t->pool + o->s1_off,
						  o->s1_len, (int)o->c,
						  (const char *)t->pool + o->s2_off,
						  o->s2_len, err);
			if (t->pretok_re[i] == NULL)
				return -1;
		}
		if (o->op == OP_BYTELEVEL && o->b && t->gpt2_re == NULL) {
			t->gpt2_re = compile(t, gpt2_pattern, strlen(gpt2_pattern),
					     0, NULL, 0, err);
			if (t->gpt2_re == NULL)
				return -1;
		}
	}
	for (uint32_t i = 0; i < t->n_norm; i++) {
		const struct tb_op *o = &t->norm[i];

		if (o->op == OP_REPLACE_RE || o->op == OP_REPLACE) {
			t->norm_re[i] = compile(t, (const char *)t->pool + o->s1_off,
						o->s1_len, o->op == OP_REPLACE, NULL, 0,
						err);
			if (t->norm_re[i] == NULL)
				return -1;
		}
	}
	return 0;
}

void tk_free_regexes(ds_tok *t)
{
	for (uint32_t i = 0; i < TB_MAX_OPS; i++) {
		pcre2_code_free(t->pretok_re[i]);
		pcre2_code_free(t->norm_re[i]);
		t->pretok_re[i] = t->norm_re[i] = NULL;
	}
	pcre2_code_free(t->gpt2_re);
	t->gpt2_re = NULL;
}

/* ---- splitting ------------------------------------------------------------ */

/* A piece of a span with whether it was a match. */
struct piece {
	size_t off, len;
	int match;
};

struct pieces {
	struct piece *v;
	size_t n, cap;
};

static int pieces_push(struct pieces *p, size_t off, size_t len, int match)
{
	if (p->n == p->cap) {
		size_t cap = p->cap ? p->cap * 2 : 64;
		struct piece *v = realloc(p->v, cap * sizeof *v);

		if (v == NULL)
			return -1;
		p->v = v;
		p->cap = cap;
	}
	p->v[p->n++] = (struct piece){ off, len, match };
	return 0;
}

/* The regex's matches in s[0..n) as Hugging Face enumerates them
 * (onig's find_iter: an empty match right where the previous match ended
 * is skipped by one char), and the gaps between them, in order. */
static int regex_pieces(pcre2_code *re, const uint8_t *s, size_t n,
			pcre2_match_data *md, struct pieces *out, ds_err *err)
{
	size_t start = 0, prev = 0, last_end = (size_t)-1;

	while (start <= n) {
		int rc = pcre2_match(re, s, n, start, PCRE2_NO_UTF_CHECK, md, NULL);
		PCRE2_SIZE *ov;

		if (rc == PCRE2_ERROR_NOMATCH)
			break;
		if (rc < 0) {
			PCRE2_UCHAR msg[120];

			pcre2_get_error_message(rc, msg, sizeof msg);
			return ds_errf(err, "regex match: %s", (char *)msg);
		}
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
		if (ov[0] > prev && pieces_push(out, prev, ov[0] - prev, 0))
			return ds_errf(err, "out of memory");
		if (pieces_push(out, ov[0], ov[1] - ov[0], 1))
			return ds_errf(err, "out of memory");
		prev = start = last_end = ov[1];
	}
	if (prev < n && pieces_push(out, prev, n - prev, 0))
		return ds_errf(err, "out of memory");
	return 0;
}

/* Pieces by a per-char predicate: each char for which it holds is a
 * match of its own. */
static int char_pieces(const uint8_t *s, size_t n, int (*pred)(uint32_t),
		       struct pieces *out)
{
	size_t i = 0, prev = 0;

	while (i < n) {
		uint32_t cp = 0xfffd;
		size_t l = tk_utf8_len(s + i, n - i, &cp);

		l = l ? l : 1;
		if (pred(cp)) {
			if (i > prev && pieces_push(out, prev, i - prev, 0))
				return -1;
			if (pieces_push(out, i, l, 1))
				return -1;
			prev = i + l;
		}
		i += l;
	}
	if (prev < n && pieces_push(out, prev, n - prev, 0))
		return -1;
	return 0;
}

static int is_numeric(uint32_t cp)
{
	int c = ds_uni_cat(cp);

	return ds_uni_cat_names[c][0] == 'N';
}

/* Apply a split behavior to the pieces of span sp, appending the results
 * (non-empty) to out. */
static int apply_behavior(struct pieces *p, uint32_t behavior, int invert,
			  const struct tk_span *sp, struct tk_spans *out)
{
	size_t n = 0;

	if (invert)
		for (size_t i = 0; i < p->n; i++)
			p->v[i].match = !p->v[i].match;
	switch (behavior) {
	case SPLIT_REMOVED:
		for (size_t i = 0; i < p->n; i++)
			if (!p->v[i].match)
				p->v[n++] = p->v[i];
		break;
	case SPLIT_ISOLATED:
		n = p->n;
		break;
	case SPLIT_MERGED_PREV: {
		int prev_match = 0;

		for (size_t i = 0; i < p->n; i++) {
			struct piece c = p->v[i];

			if (c.match && !prev_match && n > 0)
				p->v[n - 1].len = c.off + c.len - p->v[n - 1].off;
			else
				p->v[n++] = c;
			prev_match = c.match;
		}
		break;
	}
	case SPLIT_MERGED_NEXT: {
		int prev_match = 0; /* walking backwards */
		size_t w = p->n;

		for (size_t i = p->n; i-- > 0;) {
			struct piece c = p->v[i];

			if (c.match && !prev_match && w < p->n) {
				p->v[w].len += p->v[w].off - c.off;
				p->v[w].off = c.off;
			} else {
				p->v[--w] = c;
			}
			prev_match = c.match;
		}
		memmove(p->v, p->v + w, (p->n - w) * sizeof *p->v);
		n = p->n - w;
		break;
	}
	case SPLIT_CONTIGUOUS: {
		int prev_match = 0;

		for (size_t i = 0; i < p->n; i++) {
			struct piece c = p->v[i];

			if (c.match == prev_match && n > 0)
				p->v[n - 1].len = c.off + c.len - p->v[n - 1].off;
			else
				p->v[n++] = c;
			prev_match = c.match;
		}
		break;
	}
	}
	for (size_t i = 0; i < n; i++)
		if (p->v[i].len > 0 &&
		    tk_spans_push(out, sp->off + p->v[i].off, p->v[i].len, -1,
				  sp->first && p->v[i].off == 0))
			return -1;
	return 0;
}

/* Metaspace: spaces become the replacement, which is prepended as the
 * scheme says; then (split) every replacement starts a new piece. */
static int metaspace(const ds_tok *t, const struct tb_op *o, tb_buf *buf,
		     const struct tk_span *sp, struct pieces *p,
		     struct tk_spans *out)
{
	const uint8_t *rep = t->pool + o->s1_off;
	size_t rn = o->s1_len, start = buf->n, i;
	struct tk_span ns;
	int pre;

	/* the replaced text goes to the end of buf (which may move) */
	pre = o->a == PREPEND_ALWAYS || (o->a == PREPEND_FIRST && sp->first);
	if (pre) {
		/* after replacement the text starts with rep if it started
		 * with a space or with rep itself */
		int starts = buf->p[sp->off] == ' ' ||
			     (sp->len >= rn && memcmp(buf->p + sp->off, rep, rn) == 0);

		if (!starts && tb_buf_put(buf, rep, rn))
			return -1;
	}
	for (i = 0; i < sp->len; i++) {
		uint8_t c = buf->p[sp->off + i];

		if (c == ' ' ? tb_buf_put(buf, rep, rn) : tb_buf_put(buf, &c, 1))
			return -1;
	}
	ns = (struct tk_span){ start, buf->n - start, -1, sp->first };
	if (!o->b)
		return tk_spans_push(out, ns.off, ns.len, -1, ns.first);
	p->n = 0;
	for (i = 0; i + rn <= ns.len && rn > 0;) {
		if (memcmp(buf->p + ns.off + i, rep, rn) == 0) {
			if (pieces_push(p, i, rn, 1))
				return -1;
			i += rn;
		} else {
			size_t j = i;

			while (j + rn <= ns.len &&
			       memcmp(buf->p + ns.off + j, rep, rn) != 0)
				j++;
			if (j + rn > ns.len)
				j = ns.len;
			if (pieces_push(p, i, j - i, 0))
				return -1;
			i = j;
		}
	}
	if (i < ns.len && pieces_push(p, i, ns.len - i, 0))
		return -1;
	return apply_behavior(p, SPLIT_MERGED_NEXT, 0, &ns, out);
}

static int one_step(const ds_tok *t, uint32_t k, tb_buf *buf,
		    const struct tk_span *sp, struct pieces *p,
		    struct tk_spans *out, pcre2_match_data *md, ds_err *err)
{
	const struct tb_op *o = &t->pretok[k];

	p->n = 0;
	switch (o->op) {
	case OP_SPLIT:
		if (regex_pieces(t->pretok_re[k], buf->p + sp->off, sp->len, md,
				 p, err))
			return -1;
		return apply_behavior(p, o->a, (int)o->b, sp, out) ?
		       ds_errf(err, "out of memory") : 0;
	case OP_DIGITS:
		if (char_pieces(buf->p + sp->off, sp->len, is_numeric, p))
			return ds_errf(err, "out of memory");
		return apply_behavior(p, o->a ? SPLIT_ISOLATED : SPLIT_CONTIGUOUS,
				      0, sp, out) ? ds_errf(err, "out of memory") : 0;
	case OP_WSSPLIT:
		if (char_pieces(buf->p + sp->off, sp->len, tk_is_space, p))
			return ds_errf(err, "out of memory");
		return apply_behavior(p, SPLIT_REMOVED, 0, sp, out) ?
		       ds_errf(err, "out of memory") : 0;
	case OP_METASPACE:
		return metaspace(t, o, buf, sp, p, out) ?
		       ds_errf(err, "out of memory") : 0;
	case OP_BYTELEVEL: {
		struct tk_span ns = *sp;

		if (o->a && buf->p[sp->off] != ' ') {
			size_t start = buf->n;

			if (tb_buf_reserve(buf, sp->len + 1))
				return ds_errf(err, "out of memory");
			tb_buf_put(buf, " ", 1);
			tb_buf_put(buf, buf->p + sp->off, sp->len);
			ns.off = start;
			ns.len = sp->len + 1;
		}
		if (!o->b)
			return tk_spans_push(out, ns.off, ns.len, -1, ns.first) ?
			       ds_errf(err, "out of memory") : 0;
		if (regex_pieces(t->gpt2_re, buf->p + ns.off, ns.len, md, p, err))
			return -1;
		return apply_behavior(p, SPLIT_ISOLATED, 0, &ns, out) ?
		       ds_errf(err, "out of memory") : 0;
	}
	}
	return ds_errf(err, "pre-tokenizer op %u", o->op);
}

int tk_pretokenize(const ds_tok *t, tb_buf *buf, struct tk_spans *in,
		   struct tk_spans *out, pcre2_match_data *md, ds_err *err)
{
	struct pieces p = { 0 };
	int rc = 0;

	for (uint32_t k = 0; k < t->n_pretok && rc == 0; k++) {
		out->n = 0;
		for (size_t i = 0; i < in->n && rc == 0; i++) {
			struct tk_span sp = in->v[i];

			if (sp.id != -1 || sp.len == 0) {
				if (sp.id != -1 &&
				    tk_spans_push(out, sp.off, sp.len, sp.id, sp.first))
					rc = ds_errf(err, "out of memory");
				continue;
			}
			rc = one_step(t, k, buf, &sp, &p, out, md, err);
		}
		if (rc == 0) {
			struct tk_spans x = *in;

			*in = *out;
			*out = x;
		}
	}
	free(p.v);
	/* the result is in *in (swapped after each step) */
	return rc;
}
