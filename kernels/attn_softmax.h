/*
 * attn_softmax.h - the online softmax steps the SIMD attention kernels
 * share (kernels.h ds_attn_job), included by avx2.c, avx512.c and neon.c
 * after they define, with their own vectors:
 *   row_max(s, n, m)                 the largest of s[0..n-1] and m
 *   exp_sub_sum(s, n, m)             s[i] = e^(s[i] - m), returns the sum
 *   scale_row(o, n, c)               o[i] *= c
 * (the prefetches are GCC's builtin: prefetcht0 on x86, prfm pldl1keep on
 * AArch64).
 *
 * The keys pass in chunks of DS_ATTN_CHUNK with a running maximum mx and
 * sum l per head, so each key and value row is read and converted once
 * for all g heads.  scalar.c's two-pass version is the reference.
 */

/* The cache rows of keys j0 .. j0+n-1 (K, and V where it is not the
 * same rows) requested ahead of use: decode reads them cold (the weights
 * streamed since have evicted them), and asked for two chunks ahead they
 * arrive while the current chunk is computed.  Row by row, as a view's
 * rows need not be contiguous (MLA's V is the head of each K row).  A
 * block of keys (ds_attn_job.ml) was written just before, and is read by
 * many calls: it is in the cache already. */
static void attn_fetch(const ds_attn_job *a, size_t j0, size_t n)
{
	size_t kb = ds_kv_row_bytes(a->k.type, a->k.dim), vb = ds_kv_row_bytes(a->v.type, a->v.dim);
	size_t j, b;

	if (a->ml != NULL)
		return;

	n = j0 < a->n ? (a->n - j0 < n ? a->n - j0 : n) : 0;
	for (j = j0; j < j0 + n; j++) {
		const char *k = (const char *)a->k.data + j * a->k.ld;
		const char *v = (const char *)a->v.data + j * a->v.ld;

		for (b = 0; b < kb; b += 64)
			__builtin_prefetch(k + b, 0, 3);
		__builtin_prefetch(k + kb - 1, 0, 3);
		if (v == k)
			continue;
		for (b = 0; b < vb; b += 64)
			__builtin_prefetch(v + b, 0, 3);
		__builtin_prefetch(v + vb - 1, 0, 3);
	}
}

/* mx, l and the heads' outputs before the first chunk: started, or
 * carried from the previous block of keys (ds_attn_job.ml). */
static void attn_begin(const ds_attn_job *a, float *mx, float *l)
{
	size_t h;

	for (h = 0; h < a->g; h++) {
		if (a->ml != NULL && !a->first) {
			mx[h] = a->ml[h * a->ml_ld];
			l[h] = a->ml[h * a->ml_ld + 1];
			continue;
		}
		mx[h] = -INFINITY;
		l[h] = 0;
		memset(a->o + h * a->o_ld, 0, a->v.dim * sizeof(float));
	}
}

/* The keys of the chunk j0 .. j0+nj-1 that row h sees: all, or for
 * causal rows (ds_attn_job.diag) those before its limit. */
static size_t attn_seen(const ds_attn_job *a, size_t h, size_t j0, size_t nj)
{
	size_t lim = a->diag + h;

	if (!a->diag || lim >= j0 + nj)
		return nj;
	return lim > j0 ? lim - j0 : 0;
}

/* A chunk's nj scores per head (sc, DS_ATTN_CHUNK apart; keys from j0)
 * into weights e^(s - max), the outputs so far and l rescaled to a new
 * maximum.  A causal row's chunk is taken as the row alone has it (its
 * first nv scores) and the weights past them are 0, so the products
 * that follow add exactly nothing for them.  A row's first chunk has key
 * 0, which it sees, so its maximum is finite from then on. */
static void attn_weights(const ds_attn_job *a, float *sc, float *mx, float *l,
			 size_t j0, size_t nj)
{
	size_t h;

	for (h = 0; h < a->g; h++) {
		size_t nv = attn_seen(a, h, j0, nj);
		float *s = sc + h * DS_ATTN_CHUNK, m = row_max(s, nv, mx[h]), sum;

		sum = exp_sub_sum(s, nv, m);
		memset(s + nv, 0, (nj - nv) * sizeof *s);
		if (m != mx[h]) {
			float corr = mx[h] == -INFINITY ? 0.0f : expf(mx[h] - m);

			l[h] *= corr;
			scale_row(a->o + h * a->o_ld, a->v.dim, corr);
			mx[h] = m;
		}
		l[h] += sum;
	}
}

/* After the last chunk: the outputs divided by their sums, or the
 * running maximum and sum kept for the next block (ds_attn_job.ml). */
static void attn_end(const ds_attn_job *a, const float *mx, const float *l)
{
	size_t h;

	for (h = 0; h < a->g; h++) {
		if (a->ml != NULL) {
			a->ml[h * a->ml_ld] = mx[h];
			a->ml[h * a->ml_ld + 1] = l[h];
			continue;
		}
		scale_row(a->o + h * a->o_ld, a->v.dim, 1.0f / l[h]);
	}
}
