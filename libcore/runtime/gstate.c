/*
 * gstate.c - a request's grammar while it is sampled (gstate.h).
 */
#include "gstate.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* stop ids whose logits a mask keeps aside (more are never allowed) */
#define MASK_STOPS 32

int ds_gstate_init(ds_gstate *g, const ds_grammar *gr, const ds_gvocab *v,
		   const char *trigger, size_t n_trigger, ds_err *err)
{
	memset(g, 0, sizeof *g);
	if (gr == NULL)
		return 0;
	if (v == NULL)
		return ds_errf(err, "a grammar without a vocabulary");
	if (ds_gmatch_new(gr, &g->gm, err))
		return -1;
	g->gv = v;
	g->mask = ds_calloc(ds_gvocab_mask_words(v), sizeof *g->mask, err);
	if (g->mask == NULL)
		return -1;
	g->on = n_trigger == 0;
	if (n_trigger) {
		g->trig = ds_calloc(n_trigger, 1, err);
		if (g->trig == NULL)
			return -1;
		memcpy(g->trig, trigger, n_trigger);
		g->n_trig = n_trigger;
	}
	return 0;
}

void ds_gstate_free(ds_gstate *g)
{
	ds_gmatch_free(g->gm);
	free(g->mask);
	free(g->trig);
	free(g->tw);
	memset(g, 0, sizeof *g);
}

static int is_stop(int32_t t, const int32_t *stops, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		if (stops[i] == t)
			return 1;
	return 0;
}

int ds_gstate_mask(ds_gstate *g, float *logits, uint32_t n_vocab,
		   const int32_t *stops, size_t n_stop)
{
	size_t nv, i, w, words;
	double t0;
	float keep[MASK_STOPS];
	int complete, any = 0;

	if (g->gm == NULL || !g->on)
		return 0;
	t0 = ds_now_s();
	nv = ds_gvocab_size(g->gv);
	words = ds_gvocab_mask_words(g->gv);
	if (ds_gmatch_mask(g->gm, g->gv, g->mask, NULL))
		return -1;
	complete = ds_gmatch_complete(g->gm);
	for (w = 0; w < words; w++)
		any |= g->mask[w] != 0;
	for (i = 0; i < n_stop && i < MASK_STOPS; i++)
		any |= complete && (uint32_t)stops[i] < n_vocab;
	if (!any)
		return -1;
	for (i = 0; i < n_stop && i < MASK_STOPS; i++)
		keep[i] = (uint32_t)stops[i] < n_vocab ? logits[stops[i]] : 0;
	for (w = 0; w < words; w++) {
		uint64_t m = g->mask[w];

		if (m == ~(uint64_t)0)
			continue;
		for (i = w * 64; i < w * 64 + 64 && i < nv && i < n_vocab; i++)
			if (!(m >> (i & 63) & 1))
				logits[i] = -INFINITY;
	}
	for (i = nv; i < n_vocab; i++)
		logits[i] = -INFINITY;
	for (i = 0; complete && i < n_stop && i < MASK_STOPS; i++)
		if ((uint32_t)stops[i] < n_vocab)
			logits[stops[i]] = keep[i];
	g->steps++;
	g->secs += ds_now_s() - t0;
	return 0;
}

/* Free text before the trigger: t's bytes join the window; at the
 * trigger the grammar starts, fed what came from its first byte on (a
 * token that runs on past it into text the grammar refuses leaves the
 * output free). */
static int watch(ds_gstate *g, int32_t t)
{
	uint32_t len;
	const uint8_t *b = ds_gvocab_token(g->gv, t, &len);
	size_t i, keep;

	if (b == NULL || len == 0)
		return 0;
	if (ds_grow((void **)&g->tw, &g->cap_tw, g->n_tw + len, 1))
		return -1;
	memcpy(g->tw + g->n_tw, b, len);
	g->n_tw += len;
	for (i = 0; i + g->n_trig <= g->n_tw; i++)
		if (memcmp(g->tw + i, g->trig, g->n_trig) == 0) {
			g->on = ds_gmatch_accept_bytes(g->gm, g->tw + i, g->n_tw - i,
						       NULL) == DS_GMATCH_OK;
			g->n_trig = g->on ? g->n_trig : 0;
			return 0;
		}
	keep = g->n_tw < g->n_trig ? g->n_tw : g->n_trig - 1;
	memmove(g->tw, g->tw + g->n_tw - keep, keep);
	g->n_tw = keep;
	return 0;
}

int ds_gstate_take(ds_gstate *g, int32_t t)
{
	if (g->gm == NULL)
		return 0;
	if (!g->on)
		return g->n_trig ? watch(g, t) : 0;
	return ds_gmatch_accept_token(g->gm, g->gv, t, NULL) == DS_GMATCH_OK ? 0 : -1;
}

int ds_gstate_done(const ds_gstate *g)
{
	return g->gm != NULL && g->on && !ds_gmatch_can_continue(g->gm);
}

uint32_t ds_gstate_drafts(ds_gstate *g, const int32_t *d, uint32_t n,
			  const int32_t *stops, size_t n_stop)
{
	size_t ok = 0;
	uint32_t j;

	if (g->gm == NULL || !g->on)
		return n;
	for (j = 0; j < n; j++) {
		if (is_stop(d[j], stops, n_stop)) {
			j += ds_gmatch_complete(g->gm);
			break;
		}
		if (ds_gmatch_accept_token(g->gm, g->gv, d[j], NULL) != DS_GMATCH_OK)
			break;
		ok++;
	}
	/* K is far below the history the matcher keeps */
	return ds_gmatch_rollback(g->gm, ok) ? 0 : j;
}
