/* test_grammar.c - the grammar format, the matcher, the token mask (against
 * trying every token), UTF-8 classes, the schema compiler's output. */
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar.h"
#include "harness.h"

static ds_grammar *parse(const char *text)
{
	ds_grammar *g = NULL;
	ds_err err;

	if (ds_grammar_parse(text, strlen(text), &g, &err) != 0)
		printf("#   parse: %s\n", err.msg);
	return g;
}

/* 2: s is a whole sentence, 1: a prefix of one, 0: rejected. */
static int match_len(const ds_grammar *g, const char *s, size_t n)
{
	ds_gmatch *m;
	ds_err err;
	int r;

	if (g == NULL || ds_gmatch_new(g, &m, &err) != 0)
		return -1;
	r = ds_gmatch_accept_bytes(m, s, n, &err);
	r = r != DS_GMATCH_OK ? 0 : ds_gmatch_complete(m) ? 2 : 1;
	ds_gmatch_free(m);
	return r;
}

static int match(const ds_grammar *g, const char *s)
{
	return match_len(g, s, strlen(s));
}

#define ACCEPT(g, s) T_CHECKF(match(g, s) == 2, "'%s' not accepted", s)
#define PREFIX(g, s) T_CHECKF(match(g, s) == 1, "'%s' not a mere prefix", s)
#define REJECT(g, s) T_CHECKF(match(g, s) == 0, "'%s' not rejected", s)

/* The parse error of text, or "" when it parses. */
static const char *parse_error(const char *text)
{
	static ds_err err;
	ds_grammar *g;

	if (ds_grammar_parse(text, strlen(text), &g, &err) == 0) {
		ds_grammar_free(g);
		return "";
	}
	return err.msg;
}

#define PARSE_ERR(text, want) T_CHECKF(strcmp(parse_error(text), want) == 0, \
	"got '%s', want '%s'", parse_error(text), want)

/* ---- the format ------------------------------------------------------ */

static void test_literals_and_alternatives(void)
{
	ds_grammar *g = parse("root ::= \"ab\" | \"c\" \"d\"  # comment\n");

	ACCEPT(g, "ab");
	ACCEPT(g, "cd");
	PREFIX(g, "a");
	PREFIX(g, "");
	REJECT(g, "abc");
	REJECT(g, "x");
	ds_grammar_free(g);
	g = parse("root ::= \"\\x41\\u00e9\\U0001F600\\t\\n\\\\\\\"\\[\\]\"");
	ACCEPT(g, "A\xc3\xa9\xf0\x9f\x98\x80\t\n\\\"[]");
	ds_grammar_free(g);
}

static void test_rules_groups_newlines(void)
{
	ds_grammar *g = parse(
		"# a list\n"
		"root ::= item (\",\" item)*\n"
		"item ::= (\n"
		"    \"a\"   # nested: newlines allowed\n"
		"  | \"b\" )\n"
		"  | \"c\"\n"
		"\n"
		"unused ::= \"x\" |\n"
		"   \"y\"\n");

	ACCEPT(g, "a");
	ACCEPT(g, "a,b,c");
	PREFIX(g, "a,");
	REJECT(g, "a,,b");
	REJECT(g, "x");
	ds_grammar_free(g);
}

static void test_repetition(void)
{
	ds_grammar *g = parse("root ::= \"x\"{2,4} \"y\"{3} \"z\"{1,} \"w\"{0,1} [0-9]?");

	REJECT(g, "xyyyz");
	ACCEPT(g, "xxyyyz");
	ACCEPT(g, "xxxxyyyzzzw5");
	REJECT(g, "xxxxxyyyz");
	REJECT(g, "xxyyz");
	REJECT(g, "xxyyyyz");
	PREFIX(g, "xxyyy");
	ds_grammar_free(g);
	g = parse("root ::= (\"ab\" | \"c\"){0,3} \"!\"");
	ACCEPT(g, "!");
	ACCEPT(g, "abcab!");
	REJECT(g, "abcabc!");
	ds_grammar_free(g);
	g = parse("root ::= (\"a\"?)* \"b\" (\"c\"*)+");
	ACCEPT(g, "b");
	ACCEPT(g, "aaabccc");
	ds_grammar_free(g);
}

static void test_classes(void)
{
	ds_grammar *g = parse("root ::= [a-c0-9_\\-]+ [^\\n]*");

	ACCEPT(g, "a-_9");
	ACCEPT(g, "b x y \xe2\x82\xac");
	REJECT(g, "d");
	REJECT(g, "a\n");
	ds_grammar_free(g);
	g = parse("root ::= [] | \"x\"");
	ACCEPT(g, "x");
	REJECT(g, "y");
	ds_grammar_free(g);
}

static void test_parse_errors(void)
{
	PARSE_ERR("", "1:1: no rule 'root'");
	PARSE_ERR("root ::= \"a", "1:10: unterminated string");
	PARSE_ERR("root ::= x", "1:10: undefined rule 'x'");
	PARSE_ERR("root ::= \"a\"\nroot ::= \"b\"", "2:1: rule 'root' defined twice");
	PARSE_ERR("root := \"a\"", "1:6: expected '::=' after 'root'");
	PARSE_ERR("root ::= (\"a\"", "1:10: unclosed '('");
	PARSE_ERR("root ::= \"a\" )", "1:14: unmatched ')'");
	PARSE_ERR("root ::= \"a\"{3,2}", "1:13: repetition {3,2}: maximum below minimum");
	PARSE_ERR("root ::= \"a\"{20000}", "1:14: repetition count over 10000");
	PARSE_ERR("root ::= [z-a]", "1:12: range end below its start");
	PARSE_ERR("root ::= [ab", "1:10: unterminated character class");
	PARSE_ERR("root ::= \"\\q\"", "1:11: unknown escape '\\q'");
	PARSE_ERR("root ::= \"\\uD800\"", "1:11: U+D800 is not a Unicode scalar value");
	PARSE_ERR("root ::= \"\xc0\x80\"", "1:11: invalid UTF-8");
	PARSE_ERR("root ::= \"a\" @", "1:14: unexpected '@'");
	PARSE_ERR("\n\nexpr ::= expr \"+\" \"1\" | \"1\"\nroot ::= expr",
		  "3:1: rule 'expr' is left-recursive");
	PARSE_ERR("root ::= a\na ::= b \"x\" | \"z\"\nb ::= \"y\"? a",
		  "2:1: rule 'a' is left-recursive");
	PARSE_ERR("root ::= r\nr ::= \"\" r", "1:1: rule 'root' matches no text");
	PARSE_ERR("root ::= [^\\x00-\\U0010FFFF]", "1:1: rule 'root' matches no text");
}

/* Alternatives that can never end are dropped: no dead ends. */
static void test_unproductive_pruned(void)
{
	ds_grammar *g = parse("root ::= \"a\" | x | \"c\" []\nx ::= \"b\" x");
	ds_gmatch *m;
	ds_err err;

	ACCEPT(g, "a");
	REJECT(g, "b");
	REJECT(g, "c");
	T_CHECK(ds_gmatch_new(g, &m, &err) == 0);
	T_CHECK(ds_gmatch_can_continue(m) && !ds_gmatch_complete(m));
	ds_gmatch_free(m);
	ds_grammar_free(g);
}

static void test_recursion(void)
{
	/* right and middle recursion are fine; a rule reaching itself last in
	 * its alternative without consuming is too (it is a loop) */
	ds_grammar *g = parse("root ::= p\np ::= \"(\" p \")\" p | \"\"");

	ACCEPT(g, "(()(()))()");
	PREFIX(g, "((");
	REJECT(g, "())");
	ds_grammar_free(g);
	g = parse("root ::= a\na ::= \"x\" | b\nb ::= a");
	ACCEPT(g, "x");
	REJECT(g, "xx");
	ds_grammar_free(g);
}

/* ---- UTF-8 ------------------------------------------------------------------ */

static void test_utf8_classes(void)
{
	ds_grammar *g = parse("root ::= [\xd0\xb0-\xd1\x8f]{2,3}");

	ACCEPT(g, "\xd0\xbf\xd1\x80");           /* пр */
	ACCEPT(g, "\xd0\xbf\xd1\x80\xd0\xb8");   /* при */
	PREFIX(g, "\xd0\xbf\xd1");               /* a character in two parts */
	REJECT(g, "\xd0\xbf\xd1\x80\xd0\xb8\xd0\xb2");
	REJECT(g, "ab");
	ds_grammar_free(g);
	g = parse("root ::= [^a]*");
	ACCEPT(g, "\xf0\x9f\x98\x80" "b\xe4\xb8\xad\xc3\xa9\x7f");
	REJECT(g, "a");
	REJECT(g, "\xc0\x80");              /* overlong */
	REJECT(g, "\xed\xa0\x80");          /* surrogate */
	REJECT(g, "\xf4\x90\x80\x80");      /* past U+10FFFF */
	REJECT(g, "\x80");
	REJECT(g, "\xff");
	ds_grammar_free(g);
	g = parse("root ::= . [\\u0800-\\uFFFF] [\\U00010000-\\U0010FFFF]");
	ACCEPT(g, "\n\xe0\xa0\x80\xf0\x90\x80\x80");
	ACCEPT(g, "x\xef\xbf\xbf\xf4\x8f\xbf\xbf");
	REJECT(g, "x\xdf\xbf");
	REJECT(g, "x\xee\x80\x80\xf4\x90");
	ds_grammar_free(g);
}

/* ---- the matcher's state ------------------------------------------------------ */

static void test_rollback_clone(void)
{
	ds_grammar *g = parse("root ::= \"ab\" [0-9]+ \"!\"");
	ds_gmatch *m = NULL, *c = NULL;
	ds_err err;
	size_t i;

	T_CHECK(ds_gmatch_new(g, &m, &err) == 0);
	T_CHECK(ds_gmatch_accept_bytes(m, "ab", 2, &err) == DS_GMATCH_OK);
	T_CHECK(ds_gmatch_accept_bytes(m, "x", 1, &err) == DS_GMATCH_REJECT);
	T_CHECK(ds_gmatch_accept_bytes(m, "12", 2, &err) == DS_GMATCH_OK);
	T_CHECK(!ds_gmatch_complete(m) && ds_gmatch_can_continue(m));
	T_CHECK(ds_gmatch_clone(m, &c, &err) == 0);
	T_CHECK(ds_gmatch_accept_bytes(m, "!", 1, &err) == DS_GMATCH_OK);
	T_CHECK(ds_gmatch_complete(m) && !ds_gmatch_can_continue(m));
	T_CHECK(ds_gmatch_history(m) == 3);
	T_CHECK(ds_gmatch_rollback(m, 2) == 0);
	T_CHECK(ds_gmatch_accept_bytes(m, "9!", 2, &err) == DS_GMATCH_OK);
	T_CHECK(ds_gmatch_complete(m));
	T_CHECK(ds_gmatch_rollback(m, 5) == -1);
	/* the clone went on from "ab12" */
	T_CHECK(ds_gmatch_accept_bytes(c, "3", 1, &err) == DS_GMATCH_OK);
	T_CHECK(!ds_gmatch_complete(c));
	/* the history keeps DS_GMATCH_HISTORY steps */
	ds_gmatch_reset(c);
	T_CHECK(ds_gmatch_accept_bytes(c, "ab", 2, &err) == DS_GMATCH_OK);
	for (i = 0; i < DS_GMATCH_HISTORY + 10; i++)
		T_CHECK(ds_gmatch_accept_bytes(c, "1", 1, &err) == DS_GMATCH_OK);
	T_CHECK(ds_gmatch_history(c) == DS_GMATCH_HISTORY);
	T_CHECK(ds_gmatch_rollback(c, DS_GMATCH_HISTORY) == 0);
	T_CHECK(ds_gmatch_accept_bytes(c, "!", 1, &err) == DS_GMATCH_OK);
	ds_gmatch_free(m);
	ds_gmatch_free(c);
	ds_grammar_free(g);
}

static void test_stack_limit(void)
{
	/* each 'a' may or may not owe a 'b' or a 'c': 2^n stacks */
	ds_grammar *g = parse("root ::= r\nr ::= \"a\" r \"b\" | \"a\" r \"c\" | \"\"");
	ds_gmatch *m;
	ds_err err;
	int i, rc = 0;

	T_CHECK(ds_gmatch_new(g, &m, &err) == 0);
	for (i = 0; i < 20 && rc == 0; i++)
		rc = ds_gmatch_accept_bytes(m, "a", 1, &err);
	T_CHECK(rc == -1);
	T_CHECKF(strstr(err.msg, "parallel parses") != NULL, "%s", err.msg);
	/* the state is the last good one */
	T_CHECK(ds_gmatch_accept_bytes(m, "b", 1, &err) == DS_GMATCH_OK);
	ds_gmatch_free(m);
	ds_grammar_free(g);
}

/* ---- the mask against trying each token ---------------------------------------- */

typedef struct tvocab {
	uint8_t *bytes[2048];
	uint32_t lens[2048];
	uint8_t special[2048];
	size_t n;
	int32_t eos;
	ds_gvocab *v;
} tvocab;

static void tv_add(tvocab *tv, const void *p, size_t n, int special)
{
	tv->bytes[tv->n] = malloc(n + 1);
	memcpy(tv->bytes[tv->n], p, n);
	tv->lens[tv->n] = (uint32_t)n;
	tv->special[tv->n++] = (uint8_t)special;
}

static void tv_str(tvocab *tv, const char *s)
{
	tv_add(tv, s, strlen(s), 0);
}

/* Single bytes, JSON pieces, words with quotes and spaces around, UTF-8
 * characters whole and cut, a few special tokens. */
static void tv_build(tvocab *tv, uint64_t *seed)
{
	static const char *const words[] = { "name", "age", "true", "false",
		"null", "the", "a", "id", "type", "value", "x", "items", "0", "1",
		"12", "123", "3.5", "-", "e", "E+", "\xd0\xbf\xd1\x80", "\xe4\xb8\xad",
		"\xf0\x9f\x98\x80", "2024", "-01", "T12", ":00", "Z", "@", "com",
		".", "uuid", "ab", "\\n", "\\\"", "\\u00", "\\", "x\\", NULL };
	static const char *const pieces[] = { "{", "}", "[", "]", ",", ":",
		"\"", "\":", "\",", "\"}", "{\"", "\":\"", "\": ", ", \"", "\n",
		"\n  ", "  ", " ", "},{", "]}", "}]", "\":[", "\"\"", "\xe4", "\xe4\xb8",
		"\xb8\xad", "\xad", NULL };
	size_t i, b;

	memset(tv, 0, sizeof *tv);
	for (b = 0; b < 256; b++) {
		uint8_t c = (uint8_t)b;

		tv_add(tv, &c, 1, 0);
	}
	for (i = 0; pieces[i]; i++)
		tv_str(tv, pieces[i]);
	for (i = 0; words[i]; i++) {
		char t[64];

		tv_str(tv, words[i]);
		snprintf(t, sizeof t, " %s", words[i]);
		tv_str(tv, t);
		snprintf(t, sizeof t, "\"%s", words[i]);
		tv_str(tv, t);
		snprintf(t, sizeof t, "%s\"", words[i]);
		tv_str(tv, t);
		snprintf(t, sizeof t, "\"%s\":", words[i]);
		tv_str(tv, t);
		snprintf(t, sizeof t, "%s%s", words[i], words[(i + 1) % 7]);
		tv_str(tv, t);
	}
	for (i = 0; i < 200; i++) {
		uint8_t r[6];
		size_t n = 2 + t_rand(seed) % 4, k;

		for (k = 0; k < n; k++)
			r[k] = (uint8_t)(t_rand(seed) % 3 ? 0x20 + t_rand(seed) % 95 :
					 t_rand(seed) % 256);
		tv_add(tv, r, n, 0);
	}
	tv_add(tv, "", 0, 0);
	tv_add(tv, "<s>", 3, 1);
	tv->eos = (int32_t)tv->n;
	tv_add(tv, "</s>", 4, 1);
	tv_add(tv, "<tool>", 6, 1);
	T_CHECK(ds_gvocab_build(tv->n, (const uint8_t *const *)tv->bytes, tv->lens,
				tv->special, tv->eos, &tv->v, NULL) == 0);
}

static void tv_free(tvocab *tv)
{
	size_t i;

	for (i = 0; i < tv->n; i++)
		free(tv->bytes[i]);
	ds_gvocab_free(tv->v);
}

/* Compare the mask with accepting each token and rolling back. */
static int mask_matches(ds_gmatch *m, const tvocab *tv, const uint64_t *bits)
{
	ds_err err;
	size_t i;
	int bad = 0;

	for (i = 0; i < tv->n; i++) {
		int r = ds_gmatch_accept_token(m, tv->v, (int32_t)i, &err);
		int want = r == DS_GMATCH_OK, got = (int)(bits[i / 64] >> (i % 64) & 1);

		if (r == DS_GMATCH_OK)
			ds_gmatch_rollback(m, 1);
		if (want != got && bad++ < 3)
			printf("#   token %zu ('%.*s'): mask %d, accept %d\n", i,
			       (int)tv->lens[i], (const char *)tv->bytes[i], got, want);
	}
	return bad == 0;
}

/* A random walk of up to steps tokens, checking the mask at each. */
static int walk_checked(const ds_grammar *g, const tvocab *tv, uint64_t *seed,
			int steps, unsigned cache)
{
	uint64_t bits[2048 / 64];
	ds_gmatch *m;
	ds_err err;
	int s, ok = 1;

	if (ds_gmatch_new(g, &m, &err) != 0)
		return 0;
	ds_gmatch_mask_cache(m, cache);
	for (s = 0; s < steps && ok; s++) {
		size_t allowed[2048], na = 0, i;
		int32_t pick;

		ok = ds_gmatch_mask(m, tv->v, bits, &err) == 0 && mask_matches(m, tv, bits);
		for (i = 0; i < tv->n; i++)
			if (bits[i / 64] >> (i % 64) & 1)
				allowed[na++] = i;
		if (na == 0)
			break;
		pick = (int32_t)allowed[t_rand(seed) % na];
		if (pick == tv->eos && na > 1 && t_rand(seed) % 4)
			pick = (int32_t)allowed[(t_rand(seed) % (na - 1) +
				 (allowed[0] == (size_t)tv->eos)) % na];
		ok = ok && ds_gmatch_accept_token(m, tv->v, pick, &err) == DS_GMATCH_OK;
		if (ds_gmatch_finished(m))
			break;
	}
	ds_gmatch_free(m);
	return ok;
}

static const char *const brute_grammars[] = {
	"root ::= \"{\" ws ( kv ( \",\" ws kv )* )? \"}\"\n"
	"kv ::= str ws \":\" ws val\nws ::= [ \\n]?\n"
	"str ::= \"\\\"\" ( [^\"\\\\] | \"\\\\\" [\"\\\\nu] )* \"\\\"\"\n"
	"val ::= str | [0-9]+ | \"true\" | root",
	"root ::= ( [\xd0\xb0-\xd1\x8f] | [\xe4\xb8\x80-\xe9\xbe\xa5] | \" \" ){1,12} \".\"",
	"root ::= \"x\" r \"y\"\nr ::= \"a\" r \"b\" | \"a\" r | [0-9]*",
	"root ::= [^\"]* \"\\\"\" ( \"e\" | \"E+\" )? [0-9]{1,3}",
	"root ::= (\"name\" | \"na\" \"me\"? | \"12\" [0-9]) ( \" \" root )?",
	/* runs of states: chains, a chain changing its bytes, a cycle */
	"root ::= [a-z ]{0,7} [0-9]{2,9} \"\\\"\"",
	"root ::= ( [a-z\"] [a-z\"] )* \".\"",
	"root ::= \"\\\"\" [^\"]{0,30} \"\\\"\" \" \"?",
};

static void test_mask_brute_force(void)
{
	uint64_t seed = t_seed();
	tvocab tv;
	size_t i;
	int w;

	tv_build(&tv, &seed);
	for (i = 0; i < sizeof brute_grammars / sizeof brute_grammars[0]; i++) {
		ds_grammar *g = parse(brute_grammars[i]);

		for (w = 0; w < 12 && g; w++)
			T_CHECKF(walk_checked(g, &tv, &seed, 40, w % 3 ? 16 : 0),
				 "grammar %zu walk %d", i, w);
		ds_grammar_free(g);
	}
	tv_free(&tv);
}

static void test_mask_schema_brute_force(void)
{
	static const char *const schemas[] = {
		"{\"type\":\"object\"}",
		"{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},"
		"\"age\":{\"type\":\"integer\",\"minimum\":-5,\"maximum\":120},"
		"\"x\":{\"enum\":[\"a\",1,null,[true]]}},\"required\":[\"age\"]}",
		"{\"type\":\"array\",\"items\":{\"type\":\"number\",\"exclusiveMinimum\":0},"
		"\"maxItems\":4}",
		"{\"type\":\"string\",\"pattern\":\"^[a-z]+@[a-z]+\\\\.com$\"}",
		"{\"type\":\"string\",\"format\":\"date-time\"}",
		"{\"type\":\"string\",\"maxLength\":20}",
		"{\"type\":\"array\",\"items\":{\"type\":\"string\",\"minLength\":2,"
		"\"maxLength\":6}}",
	};
	uint64_t seed = t_seed();
	tvocab tv;
	size_t i;
	int w;

	tv_build(&tv, &seed);
	for (i = 0; i < sizeof schemas / sizeof schemas[0]; i++) {
		json_t *s = json_loads(schemas[i], 0, NULL);
		ds_grammar *g = NULL;
		ds_err err;

		T_CHECKF(s && ds_grammar_from_schema(s, NULL, &g, &err) == 0, "schema %zu", i);
		for (w = 0; w < 10 && g; w++)
			T_CHECKF(walk_checked(g, &tv, &seed, 60, w % 2 ? 16 : 0),
				 "schema %zu walk %d", i, w);
		ds_grammar_free(g);
		json_decref(s);
	}
	tv_free(&tv);
}

static void test_mask_eos_special(void)
{
	uint64_t seed = t_seed(), bits[2048 / 64];
	ds_grammar *g = parse("root ::= \"a\"+");
	ds_gmatch *m;
	tvocab tv;
	ds_err err;

	tv_build(&tv, &seed);
	T_CHECK(ds_gmatch_new(g, &m, &err) == 0);
	T_CHECK(ds_gmatch_mask(m, tv.v, bits, &err) == 0);
	T_CHECK(!(bits[tv.eos / 64] >> (tv.eos % 64) & 1));
	T_CHECK(bits['a' / 64] >> ('a' % 64) & 1);
	T_CHECK(!(bits['b' / 64] >> ('b' % 64) & 1));
	T_CHECK(ds_gmatch_accept_token(m, tv.v, tv.eos, &err) == DS_GMATCH_REJECT);
	T_CHECK(ds_gmatch_accept_token(m, tv.v, 'a', &err) == DS_GMATCH_OK);
	T_CHECK(ds_gmatch_mask(m, tv.v, bits, &err) == 0);
	T_CHECK(bits[tv.eos / 64] >> (tv.eos % 64) & 1);
	T_CHECK(!(bits[(tv.eos - 1) / 64] >> ((tv.eos - 1) % 64) & 1)); /* <s> */
	T_CHECK(ds_gmatch_accept_token(m, tv.v, tv.eos + 1, &err) == DS_GMATCH_REJECT);
	T_CHECK(ds_gmatch_accept_token(m, tv.v, tv.eos, &err) == DS_GMATCH_OK);
	T_CHECK(ds_gmatch_finished(m) && !ds_gmatch_can_continue(m));
	T_CHECK(ds_gmatch_accept_token(m, tv.v, 'a', &err) == DS_GMATCH_REJECT);
	T_CHECK(ds_gmatch_mask(m, tv.v, bits, &err) == 0);
	T_CHECK(bits[0] == 0 && bits[tv.eos / 64] == 0);
	T_CHECK(ds_gmatch_rollback(m, 1) == 0 && !ds_gmatch_finished(m));
	T_CHECK(ds_gmatch_accept_token(m, tv.v, -1, &err) == DS_GMATCH_REJECT);
	T_CHECK(ds_gmatch_accept_token(m, tv.v, (int32_t)tv.n, &err) == DS_GMATCH_REJECT);
	ds_gmatch_free(m);
	ds_grammar_free(g);
	tv_free(&tv);
}

/* A long run: the tables are rebuilt when they grow, and nothing changes. */
static void test_gc_keeps_state(void)
{
	ds_grammar *g = parse("root ::= \"[\" ( v ( \",\" v )* )? \"]\"\n"
			      "v ::= \"[\" ( v ( \",\" v )* )? \"]\" | [0-9]+");
	ds_gmatch *m;
	ds_err err;
	int i, ok = 1;

	T_CHECK(ds_gmatch_new(g, &m, &err) == 0);
	/* deep nesting makes new stacks (and states) at every step */
	for (i = 0; i < 200000 && ok; i++)
		ok = ds_gmatch_accept_bytes(m, "[", 1, &err) == DS_GMATCH_OK;
	ok = ok && ds_gmatch_accept_bytes(m, "1", 1, &err) == DS_GMATCH_OK;
	for (i = 0; i < 200000 && ok; i++) {
		ok = ds_gmatch_accept_bytes(m, "]", 1, &err) == DS_GMATCH_OK;
		T_CHECK(ds_gmatch_complete(m) == (i == 199999));
	}
	T_CHECK(ok);
	T_CHECK(ds_gmatch_accept_bytes(m, "]", 1, &err) == DS_GMATCH_REJECT);
	T_CHECK(ds_gmatch_rollback(m, 3) == 0 && !ds_gmatch_complete(m));
	T_CHECK(ds_gmatch_accept_bytes(m, "],1]]", 5, &err) == DS_GMATCH_OK);
	T_CHECK(ds_gmatch_complete(m));
	ds_gmatch_free(m);
	ds_grammar_free(g);
}


/* ---- the schema compiler ------------------------------------------------------ */

static ds_grammar *schema_grammar(const char *text)
{
	json_t *s = json_loads(text, JSON_DECODE_ANY, NULL);
	ds_grammar *g = NULL;
	ds_err err;

	if (s == NULL || ds_grammar_from_schema(s, NULL, &g, &err) != 0)
		printf("#   schema: %s\n", s ? err.msg : "bad JSON");
	json_decref(s);
	return g;
}

/* The compile error for a schema under the path prefix. */
static const char *schema_error(const char *text, const char *path)
{
	static ds_err err;
	json_t *s = json_loads(text, JSON_DECODE_ANY, NULL);
	ds_grammar *g = NULL;

	snprintf(err.msg, sizeof err.msg, "(compiled)");
	if (s == NULL)
		return "bad JSON";
	if (ds_grammar_from_schema(s, path, &g, &err) == 0)
		ds_grammar_free(g);
	json_decref(s);
	return err.msg;
}

#define SCHEMA_ERR(text, want) T_CHECKF(strcmp(schema_error(text, NULL), want) == 0, \
	"got '%s', want '%s'", schema_error(text, NULL), want)

static void test_schema_refusals(void)
{
	T_CHECK(strcmp(schema_error("{\"type\":\"object\",\"properties\":{\"x\":"
		"{\"patternProperties\":{}}}}", "response_format.json_schema.schema"),
		"response_format.json_schema.schema.properties.x: unsupported keyword "
		"'patternProperties'") == 0);
	SCHEMA_ERR("{\"not\":{}}", "schema: unsupported keyword 'not'");
	SCHEMA_ERR("{\"anyOf\":[{},{\"if\":{}}]}", "schema.anyOf[1]: unsupported keyword 'if'");
	SCHEMA_ERR("{\"type\":\"integer\",\"multipleOf\":2}",
		   "schema: unsupported keyword 'multipleOf'");
	SCHEMA_ERR("{\"type\":\"array\",\"uniqueItems\":true}",
		   "schema: unsupported keyword 'uniqueItems' (true)");
	SCHEMA_ERR("{\"type\":\"array\",\"items\":{\"contains\":{}}}",
		   "schema.items: unsupported keyword 'contains'");
	SCHEMA_ERR("{\"items\":[{}]}", "schema: 'items' as an array unsupported (use prefixItems)");
	SCHEMA_ERR("{\"type\":\"string\",\"format\":\"uri\"}",
		   "schema.format: unsupported format 'uri'");
	SCHEMA_ERR("{\"type\":\"string\",\"pattern\":\"a(?=b)\"}",
		   "schema.pattern: lookaround unsupported at offset 2");
	SCHEMA_ERR("{\"type\":\"string\",\"pattern\":\"(a)\\\\1\"}",
		   "schema.pattern: backreference unsupported at offset 5");
	SCHEMA_ERR("{\"type\":\"string\",\"pattern\":\"a^b\"}",
		   "schema.pattern: anchor inside the pattern unsupported at offset 1");
	SCHEMA_ERR("{\"type\":\"string\",\"pattern\":\"\\\\bx\"}",
		   "schema.pattern: word boundary '\\b' unsupported at offset 2");
	SCHEMA_ERR("{\"type\":\"string\",\"pattern\":\"^x\",\"maxLength\":3}",
		   "schema: 'pattern' with minLength/maxLength unsupported");
	SCHEMA_ERR("{\"type\":\"string\",\"minLength\":5,\"maxLength\":2}",
		   "schema: minLength above maxLength");
	SCHEMA_ERR("{\"type\":\"string\",\"maxLength\":100000}",
		   "schema: minLength/maxLength over 10000 unsupported");
	SCHEMA_ERR("{\"type\":\"number\",\"minimum\":0.5}",
		   "schema: 'minimum': only whole-number bounds on numbers");
	SCHEMA_ERR("{\"type\":\"integer\",\"maximum\":9007199254740992}",
		   "schema: 'maximum': magnitude over 2^53 unsupported");
	SCHEMA_ERR("{\"type\":\"integer\",\"minimum\":5,\"maximum\":4}",
		   "schema: no number satisfies the bounds");
	SCHEMA_ERR("{\"$ref\":\"http://x.org/s.json\"}",
		   "schema: '$ref' http://x.org/s.json: only local references ('#...') supported");
	SCHEMA_ERR("{\"$ref\":\"#/$defs/nope\"}", "schema: '$ref' #/$defs/nope not found");
	SCHEMA_ERR("{\"properties\":{\"a\":{\"$ref\":\"#/$defs/b\"}},"
		   "\"$defs\":{\"b\":{\"type\":\"string\",\"format\":\"x\"}}}",
		   "schema.$defs.b.format: unsupported format 'x'");
	SCHEMA_ERR("false", "schema: schema false: no value is valid");
	T_CHECK(strstr(schema_error("{\"$ref\":\"#\"}", NULL), "matches no text") != NULL);
	SCHEMA_ERR("3", "schema: a schema must be an object or a boolean");
	SCHEMA_ERR("{\"type\":\"strin\"}", "schema: unknown type 'strin'");
	SCHEMA_ERR("{\"allOf\":[{\"type\":\"string\"},{\"type\":\"integer\"}]}",
		   "schema: allOf: the types exclude each other");
	SCHEMA_ERR("{\"allOf\":[{\"maxLength\":1},{\"maxLength\":2}]}",
		   "schema: allOf: conflicting 'maxLength' unsupported");
	SCHEMA_ERR("{\"allOf\":[{\"properties\":{\"a\":{}},\"additionalProperties\":false},"
		   "{\"properties\":{\"b\":{}}}]}",
		   "schema: allOf: additionalProperties of one branch excludes property 'b' of another");
	SCHEMA_ERR("{\"enum\":[1,2],\"minimum\":0}", "schema: 'minimum' beside enum/const unsupported");
	SCHEMA_ERR("{\"type\":\"string\",\"enum\":[1,2]}", "schema: no value satisfies enum/const and type");
	SCHEMA_ERR("{\"required\":[\"a\"],\"additionalProperties\":false}",
		   "schema: required 'a' is not in properties and additionalProperties is false");
	{
		char deep[2000] = "", want[1000] = "schema";
		int d;

		for (d = 0; d < 70; d++)
			strcat(deep, "{\"items\":");
		strcat(deep, "{}");
		for (d = 0; d < 70; d++)
			strcat(deep, "}");
		for (d = 0; d < (int)DS_SCHEMA_MAX_DEPTH; d++)
			strcat(want, ".items");
		strcat(want, ": schema nested deeper than 64");
		SCHEMA_ERR(deep, want);
	}
}

/* Between tokens: nothing, one space, or a newline and up to 20 blanks. */
static void test_whitespace_policy(void)
{
	ds_grammar *g = schema_grammar("{\"type\":\"object\",\"properties\":"
				       "{\"a\":{\"type\":\"array\"}}}");

	ACCEPT(g, "{\"a\":[]}");
	ACCEPT(g, "{ \"a\" : [ 1 , 2 ] } ");
	ACCEPT(g, "{\n  \"a\": [\n    1,\n    2\n  ]\n}\n");
	ACCEPT(g, "{\n\t\"a\": []}");
	REJECT(g, "{  \"a\":[]}");
	REJECT(g, "{\n\n\"a\":[]}");
	REJECT(g, "{\n                     \"a\":[]}"); /* 21 */
	ACCEPT(g, "{\n                    \"a\":[]}");  /* 20 */
	REJECT(g, " {}");
	REJECT(g, "{}  ");
	REJECT(g, "{\"b\":1}");
	ds_grammar_free(g);
}

/* Near an exclusive bound a number's fraction is cut where doubles stop
 * telling it from the bound: a validator reads 4.99999999999999999 as 5. */
static void test_exclusive_bounds_rounding(void)
{
	ds_grammar *g = schema_grammar("{\"type\":\"number\",\"exclusiveMinimum\":4,"
				       "\"exclusiveMaximum\":5}");

	ACCEPT(g, "4.5");
	ACCEPT(g, "4.000000000000001");
	ACCEPT(g, "4.999999999999999");
	REJECT(g, "4.0000000000000001");
	REJECT(g, "4.99999999999999999");
	PREFIX(g, "4.0");
	PREFIX(g, "4");
	REJECT(g, "5");
	ds_grammar_free(g);
	g = schema_grammar("{\"type\":\"number\",\"exclusiveMaximum\":0,\"minimum\":-2}");
	ACCEPT(g, "-0.5");
	ACCEPT(g, "-2");
	ACCEPT(g, "-0.000000000000000000001");
	REJECT(g, "0");
	PREFIX(g, "-0.0");
	PREFIX(g, "-0");
	REJECT(g, "-2.5");
	ds_grammar_free(g);
}

static void test_json_object_mode(void)
{
	ds_grammar *g = NULL;
	ds_err err;

	T_CHECK(ds_grammar_json_object(&g, &err) == 0);
	ACCEPT(g, "{}");
	ACCEPT(g, "{\"a\":{\"b\":[1,-2.5e-3,true,null,\"\\u00e9\\n\"]}}");
	ACCEPT(g, "{\"\":0, \"a\":\"\",\"a\":1}");
	REJECT(g, "[]");
	REJECT(g, "{\"a\":01}");
	REJECT(g, "{\"a\":1.}");
	REJECT(g, "{\"a\":\"\\x\"}");
	REJECT(g, "{\"a\":\"\\ud800\"}");
	REJECT(g, "{\"a\":\"\x01\"}");
	REJECT(g, "{a:1}");
	PREFIX(g, "{\"a\":[{\"b\":");
	ds_grammar_free(g);
}

static void test_schema_text(void)
{
	json_t *s = json_loads("{\"type\":\"object\",\"properties\":{\"first name\":"
			       "{\"type\":\"string\"}},\"required\":[\"first name\"]}", 0, NULL);
	char *text = NULL;
	size_t len = 0;
	ds_err err;

	T_CHECK(ds_grammar_schema_text(s, NULL, &text, &len, &err) == 0);
	T_CHECK(text && strlen(text) == len);
	T_CHECK(text && strstr(text, "root-first-name-kv ::= \"\\\"first name\\\"\" j-ws \":\"")
		!= NULL);
	T_CHECK(text && strstr(text, "\nroot ::= ") != NULL);
	free(text);
	json_decref(s);
}

/* A tool call: a marker, then one of the tools' {"name", "arguments"}. */
#define TOOL "<\xef\xbd\x9c" "tool\xe2\x96\x81" "call\xef\xbd\x9c>"
static void test_builder_tool_calls(void)
{
	json_t *weather = json_loads("{\"type\":\"object\",\"properties\":{\"city\":"
		"{\"type\":\"string\"},\"days\":{\"type\":\"integer\",\"minimum\":1,"
		"\"maximum\":7}},\"required\":[\"city\"],\"additionalProperties\":false}", 0, NULL);
	json_t *noargs = json_loads("{\"type\":\"object\",\"properties\":{}}", 0, NULL);
	json_t *bad = json_loads("{\"type\":\"object\",\"not\":{}}", 0, NULL);
	ds_gbuilder *b = NULL;
	ds_grammar *g = NULL;
	ds_err err;

	T_CHECK(ds_gbuilder_new(&b, &err) == 0);
	T_CHECK(ds_gbuilder_schema(b, "args-get_weather", weather, "tools[0].parameters", &err) == 0);
	T_CHECK(ds_gbuilder_schema(b, "args-now", noargs, "tools[1].parameters", &err) == 0);
	T_CHECK(ds_gbuilder_schema(b, "args-bad", bad, "tools[2].parameters", &err) == -1);
	T_CHECK(strcmp(err.msg, "tools[2].parameters: unsupported keyword 'not'") == 0);
	T_CHECK(ds_gbuilder_literal(b, "begin", TOOL, strlen(TOOL), &err) == 0);
	T_CHECK(ds_gbuilder_literal(b, "end", "\xff", 1, &err) == -1);
	T_CHECK(ds_gbuilder_literal(b, "end", "</call>", 7, &err) == 0);
	T_CHECK(ds_gbuilder_rule(b, "end", "\"x\"", &err) == -1);
	T_CHECK(strcmp(err.msg, "rule 'end' defined twice") == 0);
	T_CHECK(ds_gbuilder_rule(b, "j-ws", "\"x\"", &err) == -1);
	T_CHECK(ds_gbuilder_rule(b, "bad name", "\"x\"", &err) == -1);
	T_CHECK(ds_gbuilder_rule(b, "call",
		"\"{\\\"name\\\": \\\"get_weather\\\", \\\"arguments\\\": \" args-get_weather \"}\" | "
		"\"{\\\"name\\\": \\\"now\\\", \\\"arguments\\\": \" args-now \"}\"", &err) == 0);
	T_CHECK(ds_gbuilder_rule(b, "root", "begin call ( \",\" call )* end", &err) == 0);
	T_CHECKF(ds_gbuilder_finish(b, "root", &g, &err) == 0, "%s", err.msg);
	ACCEPT(g, TOOL "{\"name\": \"get_weather\", "
		  "\"arguments\": {\"city\": \"Paris\", \"days\": 3}}</call>");
	ACCEPT(g, TOOL "{\"name\": \"now\", "
		  "\"arguments\": {}},{\"name\": \"now\", \"arguments\": {}}</call>");
	REJECT(g, TOOL "{\"name\": \"now\", "
		  "\"arguments\": {\"city\": \"x\"}}</call>");
	REJECT(g, TOOL "{\"name\": \"get_weather\", "
		  "\"arguments\": {\"city\": \"x\", \"days\": 8}}</call>");
	ds_grammar_free(g);
	/* a rule naming an undefined one fails at finish, with its place */
	T_CHECK(ds_gbuilder_rule(b, "more", "nothing-here", &err) == 0);
	T_CHECK(ds_gbuilder_finish(b, "root", &g, &err) == -1);
	T_CHECKF(strstr(err.msg, "undefined rule 'nothing-here'") != NULL, "%s", err.msg);
	ds_gbuilder_free(b);
	json_decref(weather);
	json_decref(noargs);
	json_decref(bad);
}

int main(void)
{
	T_RUN(test_literals_and_alternatives);
	T_RUN(test_rules_groups_newlines);
	T_RUN(test_repetition);
	T_RUN(test_classes);
	T_RUN(test_parse_errors);
	T_RUN(test_recursion);
	T_RUN(test_unproductive_pruned);
	T_RUN(test_utf8_classes);
	T_RUN(test_rollback_clone);
	T_RUN(test_stack_limit);
	T_RUN(test_mask_brute_force);
	T_RUN(test_mask_schema_brute_force);
	T_RUN(test_mask_eos_special);
	T_RUN(test_gc_keeps_state);
	T_RUN(test_schema_refusals);
	T_RUN(test_whitespace_policy);
	T_RUN(test_exclusive_bounds_rounding);
	T_RUN(test_json_object_mode);
	T_RUN(test_schema_text);
	T_RUN(test_builder_tool_calls);
	return t_done();
}
