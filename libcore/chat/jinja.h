/*
 * jinja.h - a Jinja template interpreter for Hugging Face chat templates.
 *
 * It renders a tokenizer_config.json "chat_template" the way transformers'
 * apply_chat_template does: Jinja2 in an ImmutableSandboxedEnvironment with
 * trim_blocks and lstrip_blocks on, the loop-controls extension (break,
 * continue), transformers' `tojson` filter (json.dumps with
 * ensure_ascii=False) and its globals raise_exception() and
 * strftime_now().  The subset is the one published templates use
 * (docs/jinja.md); anything outside it -- an unknown statement, filter,
 * test or method -- is an error that names it, never ignored.
 *
 * Errors are one line: "chat_template:LINE:COL: problem" (the column
 * counts characters from 1), except raise_exception('msg'), whose error
 * message is the template's message alone.  Every input is bounded:
 * source size, nesting, macro call depth, loop iterations, memory and
 * output (the JINJA_MAX_* constants in jinja_int.h).
 */
#ifndef DS_JINJA_H
#define DS_JINJA_H

#include <stddef.h>
#include <time.h>

#include <jansson.h>

#include "base/util.h"

typedef struct ds_jinja ds_jinja; /* a parsed template (immutable) */

/* Parse src[0..len) (UTF-8; it need not be NUL-terminated).  On success
 * *out is the template (ds_jinja_free it); on failure -1, err set (a
 * syntax error, an unknown statement, filter or test, source not UTF-8
 * or too large). */
int ds_jinja_parse(const char *src, size_t len, ds_jinja **out, ds_err *err);

typedef struct ds_jinja_opts {
	/* What strftime_now() formats, in UTC, as seconds since the epoch;
	 * pin_time 0: the local time of the clock, as transformers does
	 * (datetime.now()). */
	int pin_time;
	time_t now;
} ds_jinja_opts;

/* Render t with the variables of ctx, a JSON object (messages,
 * add_generation_prompt, bos_token, eos_token, tools, ...; NULL: none).
 * JSON null is None, integers are ints, reals floats.  On success *out is
 * the malloc'd NUL-terminated text (free it) and *outlen (may be NULL) its
 * length in bytes; on failure -1 with err set, *out NULL.  The template
 * can be rendered any number of times, from several threads at once. */
int ds_jinja_render(const ds_jinja *t, const json_t *ctx, char **out,
		    size_t *outlen, ds_err *err);
/* The same with options (o NULL: as ds_jinja_render). */
int ds_jinja_render_opts(const ds_jinja *t, const json_t *ctx,
			 const ds_jinja_opts *o, char **out, size_t *outlen,
			 ds_err *err);

void ds_jinja_free(ds_jinja *t);

#endif
