/* fuzz_tuneplan.c - what ds-tune apply and revert read from files: a plan
 * (text "PATH = VALUE" / "mkdir PATH", or JSON; libcore/host/tune/planio.c),
 * and the same bytes as the state file revert reads (state.c).  A parsed
 * plan only names kernel settings and formats back to itself; a loaded
 * state only names kernel settings. */
#include "tunefz.h"
#include "host/tune/internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *text = fz_strdup(data, size);
	ds_tune_plan p;
	ds_tstate st;
	ds_err err;
	int exists;

	memset(&p, 0, sizeof p);
	if (ds_tune_plan_parse(&p, text, "plan", &err) == 0) {
		for (int i = 0; i < p.n_act; i++)
			FZ_CHECK(ds_tune_check_path(p.act[i].path, "", &err) == 0);
		tunefz_roundtrip(&p);
		ds_tune_plan_free(&p);
	}
	free(text);
	fz_mkdir("state");
	fz_write("state/state.json", data, size);
	if (ds_tstate_open(&st, fz_path("state/state.json"), "/", 0, &err) != 0)
		return 0;
	if (ds_tstate_load(&st, &exists, &err) == 0)
		for (int i = 0; i < st.n; i++)
			FZ_CHECK(ds_tune_check_path(st.e[i].path, "", &err) == 0);
	ds_tstate_close(&st);
	return 0;
}
