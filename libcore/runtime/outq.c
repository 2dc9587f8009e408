/* outq.c - answers in submission order (outq.h). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "outq.h"

struct ds_outq_slot {
	char *buf;                 /* pending text */
	size_t n_buf, cap_buf;
	char *rows;                /* pending rows */
	size_t n_rows, cap_rows;   /* bytes */
	int done;
};

void ds_outq_init(ds_outq *q, FILE *text, FILE *rows, size_t row_bytes)
{
	memset(q, 0, sizeof *q);
	q->text = text;
	q->rows = rows;
	q->row_bytes = row_bytes;
}

static void slot_free(ds_outq_slot *s)
{
	if (s == NULL)
		return;
	free(s->buf);
	free(s->rows);
	free(s);
}

void ds_outq_free(ds_outq *q)
{
	size_t i;

	for (i = q->head; i < q->n; i++)
		slot_free(q->slots[i]);
	free(q->slots);
	memset(q, 0, sizeof *q);
}

long ds_outq_add(ds_outq *q)
{
	ds_outq_slot *s = calloc(1, sizeof *s);

	if (s != NULL && q->n == q->cap) {
		size_t c = q->cap ? 2 * q->cap : 64;
		ds_outq_slot **p = c < SIZE_MAX / sizeof *p ?
				   realloc(q->slots, c * sizeof *p) : NULL;

		if (p == NULL) {
			free(s);
			s = NULL;
		} else {
			q->slots = p;
			q->cap = c;
		}
	}
	if (s == NULL) {
		q->failed = 1;
		return -1;
	}
	q->slots[q->n] = s;
	return (long)q->n++;
}

/* Append n bytes to a pending buffer. */
static void keep(ds_outq *q, char **b, size_t *len, size_t *cap, const void *s,
		 size_t n)
{
	size_t c = *cap ? *cap : 256;
	char *p;

	while (c < *len + n && c < SIZE_MAX / 2)
		c *= 2;
	if (c > *cap) {
		if (c < *len + n || (p = realloc(*b, c)) == NULL) {
			q->failed = 1;
			return;
		}
		*b = p;
		*cap = c;
	}
	memcpy(*b + *len, s, n);
	*len += n;
}

void ds_outq_text(ds_outq *q, size_t i, const char *s, size_t n)
{
	ds_outq_slot *o = q->slots[i];

	if (n == 0 || q->text == NULL)
		return;
	if (i != q->head) {
		keep(q, &o->buf, &o->n_buf, &o->cap_buf, s, n);
		return;
	}
	if (fwrite(s, 1, n, q->text) != n || fflush(q->text) != 0)
		q->failed = 1;
}

void ds_outq_row(ds_outq *q, size_t i, const void *row)
{
	ds_outq_slot *o = q->slots[i];

	if (q->rows == NULL)
		return;
	if (i != q->head)
		keep(q, &o->rows, &o->n_rows, &o->cap_rows, row, q->row_bytes);
	else if (fwrite(row, 1, q->row_bytes, q->rows) != q->row_bytes)
		q->failed = 1;
}

/* The head's buffers out, and the head past every finished slot. */
static void advance(ds_outq *q)
{
	while (q->head < q->n) {
		ds_outq_slot *o = q->slots[q->head];

		if (o->n_buf && (fwrite(o->buf, 1, o->n_buf, q->text) != o->n_buf ||
				 fflush(q->text) != 0))
			q->failed = 1;
		if (o->n_rows && fwrite(o->rows, 1, o->n_rows, q->rows) != o->n_rows)
			q->failed = 1;
		o->n_buf = o->n_rows = 0;
		if (!o->done)
			return;
		slot_free(o);
		q->slots[q->head++] = NULL;
	}
}

void ds_outq_done(ds_outq *q, size_t i)
{
	q->slots[i]->done = 1;
	if (i == q->head)
		advance(q);
}
