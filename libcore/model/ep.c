/*
 * ep.c - a MoE layer's routed experts under expert parallelism
 * (forward.h ds_fwd_ep): this part's experts computed, every part's rows
 * exchanged, all of them added in the single process's order.
 *
 * ds_moe adds a token's experts into its row one after the other in
 * ascending expert id, after the shared experts' output, with the
 * kernels' axpy; here each output row arrives unweighted and is added
 * the same way, so every part ends with the same y as one process.
 */
#include "arch.h"

#include <string.h>

/* Experts per token the adding step sorts on its stack (the released
 * models use 6 and 8). */
#define EP_MAX_USED 64

void ds_ep_range(uint32_t n_expert, uint32_t n_part, uint32_t part,
		 uint32_t *first, uint32_t *end)
{
	uint32_t q = n_expert / n_part, r = n_expert % n_part;

	*first = part * q + (part < r ? part : r);
	*end = *first + q + (part < r);
}

int ds_ep_init(ds_fwd *f, ds_err *err)
{
	const ds_fwd_ep *ep = f->ep;
	uint32_t n_expert = f->hp->n_expert, p, e;

	if (n_expert == 0)
		return ds_errf(err, "expert parallelism: the model has no routed "
			       "experts to split");
	if (f->hp->n_expert_used > EP_MAX_USED)
		return ds_errf(err, "expert parallelism: %u experts per token; at "
			       "most %d", f->hp->n_expert_used, EP_MAX_USED);
	if (ep->n_part == 0 || ep->part >= ep->n_part || ep->first[0] != 0 ||
	    ep->first[ep->n_part] != n_expert)
		return ds_errf(err, "expert parallelism: part %u of %u, experts "
			       "0 .. %u split as %u .. %u", ep->part, ep->n_part,
			       n_expert - 1, ep->first[0], ep->first[ep->n_part]);
	for (p = 0; p < ep->n_part; p++) {
		if (ep->first[p] > ep->first[p + 1])
			return ds_errf(err, "expert parallelism: part %u's experts "
				       "start at %u, after part %u's end %u", p,
				       ep->first[p], p + 1, ep->first[p + 1]);
		for (e = ep->first[p]; e < ep->first[p + 1]; e++)
			f->ep_part[e] = p;
	}
	return 0;
}

/* Each assignment's row: part by part, in batch order within a part. */
static void ep_rows(ds_fwd *f, size_t n)
{
	const ds_fwd_ep *ep = f->ep;
	size_t i;
	uint32_t p;

	memset(f->ep_cnt, 0, ep->n_part * sizeof *f->ep_cnt);
	for (i = 0; i < n; i++)
		f->ep_cnt[f->ep_part[f->eids[i]]]++;
	for (p = 0; p < ep->n_part; p++) {
		f->ep_off[p] = p ? f->ep_off[p - 1] + f->ep_cnt[p - 1] : 0;
		f->ep_fill[p] = f->ep_off[p];
	}
	for (i = 0; i < n; i++)
		f->ep_row[i] = f->ep_fill[f->ep_part[f->eids[i]]]++;
}

typedef struct add_job {
	ds_fwd *f;
	size_t T;
} add_job;

/* y[t] += w * row for token t's assignments in ascending expert id. */
static void add_fn(void *arg, int ith, int nth)
{
	const add_job *j = arg;
	ds_fwd *f = j->f;
	size_t k = f->hp->n_expert_used, H = f->hp->n_embd, b, e, t, a, c;

	ds_split(j->T, ith, nth, &b, &e);
	for (t = b; t < e; t++) {
		const int32_t *id = f->eids + t * k;
		size_t ord[EP_MAX_USED];

		/* insertion sort of the token's k slots by expert id */
		for (a = 0; a < k; a++) {
			for (c = a; c > 0 && id[ord[c - 1]] > id[a]; c--)
				ord[c] = ord[c - 1];
			ord[c] = a;
		}
		for (a = 0; a < k; a++)
			f->kern->axpy(f->ew[t * k + ord[a]],
				      f->ep_rows + (size_t)f->ep_row[t * k + ord[a]] * H, H,
				      f->y + t * H);
	}
}

void ds_ep_moe(ds_fwd *f, const ds_layer *L, size_t T)
{
	const ds_fwd_ep *ep = f->ep;
	size_t k = f->hp->n_expert_used, H = f->hp->n_embd;
	add_job j = { .f = f, .T = T };

	ep_rows(f, T * k);
	ds_moe_part(&f->ctx, &L->gate_exps, &L->up_exps, &L->down_exps, f->h, 0,
		    T, f->eids, k, ep->first[ep->part], ep->first[ep->part + 1],
		    f->ep_row, f->ep_rows, H);
	ep->exchange(ep->arg, f->ep_rows, H, f->ep_cnt, f->ep_off);
	ds_pool_run(f->pool, add_fn, &j);
}
