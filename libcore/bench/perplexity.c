/* perplexity.c - windowed perplexity (perplexity.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "perplexity.h"

/* -log softmax(l)[next], in double. */
static double nll_of(const float *l, uint32_t n_vocab, int32_t next)
{
	double mx = -INFINITY, se = 0;
	uint32_t v;

	for (v = 0; v < n_vocab; v++)
		mx = l[v] > mx ? l[v] : mx;
	for (v = 0; v < n_vocab; v++)
		se += exp(l[v] - mx);
	return -(l[next] - mx - log(se));
}

/* One window: batches of at most max_batch positions, every one read
 * from the text as a prompt's are (so MLA takes the prompt's form). */
static int window(ds_fwd *f, ds_kvcache *kv, const int32_t *win, size_t C,
		  int32_t *pos, int32_t *seq, uint8_t *want, const uint8_t *read,
		  ds_ppl *out, ds_err *err)
{
	ds_fwd_info fi;
	size_t p0, i, first = C / 2;

	ds_fwd_get_info(f, &fi);
	ds_kvcache_seq_keep(kv, 0, 0);
	for (p0 = 0; p0 < C; p0 += fi.max_batch) {
		size_t m = C - p0 < fi.max_batch ? C - p0 : fi.max_batch, k = 0;
		ds_batch b = { .n = m, .token = win + p0, .pos = pos, .seq = seq,
			       .logits = want, .prompt = read };

		for (i = 0; i < m; i++) {
			pos[i] = (int32_t)(p0 + i);
			seq[i] = 0;
			want[i] = p0 + i >= first && p0 + i + 1 < C;
		}
		if (ds_fwd_decode(f, kv, &b, err))
			return -1;
		for (i = 0; i < m; i++) {
			if (!want[i])
				continue;
			out->nll += nll_of(ds_fwd_logits(f, k++), fi.n_vocab, win[p0 + i + 1]);
			out->count++;
		}
	}
	return 0;
}

int ds_perplexity(ds_fwd *f, ds_kvcache *kv, const int32_t *ids, size_t n,
		  size_t n_ctx, ds_ppl *out, ds_err *err)
{
	ds_fwd_info fi;
	int32_t *pos, *seq;
	uint8_t *want, *read;
	size_t w;
	int rc = 0;

	memset(out, 0, sizeof *out);
	if (n < n_ctx)
		return ds_errf(err, "%zu tokens, fewer than one window of %zu", n, n_ctx);
	if (n_ctx > kv->n_ctx || n_ctx < 2)
		return ds_errf(err, "window of %zu tokens: the cache holds %u", n_ctx,
			       kv->n_ctx);
	ds_fwd_get_info(f, &fi);
	pos = calloc(fi.max_batch, sizeof *pos);
	seq = calloc(fi.max_batch, sizeof *seq);
	want = calloc(fi.max_batch, 1);
	read = malloc(fi.max_batch);
	if (!pos || !seq || !want || !read)
		rc = ds_errf(err, "out of memory");
	else
		memset(read, 1, fi.max_batch);
	for (w = 0; rc == 0 && w < n / n_ctx; w++)
		rc = window(f, kv, ids + w * n_ctx, n_ctx, pos, seq, want, read, out, err);
	out->windows = n / n_ctx;
	out->ppl = out->count ? exp(out->nll / (double)out->count) : 0;
	free(pos);
	free(seq);
	free(want);
	free(read);
	return rc;
}
