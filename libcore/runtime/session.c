/* session.c - a model opened for generating (session.h). */
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "session.h"
#include "spec/drafter.h"

/* ---- opening ------------------------------------------------------------------------ */

static int load_tokenizer(ds_session *s, const ds_session_opts *o, ds_err *err)
{
	char *path;
	int rc = 0;

	if (o->tok == DS_SESS_TOK_NONE)
		return 0;
	path = ds_path_join(o->dir, "tokenizer.bin");
	if (path == NULL)
		return ds_errf(err, "out of memory");
	if (access(path, F_OK) == 0)
		rc = ds_tok_load(&s->tok, path, err);
	else if (o->tok == DS_SESS_TOK_NEED)
		rc = ds_errf(err, "%s: no tokenizer (%s the model's tokenizer: "
			     "convert it with ds-convert)", path,
			     o->tok_why ? o->tok_why : "ds needs");
	free(path);
	return rc;
}

static void add_stop(ds_session *s, int64_t id)
{
	size_t i;

	if (id < 0 || id >= s->n_vocab || s->n_stop_ids == DS_SESSION_MAX_STOPS)
		return;
	for (i = 0; i < s->n_stop_ids; i++)
		if (s->stop_ids[i] == id)
			return;
	s->stop_ids[s->n_stop_ids++] = (int32_t)id;
}

static void piece_str(const ds_tok *t, int32_t id, char *out, size_t cap)
{
	const char *p;
	size_t l;

	out[0] = '\0';
	if (id >= 0 && (p = ds_tok_piece(t, id, &l)) != NULL && l < cap) {
		memcpy(out, p, l);
		out[l] = '\0';
	}
}

/* The special tokens a template given by the options reads: those the
 * model stored with its own template, else the tokenizer's BOS and EOS. */
static json_t *tok_special(const ds_session *s)
{
	const json_t *sp = json_object_get(json_object_get(s->m.meta,
				"chat_template_jinja"), "special");
	ds_tok_info ti;
	char b[64];
	json_t *o;

	if (json_is_object(sp))
		return json_deep_copy(sp);
	if ((o = json_object()) == NULL)
		return NULL;
	ds_tok_get_info(s->tok, &ti);
	piece_str(s->tok, ti.bos, b, sizeof b);
	if (b[0])
		json_object_set_new(o, "bos_token", json_string(b));
	piece_str(s->tok, ti.eos, b, sizeof b);
	if (b[0])
		json_object_set_new(o, "eos_token", json_string(b));
	return o;
}

/* The options' template (an error when it cannot be made). */
static int opts_template(ds_session *s, const ds_session_opts *o, ds_err *err)
{
	json_t *sp = tok_special(s);
	int rc;

	if (sp == NULL)
		return ds_errf(err, "out of memory");
	rc = o->chat_template_file
	     ? ds_chat_tpl_file(&s->tpl, o->chat_template_file, sp, err)
	     : ds_chat_tpl_named(&s->tpl, o->chat_template, sp, err);
	json_decref(sp);
	if (rc)
		return o->chat_template_file
		       ? ds_err_prefix(err, "--chat-template-file") : -1;
	return 1;
}

/* The model's: its own Jinja template, else its named one (model.meta,
 * else the tokenizer's).  A model without one is no error: chat requests
 * are refused, saying why (tpl_err). */
static int model_template(ds_session *s)
{
	ds_tok_info ti;
	ds_err e;
	int rc;

	rc = ds_chat_tpl_meta(&s->tpl, s->m.meta, s->tpl_warn, sizeof s->tpl_warn, &e);
	if (rc < 0) {
		snprintf(s->tpl_err, sizeof s->tpl_err, "the model's chat template "
			 "cannot be used: %s", e.msg);
		return 0;
	}
	ds_tok_get_info(s->tok, &ti);
	if (rc == 0 && ti.chat_template && ti.chat_template[0]) {
		json_t *sp = tok_special(s);

		rc = sp && ds_chat_tpl_named(&s->tpl, ti.chat_template, sp, NULL) == 0;
		json_decref(sp);
	}
	return rc;
}

/* The template: the options', else the model's. */
static int template(ds_session *s, const ds_session_opts *o, ds_err *err)
{
	const char *mk;
	int rc;

	snprintf(s->tpl_err, sizeof s->tpl_err, "the model names no chat template");
	rc = o->chat_template || o->chat_template_file ? opts_template(s, o, err)
						       : model_template(s);
	if (rc < 0)
		return -1;
	s->have_tmpl = rc > 0;
	mk = s->have_tmpl ? s->tpl.end_marker : NULL;
	if (mk != NULL)
		s->turn_end = ds_tok_piece_id(s->tok, mk, strlen(mk));
	return 0;
}

/* The model's end ids and the template. */
static int chat_and_stops(ds_session *s, const ds_session_opts *o, ds_err *err)
{
	ds_tok_info ti;
	uint32_t i;

	s->turn_end = -1;
	for (i = 0; i < s->m.hp.n_eos; i++)
		add_stop(s, s->m.hp.eos_ids[i]);
	if (s->tok == NULL)
		return 0;
	ds_tok_get_info(s->tok, &ti);
	add_stop(s, ti.eos);
	add_stop(s, ti.eot);
	return template(s, o, err);
}

static int load_model(ds_session *s, const ds_session_opts *o, ds_err *err)
{
	double t0 = ds_now_s();
	ds_load_opts lo = o->load;
	int rc;

	/* the MTP module's tensors only when it drafts */
	lo.mtp = o->spec == DS_SPEC_MTP;
	rc = ds_model_open(&s->m, s->pool, o->dir, &lo, &s->pl, s->warn,
			   sizeof s->warn, err);
	s->have_model = 1;      /* freeable whatever the outcome */
	s->t_load = ds_now_s() - t0;
	return rc;
}

static const char *const spec_names[] = { "none", "ngram", "draft", "mtp" };

int ds_spec_parse(const char *str, enum ds_spec_kind *k, ds_err *err)
{
	int i;

	for (i = 1; i < 4; i++)
		if (strcmp(str, spec_names[i]) == 0) {
			*k = (enum ds_spec_kind)i;
			return 0;
		}
	return ds_errf(err, "not a drafter (mtp, ngram or draft)");
}

const char *ds_spec_name(enum ds_spec_kind k)
{
	return (unsigned)k < 4 ? spec_names[k] : "?";
}

/* The drafter the options name (the forward and the cache are open). */
static int open_drafter(ds_session *s, const ds_session_opts *o, ds_err *err)
{
	ds_draft_opts d = {
		.dir = o->draft_dir, .pool = s->pool, .load = o->load,
		.n_slot = s->kv.n_slot, .n_ctx = s->n_ctx, .kv_type = o->kv_type,
		.target_vocab = s->n_vocab, .target_tok = s->tok, .target_dir = o->dir,
	};

	switch (o->spec) {
	case DS_SPEC_NONE: return 0;
	case DS_SPEC_NGRAM: return ds_ngram_open(&s->drafter, err);
	case DS_SPEC_DRAFT:
		if (o->draft_dir == NULL)
			return ds_errf(err, "speculative decoding with a draft model "
				       "needs the draft model's directory");
		return ds_draft_open(&s->drafter, &d, err);
	case DS_SPEC_MTP: {
		ds_fwd_info fi;
		ds_mtp_opts mo = { .m = &s->m, .pool = s->pool, .n_slot = s->kv.n_slot,
				   .n_ctx = s->n_ctx, .kv_type = o->kv_type };

		ds_fwd_get_info(s->fwd, &fi);
		mo.max_batch = fi.max_batch;
		return ds_mtp_open(&s->drafter, &mo, err);
	}
	}
	return 0;
}

int64_t ds_session_cache_default(void)
{
	long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGESIZE);
	int64_t quarter = pages > 0 && size > 0 ? (int64_t)pages / 4 * size >> 20 : 2048;

	return quarter < 2048 ? quarter : 2048;
}

/* FNV-1a, 64 bits, from h. */
static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
	const uint8_t *b = p;

	while (n--) {
		h ^= *b++;
		h *= 0x100000001b3ull;
	}
	return h;
}

/* What a cache file must have been made for: this ds, the architecture
 * and hyper-parameters, and every tensor's name, type, shape and CRC-32
 * (so the same weights converted again are the same model). */
static void model_identity(const ds_model *m, uint8_t id[16])
{
	uint64_t h[2] = { 0xcbf29ce484222325ull, 0x84222325cbf29ce4ull };
	char *hp = json_dumps(json_object_get(m->meta, "hparams"),
			      JSON_COMPACT | JSON_SORT_KEYS);
	const char *arch = json_string_value(json_object_get(m->meta, "arch"));
	size_t i, k;

	for (k = 0; k < 2; k++) {
		h[k] = fnv(h[k], DS_VERSION, strlen(DS_VERSION) + 1);
		h[k] = fnv(h[k], arch ? arch : "", arch ? strlen(arch) + 1 : 1);
		h[k] = fnv(h[k], hp ? hp : "", hp ? strlen(hp) + 1 : 1);
		for (i = 0; i < m->n_tensors; i++) {
			const ds_tensor *t = &m->tensors[i];

			h[k] = fnv(h[k], t->name, strlen(t->name) + 1);
			h[k] = fnv(h[k], &t->type, sizeof t->type);
			h[k] = fnv(h[k], t->shape, sizeof t->shape);
			h[k] = fnv(h[k], &t->crc32, sizeof t->crc32);
		}
	}
	free(hp);
	memcpy(id, h, 16);
}

/* The prompt cache, read from its directory. */
static int open_pcache(ds_session *s, const ds_session_opts *o, ds_err *err)
{
	int64_t mib = o->cache_mib < 0 ? ds_session_cache_default() : o->cache_mib;
	ds_pcache_opts po = {
		.max_bytes = (size_t)mib << 20, .dir = o->cache_dir,
		.n_vocab = s->n_vocab, .warn = o->warn, .user = o->warn_user,
	};

	/* over MPI ranks the cache's row copies would be rank 0's alone,
	 * and the ranks' caches must stay the same */
	if (mib == 0 || o->ep != NULL)
		return 0;
	model_identity(&s->m, po.model_id);
	return ds_pcache_init(&s->pc, &s->kv, &po, err) ||
	       ds_pcache_load(s->pc, err) ? -1 : 0;
}

int ds_session_open(ds_session *s, const ds_session_opts *o, ds_err *err)
{
	ds_pool_opts po = { .threads = o->threads, .cpus = o->cpus };
	uint32_t slots = o->slots ? o->slots : 1, train;
	ds_sched_opts sco = { .spec_k = o->spec_k };
	uint32_t batch = o->batch ? o->batch : DS_SESSION_BATCH;
	ds_fwd_opts fo = { .max_batch = slots + 1 > batch ? slots + 1 : batch,
			   .ep = o->ep };

	memset(s, 0, sizeof *s);
	pthread_mutex_init(&s->gv_mu, NULL);
	s->turn_end = -1;
	s->warn_fn = o->warn;
	s->warn_user = o->warn_user;
	/* the MTP module's pass is not split over the job's ranks */
	if (o->ep != NULL && o->spec == DS_SPEC_MTP)
		return ds_errf(err, "--spec mtp does not run over MPI ranks: use "
			       "--spec ngram or --spec draft");
	if (ds_pool_init(&s->pool, &po, err) || load_model(s, o, err) ||
	    load_tokenizer(s, o, err))
		return -1;
	s->n_vocab = s->m.hp.n_vocab;
	train = s->m.hp.n_ctx_train;
	s->n_ctx = o->ctx_size ? o->ctx_size
		   : train && train < DS_SESSION_CTX ? train : DS_SESSION_CTX;
	/* room for every slot's token and drafts in one batch */
	if (ds_sched_batch_need(slots, o->spec != DS_SPEC_NONE, o->spec_k) + 1 > fo.max_batch)
		fo.max_batch = ds_sched_batch_need(slots, o->spec != DS_SPEC_NONE, o->spec_k) + 1;
	if (chat_and_stops(s, o, err) ||
	    ds_fwd_init(&s->fwd, &s->m, s->pool, &fo, err) ||
	    ds_kvcache_init(&s->kv, &s->m.hp, slots, s->n_ctx, o->kv_type, err))
		return -1;
	s->have_kv = 1;
	if ((!o->follow && open_drafter(s, o, err)) || open_pcache(s, o, err))
		return -1;
	sco.drafter = s->drafter;
	sco.cache = s->pc;
	return ds_sched_init(&s->sched, s->fwd, &s->kv, &sco, err);
}

void ds_session_close(ds_session *s)
{
	ds_err err;

	ds_sched_free(s->sched);    /* the slots' rows into the cache */
	ds_gvocab_free(s->gv);
	pthread_mutex_destroy(&s->gv_mu);
	if (s->drafter)
		s->drafter->free(s->drafter);
	if (s->pc && ds_pcache_save(s->pc, &err) && s->warn_fn)
		s->warn_fn(s->warn_user, err.msg);
	ds_pcache_free(s->pc);
	if (s->have_tmpl)
		ds_chat_tpl_free(&s->tpl);
	if (s->have_kv)
		ds_kvcache_free(&s->kv);
	ds_fwd_free(s->fwd);
	if (s->tok)
		ds_tok_free(s->tok);
	if (s->have_model)
		ds_model_free(&s->m);
	ds_placement_free(&s->pl);
	if (s->pool)
		ds_pool_free(s->pool);
	memset(s, 0, sizeof *s);
}

/* ---- the vocabulary of token masks ------------------------------------------------ */

/* Every token's bytes (ds_tok_token_bytes) as one buffer. */
int ds_gvocab_from_tok(const ds_tok *tok, int32_t eos, ds_gvocab **v,
		       ds_err *err)
{
	uint32_t n = ds_tok_n_vocab(tok), i;
	size_t *off = ds_calloc((size_t)n + 1, sizeof *off, err);
	uint32_t *lens = ds_calloc((size_t)n + 1, sizeof *lens, err);
	const uint8_t **ptr = ds_calloc((size_t)n + 1, sizeof *ptr, err);
	ds_tok_text all = { 0 }, one = { 0 };
	int rc = -1;

	for (i = 0; off && lens && ptr && i < n; i++) {
		if (ds_tok_token_bytes(tok, (int32_t)i, &one, err))
			goto out;
		off[i] = all.n;
		lens[i] = (uint32_t)one.n;
		if (ds_grow((void **)&all.s, &all.cap, all.n + one.n + 1, 1)) {
			ds_errf(err, "out of memory");
			goto out;
		}
		memcpy(all.s + all.n, one.s, one.n);
		all.n += one.n;
	}
	if (off && lens && ptr) {
		for (i = 0; i < n; i++)
			ptr[i] = (const uint8_t *)all.s + off[i];
		rc = ds_gvocab_build(n, ptr, lens, NULL, eos, v, err);
	}
out:
	ds_tok_text_free(&all);
	ds_tok_text_free(&one);
	free(off);
	free(lens);
	free(ptr);
	return rc;
}

int ds_session_gvocab(ds_session *s, const ds_gvocab **v, ds_err *err)
{
	int rc = 0;

	*v = NULL;
	if (s->tok == NULL)
		return ds_errf(err, "a grammar needs the model's tokenizer");
	pthread_mutex_lock(&s->gv_mu);
	if (s->gv == NULL)
		rc = ds_gvocab_from_tok(s->tok, -1, &s->gv, err);
	*v = s->gv;
	pthread_mutex_unlock(&s->gv_mu);
	return rc;
}

/* ---- prompts -------------------------------------------------------------------------------- */

static int encode(const ds_session *s, const char *text, size_t len,
		  unsigned flags, ds_tok_ids *ids, ds_err *err)
{
	memset(ids, 0, sizeof *ids);
	if (s->tok == NULL)
		return ds_errf(err, "the model has no tokenizer: give token ids");
	if (ds_tok_encode(s->tok, text, len, flags, ids, err)) {
		ds_tok_ids_free(ids);
		return -1;
	}
	return 0;
}

int ds_session_encode(const ds_session *s, const char *text, ds_tok_ids *ids,
		      ds_err *err)
{
	return encode(s, text, strlen(text), 0, ids, err);
}

int ds_session_render(const ds_session *s, const json_t *messages,
		      const json_t *vars, int add_gen, char **text, size_t *len,
		      ds_err *err)
{
	*text = NULL;
	if (!s->have_tmpl)
		return ds_errf(err, "%s", s->tpl_err);
	return ds_chat_tpl_render(&s->tpl, messages, vars, add_gen, text, len, err);
}

int ds_session_chat(const ds_session *s, const json_t *messages,
		    const json_t *vars, ds_tok_ids *ids, int *think,
		    ds_err *err)
{
	char *text;
	size_t len;
	int rc;

	memset(ids, 0, sizeof *ids);
	if (ds_session_render(s, messages, vars, 1, &text, &len, err))
		return -1;
	if (think != NULL)
		*think = ds_chat_opens_think(text, len);
	/* as apply_chat_template(tokenize=True): the template has the BOS */
	rc = encode(s, text, len, DS_TOK_NO_BOS | DS_TOK_NO_EOS, ids, err);
	free(text);
	return rc;
}

int ds_session_fit(const ds_session *s, ds_tok_ids *ids, int64_t n_predict,
		   int truncate, ds_err *err)
{
	size_t reserve, keep;

	if (ids->n <= s->n_ctx)
		return 0;
	if (!truncate)
		return ds_errf(err, "prompt of %zu tokens is longer than the "
			       "context (%u)", ids->n, s->n_ctx);
	reserve = n_predict < 0 ? s->n_ctx / 4 :
		  (uint64_t)n_predict < s->n_ctx / 2 ? (size_t)n_predict : s->n_ctx / 2;
	keep = s->n_ctx - reserve;
	memmove(ids->v, ids->v + ids->n - keep, keep * sizeof *ids->v);
	ids->n = keep;
	return 0;
}

size_t ds_session_stops(const ds_session *s, int chat, int32_t *out)
{
	size_t n = s->n_stop_ids, i;

	memcpy(out, s->stop_ids, n * sizeof *out);
	if (chat && s->turn_end >= 0) {
		for (i = 0; i < n && out[i] != s->turn_end; i++)
			;
		if (i == n)
			out[n++] = s->turn_end;
	}
	return n;
}

/* ---- a request's text ------------------------------------------------------------------ */

int ds_textout_init(ds_textout *t, const ds_tok *tok, char *const *stops,
		    size_t n_stops, ds_err *err)
{
	memset(t, 0, sizeof *t);
	ds_tok_stream_init(&t->ts, tok, 0);
	return ds_stopper_init(&t->stopper, stops, n_stops, err);
}

static int show(ds_textout *t, ds_err *err)
{
	int stop = ds_stopper_push(&t->stopper, t->piece.s ? t->piece.s : "",
				   t->piece.n, &t->shown, &t->n_shown,
				   &t->cap_shown, err);

	if (stop > 0)
		t->stop_hit = 1;
	return stop;
}

int ds_textout_push(ds_textout *t, int32_t id, ds_err *err)
{
	t->piece.n = 0;
	t->n_shown = 0;
	if (id < 0 || (uint32_t)id >= ds_tok_n_vocab(t->ts.tok))
		return 0;
	if (ds_tok_stream_push(&t->ts, id, &t->piece, err))
		return -1;
	return show(t, err);
}

int ds_textout_finish(ds_textout *t, ds_err *err)
{
	t->piece.n = 0;
	t->n_shown = 0;
	if (ds_tok_stream_finish(&t->ts, &t->piece, err) || show(t, err) < 0 ||
	    ds_stopper_flush(&t->stopper, &t->shown, &t->n_shown, &t->cap_shown, err))
		return -1;
	return 0;
}

void ds_textout_free(ds_textout *t)
{
	ds_tok_text_free(&t->piece);
	ds_stopper_free(&t->stopper);
	free(t->shown);
	memset(t, 0, sizeof *t);
}
