/*
 * sjson.c - grammar text for JSON pieces the schema compiler needs: the
 * shared rules (j-...), a fixed value as JSON.stringify writes it, integer
 * and number ranges, string formats.
 *
 * Numbers: the integer part has at most 21 digits, a fraction at most 23,
 * an exponent at most 3 digits when negative and 2 when not (every value
 * stays finite; JSON.stringify writes every double below 1e100 within
 * these).  Bounds keep a model from writing digits forever.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "gint.h"
#include "sint.h"

/* ---- the shared rules --------------------------------------------------- */

static const struct prim {
	const char *name, *body;
	unsigned deps;
} prims[] = {
	[SP_WS] = { "j-ws", "( \" \" | \"\\n\" [ \\t]{0,20} )?", 0 },
	[SP_CHAR] = { "j-char", "[^\"\\\\\\x00-\\x1F] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" j-hex4 )",
		1u << SP_HEX4 },
	[SP_HEX4] = { "j-hex4", "[0-9a-cA-C] [0-9a-fA-F]{3} | [dD] [0-7] [0-9a-fA-F]{2} | "
		"[eEfF] [0-9a-fA-F]{3}", 0 },
	[SP_XCHAR] = { "j-xchar", "[^\"\\\\\\x00-\\x1F]", 0 },
	[SP_STRING] = { "j-string", "\"\\\"\" j-char* \"\\\"\" j-ws",
		1u << SP_CHAR | 1u << SP_WS },
	[SP_INT] = { "j-int", "\"-\"? ( \"0\" | [1-9] [0-9]{0,20} )", 0 },
	[SP_INTEGER] = { "j-integer", "j-int j-ws", 1u << SP_INT | 1u << SP_WS },
	/* a positive exponent of two digits keeps every value finite */
	[SP_NUMBER] = { "j-number", "j-int ( \".\" [0-9]{1,23} )? ( [eE] ( \"-\" [0-9]{1,3} | "
		"\"+\"? [0-9]{1,2} ) )? j-ws",
		1u << SP_INT | 1u << SP_WS },
	[SP_BOOLEAN] = { "j-boolean", "( \"true\" | \"false\" ) j-ws", 1u << SP_WS },
	[SP_NULL] = { "j-null", "\"null\" j-ws", 1u << SP_WS },
	[SP_VALUE] = { "j-value", "j-object | j-array | j-string | j-number | j-boolean | j-null",
		1u << SP_OBJECT | 1u << SP_ARRAY | 1u << SP_STRING | 1u << SP_NUMBER |
		1u << SP_BOOLEAN | 1u << SP_NULL },
	[SP_OBJECT] = { "j-object", "\"{\" j-ws ( j-member ( \",\" j-ws j-member )* )? \"}\" j-ws",
		1u << SP_WS | 1u << SP_MEMBER },
	[SP_MEMBER] = { "j-member", "j-string \":\" j-ws j-value",
		1u << SP_STRING | 1u << SP_WS | 1u << SP_VALUE },
	[SP_ARRAY] = { "j-array", "\"[\" j-ws ( j-value ( \",\" j-ws j-value )* )? \"]\" j-ws",
		1u << SP_WS | 1u << SP_VALUE },
	/* dates: days per month, February 29 in leap years (divisible by 4,
	 * centuries by 400) */
	[SP_DATE] = { "j-date", "[0-9]{4} \"-\" ( ( \"0\" [13578] | \"1\" [02] ) \"-\" "
		"( \"0\" [1-9] | [12] [0-9] | \"3\" [01] ) | ( \"0\" [469] | \"11\" ) \"-\" "
		"( \"0\" [1-9] | [12] [0-9] | \"30\" ) | \"02-\" ( \"0\" [1-9] | \"1\" [0-9] | "
		"\"2\" [0-8] ) ) | ( [0-9] [0-9] ( \"0\" [48] | [2468] [048] | [13579] [26] ) | "
		"( \"0\" [048] | [2468] [048] | [13579] [26] ) \"00\" ) \"-02-29\"", 0 },
	/* no leap second; a time zone is required; fractions up to 9 digits */
	[SP_TIME] = { "j-time", "( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] \":\" [0-5] [0-9] "
		"( \".\" [0-9]{1,9} )? ( [zZ] | [-+] ( [01] [0-9] | \"2\" [0-3] ) "
		"( \":\"? [0-5] [0-9] )? )", 0 },
	[SP_DATETIME] = { "j-date-time", "j-date [tT ] j-time",
		1u << SP_DATE | 1u << SP_TIME },
};

const char *sjson_prim_name(unsigned p)
{
	return prims[p].name;
}

const char *sjson_prim(gbuf *out, unsigned *have, unsigned p)
{
	unsigned k;

	if (!(*have & 1u << p)) {
		*have |= 1u << p;
		for (k = 0; k < SP_COUNT; k++)
			if (prims[p].deps & 1u << k)
				sjson_prim(out, have, k);
		gbuf_printf(out, "%s ::= %s\n", prims[p].name, prims[p].body);
	}
	return prims[p].name;
}

/* ---- fixed values --------------------------------------------------------- */

/* JSON.stringify's text of a string (quotes included). */
int sjson_string_text(gbuf *b, const char *s, size_t n)
{
	static const char hex[] = "0123456789abcdef";
	size_t i;

	gbuf_put(b, "\"", 1);
	for (i = 0; i < n; i++) {
		unsigned char ch = (unsigned char)s[i];
		char e[7] = { '\\', 0 };
		size_t k = 2;

		switch (ch) {
		case '"': e[1] = '"'; break;
		case '\\': e[1] = '\\'; break;
		case '\b': e[1] = 'b'; break;
		case '\f': e[1] = 'f'; break;
		case '\n': e[1] = 'n'; break;
		case '\r': e[1] = 'r'; break;
		case '\t': e[1] = 't'; break;
		default:
			if (ch >= 0x20) {
				gbuf_put(b, &s[i], 1);
				continue;
			}
			memcpy(e + 1, "u00", 3);
			e[4] = hex[ch >> 4];
			e[5] = hex[ch & 15];
			k = 6;
		}
		gbuf_put(b, e, k);
	}
	return gbuf_put(b, "\"", 1);
}

/* Number::toString for a finite double: the shortest digits that read
 * back, plain between 1e-7 and 1e21, else d.ddde+N. */
int sjson_number_text(gbuf *b, double d)
{
	char buf[40], digits[24];
	int prec, e = 0, k = 0, n;
	const char *p;

	if (d == 0)
		return gbuf_puts(b, "0");
	if (d < 0) {
		gbuf_puts(b, "-");
		d = -d;
	}
	for (prec = 1; prec <= 17; prec++) {
		snprintf(buf, sizeof buf, "%.*e", prec - 1, d);
		if (strtod(buf, NULL) == d)
			break;
	}
	for (p = buf; *p && *p != 'e'; p++)
		if (*p >= '0' && *p <= '9' && k < 20)
			digits[k++] = *p;
	if (*p == 'e')
		e = atoi(p + 1);
	while (k > 1 && digits[k - 1] == '0')
		k--;
	digits[k] = '\0';
	n = e + 1;
	if (k <= n && n <= 21) {
		gbuf_put(b, digits, (size_t)k);
		for (; n > k; n--)
			gbuf_puts(b, "0");
	} else if (n > 0 && n <= 21) {
		gbuf_printf(b, "%.*s.%s", n, digits, digits + n);
	} else if (n > -6 && n <= 0) {
		gbuf_puts(b, "0.");
		for (; n < 0; n++)
			gbuf_puts(b, "0");
		gbuf_puts(b, digits);
	} else {
		gbuf_printf(b, "%c%s%s", digits[0], k > 1 ? "." : "", digits + 1);
		gbuf_printf(b, "e%c%d", n - 1 >= 0 ? '+' : '-', abs(n - 1));
	}
	return b->oom ? -1 : 0;
}

/* ---- integer ranges ----------------------------------------------------------- */

static unsigned ndigits(uint64_t v)
{
	unsigned n = 1;

	while (v >= 10)
		v /= 10, n++;
	return n;
}

static uint64_t pow10u(unsigned n)
{
	uint64_t v = 1;

	while (n--)
		v *= 10;
	return v;
}

static int all_of(const char *s, char c, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		if (s[i] != c)
			return 0;
	return 1;
}

static void digit_class(gbuf *b, char lo, char hi)
{
	if (lo == hi)
		gbuf_printf(b, "\"%c\"", lo);
	else
		gbuf_printf(b, "[%c-%c]", lo, hi);
}

/* Digit strings of n digits from a to b (a <= b, same length). */
static void same_len(gbuf *b, const char *lo, const char *hi, size_t n)
{
	char nines[24], zeros[24];
	int lo_full, hi_full, first = 1;
	char dl, dh;

	if (n == 0)
		return;
	if (lo[0] == hi[0]) {
		digit_class(b, lo[0], lo[0]);
		if (n > 1) {
			gbuf_puts(b, " ");
			same_len(b, lo + 1, hi + 1, n - 1);
		}
		return;
	}
	memset(nines, '9', sizeof nines);
	memset(zeros, '0', sizeof zeros);
	lo_full = all_of(lo + 1, '0', n - 1);
	hi_full = all_of(hi + 1, '9', n - 1);
	dl = (char)(lo[0] + !lo_full);
	dh = (char)(hi[0] - !hi_full);
	gbuf_puts(b, "( ");
	if (!lo_full) {
		digit_class(b, lo[0], lo[0]);
		gbuf_puts(b, " ( ");
		same_len(b, lo + 1, nines, n - 1);
		gbuf_puts(b, " )");
		first = 0;
	}
	if (dl <= dh) {
		gbuf_puts(b, first ? "" : " | ");
		digit_class(b, dl, dh);
		if (n > 1)
			gbuf_printf(b, " [0-9]{%zu}", n - 1);
		first = 0;
	}
	if (!hi_full) {
		gbuf_puts(b, first ? "" : " | ");
		digit_class(b, hi[0], hi[0]);
		gbuf_puts(b, " ( ");
		same_len(b, zeros, hi + 1, n - 1);
		gbuf_puts(b, " )");
	}
	gbuf_puts(b, " )");
}

/* Decimal integers (no sign, no leading zero) from a to b; b UINT64_MAX:
 * no upper bound (up to 21 digits). */
void sjson_uint_range(gbuf *b, uint64_t a, uint64_t hi)
{
	unsigned la = ndigits(a), lb = hi == UINT64_MAX ? la : ndigits(hi), l;
	int first = 1;

	gbuf_puts(b, "( ");
	for (l = la; l <= lb; l++) {
		uint64_t lo = l == la ? a : pow10u(l - 1);
		uint64_t top = l == lb && hi != UINT64_MAX ? hi : pow10u(l) - 1;
		char x[24], y[24];

		if (l == 1 && lo == 0 && top == 0) {
			gbuf_puts(b, first ? "\"0\"" : " | \"0\"");
			first = 0;
			continue;
		}
		snprintf(x, sizeof x, "%0*llu", (int)l, (unsigned long long)lo);
		snprintf(y, sizeof y, "%0*llu", (int)l, (unsigned long long)top);
		gbuf_puts(b, first ? "" : " | ");
		same_len(b, x, y, l);
		first = 0;
	}
	if (hi == UINT64_MAX && la < 21)
		gbuf_printf(b, " | [1-9] [0-9]{%u,20}", la);
	gbuf_puts(b, " )");
}

/* ---- number ranges --------------------------------------------------------------- */

/* Fraction digits that keep x (a bound) apart from the values next to
 * it once read as doubles: 10^-D is at least the gap between doubles at
 * x.  A validator reads "4.99999999999999999" as 5: under an exclusive
 * maximum of 5 that text is invalid although its decimal value is not. */
static int frac_digits(int64_t x)
{
	double d = (double)(x < 0 ? -x : x);
	double ulp = nextafter(d, INFINITY) - d;
	int k = (int)floor(-log10(ulp));

	return k > 23 ? 23 : k;
}

static void alt(gbuf *b, int *any)
{
	gbuf_puts(b, *any ? " | " : "");
	*any = 1;
}

/* One side of a bounded number: values v >= 0 written without a sign, v =
 * I + f, between lo and hi (exclusive or not, each may be absent).  Bounds
 * are whole numbers, so whether I + f is within one depends on I and on
 * whether f is 0, except right below an exclusive maximum and right above
 * an exclusive minimum, where the fraction's digits are bounded
 * (frac_digits).  *any: something was written. */
static void side(gbuf *b, const sbound *lo, const sbound *hi, int integer,
		 int *any)
{
	int64_t lo_i = 0, lo_e = -1, hi_i = INT64_MAX, hi_z = -1, top;
	const char *frac = integer ? "" : " ( \".\" [0-9]{1,23} )?";
	int near_hi = hi->set && hi->excl && !integer, d;

	if (lo->set && lo->v >= 0) {
		lo_i = lo->excl ? lo->v + 1 : lo->v;
		lo_e = lo->excl && !integer ? lo->v : -1;
	}
	if (hi->set) {
		if (hi->v < 0)
			return;
		hi_i = hi->v - 1;
		hi_z = hi->excl ? -1 : hi->v;
	}
	/* I in [lo_i, top] with any fraction; I = hi_i below an exclusive
	 * maximum with a bounded one */
	top = near_hi ? hi_i - 1 : hi_i;
	if (lo_i <= top) {
		alt(b, any);
		sjson_uint_range(b, (uint64_t)lo_i,
				 top == INT64_MAX ? UINT64_MAX : (uint64_t)top);
		gbuf_puts(b, frac);
	}
	if (near_hi && lo_i <= hi_i) {
		d = frac_digits(hi->v);
		alt(b, any);
		gbuf_printf(b, "\"%lld\"", (long long)hi_i);
		if (d > 0)
			gbuf_printf(b, " ( \".\" [0-9]{1,%d} )?", d);
	}
	/* I = lo above an exclusive minimum: a fraction not 0 */
	d = frac_digits(lo_e);
	if (near_hi && lo_e == hi_i && frac_digits(hi->v) < d)
		d = frac_digits(hi->v);
	if (lo_e >= 0 && lo_e <= hi_i && d > 0) {
		alt(b, any);
		gbuf_printf(b, "\"%lld\" \".\" [0-9]{0,%d} [1-9]", (long long)lo_e, d - 1);
	}
	if (hi_z >= 0 && hi_z >= lo_i) {
		alt(b, any);
		gbuf_printf(b, "\"%lld\"%s", (long long)hi_z,
			    integer ? "" : " ( \".\" \"0\"{1,23} )?");
	}
}

/* Numbers (integer: integers) from lo to hi, written without exponent:
 * the non-negative side, then "-" and the mirrored side.  0 written, -1
 * nothing satisfies the bounds. */
int sjson_num_range(gbuf *b, const sbound *lo, const sbound *hi, int integer)
{
	sbound nlo = { .set = hi->set, .excl = hi->excl, .v = hi->set ? -hi->v : 0 };
	sbound nhi = { .set = lo->set, .excl = lo->excl, .v = lo->set ? -lo->v : 0 };
	gbuf pos = { 0 }, neg = { 0 };
	int p = 0, n = 0, rc = -1;

	side(&pos, lo, hi, integer, &p);
	side(&neg, &nlo, &nhi, integer, &n);
	if (pos.oom || neg.oom) {
		b->oom = 1;
	} else if (p || n) {
		gbuf_puts(b, "( ");
		if (p)
			gbuf_puts(b, pos.p);
		if (n)
			gbuf_printf(b, "%s\"-\" ( ", p ? " | " : "");
		if (n)
			gbuf_puts(b, neg.p);
		rc = gbuf_puts(b, n ? " ) )" : " )");
	}
	gbuf_free(&pos);
	gbuf_free(&neg);
	return rc;
}
