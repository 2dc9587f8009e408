/*
 * outq.h - the answers of requests that run together, written in the
 * order the requests came in.
 *
 * With continuous batching a later request can finish first.  Each
 * request gets a slot in submission order; what it writes while it is
 * the oldest unfinished one (the head) goes straight out, flushed, so
 * the head streams; what the others write is buffered until every
 * request before them is done.  Two streams: text (stdout) and
 * fixed-size binary rows (a logits file), each optional.
 */
#ifndef DS_OUTQ_H
#define DS_OUTQ_H

#include <stddef.h>
#include <stdio.h>

typedef struct ds_outq_slot ds_outq_slot;

typedef struct ds_outq {
	FILE *text;                /* or NULL */
	FILE *rows;                /* or NULL */
	size_t row_bytes;
	ds_outq_slot **slots;
	size_t n, cap, head;
	int failed;                /* a write or an allocation failed */
} ds_outq;

void ds_outq_init(ds_outq *q, FILE *text, FILE *rows, size_t row_bytes);
void ds_outq_free(ds_outq *q);
/* A new request's slot: its index (submission order), or -1 when out of
 * memory. */
long ds_outq_add(ds_outq *q);
void ds_outq_text(ds_outq *q, size_t i, const char *s, size_t n);
void ds_outq_row(ds_outq *q, size_t i, const void *row);
/* Request i wrote all it will: the requests after it may come out. */
void ds_outq_done(ds_outq *q, size_t i);

#endif
