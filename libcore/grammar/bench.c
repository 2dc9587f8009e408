/*
 * bench.c - the per-step cost of the token mask along a document, for
 * ds-bench and scripts/gbench.c.
 *
 * The document is cut into tokens greedily (the longest token that is a
 * prefix of the rest), as a model writing it token by token would; at
 * each step the mask is computed, the document's token must be in it,
 * and the token is accepted.  Two passes on fresh matchers: with the mask
 * cache (what a request costs) and without (the trie walk alone).  Times
 * are the thread's CPU time.
 */
#include <math.h>
#include <time.h>

#include "gint.h"

/* Thread CPU time: the machine may be shared, and a step descheduled
 * half-way would count another program's time. */
static uint64_t cpu_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The longest token at doc[0..len): its id, its length in *n; -1 none. */
static int32_t longest_token(const ds_gvocab *v, const uint8_t *doc,
			     size_t len, uint32_t *n)
{
	uint32_t node = 0, d = 0;
	int32_t best = -1;

	while (d < len) {
		uint32_t c = node + 1, end = v->nodes[node].end;

		while (c < end && v->nodes[c].byte != doc[d])
			c = v->nodes[c].end;
		if (c >= end)
			break;
		node = c;
		d++;
		if (v->nodes[node].tok < v->nodes[node + 1].tok) {
			best = (int32_t)v->toks[v->nodes[node].tok];
			*n = d;
		}
	}
	return best;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static size_t popcount_words(const uint64_t *w, size_t n)
{
	size_t i, c = 0;

	for (i = 0; i < n; i++)
		c += (size_t)__builtin_popcountll(w[i]);
	return c;
}

typedef struct bpass {
	double *us;
	double accept_us;
	size_t allowed;
} bpass;

/* One pass over the tokens ids[0..n); 0, or -1 with err. */
static int bench_pass(const ds_grammar *g, const ds_gvocab *v,
		      const int32_t *ids, size_t n, unsigned cache, uint64_t *bits,
		      bpass *p, ds_err *err)
{
	ds_gmatch *m;
	size_t i, words = ds_gvocab_mask_words(v);
	int rc = -1;

	if (ds_gmatch_new(g, &m, err) != 0)
		return -1;
	ds_gmatch_mask_cache(m, cache);
	for (i = 0; i <= n; i++) {
		int32_t id = i < n ? ids[i] : v->eos;
		uint64_t t0 = cpu_ns(), t1;

		if (ds_gmatch_mask(m, v, bits, err) != 0)
			goto out;
		t1 = cpu_ns();
		p->us[i] = (double)(t1 - t0) / 1e3;
		p->allowed += popcount_words(bits, words);
		if (id < 0)
			break;
		if (!(bits[id / 64] >> (id % 64) & 1)) {
			ds_errf(err, "bench: step %zu: token %d not in the mask", i, id);
			goto out;
		}
		if (ds_gmatch_accept_token(m, v, id, err) != DS_GMATCH_OK) {
			ds_errf(err, "bench: step %zu: token %d rejected", i, id);
			goto out;
		}
		p->accept_us += (double)(cpu_ns() - t1) / 1e3;
	}
	rc = 0;
out:
	ds_gmatch_free(m);
	return rc;
}

static int tokenize(const ds_gvocab *v, const char *doc, size_t len,
		    int32_t *ids, size_t *off, size_t *n, ds_err *err)
{
	size_t o = 0;

	*n = 0;
	while (o < len) {
		uint32_t k = 0;
		int32_t id = longest_token(v, (const uint8_t *)doc + o, len - o, &k);

		if (id < 0)
			return ds_errf(err, "bench: no token for byte %zu of the document", o);
		off[*n] = o;
		ids[(*n)++] = id;
		o += k;
	}
	off[*n] = len;
	return 0;
}

static void summarize(ds_gbench *r, const bpass *on, const bpass *off,
		      size_t steps)
{
	double *s = malloc(steps * sizeof *s), sum = 0, sum2 = 0, mx2 = 0;
	size_t i;

	for (i = 0; i < steps; i++) {
		sum += on->us[i];
		sum2 += off->us[i];
		mx2 = off->us[i] > mx2 ? off->us[i] : mx2;
	}
	r->mean_us = sum / (double)steps;
	r->nocache_mean_us = sum2 / (double)steps;
	r->nocache_max_us = mx2;
	r->accept_mean_us = on->accept_us / (double)(steps > 1 ? steps - 1 : 1);
	r->allowed_mean = (double)on->allowed / (double)steps;
	if (s == NULL)
		return;
	memcpy(s, on->us, steps * sizeof *s);
	qsort(s, steps, sizeof *s, cmp_double);
	r->p50_us = s[steps / 2];
	r->p99_us = s[(size_t)floor(0.99 * (double)(steps - 1))];
	r->max_us = s[steps - 1];
	free(s);
}

int ds_grammar_bench(const ds_grammar *g, const ds_gvocab *v,
		     const char *doc, size_t len, ds_gbench *r,
		     double *step_us, size_t *step_off, ds_err *err)
{
	int32_t *ids = ds_calloc(len + 1, sizeof *ids, err);
	size_t *off = ds_calloc(len + 2, sizeof *off, err), n = 0;
	uint64_t *bits = ds_calloc(ds_gvocab_mask_words(v), sizeof *bits, err);
	bpass on = { .us = ds_calloc(len + 2, sizeof(double), err) };
	bpass nc = { .us = ds_calloc(len + 2, sizeof(double), err) };
	int rc = -1;

	*r = (ds_gbench){ 0 };
	if (!ids || !off || !bits || !on.us || !nc.us)
		goto out;
	if (v->eos < 0) {
		ds_errf(err, "bench: the vocabulary has no eos token");
		goto out;
	}
	if (tokenize(v, doc, len, ids, off, &n, err) != 0 ||
	    bench_pass(g, v, ids, n, 16, bits, &on, err) != 0 ||
	    bench_pass(g, v, ids, n, 0, bits, &nc, err) != 0)
		goto out;
	r->steps = n + 1;
	summarize(r, &on, &nc, n + 1);
	if (step_us)
		memcpy(step_us, on.us, (n + 1) * sizeof *step_us);
	if (step_off)
		memcpy(step_off, off, (n + 1) * sizeof *step_off);
	rc = 0;
out:
	free(ids);
	free(off);
	free(bits);
	free(on.us);
	free(nc.us);
	return rc;
}
