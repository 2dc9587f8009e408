/*
 * sched.c - continuous batching (sched.h).
 *
 * The lock guards the queue, the slot table and the cancel flags; the
 * driver holds it only to admit and collect, never across a forward pass
 * or a callback, so submitters wait microseconds.
 */
#define _GNU_SOURCE     /* memmem */
#include "sched.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "gstate.h"
#include "spec/drafter.h"

/* Verifying a draft: an entry more in a batch that streams the weights
 * once, relative to a plain step (the adaptive K's prior; drafters that
 * run a model add that model's share, ds_drafter.active_bytes) */
#define SPEC_COST 0.15

typedef struct sreq {
	uint64_t id;
	int32_t *prompt;
	size_t n_prompt;
	int64_t n_predict;
	int32_t *stop_ids;
	size_t n_stop;
	int all_logits;
	ds_req_cb cb;
	ds_sampler smp;
	ds_req_stats st;
	int cancel;                /* under the lock */
	int slot;                  /* -1 while queued */
	size_t n_fed;              /* prompt tokens in the cache */
	size_t n_past;             /* positions in the cache */
	int64_t n_gen;             /* tokens sampled */
	int32_t next;              /* sampled, to be fed */
	int has_next;
	int done;                  /* ended in this step */
	struct sreq *link;         /* queue */
	/* the sequence: the prompt, then every token sampled (next last) */
	int32_t *hist;
	size_t n_hist, cap_hist;
	/* speculative decoding */
	int spec;                  /* drafts wanted for this request */
	double sp_acc, sp_rej;     /* decayed counts of drafts kept and
				      rejected: the acceptance rate */
	uint32_t sp_idle;          /* steps at K 0 since the last try */
	uint64_t sp_rng;           /* the drafter's generator */
	ds_spec_seq sq;            /* the drafts for the next step */
	int fed;                   /* entries in this step: */
	size_t fed0;               /* the first's position */
	uint32_t row0;             /* and batch row */
	/* the prompt cache */
	size_t keep;               /* the slot's kept positions it starts from */
	size_t n_cached;           /* positions taken, not computed */
	int prepared;              /* its slot is set up */
	struct sreq *fresh;        /* admitted in this step, to set up */
	uint64_t wait_id;          /* the older request computing its prefix */
	int wait_slot;
	size_t wait_len;           /* up to there */
	ds_gstate g;               /* its grammar (sched.h ds_req.grammar) */
} sreq;

/* One entry of the batch that asked for logits. */
typedef struct bout {
	sreq *r;
	size_t pos;
	int sample;                /* a token is sampled from it */
	uint32_t n_ver;            /* this entry and its drafts' (verified
				      together): 1 + the drafts */
} bout;

struct ds_sched {
	ds_fwd *f;
	ds_kvcache *kv;
	uint32_t n_batch, n_vocab;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	sreq *qhead, *qtail;
	size_t n_queued, n_running;
	sreq **slots;              /* [n_slot] */
	uint64_t next_id;
	int stopped;
	/* the batch being built */
	int32_t *btok, *bpos, *bseq;
	uint8_t *bwant, *bprompt;
	bout *bo;
	size_t n_bo;
	uint8_t *taken;            /* [n_slot] had a prompt chunk this step */
	/* speculative decoding */
	ds_drafter *drafter;
	uint32_t spec_k;           /* fixed K, or 0: adaptive */
	double draft_cost;         /* a draft's cost relative to a step */
	ds_spec_seq **sqs;         /* [n_slot] the drafter's call */
	/* the prompt cache (sched.h): what each slot holds */
	ds_pcache *pc;
	int32_t *stok;             /* [n_slot][n_ctx]: the tokens of its rows */
	double *slot_t;            /* when its last request ended */
	uint8_t *dirty;            /* it holds rows not offered to pc yet */
};

#define B DS_PCACHE_BLOCK

static int32_t *stok(const ds_sched *s, uint32_t slot)
{
	return s->stok + (size_t)slot * s->kv->n_ctx;
}

const char *ds_finish_name(enum ds_finish f)
{
	switch (f) {
	case DS_FINISH_LENGTH: return "length";
	case DS_FINISH_STOP: return "stop";
	case DS_FINISH_CANCEL: return "cancelled";
	case DS_FINISH_ERROR: return "error";
	}
	return "?";
}

/* ---- life cycle --------------------------------------------------------------- */

int ds_sched_init(ds_sched **out, ds_fwd *f, ds_kvcache *kv,
		  const ds_sched_opts *opts, ds_err *err)
{
	ds_sched *s = ds_calloc(1, sizeof *s, err);
	ds_fwd_info fi;
	uint32_t need;

	*out = NULL;
	if (s == NULL)
		return -1;
	ds_fwd_get_info(f, &fi);
	s->f = f;
	s->kv = kv;
	s->n_vocab = fi.n_vocab;
	s->n_batch = opts && opts->n_batch ? opts->n_batch : fi.max_batch;
	if (s->n_batch > fi.max_batch)
		s->n_batch = fi.max_batch;
	if (s->n_batch < kv->n_slot + 1 && fi.max_batch >= kv->n_slot + 1)
		s->n_batch = kv->n_slot + 1;
	need = ds_sched_batch_need(kv->n_slot, opts && opts->drafter,
				   opts ? opts->spec_k : 0);
	if (s->n_batch < need && fi.max_batch >= need)
		s->n_batch = need;
	if (s->n_batch < need || (opts && opts->spec_k > DS_SPEC_MAX_K)) {
		ds_errf(err, "scheduler: batches of %u cannot hold a decode step "
			"of %u slots (%u entries)", s->n_batch, kv->n_slot, need);
		free(s);
		return -1;
	}
	s->drafter = opts ? opts->drafter : NULL;
	s->spec_k = opts ? opts->spec_k : 0;
	/* verifying a draft, plus making it: its pass's weight bytes over
	 * the target's (decode streams weights: bytes are its time) */
	s->draft_cost = SPEC_COST + (s->drafter && fi.active_bytes ?
		(double)s->drafter->active_bytes / (double)fi.active_bytes : 0);
	s->next_id = 1;
	s->slots = ds_calloc(kv->n_slot, sizeof *s->slots, err);
	s->btok = ds_calloc(s->n_batch, sizeof *s->btok, err);
	s->bpos = ds_calloc(s->n_batch, sizeof *s->bpos, err);
	s->bseq = ds_calloc(s->n_batch, sizeof *s->bseq, err);
	s->bwant = ds_calloc(s->n_batch, 1, err);
	s->bprompt = ds_calloc(s->n_batch, 1, err);
	s->bo = ds_calloc(s->n_batch, sizeof *s->bo, err);
	s->taken = ds_calloc(kv->n_slot, 1, err);
	s->sqs = ds_calloc(kv->n_slot, sizeof *s->sqs, err);
	if (opts && opts->cache) {
		s->pc = opts->cache;
		s->stok = ds_calloc((size_t)kv->n_slot * kv->n_ctx, sizeof *s->stok, err);
		s->slot_t = ds_calloc(kv->n_slot, sizeof *s->slot_t, err);
		s->dirty = ds_calloc(kv->n_slot, 1, err);
	}
	if (!s->slots || !s->btok || !s->bpos || !s->bseq || !s->bwant || !s->bprompt || !s->bo ||
	    !s->taken || !s->sqs || (s->pc && (!s->stok || !s->slot_t || !s->dirty))) {
		free(s->sqs);
		free(s->stok);
		free(s->slot_t);
		free(s->dirty);
		free(s->taken);
		free(s->slots);
		free(s->btok);
		free(s->bpos);
		free(s->bseq);
		free(s->bwant);
		free(s->bprompt);
		free(s->bo);
		free(s);
		return -1;
	}
	pthread_mutex_init(&s->mu, NULL);
	pthread_cond_init(&s->cv, NULL);
	*out = s;
	return 0;
}

uint32_t ds_sched_batch_need(uint32_t n_slot, int spec, uint32_t spec_k)
{
	return spec ? n_slot * (1 + (spec_k ? spec_k : DS_SPEC_K_AUTO)) : n_slot;
}

static void req_free(sreq *r)
{
	ds_gstate_free(&r->g);
	ds_sampler_free(&r->smp);
	free(r->hist);
	free(r->prompt);
	free(r->stop_ids);
	free(r);
}

/* The end of r (driver thread, lock not held). */
static void finish(ds_sched *s, sreq *r, enum ds_finish why)
{
	r->st.t_end = ds_now_s();
	r->st.completion_tokens = (size_t)r->n_gen;
	r->st.prompt_tokens = r->n_fed;
	r->st.cached_tokens = r->n_cached;
	r->st.mask_steps = r->g.steps;
	r->st.mask_s = r->g.secs;
	if (r->slot >= 0) {
		if (s->drafter)
			s->drafter->release(s->drafter, (uint32_t)r->slot);
		/* with the cache the slot keeps its rows for the next request;
		 * after a failed forward pass they are not to be trusted */
		if (s->pc == NULL || why == DS_FINISH_ERROR) {
			ds_kvcache_seq_keep(s->kv, (uint32_t)r->slot, 0);
			if (s->pc)
				s->dirty[r->slot] = 0;
		}
		if (s->pc)
			s->slot_t[r->slot] = ds_now_s();
		pthread_mutex_lock(&s->mu);
		s->slots[r->slot] = NULL;
		s->n_running--;
		pthread_mutex_unlock(&s->mu);
	}
	if (r->cb.on_done)
		r->cb.on_done(r->cb.user, why, &r->st);
	req_free(r);
}

void ds_sched_free(ds_sched *s)
{
	uint32_t i;
	sreq *r;

	if (s == NULL)
		return;
	for (i = 0; i < s->kv->n_slot; i++)
		if (s->slots[i] != NULL)
			finish(s, s->slots[i], DS_FINISH_CANCEL);
	while ((r = s->qhead) != NULL) {
		s->qhead = r->link;
		finish(s, r, DS_FINISH_CANCEL);
	}
	/* what the slots hold goes into a cache that outlives the process */
	for (i = 0; s->pc && ds_pcache_persistent(s->pc) && i < s->kv->n_slot; i++)
		if (s->dirty[i])
			ds_pcache_store(s->pc, s->kv, i, stok(s, i), s->kv->len[i]);
	free(s->stok);
	free(s->slot_t);
	free(s->dirty);
	pthread_mutex_destroy(&s->mu);
	pthread_cond_destroy(&s->cv);
	free(s->slots);
	free(s->btok);
	free(s->bpos);
	free(s->bseq);
	free(s->bwant);
	free(s->bprompt);
	free(s->bo);
	free(s->taken);
	free(s->sqs);
	free(s);
}

/* ---- submitting and cancelling (any thread) --------------------------------------- */

static sreq *req_make(ds_sched *s, const ds_req *q, ds_err *err)
{
	sreq *r;
	size_t i;

	if (q->n_prompt == 0)
		return ds_errf(err, "empty prompt"), NULL;
	if (q->n_prompt > s->kv->n_ctx)
		return ds_errf(err, "prompt of %zu tokens is longer than the "
			       "context (%u)", q->n_prompt, s->kv->n_ctx), NULL;
	for (i = 0; i < q->n_prompt; i++)
		if (q->prompt[i] < 0 || (uint32_t)q->prompt[i] >= s->n_vocab)
			return ds_errf(err, "prompt token %zu: id %d is not below "
				       "the vocabulary size %u", i + 1,
				       q->prompt[i], s->n_vocab), NULL;
	r = ds_calloc(1, sizeof *r, err);
	if (r == NULL)
		return NULL;
	r->prompt = ds_calloc(q->n_prompt, sizeof *r->prompt, err);
	r->stop_ids = ds_calloc(q->n_stop_ids + 1, sizeof *r->stop_ids, err);
	r->cap_hist = q->n_prompt + 64;
	r->hist = ds_calloc(r->cap_hist, sizeof *r->hist, err);
	if (r->prompt == NULL || r->stop_ids == NULL || r->hist == NULL ||
	    ds_sampler_init(&r->smp, &q->sp, (int)s->n_vocab, err) ||
	    ds_gstate_init(&r->g, q->grammar, q->gvocab, q->trigger, q->n_trigger,
			   err)) {
		req_free(r);
		return NULL;
	}
	memcpy(r->prompt, q->prompt, q->n_prompt * sizeof *r->prompt);
	memcpy(r->hist, q->prompt, q->n_prompt * sizeof *r->hist);
	r->n_hist = q->n_prompt;
	r->spec = s->drafter != NULL && !q->no_spec;
	/* a prior of 0.6, worth two drafts; the drafter's generator apart
	 * from the verification's, both from the seed */
	r->sp_acc = 1.2;
	r->sp_rej = 0.8;
	r->sp_rng = q->sp.seed ^ 0x5d7a1f3c9e2b4a68ull;
	if (r->sp_rng == 0)
		r->sp_rng = 1;
	if (q->n_stop_ids)
		memcpy(r->stop_ids, q->stop_ids, q->n_stop_ids * sizeof *r->stop_ids);
	r->n_prompt = q->n_prompt;
	r->n_stop = q->n_stop_ids;
	r->n_predict = q->n_predict;
	r->all_logits = q->all_logits;
	r->cb = q->cb;
	r->slot = -1;
	for (i = 0; i < q->n_prompt; i++)
		ds_sampler_accept(&r->smp, q->prompt[i]);
	r->st.t_submit = ds_now_s();
	return r;
}

int ds_sched_submit(ds_sched *s, const ds_req *q, uint64_t *id, ds_err *err)
{
	sreq *r = req_make(s, q, err);
	uint64_t rid;

	if (r == NULL)
		return -1;
	pthread_mutex_lock(&s->mu);
	/* r is the driver's once queued: it may be done and freed as soon as
	 * the lock is released, so its id is read here */
	rid = r->id = r->st.id = s->next_id++;
	if (s->qtail)
		s->qtail->link = r;
	else
		s->qhead = r;
	s->qtail = r;
	s->n_queued++;
	pthread_cond_broadcast(&s->cv);
	pthread_mutex_unlock(&s->mu);
	if (id)
		*id = rid;
	return 0;
}

int ds_sched_cancel(ds_sched *s, uint64_t id)
{
	int rc = -1;
	uint32_t i;
	sreq *r;

	pthread_mutex_lock(&s->mu);
	for (r = s->qhead; r != NULL && rc; r = r->link)
		if (r->id == id)
			r->cancel = 1, rc = 0;
	for (i = 0; i < s->kv->n_slot && rc; i++)
		if (s->slots[i] && s->slots[i]->id == id)
			s->slots[i]->cancel = 1, rc = 0;
	if (rc == 0)
		pthread_cond_broadcast(&s->cv);
	pthread_mutex_unlock(&s->mu);
	return rc;
}

size_t ds_sched_pending(ds_sched *s)
{
	size_t n;

	pthread_mutex_lock(&s->mu);
	n = s->n_queued + s->n_running;
	pthread_mutex_unlock(&s->mu);
	return n;
}

void ds_sched_counts(ds_sched *s, size_t *queued, size_t *running)
{
	pthread_mutex_lock(&s->mu);
	if (queued)
		*queued = s->n_queued;
	if (running)
		*running = s->n_running;
	pthread_mutex_unlock(&s->mu);
}

int ds_sched_wait(ds_sched *s)
{
	int go;

	pthread_mutex_lock(&s->mu);
	while (!s->stopped && s->n_queued + s->n_running == 0)
		pthread_cond_wait(&s->cv, &s->mu);
	go = !s->stopped;
	pthread_mutex_unlock(&s->mu);
	return go;
}

void ds_sched_stop(ds_sched *s)
{
	pthread_mutex_lock(&s->mu);
	s->stopped = 1;
	pthread_cond_broadcast(&s->cv);
	pthread_mutex_unlock(&s->mu);
}

/* ---- the prompt cache: where a request starts ------------------------------------ */

/* The prompt positions a request may take rather than compute: all but
 * the last, whose logits it samples from; none when it wants every
 * position's logits. */
static size_t reuse_cap(const sreq *r)
{
	return r->all_logits ? 0 : r->n_prompt - 1;
}

/* How many of a[0..n) and b[0..n) are equal from the start. */
static size_t lcp(const int32_t *a, const int32_t *b, size_t n)
{
	size_t k = 0;

	while (k < n && a[k] == b[k])
		k++;
	return k;
}

/* Slot i's rows that start r's prompt (at most cap). */
static size_t kept(const ds_sched *s, uint32_t i, const sreq *r, size_t cap)
{
	size_t n = s->kv->len[i];

	return lcp(stok(s, i), r->prompt, n < cap ? n : cap);
}

/* The free slot for r (under the lock): the one whose rows start its
 * prompt furthest when no cached blocks go further, else an empty one,
 * else the one free longest; *keep what it keeps of its rows. */
static uint32_t pick_slot(ds_sched *s, const sreq *r, size_t *keep)
{
	size_t cap = reuse_cap(r), best = 0, l;
	int64_t pick = -1, spare = -1;
	uint32_t i;

	for (i = 0; i < s->kv->n_slot; i++) {
		if (s->slots[i] != NULL)
			continue;
		if (s->pc == NULL) {
			*keep = 0;
			return i;
		}
		if ((l = kept(s, i, r, cap)) > best) {
			best = l;
			pick = i;
		}
		if (spare < 0 || (s->kv->len[spare] > 0 &&
				  (s->kv->len[i] == 0 || s->slot_t[i] < s->slot_t[spare])))
			spare = i;
	}
	DS_ASSERT(spare >= 0);
	if (pick >= 0 && best >= ds_pcache_match(s->pc, r->prompt, cap) * B) {
		*keep = best;
		return (uint32_t)pick;
	}
	*keep = kept(s, (uint32_t)spare, r, cap);
	return (uint32_t)spare;
}

/* Positions [from, to) of r's prompt copied into its slot from slot src. */
static void copy_rows(ds_sched *s, sreq *r, uint32_t src, size_t from, size_t to)
{
	uint32_t sl = (uint32_t)r->slot;

	ds_kvcache_copy(s->kv, sl, src, (uint32_t)from, (uint32_t)(to - from));
	memcpy(stok(s, sl) + from, r->prompt + from, (to - from) * sizeof *r->prompt);
	s->dirty[sl] = 1;
}

/* Another slot that holds more of r's prompt than have: its rows copied. */
static size_t copy_slots(ds_sched *s, sreq *r, size_t have, size_t cap)
{
	size_t best = have, k;
	int64_t src = -1;
	uint32_t q;

	for (q = 0; q < s->kv->n_slot; q++) {
		if ((int)q == r->slot || s->kv->len[q] <= best || cap <= best)
			continue;
		if ((k = kept(s, q, r, cap)) > best) {
			best = k;
			src = q;
		}
	}
	if (src >= 0)
		copy_rows(s, r, (uint32_t)src, have, best);
	return best;
}

/* An older running request still computing a longer common prefix:
 * r waits for it (build, catch_up). */
static void find_partner(ds_sched *s, sreq *r, size_t have, size_t cap)
{
	size_t best = have + B - 1, k, n;
	uint32_t q;

	r->wait_id = 0;
	for (q = 0; q < s->kv->n_slot; q++) {
		sreq *p = s->slots[q];

		if (p == NULL || p == r || !p->prepared || p->id > r->id ||
		    p->n_fed >= p->n_prompt)
			continue;
		n = p->n_prompt < cap ? p->n_prompt : cap;
		if (n > best && (k = lcp(p->prompt, r->prompt, n)) > best) {
			best = k;
			r->wait_id = p->id;
			r->wait_slot = (int)q;
			r->wait_len = k;
		}
	}
}

/* A request just admitted: its slot cut to what it keeps (the rest
 * stored in the cache first when it is not there yet), then filled from
 * the cache's blocks and other slots as far as they go. */
static void prepare(ds_sched *s, sreq *r)
{
	uint32_t sl = (uint32_t)r->slot;
	size_t cap = reuse_cap(r), have = r->keep, m, from;
	ds_kvcache *kv = s->kv;

	r->prepared = 1;
	if (s->pc == NULL) {
		ds_kvcache_seq_keep(kv, sl, 0);
		return;
	}
	if (have < kv->len[sl] && s->dirty[sl])
		ds_pcache_store(s->pc, kv, sl, stok(s, sl), kv->len[sl]);
	if (have < kv->len[sl])
		s->dirty[sl] = 0;
	m = ds_pcache_match(s->pc, r->prompt, cap) * B;
	from = have / B;
	if (m > have) {
		ds_kvcache_seq_keep(kv, sl, (uint32_t)(from * B));
		ds_pcache_restore(s->pc, kv, sl, r->prompt, from, m / B);
		memcpy(stok(s, sl) + from * B, r->prompt + from * B,
		       (m - from * B) * sizeof *r->prompt);
		have = m;
	} else {
		ds_kvcache_seq_keep(kv, sl, (uint32_t)have);
	}
	have = copy_slots(s, r, have, cap);
	r->n_fed = r->n_past = r->n_cached = have;
	find_partner(s, r, have, cap);
}

/* Before r's next prompt chunk: what its partner has computed of their
 * common prefix is copied; 0 while the partner is still at it. */
static int catch_up(ds_sched *s, sreq *r)
{
	sreq *p = r->wait_id ? s->slots[r->wait_slot] : NULL;
	size_t done;

	if (r->wait_id == 0)
		return 1;
	if (p == NULL || p->id != r->wait_id) {
		r->wait_id = 0;         /* gone: r computes the rest */
		return 1;
	}
	done = s->kv->len[p->slot] < r->wait_len ? s->kv->len[p->slot] : r->wait_len;
	if (done > r->n_fed) {
		copy_rows(s, r, (uint32_t)p->slot, r->n_fed, done);
		r->n_cached += done - r->n_fed;
		r->n_fed = r->n_past = done;
	}
	if (done < r->wait_len)
		return 0;
	r->wait_id = 0;
	return 1;
}

/* ---- a step -------------------------------------------------------------------------- */

/* Cancelled requests out, queued ones into free slots; the cancelled are
 * returned as a list (ended by the caller, outside the lock), the admitted
 * in *fresh, in their order (set up by the caller: prepare). */
static sreq *admit(ds_sched *s, sreq **fresh)
{
	sreq *gone = NULL, **pp, *r, **tail = fresh;
	size_t free_slots;
	uint32_t i;

	*fresh = NULL;
	pthread_mutex_lock(&s->mu);
	for (pp = &s->qhead; (r = *pp) != NULL;) {
		if (r->cancel) {
			*pp = r->link;
			s->n_queued--;
			r->link = gone;
			gone = r;
		} else {
			pp = &r->link;
		}
	}
	s->qtail = NULL;
	for (r = s->qhead; r != NULL; r = r->link)
		s->qtail = r;
	free_slots = s->kv->n_slot - s->n_running;
	for (; free_slots > 0 && s->qhead != NULL; free_slots--) {
		r = s->qhead;
		s->qhead = r->link;
		if (s->qhead == NULL)
			s->qtail = NULL;
		s->n_queued--;
		s->n_running++;
		r->link = NULL;
		i = pick_slot(s, r, &r->keep);
		r->slot = (int)i;
		r->st.t_start = ds_now_s();
		s->slots[i] = r;
		*tail = r;
		tail = &r->fresh;
	}
	pthread_mutex_unlock(&s->mu);
	return gone;
}

static void end_cancelled(ds_sched *s, sreq *gone)
{
	uint32_t i;
	int c;

	while (gone != NULL) {
		sreq *r = gone;

		gone = r->link;
		finish(s, r, DS_FINISH_CANCEL);
	}
	for (i = 0; i < s->kv->n_slot; i++) {
		sreq *r = s->slots[i];

		if (r == NULL)
			continue;
		pthread_mutex_lock(&s->mu);
		c = r->cancel;
		pthread_mutex_unlock(&s->mu);
		if (c)
			finish(s, r, DS_FINISH_CANCEL);
	}
}

/* prompt: the token is the prompt's (ds_batch.prompt), not generated. */
static void add_entry(ds_sched *s, size_t *n, sreq *r, int32_t tok,
		      size_t pos, int want, int sample, int prompt)
{
	s->btok[*n] = tok;
	s->bpos[*n] = (int32_t)pos;
	s->bseq[*n] = r->slot;
	s->bwant[*n] = (uint8_t)want;
	s->bprompt[*n] = (uint8_t)prompt;
	if (s->pc) {
		stok(s, (uint32_t)r->slot)[pos] = tok;
		s->dirty[r->slot] = 1;
	}
	if (want)
		s->bo[s->n_bo++] = (bout){ r, pos, sample, 1 };
	(*n)++;
}

/* A decoding sequence's entries: its token, then its drafts at the
 * positions after it, all with logits, verified as one group. */
static void add_decode(ds_sched *s, size_t *n, sreq *r)
{
	uint32_t d;

	r->fed = 1;
	r->fed0 = r->n_past;
	r->row0 = (uint32_t)*n;
	add_entry(s, n, r, r->next, r->n_past, 1, 1, 0);
	s->bo[s->n_bo - 1].n_ver = 1 + r->sq.n_draft;
	for (d = 0; d < r->sq.n_draft; d++)
		add_entry(s, n, r, r->sq.draft[d], r->n_past + 1 + d, 1, 0, 0);
	r->has_next = 0;
}

/* The prefilling request admitted first that has not had a chunk yet. */
static sreq *next_prefill(ds_sched *s, const uint8_t *taken)
{
	sreq *best = NULL;
	uint32_t i;

	for (i = 0; i < s->kv->n_slot; i++) {
		sreq *r = s->slots[i];

		if (r && !taken[i] && r->n_fed < r->n_prompt &&
		    (best == NULL || r->id < best->id))
			best = r;
	}
	return best;
}

/* Decode entries first, then prompt chunks; returns the entry count. */
static size_t build(ds_sched *s, uint8_t *taken)
{
	size_t n = 0, p;
	uint32_t i;
	sreq *r;

	s->n_bo = 0;
	for (i = 0; i < s->kv->n_slot; i++) {
		r = s->slots[i];
		if (r && r->has_next)
			add_decode(s, &n, r);
	}
	while (n < s->n_batch && (r = next_prefill(s, taken)) != NULL) {
		size_t m;

		taken[r->slot] = 1;
		if (s->pc && !catch_up(s, r))
			continue;           /* an older request computes its prefix */
		r->fed = 1;
		r->fed0 = r->n_fed;
		r->row0 = (uint32_t)n;
		m = r->n_prompt - r->n_fed;
		if (m > s->n_batch - n)
			m = s->n_batch - n;
		for (p = r->n_fed; p < r->n_fed + m; p++) {
			int last = p + 1 == r->n_prompt;

			add_entry(s, &n, r, r->prompt[p], p, r->all_logits || last,
				  last, 1);
		}
		r->n_fed += m;
		r->n_past = r->n_fed;
	}
	return n;
}

static int is_stop(const sreq *r, int32_t t)
{
	size_t i;

	for (i = 0; i < r->n_stop; i++)
		if (r->stop_ids[i] == t)
			return 1;
	return 0;
}

/* t joins the sequence (the history the drafters read). */
static int hist_push(sreq *r, int32_t t)
{
	if (ds_grow((void **)&r->hist, &r->cap_hist, r->n_hist + 1, sizeof *r->hist))
		return -1;
	r->hist[r->n_hist++] = t;
	return 0;
}

/* Token t, chosen from the logits of position pos: the request's next
 * state. */
static void take(ds_sched *s, sreq *r, size_t pos, int32_t t)
{
	ds_sampler_accept(&r->smp, t);
	r->n_gen++;
	if (hist_push(r, t)) {
		r->done = 1 + DS_FINISH_ERROR;
	} else if (is_stop(r, t)) {
		r->done = 1 + DS_FINISH_STOP;
	} else if (ds_gstate_take(&r->g, t)) {
		r->done = 1 + DS_FINISH_ERROR;
	} else if (r->cb.on_token && r->cb.on_token(r->cb.user, t)) {
		r->done = 1 + DS_FINISH_STOP;
	} else if (ds_gstate_done(&r->g)) {
		r->done = 1 + DS_FINISH_STOP;   /* the grammar's text is whole */
	} else if ((r->n_predict > 0 && r->n_gen >= r->n_predict) ||
		   pos + 1 >= s->kv->n_ctx) {
		r->done = 1 + DS_FINISH_LENGTH;
	} else {
		r->next = t;
		r->has_next = 1;
		r->n_past = pos + 1;
	}
}

/* A token from the logits of position pos. */
static void sample(ds_sched *s, sreq *r, size_t pos, float *logits)
{
	if (pos + 1 == r->n_prompt)
		r->st.t_prompt = ds_now_s();
	if (r->n_predict == 0) {
		r->done = 1 + DS_FINISH_LENGTH;
		return;
	}
	if (ds_gstate_mask(&r->g, logits, s->n_vocab, r->stop_ids, r->n_stop)) {
		r->done = 1 + DS_FINISH_ERROR;
		return;
	}
	take(s, r, pos, ds_sampler_sample(&r->smp, logits));
}

/* ---- speculative decoding ----------------------------------------------------------- */

#define SPEC_DECAY 0.8     /* weight of the past in the acceptance rate */
/* steps at K 0 before a draft is tried: odd, so that the tries of a
 * sequence looping with a short period do not all land on one phase */
#define SPEC_RETRY 17

/* The verification of a group: row i's logits (position P + i) test
 * draft i; each kept draft is the sequence's next token, and the first
 * rejection's replacement, or past the last draft the last row's own
 * token, ends it.  The cache is then cut after the last position kept. */
static void verify(ds_sched *s, sreq *r, size_t j0)
{
	size_t P = s->bo[j0].pos, n = r->sq.n_draft, i, kept = 0;
	int acc = 1;

	for (i = 0; i <= n && acc && !r->done; i++) {
		float *l = ds_fwd_logits_mut(s->f, j0 + i);
		int32_t t;

		if (r->cb.on_logits)
			r->cb.on_logits(r->cb.user, P + i, l, s->n_vocab);
		if (ds_gstate_mask(&r->g, l, s->n_vocab, r->stop_ids, r->n_stop)) {
			r->done = 1 + DS_FINISH_ERROR;
			break;
		}
		if (i < n)
			t = ds_sampler_verify(&r->smp, l, r->sq.draft[i], r->sq.q[i],
					      r->sq.n_q[i], &acc);
		else
			t = ds_sampler_sample(&r->smp, l);
		kept += i < n && acc;
		take(s, r, P + i, t);
	}
	r->st.spec_drafted += n;
	r->st.spec_accepted += kept;
	r->st.spec_steps++;
	r->sp_acc = SPEC_DECAY * r->sp_acc + (double)kept;
	r->sp_rej = SPEC_DECAY * r->sp_rej + (kept < n);
	r->sq.n_draft = 0;
	if (!r->done)
		ds_kvcache_seq_keep(s->kv, (uint32_t)r->slot, (uint32_t)r->n_past);
}

/* The K that makes the most of a step at acceptance rate a: tokens per
 * step (1 - a^(K+1)) / (1 - a) over a step's cost 1 + c K, c a draft's. */
static uint32_t best_k(double a, double c, uint32_t kmax)
{
	double best = 1, pw = a, e = 1;
	uint32_t k, kb = 0;

	for (k = 1; k <= kmax; k++) {
		e += pw;
		pw *= a;
		if (e / (1 + c * k) > best) {
			best = e / (1 + c * k);
			kb = k;
		}
	}
	return kb;
}

/* Drafts to ask for: the options' K or the adaptive one, within what the
 * request may still generate and the context still holds. */
static uint32_t want_k(const ds_sched *s, sreq *r)
{
	uint64_t left = r->n_predict > 0 ? (uint64_t)(r->n_predict - r->n_gen) : UINT64_MAX;
	uint64_t room = s->kv->n_ctx - 1 - r->n_past;
	uint32_t k = s->spec_k;

	if (k == 0) {
		k = best_k(r->sp_acc / (r->sp_acc + r->sp_rej), s->draft_cost,
			   DS_SPEC_K_AUTO);
		/* at K 0 the rate would never move again: a draft now and then */
		if (k > 0 || ++r->sp_idle >= SPEC_RETRY) {
			r->sp_idle = 0;
			k = k ? k : 1;
		}
	}
	if (k + 1 > left)
		k = left ? (uint32_t)(left - 1) : 0;
	return k < room ? k : (uint32_t)room;
}

/* Every sequence that moved in this step to the drafter: what is final,
 * which rows fed it, and the drafts wanted for the next step. */
static int spec_propose(ds_sched *s, ds_err *err)
{
	size_t n = 0, i;
	uint32_t j;

	for (i = 0; i < s->kv->n_slot; i++) {
		sreq *r = s->slots[i];
		ds_spec_seq *q;

		if (r == NULL || !r->fed || r->done || !r->spec)
			continue;
		r->fed = 0;
		q = &r->sq;
		q->slot = (uint32_t)i;
		q->tok = r->hist;
		q->n_tok = r->n_hist;
		q->n_final = r->n_past;
		q->fed0 = r->fed0 < r->n_past ? r->fed0 : r->n_past;
		q->row0 = r->row0;
		q->k = r->spec && r->has_next ? want_k(s, r) : 0;
		q->sp = &r->smp.p;
		q->rng = &r->sp_rng;
		q->n_draft = 0;
		memset(q->q, 0, sizeof q->q);
		s->sqs[n++] = q;
	}
	if (n == 0 || s->drafter->propose(s->drafter, s->f, s->sqs, n, err))
		return n ? -1 : 0;
	for (i = 0; i < n; i++) {
		ds_spec_seq *q = s->sqs[i];
		sreq *r;

		if (q->n_draft > q->k)
			q->n_draft = q->k;
		/* a draft the target's vocabulary lacks ends the drafts */
		for (j = 0; j < q->n_draft; j++)
			if (q->draft[j] < 0 || (uint32_t)q->draft[j] >= s->n_vocab)
				q->n_draft = j;
		/* and so does one the grammar refuses */
		r = s->slots[q->slot];
		q->n_draft = ds_gstate_drafts(&r->g, q->draft, q->n_draft, r->stop_ids,
					      r->n_stop);
	}
	return 0;
}

int ds_sched_step(ds_sched *s, ds_err *err)
{
	sreq *gone, *fresh, *r;
	ds_batch b;
	size_t n, j;
	uint32_t i;

	gone = admit(s, &fresh);
	for (r = fresh; r != NULL; r = r->fresh)
		prepare(s, r);
	end_cancelled(s, gone);
	memset(s->taken, 0, s->kv->n_slot);
	n = build(s, s->taken);
	if (n == 0)
		return (int)ds_sched_pending(s);
	b.n = n;
	b.token = s->btok;
	b.pos = s->bpos;
	b.seq = s->bseq;
	b.logits = s->bwant;
	b.prompt = s->bprompt;
	if (ds_fwd_decode(s->f, s->kv, &b, err)) {
		for (i = 0; i < s->kv->n_slot; i++)
			if (s->slots[i] != NULL)
				finish(s, s->slots[i], DS_FINISH_ERROR);
		return -1;
	}
	for (j = 0; j < s->n_bo; j += s->bo[j].n_ver) {
		const bout *o = &s->bo[j];
		float *l = ds_fwd_logits_mut(s->f, j);

		if (o->r->done)
			continue;
		if (o->n_ver > 1) {
			verify(s, o->r, j);
			continue;
		}
		if (o->r->cb.on_logits)
			o->r->cb.on_logits(o->r->cb.user, o->pos, l, s->n_vocab);
		if (o->sample)
			sample(s, o->r, o->pos, l);
	}
	if (s->drafter && spec_propose(s, err)) {
		for (i = 0; i < s->kv->n_slot; i++)
			if (s->slots[i] != NULL)
				finish(s, s->slots[i], DS_FINISH_ERROR);
		return -1;
	}
	for (i = 0; i < s->kv->n_slot; i++) {
		sreq *r = s->slots[i];

		if (r != NULL && r->done)
			finish(s, r, (enum ds_finish)(r->done - 1));
	}
	return (int)ds_sched_pending(s);
}

int ds_sched_drain(ds_sched *s, ds_err *err)
{
	int n;

	while ((n = ds_sched_step(s, err)) > 0)
		;
	return n < 0 ? -1 : 0;
}

/* ---- stop strings ----------------------------------------------------------------- */

static int grow(char **buf, size_t *cap, size_t need, ds_err *err)
{
	char *p;
	size_t c = *cap ? *cap : 64;

	if (need <= *cap)
		return 0;
	while (c < need)
		c *= 2;
	p = realloc(*buf, c);
	if (p == NULL)
		return ds_errf(err, "out of memory");
	*buf = p;
	*cap = c;
	return 0;
}

static int emit(const char *t, size_t n, char **out, size_t *n_out,
		size_t *cap, ds_err *err)
{
	if (grow(out, cap, *n_out + n + 1, err))
		return -1;
	memcpy(*out + *n_out, t, n);
	*n_out += n;
	(*out)[*n_out] = '\0';
	return 0;
}

int ds_stopper_init(ds_stopper *st, char *const *stops, size_t n, ds_err *err)
{
	size_t i;

	memset(st, 0, sizeof *st);
	st->stops = ds_calloc(n + 1, sizeof *st->stops, err);
	if (st->stops == NULL)
		return -1;
	for (i = 0; i < n; i++) {
		size_t l = strlen(stops[i]);

		if (l == 0)
			continue;
		st->stops[st->n_stops] = strdup(stops[i]);
		if (st->stops[st->n_stops] == NULL) {
			ds_stopper_free(st);
			return ds_errf(err, "out of memory");
		}
		st->n_stops++;
		if (l > st->max_len)
			st->max_len = l;
	}
	return 0;
}

void ds_stopper_free(ds_stopper *st)
{
	size_t i;

	for (i = 0; st->stops && i < st->n_stops; i++)
		free(st->stops[i]);
	free(st->stops);
	free(st->hold);
	memset(st, 0, sizeof *st);
}

/* The longest tail of hold that starts some stop string. */
static size_t partial_tail(const ds_stopper *st)
{
	size_t k, i, best = 0;

	for (i = 0; i < st->n_stops; i++) {
		size_t l = strlen(st->stops[i]);

		for (k = l - 1 < st->n_hold ? l - 1 : st->n_hold; k > best; k--)
			if (memcmp(st->hold + st->n_hold - k, st->stops[i], k) == 0) {
				best = k;
				break;
			}
	}
	return best;
}

int ds_stopper_push(ds_stopper *st, const char *text, size_t len, char **out,
		    size_t *n_out, size_t *cap, ds_err *err)
{
	size_t i, keep, first = (size_t)-1;

	if (st->n_stops == 0)
		return emit(text, len, out, n_out, cap, err);
	if (grow(&st->hold, &st->cap, st->n_hold + len + 1, err))
		return -1;
	memcpy(st->hold + st->n_hold, text, len);
	st->n_hold += len;
	st->hold[st->n_hold] = '\0';
	for (i = 0; i < st->n_stops; i++) {
		const char *p = memmem(st->hold, st->n_hold, st->stops[i],
				       strlen(st->stops[i]));

		if (p != NULL && (size_t)(p - st->hold) < first)
			first = (size_t)(p - st->hold);
	}
	if (first != (size_t)-1) {
		if (emit(st->hold, first, out, n_out, cap, err))
			return -1;
		st->n_hold = 0;
		return 1;
	}
	keep = partial_tail(st);
	if (emit(st->hold, st->n_hold - keep, out, n_out, cap, err))
		return -1;
	memmove(st->hold, st->hold + st->n_hold - keep, keep);
	st->n_hold = keep;
	return 0;
}

int ds_stopper_flush(ds_stopper *st, char **out, size_t *n_out, size_t *cap,
		     ds_err *err)
{
	int rc = emit(st->hold ? st->hold : "", st->n_hold, out, n_out, cap, err);

	st->n_hold = 0;
	return rc;
}
