/*
 * test_kernels.c - every kernel of every ISA this CPU has, against
 * kernels/scalar.c, and scalar.c against double-precision references.
 *
 * Error budgets.  U is the fp32 unit roundoff 2^-24.  A float path may
 * differ from the exact value by at most (chain length) * U * M, M the sum
 * of the magnitudes of the terms (Higham's gamma_n bound for a sum of n
 * rounded operations); scalar.c sums in double, so the difference between
 * an ISA and scalar.c is bounded by the ISA's own chain:
 *   q4, q8  per 32-block one conversion + one FMA, per group two ops
 *   bf16    one rounding per product pair (vdpbf16ps) or product (FMA);
 *           AArch64's bfdot two per pair, each to odd (an ulp, not half):
 *           twice the roundings' bound, ERR_BF16_RTO
 *   f32/f16 one rounding per product
 * Integer arithmetic is exact: with data whose every float operation is
 * exact (integers times powers of two, sums below 2^24) all ISAs and the
 * double reference agree bit for bit.
 *
 * Activation quantization (the difference between scalar.c and a double
 * dequantize-then-multiply reference): q4/q8 round x to int8 blocks of 32,
 * |x - d q| <= d/2 with d = max|x|/127; bf16 rounds x to bf16, relative
 * error <= 2^-8.
 */
#include <math.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>

#include "harness.h"
#include "kernels/kernels.h"
#include "kernels/types.h"
#include "base/util.h"

#define U 0x1p-24
#define ERR_Q(k, g) (2.0 * ((double)(k) / 32 + (double)(k) / (g)) + 8)
#define ERR_BF16(kp) ((double)(kp) + 8)
#define ERR_BF16_RTO(kp) (2.0 * (double)(kp) + 8)
#define ERR_F(k) ((double)(k) + 8)
#define ERR_ACT_BF16 0x1p-8      /* relative, per element (8-bit significand) */
#define ERR_ELEM 8e-7            /* element-wise kernels with exp: relative */

static uint64_t seed;

static const ds_kernels *isa_tab[DS_ISA_COUNT];
static int n_isa;

/* ---- test weights --------------------------------------------------------- */

typedef struct tw {
	ds_ttype t;
	size_t n, k, ng;
	uint8_t *buf;   /* packed */
	float *w;       /* [n][k] dequantized with ds_dequant_row */
	int *u;         /* q4/q8: [n][k] stored unsigned integer */
	int *z;         /* q4/q8: [n][ng] zero point (128 for q8) */
	float *s;       /* q4/q8: [n][ng] scale */
	ds_mat m;
} tw;

static float pow2(int e)
{
	return ldexpf(1.0f, e);
}

/* exact: small integers times powers of two (see the top of the file);
 * 2: the largest weights (q4 15 with zero point 0, q8 127) */
static void tw_init(tw *w, ds_ttype t, size_t n, size_t k, int exact)
{
	uint64_t shape[2] = { n, k }, bytes, i;
	size_t r;

	memset(w, 0, sizeof *w);
	w->t = t;
	w->n = n;
	w->k = k;
	T_CHECK(ds_tensor_bytes(t, 2, shape, &bytes) == 0);
	w->buf = malloc(bytes);
	w->w = malloc(n * k * sizeof(float));
	if (t.dt == DS_Q4 || t.dt == DS_Q8) {
		size_t ng = (k + t.group - 1) / t.group;
		uint16_t *s16 = malloc(n * ng * 2);
		uint8_t *q4 = malloc(n * k), *z8 = malloc(n * ng);
		int8_t *q8 = malloc(n * k);

		w->ng = ng;
		w->u = malloc(n * k * sizeof(int));
		w->z = malloc(n * ng * sizeof(int));
		w->s = malloc(n * ng * sizeof(float));
		for (i = 0; i < n * ng; i++) {
			float sc = exact ? pow2(-(int)(t_rand(&seed) % 2))
					 : (0.01f + 0.1f * fabsf(t_randf(&seed)));

			s16[i] = ds_f32_to_f16(sc);
			w->s[i] = ds_f16_to_f32(s16[i]);
			z8[i] = exact == 2 ? 0 : (uint8_t)(t_rand(&seed) % 16);
			w->z[i] = t.dt == DS_Q4 ? z8[i] : 128;
		}
		for (i = 0; i < n * k; i++) {
			q4[i] = exact == 2 ? 15 : (uint8_t)(t_rand(&seed) % 16);
			q8[i] = exact == 2 ? 127 : (int8_t)((int)(t_rand(&seed) % 255) - 127);
			w->u[i] = t.dt == DS_Q4 ? q4[i] : q8[i] + 128;
		}
		if (t.dt == DS_Q4)
			ds_pack_q4(w->buf, q4, s16, z8, n, k, t.group);
		else
			ds_pack_q8(w->buf, q8, s16, n, k, t.group);
		free(s16); free(q4); free(z8); free(q8);
	} else {
		uint16_t *h = malloc(n * k * 2);
		float *f = malloc(n * k * 4);

		for (i = 0; i < n * k; i++) {
			f[i] = exact ? (float)((int)(t_rand(&seed) % 255) - 127)
				     : t_randf(&seed);
			h[i] = t.dt == DS_F16 ? ds_f32_to_f16(f[i]) : ds_f32_to_bf16(f[i]);
		}
		if (t.dt == DS_BF16)
			ds_pack_bf16(w->buf, h, n, k);
		else if (t.dt == DS_F16)
			memcpy(w->buf, h, n * k * 2);
		else
			memcpy(w->buf, f, n * k * 4);
		free(h); free(f);
	}
	for (r = 0; r < n; r++)
		ds_dequant_row(t, w->buf, k, r, w->w + r * k);
	w->m = ds_mat_make(t, w->buf, n, k, NULL);
}

static void tw_free(tw *w)
{
	free(w->buf); free(w->w); free(w->u); free(w->z); free(w->s);
}

/* ---- test activations ------------------------------------------------------ */

typedef struct tx {
	size_t t, k, kp, ldq;
	float *x;       /* [t][k] */
	int8_t *q;
	float *d, *s;
	uint16_t *b;
	ds_act a;
} tx;

static void tx_init(tx *x, size_t t, size_t k, size_t kp, int exact)
{
	size_t i, j;

	memset(x, 0, sizeof *x);
	x->t = t;
	x->k = k;
	x->kp = kp;
	x->ldq = (kp + 63) / 64 * 64;
	x->x = malloc(t * k * sizeof(float));
	x->q = malloc(t * x->ldq);
	x->b = malloc(t * x->ldq * 2);
	x->d = malloc(t * x->ldq / 32 * sizeof(float));
	x->s = malloc(t * x->ldq / 32 * sizeof(float));
	for (i = 0; i < t; i++)
		for (j = 0; j < k; j++) {
			float *p = &x->x[i * k + j];

			if (!exact)
				*p = t_randf(&seed) * (1 + (float)(j % 5));
			else if (exact == 2)
				*p = i % 2 ? -127 : 127;
			else if (j % 32 == 0)
				*p = t_rand(&seed) & 1 ? 127 : -127;
			else
				*p = (float)((int)(t_rand(&seed) % 255) - 127);
		}
}

/* The prepared forms, made with table kt. */
static void tx_prep(tx *x, const ds_kernels *kt)
{
	size_t i, nb = x->ldq / 32;

	memset(x->q, 0x55, x->t * x->ldq);
	for (i = 0; i < x->t; i++) {
		kt->quant_row(x->x + i * x->k, x->k, x->kp, NULL, NULL, 1.0f,
			      x->q + i * x->ldq, x->d + i * nb, x->s + i * nb);
		kt->bf16_row(x->x + i * x->k, x->k, x->kp, NULL, NULL, 1.0f,
			     x->b + i * x->ldq);
	}
	x->a.t = x->t;
	x->a.f = x->x;
	x->a.ldf = x->k;
	x->a.b = x->b;
	x->a.q = x->q;
	x->a.qd = x->d;
	x->a.qs = x->s;
	x->a.ldq = x->ldq;
}

static void tx_free(tx *x)
{
	free(x->x); free(x->q); free(x->b); free(x->d); free(x->s);
}

/* ---- magnitudes and references -------------------------------------------- */

/* Sum of the magnitudes of every term the kernel adds for y[t][r]. */
static double mag(const tw *w, const tx *x, size_t t, size_t r)
{
	size_t i, nb = x->ldq / 32;
	double m = 0;

	if (w->t.dt == DS_Q4 || w->t.dt == DS_Q8) {
		size_t g, b, G = w->t.group;

		for (g = 0; g < w->ng; g++) {
			double a = 0;

			for (b = g * G / 32; b < (g + 1) * G / 32; b++) {
				long dot = 0;

				for (i = 32 * b; i < 32 * b + 32 && i < w->k; i++)
					dot += (long)w->u[r * w->k + i] * x->q[t * x->ldq + i];
				a += fabs((double)dot * x->d[t * nb + b]) +
				     fabs((double)w->z[r * w->ng + g] * x->s[t * nb + b]);
			}
			m += fabs(w->s[r * w->ng + g]) * a;
		}
		return m;
	}
	for (i = 0; i < w->k; i++) {
		double xv = w->t.dt == DS_BF16 ? ds_bf16_to_f32(x->b[t * x->ldq + i])
					       : x->x[t * x->k + i];

		m += fabs(w->w[r * w->k + i] * xv);
	}
	return m;
}

/* The chain length of table kt's products of w's type. */
static double chain(const tw *w, const ds_kernels *kt)
{
	switch (w->t.dt) {
	case DS_Q4:
	case DS_Q8: return ERR_Q(ds_kpad(w->t, w->k), w->t.group);
	case DS_BF16:
		return kt->isa == DS_ISA_I8MM ? ERR_BF16_RTO(ds_kpad(w->t, w->k))
					      : ERR_BF16(ds_kpad(w->t, w->k));
	default: return ERR_F(w->k);
	}
}

/* Bound on |scalar.c - sum_k w x| from rounding the activations. */
static double act_bound(const tw *w, const tx *x, size_t t, size_t r)
{
	size_t i, nb = x->ldq / 32;
	double e = 4 * U * mag(w, x, t, r);

	for (i = 0; i < w->k; i++) {
		double wv = fabs(w->w[r * w->k + i]), xv = fabs(x->x[t * x->k + i]);

		if (w->t.dt == DS_Q4 || w->t.dt == DS_Q8)
			e += wv * (0.5 * x->d[t * nb + i / 32] + 4 * U * xv);
		else if (w->t.dt == DS_BF16)
			e += wv * xv * ERR_ACT_BF16;
		else
			e += 2 * U * wv * xv;
	}
	return e;
}

static double ref_dot(const tw *w, const tx *x, size_t t, size_t r)
{
	double s = 0;
	size_t i;

	for (i = 0; i < w->k; i++)
		s += (double)w->w[r * w->k + i] * x->x[t * x->k + i];
	return s;
}

/* ---- matrix products ------------------------------------------------------- */

static const ds_ttype mm_types[] = {
	{ DS_Q4, 32 }, { DS_Q4, 64 }, { DS_Q4, 128 }, { DS_Q8, 32 },
	{ DS_Q8, 64 }, { DS_Q8, 128 }, { DS_BF16, 0 }, { DS_F16, 0 },
	{ DS_F32, 0 },
};
#define N_MM_TYPES (sizeof mm_types / sizeof mm_types[0])

/* y = x W^T with table kt into y [t][ldy]; checks that nothing past row n
 * of any output row was written.  Returns y (caller frees). */
static float *run_mm(const ds_kernels *kt, const tw *w, const tx *x,
		     size_t ldy)
{
	size_t sets = (w->n + 15) / 16, i, j;
	float *y = malloc(x->t * ldy * sizeof(float));
	int spill = 0;

	for (i = 0; i < x->t * ldy; i++)
		y[i] = NAN;
	/* two calls over the row-set range, as threads would split it */
	kt->mm[w->t.dt](&w->m, &x->a, y, ldy, 0, sets / 2);
	kt->mm[w->t.dt](&w->m, &x->a, y, ldy, sets / 2, sets);
	for (i = 0; i < x->t; i++)
		for (j = w->n; j < ldy; j++)
			spill += !isnan(y[i * ldy + j]);
	T_CHECKF(spill == 0, "%s: %d values written past row n", kt->name, spill);
	return y;
}

/* A table that reads ds_act.qt gives, with it, what it gave without (a
 * qt of more rows than the activation's, and the rows from 5 of it). */
static void check_mm_qt(const ds_kernels *kt, const tw *w, const tx *x, const float *y,
			size_t ldy)
{
	const size_t nb = x->ldq / 32, ld = x->t + 3, n = ds_act_qt_floats(ld, x->ldq);
	float *qt = malloc(n * sizeof(float)), *yq;
	tx xq = *x;
	size_t i;

	for (i = 0; i < n; i++)
		qt[i] = NAN;
	for (i = 0; i < x->t; i++)
		ds_act_qt_row(qt, ld, x->ldq, i, x->d + i * nb, x->s + i * nb);
	xq.a.qt = qt;
	xq.a.ldqt = ld;
	yq = run_mm(kt, w, &xq, ldy);
	T_CHECKF(memcmp(yq, y, x->t * ldy * sizeof(float)) == 0,
		 "%s n=%zu k=%zu t=%zu: with ds_act.qt not as without", kt->name, w->n, x->k,
		 x->t);
	xq.a = ds_act_rows(&xq.a, 5, x->t - 5);
	kt->mm[w->t.dt](&w->m, &xq.a, yq, ldy, 0, (w->n + 15) / 16);
	T_CHECKF(memcmp(yq, y + 5 * ldy, (x->t - 5) * ldy * sizeof(float)) == 0,
		 "%s n=%zu k=%zu t=%zu: rows from 5 with ds_act.qt not as without", kt->name,
		 w->n, x->k, x->t);
	free(yq);
	free(qt);
}

/* One shape: every ISA against scalar (same prepared activations), and
 * scalar against the double reference. */
static void check_mm(ds_ttype t, size_t n, size_t k, size_t nt, int exact,
		     double *worst)
{
	const ds_kernels *ks = isa_tab[0];
	size_t ldy = n + 3, i, r;
	char nm[16];
	float *ys;
	tw w;
	tx x;
	int e;

	tw_init(&w, t, n, k, exact);
	tx_init(&x, nt, k, ds_ttype_interleaved(t) ? ds_kpad(t, k) : k, exact);
	tx_prep(&x, ks);
	ys = run_mm(ks, &w, &x, ldy);
	ds_ttype_name(t, nm);
	for (e = 0; e < n_isa; e++) {
		float *y = run_mm(isa_tab[e], &w, &x, ldy), *y1 = malloc(ldy * sizeof(float));
		int bad = 0, vary = 0;

		/* batch invariance: a row's result does not depend on the rows
		 * computed with it */
		for (i = 0; i < nt; i++) {
			ds_act one = ds_act_rows(&x.a, i, 1);

			isa_tab[e]->mm[t.dt](&w.m, &one, y1, ldy, 0, (n + 15) / 16);
			vary += memcmp(y1, y + i * ldy, n * sizeof(float)) != 0;
		}
		T_CHECKF(vary == 0, "%s %s n=%zu k=%zu t=%zu: %d rows depend on the batch",
			 isa_tab[e]->name, nm, n, k, nt, vary);
		free(y1);
		if (isa_tab[e]->act_qt && nt >= 16)
			check_mm_qt(isa_tab[e], &w, &x, y, ldy);
		if (e == 0) {
			free(y);
			continue;
		}

		for (i = 0; i < nt; i++)
			for (r = 0; r < n; r++) {
				double a = y[i * ldy + r], b = ys[i * ldy + r];
				double tol = exact ? 0 : chain(&w, isa_tab[e]) * U * mag(&w, &x, i, r);
				double d = fabs(a - b);

				if (!(d <= tol)) {
					if (bad++ < 3)
						printf("#   %s %s n=%zu k=%zu t=%zu: y[%zu][%zu] %.9g vs scalar %.9g (tol %.3g)\n",
						       isa_tab[e]->name, nm, n, k, nt, i, r, a, b, tol);
				} else if (tol > 0 && d / tol > worst[0]) {
					worst[0] = d / tol;
				}
			}
		T_CHECK(bad == 0);
		free(y);
	}
	/* scalar.c against sum_k w x in double */
	{
		int bad = 0;

		for (i = 0; i < nt; i++)
			for (r = 0; r < n; r++) {
				double ref = ref_dot(&w, &x, i, r);
				double tol = exact ? 0 : act_bound(&w, &x, i, r);
				double d = fabs(ys[i * ldy + r] - ref);

				if (!(d <= tol)) {
					if (bad++ < 3)
						printf("#   scalar %s n=%zu k=%zu: y[%zu][%zu] %.9g vs ref %.9g (tol %.3g)\n",
						       nm, n, k, i, r, ys[i * ldy + r], ref, tol);
				} else if (tol > 0 && d / tol > worst[1]) {
					worst[1] = d / tol;
				}
			}
		T_CHECK(bad == 0);
	}
	free(ys);
	tw_free(&w);
	tx_free(&x);
}

/* Shapes that are and are not multiples of the row-set, the vector width
 * and the group; 1..8 activation rows, and on shapes of several row-sets
 * (their streams and the row-sets left over) 13, 16 and 17: AVX-512 takes
 * up to 16 rows in its decode loop, 4 at a time and a last 1 to 4, and
 * more in tiles. */
static void test_mm_random(void)
{
	static const size_t ns[] = { 1, 15, 16, 17, 40 };
	static const size_t ks[] = { 32, 100, 128, 200, 384 };
	static const size_t many[] = { 13, 16, 17 };
	double worst[2] = { 0, 0 };
	size_t ti, ni, ki, nt, i;

	for (ti = 0; ti < N_MM_TYPES; ti++)
		for (ni = 0; ni < 5; ni++)
			for (ki = 0; ki < 5; ki++) {
				for (nt = 1; nt <= 8; nt += (ni + ki) % 3 + 1)
					check_mm(mm_types[ti], ns[ni], ks[ki], nt, 0, worst);
				for (i = 0; ns[ni] > DS_ROWSET && i < 3; i++)
					check_mm(mm_types[ti], ns[ni], ks[ki], many[i], 0, worst);
			}
	printf("# worst |isa - scalar| / budget %.3g, |scalar - ref| / bound %.3g\n",
	       worst[0], worst[1]);
}

/* 512 activation rows and a wide matrix (decode-size k) */
static void test_mm_large(void)
{
	double worst[2] = { 0, 0 };
	size_t ti;

	for (ti = 0; ti < N_MM_TYPES; ti++) {
		check_mm(mm_types[ti], 33, 256, 512, 0, worst);
		check_mm(mm_types[ti], 64, 4096, 1, 0, worst);
		/* one row over 13 row-sets, split 6 + 7: the decode kernels'
		 * streams over an even and an odd range (its last row-set
		 * alone), k not a multiple of G */
		check_mm(mm_types[ti], 200, 1000, 1, 0, worst);
		check_mm(mm_types[ti], 20, 1000, 7, 0, worst);
	}
	printf("# worst |isa - scalar| / budget %.3g, |scalar - ref| / bound %.3g\n",
	       worst[0], worst[1]);
}

/* Tiles of 16 activation rows and the rows past them (AMX takes the tiles
 * and a last tile of 8 rows or more, AVX-512 fewer; check_mm holds each
 * row to its product alone, bit for bit): groups of one block to eight (a
 * group over two of AMX's rounds of four blocks; of three, its rounds not
 * aligned to the ring of split q4 blocks), k of 3 blocks, k not a
 * multiple of G, a partial row-set; 26 rows (a last tile of 10) over 19
 * row-sets (the tiles configured for 10 rows, then for 16 again in the
 * next block of row-sets), and over 19 row-sets of k = 2144 (AMX splits
 * q4 weights for 15 row-sets at a time, then 4). */
static void test_mm_tiles(void)
{
	static const ds_ttype types[] = {
		{ DS_Q4, 32 }, { DS_Q4, 64 }, { DS_Q4, 96 }, { DS_Q4, 128 }, { DS_Q4, 256 },
		{ DS_Q8, 32 }, { DS_Q8, 128 }, { DS_Q8, 256 },
	};
	static const size_t ks[] = { 96, 1000, 2048 + 96 }, nts[] = { 16, 17, 26, 37 };
	double worst[2] = { 0, 0 };
	size_t ti, ki, ni;

	for (ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
		for (ki = 0; ki < 3; ki++)
			for (ni = 0; ni < 4; ni++)
				check_mm(types[ti], 40, ks[ki], nts[ni], 0, worst);
		check_mm(types[ti], 300, 1000, 26, 0, worst);
		check_mm(types[ti], 300, 2048 + 96, 37, 0, worst);
	}
	printf("# worst |isa - scalar| / budget %.3g, |scalar - ref| / bound %.3g\n",
	       worst[0], worst[1]);
}

/* The activation rows of x copied to the end of a mapping whose next
 * page is PROT_NONE, so that a kernel reading past the last row faults
 * (AMX's last tile of fewer than 16 rows loads only its rows); every ISA
 * gives there what it gives from x itself. */
static void check_mm_guard(ds_ttype t, size_t nt)
{
	const size_t pg = 4096, k = 1000, n = 40, ldy = n;
	size_t bytes, len, e;
	uint8_t *m;
	tw w;
	tx x, g;

	tw_init(&w, t, n, k, 0);
	tx_init(&x, nt, k, ds_kpad(t, k), 0);
	tx_prep(&x, isa_tab[0]);
	bytes = nt * x.ldq;
	len = (bytes + pg - 1) / pg * pg + pg;
	m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	T_CHECK(m != MAP_FAILED);
	if (m == MAP_FAILED)
		return;
	T_CHECK(mprotect(m + len - pg, pg, PROT_NONE) == 0);
	g = x;
	g.a.q = (int8_t *)(m + len - pg - bytes);
	memcpy((void *)g.a.q, x.q, bytes);
	for (e = 0; e < (size_t)n_isa; e++) {
		float *y = run_mm(isa_tab[e], &w, &x, ldy), *yg = run_mm(isa_tab[e], &w, &g, ldy);

		T_CHECKF(memcmp(y, yg, nt * ldy * sizeof(float)) == 0, "%s: %zu rows at a guard page",
			 isa_tab[e]->name, nt);
		free(y);
		free(yg);
	}
	munmap(m, len);
	tx_free(&x);
	tw_free(&w);
}

static void test_mm_guard(void)
{
	static const ds_ttype types[] = { { DS_Q4, 32 }, { DS_Q4, 128 }, { DS_Q8, 32 } };
	static const size_t nts[] = { 10, 26, 32, 3 };
	size_t ti, ni;

	for (ti = 0; ti < sizeof types / sizeof types[0]; ti++)
		for (ni = 0; ni < sizeof nts / sizeof nts[0]; ni++)
			check_mm_guard(types[ti], nts[ni]);
}

/* Integer-valued data: every ISA equals the exact result. */
static void test_mm_exact(void)
{
	double worst[2] = { 0, 0 };
	size_t ti;

	for (ti = 0; ti < N_MM_TYPES; ti++) {
		size_t k = mm_types[ti].dt == DS_Q4 ? 1024 : 256;

		check_mm(mm_types[ti], 35, k, 3, 1, worst);
		check_mm(mm_types[ti], 16, k - 32 + 5, 1, 1, worst);
		check_mm(mm_types[ti], 200, k - 32 + 5, 1, 1, worst);
		check_mm(mm_types[ti], 7, 64, 9, 1, worst);
		check_mm(mm_types[ti], 35, k, 21, 1, worst);
		/* every product at its largest, rows of +127 and -127: no
		 * 16-bit partial sum of a kernel may saturate */
		check_mm(mm_types[ti], 40, 512, 2, 2, worst);
		check_mm(mm_types[ti], 40, 512, 1, 2, worst);
	}
}

/* ---- activation preparation --------------------------------------------- */

/* ds_act.qt: row r's d and -128 s at [j][b][r] (rows ld apart); a
 * row range starts at its row; sizes that overflow are 0. */
static void test_act_qt(void)
{
	const size_t t = 37, ld = 40, ldq = 128, nb = ldq / 32, n = ds_act_qt_floats(ld, ldq);
	float *d = malloc(t * nb * sizeof(float)), *s = malloc(t * nb * sizeof(float));
	float *qt = malloc(n * sizeof(float));
	size_t r, b, bad = 0;
	ds_act a;

	T_CHECK(n == 2 * nb * ld);
	T_CHECK(ds_act_qt_floats(SIZE_MAX, ldq) == 0);
	T_CHECK(ds_act_qt_floats(SIZE_MAX / 8 / nb + 1, ldq) == 0);
	T_CHECK(ds_act_qt_floats(SIZE_MAX / 8 / nb, ldq) == SIZE_MAX / 8 / nb * 2 * nb);
	T_CHECK(ds_act_qt_floats(16, SIZE_MAX / 2) == 0);
	T_CHECK(ds_act_qt_floats(16, 0) == 0);
	for (r = 0; r < t * nb; r++) {
		d[r] = t_randf(&seed) + 2;
		s[r] = t_randf(&seed) * 100;
	}
	for (r = 0; r < t; r++)
		ds_act_qt_row(qt, ld, ldq, r, d + r * nb, s + r * nb);
	for (r = 0; r < t; r++)
		for (b = 0; b < nb; b++) {
			const float *p = qt + b * ld + r;

			bad += p[0] != d[r * nb + b] || p[nb * ld] != -128 * s[r * nb + b];
		}
	T_CHECK(bad == 0);
	memset(&a, 0, sizeof a);
	a.t = t;
	a.ldq = ldq;
	a.qt = qt;
	a.ldqt = ld;
	T_CHECK(ds_act_rows(&a, 5, 20).qt == qt + 5 && ds_act_rows(&a, 5, 20).ldqt == ld);
	a.qt = NULL;
	T_CHECK(ds_act_rows(&a, 5, 20).qt == NULL);
	free(d);
	free(s);
	free(qt);
}

static void test_quant_row(void)
{
	static const size_t ks[] = { 1, 31, 32, 33, 100, 257, 4096 };
	size_t ki, i;
	int e;

	for (ki = 0; ki < 7; ki++) {
		size_t k = ks[ki], kp = (k + 127) / 128 * 128, nb = kp / 32;
		float *x = malloc(k * 4), *nw = malloc(k * 4);
		int32_t *perm = malloc(k * 4);
		int8_t *q0 = malloc(kp), *q1 = malloc(kp);
		uint16_t *b0 = malloc(kp * 2), *b1 = malloc(kp * 2);
		float d0[128], s0[128], d1[128], s1[128], nscale = 0.7f;
		int bad = 0, bound = 0, variant;

		for (i = 0; i < k; i++) {
			x[i] = t_randf(&seed) * (float)(1 + i % 13);
			nw[i] = 0.5f + t_randf(&seed);
			perm[i] = (int32_t)i;
		}
		for (i = k; i > 1; i--) { /* Fisher-Yates */
			size_t j = t_rand(&seed) % i;
			int32_t tmp = perm[i - 1];

			perm[i - 1] = perm[j];
			perm[j] = tmp;
		}
		for (variant = 0; variant < 3; variant++) {
			const int32_t *pp = variant == 2 ? perm : NULL;
			const float *ww = variant >= 1 ? nw : NULL;
			float sc = variant >= 1 ? nscale : 1.0f;

			isa_tab[0]->quant_row(x, k, kp, pp, ww, sc, q0, d0, s0);
			isa_tab[0]->bf16_row(x, k, kp, pp, ww, sc, b0);
			/* |x - d q| <= d/2, plus the roundings: of 127/amax, of
			 * x times it and of amax/127, each at most 2^-24 of a
			 * value of up to 127 units of d, and this check's own
			 * (seed 10852626635055377382 met 0.5000029 d) */
			for (i = 0; i < kp; i++) {
				size_t p = pp && i < k ? (size_t)pp[i] : i;
				float v = i < k ? x[p] * sc * (ww ? ww[p] : 1.0f) : 0;

				bound += !(fabsf(v - d0[i / 32] * q0[i]) <=
					   d0[i / 32] * (0.5f + 4 * 127 * 0x1p-24f) + 1e-30f);
				bound += b0[i] != (i < k ? ds_f32_to_bf16(v) : 0);
			}
			for (i = 0; i < nb; i++) {
				int sum = 0, j;

				for (j = 0; j < 32; j++)
					sum += q0[32 * i + j];
				bound += s0[i] != d0[i] * (float)sum;
				/* never -0: amx.c takes 0 + s as s */
				bound += s0[i] == 0 && signbit(s0[i]);
			}
			for (e = 1; e < n_isa; e++) {
				isa_tab[e]->quant_row(x, k, kp, pp, ww, sc, q1, d1, s1);
				isa_tab[e]->bf16_row(x, k, kp, pp, ww, sc, b1);
				bad += memcmp(q0, q1, kp) != 0 || memcmp(d0, d1, nb * 4) != 0 ||
				       memcmp(s0, s1, nb * 4) != 0 || memcmp(b0, b1, kp * 2) != 0;
			}
		}
		T_CHECKF(bad == 0, "k=%zu: %d ISA outputs differ from scalar", k, bad);
		T_CHECKF(bound == 0, "k=%zu: %d values outside the rounding bound", k, bound);
		free(x); free(nw); free(perm); free(q0); free(q1); free(b0); free(b1);
	}
}

/* ---- element-wise kernels ---------------------------------------------- */

static float *rnd(size_t n, float scale)
{
	float *p = malloc((n + 1) * sizeof(float));
	size_t i;

	for (i = 0; i < n; i++)
		p[i] = t_randf(&seed) * scale;
	return p;
}

static int close_rel(const float *a, const float *b, size_t n, double rel,
		     double abs_floor)
{
	size_t i;
	int bad = 0;

	for (i = 0; i < n; i++)
		bad += !(fabs((double)a[i] - b[i]) <= rel * fabs((double)b[i]) + abs_floor);
	return bad;
}

static void test_elementwise(void)
{
	static const size_t ns[] = { 1, 7, 16, 33, 100, 4096 };
	size_t ni, i;
	int e;

	for (ni = 0; ni < 6; ni++) {
		size_t n = ns[ni];
		float *x = rnd(n, 4), *w = rnd(n, 1), *u = rnd(n, 3);
		float *y0 = malloc(n * 4), *y1 = malloc(n * 4);
		double ss = 0, mx = -1e30, sum = 0;
		int bad = 0;

		/* the scalar reference against double formulas */
		for (i = 0; i < n; i++) {
			ss += (double)x[i] * x[i];
			mx = x[i] > mx ? x[i] : mx;
		}
		for (i = 0; i < n; i++)
			sum += exp(x[i] - mx);
		isa_tab[0]->rmsnorm(x, w, n, 1e-6f, y0);
		for (i = 0; i < n; i++)
			bad += !(fabs(y0[i] - x[i] / sqrt(ss / n + 1e-6) * w[i]) <=
				 4 * U * fabs(x[i] / sqrt(ss / n + 1e-6) * w[i]) + 1e-30);
		memcpy(y0, x, n * 4);
		isa_tab[0]->softmax(y0, n);
		/* expf's argument x - max is rounded: relative error |x - max| U */
		for (i = 0; i < n; i++)
			bad += !(fabs(y0[i] - exp(x[i] - mx) / sum) <=
				 (4 + fabs(x[i] - mx)) * U * exp(x[i] - mx) / sum);
		isa_tab[0]->silu_mul(x, u, n, y0);
		for (i = 0; i < n; i++) {
			double v = x[i] / (1 + exp(-(double)x[i])) * u[i];

			bad += !(fabs(y0[i] - v) <= 8 * U * fabs(v) + 1e-30);
		}
		T_CHECKF(bad == 0, "scalar n=%zu: %d values off the double formulas", n, bad);
		T_NEAR(isa_tab[0]->sumsq(x, n), ss, U * ss);

		for (e = 1; e < n_isa; e++) {
			const ds_kernels *k = isa_tab[e];

			bad = 0;
			T_NEAR(k->sumsq(x, n), ss, ERR_F(n) * U * ss);
			isa_tab[0]->rmsnorm(x, w, n, 1e-6f, y0);
			k->rmsnorm(x, w, n, 1e-6f, y1);
			bad += close_rel(y1, y0, n, (ERR_F(n) + 4) * U, 0);
			memcpy(y0, x, n * 4);
			memcpy(y1, x, n * 4);
			isa_tab[0]->softmax(y0, n);
			k->softmax(y1, n);
			/* exp's error plus the max-shifted argument's rounding */
			bad += close_rel(y1, y0, n, ERR_ELEM + ERR_F(n) * U, 0);
			isa_tab[0]->silu_mul(x, u, n, y0);
			k->silu_mul(x, u, n, y1);
			bad += close_rel(y1, y0, n, ERR_ELEM, 1e-30);
			isa_tab[0]->add(x, u, n, y0);
			k->add(x, u, n, y1);
			bad += memcmp(y0, y1, n * 4) != 0;
			memcpy(y0, u, n * 4);
			memcpy(y1, u, n * 4);
			isa_tab[0]->axpy(0.37f, x, n, y0);
			k->axpy(0.37f, x, n, y1);
			/* a rounded product and sum against one FMA rounding */
			for (i = 0; i < n; i++)
				bad += !(fabs(y1[i] - y0[i]) <= U * (fabs(0.37 * x[i]) + 2 * fabs(y0[i])));
			/* in place (y aliasing an input) */
			memcpy(y1, x, n * 4);
			k->add(y1, u, n, y1);
			isa_tab[0]->add(x, u, n, y0);
			bad += memcmp(y0, y1, n * 4) != 0;
			T_CHECKF(bad == 0, "%s n=%zu: %d element-wise results off", k->name, n, bad);
		}
		free(x); free(w); free(u); free(y0); free(y1);
	}
}

static void test_rope(void)
{
	static const size_t dims[] = { 2, 14, 64, 128 };
	size_t di, i, h;
	int e, st;

	for (di = 0; di < 4; di++)
		for (st = 0; st < 2; st++) {
			size_t dim = dims[di], half = dim / 2, nh = 3, hs = dim + 5;
			float *x = rnd(nh * hs, 2), *y0 = malloc(nh * hs * 4), *y1 = malloc(nh * hs * 4);
			float *cs = malloc(dim * 4);
			int bad = 0;

			for (i = 0; i < half; i++) {
				double a = 7.3 * pow(10000.0, -2.0 * i / dim);

				cs[i] = (float)cos(a);
				cs[half + i] = (float)sin(a);
			}
			memcpy(y0, x, nh * hs * 4);
			isa_tab[0]->rope(y0, nh, hs, dim, cs, (enum ds_rope_style)st);
			/* against the rotation in double; padding untouched */
			for (h = 0; h < nh; h++)
				for (i = 0; i < half; i++) {
					size_t i0 = st == DS_ROPE_NEOX ? i : 2 * i;
					size_t i1 = st == DS_ROPE_NEOX ? i + half : 2 * i + 1;
					double a = x[h * hs + i0], b = x[h * hs + i1];
					double c = cs[i], s = cs[half + i];
					double tol = 4 * U * (fabs(a) + fabs(b));

					bad += !(fabs(y0[h * hs + i0] - (a * c - b * s)) <= tol);
					bad += !(fabs(y0[h * hs + i1] - (a * s + b * c)) <= tol);
				}
			for (h = 0; h < nh; h++)
				bad += memcmp(y0 + h * hs + dim, x + h * hs + dim, 5 * 4) != 0;
			for (e = 1; e < n_isa; e++) {
				memcpy(y1, x, nh * hs * 4);
				isa_tab[e]->rope(y1, nh, hs, dim, cs, (enum ds_rope_style)st);
				for (i = 0; i < nh * hs; i++) {
					size_t hh = i / hs, j = i % hs;
					double mg = 0;

					if (j >= dim) {
						bad += y1[i] != x[i];
						continue;
					}
					for (h = 0; h < dim; h++)
						mg = fmax(mg, fabs(x[hh * hs + h]));
					bad += !(fabs(y1[i] - y0[i]) <= 8 * U * mg);
				}
			}
			T_CHECKF(bad == 0, "dim %zu style %d: %d values off", dim, st, bad);
			free(x); free(y0); free(y1); free(cs);
		}
}

/* ---- KV cache rows and attention ----------------------------------------- */

/* Value i of a cache row, from the format kernels.h defines. */
static float kv_decode(enum ds_kvtype t, const uint8_t *r, size_t i)
{
	uint16_t hv;
	float f, d;

	if (t == DS_KV_F32) {
		memcpy(&f, r + 4 * i, 4);
		return f;
	}
	if (t == DS_KV_Q8) {
		memcpy(&d, r + 36 * (i / 32), 4);
		return d * (float)(int8_t)r[36 * (i / 32) + 4 + i % 32];
	}
	memcpy(&hv, r + 2 * i, 2);
	return t == DS_KV_F16 ? ds_f16_to_f32(hv) : ds_bf16_to_f32(hv);
}

/* Values where fp16/bf16 rounding has edges: signed zeros, fp16
 * subnormals and underflow, exact ties, the largest finite and the first
 * that overflows, infinities, NaNs with payloads. */
static void kv_specials(float *x, size_t n)
{
	union { uint32_t u; float f; } nan1 = { 0x7fc12345u }, nan2 = { 0xffa00001u };
	const float sp[] = { 0.0f, -0.0f, 1e-8f, -3e-7f, 6.1e-5f, 0x1p-25f, 0x1.8p-25f,
			     1.0f + 0x1p-11f, 1.0f + 0x3p-11f, 65504.0f, 65519.99f, 65520.0f,
			     -70000.0f, 1e30f, INFINITY, -INFINITY, nan1.f, nan2.f,
			     1.0f + 0x1p-8f, 1.0f + 0x3p-8f, 0x1p-130f };
	size_t i;

	for (i = 0; i < sizeof sp / sizeof sp[0] && i < n; i++)
		x[i * 4 % n] = sp[i];
}

static void test_kv_store(void)
{
	size_t n = 96, i, ns[] = { 96, 83, 7 }, k;
	float *x = rnd(n, 3);
	uint8_t row[4 * 96], row1[4 * 96];
	int t, e, bad = 0;

	/* fp16 and bf16 rows of every ISA are the scalar rows, byte for
	 * byte, at every length, edges included */
	kv_specials(x, n);
	for (t = DS_KV_F16; t <= DS_KV_BF16; t++)
		for (k = 0; k < 3; k++) {
			isa_tab[0]->kv_store((enum ds_kvtype)t, x, ns[k], row);
			for (e = 1; e < n_isa; e++) {
				memset(row1, 0xa5, sizeof row1);
				isa_tab[e]->kv_store((enum ds_kvtype)t, x, ns[k], row1);
				T_CHECKF(memcmp(row, row1, 2 * ns[k]) == 0 && row1[2 * ns[k]] == 0xa5,
					 "%s type %d n %zu", isa_tab[e]->name, t, ns[k]);
			}
		}
	free(x);
	x = rnd(n, 3);
	for (t = DS_KV_F32; t <= DS_KV_Q8; t++) {
		isa_tab[0]->kv_store((enum ds_kvtype)t, x, n, row);
		for (i = 0; i < n; i++) {
			float got = kv_decode((enum ds_kvtype)t, row, i), d;

			if (t == DS_KV_F32)
				bad += got != x[i];
			else if (t == DS_KV_F16)
				bad += got != ds_f16_to_f32(ds_f32_to_f16(x[i]));
			else if (t == DS_KV_BF16)
				bad += got != ds_bf16_to_f32(ds_f32_to_bf16(x[i]));
			else {
				memcpy(&d, row + 36 * (i / 32), 4);
				bad += !(fabsf(got - x[i]) <= d * 0.5001f);
			}
		}
		for (e = 1; e < n_isa; e++) {
			isa_tab[e]->kv_store((enum ds_kvtype)t, x, n, row1);
			bad += memcmp(row, row1, ds_kv_row_bytes((enum ds_kvtype)t, n)) != 0;
		}
	}
	T_CHECK(bad == 0);
	T_CHECK(ds_kv_row_bytes(DS_KV_Q8, 576) == 18 * 36);
	free(x);
}

/* Reference in double: softmax over keys of scale q.k, weighted values. */
static void attn_ref(const ds_attn_job *a, const float *kf, const float *vf,
		     size_t h, double *o)
{
	const float *q = a->q + h * a->q_ld;
	double m = -1e300, l = 0, *s = malloc(a->n * sizeof(double));
	size_t j, i;

	for (j = 0; j < a->n; j++) {
		double d = 0;

		for (i = 0; i < a->k.dim; i++)
			d += (double)q[i] * kf[j * a->k.dim + i];
		s[j] = d * a->scale;
		m = s[j] > m ? s[j] : m;
	}
	for (i = 0; i < a->v.dim; i++)
		o[i] = 0;
	for (j = 0; j < a->n; j++) {
		double p = exp(s[j] - m);

		l += p;
		for (i = 0; i < a->v.dim; i++)
			o[i] += p * vf[j * a->v.dim + i];
	}
	for (i = 0; i < a->v.dim; i++)
		o[i] /= l;
	free(s);
}

/* One case: g heads, n keys, head dims kd/vd, cache type t; mla: V is the
 * first vd values of the K rows. */
static void check_attn(enum ds_kvtype t, size_t g, size_t n, size_t kd,
		       size_t vd, int mla)
{
	size_t krow = ds_kv_row_bytes(t, kd), vrow = ds_kv_row_bytes(t, vd);
	size_t ld = (mla ? krow : krow + vrow) + 8, i, j, h;
	uint8_t *cache = malloc(n * ld + 64);
	float *q = rnd(g * (kd + 3), 1), *kf = malloc(n * kd * 4), *vf = malloc(n * vd * 4);
	float *o0 = malloc(g * (vd + 1) * 4), *o1 = malloc(g * (vd + 1) * 4);
	float *scratch = ds_aligned_alloc(64, DS_ATTN_SCRATCH(g, kd, vd) * 4, NULL);
	double *ref = malloc(vd * sizeof(double)), vmax = 0;
	ds_attn_job a;
	int bad = 0, e;

	for (j = 0; j < n; j++) {
		float *kr = rnd(kd, 2), *vr = rnd(vd, 1);

		if (mla)
			memcpy(vr, kr, vd * 4);
		isa_tab[0]->kv_store(t, kr, kd, cache + j * ld);
		if (!mla)
			isa_tab[0]->kv_store(t, vr, vd, cache + j * ld + krow);
		free(kr);
		free(vr);
	}
	memset(&a, 0, sizeof a);
	a.q = q;
	a.q_ld = kd + 3;
	a.g = g;
	a.k = (ds_kview){ t, cache, ld, kd };
	a.v = (ds_kview){ t, mla ? cache : cache + krow, ld, vd };
	a.n = n;
	a.scale = 1.0f / sqrtf((float)kd) * 2;
	a.o_ld = vd + 1;
	for (j = 0; j < n; j++) {
		for (i = 0; i < kd; i++)
			kf[j * kd + i] = kv_decode(t, cache + j * ld, i);
		for (i = 0; i < vd; i++)
			vf[j * vd + i] = kv_decode(t, cache + j * ld + (mla ? 0 : krow), i);
	}
	for (i = 0; i < n * vd; i++)
		vmax = fmax(vmax, fabs(vf[i]));
	(void)vrow;
	for (e = 0; e < n_isa; e++) {
		float *o = e == 0 ? o0 : o1;

		a.o = o;
		isa_tab[e]->attn(&a, scratch);
		for (h = 0; h < g; h++) {
			/* scores: |error| <= (kd + 8) U |q||k| scale; a score error
			 * de changes the weights by a factor e^(+-2 de) */
			double qk = 0;

			for (j = 0; j < n; j++) {
				double s = 0;

				for (i = 0; i < kd; i++)
					s += fabs(q[h * a.q_ld + i] * kf[j * kd + i]);
				qk = fmax(qk, s * a.scale);
			}
			attn_ref(&a, kf, vf, h, ref);
			for (i = 0; i < vd; i++) {
				double tol = vmax * (2 * (ERR_F(kd) * U * qk + ERR_ELEM) +
						     ERR_F(n) * U * 2);

				if (!(fabs(o[h * a.o_ld + i] - ref[i]) <= tol)) {
					if (bad++ < 3)
						printf("#   %s t=%d g=%zu n=%zu kd=%zu: o[%zu][%zu] %.9g vs %.9g (tol %.3g)\n",
						       isa_tab[e]->name, t, g, n, kd, h, i,
						       o[h * a.o_ld + i], ref[i], tol);
				}
			}
		}
	}
	T_CHECK(bad == 0);
	free(cache); free(q); free(kf); free(vf); free(o0); free(o1);
	free(scratch); free(ref);
}

/* One row's output o against attn_ref over its first n keys (the
 * tolerance of check_attn); 1 if within. */
static int attn_row_ok(const ds_attn_job *a, const float *q, size_t n,
		       const float *kf, const float *vf, const float *o)
{
	ds_attn_job r = *a;
	double *ref = malloc(a->v.dim * sizeof(double)), qk = 0, vmax = 0;
	size_t i, j, kd = a->k.dim, vd = a->v.dim;
	int ok = 1;

	r.q = q;
	r.n = n;
	for (j = 0; j < n; j++) {
		double s = 0;

		for (i = 0; i < kd; i++)
			s += fabs(q[i] * kf[j * kd + i]);
		qk = fmax(qk, s * a->scale);
		for (i = 0; i < vd; i++)
			vmax = fmax(vmax, fabs(vf[j * vd + i]));
	}
	attn_ref(&r, kf, vf, 0, ref);
	for (i = 0; i < vd; i++)
		ok &= fabs(o[i] - ref[i]) <= vmax * (2 * (ERR_F(kd) * U * qk + ERR_ELEM) +
						     ERR_F(n) * U * 2);
	free(ref);
	return ok;
}

/* Causal rows (ds_attn_job.diag): g consecutive positions of one head,
 * row h seeing diag + h keys of n, over blocks of blk keys whose running
 * maximum and sum carry (ml), divided at the end as the ops do.  Every
 * table against the reference; the SIMD ones bit for bit against each
 * row alone with its own n in one call. */
static void check_attn_rows(enum ds_kvtype t, size_t g, size_t n, size_t diag,
			    size_t kd, size_t vd, size_t blk)
{
	size_t krow = ds_kv_row_bytes(t, kd), ld = krow + ds_kv_row_bytes(t, vd), i, j, h, k0;
	uint8_t *cache = malloc(n * ld + 64);
	float *q = rnd(g * kd, 1), *kf = malloc(n * kd * 4), *vf = malloc(n * vd * 4);
	float *o = malloc(g * vd * 4), *o1 = malloc(vd * 4), *ml = malloc(g * 2 * 4);
	float *scratch = ds_aligned_alloc(64, DS_ATTN_SCRATCH(g, kd, vd) * 4, NULL);
	ds_attn_job a = { .q = q, .q_ld = kd, .g = g, .scale = 0.3f, .o = o,
			  .o_ld = vd, .diag = diag, .ml = ml, .ml_ld = 2 };
	int bad = 0, e;

	for (j = 0; j < n; j++) {
		float *kr = rnd(kd, 2), *vr = rnd(vd, 1);

		isa_tab[0]->kv_store(t, kr, kd, cache + j * ld);
		isa_tab[0]->kv_store(t, vr, vd, cache + j * ld + krow);
		for (i = 0; i < kd; i++)
			kf[j * kd + i] = kv_decode(t, cache + j * ld, i);
		for (i = 0; i < vd; i++)
			vf[j * vd + i] = kv_decode(t, cache + j * ld + krow, i);
		free(kr);
		free(vr);
	}
	for (e = 0; e < n_isa; e++) {
		for (k0 = 0; k0 < n; k0 += blk) {
			a.k = (ds_kview){ t, cache + k0 * ld, ld, kd };
			a.v = (ds_kview){ t, cache + k0 * ld + krow, ld, vd };
			a.n = n - k0 < blk ? n - k0 : blk;
			a.first = k0 == 0;
			/* rows that see none of the block are left out */
			for (h = 0; h < g && diag + h <= k0; h++)
				;
			a.q = q + h * kd;
			a.o = o + h * vd;
			a.ml = ml + 2 * h;
			a.g = g - h;
			a.diag = diag + h - k0;
			isa_tab[e]->attn(&a, scratch);
		}
		for (h = 0; h < g; h++) {
			size_t lim = diag + h < n ? diag + h : n;
			ds_attn_job one = { .q = q + h * kd, .g = 1, .scale = a.scale, .o = o1,
					    .k = { t, cache, ld, kd }, .v = { t, cache + krow, ld, vd },
					    .n = lim };

			for (i = 0; i < vd; i++)
				o[h * vd + i] *= 1.0f / ml[2 * h + 1];
			bad += !attn_row_ok(&one, q + h * kd, lim, kf, vf, o + h * vd);
			if (e == 0)
				continue;
			isa_tab[e]->attn(&one, scratch);
			bad += memcmp(o1, o + h * vd, vd * 4) != 0;
		}
		if (bad)
			printf("#   %s t=%d g=%zu n=%zu diag=%zu blk=%zu: %d rows differ\n",
			       isa_tab[e]->name, t, g, n, diag, blk, bad);
	}
	T_CHECK(bad == 0);
	free(cache); free(q); free(kf); free(vf); free(o); free(o1); free(ml);
	free(scratch);
}

static void test_attention(void)
{
	static const size_t ns[] = { 1, 5, 64, 65, 200 };
	size_t ni;
	int t;

	for (t = DS_KV_F32; t <= DS_KV_Q8; t++)
		for (ni = 0; ni < 5; ni++) {
			check_attn((enum ds_kvtype)t, 1, ns[ni], 64, 64, 0);
			check_attn((enum ds_kvtype)t, 4, ns[ni], 128, 128, 0);
			/* GQA groups of 2 and 6 (2x8 and 4x4 + 2x8 score tiles) */
			check_attn((enum ds_kvtype)t, 2, ns[ni], 64, 64, 0);
			check_attn((enum ds_kvtype)t, 6, ns[ni], 96, 96, 0);
		}
	/* widths AVX2's tiled kernel leaves to the generic one */
	for (t = DS_KV_F32; t <= DS_KV_BF16; t++) {
		check_attn((enum ds_kvtype)t, 3, 65, 40, 48, 0);
		check_attn((enum ds_kvtype)t, 2, 33, 36, 64, 0);
	}
	/* causal rows (MHA blocks of tokens), over blocks of keys */
	for (t = DS_KV_F32; t <= DS_KV_Q8; t++) {
		check_attn_rows((enum ds_kvtype)t, 16, 100, 85, 192, 128, 32);
		check_attn_rows((enum ds_kvtype)t, 5, 70, 1, 64, 64, 64);
		check_attn_rows((enum ds_kvtype)t, 3, 200, 150, 64, 32, 1000);
	}
	/* MLA absorbed decode: one 576-wide key, V its first 512 values */
	for (t = DS_KV_F16; t <= DS_KV_Q8; t++) {
		check_attn((enum ds_kvtype)t, 16, 70, 576, 512, 1);
		check_attn((enum ds_kvtype)t, 3, 1, 576, 512, 1);
	}
}

/* ---- MHA over packed bf16 blocks (ds_attn_blk) ------------------------------ */

/* Values rounded to bf16, in place. */
static void to_bf16(float *x, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		x[i] = ds_bf16_to_f32(ds_f32_to_bf16(x[i]));
}

/* Row t's reference in double: the softmax over its first n keys of the
 * bf16 q, k and v, without rounding the weights; the largest score's
 * magnitude bound into *qk. */
static void blk_ref(const float *q, const float *kf, const float *vf, size_t n,
		    size_t kd, size_t vd, float scale, double *o, double *qk)
{
	double m = -1e300, l = 0, *s = malloc(n * sizeof(double));
	size_t j, i;

	*qk = 0;
	for (j = 0; j < n; j++) {
		double d = 0, b = 0;

		for (i = 0; i < kd; i++) {
			d += (double)q[i] * kf[j * kd + i];
			b += fabs((double)q[i] * kf[j * kd + i]);
		}
		s[j] = d * scale;
		m = fmax(m, s[j]);
		*qk = fmax(*qk, b * scale);
	}
	for (i = 0; i < vd; i++)
		o[i] = 0;
	for (j = 0; j < n; j++) {
		double p = exp(s[j] - m);

		l += p;
		for (i = 0; i < vd; i++)
			o[i] += p * vf[j * vd + i];
	}
	for (i = 0; i < vd; i++)
		o[i] /= l;
	free(s);
}

/* A case of check_attn_blk: nt causal rows (diag; 0: all see every
 * key) over n keys, the values (rounded as the kernels see them) for the
 * reference, q's rows qld apart. */
struct blk_case {
	size_t nt, n, diag, kd, vd, qld;
	const float *q, *kf, *vf;
	float vmax;
};

/* The case through K's attn_blk, block by block: a0 holds the first
 * block's keys (k or k8, kz elements a block) and values (vz) and the
 * queries (q or q8), advanced here; the outputs into o and ml. */
static void blk_run(const ds_kernels *K, const ds_attn_blk *a0, size_t kz, size_t vz,
		    const struct blk_case *c, float *o, float *ml, float *scratch)
{
	const size_t B = DS_ATTN_BLK;
	size_t b;

	for (b = 0; b * B < c->n; b++) {
		size_t k0 = b * B, t0 = 0;
		ds_attn_blk a = *a0;

		/* rows that see none of the block are left out */
		while (c->diag && t0 < c->nt && c->diag + t0 <= k0)
			t0++;
		if (t0 == c->nt)
			continue;
		a.k = a0->k ? a0->k + b * kz : NULL;
		a.k8 = a0->k8 ? a0->k8 + b * kz : NULL;
		a.q = a0->q ? a0->q + t0 * a0->q_ld : NULL;
		a.q8 = a0->q8 ? a0->q8 + t0 * a0->q8_ld : NULL;
		a.v = a0->v + b * vz;
		a.nk = c->n - k0 < B ? c->n - k0 : B;
		a.nt = c->nt - t0;
		a.o = o + t0 * a0->o_ld;
		a.ml = ml + t0 * a0->ml_ld;
		a.diag = c->diag ? c->diag + t0 - k0 : 0;
		a.first = k0 == 0;
		K->attn_blk(&a, scratch);
	}
}

/* Outputs o (rows vd + 3 apart, sums in ml, 3 apart) against the
 * reference: the weights' rounding to bf16 moves a weight by at most
 * 2^-8 of itself, so an output by at most 2^-7 of the largest value,
 * beside the scores' fp32 error.  Returns the outputs off. */
static int blk_judge(const char *what, const struct blk_case *c, const float *o, const float *ml)
{
	double *ref = malloc(c->vd * sizeof(double)), qk;
	size_t t, i;
	int bad = 0;

	for (t = 0; t < c->nt; t++) {
		size_t lim = c->diag && c->diag + t < c->n ? c->diag + t : c->n;

		blk_ref(c->q + t * c->qld, c->kf, c->vf, lim, c->kd, c->vd, 0.25f, ref, &qk);
		for (i = 0; i < c->vd; i++) {
			double got = o[t * (c->vd + 3) + i] / ml[t * 3 + 1];
			double tol = c->vmax * (0x1p-7 + 2 * (ERR_F(c->kd) * U * qk + ERR_ELEM) +
						ERR_F(c->n) * U * 2);

			if (!(fabs(got - ref[i]) <= tol) && bad++ < 3)
				printf("#   %s nt=%zu n=%zu diag=%zu kd=%zu vd=%zu: o[%zu][%zu] %.9g vs %.9g (tol %.3g)\n",
				       what, c->nt, c->n, c->diag, c->kd, c->vd, t, i, got, ref[i], tol);
		}
	}
	free(ref);
	return bad;
}

/* nt causal rows (diag; 0: all see every key) over n keys in blocks of
 * DS_ATTN_BLK, packed in two column parts (K) as mla.c does; every table
 * against the reference (blk_judge). */
static void check_attn_blk(size_t nt, size_t n, size_t diag, size_t kd, size_t vd)
{
	const size_t B = DS_ATTN_BLK, qld = kd + kd % 2 + 2;
	size_t nb = (n + B - 1) / B, kz = ds_attn_pack_k_size(B, kd), vz = ds_attn_pack_v_size(B, vd);
	float *q = rnd(nt * qld, 1), *kf = rnd(n * kd, 2), *vf = rnd(n * vd, 1);
	float *o = malloc(nt * (vd + 3) * 4), *ml = malloc(nt * 3 * 4), vmax = 0;
	float *scratch = ds_aligned_alloc(64, DS_ATTN_BLK_SCRATCH * 4, NULL);
	uint16_t *qb = calloc(nt * qld, 2), *kp = calloc(nb * kz, 2), *vp = calloc(nb * vz, 2);
	uint16_t *kh = malloc(n * kd * 2), *vh = malloc(n * vd * 2);
	const ds_attn_blk a = { .q = qb, .q_ld = qld, .k = kp, .v = vp, .kd = kd, .vd = vd,
				.scale = 0.25f, .o_ld = vd + 3, .ml_ld = 3 };
	struct blk_case c = { .nt = nt, .n = n, .diag = diag, .kd = kd, .vd = vd, .qld = qld,
			      .q = q, .kf = kf, .vf = vf };
	size_t i, t, b, c0 = kd / 2 / 2 * 2;
	int bad = 0, e;

	T_CHECK(kz > 0 && vz > 0);
	for (t = 0; t < nt; t++)
		for (i = 0; i < qld; i++) {
			q[t * qld + i] = i < kd ? q[t * qld + i] : 0;
			qb[t * qld + i] = ds_f32_to_bf16(q[t * qld + i]);
		}
	to_bf16(q, nt * qld);
	for (i = 0; i < n * kd; i++)
		kh[i] = ds_f32_to_bf16(kf[i]);
	for (i = 0; i < n * vd; i++)
		vh[i] = ds_f32_to_bf16(vf[i]);
	to_bf16(kf, n * kd);
	to_bf16(vf, n * vd);
	for (i = 0; i < n * vd; i++)
		vmax = fmaxf(vmax, fabsf(vf[i]));
	for (b = 0; b < nb; b++) {
		size_t nk = n - b * B < B ? n - b * B : B, j;

		for (j = 0; j < nk; j += 32) {   /* in parts, as the ops may */
			size_t nj = nk - j < 32 ? nk - j : 32;

			ds_attn_pack_k(kp + b * kz, kd, nk, j, nj, 0, c0, kh + (b * B + j) * kd, kd);
			ds_attn_pack_k(kp + b * kz, kd, nk, j, nj, c0, kd - c0,
				       kh + (b * B + j) * kd + c0, kd);
			ds_attn_pack_v(vp + b * vz, vd, j, nj, vh + (b * B + j) * vd, vd);
		}
	}
	c.vmax = vmax;
	for (e = 0; e < n_isa; e++) {
		blk_run(isa_tab[e], &a, kz, vz, &c, o, ml, scratch);
		bad += blk_judge(isa_tab[e]->name, &c, o, ml);
	}
	T_CHECK(bad == 0);
	free(q); free(kf); free(vf); free(o); free(ml); free(scratch);
	free(qb); free(kp); free(vp); free(kh); free(vh);
}

/* Part x (n values) in int8 as kernels.h has it (blocks of 32, d =
 * max|x| / 127, q = round(x / d)), written independently of quant_row:
 * q and d for each block, the values it stands for back into x. */
static void q8_part(float *x, size_t n, int8_t *q, float *d, float *sd)
{
	size_t b, i;

	for (b = 0; b * 32 < n; b++) {
		float m = 0;
		int s = 0;

		for (i = b * 32; i < n && i < b * 32 + 32; i++)
			m = fmaxf(m, fabsf(x[i]));
		d[b] = m / 127.0f;
		for (i = b * 32; i < b * 32 + 32; i++) {
			q[i] = i < n && m > 0 ? (int8_t)lrintf(x[i] * 127.0f / m) : 0;
			s += q[i];
			if (i < n)
				x[i] = q[i] * d[b];
		}
		if (sd)
			sd[b] = d[b] * (float)s;
	}
}

/* check_attn_blk with int8 keys (kernels.h K8, Q8), the row cut into
 * parts [0, c0) and [c0, kd): each table that takes them (and scalar's,
 * the reference kernel) against the double reference over the values
 * the int8 rows stand for.  The scores' sums are exact, so the bound is
 * check_attn_blk's. */
static void check_attn_blk8(size_t nt, size_t n, size_t diag, size_t kd, size_t vd)
{
	const size_t B = DS_ATTN_BLK, c0 = kd / 3 * 2;
	const size_t ba = (c0 + 31) / 32, kb = ba + (kd - c0 + 31) / 32, qld = kb * 40;
	size_t nb = (n + B - 1) / B, kz = ds_attn_pack_k8_size(B, kb), vz = ds_attn_pack_v_size(B, vd);
	float *q = rnd(nt * kd, 1), *kf = rnd(n * kd, 2), *vf = rnd(n * vd, 1);
	float *o = malloc(nt * (vd + 3) * 4), *ml = malloc(nt * 3 * 4), *kd8 = malloc(n * kb * 4);
	float *scratch = ds_aligned_alloc(64, DS_ATTN_BLK_SCRATCH * 4, NULL), vmax = 0;
	int8_t *q8 = calloc(nt, qld), *k8 = calloc(n, kb * 32);
	uint8_t *kp = calloc(nb, kz);
	uint16_t *vp = calloc(nb * vz, 2), *vh = malloc(n * vd * 2);
	const ds_attn_blk a = { .q8 = q8, .q8_ld = qld, .k8 = kp, .kb = kb, .v = vp, .kd = kd,
				.vd = vd, .scale = 0.25f, .o_ld = vd + 3, .ml_ld = 3 };
	struct blk_case c = { .nt = nt, .n = n, .diag = diag, .kd = kd, .vd = vd, .qld = kd,
			      .q = q, .kf = kf, .vf = vf };
	size_t i, t, b;
	int bad = 0, e;

	T_CHECK(kz > 0 && vz > 0);
	/* queries off zero and keys of unlike sizes, so that the sums of q
	 * move the scores unevenly */
	for (i = 0; i < nt * kd; i++)
		q[i] += 0.5f;
	for (i = 0; i < n * kd; i++)
		kf[i] *= (float)(1 + i / kd % 5) / 4;
	for (t = 0; t < nt; t++) {
		int8_t *r = q8 + t * qld;
		float *d = (float *)(void *)(r + kb * 32);

		q8_part(q + t * kd, c0, r, d, d + kb);
		q8_part(q + t * kd + c0, kd - c0, r + ba * 32, d + ba, d + kb + ba);
	}
	for (i = 0; i < n; i++) {
		q8_part(kf + i * kd, c0, k8 + i * kb * 32, kd8 + i * kb, NULL);
		q8_part(kf + i * kd + c0, kd - c0, k8 + i * kb * 32 + ba * 32, kd8 + i * kb + ba, NULL);
	}
	for (i = 0; i < n * vd; i++)
		vh[i] = ds_f32_to_bf16(vf[i]);
	to_bf16(vf, n * vd);
	for (i = 0; i < n * vd; i++)
		vmax = fmaxf(vmax, fabsf(vf[i]));
	for (b = 0; b < nb; b++) {
		size_t nk = n - b * B < B ? n - b * B : B, j;

		for (j = 0; j < nk; j += 32) {   /* in parts, as the ops may */
			size_t nj = nk - j < 32 ? nk - j : 32, r = b * B + j;

			ds_attn_pack_k8(kp + b * kz, kb, nk, j, nj, 0, ba, k8 + r * kb * 32,
					kb * 32, kd8 + r * kb, kb);
			ds_attn_pack_k8(kp + b * kz, kb, nk, j, nj, ba, kb - ba,
					k8 + r * kb * 32 + ba * 32, kb * 32, kd8 + r * kb + ba, kb);
			ds_attn_pack_v(vp + b * vz, vd, j, nj, vh + r * vd, vd);
		}
	}
	c.vmax = vmax;
	for (e = 0; e < n_isa; e++) {
		if (!isa_tab[e]->attn_q8 && isa_tab[e]->isa != DS_ISA_SCALAR)
			continue;
		blk_run(isa_tab[e], &a, kz, vz, &c, o, ml, scratch);
		bad += blk_judge(isa_tab[e]->name, &c, o, ml);
	}
	T_CHECK(bad == 0);
	free(q); free(kf); free(vf); free(o); free(ml); free(kd8); free(scratch);
	free(q8); free(k8); free(kp); free(vp); free(vh);
}

/* nt, n, diag, kd, vd: V2-Lite's heads (192, 128), a diagonal block and
 * whole ones; odd sizes (widths off the vectors, rows and keys off the
 * tiles); a long row (8 blocks carried). */
static const size_t blk_cases[][5] = {
	{ 16, 600, 585, 192, 128 }, { 16, 16, 1, 192, 128 }, { 13, 256, 0, 192, 128 },
	{ 7, 77, 71, 37, 45 }, { 3, 300, 0, 64, 32 }, { 1, 1, 1, 2, 16 },
	{ 5, 520, 516, 96, 100 }, { 2, 2048, 2047, 64, 64 },
};

static void test_attention_blk(void)
{
	size_t i;

	for (i = 0; i < sizeof blk_cases / sizeof blk_cases[0]; i++) {
		const size_t *k = blk_cases[i];

		check_attn_blk(k[0], k[1], k[2], k[3], k[4]);
	}
}

static void test_attention_blk8(void)
{
	size_t i;

	for (i = 0; i < sizeof blk_cases / sizeof blk_cases[0]; i++) {
		const size_t *k = blk_cases[i];

		check_attn_blk8(k[0], k[1], k[2], k[3], k[4]);
	}
}

/* ---- dispatch ------------------------------------------------------------- */

static const char *self;

/* Run this program again with DS_ISA set and --init: it prints the
 * chosen table's name or the error.  0 chosen, 1 refused.  Through
 * DS_TEST_EXEC where it is set: the emulator a cross-built test runs
 * under (make test-arm64: "qemu-aarch64 -cpu max -L ..."), which the
 * host's shell cannot start it without. */
static int child_init(const char *isa, char *msg, size_t len)
{
	const char *run = getenv("DS_TEST_EXEC");
	char cmd[768];
	FILE *p;
	int st;

	snprintf(cmd, sizeof cmd, "DS_ISA='%s' %s '%s' --init", isa, run ? run : "", self);
	p = popen(cmd, "r");
	if (p == NULL)
		return -1;
	if (fgets(msg, (int)len, p) == NULL)
		msg[0] = '\0';
	msg[strcspn(msg, "\n")] = '\0';
	st = pclose(p);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static int init_only(void)
{
	ds_err err;

	if (ds_kernels_init(&err) != 0) {
		printf("%s\n", err.msg);
		return 1;
	}
	printf("%s\n", ds_kernels_name());
	return 0;
}

static void test_dispatch(void)
{
	static const struct {
		const char *env;
		enum ds_isa isa;
		const char *lacks;   /* in the refusal */
	} named[] = {
		{ "avx512", DS_ISA_AVX512, "AVX-512" }, { "amx", DS_ISA_AMX, "AMX" },
		{ "neon", DS_ISA_NEON, "Advanced SIMD" }, { "dotprod", DS_ISA_DOTPROD, "DotProd" },
		{ "i8mm", DS_ISA_I8MM, "I8MM" },
	};
	char msg[600], known[600];
	size_t i;
	ds_err err;

	T_CHECK(ds_kernels_init(&err) == 0);
	T_CHECK(ds_kernels_get() != NULL);
	T_CHECK(strlen(ds_kernels_name()) > 0);
	T_CHECK(child_init("scalar", msg, sizeof msg) == 0 && strcmp(msg, "scalar") == 0);
	T_CHECK(child_init("sse9", msg, sizeof msg) == 1 && strstr(msg, "unknown ISA") != NULL);
	/* each architecture's names: the ISA where the CPU has it, refused
	 * with what it lacks where not; the other architecture's unknown */
	snprintf(known, sizeof known, "%s", msg);
	for (i = 0; i < sizeof named / sizeof named[0]; i++) {
		int st = child_init(named[i].env, msg, sizeof msg);

		if (ds_isa_supported(named[i].isa))
			T_CHECKF(st == 0 && strcmp(msg, ds_isa_name(named[i].isa)) == 0,
				 "DS_ISA=%s: %d %s", named[i].env, st, msg);
		else if (strstr(known, named[i].env) != NULL)
			T_CHECKF(st == 1 && strstr(msg, "does not support") != NULL &&
				 strstr(msg, named[i].lacks) != NULL, "DS_ISA=%s: %d %s",
				 named[i].env, st, msg);
		else
			T_CHECKF(st == 1 && strstr(msg, "unknown ISA") != NULL, "DS_ISA=%s: %d %s",
				 named[i].env, st, msg);
	}
	if (ds_isa_supported(DS_ISA_AVX2))
		T_CHECK(child_init("avx2", msg, sizeof msg) == 0 && strncmp(msg, "avx2", 4) == 0);
	/* every supported table is complete */
	{
		int i, j, holes = 0;

		for (i = 0; i < n_isa; i++) {
			const ds_kernels *k = isa_tab[i];

			for (j = 0; j < DS_I32; j++)
				holes += k->mm[j] == NULL;
			holes += !k->quant_row || !k->bf16_row || !k->sumsq || !k->rmsnorm ||
				 !k->softmax || !k->silu_mul || !k->add || !k->axpy || !k->rope ||
				 !k->dequant_row || !k->kv_store || !k->attn || !k->attn_blk ||
				 k->mm_rows == 0 || k->mm_rows % 4 != 0;
		}
		T_CHECK(holes == 0);
	}
}

int main(int argc, char **argv)
{
	int i;

	self = argv[0];
	if (argc > 1 && strcmp(argv[1], "--init") == 0)
		return init_only();
	seed = t_seed();
	for (i = 0; i < DS_ISA_COUNT; i++)
		if (ds_kernels_isa((enum ds_isa)i) != NULL) {
			isa_tab[n_isa++] = ds_kernels_isa((enum ds_isa)i);
			printf("# ISA %s\n", ds_isa_name((enum ds_isa)i));
		}
	T_RUN(test_dispatch);
	T_RUN(test_quant_row);
	T_RUN(test_act_qt);
	T_RUN(test_mm_exact);
	T_RUN(test_mm_random);
	T_RUN(test_mm_large);
	T_RUN(test_mm_tiles);
	T_RUN(test_mm_guard);
	T_RUN(test_elementwise);
	T_RUN(test_rope);
	T_RUN(test_kv_store);
	T_RUN(test_attention);
	T_RUN(test_attention_blk);
	T_RUN(test_attention_blk8);
	return t_done();
}
