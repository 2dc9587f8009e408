/*
 * serve.h - ds-serve's library: an OpenAI-compatible HTTP server over the
 * scheduler (runtime/sched.h), in parts that can be tested without sockets:
 *
 *   api.c      request bodies -> ds_api_req (jansson; every field checked,
 *              the error names it), answers, stream chunks and error
 *              objects -> JSON text; the API key check
 *   metrics.c  counters, gauges and histograms in Prometheus' text format
 *   engine.c   the model, tokenizer, KV cache, scheduler and the driver
 *              thread; one ds_job per generation request
 *   http.c     libmicrohttpd: routing, auth, body limits, waiting for and
 *              streaming a job, client disconnects, draining
 *
 * Threads.  libmicrohttpd runs one thread per connection; a generation
 * request submits a job and its connection thread sleeps in poll() on the
 * job's eventfd and on its own socket, so a client that goes away is seen
 * at once and its job cancelled (the scheduler frees the slot at its next
 * step).  The driver thread runs every forward pass and every scheduler
 * callback; it only appends text to jobs and wakes their connections.
 */
#ifndef DS_SERVE_H
#define DS_SERVE_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "chat/template.h"
#include "grammar/grammar.h"
#include "runtime/sampler.h"
#include "runtime/sched.h"
#include "base/util.h"

/* ---- requests and answers (api.c) -------------------------------------------- */

enum ds_api_kind {
	DS_API_COMPLETION,          /* /v1/completions */
	DS_API_CHAT,                /* /v1/chat/completions */
	DS_API_TEMPLATE,            /* /apply-template: a chat body, rendered */
};

/* reasoning_format: what becomes of a <think> block in a chat answer. */
enum ds_reasoning {
	DS_REASON_AUTO = -1,        /* the server's --reasoning-format */
	DS_REASON_NONE = 0,         /* left in the content, as generated */
	DS_REASON_DEEPSEEK = 1,     /* message.reasoning_content, apart */
};

/* An answer other than 200: the HTTP status, OpenAI's error "type" and
 * "code" (NULL: null), the request field at fault ("prompt[3]", "" for
 * none) and the message. */
typedef struct ds_api_err {
	int status;
	const char *type;
	const char *code;
	char param[96];
	char msg[400];
} ds_api_err;

/* Fill e and return -1. */
int ds_api_fail(ds_api_err *e, int status, const char *param,
		const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* What the loaded model allows a request. */
typedef struct ds_api_limits {
	uint32_t n_vocab;           /* prompt ids are below it */
	uint32_t n_ctx;             /* positions per slot */
} ds_api_limits;

#define DS_API_MAX_STOPS 16
#define DS_API_MAX_STOP_LEN 512

/* A parsed /v1/completions or /v1/chat/completions body.  Defaults:
 * ds_sampler_defaults (llama.cpp's), a fresh seed unless "seed" is given,
 * no max_tokens (until EOS or the context is full). */
typedef struct ds_api_req {
	enum ds_api_kind kind;
	char *prompt;               /* completion given as text, or NULL */
	int32_t *ids;               /* completion given as token ids */
	size_t n_ids;
	json_t *messages;           /* chat: the conversation (ds_chat_messages) */
	json_t *tpl_vars;           /* chat_template_kwargs, or NULL */
	int add_gen;                /* add_generation_prompt (/apply-template;
				       chat answers always have it) */
	enum ds_reasoning reasoning;/* reasoning_format */
	ds_sampler_params sp;
	int seed_set;
	int64_t max_tokens;         /* -1: not given */
	int ignore_eos;             /* llama.cpp's: EOS does not end it */
	char **stops;               /* stop strings, non-empty */
	size_t n_stops;
	int stream;
	int include_usage;          /* stream_options.include_usage */
	int return_tokens;          /* llama.cpp's: the ids in the answer */
	int speculative;            /* ds's: false turns the server's
				       speculative decoding off (default true) */
	/* structured output and tools (tools.c) */
	ds_grammar *grammar;        /* response_format json_object or
				       json_schema, compiled; or NULL */
	json_t *tools;              /* the tools (checked), or NULL */
	enum ds_tool_choice {
		DS_TOOLS_AUTO, DS_TOOLS_NONE, DS_TOOLS_REQUIRED, DS_TOOLS_NAMED,
	} tool_choice;
	size_t tool_index;          /* DS_TOOLS_NAMED: tools[tool_index] */
	int parallel_tools;         /* parallel_tool_calls (default true) */
} ds_api_req;

/* Parse and check a request body of len bytes (not NUL-terminated).  On
 * failure e says what (400: not JSON, invalid UTF-8, a field of the wrong
 * type or out of range, an unsupported option) and *r is empty. */
int ds_api_parse(ds_api_req *r, enum ds_api_kind kind, const char *body,
		 size_t len, const ds_api_limits *lim, ds_api_err *e);
void ds_api_req_free(ds_api_req *r);

/* ---- structured output and tools (tools.c) ----------------------------------
 * Parts of ds_api_parse: response_format (its schema compiled: a schema
 * the compiler refuses is a 400 naming the keyword's path), tools,
 * tool_choice, parallel_tool_calls; tool results checked against the
 * calls the conversation made. */
int ds_api_get_format(json_t *o, ds_api_req *r, ds_api_err *e);
int ds_api_get_tools(json_t *o, ds_api_req *r, ds_api_err *e);
int ds_api_check_tool_ids(const ds_api_req *r, ds_api_err *e);
/* Tools given and tool_choice not "none": calls are parsed from answers. */
int ds_api_tools_on(const ds_api_req *r);

/* The conversation and variables template t renders: the tools passed as
 * "tools" when it reads them, else described in a system message first;
 * calls and tool results passed as given when it reads tool_calls, else
 * written into the messages as the model writes them. */
int ds_tool_messages(const ds_api_req *r, const ds_chat_tpl *t, json_t **msgs,
		     json_t **vars, ds_api_err *e);
/* The grammar of the calls r allows in format f (a named tool, or any;
 * one call, or several with parallel_tool_calls); NULL without tools. */
int ds_tool_grammar(const ds_api_req *r, enum ds_tool_fmt f, ds_grammar **g,
		    ds_api_err *e);
/* The bytes that start format f's calls (the lazy grammar's trigger). */
const char *ds_tool_trigger(enum ds_tool_fmt f);
/* The calls in an answer: 1 with *calls (OpenAI's tool_calls, ids
 * "call_ID_N") and *content the length of the text before them; 0 when
 * there are none (or they do not parse), *content = n. */
int ds_tool_parse(enum ds_tool_fmt f, const char *text, size_t n, const char *id,
		  size_t *content, json_t **calls);
/* How much of a streamed answer may be shown as content: all but a tail
 * that may start the calls' marker, or up to the marker. */
size_t ds_tool_shown(enum ds_tool_fmt f, const char *text, size_t n);

/* /tokenize {"content", "add_special" (false), "with_pieces" (false)} */
typedef struct ds_api_tokreq {
	char *content;
	int add_special, with_pieces;
} ds_api_tokreq;

int ds_api_parse_tokenize(ds_api_tokreq *r, const char *body, size_t len,
			  ds_api_err *e);
void ds_api_tokreq_free(ds_api_tokreq *r);
/* /detokenize {"tokens": [ids]}: *ids malloc'd (NULL when empty). */
int ds_api_parse_detokenize(int32_t **ids, size_t *n, const char *body,
			    size_t len, const ds_api_limits *lim,
			    ds_api_err *e);

/* One answer or stream chunk.  text need not be valid UTF-8: invalid
 * bytes become U+FFFD (the JSON must be valid). */
typedef struct ds_api_out {
	enum ds_api_kind kind;
	const char *id;             /* "cmpl-..." or "chatcmpl-..." */
	long long created;          /* Unix seconds */
	const char *model;
	const char *text;
	size_t n_text;
	const char *reasoning;      /* chat: the reasoning apart (reasoning_content),
				       shown when n_reasoning > 0 */
	size_t n_reasoning;
	const char *finish;         /* "stop", "length"; NULL: not yet */
	size_t prompt_tokens, completion_tokens;
	size_t cached_tokens;       /* of the prompt, from the prompt cache
				       (usage.prompt_tokens_details) */
	const json_t *tool_calls;   /* chat: message.tool_calls, or NULL */
	const int32_t *tokens;      /* the answer's ids, stop ids excluded; */
	size_t n_tokens;            /* shown as choices[0].tokens when */
	int with_tokens;            /* with_tokens (ds_api_answer) */
} ds_api_out;

/* The whole answer (text_completion / chat.completion) as JSON; malloc'd,
 * NULL when out of memory. */
char *ds_api_answer(const ds_api_out *o);

enum ds_api_chunk {
	DS_CHUNK_ROLE,              /* chat: delta {role, content ""} */
	DS_CHUNK_TEXT,              /* text (delta.content) */
	DS_CHUNK_REASONING,         /* chat: reasoning (delta.reasoning_content) */
	DS_CHUNK_TOOLS,             /* chat: delta.tool_calls (each with its
				       index) */
	DS_CHUNK_FINISH,            /* finish_reason, empty text/delta */
	DS_CHUNK_USAGE,             /* choices [] and usage */
};

/* One server-sent event "data: {...}\n\n"; *len its length. */
char *ds_api_chunk(const ds_api_out *o, enum ds_api_chunk what, size_t *len);
/* {"error": {"message", "type", "param", "code"}} */
char *ds_api_error_json(const ds_api_err *e);

/* Does an Authorization header value carry "Bearer KEY"?  The time taken
 * depends on the key's length only, not on where the values differ. */
int ds_api_key_ok(const char *header, const char *key);

/* A Content-Length value against the body limit: 0 when it is a decimal
 * number up to max, 1 when it is a larger one, -1 when it is not a plain
 * decimal number (empty, a sign, spaces, anything but digits). */
int ds_api_length_check(const char *value, size_t max);

/* ---- metrics (metrics.c) -------------------------------------------------------- */

/* Endpoints as metric labels: a fixed set, so no request can add series. */
enum ds_ep {
	DS_EP_COMPLETIONS, DS_EP_CHAT, DS_EP_MODELS, DS_EP_HEALTH,
	DS_EP_METRICS, DS_EP_TOKENIZE, DS_EP_DETOKENIZE, DS_EP_APPLY_TEMPLATE,
	DS_EP_OTHER, DS_EP_N
};

/* "/v1/completions" ... ; DS_EP_OTHER for any other path. */
enum ds_ep ds_ep_of(const char *path);
const char *ds_ep_name(enum ds_ep ep);

typedef struct ds_metrics ds_metrics;

/* What the server is at the time of rendering. */
typedef struct ds_metrics_now {
	int ready;                  /* the model is loaded */
	size_t queued, running;     /* scheduler requests */
	size_t slots, queue_limit;
	size_t cache_bytes, cache_limit, cache_blocks; /* the prompt cache's */
} ds_metrics_now;

int ds_metrics_init(ds_metrics **m, ds_err *err);
void ds_metrics_free(ds_metrics *m);
/* An answer was sent (status as sent, streams count when they start). */
void ds_metrics_answer(ds_metrics *m, enum ds_ep ep, int status);
/* n generated tokens at time now (seconds, ds_now_s). */
void ds_metrics_tokens(ds_metrics *m, size_t n, double now);
/* A generation ended: its counts (prompt tokens, those of them taken
 * from the prompt cache, generated), seconds from arrival to the end, and
 * to the first token (< 0: none was sampled). */
void ds_metrics_finish(ds_metrics *m, enum ds_finish why, size_t prompt,
		       size_t cached, size_t gen, double latency, double ttft);
/* Prometheus text exposition format 0.0.4; malloc'd. */
char *ds_metrics_render(ds_metrics *m, const ds_metrics_now *g, double now);

/* ---- the server (engine.c, http.c) ---------------------------------------------- */

typedef struct ds_srv ds_srv;

typedef struct ds_srv_opts {
	const char *model_dir;
	const char *host;           /* address to bind; NULL: 127.0.0.1 */
	unsigned port;              /* 0: a free port (ds_srv_port) */
	int threads;                /* forward threads; <= 0: one per CPU */
	const char *cpus;           /* pin them (threads.h CPU list) */
	uint32_t parallel;          /* slots: sequences decoded together */
	uint32_t ctx_size;          /* positions per slot; 0: the model's
				       training context, at most 4096 */
	uint32_t batch;             /* entries of a forward pass (a prompt's
				       chunk); 0: DS_SESSION_BATCH */
	uint32_t queue;             /* requests waiting beyond the slots */
	const char *api_key;        /* NULL: no authentication */
	size_t max_body;            /* request body bytes */
	unsigned timeout_s;         /* idle/slow connections; drain bound */
	unsigned max_conns;         /* connections open at once, idle ones
				       included; 0: 2048 (both at most what
				       RLIMIT_NOFILE leaves) */
	const char *spec;           /* speculative decoding: "mtp" "ngram"
				       "draft", or NULL */
	uint32_t spec_k;            /* drafts per step, 0: adaptive */
	const char *draft;          /* spec "draft": the draft model */
	const char *chat_template;  /* a named template (chat.h) instead of
				       the model's, or NULL */
	const char *chat_template_file; /* a Jinja file instead, or NULL */
	int64_t cache_mib;          /* the prompt cache (--cache-ram): < 0
				       the default, 0 none */
	const char *cache_dir;      /* kept there across restarts, or NULL */
	enum ds_reasoning reasoning;/* --reasoning-format (DS_REASON_AUTO:
				       deepseek for templates that know
				       <think>, else none) */
	int hugepages;              /* forward.h ds_model_place */
	const char *numa;           /* "interleave" | "node" | NULL */
	int verbose;                /* log every request */
	/* Diagnostics, one line each without newline, from any thread. */
	void (*log)(void *user, const char *line);
	void *log_user;
	/* --mpi: rank 0 of the job (dist.h), the model split over it
	 * (ds_dist_model) before ds_srv_start; the other ranks follow the
	 * forward passes; NULL: one process */
	struct ds_dist *dist;
} ds_srv_opts;

/* The session the server opens for o (the other ranks of a --mpi job
 * open the same, without the tokenizer). */
struct ds_session_opts;
void ds_srv_session_opts(const ds_srv_opts *o, struct ds_session_opts *so);

/* Listen (the model is not loaded: /health answers 503 "loading"). */
int ds_srv_start(ds_srv **s, const ds_srv_opts *o, ds_err *err);
/* The port listened on. */
unsigned ds_srv_port(const ds_srv *s);
/* Load the model and start generating; /health then answers "ok".  May
 * run on another thread while requests are answered. */
int ds_srv_load(ds_srv *s, ds_err *err);
/* Stop accepting connections; requests that still arrive on open ones are
 * answered 503 with "Connection: close". */
void ds_srv_quiesce(ds_srv *s);
/* Generation requests queued or running. */
size_t ds_srv_inflight(ds_srv *s);
/* Cancel what is still generating, close every connection, free. */
void ds_srv_free(ds_srv *s);

#endif
