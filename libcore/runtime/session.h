/*
 * session.h - a model opened for generating: what ds-run and ds-serve
 * share.  A session owns the weights (placed as asked), the tokenizer, the
 * chat template with its BOS/EOS strings, the model's end ids, the
 * forward pass, the KV cache and the scheduler, and turns text or a
 * conversation into the prompt the model reads.
 *
 *	ds_session s;
 *	ds_session_opts o = { .dir = "model", .slots = 4, .tok = DS_SESS_TOK_NEED };
 *	ds_session_open(&s, &o, &err);
 *	ds_session_chat(&s, messages, NULL, &ids, NULL, &err); // rendered, encoded
 *	ds_session_fit(&s, &ids, 128, 0, &err);         // checked against n_ctx
 *	... ds_sched_submit(s.sched, &req, ...) with ds_session_stops ...
 *	ds_session_close(&s);
 *
 * A request's text comes out through a ds_textout: the tokenizer's
 * streaming decoder followed by the stop strings, so a stop string split
 * across tokens is never shown.
 */
#ifndef DS_SESSION_H
#define DS_SESSION_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "base/util.h"
#include "chat/template.h"
#include "format/modelfile.h"
#include "grammar/grammar.h"
#include "model/forward.h"
#include "model/kvcache.h"
#include "pool/threads.h"
#include "runtime/sched.h"
#include "tokenizer/tokenizer.h"

/* The drafter of speculative decoding. */
enum ds_spec_kind { DS_SPEC_NONE, DS_SPEC_NGRAM, DS_SPEC_DRAFT, DS_SPEC_MTP };

/* "mtp" "ngram" "draft" -> kind (-1 with a message naming them). */
int ds_spec_parse(const char *s, enum ds_spec_kind *k, ds_err *err);
const char *ds_spec_name(enum ds_spec_kind k);

/* Whether the session loads DIR/tokenizer.bin. */
enum ds_sess_tok {
	DS_SESS_TOK_NEED,        /* load it; its absence is an error */
	DS_SESS_TOK_IF_PRESENT,  /* load it if it is there */
	DS_SESS_TOK_NONE,        /* do not load it */
};

typedef struct ds_session_opts {
	const char *dir;          /* the model directory */
	int threads;              /* the pool's (0: its default) */
	const char *cpus;         /* CPU list to pin to, or NULL */
	ds_load_opts load;        /* populate, mlock, hugepages, NUMA, verify */
	uint32_t ctx_size;        /* 0: the model's training context, at
				     most DS_SESSION_CTX */
	uint32_t slots;           /* sequences at once (0: 1) */
	uint32_t batch;           /* most entries of one forward pass: a
				     prompt goes through in chunks of this
				     (0: DS_SESSION_BATCH) */
	enum ds_kvtype kv_type;   /* DS_KV_F16 is the usual */
	enum ds_sess_tok tok;
	const char *tok_why;      /* DS_SESS_TOK_NEED: who needs it, for the
				     error ("-p needs"); NULL: "ds needs" */
	const char *chat_template;/* a template name that overrides the
				     model's, or NULL */
	const ds_fwd_ep *ep;      /* expert parallelism (forward.h), or NULL */
	int follow;               /* an MPI rank that runs rank 0's batches:
				     sized as rank 0's session, but opens no
				     drafter (rank 0 drafts) */
	/* speculative decoding (spec/drafter.h) */
	enum ds_spec_kind spec;   /* DS_SPEC_NONE: off */
	uint32_t spec_k;          /* drafts per step, 0: adaptive */
	const char *draft_dir;    /* DS_SPEC_DRAFT: the draft model */
	const char *chat_template_file; /* a Jinja file that does, or NULL */
	/* the prompt cache (pcache.h, sched.h) */
	int64_t cache_mib;        /* its memory in MiB; < 0: the default
				     (ds_session_cache_default), 0: none */
	const char *cache_dir;    /* kept there across runs, or NULL */
	/* warnings after the load (cache files ignored): one line each */
	void (*warn)(void *user, const char *line);
	void *warn_user;
} ds_session_opts;

/* The default prompt cache: 2048 MiB, at most a quarter of the memory. */
int64_t ds_session_cache_default(void);

#define DS_SESSION_CTX 4096
/* A prompt's chunk: MLA's prompt form expands every earlier position of
 * the sequence once per chunk, so long prompts want long chunks; each
 * chunk holds the other slots' tokens for its time (docs/perf.md). */
#define DS_SESSION_BATCH 2048
#define DS_BATCH_MAX 65536   /* -b's bound */
#define DS_SESSION_MAX_STOPS (DS_MAX_EOS + 4)

typedef struct ds_session {
	ds_model m;
	ds_placement pl;
	ds_pool *pool;
	ds_fwd *fwd;
	ds_kvcache kv;
	ds_pcache *pc;            /* the prompt cache, or NULL */
	ds_sched *sched;
	struct ds_drafter *drafter;  /* speculative decoding, or NULL */
	ds_tok *tok;              /* NULL when not loaded */
	uint32_t n_ctx, n_vocab;
	double t_load;            /* seconds to load and place the weights */
	char warn[256];           /* the load's warning (a hugepages
				     fallback), or "" */
	/* chat */
	int have_tmpl;            /* tpl is made */
	ds_chat_tpl tpl;          /* the options', else the model's template */
	char tpl_warn[640];       /* why the model's Jinja template is not
				     used (the fallback's), or "" */
	char tpl_err[640];        /* without a template: why, for chat
				     requests */
	int32_t stop_ids[DS_SESSION_MAX_STOPS]; /* the model's end ids */
	size_t n_stop_ids;
	int32_t turn_end;         /* the template's end-of-turn id, or -1 */
	/* what was opened, for ds_session_close */
	int have_model, have_kv;
	void (*warn_fn)(void *user, const char *line);  /* opts' warn */
	void *warn_user;
	/* token masks (grammar.h): built on first use, then read-only */
	pthread_mutex_t gv_mu;
	ds_gvocab *gv;
} ds_session;

/* Open everything (a failure frees what was opened: close is still
 * safe).  The pool comes first, then the weights, the tokenizer, the
 * template and stops, the forward pass (batches of up to max(batch,
 * slots + 1) entries, or what speculative steps of every slot take), the
 * KV cache, the drafter, the prompt cache (read from its directory) and
 * the scheduler.  Closing saves the prompt cache to its directory. */
int ds_session_open(ds_session *s, const ds_session_opts *o, ds_err *err);
void ds_session_close(ds_session *s);

/* text -> ids, with BOS as the tokenizer's configuration says. */
int ds_session_encode(const ds_session *s, const char *text, ds_tok_ids *ids,
		      ds_err *err);
/* A conversation (JSON messages, chat/template.h ds_chat_messages) with
 * the template's extra variables vars (may be NULL) rendered with the
 * assistant's generation prompt and encoded as apply_chat_template
 * encodes it: special tokens matched, nothing added (the rendering
 * carries its own BOS).  *think (may be NULL): the prompt leaves the
 * model inside a <think> block.  -1 when the session has no template. */
int ds_session_chat(const ds_session *s, const json_t *messages,
		    const json_t *vars, ds_tok_ids *ids, int *think,
		    ds_err *err);
/* The rendering alone (add_gen: with the generation prompt). */
int ds_session_render(const ds_session *s, const json_t *messages,
		      const json_t *vars, int add_gen, char **text, size_t *len,
		      ds_err *err);
/* A prompt against the context: a prompt longer than n_ctx is an error,
 * or with truncate keeps its last n_ctx - reserve tokens, reserve =
 * min(n_predict, n_ctx / 2), n_ctx / 4 when n_predict < 0. */
int ds_session_fit(const ds_session *s, ds_tok_ids *ids, int64_t n_predict,
		   int truncate, ds_err *err);
/* A request's end ids into out [DS_SESSION_MAX_STOPS + 1]: the model's,
 * and for a chat turn the template's end-of-turn marker; the count. */
size_t ds_session_stops(const ds_session *s, int chat, int32_t *out);

/* The tokenizer's vocabulary as grammar masks read it (every token's
 * bytes, ds_tok_token_bytes; special ones never match), built by the
 * first call (any thread), then shared read-only until close. */
int ds_session_gvocab(ds_session *s, const ds_gvocab **v, ds_err *err);
/* The same for any tokenizer (the caller frees it); eos (-1: none) is
 * allowed where the text is complete (the session's has none: the
 * scheduler allows its stop ids there). */
int ds_gvocab_from_tok(const ds_tok *tok, int32_t eos, ds_gvocab **v,
		       ds_err *err);

/* ---- a request's text ------------------------------------------------------------ */

typedef struct ds_textout {
	ds_tok_stream ts;
	ds_stopper stopper;
	ds_tok_text piece;        /* a token's decoded text (reused) */
	char *shown;              /* what the last push or finish let through */
	size_t n_shown, cap_shown;
	int stop_hit;             /* a stop string matched */
} ds_textout;

int ds_textout_init(ds_textout *t, const ds_tok *tok, char *const *stops,
		    size_t n_stops, ds_err *err);
/* Token id's text through the stop strings into t->shown / t->n_shown:
 * 1 when a stop string matched (the text before it is shown), 0 to go
 * on.  An id the tokenizer has no string for (a vocabulary padded past
 * the tokenizer's) shows nothing. */
int ds_textout_push(ds_textout *t, int32_t id, ds_err *err);
/* What the decoder and the stop strings still hold, into t->shown. */
int ds_textout_finish(ds_textout *t, ds_err *err);
void ds_textout_free(ds_textout *t);

#endif
