/* progress.c - a progress bar on a terminal, one summary line otherwise. */
#include <string.h>
#include <unistd.h>

#include "util.h"

void ds_progress_init(ds_progress *p, FILE *out, const char *what,
		      uint32_t total_items, uint64_t total_bytes)
{
	memset(p, 0, sizeof *p);
	p->out = out;
	p->what = what;
	p->tty = out != NULL && isatty(fileno(out));
	p->total_items = total_items;
	p->total_bytes = total_bytes;
	p->t0 = ds_now_s();
}

static void draw(ds_progress *p, double now)
{
	double el = now - p->t0, frac, mbs, eta;
	int i, w = 30, fill;
	char bar[64];

	frac = p->total_bytes ? (double)p->done_bytes / (double)p->total_bytes
			      : (p->total_items ? (double)p->done_items /
							  p->total_items : 1);
	mbs = el > 0 ? (double)p->done_bytes / el / 1e6 : 0;
	eta = frac > 0 ? el / frac - el : 0;
	fill = (int)(frac * w + 0.5);
	for (i = 0; i < w; i++)
		bar[i] = i < fill ? '#' : '.';
	bar[w] = '\0';
	fprintf(p->out, "\r%s [%s] %u/%u tensors, %.0f/%.0f MB, %.0f MB/s, ETA %.0fs ",
		p->what, bar, p->done_items, p->total_items,
		(double)p->done_bytes / 1e6, (double)p->total_bytes / 1e6, mbs,
		eta);
	fflush(p->out);
}

void ds_progress_add(ds_progress *p, uint32_t items, uint64_t bytes)
{
	double now;

	p->done_items += items;
	p->done_bytes += bytes;
	if (p->out == NULL || !p->tty)
		return;
	now = ds_now_s();
	if (now - p->last_draw < 0.1 && p->done_items < p->total_items)
		return;
	p->last_draw = now;
	draw(p, now);
}

void ds_progress_done(ds_progress *p)
{
	double el = ds_now_s() - p->t0;

	if (p->out == NULL)
		return;
	if (p->tty)
		fputc('\n', p->out);
	fprintf(p->out, "%s: %u tensors, %.1f MB in %.2f s (%.0f MB/s)\n",
		p->what, p->done_items, (double)p->done_bytes / 1e6, el,
		el > 0 ? (double)p->done_bytes / el / 1e6 : 0.0);
}
