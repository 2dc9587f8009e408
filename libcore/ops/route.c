/*
 * route.c - top-k and the DeepSeek MoE routers.
 */
#include "ops_int.h"

/* ---- top-k and the router ------------------------------------------------------- */

void ds_topk(const float *x, size_t n, size_t k, int32_t *idx, float *val)
{
	size_t i, m = 0, j;

	DS_ASSERT(k <= n);
	if (k == 0)
		return;
	/* insertion into the sorted list idx[0..m); a later equal value
	 * stays behind an earlier one */
	for (i = 0; i < n; i++) {
		if (m == k && !(x[i] > x[idx[k - 1]]))
			continue;
		j = m < k ? m++ : k - 1;
		while (j > 0 && x[i] > x[idx[j - 1]]) {
			idx[j] = idx[j - 1];
			j--;
		}
		idx[j] = (int32_t)i;
	}
	for (j = 0; val && j < k; j++)
		val[j] = x[idx[j]];
}

/* Scores of one token's logits l [ne] into s; the selection values in b. */
static void route_token(const ds_ctx *c, const ds_router *r, float *l,
			float *b, float *gs, int32_t *ids, float *w)
{
	size_t ne = r->n_expert, e, g, ng = r->n_group ? r->n_group : 1, per = ne / ng;
	int32_t gi[64], top2[2];
	float sum = 0, v2[2];
	size_t i;

	if (r->score == DS_ROUTE_SOFTMAX)
		c->kern->softmax(l, ne);
	else
		for (e = 0; e < ne; e++)
			l[e] = 1.0f / (1.0f + expf(-l[e]));
	for (e = 0; e < ne; e++)
		b[e] = r->method == DS_ROUTE_NOAUX_TC && r->bias ? l[e] + r->bias[e] : l[e];
	if (r->method != DS_ROUTE_GREEDY && ng > 1) {
		/* rank the groups; experts outside the kept ones cannot win */
		for (g = 0; g < ng; g++) {
			ds_topk(b + g * per, per, r->method == DS_ROUTE_NOAUX_TC ? 2 : 1, top2, v2);
			gs[g] = r->method == DS_ROUTE_NOAUX_TC ? v2[0] + v2[1] : v2[0];
		}
		ds_topk(gs, ng, r->topk_group, gi, NULL);
		for (g = 0; g < ng; g++)
			gs[g] = 0;
		for (i = 0; i < r->topk_group; i++)
			gs[gi[i]] = 1;
		for (e = 0; e < ne; e++)
			if (gs[e / per] == 0)
				b[e] = -INFINITY;
	}
	ds_topk(b, ne, r->n_used, ids, NULL);
	for (i = 0; i < r->n_used; i++) {
		w[i] = l[ids[i]];
		sum += w[i];
	}
	/* V2 remote code: normalize or scale; V3: normalize, then scale */
	for (i = 0; i < r->n_used; i++) {
		if (r->norm_topk_prob)
			w[i] /= sum + 1e-20f;
		if (r->score == DS_ROUTE_SIGMOID || !r->norm_topk_prob)
			w[i] *= r->routed_scaling_factor;
	}
}

void ds_route(ds_ctx *c, const ds_router *r, float *logits, size_t t,
	      int32_t *ids, float *w)
{
	float *b = ops_thr(c, 0), *gs = b + r->n_expert + 16;
	size_t i;

	DS_ASSERT(r->n_expert <= c->cfg.moe_experts);
	DS_ASSERT(r->n_used <= r->n_expert && r->n_used <= 256);
	DS_ASSERT(r->n_group <= 64 && r->topk_group <= (r->n_group ? r->n_group : 1));
	DS_ASSERT(r->n_group == 0 || r->n_expert % r->n_group == 0);
	for (i = 0; i < t; i++)
		route_token(c, r, logits + i * r->n_expert, b, gs, ids + i * r->n_used,
			    w + i * r->n_used);
}
