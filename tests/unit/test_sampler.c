/* test_sampler.c - the sampling chain against direct computations. */
#include <math.h>
#include <string.h>

#include "harness.h"
#include "runtime/sampler.h"

#define V 1000

static void fill(float *l, uint64_t *seed)
{
	int i;

	for (i = 0; i < V; i++)
		l[i] = t_randf(seed) * 8;
}

static void test_greedy(void)
{
	uint64_t seed = t_seed();
	ds_sampler_params p;
	ds_sampler s;
	float l[V];
	int i, best = 0;

	ds_sampler_defaults(&p);
	p.temp = 0;
	T_CHECK(ds_sampler_init(&s, &p, V, NULL) == 0);
	fill(l, &seed);
	for (i = 1; i < V; i++)
		if (l[i] > l[best])
			best = i;
	T_CHECK(ds_sampler_sample(&s, l) == best);
	/* ties: the lowest id */
	l[7] = l[3] = 100;
	T_CHECK(ds_sampler_sample(&s, l) == 3);
	ds_sampler_free(&s);
}

/* Same seed, same logits: same tokens; another seed: (almost surely) not. */
static void test_reproducible(void)
{
	uint64_t seed = t_seed();
	ds_sampler_params p;
	ds_sampler a, b, c;
	float l[V], la[V];
	int i, same_ab = 0, same_ac = 0;

	ds_sampler_defaults(&p);
	p.top_k = 0;
	p.top_p = 1;
	p.min_p = 0;
	p.temp = 1.5f;
	p.seed = 42;
	ds_sampler_init(&a, &p, V, NULL);
	ds_sampler_init(&b, &p, V, NULL);
	p.seed = 43;
	ds_sampler_init(&c, &p, V, NULL);
	fill(l, &seed);
	for (i = 0; i < 200; i++) {
		int32_t ta, tb, tc;

		memcpy(la, l, sizeof l);
		ta = ds_sampler_sample(&a, la);
		memcpy(la, l, sizeof l);
		tb = ds_sampler_sample(&b, la);
		memcpy(la, l, sizeof l);
		tc = ds_sampler_sample(&c, la);
		same_ab += ta == tb;
		same_ac += ta == tc;
	}
	T_CHECK(same_ab == 200);
	T_CHECK(same_ac < 200);
	ds_sampler_free(&a);
	ds_sampler_free(&b);
	ds_sampler_free(&c);
}

/* top-k 5: only the 5 largest logits are ever drawn. */
static void test_top_k(void)
{
	uint64_t seed = t_seed();
	ds_sampler_params p;
	ds_sampler s;
	float l[V], la[V];
	int i, j, bad = 0;

	ds_sampler_defaults(&p);
	p.top_k = 5;
	p.top_p = 1;
	p.min_p = 0;
	p.temp = 5;
	p.seed = seed;
	ds_sampler_init(&s, &p, V, NULL);
	fill(l, &seed);
	for (i = 0; i < 500; i++) {
		int32_t t;
		int above = 0;

		memcpy(la, l, sizeof l);
		t = ds_sampler_sample(&s, la);
		for (j = 0; j < V; j++)
			above += l[j] > l[t];
		bad += above >= 5;
	}
	T_CHECK(bad == 0);
	ds_sampler_free(&s);
}

/* The empirical distribution at temperature T matches softmax(l/T) on a
 * small vocabulary (chi-square-like bound on the worst cell); the best
 * logit is not 1, so weights taken relative to anything but it show. */
static void test_distribution(void)
{
	ds_sampler_params p;
	ds_sampler s;
	float l[4] = { 2.5f, 1.5f, 0.5f, 1.0f }, la[4];
	double want[4], sum = 0;
	int count[4] = { 0 }, i, n = 40000;

	ds_sampler_defaults(&p);
	p.top_k = 0;
	p.top_p = 1;
	p.min_p = 0;
	p.temp = 0.7f;
	p.seed = 7;
	ds_sampler_init(&s, &p, 4, NULL);
	for (i = 0; i < 4; i++)
		sum += want[i] = exp(l[i] / 0.7);
	for (i = 0; i < n; i++) {
		memcpy(la, l, sizeof l);
		count[ds_sampler_sample(&s, la)]++;
	}
	for (i = 0; i < 4; i++) {
		double e = want[i] / sum * n;
		T_CHECKF(fabs(count[i] - e) < 5 * sqrt(e), "token %d: %d vs %.0f", i, count[i], e);
	}
	ds_sampler_free(&s);
}

/* top-p 0.6 on probabilities {0.5, 0.3, 0.15, 0.05}: {0,1} survive;
 * min-p 0.5: only tokens with p >= 0.25 ({0, 1}). */
static void test_top_p_min_p(void)
{
	ds_sampler_params p;
	ds_sampler s;
	float base[4] = { logf(0.5f), logf(0.3f), logf(0.15f), logf(0.05f) }, la[4];
	int seen[4] = { 0 }, i, pass;

	for (pass = 0; pass < 2; pass++) {
		ds_sampler_defaults(&p);
		p.top_k = 0;
		p.top_p = pass == 0 ? 0.6f : 1.0f;
		p.min_p = pass == 0 ? 0.0f : 0.5f;
		p.temp = 1;
		p.seed = 11 + pass;
		ds_sampler_init(&s, &p, 4, NULL);
		memset(seen, 0, sizeof seen);
		for (i = 0; i < 4000; i++) {
			memcpy(la, base, sizeof base);
			seen[ds_sampler_sample(&s, la)]++;
		}
		T_CHECK(seen[0] > 0 && seen[1] > 0);
		T_CHECK(seen[2] == 0 && seen[3] == 0);
		ds_sampler_free(&s);
	}
}

/* Repetition penalty 2: a seen token's positive logit halves, negative
 * doubles; each distinct token once. */
static void test_penalty(void)
{
	ds_sampler_params p;
	ds_sampler s;
	float l[4] = { 3.0f, 2.0f, -1.0f, 0.5f };

	ds_sampler_defaults(&p);
	p.temp = 0;
	p.repeat_penalty = 2;
	p.repeat_last_n = 3;
	ds_sampler_init(&s, &p, 4, NULL);
	ds_sampler_accept(&s, 0);
	ds_sampler_accept(&s, 0);
	ds_sampler_accept(&s, 2);
	T_CHECK(ds_sampler_sample(&s, l) == 1);
	T_CHECK(l[0] == 1.5f && l[2] == -2.0f && l[1] == 2.0f);
	/* the ring forgets: after 3 more tokens, 0 is no longer penalized */
	ds_sampler_accept(&s, 3);
	ds_sampler_accept(&s, 3);
	ds_sampler_accept(&s, 3);
	l[0] = 3.0f;
	T_CHECK(ds_sampler_sample(&s, l) == 0);
	ds_sampler_free(&s);
}

int main(void)
{
	T_RUN(test_greedy);
	T_RUN(test_reproducible);
	T_RUN(test_top_k);
	T_RUN(test_distribution);
	T_RUN(test_top_p_min_p);
	T_RUN(test_penalty);
	return t_done();
}
