/*
 * gstate.h - a request's grammar while it is sampled (sched.c): its own
 * matcher over the session's shared vocabulary, the mask a row of logits
 * gets before the sampler, the lazy trigger, and drafts checked before
 * they are verified.  docs/grammar.md, "In generation".
 */
#ifndef DS_GSTATE_H
#define DS_GSTATE_H

#include <stddef.h>
#include <stdint.h>

#include "base/util.h"
#include "grammar/grammar.h"

typedef struct ds_gstate {
	ds_gmatch *gm;             /* NULL: no grammar */
	const ds_gvocab *gv;
	uint64_t *mask;            /* [ds_gvocab_mask_words] */
	int on;                    /* the grammar applies (trigger seen) */
	char *trig;                /* the trigger, or NULL */
	size_t n_trig;
	uint8_t *tw;               /* the output's last bytes, to find it */
	size_t n_tw, cap_tw;
	size_t steps;              /* masks computed */
	double secs;               /* and the time they took */
} ds_gstate;

/* g for grammar gr over v (gr NULL: none; g is zeroed); with a trigger
 * (n_trigger bytes) the output is free until they appear. */
int ds_gstate_init(ds_gstate *g, const ds_grammar *gr, const ds_gvocab *v,
		   const char *trigger, size_t n_trigger, ds_err *err);
void ds_gstate_free(ds_gstate *g);
/* logits[n_vocab]: -inf for every token that cannot come next, the stop
 * ids (stops[n_stop]) kept only where the text is complete.  -1 when no
 * token can come (nothing changed then). */
int ds_gstate_mask(ds_gstate *g, float *logits, uint32_t n_vocab,
		   const int32_t *stops, size_t n_stop);
/* Token t (not a stop id) was sampled: -1 when the grammar refuses it or
 * out of memory. */
int ds_gstate_take(ds_gstate *g, int32_t t);
/* The grammar applies and nothing more can follow. */
int ds_gstate_done(const ds_gstate *g);
/* How many of drafts d[0..n) in a row the grammar allows (a stop id
 * counts where the text is complete, and ends them); the matcher is left
 * as it was. */
uint32_t ds_gstate_drafts(ds_gstate *g, const int32_t *d, uint32_t n,
			  const int32_t *stops, size_t n_stop);

#endif
