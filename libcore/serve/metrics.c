/*
 * metrics.c - what /metrics shows (serve.h), in the Prometheus text
 * exposition format 0.0.4 (prometheus.io/docs/instrumenting/exposition_formats):
 * "# HELP" and "# TYPE" lines, then samples; histograms as cumulative
 * _bucket{le=...} series ending in le="+Inf", with _sum and _count.
 *
 * Every series is fixed in advance (endpoints and statuses from closed
 * sets), so no request can make the page or the memory grow.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve.h"

static const char *const ep_paths[DS_EP_N] = {
	"/v1/completions", "/v1/chat/completions", "/v1/models", "/health",
	"/metrics", "/tokenize", "/detokenize", "/apply-template", "other",
};

/* Statuses counted by value; anything else is "other". */
static const int statuses[] = { 200, 400, 401, 404, 405, 408, 413, 500, 503 };
#define N_STATUS (sizeof statuses / sizeof statuses[0] + 1)

/* Seconds: bucket upper bounds (+Inf implied). */
static const double lat_le[] = { 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30,
				 60, 120, 300 };
static const double ttft_le[] = { 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
				  1, 2.5, 5, 10, 30 };
#define N_LE 12

#define RATE_WINDOW 10      /* seconds over which tokens/s is taken */

typedef struct hist {
	const double *le;
	uint64_t count[N_LE + 1];   /* per bucket, not cumulative; last +Inf */
	double sum;
	uint64_t n;
} hist;

struct ds_metrics {
	pthread_mutex_t mu;
	uint64_t answers[DS_EP_N][N_STATUS];
	uint64_t finished[4];       /* by enum ds_finish */
	uint64_t prompt_tokens, gen_tokens;
	uint64_t cache_hits, cache_tokens; /* requests that took cached rows;
					      the prompt tokens they took */
	hist lat, ttft;
	/* generated tokens in each of the last seconds: ring by second */
	uint64_t sec_tokens[RATE_WINDOW + 1];
	long long sec_of[RATE_WINDOW + 1];
	double t_first;             /* the first token counted; 0: none yet */
};

enum ds_ep ds_ep_of(const char *path)
{
	int i;

	for (i = 0; i < DS_EP_OTHER; i++)
		if (strcmp(path, ep_paths[i]) == 0)
			return (enum ds_ep)i;
	return DS_EP_OTHER;
}

const char *ds_ep_name(enum ds_ep ep)
{
	return ep >= 0 && ep < DS_EP_N ? ep_paths[ep] : "other";
}

int ds_metrics_init(ds_metrics **out, ds_err *err)
{
	ds_metrics *m = ds_calloc(1, sizeof *m, err);

	*out = m;
	if (m == NULL)
		return -1;
	pthread_mutex_init(&m->mu, NULL);
	m->lat.le = lat_le;
	m->ttft.le = ttft_le;
	return 0;
}

void ds_metrics_free(ds_metrics *m)
{
	if (m == NULL)
		return;
	pthread_mutex_destroy(&m->mu);
	free(m);
}

static size_t status_index(int status)
{
	size_t i;

	for (i = 0; i < N_STATUS - 1; i++)
		if (statuses[i] == status)
			return i;
	return N_STATUS - 1;
}

void ds_metrics_answer(ds_metrics *m, enum ds_ep ep, int status)
{
	if (ep < 0 || ep >= DS_EP_N)
		ep = DS_EP_OTHER;
	pthread_mutex_lock(&m->mu);
	m->answers[ep][status_index(status)]++;
	pthread_mutex_unlock(&m->mu);
}

void ds_metrics_tokens(ds_metrics *m, size_t n, double now)
{
	long long sec = (long long)now;
	size_t k = (size_t)(sec % (RATE_WINDOW + 1));

	pthread_mutex_lock(&m->mu);
	if (m->t_first == 0)
		m->t_first = now;
	if (m->sec_of[k] != sec) {
		m->sec_of[k] = sec;
		m->sec_tokens[k] = 0;
	}
	m->sec_tokens[k] += n;
	pthread_mutex_unlock(&m->mu);
}

static void observe(hist *h, double v)
{
	size_t i;

	for (i = 0; i < N_LE && v > h->le[i]; i++)
		;
	h->count[i]++;
	h->sum += v;
	h->n++;
}

void ds_metrics_finish(ds_metrics *m, enum ds_finish why, size_t prompt,
		       size_t cached, size_t gen, double latency, double ttft)
{
	pthread_mutex_lock(&m->mu);
	if ((unsigned)why < 4)
		m->finished[why]++;
	m->prompt_tokens += prompt;
	m->cache_hits += cached > 0;
	m->cache_tokens += cached;
	m->gen_tokens += gen;
	observe(&m->lat, latency < 0 ? 0 : latency);
	if (ttft >= 0)
		observe(&m->ttft, ttft);
	pthread_mutex_unlock(&m->mu);
}

/* ---- rendering ------------------------------------------------------------------- */

typedef struct buf {
	char *s;
	size_t n, cap;
	int failed;
} buf;

static void put(buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(buf *b, const char *fmt, ...)
{
	va_list ap;
	char *p;
	int k;

	for (;;) {
		va_start(ap, fmt);
		k = b->failed ? 0 : vsnprintf(b->s + b->n, b->cap - b->n, fmt, ap);
		va_end(ap);
		if (b->failed || k < 0) {
			b->failed = 1;
			return;
		}
		if ((size_t)k < b->cap - b->n) {
			b->n += (size_t)k;
			return;
		}
		p = realloc(b->s, b->cap * 2 + (size_t)k + 1);
		if (p == NULL) {
			b->failed = 1;
			return;
		}
		b->s = p;
		b->cap = b->cap * 2 + (size_t)k + 1;
	}
}

static void meta(buf *b, const char *name, const char *type, const char *help)
{
	put(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void put_hist(buf *b, const char *name, const char *help, const hist *h)
{
	uint64_t cum = 0;
	size_t i;

	meta(b, name, "histogram", help);
	for (i = 0; i < N_LE; i++) {
		cum += h->count[i];
		put(b, "%s_bucket{le=\"%g\"} %llu\n", name, h->le[i],
		    (unsigned long long)cum);
	}
	cum += h->count[N_LE];
	put(b, "%s_bucket{le=\"+Inf\"} %llu\n", name, (unsigned long long)cum);
	put(b, "%s_sum %.6f\n%s_count %llu\n", name, h->sum, name,
	    (unsigned long long)h->n);
}

static void put_answers(buf *b, const ds_metrics *m)
{
	size_t e, k;

	meta(b, "ds_requests_total", "counter",
	     "HTTP requests answered, by endpoint and status code.");
	for (e = 0; e < DS_EP_N; e++)
		for (k = 0; k < N_STATUS; k++) {
			char st[8];

			if (m->answers[e][k] == 0 && !(k == 0 && e <= DS_EP_CHAT))
				continue;
			if (k < N_STATUS - 1)
				snprintf(st, sizeof st, "%d", statuses[k]);
			else
				snprintf(st, sizeof st, "other");
			put(b, "ds_requests_total{endpoint=\"%s\",status=\"%s\"} %llu\n",
			    ep_paths[e], st, (unsigned long long)m->answers[e][k]);
		}
}

/* Generated tokens per second over the last RATE_WINDOW whole seconds
 * (fewer just after the first token). */
static double rate(const ds_metrics *m, double now)
{
	long long sec = (long long)now, from = sec - RATE_WINDOW;
	double span = now - m->t_first < RATE_WINDOW ? now - m->t_first : RATE_WINDOW;
	uint64_t n = 0;
	size_t k;

	for (k = 0; k <= RATE_WINDOW; k++)
		if (m->sec_of[k] >= from && m->sec_of[k] < sec)
			n += m->sec_tokens[k];
	return span >= 1 ? (double)n / (long long)span : 0;
}

static void put_gauges(buf *b, const ds_metrics_now *g, double tps)
{
	meta(b, "ds_ready", "gauge", "1 when the model is loaded, 0 while it loads.");
	put(b, "ds_ready %d\n", g->ready);
	meta(b, "ds_queue_depth", "gauge", "Requests waiting for a slot.");
	put(b, "ds_queue_depth %zu\n", g->queued);
	meta(b, "ds_queue_limit", "gauge", "Requests that may wait (--queue).");
	put(b, "ds_queue_limit %zu\n", g->queue_limit);
	meta(b, "ds_active_slots", "gauge", "Sequences being generated.");
	put(b, "ds_active_slots %zu\n", g->running);
	meta(b, "ds_slots", "gauge", "Sequences that can be generated together (--parallel).");
	put(b, "ds_slots %zu\n", g->slots);
	meta(b, "ds_generation_tokens_per_second", "gauge",
	     "Tokens generated per second over the last 10 seconds.");
	put(b, "ds_generation_tokens_per_second %.3f\n", tps);
	meta(b, "ds_prompt_cache_bytes", "gauge",
	     "Memory of the prompt cache's blocks.");
	put(b, "ds_prompt_cache_bytes %zu\n", g->cache_bytes);
	meta(b, "ds_prompt_cache_limit_bytes", "gauge",
	     "What the prompt cache may take (--cache-ram).");
	put(b, "ds_prompt_cache_limit_bytes %zu\n", g->cache_limit);
	meta(b, "ds_prompt_cache_blocks", "gauge",
	     "Blocks of positions held in the prompt cache.");
	put(b, "ds_prompt_cache_blocks %zu\n", g->cache_blocks);
}

char *ds_metrics_render(ds_metrics *m, const ds_metrics_now *g, double now)
{
	static const char *const why[4] = { "length", "stop", "cancelled", "error" };
	buf b = { .s = malloc(8192), .cap = 8192 };
	int i;

	if (b.s == NULL)
		return NULL;
	pthread_mutex_lock(&m->mu);
	put_answers(&b, m);
	meta(&b, "ds_generations_total", "counter",
	     "Generations ended, by finish reason.");
	for (i = 0; i < 4; i++)
		put(&b, "ds_generations_total{finish_reason=\"%s\"} %llu\n", why[i],
		    (unsigned long long)m->finished[i]);
	meta(&b, "ds_prompt_tokens_total", "counter", "Prompt tokens read.");
	put(&b, "ds_prompt_tokens_total %llu\n", (unsigned long long)m->prompt_tokens);
	meta(&b, "ds_generated_tokens_total", "counter", "Tokens generated.");
	put(&b, "ds_generated_tokens_total %llu\n", (unsigned long long)m->gen_tokens);
	meta(&b, "ds_prompt_cache_hits_total", "counter",
	     "Generations that started from cached prompt positions.");
	put(&b, "ds_prompt_cache_hits_total %llu\n", (unsigned long long)m->cache_hits);
	meta(&b, "ds_prompt_cache_tokens_total", "counter",
	     "Prompt tokens taken from the prompt cache, not computed.");
	put(&b, "ds_prompt_cache_tokens_total %llu\n",
	    (unsigned long long)m->cache_tokens);
	put_gauges(&b, g, rate(m, now));
	put_hist(&b, "ds_request_duration_seconds",
		 "Generation requests from arrival to their last token.", &m->lat);
	put_hist(&b, "ds_time_to_first_token_seconds",
		 "Generation requests from arrival to their first token.", &m->ttft);
	pthread_mutex_unlock(&m->mu);
	if (b.failed) {
		free(b.s);
		return NULL;
	}
	return b.s;
}
