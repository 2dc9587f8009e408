/*
 * ops_int.h - what the ops/ files share: preparing activation rows for
 * the matrix kernels, the per-thread scratch, the token block.
 */
#ifndef DS_OPS_INT_H
#define DS_OPS_INT_H

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "ops.h"

/* Activation rows per kernel call: the prepared rows of one block (about
 * 768 KiB of int8) stay in L2 while every row-set of the thread's share
 * streams past them once; more rows per block mean fewer passes over the
 * weights.  A multiple of the kernels' tiles (ds_kernels.mm_rows: 12 for
 * tiles of 4 and 6 rows, AMX's 16), so that no block ends in a short
 * tile that a slower path takes (docs/perf.md, 2026-12-05 20:37). */
#define TB_MAX 192
/* Row-sets of gate and up per kernel call in ds_ffn's blocks of rows (the
 * stride of their outputs in the thread's scratch: FFN_LD), as the matmul
 * kernels' own blocks (amx.c RS_BLK), so that a tile of activation rows
 * stays in L1 over 16 row-sets; a call a row-set read the whole block of
 * rows from L2 each time (8 row-sets measured as 16: docs/perf.md,
 * 2026-12-06 03:13). */
#define FFN_RS 16
#define FFN_LD (FFN_RS * DS_ROWSET)

/* NEED_QT: ds_act.qt besides (q8g32, on kernel tables that read it) */
enum { NEED_Q = 1, NEED_B = 2, NEED_F = 4, NEED_QT = 8 };

/* The activation form a weight type reads. */
static inline int need_of(ds_ttype t)
{
	if (t.dt == DS_Q8 && DS_Q8_FOLD(0, t.group))
		return NEED_Q | NEED_QT;
	return t.dt == DS_Q4 || t.dt == DS_Q8 ? NEED_Q : t.dt == DS_BF16 ? NEED_B : NEED_F;
}

/* need: the forms read (NEED_*), k: the input width */
static inline size_t ops_tb(const ds_ctx *c, int need, size_t k)
{
	size_t row = (need & NEED_F ? 4 : need & NEED_B ? 2 : 1) * (k ? k : 1);
	size_t u = c->kern->mm_rows, tb = (size_t)786432 / row / u * u;

	return tb < u ? u : tb > TB_MAX ? TB_MAX : tb;
}

/* Rows of ds_ffn's hidden layer at a time: one block of down's rows
 * (ops_tb), so the hidden rows stay small (all of a prompt's would be
 * n_ff floats a token) and down still reads its weights once per block.
 * c->h holds ops_ffn_rows(c, NULL) rows of cfg.max_ff floats: a narrower
 * down (a shared expert beside a dense layer) takes more rows of its own
 * width, as many as fit there (ffn_pass). */
static inline size_t ops_ffn_rows(const ds_ctx *c, const ds_mat *down)
{
	size_t r = ops_tb(c, down ? need_of(down->type) : NEED_Q, down ? down->kp : c->cfg.max_ff);

	return r < c->cfg.max_rows ? r : c->cfg.max_rows;
}

/* Per-thread scratch of thread ith (c->thr_bytes bytes, 64-aligned). */
static inline void *ops_thr(const ds_ctx *c, int ith)
{
	return c->thr + (size_t)ith * c->thr_bytes;
}

/* Thread ith's scratch as gate's and up's outputs (ds_ffn, ds_moe): up to
 * TB_MAX rows of FFN_LD floats each, gate's at the start, up's at *tu. */
static inline float *ops_gu(const ds_ctx *c, int ith, float **tu)
{
	float *tg = ops_thr(c, ith);

	*tu = tg + TB_MAX * FFN_LD;
	return tg;
}

/* Gate and up over the row-sets of views g and u (FFN_RS at most) for the
 * rows of ag and au, into h (ldh; g's first output at h): pass 0 both,
 * gated; pass 1 gate alone; pass 2 up, gating the gate values in h.  tg,
 * tu: ops_gu. */
void ops_gate_up(const ds_ctx *c, const ds_mat *g, const ds_mat *u, const ds_act *ag,
		 const ds_act *au, int pass, float *h, size_t ldh, float *tg, float *tu);

/* Prepare one input row x [k] as row r of dst in the forms `need`, the
 * quantized forms padded with zeros to kp. */
void ops_prep_row(const ds_ctx *c, const float *x, size_t k, size_t kp,
		  const int32_t *perm, const float *norm, float eps, int need,
		  const ds_actbuf *dst, size_t r);
/* The ds_act of rows r0 .. r0+n-1 of dst (forms need), or of the input
 * itself when the f form is x as it is. */
ds_act ops_act(const ds_actbuf *dst, int need, size_t r0, size_t n);

/* 1 if two permutations of k are the same (NULL = identity). */
int ops_perm_same(const int32_t *a, const int32_t *b, size_t k);

/* y[t][16 rs + r] for one row-set rs of w and the nt rows of x, into a
 * dense tile [nt][16] (rows past w->n left alone). */
void ops_mm_tile(const ds_ctx *c, const ds_mat *w, size_t rs,
		 const ds_act *x, float *tile);

/* One activation row x through row-sets rs .. rs+n-1 of w (n <= TB_MAX)
 * into out[0 ..), streamed as the kernel streams a whole matrix (several
 * row-sets in flight, not one at a time); returns the outputs written. */
size_t ops_mv_rows(const ds_ctx *c, const ds_mat *w, size_t rs, size_t n,
		   const ds_act *x, float *out);

/* fn(arg, r0, r1, ith) over shares of rows, on the pool, or on the
 * caller alone when the work (rows * work_per_row) is too small to repay
 * a pool round trip. */
typedef void rows_fn(void *arg, size_t r0, size_t r1, int ith);
void ops_rows(ds_ctx *c, size_t rows, size_t work_per_row, rows_fn *fn,
	      void *arg);

/* ---- work stealing ----------------------------------------------------------
 * A job's n units (row-sets) start split as ds_split gives them, thread i
 * owning share i; its unclaimed part [front, back) is one atomic word.  A
 * thread claims from the front of its own share 7/8 of it, then halves of
 * what is left (at least `min` units): each claim restarts the kernel's
 * streams, so the first claim is long (halving from the start measured
 * slower: docs/perf.md, 2026-12-04); once its share is gone it takes
 * `min` units at a time from the back of the others' (min:
 * ops_steal_min, or STEAL_MIN).  A thread slowed at the end of a product
 * (a shared machine, a busier core) then has its last row-sets done by
 * the others.  The caller sets the shares before ops_run; which thread
 * computes a unit never changes its result. */
#define STEAL_MIN 4         /* the most units of a least claim */
#define STEAL_BYTES 49152   /* the weight bytes of a least claim */

/* The least a thread claims of `units` units holding `bytes` of weights:
 * about STEAL_BYTES, at most STEAL_MIN units.  The threads end about one
 * last claim apart, so a least claim is an amount of weights, not of
 * units: four row-sets of a wide matrix kept a thread busy for
 * microseconds while the other waited (docs/perf.md, 2026-12-04 21:15). */
static inline size_t ops_steal_min(uint64_t bytes, uint64_t units)
{
	uint64_t per = units ? bytes / units : 0;
	uint64_t n = per ? STEAL_BYTES / per : STEAL_MIN;

	return n < 1 ? 1 : n > STEAL_MIN ? STEAL_MIN : (size_t)n;
}

struct ops_steal {
	_Alignas(64) _Atomic uint64_t fb;   /* front | back << 32 */
	size_t n0;                          /* the share at ops_steal_init */
};

void ops_steal_init(const ds_ctx *c, size_t n);
/* The next units [*lo, *hi) for thread ith of nth; 0 when none is left. */
int ops_steal_next(const ds_ctx *c, int ith, int nth, size_t min, size_t *lo,
		   size_t *hi);

/* Run a job on the context's pool. */
static inline void ops_run(ds_ctx *c, ds_job_fn *fn, void *arg)
{
	ds_pool_run(c->pool, fn, arg);
}

#endif
