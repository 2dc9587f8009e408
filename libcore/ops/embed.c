/*
 * embed.c - the embedding gather: token ids to rows of the table.
 */
#include "ops_int.h"

/* ---- embedding ------------------------------------------------------------------------ */

struct embed_job {
	ds_ctx *c;
	const ds_mat *m;
	const int32_t *ids;
	float *y;
	size_t ldy;
};

static void embed_rows(void *arg, size_t r0, size_t r1, int ith)
{
	struct embed_job *j = arg;
	size_t r;

	(void)ith;
	for (r = r0; r < r1; r++)
		j->c->kern->dequant_row(j->m, (uint64_t)j->ids[r], j->y + r * j->ldy);
}

int ds_embed(ds_ctx *c, const ds_mat *table, const int32_t *ids, size_t t,
	     float *y, size_t ldy, ds_err *err)
{
	struct embed_job j = {
		.c = c, .m = table, .ids = ids, .y = y,
		.ldy = ldy ? ldy : table->k
	};
	size_t i;

	for (i = 0; i < t; i++)
		if (ids[i] < 0 || (uint64_t)ids[i] >= table->n)
			return ds_errf(err, "token %zu: id %d outside the vocabulary (0..%llu)",
				       i, ids[i], (unsigned long long)table->n - 1);
	ops_rows(c, t, table->k, embed_rows, &j);
	return 0;
}
