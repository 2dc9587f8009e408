/* tunefz.h - plans: what a parsed or made plan must do (tune.h: "both
 * parse back with ds_tune_plan_parse"). */
#ifndef DS_TUNEFZ_H
#define DS_TUNEFZ_H

#include "fuzz.h"
#include "host/tune/tune.h"

/* Format p as text and JSON; each must parse back to the same actions. */
static inline void tunefz_roundtrip(const ds_tune_plan *p)
{
	for (int json = 0; json < 2; json++) {
		ds_tune_plan q;
		ds_err err;
		char *s = ds_tune_plan_format(p, json, &err);

		FZ_CHECK(s != NULL);
		memset(&q, 0, sizeof q);
		if (ds_tune_plan_parse(&q, s, "plan", &err) != 0) {
			fprintf(stderr, "%s\n---\n%s\n", err.msg, s);
			FZ_CHECK(!"a formatted plan parses back");
		}
		FZ_CHECK(q.n_act == p->n_act);
		for (int i = 0; i < p->n_act; i++) {
			FZ_CHECK(q.act[i].op == p->act[i].op);
			FZ_CHECK(strcmp(q.act[i].path, p->act[i].path) == 0);
			FZ_CHECK((q.act[i].value == NULL) ==
				 (p->act[i].value == NULL));
			FZ_CHECK(q.act[i].value == NULL ||
				 strcmp(q.act[i].value, p->act[i].value) == 0);
		}
		ds_tune_plan_free(&q);
		free(s);
	}
}

#endif
