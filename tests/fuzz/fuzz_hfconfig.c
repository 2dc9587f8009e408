/* fuzz_hfconfig.c - a Hugging Face config.json (libcore/format/hfconfig.c), and
 * the same bytes as model.meta's "hparams" object.  What is accepted
 * must survive the model.meta round trip and give a tensor table whose
 * shapes are not 0. */
#include <jansson.h>

#include "fuzz.h"
#include "format/hfconfig.h"

static void table(const ds_hparams *hp)
{
	ds_tdesc *d = NULL;
	size_t n = 0, i;
	ds_err err;
	int j;

	if (ds_arch_tensors(hp, &d, &n, &err) != 0)
		return;
	for (i = 0; i < n; i++)
		for (j = 0; j < d[i].ndim; j++)
			FZ_CHECK(d[i].shape[j] > 0);
	free(d);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	json_error_t jerr;
	json_t *cfg = json_loadb((const char *)data, size, JSON_REJECT_DUPLICATES,
				 &jerr);
	ds_hparams hp, back;
	ds_err err;

	if (cfg == NULL)
		return 0;
	memset(&hp, 0, sizeof hp);
	if (ds_hparams_from_hf_json(&hp, cfg, "config.json", &err) == 0) {
		json_t *o = ds_hparams_to_json(&hp);

		FZ_CHECK(o != NULL);
		memset(&back, 0, sizeof back);
		back.arch = hp.arch;
		FZ_CHECK(ds_hparams_from_json(&back, o, "model.meta", &err) == 0);
		FZ_CHECK(back.n_vocab == hp.n_vocab && back.n_layer == hp.n_layer &&
			 back.n_embd == hp.n_embd && back.n_eos == hp.n_eos);
		json_decref(o);
		table(&hp);
	}
	/* the meta reader needs the arch from outside "hparams" */
	for (int a = DS_ARCH_LLAMA; a <= DS_ARCH_DEEPSEEK2; a++) {
		memset(&hp, 0, sizeof hp);
		hp.arch = (enum ds_arch)a;
		if (ds_hparams_from_json(&hp, cfg, "model.meta", &err) == 0)
			table(&hp);
	}
	json_decref(cfg);
	return 0;
}
