/*
 * test_ref.c - the reference forward pass (model/ref.h):
 *   - against the PyTorch reference's golden logits (testdata/golden,
 *     scripts/ref/forward.py in float64), every case, converted here;
 *   - its own rules: causal (a prefix's logits are the first rows of the
 *     whole sequence's), bad input refused;
 *   - every fast path (forward.h) held to it on tiny random models of
 *     each architecture (llama, qwen2, V2-Lite-style, V2 with q LoRA,
 *     V3-style) and weight type (f32, f16, bf16, q8 and q4 of groups 32,
 *     64, 128, q4 with act-order permutations), on each ISA this CPU has:
 *     a prompt in one batch (2 threads), token by token (1 thread: MLA's
 *     absorbed decode), two sequences interleaved in batches (2 threads),
 *     within the budgets of budget.h.
 * The ISAs run in child processes of this program (DS_ISA is read once
 * per process); their "#" lines are theirs.
 */
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "budget.h"
#include "convert/convert.h"
#include "harness.h"
#include "model/forward.h"
#include "model/ref.h"
#include "tmodel.h"

static uint64_t seed;
static char dir[64], mdir[80];   /* scratch; the random models */

/* ---- helpers ---------------------------------------------------------------------- */

static double rms(const float *a, size_t n)
{
	double s = 0;
	size_t i;

	for (i = 0; i < n; i++)
		s += (double)a[i] * a[i];
	return sqrt(s / (double)n);
}

static double max_diff(const float *a, const float *b, size_t n)
{
	double m = 0;
	size_t i;

	for (i = 0; i < n; i++) {
		double d = fabs((double)a[i] - b[i]);

		if (!(d <= m))
			m = d;   /* NaN counts as the largest */
	}
	return m;
}

static double mean_diff(const float *a, const float *b, size_t n)
{
	double s = 0;
	size_t i;

	for (i = 0; i < n; i++)
		s += fabs((double)a[i] - b[i]);
	return s / (double)n;
}

static void rand_ids(int32_t *ids, size_t n, uint32_t vocab)
{
	size_t i;

	for (i = 0; i < n; i++)
		ids[i] = (int32_t)(t_rand(&seed) % vocab);
}

/* T_CHECKF's test as a value: c, or a failed check with the message. */
static int __attribute__((format(printf, 2, 3))) t_ok(int c, const char *fmt, ...)
{
	va_list ap;

	if (c)
		return 1;
	printf("#   check failed: ");
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	t_cur_failed++;
	return 0;
}

/* The whole of a small file, or NULL. */
static char *slurp(const char *path, size_t *len)
{
	char *p;
	ds_err err = { "" };

	if (ds_read_file(path, 64u << 20, &p, len, &err)) {
		printf("# %s\n", err.msg);
		return NULL;
	}
	return p;
}

/* ---- the reference against PyTorch ------------------------------------------------- */

/* Every golden case: the checkpoint converted by ds_convert (weights kept
 * as stored: bf16, f16, AWQ and GPTQ integers, act-order permutations),
 * the reference's logits of prompt.ids against logits.f32 (float64
 * PyTorch, rounded to f32).  BUDGET_TORCH says why the bound. */
static const char *const golden[] = {
	"llama", "llama-awq", "llama-gptq", "qwen2", "qwen2-f16-untied",
	"qwen2-gptq-actorder", "ds2-lite", "ds2-lite-awq", "ds2-norope-scaling",
	"ds2-qlora-grouped", "ds2-gptq-actorder", "ds3", "ds3-awq",
};

static void golden_case(const char *name)
{
	char src[128], dst[128], path[160], *ids_txt, *p, *end;
	ds_convert_opts o = { .src = src, .dst = dst, .format = DS_QF_AUTO,
			      .quantize = DS_RQ_KEEP, .group_size = 32,
			      .threads = 1, .force = 1 };
	ds_convert_stats st;
	int32_t ids[256];
	size_t n = 0, len, glen, V;
	float *want = NULL, *got = NULL;
	double d, mean, scale;
	ds_model m;
	ds_err err = { "" };

	snprintf(src, sizeof src, "testdata/golden/%s", name);
	snprintf(dst, sizeof dst, "%s/golden-%s", dir, name);
	snprintf(path, sizeof path, "%s/prompt.ids", src);
	ids_txt = slurp(path, &len);
	T_CHECKF(ids_txt != NULL, "%s", path);
	if (ids_txt == NULL)
		return;
	for (p = ids_txt; n < 256; p = end) {
		long v = strtol(p, &end, 10);

		if (end == p)
			break;
		ids[n++] = (int32_t)v;
	}
	free(ids_txt);
	snprintf(path, sizeof path, "%s/logits.f32", src);
	want = (float *)slurp(path, &glen);
	if (!t_ok(want != NULL && ds_convert(&o, &st, &err) == 0 &&
		  ds_model_load(&m, dst, 0, &err) == 0, "%s: %s", name, err.msg)) {
		free(want);
		return;
	}
	V = m.hp.n_vocab;
	T_CHECKF(n > 0 && glen == n * V * sizeof *want, "%s: %zu ids, %zu bytes of logits",
		 name, n, glen);
	got = malloc(n * V * sizeof *got);
	if (glen == n * V * sizeof *want &&
	    t_ok(ds_ref_forward(&m, ids, n, got, &err) == 0, "%s: %s", name, err.msg)) {
		scale = rms(want, n * V);
		d = max_diff(got, want, n * V) / scale;
		mean = mean_diff(got, want, n * V) / scale;
		T_CHECKF(d <= BUDGET_TORCH.max && mean <= BUDGET_TORCH.mean,
			 "%s: |reference - PyTorch| / rms: max %g, mean %g", name, d, mean);
		if (getenv("DS_TEST_VERBOSE"))
			printf("# golden %s: max %.3g mean %.3g (of the logits' rms %.3g)\n",
			       name, d, mean, scale);
	}
	free(got);
	free(want);
	ds_model_free(&m);
}

static void test_golden(void)
{
	size_t i;

	for (i = 0; i < sizeof golden / sizeof golden[0]; i++)
		golden_case(golden[i]);
}

/* ---- the reference's own rules ------------------------------------------------------ */

/* Causal: the logits of a prefix are the first rows of the whole
 * sequence's, exactly (each row's arithmetic is the same); and bad input
 * is refused. */
static void test_ref_rules(void)
{
	const char *const cfgs[] = { tm_llama, tm_dsv3 };
	int32_t ids[24];
	size_t ci, n = 24, m = 9;
	ds_err err = { "" };

	for (ci = 0; ci < 2; ci++) {
		ds_model mod;
		float *a, *b;
		size_t V;

		if (!t_ok(tm_write(mdir, cfgs[ci], "q4g32", &seed) == 0 &&
			  ds_model_load(&mod, mdir, 0, &err) == 0, "%s", err.msg))
			continue;
		V = mod.hp.n_vocab;
		a = malloc(n * V * sizeof *a);
		b = malloc(m * V * sizeof *b);
		rand_ids(ids, n, (uint32_t)V);
		T_CHECK(ds_ref_forward(&mod, ids, n, a, &err) == 0);
		T_CHECK(ds_ref_forward(&mod, ids, m, b, &err) == 0);
		T_CHECK(memcmp(a, b, m * V * sizeof *a) == 0);
		T_CHECK(rms(a, n * V) > 0.1 && max_diff(a, a, n * V) == 0);
		ids[3] = (int32_t)V;
		T_CHECK(ds_ref_forward(&mod, ids, n, a, &err) == -1 &&
			strstr(err.msg, "token 3") != NULL);
		ids[3] = -1;
		T_CHECK(ds_ref_forward(&mod, ids, n, a, &err) == -1);
		T_CHECK(ds_ref_forward(&mod, ids, 0, a, &err) == -1);
		free(a);
		free(b);
		ds_model_free(&mod);
	}
}

/* ---- the fast paths against the reference (one ISA per process) ------------------------- */

static const struct {
	const char *name, *cfg;
	int moe;
} archs[] = {
	{ "llama", tm_llama, 0 }, { "qwen2", tm_qwen2, 0 }, { "dsv2", tm_dsv2, 1 },
	{ "dsv2q", tm_dsv2q, 1 }, { "dsv3", tm_dsv3, 1 },
};

static const struct {
	const char *name, *type;
	int perm;
} wtypes[] = {
	{ "f32", "f32", 0 }, { "f16", "f16", 0 }, { "bf16", "bf16", 0 },
	{ "q8g32", "q8g32", 0 }, { "q8g64", "q8g64", 0 }, { "q8g128", "q8g128", 0 },
	{ "q4g32", "q4g32", 0 }, { "q4g64", "q4g64", 0 }, { "q4g128", "q4g128", 0 },
	{ "q4g32+perm", "q4g32", 1 },
};

#define NA 20     /* tokens of sequence A */
#define NB 11     /* tokens of sequence B */

/* A forward with its pool and an f32 cache (so that only the weight
 * type's activation rounding separates it from the reference). */
typedef struct fast {
	ds_pool *pool;
	ds_fwd *f;
	ds_kvcache kv;
	int prompt0;        /* slot 0's entries are prompt tokens */
} fast;

/* form: MLA's ds_fwd_opts.mla_form (0 the default); ctx positions. */
static int fast_open_mha(fast *x, const ds_model *m, int threads, uint32_t slots,
			 int form, uint32_t ctx)
{
	ds_pool_opts po = { .threads = threads };
	ds_fwd_opts fo = { .max_batch = 64, .mla_form = form };
	ds_err err = { "" };

	memset(x, 0, sizeof *x);
	if (ds_pool_init(&x->pool, &po, &err) || ds_fwd_init(&x->f, m, x->pool, &fo, &err) ||
	    ds_kvcache_init(&x->kv, &m->hp, slots, ctx, DS_KV_F32, &err)) {
		printf("# fast_open: %s\n", err.msg);
		return -1;
	}
	return 0;
}

static int fast_open(fast *x, const ds_model *m, int threads, uint32_t slots)
{
	return fast_open_mha(x, m, threads, slots, 0, 64);
}

static void fast_close(fast *x)
{
	ds_kvcache_free(&x->kv);
	ds_fwd_free(x->f);
	if (x->pool)
		ds_pool_free(x->pool);
}

/* One batch of entries (tok, pos, seq)[0..n), every logit out: entry i's
 * into row pos[i] of out[seq[i]] ([rows][V] each). */
static int fast_batch(fast *x, size_t V, size_t n, const int32_t *tok,
		      const int32_t *pos, const int32_t *seq, float *const *out)
{
	uint8_t want[64], prompt[64];
	ds_batch b = { n, tok, pos, seq, want, prompt };
	ds_err err = { "" };
	size_t i;

	memset(want, 1, sizeof want);
	for (i = 0; i < n; i++)
		prompt[i] = x->prompt0 && seq[i] == 0;
	if (ds_fwd_decode(x->f, &x->kv, &b, &err)) {
		printf("# fast_batch: %s\n", err.msg);
		return -1;
	}
	for (i = 0; i < n; i++)
		memcpy(out[seq[i]] + (size_t)pos[i] * V, ds_fwd_logits(x->f, i),
		       V * sizeof(float));
	return 0;
}

/* Sequence ids[0..n) into slot s from position 0 in batches of `chunk`;
 * then the slot is emptied. */
static int fast_feed(fast *x, size_t V, int32_t s, const int32_t *ids, size_t n,
		     size_t chunk, float *const *out)
{
	int32_t pos[64], seq[64];
	size_t p0, i;

	for (p0 = 0; p0 < n; p0 += chunk) {
		size_t m = n - p0 < chunk ? n - p0 : chunk;

		for (i = 0; i < m; i++) {
			pos[i] = (int32_t)(p0 + i);
			seq[i] = s;
		}
		if (fast_batch(x, V, m, ids + p0, pos, seq, out))
			return -1;
	}
	ds_kvcache_seq_keep(&x->kv, (uint32_t)s, 0);
	return 0;
}

/* One batch of A's positions a0 .. a1-1 (slot 0) and B's b0 .. b1-1
 * (slot 1), their entries alternating. */
static int fast_two(fast *x, size_t V, const int32_t *a, size_t a0, size_t a1,
		    const int32_t *b, size_t b0, size_t b1, float *const *out)
{
	int32_t tok[64], pos[64], seq[64];
	size_t n = 0;

	while (a0 < a1 || b0 < b1) {
		if (a0 < a1) {
			tok[n] = a[a0], pos[n] = (int32_t)a0++, seq[n++] = 0;
		}
		if (b0 < b1) {
			tok[n] = b[b0], pos[n] = (int32_t)b0++, seq[n++] = 1;
		}
	}
	return fast_batch(x, V, n, tok, pos, seq, out);
}

/* A and B interleaved in two batches, the second continuing both caches;
 * then both slots are emptied. */
static int fast_interleaved(fast *x, size_t V, const int32_t *a, const int32_t *b,
			    float *const *out)
{
	if (fast_two(x, V, a, 0, 8, b, 0, 5, out) || fast_two(x, V, a, 8, NA, b, 5, NB, out))
		return -1;
	ds_kvcache_seq_keep(&x->kv, 0, 0);
	ds_kvcache_seq_keep(&x->kv, 1, 0);
	return 0;
}

/* How far the fast logits f land from the reference r (rows of V), in
 * units of the reference logits' rms: rows whose largest deviation is
 * over the budget's max are counted and left out of max and mean (a
 * router's near tie flipped: see budget.h). */
typedef struct dev {
	double max, mean;     /* of the rows within the budget */
	size_t over, rows;
} dev;

static void deviation(dev *d, const float *f, const float *r, size_t rows, size_t V,
		      const ds_budget *b)
{
	double scale = rms(r, rows * V), sum = 0;
	size_t p, i, in = 0;

	memset(d, 0, sizeof *d);
	d->rows = rows;
	for (p = 0; p < rows; p++) {
		double m = max_diff(f + p * V, r + p * V, V) / scale;

		if (!(m <= b->max)) {
			d->over++;
			continue;
		}
		d->max = m > d->max ? m : d->max;
		for (i = 0; i < V; i++)
			sum += fabs((double)f[p * V + i] - r[p * V + i]);
		in++;
	}
	d->mean = in ? sum / (double)(in * V) / scale : 0;
}

/* The worst of a weight type over the architectures and paths. */
typedef struct worst {
	double max, mean;
	size_t over, rows;
} worst;

/* One path's logits of a sequence against its reference: within the
 * budget, except for at most its share of flipped rows (MoE models with
 * rounded activations).  1 if so; a failure is printed with `say`. */
static int judge(const char *what, const float *f, const float *r, size_t rows,
		 size_t V, const ds_budget *b, int moe, int say, worst *w)
{
	size_t allow = moe && b->flips ? (size_t)ceil(rows * BUDGET_FLIP_SHARE) : 0;
	int ok;
	dev d;

	deviation(&d, f, r, rows, V, b);
	ok = d.over <= allow && d.mean <= b->mean;
	if ((say && !ok) || getenv("DS_TEST_VERBOSE"))
		printf("#   %s: %zu of %zu rows over %s's max %g (at most %zu), mean %.3g "
		       "(budget %g), max of the others %.3g\n", what, d.over, rows, b->name,
		       b->max, allow, d.mean, b->mean, d.max);
	w->max = d.max > w->max ? d.max : w->max;
	w->mean = d.mean > w->mean ? d.mean : w->mean;
	w->over += d.over;
	w->rows += rows;
	return ok;
}

/* ---- the cases: each model and its reference logits, written once by the
 * parent, read by every ISA's child -------------------------------------------------- */

#define N_ARCH (sizeof archs / sizeof archs[0])
#define N_TYPE (sizeof wtypes / sizeof wtypes[0])

/* A case's model directory, and its reference file: the ids of A and B,
 * then their reference logits [NA][V] and [NB][V]. */
static void case_path(char *buf, size_t len, size_t ai, size_t ti, const char *ext)
{
	snprintf(buf, len, "%s/%s-%s%s", dir, archs[ai].name, wtypes[ti].name, ext);
}

typedef struct refcase {
	int32_t a[NA], b[NB];
	float *ra, *rb;
} refcase;

static int case_write(size_t ai, size_t ti)
{
	char mp[128], rp[136];
	refcase c;
	ds_model m;
	ds_err err = { "" };
	size_t V;
	FILE *f;
	int ok;

	case_path(mp, sizeof mp, ai, ti, "");
	case_path(rp, sizeof rp, ai, ti, ".ref");
	if (tm_write_opt(mp, archs[ai].cfg, wtypes[ti].type, wtypes[ti].perm, &seed) ||
	    ds_model_load(&m, mp, 0, &err))
		return -1;
	V = m.hp.n_vocab;
	rand_ids(c.a, NA, (uint32_t)V);
	rand_ids(c.b, NB, (uint32_t)V);
	c.ra = malloc(NA * V * sizeof *c.ra);
	c.rb = malloc(NB * V * sizeof *c.rb);
	ok = ds_ref_forward(&m, c.a, NA, c.ra, &err) == 0 &&
	     ds_ref_forward(&m, c.b, NB, c.rb, &err) == 0 &&
	     t_ok(rms(c.ra, NA * V) > 0.1 && max_diff(c.ra, c.ra, NA * V) == 0,
		  "%s %s: reference logits not finite, or all near 0", archs[ai].name,
		  wtypes[ti].name) &&
	     (f = fopen(rp, "wb")) != NULL;
	if (ok) {
		ok = fwrite(c.a, sizeof c.a, 1, f) == 1 && fwrite(c.b, sizeof c.b, 1, f) == 1 &&
		     fwrite(c.ra, NA * V * sizeof *c.ra, 1, f) == 1 &&
		     fwrite(c.rb, NB * V * sizeof *c.rb, 1, f) == 1;
		ok = fclose(f) == 0 && ok;
	}
	free(c.ra);
	free(c.rb);
	ds_model_free(&m);
	return ok ? 0 : -1;
}

/* Every arch x type: a random model and its reference logits. */
static void test_cases(void)
{
	size_t ai, ti;

	for (ai = 0; ai < N_ARCH; ai++)
		for (ti = 0; ti < N_TYPE; ti++)
			T_CHECKF(case_write(ai, ti) == 0, "%s %s", archs[ai].name,
				 wtypes[ti].name);
}

static int case_read(size_t ai, size_t ti, ds_model *m, refcase *c)
{
	char mp[128], rp[136], *buf;
	ds_err err = { "" };
	size_t len, V;

	case_path(mp, sizeof mp, ai, ti, "");
	case_path(rp, sizeof rp, ai, ti, ".ref");
	if (ds_model_load(m, mp, DS_LOAD_POPULATE, &err))
		return -1;
	V = m->hp.n_vocab;
	if ((buf = slurp(rp, &len)) == NULL ||
	    len != sizeof c->a + sizeof c->b + (NA + NB) * V * sizeof(float)) {
		free(buf);
		ds_model_free(m);
		return -1;
	}
	memcpy(c->a, buf, sizeof c->a);
	memcpy(c->b, buf + sizeof c->a, sizeof c->b);
	c->ra = malloc((NA + NB) * V * sizeof *c->ra);
	memcpy(c->ra, buf + sizeof c->a + sizeof c->b, (NA + NB) * V * sizeof *c->ra);
	c->rb = c->ra + NA * V;
	free(buf);
	return 0;
}

/* Draw d > 0 of case (ai, ti): other ids and their reference logits. */
static int redraw(const ds_model *m, refcase *c, size_t ai, size_t ti, int d)
{
	uint64_t s = (seed ^ 0x9e3779b97f4a7c15ull * (ai * N_TYPE + ti + 1000 * (uint64_t)d)) | 1;
	size_t V = m->hp.n_vocab, i;
	ds_err err = { "" };

	for (i = 0; i < NA; i++)
		c->a[i] = (int32_t)(t_rand(&s) % V);
	for (i = 0; i < NB; i++)
		c->b[i] = (int32_t)(t_rand(&s) % V);
	return ds_ref_forward(m, c->a, NA, c->ra, &err) == 0 &&
	       ds_ref_forward(m, c->b, NB, c->rb, &err) == 0 ? 0 : -1;
}

/* Every path of case (ai, ti) on this process's ISA against the
 * reference; 1 if all are within the budget. */
static int fast_paths(const char *isa, size_t ai, size_t ti, fast *f1, fast *f2,
		      fast *f3, const refcase *c, size_t V, int say, worst *w)
{
	const ds_budget *b = ds_budget_of(wtypes[ti].type);
	static const char *const path[7] = { "prefill", "decode", "interleaved A",
					     "interleaved B", "MHA prefill",
					     "MHA/absorbed A", "MHA/absorbed B" };
	float *l[2] = { malloc(NA * V * sizeof(float)), malloc(NB * V * sizeof(float)) };
	int ok = 1, p, np = f3 ? 7 : 4;

	for (p = 0; p < np; p++) {
		char what[96];
		int fed = 0;

		snprintf(what, sizeof what, "%s %s %s %s", isa, archs[ai].name,
			 wtypes[ti].name, path[p]);
		switch (p) {
		case 0: fed = fast_feed(f2, V, 0, c->a, NA, NA, l) == 0; break;
		case 1: fed = fast_feed(f1, V, 0, c->a, NA, 1, l) == 0; break;
		case 2: fed = fast_interleaved(f2, V, c->a, c->b, l) == 0; break;
		/* MLA with A as a prompt (the MHA form), B generated
		 * (absorbed): A in chunks of 7 (the later ones attending
		 * earlier keys); A and B interleaved (both forms in a batch) */
		case 4: fed = fast_feed(f3, V, 0, c->a, NA, 7, l) == 0; break;
		case 5: fed = fast_interleaved(f3, V, c->a, c->b, l) == 0; break;
		default: fed = 1; break;
		}
		if (!t_ok(fed, "%s", what))
			ok = 0;
		else
			ok &= judge(what, p % 3 == 0 && p ? l[1] : l[0],
				    p % 3 == 0 && p ? c->rb : c->ra,
				    p % 3 == 0 && p ? NB : NA, V, b, archs[ai].moe, say, w);
	}
	free(l[0]);
	free(l[1]);
	return ok;
}

/* Case (ai, ti) on this process's ISA: the prompt in one batch (2
 * threads), token by token (1 thread), A and B interleaved (2 threads).
 * A draw whose rows a router's near tie moved past the budget is
 * replaced by another (budget.h); a bug fails every draw. */
static void fast_case(const char *isa, size_t ai, size_t ti, worst *w)
{
	const char *an = archs[ai].name, *tn = wtypes[ti].name;
	const ds_budget *b = ds_budget_of(wtypes[ti].type);
	int draws = archs[ai].moe && b != NULL && b->flips ? BUDGET_DRAWS : 1, d, ok = 0;
	fast f1 = { 0 }, f2 = { 0 }, f3 = { 0 };
	refcase c;
	ds_model m;
	int mla;

	if (!t_ok(b != NULL && case_read(ai, ti, &m, &c) == 0,
		  "%s %s: no case", an, tn))
		return;
	mla = m.hp.arch == DS_ARCH_DEEPSEEK2;
	if (t_ok(fast_open(&f1, &m, 1, 1) == 0 && fast_open(&f2, &m, 2, 2) == 0 &&
		 (!mla || fast_open_mha(&f3, &m, 2, 2, DS_MLA_PROMPT, 64) == 0),
		 "%s %s: forward", an, tn)) {
		f3.prompt0 = 1;
		for (d = 0; d < draws && !ok; d++) {
			worst dw = { 0 };

			if (d > 0 && !t_ok(redraw(&m, &c, ai, ti, d) == 0, "%s %s: draw %d", an, tn, d))
				break;
			ok = fast_paths(isa, ai, ti, &f1, &f2, mla ? &f3 : NULL, &c, m.hp.n_vocab,
					d == draws - 1, &dw);
			if (ok || d == draws - 1)
				*w = (worst){ fmax(w->max, dw.max), fmax(w->mean, dw.mean),
					      w->over + dw.over, w->rows + dw.rows };
			if (!ok && d < draws - 1)
				printf("# %s %s %s: another draw of tokens (a router's near tie "
				       "in draw %d?)\n", isa, an, tn, d);
		}
		T_CHECKF(ok, "%s %s %s: past the budget in %d draw(s)", isa, an, tn, draws);
	}
	fast_close(&f1);
	fast_close(&f2);
	fast_close(&f3);
	free(c.ra);
	ds_model_free(&m);
}

/* The child for one ISA (DS_ISA set by the parent): every case; one
 * summary line per type. */
static int isa_child(const char *isa)
{
	size_t ai, ti;

	printf("# %s: the %s kernels\n", isa, ds_kernels_name());
	for (ti = 0; ti < N_TYPE; ti++) {
		const ds_budget *b = ds_budget_of(wtypes[ti].type);
		worst w = { 0 };

		for (ai = 0; ai < N_ARCH; ai++)
			fast_case(isa, ai, ti, &w);
		printf("# %s %-10s max %.3g (budget %g), mean %.3g (%g), %zu of %zu rows "
		       "over\n", isa, wtypes[ti].name, w.max, b ? b->max : 0, w.mean,
		       b ? b->mean : 0, w.over, w.rows);
	}
	return t_cur_failed ? 1 : 0;
}

/* Run this program again as the child for one ISA, with DS_ISA in its
 * environment, on the cases in dir. */
static void run_isa(const char *name, enum ds_isa isa)
{
	char sd[24];
	int st;
	pid_t pid;

	snprintf(sd, sizeof sd, "%llu", (unsigned long long)seed);
	if (!ds_isa_supported(isa))
		T_SKIP("not on this CPU");
	fflush(stdout);
	pid = fork();
	if (pid == 0) {
		setenv("DS_ISA", name, 1);
		execl("/proc/self/exe", "test_ref", "--isa", name, dir, sd, (char *)NULL);
		_exit(127);
	}
	T_CHECKF(pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) &&
		 WEXITSTATUS(st) == 0, "%s: the child failed", name);
}

/* MLA over a prompt longer than a block of decompressed keys
 * (DS_MLA_KEYS): the MHA form and the absorbed one, each in chunks of
 * 64, against the reference (the best kernels). */
#define NL 300

static int mla_long_draw(const ds_model *m, size_t ai, size_t ti, uint64_t *s, int say)
{
	const ds_budget *b = ds_budget_of(wtypes[ti].type);
	size_t V = m->hp.n_vocab, i;
	int32_t ids[NL];
	float *r = malloc(NL * V * sizeof *r), *l = malloc(NL * V * sizeof *l);
	ds_err err = { "" };
	int ok, form;
	worst w = { 0 };

	for (i = 0; i < NL; i++)
		ids[i] = (int32_t)(t_rand(s) % V);
	ok = ds_ref_forward(m, ids, NL, r, &err) == 0;
	for (form = 0; ok && form < 2; form++) {
		fast f;
		char what[96];

		snprintf(what, sizeof what, "%s %s %d tokens %s", archs[ai].name,
			 wtypes[ti].name, NL, form ? "absorbed" : "MHA");
		ok = fast_open_mha(&f, m, 2, 1, form ? DS_MLA_ABSORBED : DS_MLA_MHA, NL) == 0 &&
		     fast_feed(&f, V, 0, ids, NL, 64, &l) == 0 &&
		     judge(what, l, r, NL, V, b, archs[ai].moe, say, &w);
		fast_close(&f);
	}
	free(r);
	free(l);
	return ok;
}

static void test_mla_long(void)
{
	static const size_t cases[][2] = { { 2, 0 }, { 2, 6 }, { 4, 0 }, { 4, 9 } };
	uint64_t s = seed | 1;
	size_t i;

	for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		size_t ai = cases[i][0], ti = cases[i][1];
		char mp[128];
		ds_model m;
		ds_err err = { "" };
		int ok = 0, d;

		case_path(mp, sizeof mp, ai, ti, "");
		if (!t_ok(ds_model_load(&m, mp, 0, &err) == 0, "%s", err.msg))
			continue;
		for (d = 0; d < BUDGET_DRAWS && !ok; d++)
			ok = mla_long_draw(&m, ai, ti, &s, d == BUDGET_DRAWS - 1);
		T_CHECKF(ok, "%s %s: %d tokens", archs[ai].name, wtypes[ti].name, NL);
		ds_model_free(&m);
	}
}

static void test_fast_scalar(void) { run_isa("scalar", DS_ISA_SCALAR); }
static void test_fast_avx2(void) { run_isa("avx2", DS_ISA_AVX2); }
static void test_fast_avx512(void) { run_isa("avx512", DS_ISA_AVX512); }
static void test_fast_amx(void) { run_isa("amx", DS_ISA_AMX); }

int main(int argc, char **argv)
{
	if (argc == 5 && strcmp(argv[1], "--isa") == 0) {
		snprintf(dir, sizeof dir, "%s", argv[3]);
		seed = strtoull(argv[4], NULL, 10);
		return isa_child(argv[2]);
	}
	seed = t_seed();
	/* tmpfs where there is one: the model writer's fsyncs cost nothing */
	snprintf(dir, sizeof dir, "%s/ds-test-ref-%d", ds_is_dir("/dev/shm") ? "/dev/shm" : "/tmp",
		 (int)getpid());
	snprintf(mdir, sizeof mdir, "%s/m", dir);
	mkdir(dir, 0700);
	T_RUN(test_golden);
	T_RUN(test_ref_rules);
	T_RUN(test_cases);
	T_RUN(test_fast_scalar);
	T_RUN(test_fast_avx2);
	T_RUN(test_fast_avx512);
	T_RUN(test_fast_amx);
	T_RUN(test_mla_long);
	ds_remove_tree(dir);
	return t_done();
}
