/*
 * draft.c - drafts from a second, smaller model of the same vocabulary
 * (drafter.h), e.g. R1-Distill-Qwen-1.5B for the 7B, 14B and 32B.
 *
 * The draft model keeps a cache of its own, one slot per target slot.
 * Each call first feeds it what it lacks of a drafting sequence (the
 * positions past the longest prefix it holds that is still the
 * sequence: drafts it fed that the target rejected are overwritten),
 * the unfed last token included, whose logits give the first draft; then
 * k - 1 rounds of one entry per sequence, each draft fed to give the
 * next.  All drafting sequences share each pass.
 *
 * A greedy request gets the draft model's argmax (under the request's
 * repetition penalty); a sampled one a token drawn from the draft model's
 * distribution under the request's chain, which is then the q of the
 * acceptance rule.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "drafter.h"
#include "tokenizer/tokenizer.h"

typedef struct dmodel {
	ds_drafter base;
	ds_model m;
	ds_placement pl;
	int have_m, have_kv;
	ds_fwd *f;
	ds_kvcache kv;
	uint32_t n_vocab, target_vocab, max_batch;
	int point;                /* argmax drafts only */
	int32_t *tok, *pos, *seq;
	uint8_t *want;
	ds_spec_seq **owner;      /* [max_batch] the sequence of a wanted row */
	ds_spec_pick *slots;       /* [n_slot] */
} dmodel;

static int pick(dmodel *d, ds_spec_seq *q, float *logits, ds_err *err)
{
	return ds_spec_pick_draft(&d->slots[q->slot], q, logits, d->n_vocab,
				  d->target_vocab, d->point, err);
}

/* ---- passes -------------------------------------------------------------------------- */

/* Run the n entries gathered; the wanted rows pick their drafts. */
static int pass(dmodel *d, size_t n, ds_err *err)
{
	ds_batch b = { .n = n, .token = d->tok, .pos = d->pos, .seq = d->seq,
		       .logits = d->want };
	size_t i, o = 0;

	if (n == 0)
		return 0;
	if (ds_fwd_decode(d->f, &d->kv, &b, err))
		return ds_err_prefix(err, "draft model");
	for (i = 0; i < n; i++)
		if (d->want[i] && pick(d, d->owner[i], ds_fwd_logits_mut(d->f, o++), err))
			return -1;
	return 0;
}

static void put(dmodel *d, size_t *n, ds_spec_seq *q, int32_t tok, size_t pos,
		int want)
{
	d->tok[*n] = tok;
	d->pos[*n] = (int32_t)pos;
	d->seq[*n] = (int32_t)q->slot;
	d->want[*n] = (uint8_t)want;
	d->owner[*n] = q;
	(*n)++;
}

/* What the draft cache lacks of each sequence, up to its last token,
 * in batches of max_batch entries. */
static int catch_up(dmodel *d, ds_spec_seq *const *seqs, size_t n_seq, ds_err *err)
{
	size_t n = 0, i, p;

	for (i = 0; i < n_seq; i++) {
		ds_spec_seq *q = seqs[i];
		size_t held = d->kv.len[q->slot];

		if (q->k == 0)
			continue;
		q->n_draft = 0;
		/* the longest prefix still the sequence's: the drafts past
		 * the target's final positions were not all kept */
		p = held < q->n_final ? held : q->n_final;
		for (; p < q->n_tok; p++) {
			if (n == d->max_batch) {
				if (pass(d, n, err))
					return -1;
				n = 0;
			}
			put(d, &n, q, q->tok[p], p, p + 1 == q->n_tok);
		}
	}
	return pass(d, n, err);
}

static int draft_propose(ds_drafter *dr, const ds_fwd *target,
			 ds_spec_seq *const *seqs, size_t n_seq, ds_err *err)
{
	dmodel *d = (dmodel *)dr;
	size_t i, n;
	uint32_t r;

	(void)target;
	if (catch_up(d, seqs, n_seq, err))
		return -1;
	for (r = 1; r < DS_SPEC_MAX_K; r++) {
		n = 0;
		for (i = 0; i < n_seq; i++) {
			ds_spec_seq *q = seqs[i];

			if (q->k > r && q->n_draft == r)
				put(d, &n, q, q->draft[r - 1], q->n_tok - 1 + r, 1);
		}
		if (n == 0)
			break;
		if (pass(d, n, err))
			return -1;
	}
	return 0;
}

/* ---- life cycle ------------------------------------------------------------------------ */

static void draft_release(ds_drafter *dr, uint32_t slot)
{
	dmodel *d = (dmodel *)dr;

	ds_kvcache_seq_keep(&d->kv, slot, 0);
	ds_spec_pick_release(&d->slots[slot]);
}

static void draft_free(ds_drafter *dr)
{
	dmodel *d = (dmodel *)dr;
	uint32_t i;

	for (i = 0; d->slots && i < d->kv.n_slot; i++)
		ds_spec_pick_free(&d->slots[i]);
	free(d->slots);
	free(d->tok);
	free(d->pos);
	free(d->seq);
	free(d->want);
	free(d->owner);
	if (d->have_kv)
		ds_kvcache_free(&d->kv);
	ds_fwd_free(d->f);
	if (d->have_m)
		ds_model_free(&d->m);
	ds_placement_free(&d->pl);
	free(d);
}

/* DIR/tokenizer.bin loaded into *tok, or *tok NULL when there is none. */
static int tok_of(const char *dir, ds_tok **tok, ds_err *err)
{
	char *path = dir ? ds_path_join(dir, "tokenizer.bin") : NULL;
	int rc = 0;

	*tok = NULL;
	if (dir && path == NULL)
		return ds_errf(err, "out of memory");
	if (path && access(path, F_OK) == 0)
		rc = ds_tok_load(tok, path, err);
	free(path);
	return rc;
}

/* Every id the same piece in both tokenizers. */
static int same_pieces(const ds_tok *a, const ds_tok *b, const ds_draft_opts *o,
		       ds_err *err)
{
	uint32_t n = ds_tok_n_vocab(a), i;

	if (n != ds_tok_n_vocab(b))
		return ds_errf(err, "%s: the draft model's tokenizer has %u tokens, "
			       "%s's %u: drafts need the same vocabulary", o->dir, n,
			       o->target_dir, ds_tok_n_vocab(b));
	for (i = 0; i < n; i++) {
		size_t la, lb;
		const char *pa = ds_tok_piece(a, (int32_t)i, &la);
		const char *pb = ds_tok_piece(b, (int32_t)i, &lb);

		if ((pa == NULL) != (pb == NULL) || la != lb || (pa && memcmp(pa, pb, la)))
			return ds_errf(err, "%s: token %u of the draft model's tokenizer "
				       "differs from %s's: drafts need the same "
				       "vocabulary", o->dir, i, o->target_dir);
	}
	return 0;
}

/* The same vocabulary: both tokenizers give every id the same piece (the
 * models' vocabulary sizes may differ by padding), or where either model
 * has none, the same vocabulary size. */
static int same_vocab(dmodel *d, const ds_draft_opts *o, ds_err *err)
{
	ds_tok *tok = NULL, *own = NULL;
	const ds_tok *target = o->target_tok;
	int rc = 0;

	if (tok_of(o->dir, &tok, err) ||
	    (target == NULL && tok_of(o->target_dir, &own, err))) {
		if (tok)
			ds_tok_free(tok);
		return -1;
	}
	if (target == NULL)
		target = own;
	if (tok && target)
		rc = same_pieces(tok, target, o, err);
	else if (d->m.hp.n_vocab != o->target_vocab)
		rc = ds_errf(err, "%s: the draft model's vocabulary has %u tokens, "
			     "%s's %u: drafts need the same vocabulary", o->dir,
			     d->m.hp.n_vocab, o->target_dir, o->target_vocab);
	if (tok)
		ds_tok_free(tok);
	if (own)
		ds_tok_free(own);
	return rc;
}

static int bufs(dmodel *d, ds_err *err)
{
	size_t n = d->max_batch;

	d->tok = ds_calloc(n, sizeof *d->tok, err);
	d->pos = ds_calloc(n, sizeof *d->pos, err);
	d->seq = ds_calloc(n, sizeof *d->seq, err);
	d->want = ds_calloc(n, 1, err);
	d->owner = ds_calloc(n, sizeof *d->owner, err);
	d->slots = ds_calloc(d->kv.n_slot, sizeof *d->slots, err);
	return d->tok && d->pos && d->seq && d->want && d->owner && d->slots ? 0 : -1;
}

int ds_draft_open(ds_drafter **out, const ds_draft_opts *o, ds_err *err)
{
	dmodel *d = ds_calloc(1, sizeof *d, err);
	char warn[256];
	ds_fwd_opts fo;

	*out = NULL;
	if (d == NULL)
		return -1;
	d->base = (ds_drafter){ .name = "draft", .propose = draft_propose,
				.release = draft_release, .free = draft_free };
	d->max_batch = o->n_slot > 256 ? o->n_slot : 256;
	fo = (ds_fwd_opts){ .max_batch = d->max_batch };
	d->target_vocab = o->target_vocab;
	d->point = o->point;
	d->have_m = 1;
	if (ds_model_open(&d->m, o->pool, o->dir, &o->load, &d->pl, warn, sizeof warn, err) ||
	    same_vocab(d, o, err) ||
	    ds_fwd_init(&d->f, &d->m, o->pool, &fo, err) ||
	    ds_kvcache_init(&d->kv, &d->m.hp, o->n_slot, o->n_ctx, o->kv_type, err)) {
		draft_free(&d->base);
		return -1;
	}
	d->have_kv = 1;
	d->n_vocab = d->m.hp.n_vocab;
	{
		ds_fwd_info fi;

		ds_fwd_get_info(d->f, &fi);
		d->base.active_bytes = fi.active_bytes;
	}
	if (bufs(d, err)) {
		draft_free(&d->base);
		return -1;
	}
	*out = &d->base;
	return 0;
}
