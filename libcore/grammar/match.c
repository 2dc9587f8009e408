/*
 * match.c - the pushdown matcher and the token mask.
 *
 * A parse in progress is a stack of positions in the lowered grammar: the
 * top one is a byte set to match next, the ones below are where to go on
 * when the rule above ends.  Stacks are lists of nodes (pos, parent),
 * hash-consed: equal stacks are the same node, so the set of stacks the
 * grammar allows after some bytes (a "state") is a sorted list of node
 * ids, interned.  A state is therefore a small integer, and
 *	trans[state][byte class] -> state
 * is computed once, when first needed: the matcher lazily builds a DFA of
 * the (infinite) pushdown automaton, only where the text and the token
 * walks go.  State 0 is dead (no stack, not complete).
 *
 * Advancing a stack past a byte: pop the matched set, then close over
 * what follows: a rule reference pushes a return node (unless it is last
 * in its alternative: then the caller's return is reused, so x* and
 * chains do not grow the stack) and opens every alternative; the end of
 * an alternative pops.  Each (pos, parent) is visited once per step.
 *
 * The mask: walk the vocabulary's trie depth-first from the current
 * state, one transition per trie node, dropping a subtree at the first
 * dead state.  A subtree whose remaining bytes all lead back to the same
 * state (inside a string: any character but the quote and backslash), or
 * along a chain of states longer than its tokens (a string of bounded
 * length), is taken whole (skip_ok).  Masks are also cached per state.
 *
 * Memory: nodes and states only grow while a request runs; past a soft
 * limit they are rebuilt from the states still reachable (the current
 * one, the start and the history) and the caches dropped.
 */
#include "gint.h"

#define NONE     UINT32_MAX
#define T_UNK    UINT32_MAX
#define T_ERR    (UINT32_MAX - 1)
#define S_DEAD   0u
#define S_FIN    1u

/* Rebuild past these (checked between calls); fail past the hard ones. */
#define SOFT_NODES  (1u << 19)
#define SOFT_TRANS  ((size_t)1 << 21)
#define HARD_NODES  (1u << 23)
#define HARD_TRANS  ((size_t)1 << 25)

#define MASK_SLOTS_DEFAULT 16u
/* Transitions the UTF-8 test of one state may compute. */
#define RUN_BUDGET 2048
/* How far a run is followed ahead (run_depth), and "no end". */
#define RUN_CAP 64
#define RUN_INF UINT16_MAX
/* States with more stacks than this get no run: computing one costs 128
 * transitions and as many states ahead, each the closure of every stack. */
#define RUN_MAX_TOPS 64

/* A state's run (skip_ok): the ASCII bytes that all lead to one state,
 * next; how many characters from those bytes keep the text alive in a
 * row (depth), and the same counting every non-ASCII character, when
 * each leads to next as well (udepth).  A state that loops (next is
 * itself) has no end. */
typedef struct grun {
	uint64_t bytes[2];
	uint32_t next;         /* NONE: no byte keeps the text alive */
	uint16_t depth, udepth;
	uint8_t base, done, utf8, capped;
} grun;

typedef struct gstate {
	uint32_t off, n;       /* tops[off, off+n): node ids, ascending */
	uint64_t hash;
	uint8_t complete, fin;
	int32_t mslot;         /* mask cache slot, -1 none */
	grun run;
} gstate;

/* The interned nodes and states, and the transitions between states. */
typedef struct gtab {
	uint32_t *npos, *npar;
	size_t nn, ncap;
	uint32_t *nh;          /* node hash: id + 1, 0 empty */
	size_t nhcap;
	gstate *st;
	size_t ns, scap;
	uint32_t *sh;          /* state hash: id + 1, 0 empty */
	size_t shcap;
	uint32_t *tops;
	size_t ntops, tcap;
	uint32_t *trans;       /* ns * ncls */
	size_t trcap;
} gtab;

struct ds_gmatch {
	const ds_grammar *g;
	uint32_t ncls;
	gtab t;
	uint32_t init, cur;
	uint32_t hist[DS_GMATCH_HISTORY];
	size_t hpos, hcount;
	/* one step's closure */
	uint64_t *work;
	size_t wn, wcap;
	uint64_t *vkey;
	uint32_t *vstamp, epoch;
	size_t vcap, vn;
	uint32_t *out;
	size_t on, ocap;
	uint8_t out_complete;
	size_t visits;         /* positions visited in this call */
	/* the mask walk: the state at each trie depth */
	uint32_t *dstate;
	size_t dcap;
	/* mask cache */
	unsigned mslots, mnext;
	uint32_t *mstate;
	uint64_t *mbits;
	size_t mwords;
	const ds_gvocab *mvocab;
	ds_err *err;           /* where a failing step reports */
};

static uint64_t mix(uint64_t h)
{
	h ^= h >> 33;
	h *= 0xff51afd7ed558ccdull;
	h ^= h >> 33;
	h *= 0xc4ceb9fe1a85ec53ull;
	return h ^ (h >> 33);
}

static int merr(ds_gmatch *m, const char *msg)
{
	return ds_errf(m->err, "grammar matcher: %s", msg);
}

/* ---- nodes ------------------------------------------------------------- */

static int nh_grow(gtab *t)
{
	size_t cap = t->nhcap ? t->nhcap * 2 : 1024, i;
	uint32_t *h = calloc(cap, sizeof *h);

	if (h == NULL)
		return -1;
	for (i = 0; i < t->nn; i++) {
		size_t j = mix((uint64_t)t->npos[i] << 32 | t->npar[i]) & (cap - 1);

		while (h[j])
			j = (j + 1) & (cap - 1);
		h[j] = (uint32_t)i + 1;
	}
	free(t->nh);
	t->nh = h;
	t->nhcap = cap;
	return 0;
}

/* The node (pos, par): found or made; NONE when out of memory or past the
 * hard limit. */
static uint32_t node_get(gtab *t, uint32_t pos, uint32_t par)
{
	uint64_t key = (uint64_t)pos << 32 | par;
	size_t j;

	if ((t->nn + 1) * 2 > t->nhcap && nh_grow(t) != 0)
		return NONE;
	for (j = mix(key) & (t->nhcap - 1); t->nh[j]; j = (j + 1) & (t->nhcap - 1)) {
		uint32_t id = t->nh[j] - 1;

		if (t->npos[id] == pos && t->npar[id] == par)
			return id;
	}
	if (t->nn >= HARD_NODES)
		return NONE;
	if (t->nn == t->ncap) {
		size_t c = t->ncap;

		if (ggrow(&t->npos, &c, t->nn + 1, sizeof *t->npos) != 0)
			return NONE;
		c = t->ncap;
		if (ggrow(&t->npar, &c, t->nn + 1, sizeof *t->npar) != 0)
			return NONE;
		t->ncap = c;
	}
	t->npos[t->nn] = pos;
	t->npar[t->nn] = par;
	t->nh[j] = (uint32_t)t->nn + 1;
	return (uint32_t)t->nn++;
}

/* ---- states ------------------------------------------------------------- */

static uint64_t state_hash(const uint32_t *tops, size_t n, unsigned complete)
{
	uint64_t h = complete ? 0x9e3779b97f4a7c15ull : 0x7f4a7c159e3779b9ull;
	size_t i;

	for (i = 0; i < n; i++)
		h = mix(h ^ tops[i]) + i;
	return h;
}

static int sh_grow(gtab *t)
{
	size_t cap = t->shcap ? t->shcap * 2 : 256, i;
	uint32_t *h = calloc(cap, sizeof *h);

	if (h == NULL)
		return -1;
	for (i = 0; i < t->ns; i++) {
		size_t j;

		if (t->st[i].fin)
			continue;
		for (j = t->st[i].hash & (cap - 1); h[j]; j = (j + 1) & (cap - 1))
			;
		h[j] = (uint32_t)i + 1;
	}
	free(t->sh);
	t->sh = h;
	t->shcap = cap;
	return 0;
}

static int state_eq(const gtab *t, const gstate *s, const uint32_t *tops,
		    size_t n, unsigned complete)
{
	return !s->fin && s->n == n && s->complete == complete &&
	       (n == 0 || memcmp(t->tops + s->off, tops, n * sizeof *tops) == 0);
}

/* Append a state (not hashed yet); its transitions unknown, or all dead
 * for a state without stacks. */
static uint32_t state_new(gtab *t, uint32_t ncls, const uint32_t *tops,
			  size_t n, unsigned complete, uint64_t hash)
{
	size_t need, i;
	uint32_t *row;

	if (ds_mul_sz(t->ns + 1, ncls, &need) != 0 || need > HARD_TRANS ||
	    ggrow(&t->st, &t->scap, t->ns + 1, sizeof *t->st) != 0 ||
	    ggrow(&t->trans, &t->trcap, need, sizeof *t->trans) != 0 ||
	    ggrow(&t->tops, &t->tcap, t->ntops + n, sizeof *t->tops) != 0)
		return T_ERR;
	if (n)
		memcpy(t->tops + t->ntops, tops, n * sizeof *tops);
	t->st[t->ns] = (gstate){ .off = (uint32_t)t->ntops, .n = (uint32_t)n,
		.hash = hash, .complete = (uint8_t)complete, .mslot = -1 };
	t->ntops += n;
	row = t->trans + t->ns * ncls;
	for (i = 0; i < ncls; i++)
		row[i] = n ? T_UNK : S_DEAD;
	return (uint32_t)t->ns++;
}

static uint32_t intern(gtab *t, uint32_t ncls, const uint32_t *tops,
		       size_t n, unsigned complete)
{
	uint64_t h = state_hash(tops, n, complete);
	uint32_t id;
	size_t j;

	if ((t->ns + 1) * 2 > t->shcap && sh_grow(t) != 0)
		return T_ERR;
	for (j = h & (t->shcap - 1); t->sh[j]; j = (j + 1) & (t->shcap - 1)) {
		const gstate *s = &t->st[t->sh[j] - 1];

		if (s->hash == h && state_eq(t, s, tops, n, complete))
			return t->sh[j] - 1;
	}
	id = state_new(t, ncls, tops, n, complete, h);
	if (id != T_ERR)
		t->sh[j] = id + 1;
	return id;
}

/* Dead (0) and finished (1, after the eos token) come first. */
static int tab_init(gtab *t, uint32_t ncls)
{
	uint32_t fin;

	if (intern(t, ncls, NULL, 0, 0) != S_DEAD)
		return -1;
	fin = state_new(t, ncls, NULL, 0, 1, 0);
	if (fin != S_FIN)
		return -1;
	t->st[S_FIN].fin = 1;
	return 0;
}

static void tab_free(gtab *t)
{
	free(t->npos);
	free(t->npar);
	free(t->nh);
	free(t->st);
	free(t->sh);
	free(t->tops);
	free(t->trans);
	*t = (gtab){ 0 };
}

/* ---- one step: the closure ------------------------------------------------ */

static int work_push(ds_gmatch *m, uint32_t pos, uint32_t par)
{
	if (m->wn == m->wcap &&
	    ggrow(&m->work, &m->wcap, m->wn + 1, sizeof *m->work) != 0)
		return -1;
	m->work[m->wn++] = (uint64_t)pos << 32 | par;
	return 0;
}

static int visit_grow(ds_gmatch *m)
{
	size_t cap = m->vcap ? m->vcap * 2 : 256, i;
	uint64_t *k = calloc(cap, sizeof *k);
	uint32_t *s = calloc(cap, sizeof *s);

	if (k == NULL || s == NULL) {
		free(k);
		free(s);
		return -1;
	}
	for (i = 0; i < m->vcap; i++) {
		size_t j;

		if (m->vstamp[i] != m->epoch)
			continue;
		for (j = mix(m->vkey[i]) & (cap - 1); s[j] == m->epoch;
		     j = (j + 1) & (cap - 1))
			;
		k[j] = m->vkey[i];
		s[j] = m->epoch;
	}
	free(m->vkey);
	free(m->vstamp);
	m->vkey = k;
	m->vstamp = s;
	m->vcap = cap;
	return 0;
}

/* 1 if key was seen in this closure (and mark it), 0 if new, -1 error. */
static int visit(ds_gmatch *m, uint64_t key)
{
	size_t j;

	if ((m->vn + 1) * 2 > m->vcap && visit_grow(m) != 0)
		return -1;
	for (j = mix(key) & (m->vcap - 1); m->vstamp[j] == m->epoch;
	     j = (j + 1) & (m->vcap - 1))
		if (m->vkey[j] == key)
			return 1;
	m->vkey[j] = key;
	m->vstamp[j] = m->epoch;
	m->vn++;
	return 0;
}

static void closure_begin(ds_gmatch *m)
{
	m->wn = m->on = m->vn = 0;
	m->out_complete = 0;
	if (++m->epoch == 0) {
		/* stamps wrapped: forget them all */
		if (m->vstamp)
			memset(m->vstamp, 0, m->vcap * sizeof *m->vstamp);
		m->epoch = 1;
	}
}

static int out_push(ds_gmatch *m, uint32_t node)
{
	if (m->on >= DS_GMATCH_MAX_STACKS)
		return ds_errf(m->err, "grammar matcher: more than %u parallel "
			       "parses (the grammar is too ambiguous)",
			       DS_GMATCH_MAX_STACKS);
	if (ggrow(&m->out, &m->ocap, m->on + 1, sizeof *m->out) != 0)
		return merr(m, "out of memory");
	m->out[m->on++] = node;
	return 0;
}

/* Open every alternative of rule r, returning to ret. */
static int open_rule(ds_gmatch *m, uint32_t r, uint32_t ret)
{
	const ds_grammar *g = m->g;
	uint32_t k;

	for (k = g->rule_alt[r]; k < g->rule_alt[r + 1]; k++)
		if (work_push(m, g->alt_start[k], ret) != 0)
			return merr(m, "out of memory");
	return 0;
}

static int closure_one(ds_gmatch *m, uint32_t pos, uint32_t par)
{
	const ds_grammar *g = m->g;
	uint32_t e = g->elems[pos], node, ret;

	switch (ge_kind(e)) {
	case GE_SET:
		node = node_get(&m->t, pos, par);
		if (node == NONE)
			return merr(m, "too many parse stacks (out of memory)");
		return out_push(m, node);
	case GE_END:
		if (par == NONE) {
			m->out_complete = 1;
			return 0;
		}
		if (work_push(m, m->t.npos[par], m->t.npar[par]) != 0)
			return merr(m, "out of memory");
		return 0;
	default:
		ret = par;
		if (ge_kind(g->elems[pos + 1]) != GE_END) {
			ret = node_get(&m->t, pos + 1, par);
			if (ret == NONE)
				return merr(m, "too many parse stacks (out of memory)");
		}
		return open_rule(m, ge_arg(e), ret);
	}
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return x < y ? -1 : x > y;
}

static void sort_u32(uint32_t *p, size_t n)
{
	size_t i, j;

	if (n > 16) {
		qsort(p, n, sizeof *p, cmp_u32);
		return;
	}
	for (i = 1; i < n; i++) {
		uint32_t v = p[i];

		for (j = i; j > 0 && p[j - 1] > v; j--)
			p[j] = p[j - 1];
		p[j] = v;
	}
}

/* Run the pending work; the interned result, or T_ERR. */
static uint32_t closure_run(ds_gmatch *m)
{
	while (m->wn) {
		uint64_t key = m->work[--m->wn];
		int seen = visit(m, key);

		if (seen < 0) {
			merr(m, "out of memory");
			return T_ERR;
		}
		if (seen)
			continue;
		if (++m->visits > DS_GMATCH_MAX_WORK) {
			ds_errf(m->err, "grammar matcher: more than %u parse steps in one "
				"call (the grammar is too ambiguous)", DS_GMATCH_MAX_WORK);
			return T_ERR;
		}
		if (closure_one(m, (uint32_t)(key >> 32), (uint32_t)key) != 0)
			return T_ERR;
	}
	sort_u32(m->out, m->on);
	{
		uint32_t id = intern(&m->t, m->ncls, m->out, m->on, m->out_complete);

		if (id == T_ERR)
			merr(m, "too many states (out of memory)");
		return id;
	}
}

/* The state after byte b from s (s has stacks), memoized. */
static uint32_t trans_compute(ds_gmatch *m, uint32_t s, unsigned b)
{
	const ds_grammar *g = m->g;
	uint32_t i, n, off, id;

	closure_begin(m);
	n = m->t.st[s].n;
	off = m->t.st[s].off;
	for (i = 0; i < n; i++) {
		uint32_t node = m->t.tops[off + i], pos = m->t.npos[node];

		if (gset_has(&g->sets[ge_arg(g->elems[pos])], b) &&
		    work_push(m, pos + 1, m->t.npar[node]) != 0) {
			merr(m, "out of memory");
			return T_ERR;
		}
	}
	id = closure_run(m);
	if (id != T_ERR)
		m->t.trans[(size_t)s * m->ncls + g->cls[b]] = id;
	return id;
}

static inline uint32_t trans_get(ds_gmatch *m, uint32_t s, unsigned b)
{
	uint32_t t = m->t.trans[(size_t)s * m->ncls + m->g->cls[b]];

	return t != T_UNK ? t : trans_compute(m, s, b);
}

/* ---- matcher lifetime ----------------------------------------------------------- */

static uint32_t initial_state(ds_gmatch *m)
{
	closure_begin(m);
	if (open_rule(m, m->g->root, NONE) != 0)
		return T_ERR;
	return closure_run(m);
}

int ds_gmatch_new(const ds_grammar *g, ds_gmatch **out, ds_err *err)
{
	ds_gmatch *m = ds_calloc(1, sizeof *m, err);

	*out = NULL;
	if (m == NULL)
		return -1;
	m->g = g;
	m->ncls = g->n_cls;
	m->err = err;
	m->mslots = MASK_SLOTS_DEFAULT;
	if (tab_init(&m->t, m->ncls) != 0) {
		ds_errf(err, "grammar matcher: out of memory");
		goto fail;
	}
	m->init = m->cur = initial_state(m);
	if (m->init == T_ERR)
		goto fail;
	m->err = NULL;
	*out = m;
	return 0;
fail:
	ds_gmatch_free(m);
	return -1;
}

static void mask_cache_free(ds_gmatch *m)
{
	free(m->mstate);
	free(m->mbits);
	m->mstate = NULL;
	m->mbits = NULL;
	m->mvocab = NULL;
	m->mwords = 0;
}

void ds_gmatch_free(ds_gmatch *m)
{
	if (m == NULL)
		return;
	tab_free(&m->t);
	free(m->work);
	free(m->vkey);
	free(m->vstamp);
	free(m->out);
	free(m->dstate);
	mask_cache_free(m);
	free(m);
}

void ds_gmatch_reset(ds_gmatch *m)
{
	m->cur = m->init;
	m->hpos = m->hcount = 0;
}

static void *dup_mem(const void *p, size_t n, size_t sz, int *bad)
{
	void *q;
	size_t bytes;

	if (p == NULL || n == 0)
		return NULL;
	if (ds_mul_sz(n, sz, &bytes) != 0 || (q = malloc(bytes)) == NULL) {
		*bad = 1;
		return NULL;
	}
	memcpy(q, p, bytes);
	return q;
}

static int tab_copy(gtab *d, const gtab *s, uint32_t ncls)
{
	size_t ntr = s->ns * ncls;
	int bad = 0;

	*d = (gtab){ .nn = s->nn, .ncap = s->nn, .nhcap = s->nhcap,
		.ns = s->ns, .scap = s->ns, .shcap = s->shcap,
		.ntops = s->ntops, .tcap = s->ntops, .trcap = ntr };
	d->npos = dup_mem(s->npos, s->nn, sizeof *s->npos, &bad);
	d->npar = dup_mem(s->npar, s->nn, sizeof *s->npar, &bad);
	d->nh = dup_mem(s->nh, s->nhcap, sizeof *s->nh, &bad);
	d->st = dup_mem(s->st, s->ns, sizeof *s->st, &bad);
	d->sh = dup_mem(s->sh, s->shcap, sizeof *s->sh, &bad);
	d->tops = dup_mem(s->tops, s->ntops, sizeof *s->tops, &bad);
	d->trans = dup_mem(s->trans, ntr, sizeof *s->trans, &bad);
	if (!d->npos || !d->npar)
		d->ncap = 0;
	if (!d->tops)
		d->tcap = 0;
	return bad ? -1 : 0;
}

int ds_gmatch_clone(const ds_gmatch *m, ds_gmatch **out, ds_err *err)
{
	ds_gmatch *c = ds_calloc(1, sizeof *c, err);
	size_t i;

	*out = NULL;
	if (c == NULL)
		return -1;
	c->g = m->g;
	c->ncls = m->ncls;
	c->init = m->init;
	c->cur = m->cur;
	memcpy(c->hist, m->hist, sizeof c->hist);
	c->hpos = m->hpos;
	c->hcount = m->hcount;
	c->mslots = m->mslots;
	if (tab_copy(&c->t, &m->t, m->ncls) != 0) {
		ds_gmatch_free(c);
		return ds_errf(err, "grammar matcher: out of memory");
	}
	/* the copy starts with an empty mask cache */
	for (i = 0; i < c->t.ns; i++)
		c->t.st[i].mslot = -1;
	*out = c;
	return 0;
}

/* ---- rebuilding the tables ----------------------------------------------------- */

/* The node old id in table o, made in table n; map caches old -> new. */
static uint32_t gc_node(gtab *n, const gtab *o, uint32_t *map, uint32_t id,
			uint32_t *chain)
{
	uint32_t k = 0, par;

	while (id != NONE && map[id] == NONE) {
		chain[k++] = id;
		id = o->npar[id];
	}
	par = id == NONE ? NONE : map[id];
	while (k) {
		uint32_t c = chain[--k];

		par = node_get(n, o->npos[c], par);
		if (par == NONE)
			return NONE;
		map[c] = par;
	}
	return par;
}

static uint32_t gc_state(ds_gmatch *m, gtab *n, uint32_t *map, uint32_t *chain,
			 uint32_t s)
{
	const gstate *q = &m->t.st[s];
	uint32_t i;

	if (s == S_DEAD || s == S_FIN)
		return s;
	m->on = 0;
	for (i = 0; i < q->n; i++) {
		uint32_t id = gc_node(n, &m->t, map, m->t.tops[q->off + i], chain);

		if (id == NONE || ggrow(&m->out, &m->ocap, m->on + 1, sizeof *m->out) != 0)
			return T_ERR;
		m->out[m->on++] = id;
	}
	sort_u32(m->out, m->on);
	return intern(n, m->ncls, m->out, m->on, q->complete);
}

static int gc(ds_gmatch *m)
{
	gtab n = { 0 };
	uint32_t *map = malloc((m->t.nn + 1) * sizeof *map);
	uint32_t *chain = malloc((m->t.nn + 1) * sizeof *chain);
	uint32_t init, cur, hist[DS_GMATCH_HISTORY];
	size_t i;

	if (map == NULL || chain == NULL || tab_init(&n, m->ncls) != 0)
		goto fail;
	memset(map, 0xff, (m->t.nn + 1) * sizeof *map);
	init = gc_state(m, &n, map, chain, m->init);
	cur = gc_state(m, &n, map, chain, m->cur);
	if (init == T_ERR || cur == T_ERR)
		goto fail;
	for (i = 0; i < DS_GMATCH_HISTORY; i++)
		hist[i] = S_DEAD;
	for (i = 0; i < m->hcount; i++) {
		size_t k = (m->hpos + DS_GMATCH_HISTORY - 1 - i) % DS_GMATCH_HISTORY;

		hist[k] = gc_state(m, &n, map, chain, m->hist[k]);
		if (hist[k] == T_ERR)
			goto fail;
	}
	free(map);
	free(chain);
	tab_free(&m->t);
	m->t = n;
	m->init = init;
	m->cur = cur;
	memcpy(m->hist, hist, sizeof hist);
	if (m->mstate)
		memset(m->mstate, 0xff, m->mslots * sizeof *m->mstate);
	return 0;
fail:
	free(map);
	free(chain);
	tab_free(&n);
	return merr(m, "out of memory rebuilding the matcher's tables");
}

static int maybe_gc(ds_gmatch *m)
{
	if (m->t.nn <= SOFT_NODES && m->t.ns * m->ncls <= SOFT_TRANS)
		return 0;
	return gc(m);
}

/* ---- accepting ------------------------------------------------------------------------ */

static void hist_push(ds_gmatch *m, uint32_t next)
{
	m->hist[m->hpos] = m->cur;
	m->hpos = (m->hpos + 1) % DS_GMATCH_HISTORY;
	if (m->hcount < DS_GMATCH_HISTORY)
		m->hcount++;
	m->cur = next;
}

/* Through len bytes from s: the state, S_DEAD, or T_ERR. */
static uint32_t run_bytes(ds_gmatch *m, uint32_t s, const uint8_t *p,
			  size_t len)
{
	size_t i;

	for (i = 0; i < len && s != S_DEAD && s != T_ERR; i++)
		s = trans_get(m, s, p[i]);
	return s;
}

int ds_gmatch_accept_bytes(ds_gmatch *m, const void *bytes, size_t len,
			   ds_err *err)
{
	uint32_t s;

	m->err = err;
	m->visits = 0;
	if (maybe_gc(m) != 0)
		return -1;
	s = run_bytes(m, m->cur, bytes, len);
	if (s == T_ERR)
		return -1;
	if (s == S_DEAD)
		return DS_GMATCH_REJECT;
	hist_push(m, s);
	return DS_GMATCH_OK;
}

int ds_gmatch_accept_token(ds_gmatch *m, const ds_gvocab *v, int32_t id,
			   ds_err *err)
{
	uint32_t len;
	const uint8_t *p = ds_gvocab_token(v, id, &len);

	if (p == NULL)
		return DS_GMATCH_REJECT;
	if (id == v->eos) {
		if (!m->t.st[m->cur].complete || m->cur == S_FIN)
			return DS_GMATCH_REJECT;
		hist_push(m, S_FIN);
		return DS_GMATCH_OK;
	}
	if (v->special[id] || len == 0)
		return DS_GMATCH_REJECT;
	return ds_gmatch_accept_bytes(m, p, len, err);
}

int ds_gmatch_complete(const ds_gmatch *m)
{
	return m->t.st[m->cur].complete;
}

int ds_gmatch_can_continue(const ds_gmatch *m)
{
	return m->t.st[m->cur].n > 0;
}

int ds_gmatch_finished(const ds_gmatch *m)
{
	return m->cur == S_FIN;
}

size_t ds_gmatch_history(const ds_gmatch *m)
{
	return m->hcount;
}

int ds_gmatch_rollback(ds_gmatch *m, size_t n)
{
	if (n > m->hcount)
		return -1;
	if (n == 0)
		return 0;
	m->hpos = (m->hpos + DS_GMATCH_HISTORY - n) % DS_GMATCH_HISTORY;
	m->cur = m->hist[m->hpos];
	m->hcount -= n;
	return 0;
}

/* ---- the mask --------------------------------------------------------------------------- */

/* The UTF-8 forms of the scalar values, as byte ranges per position. */
static const struct useqr {
	uint8_t lo[4], hi[4], len;
} useqs[] = {
	{ { 0xc2, 0x80 }, { 0xdf, 0xbf }, 2 },
	{ { 0xe0, 0xa0, 0x80 }, { 0xe0, 0xbf, 0xbf }, 3 },
	{ { 0xe1, 0x80, 0x80 }, { 0xec, 0xbf, 0xbf }, 3 },
	{ { 0xed, 0x80, 0x80 }, { 0xed, 0x9f, 0xbf }, 3 },
	{ { 0xee, 0x80, 0x80 }, { 0xef, 0xbf, 0xbf }, 3 },
	{ { 0xf0, 0x90, 0x80, 0x80 }, { 0xf0, 0xbf, 0xbf, 0xbf }, 4 },
	{ { 0xf1, 0x80, 0x80, 0x80 }, { 0xf3, 0xbf, 0xbf, 0xbf }, 4 },
	{ { 0xf4, 0x80, 0x80, 0x80 }, { 0xf4, 0x8f, 0xbf, 0xbf }, 4 },
};

#define FRONT 16

/* Does every character of one UTF-8 form lead from s to target?  1 yes,
 * 0 no (or too costly to tell), -1 error. */
static int utf8_form_to(ds_gmatch *m, uint32_t s, uint32_t target,
			const struct useqr *u, int *budget)
{
	uint32_t front[FRONT], next[FRONT];
	size_t nf = 1, nx, i, k;

	front[0] = s;
	for (k = 0; k < u->len; k++) {
		nx = 0;
		for (i = 0; i < nf; i++) {
			uint64_t seen[4] = { 0, 0, 0, 0 };
			unsigned b;

			for (b = u->lo[k]; b <= u->hi[k]; b++) {
				unsigned c = m->g->cls[b];
				uint32_t t;
				size_t j;

				if (seen[c >> 6] >> (c & 63) & 1)
					continue;
				seen[c >> 6] |= 1ull << (c & 63);
				if (--*budget < 0)
					return 0;
				t = trans_get(m, front[i], b);
				if (t == T_ERR)
					return -1;
				if (t == S_DEAD || (k + 1 == u->len && t != target))
					return 0;
				if (k + 1 == u->len)
					continue;
				for (j = 0; j < nx && next[j] != t; j++)
					;
				if (j == nx) {
					if (nx == FRONT)
						return 0;
					next[nx++] = t;
				}
			}
		}
		memcpy(front, next, nx * sizeof *next);
		nf = nx;
	}
	return 1;
}

/* s's run bytes (those leading to the state most ASCII bytes lead to),
 * that state, and whether every non-ASCII character leads there too. */
static int run_base(ds_gmatch *m, uint32_t s)
{
	uint32_t to[128], next = NONE;
	uint64_t bytes[2] = { 0, 0 };
	int budget = RUN_BUDGET, all = 1, best = 0;
	unsigned b, c;
	size_t k;

	if (m->t.st[s].n > RUN_MAX_TOPS) {
		m->t.st[s].run = (grun){ .next = NONE, .base = 1 };
		return 0;
	}
	for (b = 0; b < 128; b++)
		if ((to[b] = trans_get(m, s, b)) == T_ERR)
			return -1;
	for (b = 0; b < 128; b++) {
		int n = 0;

		if (to[b] == S_DEAD || to[b] == next)
			continue;
		for (c = b; c < 128; c++)
			n += to[c] == to[b];
		if (n > best)
			best = n, next = to[b];
	}
	for (b = 0; b < 128 && next != NONE; b++)
		if (to[b] == next)
			bytes[b >> 6] |= 1ull << (b & 63);
	for (k = 0; k < sizeof useqs / sizeof useqs[0] && all && next != NONE; k++) {
		int r = utf8_form_to(m, s, next, &useqs[k], &budget);

		if (r < 0)
			return -1;
		all = r;
	}
	m->t.st[s].run = (grun){ .bytes = { bytes[0], bytes[1] }, .next = next,
		.utf8 = (uint8_t)(all && next != NONE), .base = 1 };
	return 0;
}

static uint16_t sat1(uint16_t d)
{
	return d == RUN_INF ? RUN_INF : (uint16_t)(d + 1);
}

/* Where the run of r stops at once: 0, 1 or no end. */
static int run_stops(const gtab *t, uint32_t s, const grun *r, uint16_t *d,
		     uint16_t *ud)
{
	const grun *n;

	if (r->next == NONE) {
		*d = *ud = 0;
		return 1;
	}
	if (r->next == s) {
		*d = RUN_INF;
		*ud = r->utf8 ? RUN_INF : 0;
		return 1;
	}
	n = &t->st[r->next].run;
	if (n->base && ((r->bytes[0] & ~n->bytes[0]) || (r->bytes[1] & ~n->bytes[1]))) {
		*d = 1;
		*ud = r->utf8;
		return 1;
	}
	return 0;
}

/* s's run depths: follow next while each state's run bytes hold the
 * previous ones, at most RUN_CAP states ahead (then the depth is a lower
 * bound, and recomputed when it gets short). */
static int run_depth(ds_gmatch *m, uint32_t s)
{
	uint32_t chain[RUN_CAP];
	uint16_t d = 1, ud = 0;
	size_t k = 0;
	int capped = 0;

	chain[0] = s;
	for (;;) {
		uint32_t cur = chain[k];
		grun *r;

		if (!m->t.st[cur].run.base && run_base(m, cur) != 0)
			return -1;
		r = &m->t.st[cur].run;
		if (r->next != NONE && r->next != cur && !m->t.st[r->next].run.base &&
		    run_base(m, r->next) != 0)
			return -1;
		r = &m->t.st[cur].run;
		if (run_stops(&m->t, cur, r, &d, &ud))
			break;
		if (m->t.st[r->next].run.done && !m->t.st[r->next].run.capped) {
			d = sat1(m->t.st[r->next].run.depth);
			ud = r->utf8 ? sat1(m->t.st[r->next].run.udepth) : 0;
			break;
		}
		if (k + 1 == RUN_CAP) {
			d = 1, ud = r->utf8, capped = 1;
			break;
		}
		chain[++k] = r->next;
	}
	for (;;) {
		grun *r = &m->t.st[chain[k]].run;

		r->depth = d, r->udepth = ud, r->capped = (uint8_t)capped, r->done = 1;
		if (k-- == 0)
			break;
		d = sat1(d);
		ud = m->t.st[chain[k]].run.utf8 ? sat1(ud) : 0;
	}
	return 0;
}

/* Is every token below a node with aux a, reached in state s, allowed?
 * Yes when its remaining bytes are all run bytes (or, when a has non-ASCII
 * bytes, whole characters that follow the run too) and no longer than the
 * run: then every one of those texts stays alive.  1, 0 or -1 (error). */
static int skip_ok(ds_gmatch *m, uint32_t s, const gtaux *a)
{
	const grun *r = &m->t.st[s].run;

	if (!r->done || (r->capped && r->depth < RUN_CAP / 2)) {
		if (run_depth(m, s) != 0)
			return -1;
		r = &m->t.st[s].run;
	}
	if ((a->ascii[0] & ~r->bytes[0]) || (a->ascii[1] & ~r->bytes[1]))
		return 0;
	if (!a->high)
		return a->maxlen <= r->depth;
	return a->utf8 && a->maxlen <= r->udepth;
}

static inline void set_range(uint64_t *bits, const uint32_t *toks,
			     uint32_t a, uint32_t b)
{
	for (; a < b; a++)
		bits[toks[a] >> 6] |= 1ull << (toks[a] & 63);
}

static int mask_walk(ds_gmatch *m, const ds_gvocab *v, uint32_t s,
		     uint64_t *bits)
{
	const gtnode *nd = v->nodes;
	const uint8_t *cls = m->g->cls;
	uint32_t i = 1;
	int ok;

	if (ggrow(&m->dstate, &m->dcap, (size_t)v->max_len + 1,
		  sizeof *m->dstate) != 0)
		return merr(m, "out of memory");
	m->dstate[0] = s;
	if (nd[0].aux != NONE) {
		ok = skip_ok(m, s, &v->aux[nd[0].aux]);
		if (ok < 0)
			return -1;
		if (ok)
			i = nd[0].end;
		if (ok)
			set_range(bits, v->toks, 0, v->n_toks);
	}
	while (i < v->n_nodes) {
		const gtnode *n = &nd[i];
		uint32_t p = m->dstate[n->depth - 1];
		uint32_t t = m->t.trans[(size_t)p * m->ncls + cls[n->byte]];

		if (t == T_UNK && (t = trans_compute(m, p, n->byte)) == T_ERR)
			return -1;
		if (t == S_DEAD) {
			i = n->end;
			continue;
		}
		if (n->aux != NONE) {
			ok = skip_ok(m, t, &v->aux[n->aux]);
			if (ok < 0)
				return -1;
			if (ok) {
				set_range(bits, v->toks, n->tok, nd[n->end].tok);
				i = n->end;
				continue;
			}
		}
		set_range(bits, v->toks, n->tok, nd[i + 1].tok);
		if (m->t.st[t].n == 0) {
			i = n->end;
			continue;
		}
		m->dstate[n->depth] = t;
		i++;
	}
	return 0;
}

static int mask_cache_setup(ds_gmatch *m, const ds_gvocab *v)
{
	size_t words = ds_gvocab_mask_words(v), i, bytes;

	if (m->mvocab == v && m->mwords == words)
		return 0;
	for (i = 0; i < m->t.ns; i++)
		m->t.st[i].mslot = -1;
	mask_cache_free(m);
	if (m->mslots == 0)
		return 0;
	if (ds_mul_sz(words, m->mslots, &bytes) != 0 ||
	    ds_mul_sz(bytes, sizeof *m->mbits, &bytes) != 0)
		return merr(m, "mask cache too large");
	m->mstate = malloc(m->mslots * sizeof *m->mstate);
	m->mbits = malloc(bytes);
	if (m->mstate == NULL || m->mbits == NULL) {
		mask_cache_free(m);
		return merr(m, "out of memory");
	}
	memset(m->mstate, 0xff, m->mslots * sizeof *m->mstate);
	m->mvocab = v;
	m->mwords = words;
	m->mnext = 0;
	return 0;
}

static void mask_cache_put(ds_gmatch *m, uint32_t s, const uint64_t *bits)
{
	unsigned k = m->mnext;

	if (m->mbits == NULL)
		return;
	m->mnext = (k + 1) % m->mslots;
	if (m->mstate[k] != NONE && m->mstate[k] < m->t.ns)
		m->t.st[m->mstate[k]].mslot = -1;
	m->mstate[k] = s;
	m->t.st[s].mslot = (int32_t)k;
	memcpy(m->mbits + (size_t)k * m->mwords, bits, m->mwords * sizeof *bits);
}

int ds_gmatch_mask(ds_gmatch *m, const ds_gvocab *v, uint64_t *bits,
		   ds_err *err)
{
	size_t words = ds_gvocab_mask_words(v);
	uint32_t s;

	m->err = err;
	m->visits = 0;
	if (maybe_gc(m) != 0 || mask_cache_setup(m, v) != 0)
		return -1;
	s = m->cur;
	if (m->t.st[s].mslot >= 0) {
		memcpy(bits, m->mbits + (size_t)m->t.st[s].mslot * words,
		       words * sizeof *bits);
		return 0;
	}
	memset(bits, 0, words * sizeof *bits);
	if (m->t.st[s].n && mask_walk(m, v, s, bits) != 0)
		return -1;
	if (v->eos >= 0 && s != S_FIN && m->t.st[s].complete)
		bits[v->eos >> 6] |= 1ull << (v->eos & 63);
	mask_cache_put(m, s, bits);
	return 0;
}

void ds_gmatch_mask_cache(ds_gmatch *m, unsigned slots)
{
	size_t i;

	for (i = 0; i < m->t.ns; i++)
		m->t.st[i].mslot = -1;
	mask_cache_free(m);
	m->mslots = slots;
}
