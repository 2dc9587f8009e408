/* sampler.c - repetition penalty, top-k, top-p, min-p, temperature. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sampler.h"

void ds_sampler_defaults(ds_sampler_params *p)
{
	p->temp = 0.8f;
	p->top_k = 40;
	p->top_p = 0.95f;
	p->min_p = 0.05f;
	p->repeat_penalty = 1.0f;
	p->repeat_last_n = 64;
	p->seed = 0;
}

static uint64_t splitmix64(uint64_t *x)
{
	uint64_t z = (*x += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k)
{
	return (x << k) | (x >> (64 - k));
}

static uint64_t next(uint64_t *s)
{
	uint64_t r = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;

	s[2] ^= s[0];
	s[3] ^= s[1];
	s[1] ^= s[2];
	s[0] ^= s[3];
	s[2] ^= t;
	s[3] = rotl(s[3], 45);
	return r;
}

double ds_sampler_uniform(ds_sampler *s)
{
	return (double)(next(s->rng) >> 11) * 0x1p-53;
}

int ds_sampler_init(ds_sampler *s, const ds_sampler_params *p, int n_vocab,
		    ds_err *err)
{
	uint64_t x;
	int i;

	memset(s, 0, sizeof *s);
	if (n_vocab <= 0)
		return ds_errf(err, "sampler: vocabulary size %d", n_vocab);
	s->p = *p;
	if (s->p.repeat_last_n < 0)
		s->p.repeat_last_n = 0;
	s->n_vocab = n_vocab;
	x = p->seed;
	for (i = 0; i < 4; i++)
		s->rng[i] = splitmix64(&x);
	s->recent = ds_calloc((size_t)s->p.repeat_last_n + 1, sizeof *s->recent, err);
	s->cand = ds_calloc((size_t)n_vocab, sizeof *s->cand, err);
	s->prob = ds_calloc((size_t)n_vocab, sizeof *s->prob, err);
	s->qd = ds_calloc((size_t)n_vocab, sizeof *s->qd, err);
	if (s->recent == NULL || s->cand == NULL || s->prob == NULL || s->qd == NULL) {
		ds_sampler_free(s);
		return -1;
	}
	return 0;
}

void ds_sampler_free(ds_sampler *s)
{
	free(s->recent);
	free(s->cand);
	free(s->prob);
	free(s->qd);
	s->recent = NULL;
	s->cand = NULL;
	s->prob = NULL;
	s->qd = NULL;
}

void ds_sampler_accept(ds_sampler *s, int32_t token)
{
	int n = s->p.repeat_last_n;

	if (n == 0)
		return;
	s->recent[s->head] = token;
	s->head = (s->head + 1) % n;
	if (s->n_recent < n)
		s->n_recent++;
}

/* CTRL-style penalty, as llama.cpp: divide positive logits, multiply
 * negative ones, once per distinct recent token. */
static void penalize(ds_sampler *s, float *logits)
{
	float r = s->p.repeat_penalty;
	int i, j;

	if (r == 1.0f)
		return;
	for (i = 0; i < s->n_recent; i++) {
		int32_t t = s->recent[i];

		for (j = 0; j < i; j++)
			if (s->recent[j] == t)
				break;
		if (j < i || t < 0 || t >= s->n_vocab)
			continue;
		logits[t] = logits[t] > 0 ? logits[t] / r : logits[t] * r;
	}
}

/* The first index of the largest value; NaNs never win (all NaN: 0).
 * Eight running maxima, then a scan for the first equal: a single
 * running index chains a load, a compare and a move per element, which
 * on a small model's vocabulary costs a tenth of a decode step. */
int32_t ds_argmax(const float *x, int n)
{
	float m[8], best;
	int i, j;

	if (n <= 0)
		return 0;
	for (j = 0; j < 8; j++)
		m[j] = x[0];
	for (i = 0; i + 8 <= n; i += 8)
		for (j = 0; j < 8; j++)
			m[j] = x[i + j] > m[j] ? x[i + j] : m[j];
	for (; i < n; i++)
		m[0] = x[i] > m[0] ? x[i] : m[0];
	best = m[0];
	for (j = 1; j < 8; j++)
		best = m[j] > best ? m[j] : best;
	for (i = 0; i < n; i++)
		if (x[i] == best)
			return i;
	return 0;
}

/* "a before b": higher logit first, lower id on ties.  A total order, so
 * the result never depends on the sort algorithm. */
static int before(const struct ds_cand *a, const struct ds_cand *b)
{
	return a->logit > b->logit || (a->logit == b->logit && a->id < b->id);
}

static int cmp_cand(const void *pa, const void *pb)
{
	const struct ds_cand *a = pa, *b = pb;

	return before(a, b) ? -1 : before(b, a) ? 1 : 0;
}

/* Sift down in a heap whose root is the *worst* kept candidate. */
static void sift(struct ds_cand *h, int n, int i)
{
	for (;;) {
		int l = 2 * i + 1, r = l + 1, w = i;
		struct ds_cand t;

		if (l < n && before(&h[w], &h[l]))
			w = l;
		if (r < n && before(&h[w], &h[r]))
			w = r;
		if (w == i)
			return;
		t = h[i];
		h[i] = h[w];
		h[w] = t;
		i = w;
	}
}

/* The best k candidates, sorted, in s->cand[0..k); returns k. */
static int select_top(ds_sampler *s, const float *logits, int k)
{
	struct ds_cand *c = s->cand;
	int n = s->n_vocab, i;

	if (k <= 0 || k > n)
		k = n;
	for (i = 0; i < k; i++) {
		c[i].logit = logits[i];
		c[i].id = i;
	}
	if (k < n) {
		for (i = k / 2 - 1; i >= 0; i--)
			sift(c, k, i);
		for (i = k; i < n; i++) {
			struct ds_cand x = { logits[i], i };

			if (before(&x, &c[0])) {
				c[0] = x;
				sift(c, k, 0);
			}
		}
	}
	qsort(c, (size_t)k, sizeof *c, cmp_cand);
	return k;
}

/* Softmax over the sorted candidates at temperature 1, into prob[]; then
 * cut by top-p and min-p.  Returns how many survive (at least 1). */
static int cut(ds_sampler *s, int n, float *prob)
{
	const struct ds_cand *c = s->cand;
	double sum = 0, acc = 0;
	int i, keep = n;

	/* tokens a grammar masked (-inf, last in the order) are out */
	for (i = 1; i < n; i++)
		if (c[i].logit == -INFINITY) {
			n = keep = i;
			break;
		}
	for (i = 0; i < n; i++) {
		prob[i] = expf(c[i].logit - c[0].logit);
		sum += prob[i];
	}
	if (s->p.top_p < 1.0f) {
		for (i = 0; i < n; i++) {
			acc += prob[i] / sum;
			if (acc >= s->p.top_p) {
				keep = i + 1;
				break;
			}
		}
	}
	if (s->p.min_p > 0.0f) {
		/* prob[0] is the largest: exp(0) = 1 before normalization */
		for (i = 1; i < keep; i++)
			if (prob[i] < s->p.min_p) {
				keep = i;
				break;
			}
	}
	return keep;
}

/* The sampling chain up to the draw: the surviving candidates in
 * s->cand[0..n) best first, each .logit replaced by its weight
 * exp((l - l_max) / temp), *sum their sum.  temp > 0. */
static int weights(ds_sampler *s, const float *logits, double *sum)
{
	struct ds_cand *c = s->cand;
	float top;
	int n, i;

	n = select_top(s, logits, s->p.top_k);
	n = cut(s, n, s->prob);
	/* relative to the best logit, read before the loop rewrites it */
	top = c[0].logit;
	*sum = 0;
	for (i = 0; i < n; i++) {
		c[i].logit = expf((c[i].logit - top) / s->p.temp);
		*sum += c[i].logit;
	}
	return n;
}

/* The candidate that u (in [0, sum)) falls on, skipping id `skip`. */
static int32_t draw(const ds_sampler *s, int n, double u, int32_t skip)
{
	const struct ds_cand *c = s->cand;
	double acc = 0;
	int i, last = -1;

	for (i = 0; i < n; i++) {
		if (c[i].id == skip)
			continue;
		acc += c[i].logit;
		last = i;
		if (u < acc)
			return c[i].id;
	}
	return last >= 0 ? c[last].id : c[0].id;
}

int32_t ds_sampler_sample(ds_sampler *s, float *logits)
{
	double sum;
	int n;

	penalize(s, logits);
	if (s->p.temp <= 0.0f)
		return ds_argmax(logits, s->n_vocab);
	n = weights(s, logits, &sum);
	return draw(s, n, ds_sampler_uniform(s) * sum, -1);
}

int ds_sampler_dist(ds_sampler *s, float *logits, ds_tokprob *out)
{
	double sum;
	int n, i;

	penalize(s, logits);
	if (s->p.temp <= 0.0f) {
		out[0] = (ds_tokprob){ .id = ds_argmax(logits, s->n_vocab), .p = 1 };
		return 1;
	}
	n = weights(s, logits, &sum);
	for (i = 0; i < n; i++)
		out[i] = (ds_tokprob){ .id = s->cand[i].id,
				       .p = (float)(s->cand[i].logit / sum) };
	return n;
}

/* The rejection's draw from max(0, p - q) (weights w = p * sum), q given
 * by id in s->qd; from p itself if nothing is left (rounding). */
static int32_t residual(ds_sampler *s, int n, double sum)
{
	struct ds_cand *c = s->cand;
	double r = 0, u;
	int i;

	for (i = 0; i < n; i++) {
		double w = c[i].logit - s->qd[c[i].id] * sum;

		c[i].logit = w > 0 ? (float)w : 0;
		r += c[i].logit;
	}
	u = ds_sampler_uniform(s);
	if (r <= 0)
		return c[0].id;
	return draw(s, n, u * r, -1);
}

int32_t ds_sampler_verify(ds_sampler *s, float *logits, int32_t d,
			  const ds_tokprob *q, int n_q, int *accepted)
{
	double sum, pd = 0, qd = 1, u;
	int32_t t;
	int n, i;

	penalize(s, logits);
	if (s->p.temp <= 0.0f) {
		t = ds_argmax(logits, s->n_vocab);
		*accepted = t == d;
		return t;
	}
	n = weights(s, logits, &sum);
	for (i = 0; i < n; i++)
		if (s->cand[i].id == d)
			pd = s->cand[i].logit / sum;
	for (i = 0; q != NULL && i < n_q; i++)
		if (q[i].id == d)
			qd = q[i].p;
	u = ds_sampler_uniform(s);
	/* accept with probability min(1, p(d) / q(d)) */
	if (pd > 0 && u * qd < pd) {
		*accepted = 1;
		return d;
	}
	*accepted = 0;
	if (q == NULL) {
		/* p without d, renormalized: the residual of a point mass */
		u = ds_sampler_uniform(s);
		return draw(s, n, u * (sum - pd * sum), d);
	}
	for (i = 0; i < n_q; i++)
		s->qd[q[i].id] = q[i].p;
	t = residual(s, n, sum);
	for (i = 0; i < n_q; i++)
		s->qd[q[i].id] = 0;
	return t;
}
