/*
 * reasoning.h - an R1-style answer split as it streams, as DeepSeek's API
 * returns it: the text between <think> and </think> is the reasoning
 * (message.reasoning_content), the rest the content.
 *
 * The answer starts inside the block when the prompt opened it (R1's
 * templates end the generation prompt with "<think>\n":
 * ds_chat_opens_think), else the block is the model's when its output
 * starts with "<think>" (after any whitespace).  Whitespace at the
 * start and end of the reasoning and at the start of the content is
 * dropped (the template's newlines around the block); everything after
 * the first </think> is content; an answer without a block is all
 * content, byte for byte; one that ends inside the block is all
 * reasoning.
 *
 * Text is pushed in pieces of any size -- a marker may be split between
 * tokens -- and what can be decided is appended to the outputs at once;
 * the rest (a possible marker, whitespace that may end the reasoning) is
 * held until the next piece or ds_reason_finish.  Pushing the same text
 * in any pieces gives the same outputs.
 */
#ifndef DS_REASONING_H
#define DS_REASONING_H

#include <stddef.h>

#include "base/util.h"

typedef struct ds_reason {
	int state;                 /* where the text so far has left it */
	int started;               /* reasoning text has begun */
	char *hold;                /* text not yet given out */
	size_t n_hold, cap;
} ds_reason;

/* Appended output, growing as ds_stopper's (malloc'd, NUL-terminated). */
typedef struct ds_reason_out {
	char *think, *content;
	size_t n_think, cap_think, n_content, cap_content;
} ds_reason_out;

/* opened: the prompt left the model inside the block. */
void ds_reason_init(ds_reason *r, int opened);
int ds_reason_push(ds_reason *r, const char *s, size_t n, ds_reason_out *o,
		   ds_err *err);
/* The end of the answer: what is held is given out. */
int ds_reason_finish(ds_reason *r, ds_reason_out *o, ds_err *err);
void ds_reason_free(ds_reason *r);
void ds_reason_out_free(ds_reason_out *o);

#endif
