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

/* ---- speculative verification ---------------------------------------------------- */

#define SV 6

/* The chain's distribution by direct computation: softmax(l / T) over
 * the top-p cut of softmax(l) (the test's logits are distinct). */
static void want_dist(const float *l, float temp, float top_p, double *p)
{
	int order[SV], i, j, keep = SV;
	double sum = 0, acc = 0;

	for (i = 0; i < SV; i++)
		order[i] = i;
	for (i = 0; i < SV; i++)
		for (j = i + 1; j < SV; j++)
			if (l[order[j]] > l[order[i]]) {
				int t = order[i];

				order[i] = order[j];
				order[j] = t;
			}
	for (i = 0; i < SV; i++)
		sum += exp(l[i] - l[order[0]]);
	for (i = 0; i < SV; i++) {
		acc += exp(l[order[i]] - l[order[0]]) / sum;
		if (acc >= top_p) {
			keep = i + 1;
			break;
		}
	}
	sum = 0;
	for (i = 0; i < SV; i++)
		p[i] = 0;
	for (i = 0; i < keep; i++)
		sum += p[order[i]] = exp((l[order[i]] - l[order[0]]) / temp);
	for (i = 0; i < SV; i++)
		p[i] /= sum;
}

static void chain_params(ds_sampler_params *p, uint64_t seed)
{
	ds_sampler_defaults(p);
	p->top_k = 0;
	p->top_p = 0.9f;
	p->min_p = 0;
	p->temp = 0.8f;
	p->seed = seed;
}

static const float sv_logits[SV] = { 1.2f, 0.3f, -0.4f, 2.0f, -2.5f, 0.9f };

/* ds_sampler_dist is the chain's distribution, best first; greedy is the
 * argmax alone. */
static void test_dist(void)
{
	ds_sampler_params p;
	ds_sampler s;
	ds_tokprob out[SV];
	float la[SV];
	double want[SV], tot = 0;
	int n, i;

	chain_params(&p, 1);
	T_CHECK(ds_sampler_init(&s, &p, SV, NULL) == 0);
	want_dist(sv_logits, p.temp, p.top_p, want);
	memcpy(la, sv_logits, sizeof la);
	n = ds_sampler_dist(&s, la, out);
	T_CHECK(n >= 1 && n <= SV);
	for (i = 0; i < n; i++) {
		T_NEAR(out[i].p, want[out[i].id], 1e-6);
		tot += out[i].p;
		if (i)
			T_CHECK(out[i].p <= out[i - 1].p);
	}
	T_NEAR(tot, 1, 1e-6);
	for (i = 0; i < SV; i++)
		tot -= want[i];
	T_NEAR(tot, 0, 1e-6);       /* nothing of p left out */
	ds_sampler_free(&s);
	p.temp = 0;
	ds_sampler_init(&s, &p, SV, NULL);
	memcpy(la, sv_logits, sizeof la);
	T_CHECK(ds_sampler_dist(&s, la, out) == 1 && out[0].id == 3 && out[0].p == 1);
	ds_sampler_free(&s);
}

/* Greedy: the argmax, accepted exactly when it is the draft, and no draw
 * from the generator (the next uniform is a fresh sampler's first). */
static void test_verify_greedy(void)
{
	ds_sampler_params p;
	ds_sampler s, fresh;
	float la[SV];
	int acc, d;

	chain_params(&p, 5);
	p.temp = 0;
	ds_sampler_init(&s, &p, SV, NULL);
	ds_sampler_init(&fresh, &p, SV, NULL);
	for (d = 0; d < SV; d++) {
		memcpy(la, sv_logits, sizeof la);
		T_CHECK(ds_sampler_verify(&s, la, d, NULL, 0, &acc) == 3);
		T_CHECK(acc == (d == 3));
	}
	T_CHECK(ds_sampler_uniform(&s) == ds_sampler_uniform(&fresh));
	ds_sampler_free(&s);
	ds_sampler_free(&fresh);
}

/* Pearson's statistic of counts against probabilities over the cells
 * with p > 0; a count in a cell of p = 0 makes it infinite. */
static double chi2(const int *count, const double *p, int n_cells, int n)
{
	double x = 0;
	int i;

	for (i = 0; i < n_cells; i++) {
		double e = p[i] * n;

		if (e == 0) {
			if (count[i])
				return INFINITY;
			continue;
		}
		x += (count[i] - e) * (count[i] - e) / e;
	}
	return x;
}

/* The tokens ds_sampler_verify returns, with a draft proposed for certain
 * (q a point mass), are distributed as p whatever the draft: the best
 * token, a middling one, and one the top-p cut removes (p = 0).  With 5
 * cells of p > 0 (4 degrees of freedom) the statistic exceeds 23.5 with
 * probability 1e-4 for a correct rule; a rule off by a few percent of a
 * cell's mass over 60000 draws lands far above it.  The acceptance rate
 * is p(d), within 5 standard deviations. */
static void test_verify_point_mass(void)
{
	const int drafts[3] = { 3, 1, 4 }, n = 60000;
	ds_sampler_params p;
	ds_sampler s;
	double want[SV];
	float la[SV];
	int k, i;

	chain_params(&p, 17);
	want_dist(sv_logits, p.temp, p.top_p, want);
	T_CHECK(want[4] == 0);
	for (k = 0; k < 3; k++) {
		int count[SV] = { 0 }, acc, n_acc = 0;
		double e;

		ds_sampler_init(&s, &p, SV, NULL);
		for (i = 0; i < n; i++) {
			memcpy(la, sv_logits, sizeof la);
			count[ds_sampler_verify(&s, la, drafts[k], NULL, 0, &acc)]++;
			n_acc += acc;
		}
		T_CHECKF(chi2(count, want, SV, n) < 23.5, "draft %d: chi2 %.2f",
			 drafts[k], chi2(count, want, SV, n));
		e = want[drafts[k]] * n;
		T_CHECKF(fabs(n_acc - e) <= 5 * sqrt(e + 1), "draft %d: %d accepted, "
			 "expected %.0f", drafts[k], n_acc, e);
		ds_sampler_free(&s);
	}
}

/* A drafter that samples from its own q: drafts drawn from q (a separate
 * generator), verified against p: the result is distributed as p and the
 * acceptance rate is sum min(p, q) (Leviathan et al., Theorem 3.5's
 * beta).  q puts mass on a token p excludes (4) and none on one p keeps. */
static void test_verify_q(void)
{
	const ds_tokprob q[4] = { { 3, 0.25f }, { 0, 0.45f }, { 4, 0.2f }, { 2, 0.1f } };
	const int n = 60000;
	ds_sampler_params p;
	ds_sampler s;
	double want[SV], beta = 0;
	uint64_t g = 99;
	int count[SV] = { 0 }, i, acc, n_acc = 0;
	float la[SV];

	chain_params(&p, 23);
	want_dist(sv_logits, p.temp, p.top_p, want);
	for (i = 0; i < 4; i++)
		beta += fmin(want[q[i].id], q[i].p);
	ds_sampler_init(&s, &p, SV, NULL);
	for (i = 0; i < n; i++) {
		double u = (double)(ds_xorshift64s(&g) >> 11) * 0x1p-53, c = 0;
		int j, d = q[3].id;

		for (j = 0; j < 4; j++)
			if (u < (c += q[j].p)) {
				d = q[j].id;
				break;
			}
		memcpy(la, sv_logits, sizeof la);
		count[ds_sampler_verify(&s, la, d, q, 4, &acc)]++;
		n_acc += acc;
	}
	T_CHECKF(chi2(count, want, SV, n) < 23.5, "chi2 %.2f", chi2(count, want, SV, n));
	T_CHECKF(fabs(n_acc - beta * n) <= 5 * sqrt(beta * (1 - beta) * n),
		 "%d accepted, expected %.0f", n_acc, beta * n);
	/* the id scratch is left zero */
	for (i = 0; i < SV; i++)
		T_CHECK(s.qd[i] == 0);
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
	T_RUN(test_dist);
	T_RUN(test_verify_greedy);
	T_RUN(test_verify_point_mass);
	T_RUN(test_verify_q);
	return t_done();
}
