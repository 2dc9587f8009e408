/*
 * mtp.c - drafts from DeepSeek's multi-token-prediction module
 * (drafter.h; docs/deepseek.md section 10, docs/spec-decoding.md).
 *
 * The module at position j reads the main model's hidden state h_j
 * (through the main model's output norm, as vLLM's and SGLang's proposers
 * pass it) and the embedding of token j + 1, and predicts token j + 2.
 * Its decoder layer keeps a cache like a layer's (one layer, a slot per
 * target slot), whose position j holds what (h_j, token j + 1) gave.
 *
 * Each call, for every sequence the target pass fed: the positions it
 * kept (fed0 .. n_final - 1), each with its hidden row from that pass and
 * the token after it, go through the module (catch-up: the module's cache
 * then holds the exact rows up to n_final - 1, overwriting the chained
 * ones of the step before).  A sequence that wants no drafts this step
 * (the adaptive K at 0) keeps its few rows pending instead, hidden row
 * and token, up to PEND of them: they go through with the next step
 * that drafts, in its pass, so a step without drafts costs a copy of a
 * row, not a pass of the module.  The last of them, h at n_final - 1 with the
 * unfed last token, gives the first draft.  Draft r + 1 chains the
 * module on itself (as DeepSeek's report describes sequential depths and
 * vLLM runs one module k times): at position n_final - 1 + r, the token
 * is draft r and the hidden state the module's own normed output of the
 * entry before.  Every drafting sequence shares each pass.
 */
#include <stdlib.h>
#include <string.h>

#include "drafter.h"

/* Positions a sequence may keep pending (a retry of the adaptive K comes
 * every 17 steps at K 0). */
#define PEND 32

typedef struct mtp {
	ds_drafter base;
	ds_fwd *f;                /* the module's forward */
	ds_kvcache kv;            /* its layer's cache */
	int have_kv;
	uint32_t H, n_vocab, max_batch;
	float *hid;               /* [max_batch][H] the pass's hidden inputs */
	float *chain;             /* [n_slot][H] each sequence's next one */
	int32_t *tok, *pos, *seq;
	uint8_t *want;
	ds_spec_seq **owner;      /* [max_batch] whose entry */
	ds_spec_pick *slots;      /* [n_slot] */
	uint8_t *gap;             /* [n_slot] positions the module never saw
				     (a prefix the target's cache already
				     held): no drafts until the slot ends */
	float *pend_h;            /* [n_slot][PEND][H] rows not yet run: the
				     positions after the module's cache */
	int32_t *pend_tok;        /* [n_slot][PEND] the token after each */
	uint32_t *n_pend;         /* [n_slot] */
} mtp;

static void put(mtp *d, size_t *n, ds_spec_seq *q, int32_t tok, size_t pos,
		int want)
{
	d->tok[*n] = tok;
	d->pos[*n] = (int32_t)pos;
	d->seq[*n] = (int32_t)q->slot;
	d->want[*n] = (uint8_t)want;
	d->owner[*n] = q;
	(*n)++;
}

/* Run the n entries gathered (their hidden inputs in d->hid); a wanted
 * row picks its sequence's draft and keeps the module's output as the
 * sequence's next hidden input. */
static int pass(mtp *d, size_t n, ds_err *err)
{
	ds_batch b = { .n = n, .token = d->tok, .pos = d->pos, .seq = d->seq,
		       .logits = d->want };
	size_t i, o = 0;

	if (n == 0)
		return 0;
	if (ds_fwd_mtp(d->f, &d->kv, &b, d->hid, err))
		return ds_err_prefix(err, "MTP module");
	for (i = 0; i < n; i++) {
		ds_spec_seq *q = d->owner[i];
		uint32_t row = (uint32_t)i;

		if (!d->want[i])
			continue;
		if (ds_spec_pick_draft(&d->slots[q->slot], q, ds_fwd_logits_mut(d->f, o++),
				       d->n_vocab, d->n_vocab, 0, err))
			return -1;
		ds_fwd_hidden(d->f, &row, 1, d->chain + (size_t)q->slot * d->H);
	}
	return 0;
}

/* Run the gathered entries when the batch is full. */
static int room(mtp *d, size_t *n, ds_err *err)
{
	if (*n < d->max_batch)
		return 0;
	if (pass(d, *n, err))
		return -1;
	*n = 0;
	return 0;
}

/* Where the sequence's new rows start against what the module holds:
 * the exact rows of its cache, then its pending ones.  Rows chained past
 * them (drafts of the step before) or pending past fed0 are dropped;
 * fed0 beyond them is a gap. */
static int align(mtp *d, ds_spec_seq *q)
{
	uint32_t sl = q->slot, len = d->kv.len[sl];

	if (q->fed0 > (size_t)len + d->n_pend[sl])
		return -1;
	if (q->fed0 < len) {
		ds_kvcache_seq_keep(&d->kv, sl, (uint32_t)q->fed0);
		d->n_pend[sl] = 0;
	} else {
		d->n_pend[sl] = (uint32_t)(q->fed0 - len);
	}
	return 0;
}

/* Pending entry i of a slot: its index into pend_tok (pend_h's rows). */
static size_t pend_at(uint32_t slot, uint32_t i)
{
	return (size_t)slot * PEND + i;
}

/* The target's hidden row of position j of the step's kept tokens. */
static void kept_row(const ds_fwd *target, const ds_spec_seq *q, size_t j, float *dst)
{
	uint32_t row = q->row0 + (uint32_t)(j - q->fed0);

	ds_fwd_hidden(target, &row, 1, dst);
}

/* Keep the sequence's new rows pending: it wants no drafts and they fit. */
static int defer(mtp *d, const ds_fwd *target, const ds_spec_seq *q)
{
	uint32_t sl = q->slot, np = d->n_pend[sl];
	size_t j;

	if (q->k > 0 || q->n_final - q->fed0 > PEND - np)
		return 0;
	for (j = q->fed0; j < q->n_final; j++, np++) {
		kept_row(target, q, j, d->pend_h + pend_at(sl, np) * d->H);
		d->pend_tok[pend_at(sl, np)] = q->tok[j + 1];
	}
	d->n_pend[sl] = np;
	return 1;
}

/* The sequence's pending rows, then the rows the target kept this step,
 * into the gathered entries (passes run as the batch fills). */
static int gather(mtp *d, const ds_fwd *target, ds_spec_seq *q, size_t *n,
		  ds_err *err)
{
	uint32_t sl = q->slot, i, len = d->kv.len[sl];
	size_t j;

	for (i = 0; i < d->n_pend[sl]; i++) {
		if (room(d, n, err))
			return -1;
		memcpy(d->hid + *n * d->H, d->pend_h + pend_at(sl, i) * d->H,
		       d->H * sizeof *d->hid);
		put(d, n, q, d->pend_tok[pend_at(sl, i)], len + i, 0);
	}
	d->n_pend[sl] = 0;
	for (j = q->fed0; j < q->n_final; j++) {
		if (room(d, n, err))
			return -1;
		kept_row(target, q, j, d->hid + *n * d->H);
		put(d, n, q, q->tok[j + 1], j, j + 1 == q->n_final && q->k > 0);
	}
	return 0;
}

/* The positions the target kept, each with its hidden row and the token
 * after it, in passes of at most max_batch entries (or pending). */
static int catch_up(mtp *d, const ds_fwd *target, ds_spec_seq *const *seqs,
		    size_t n_seq, ds_err *err)
{
	size_t n = 0, i;

	for (i = 0; i < n_seq; i++) {
		ds_spec_seq *q = seqs[i];

		q->n_draft = 0;
		/* the module's rows need the target's hidden rows of the same
		 * pass: positions fed before the slot was ours have none */
		if (!d->gap[q->slot] && align(d, q))
			d->gap[q->slot] = 1;
		if (d->gap[q->slot]) {
			q->k = 0;
			continue;
		}
		if (defer(d, target, q))
			continue;
		if (gather(d, target, q, &n, err))
			return -1;
	}
	return pass(d, n, err);
}

static int mtp_propose(ds_drafter *dr, const ds_fwd *target,
		       ds_spec_seq *const *seqs, size_t n_seq, ds_err *err)
{
	mtp *d = (mtp *)dr;
	size_t i, n;
	uint32_t r;

	if (catch_up(d, target, seqs, n_seq, err))
		return -1;
	for (r = 1; r < DS_SPEC_MAX_K; r++) {
		n = 0;
		for (i = 0; i < n_seq; i++) {
			ds_spec_seq *q = seqs[i];

			if (q->k <= r || q->n_draft != r)
				continue;
			memcpy(d->hid + n * d->H, d->chain + (size_t)q->slot * d->H,
			       d->H * sizeof *d->hid);
			put(d, &n, q, q->draft[r - 1], q->n_final - 1 + r, 1);
		}
		if (n == 0)
			break;
		if (pass(d, n, err))
			return -1;
	}
	return 0;
}

static void mtp_release(ds_drafter *dr, uint32_t slot)
{
	mtp *d = (mtp *)dr;

	ds_kvcache_seq_keep(&d->kv, slot, 0);
	ds_spec_pick_release(&d->slots[slot]);
	d->gap[slot] = 0;
	d->n_pend[slot] = 0;
}

static void mtp_free(ds_drafter *dr)
{
	mtp *d = (mtp *)dr;
	uint32_t i;

	for (i = 0; d->slots && i < d->kv.n_slot; i++)
		ds_spec_pick_free(&d->slots[i]);
	free(d->slots);
	free(d->gap);
	free(d->pend_h);
	free(d->pend_tok);
	free(d->n_pend);
	free(d->hid);
	free(d->chain);
	free(d->tok);
	free(d->pos);
	free(d->seq);
	free(d->want);
	free(d->owner);
	if (d->have_kv)
		ds_kvcache_free(&d->kv);
	ds_fwd_free(d->f);
	free(d);
}

static int bufs(mtp *d, uint32_t n_slot, ds_err *err)
{
	size_t n = d->max_batch;

	d->hid = ds_calloc(n, d->H * sizeof *d->hid, err);
	d->chain = ds_calloc(n_slot, d->H * sizeof *d->chain, err);
	d->tok = ds_calloc(n, sizeof *d->tok, err);
	d->pos = ds_calloc(n, sizeof *d->pos, err);
	d->seq = ds_calloc(n, sizeof *d->seq, err);
	d->want = ds_calloc(n, 1, err);
	d->owner = ds_calloc(n, sizeof *d->owner, err);
	d->slots = ds_calloc(n_slot, sizeof *d->slots, err);
	d->gap = ds_calloc(n_slot, 1, err);
	d->pend_h = ds_calloc((size_t)n_slot * PEND, d->H * sizeof *d->pend_h, err);
	d->pend_tok = ds_calloc((size_t)n_slot * PEND, sizeof *d->pend_tok, err);
	d->n_pend = ds_calloc(n_slot, sizeof *d->n_pend, err);
	return d->hid && d->chain && d->tok && d->pos && d->seq &&
	       d->want && d->owner && d->slots && d->gap && d->pend_h &&
	       d->pend_tok && d->n_pend ? 0 : -1;
}

int ds_mtp_open(ds_drafter **out, const ds_mtp_opts *o, ds_err *err)
{
	mtp *d = ds_calloc(1, sizeof *d, err);
	ds_fwd_opts fo = { .max_batch = o->max_batch, .mtp = 1, .draft_head = 1 };
	ds_hparams one;

	*out = NULL;
	if (d == NULL)
		return -1;
	d->base = (ds_drafter){ .name = "mtp", .propose = mtp_propose,
				.release = mtp_release, .free = mtp_free };
	d->max_batch = o->max_batch;
	d->H = o->m->hp.n_embd;
	d->n_vocab = o->m->hp.n_vocab;
	/* the module's cache: one layer */
	one = o->m->hp;
	one.n_layer = 1;
	if (ds_fwd_init(&d->f, o->m, o->pool, &fo, err) ||
	    ds_kvcache_init(&d->kv, &one, o->n_slot, o->n_ctx, o->kv_type, err)) {
		mtp_free(&d->base);
		return -1;
	}
	d->have_kv = 1;
	{
		ds_fwd_info fi;

		ds_fwd_get_info(d->f, &fi);
		d->base.active_bytes = fi.active_bytes;
	}
	if (bufs(d, o->n_slot, err)) {
		mtp_free(&d->base);
		return -1;
	}
	*out = &d->base;
	return 0;
}
