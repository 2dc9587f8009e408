/* reasoning.c - the reasoning block of an answer, apart (reasoning.h). */
#define _GNU_SOURCE     /* memmem */
#include <stdlib.h>
#include <string.h>

#include "reasoning.h"

enum {
	R_START,                   /* may open with <think> */
	R_THINK,                   /* inside the block */
	R_AFTER,                   /* after </think>: whitespace dropped */
	R_CONTENT,                 /* the rest is content */
};

static const char OPEN[] = "<think>", CLOSE[] = "</think>";
#define N_OPEN (sizeof OPEN - 1)
#define N_CLOSE (sizeof CLOSE - 1)

static int is_ws(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

void ds_reason_init(ds_reason *r, int opened)
{
	memset(r, 0, sizeof *r);
	r->state = opened ? R_THINK : R_START;
}

void ds_reason_free(ds_reason *r)
{
	free(r->hold);
	memset(r, 0, sizeof *r);
}

void ds_reason_out_free(ds_reason_out *o)
{
	free(o->think);
	free(o->content);
	memset(o, 0, sizeof *o);
}

static int put(char **buf, size_t *n, size_t *cap, const char *s, size_t k,
	       ds_err *err)
{
	if (k == 0)
		return 0;
	if (ds_grow((void **)buf, cap, *n + k + 1, 1))
		return ds_errf(err, "out of memory");
	memcpy(*buf + *n, s, k);
	*n += k;
	(*buf)[*n] = '\0';
	return 0;
}

static int think(ds_reason_out *o, const char *s, size_t k, ds_err *err)
{
	return put(&o->think, &o->n_think, &o->cap_think, s, k, err);
}

static int content(ds_reason_out *o, const char *s, size_t k, ds_err *err)
{
	return put(&o->content, &o->n_content, &o->cap_content, s, k, err);
}

/* Drop the first k held bytes. */
static void consume(ds_reason *r, size_t k)
{
	memmove(r->hold, r->hold + k, r->n_hold - k);
	r->n_hold -= k;
}

static size_t skip_ws(const ds_reason *r)
{
	size_t i = 0;

	while (i < r->n_hold && is_ws(r->hold[i]))
		i++;
	return i;
}

/* The longest tail of the held text that starts the marker m. */
static size_t partial(const ds_reason *r, const char *m, size_t len)
{
	size_t k = r->n_hold < len - 1 ? r->n_hold : len - 1;

	for (; k > 0; k--)
		if (memcmp(r->hold + r->n_hold - k, m, k) == 0)
			return k;
	return 0;
}

/* START: "<think>" after whitespace opens the block; anything else is
 * content, the whitespace included.  1: go on; 0: wait for more. */
static int step_start(ds_reason *r)
{
	size_t p = skip_ws(r), k = r->n_hold - p;

	if (k < N_OPEN && memcmp(r->hold + p, OPEN, k) == 0)
		return 0;
	if (k >= N_OPEN && memcmp(r->hold + p, OPEN, N_OPEN) == 0) {
		consume(r, p + N_OPEN);
		r->state = R_THINK;
		return 1;
	}
	r->state = R_CONTENT;
	return 1;
}

/* THINK: reasoning up to "</think>", held back where it may be the
 * marker or whitespace before it. */
static int step_think(ds_reason *r, ds_reason_out *o, ds_err *err)
{
	const char *end;
	size_t i, j;

	if (!r->started) {
		consume(r, skip_ws(r));
		if (r->n_hold == 0)
			return 0;
		r->started = 1;
	}
	end = memmem(r->hold, r->n_hold, CLOSE, N_CLOSE);
	if (end != NULL) {
		for (i = j = (size_t)(end - r->hold); j > 0 && is_ws(r->hold[j - 1]); j--)
			;
		if (think(o, r->hold, j, err))
			return -1;
		consume(r, i + N_CLOSE);
		r->state = R_AFTER;
		return 1;
	}
	for (j = r->n_hold - partial(r, CLOSE, N_CLOSE); j > 0 && is_ws(r->hold[j - 1]); j--)
		;
	if (think(o, r->hold, j, err))
		return -1;
	consume(r, j);
	return 0;
}

int ds_reason_push(ds_reason *r, const char *s, size_t n, ds_reason_out *o,
		   ds_err *err)
{
	int go = 1;

	if (r->state == R_CONTENT)
		return content(o, s, n, err);
	if (ds_grow((void **)&r->hold, &r->cap, r->n_hold + n + 1, 1))
		return ds_errf(err, "out of memory");
	memcpy(r->hold + r->n_hold, s, n);
	r->n_hold += n;
	while (go > 0 && r->n_hold > 0) {
		switch (r->state) {
		case R_START:
			go = step_start(r);
			break;
		case R_THINK:
			go = step_think(r, o, err);
			break;
		case R_AFTER:
			consume(r, skip_ws(r));
			if (r->n_hold > 0)
				r->state = R_CONTENT;
			break;
		default:
			if (content(o, r->hold, r->n_hold, err))
				return -1;
			r->n_hold = 0;
		}
	}
	return go < 0 ? -1 : 0;
}

int ds_reason_finish(ds_reason *r, ds_reason_out *o, ds_err *err)
{
	size_t j = r->n_hold;
	int rc = 0;

	if (r->state == R_START || r->state == R_CONTENT) {
		rc = content(o, r->hold, r->n_hold, err);
	} else if (r->state == R_THINK) {
		/* an unfinished block: its reasoning, trailing whitespace dropped */
		while (j > 0 && is_ws(r->hold[j - 1]))
			j--;
		rc = think(o, r->hold, j, err);
	}
	r->n_hold = 0;
	return rc;
}
