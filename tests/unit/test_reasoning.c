/* test_reasoning.c - an R1 answer split into reasoning and content
 * (chat/reasoning.h): the cases DeepSeek's API and llama.cpp's
 * deepseek parser answer, and the same outputs whatever pieces the text
 * comes in (markers split between tokens). */
#include <stdlib.h>
#include <string.h>

#include "chat/reasoning.h"
#include "harness.h"

/* s pushed in pieces cut at cuts[0..nc) (ascending); outputs into o. */
static int split(int opened, const char *s, const size_t *cuts, size_t nc,
		 ds_reason_out *o)
{
	ds_reason r;
	size_t at = 0, i, n = strlen(s);
	ds_err err;
	int rc = 0;

	memset(o, 0, sizeof *o);
	ds_reason_init(&r, opened);
	for (i = 0; i <= nc && rc == 0; i++) {
		size_t end = i < nc ? cuts[i] : n;

		rc = ds_reason_push(&r, s + at, end - at, o, &err);
		at = end;
	}
	if (rc == 0)
		rc = ds_reason_finish(&r, o, &err);
	ds_reason_free(&r);
	return rc;
}

static int same(const char *got, size_t n, const char *want)
{
	return n == strlen(want) && (n == 0 || memcmp(got, want, n) == 0);
}

/* want_think / want_content for s whole, cut at any one or two points,
 * and a byte at a time. */
static int check(int opened, const char *s, const char *wt, const char *wc)
{
	size_t n = strlen(s), cuts[64], a, b, k;
	ds_reason_out o;
	int ok = 1;

	for (a = 0; a <= n && ok; a++)
		for (b = a; b <= n && ok; b++) {
			cuts[0] = a;
			cuts[1] = b;
			ok = split(opened, s, cuts, 2, &o) == 0 &&
			     same(o.think, o.n_think, wt) && same(o.content, o.n_content, wc);
			if (!ok)
				printf("#   [%s] cut at %zu, %zu: think [%.*s] content [%.*s]\n", s,
				       a, b, (int)o.n_think, o.think ? o.think : "",
				       (int)o.n_content, o.content ? o.content : "");
			ds_reason_out_free(&o);
		}
	for (k = 0; k < n && k < 64; k++)
		cuts[k] = k + 1;
	if (ok && n <= 64) {
		ok = split(opened, s, cuts, n, &o) == 0 && same(o.think, o.n_think, wt) &&
		     same(o.content, o.n_content, wc);
		ds_reason_out_free(&o);
	}
	return ok;
}

static void test_deepseek_cases(void)
{
	/* the template opened the block (R1: "<｜Assistant｜><think>\n") */
	T_CHECK(check(1, "Let me think.\n</think>\n\nThe answer is 4.", "Let me think.",
		      "The answer is 4."));
	T_CHECK(check(1, "\n\n</think>\n\nA", "", "A"));
	T_CHECK(check(1, "a\n\nb </think>c", "a\n\nb", "c"));
	T_CHECK(check(1, "x</think>y</think>z", "x", "y</think>z"));
	/* the model opened it */
	T_CHECK(check(0, "<think>\nhm\n</think>\n\nHi", "hm", "Hi"));
	T_CHECK(check(0, "  \n<think>x</think>y", "x", "y"));
	/* no block: the content byte for byte, whitespace and all */
	T_CHECK(check(0, "Hello there", "", "Hello there"));
	T_CHECK(check(0, " <thinking> a ", "", " <thinking> a "));
	T_CHECK(check(0, "\n\nHi</think>", "", "\n\nHi</think>"));
	T_CHECK(check(0, "", "", ""));
	T_CHECK(check(0, "<thi", "", "<thi"));
	/* cut off inside the block (max_tokens): all reasoning */
	T_CHECK(check(1, "no end", "no end", ""));
	T_CHECK(check(1, "a  \n", "a", ""));
	T_CHECK(check(1, "a </thi", "a </thi", ""));
	T_CHECK(check(1, "a <3 b</think>", "a <3 b", ""));
	T_CHECK(check(0, "<think>", "", ""));
}

/* Random texts of markers, their pieces, whitespace and letters: any
 * pieces give what the whole text gives. */
static void test_pieces(void)
{
	static const char *const bits[] = { "<think>", "</think>", "<", "</", "think",
					    ">", " ", "\n", "a", "/", "</th", "ink>" };
	uint64_t seed = t_seed();
	int i, bad = 0;

	for (i = 0; i < 3000 && bad < 3; i++) {
		char s[256] = "";
		size_t cuts[8], nc = t_rand(&seed) % 8, k, n;
		int opened = (int)(t_rand(&seed) & 1), parts = (int)(t_rand(&seed) % 12);
		ds_reason_out whole, cut;

		for (k = 0; k < (size_t)parts; k++)
			strcat(s, bits[t_rand(&seed) % (sizeof bits / sizeof bits[0])]);
		n = strlen(s);
		for (k = 0; k < nc; k++)
			cuts[k] = n ? t_rand(&seed) % (n + 1) : 0;
		for (k = 1; k < nc; k++)       /* ascending */
			for (size_t m = k; m > 0 && cuts[m - 1] > cuts[m]; m--) {
				size_t t = cuts[m];

				cuts[m] = cuts[m - 1];
				cuts[m - 1] = t;
			}
		split(opened, s, NULL, 0, &whole);
		split(opened, s, cuts, nc, &cut);
		if (!same(cut.think, cut.n_think, whole.think ? whole.think : "") ||
		    !same(cut.content, cut.n_content, whole.content ? whole.content : "")) {
			printf("#   [%s] opened %d: pieces differ from the whole\n", s, opened);
			bad++;
		}
		/* nothing made up: the outputs are no longer than the text */
		if (whole.n_think + whole.n_content > n)
			bad++;
		ds_reason_out_free(&whole);
		ds_reason_out_free(&cut);
	}
	T_CHECK(bad == 0);
}

int main(void)
{
	T_RUN(test_deepseek_cases);
	T_RUN(test_pieces);
	return t_done();
}
