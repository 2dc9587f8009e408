/*
 * harness.h - a tiny TAP-producing unit test harness.
 *
 *	static void test_thing(void) { T_CHECK(1 + 1 == 2); }
 *	int main(void) { T_RUN(test_thing); return t_done(); }
 *
 * Each T_RUN is one test: "ok N - name" or "not ok N - name", with the
 * failed checks (file:line: expression) as "# " lines before it.  The
 * runner (scripts/run-tests.sh) counts the lines.
 */
#ifndef DS_HARNESS_H
#define DS_HARNESS_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static int t_n, t_failed, t_cur_failed;
static const char *t_skip_why;

/* End the current test as skipped (TAP "# SKIP why"): what it checks
 * cannot be seen on this machine. */
#define T_SKIP(why)                                                         \
	do {                                                                \
		t_skip_why = (why);                                         \
		return;                                                     \
	} while (0)

#define T_CHECK(e)                                                          \
	do {                                                                \
		if (!(e)) {                                                 \
			printf("#   %s:%d: check failed: %s\n", __FILE__,    \
			       __LINE__, #e);                               \
			t_cur_failed++;                                     \
		}                                                           \
	} while (0)

/* Like T_CHECK with a printf-style explanation. */
#define T_CHECKF(e, ...)                                                    \
	do {                                                                \
		if (!(e)) {                                                 \
			printf("#   %s:%d: check failed: %s: ", __FILE__,    \
			       __LINE__, #e);                               \
			printf(__VA_ARGS__);                                \
			printf("\n");                                       \
			t_cur_failed++;                                     \
		}                                                           \
	} while (0)

/* |a - b| <= tol */
#define T_NEAR(a, b, tol)                                                   \
	T_CHECKF(fabs((double)(a) - (double)(b)) <= (double)(tol),          \
		 "%.9g vs %.9g (tol %.3g)", (double)(a), (double)(b),      \
		 (double)(tol))

#define T_RUN(fn)                                                           \
	do {                                                                \
		t_cur_failed = 0;                                           \
		t_skip_why = NULL;                                          \
		fn();                                                       \
		t_n++;                                                      \
		if (t_cur_failed) {                                         \
			t_failed++;                                         \
			printf("not ok %d - %s\n", t_n, #fn);               \
		} else if (t_skip_why) {                                    \
			printf("ok %d - %s # SKIP %s\n", t_n, #fn, t_skip_why); \
		} else {                                                    \
			printf("ok %d - %s\n", t_n, #fn);                   \
		}                                                           \
		fflush(stdout);                                             \
	} while (0)

static inline int t_done(void)
{
	printf("1..%d\n", t_n);
	return t_failed ? 1 : 0;
}

/* A small deterministic PRNG for test data (xorshift64*). */
static inline uint64_t t_rand(uint64_t *s)
{
	*s ^= *s >> 12;
	*s ^= *s << 25;
	*s ^= *s >> 27;
	return *s * 2685821657736338717ull;
}
/* uniform in [-1, 1) */
static inline float t_randf(uint64_t *s)
{
	return (float)((double)(t_rand(s) >> 11) * 0x1p-52 - 1.0);
}
/* A fresh seed per run unless DS_TEST_SEED is set; printed so a failure
 * can be reproduced. */
static inline uint64_t t_seed(void)
{
	const char *e = getenv("DS_TEST_SEED");
	uint64_t s;

	if (e != NULL)
		s = strtoull(e, NULL, 0);
	else {
		FILE *f = fopen("/dev/urandom", "rb");
		s = 88172645463325252ull;
		if (f != NULL) {
			if (fread(&s, sizeof s, 1, f) != 1)
				s = 88172645463325252ull;
			fclose(f);
		}
	}
	if (s == 0)
		s = 1;
	printf("# seed %llu (DS_TEST_SEED to repeat)\n", (unsigned long long)s);
	return s;
}

#endif
