/* fuzz_qconfig.c - quantization settings (libcore/convert/quant/qconfig.c): the
 * input is config.json (its quantization_config), then
 * quantize_config.json, then quant_config.json of a checkpoint directory. */
#include <jansson.h>

#include "fuzz.h"
#include "convert/quant/quant.h"

static void detect(const char *dir, const json_t *cfg)
{
	ds_qconfig q;
	ds_err err;
	int w;

	for (w = DS_QF_AUTO; w <= DS_QF_NONE; w++) {
		memset(&q, 0, sizeof q);
		if (ds_qconfig_detect(&q, dir, cfg, (enum ds_qformat)w, &err) != 0)
			continue;
		/* what is accepted is something the re-packers handle */
		FZ_CHECK(q.method == DS_QM_NONE || q.bits == 4 || q.bits == 8);
		FZ_CHECK(q.method == DS_QM_NONE || q.method == DS_QM_FP8 ||
			 q.group_size == -1 ||
			 (q.group_size >= 32 && q.group_size % 32 == 0));
		/* FP8 blocks may be any size: the dequantizer takes partial
		 * blocks at the edges */
		FZ_CHECK(q.method != DS_QM_FP8 ||
			 (q.block[0] >= 1 && q.block[1] >= 1 &&
			  q.group_size == (int32_t)q.block[1]));
		FZ_CHECK(memchr(q.file, '\0', sizeof q.file) != NULL);
		FZ_CHECK(memchr(q.variant, '\0', sizeof q.variant) != NULL);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const char *const files[] = { "quantize_config.json",
					     "quant_config.json" };
	const char *dir = fz_mkdir("ckpt");
	json_error_t jerr;
	json_t *cfg;
	char name[64];
	int i;

	cfg = json_loadb((const char *)data, size, JSON_REJECT_DUPLICATES, &jerr);
	if (cfg != NULL) {
		detect(dir, cfg);
		json_decref(cfg);
	}
	for (i = 0; i < 2; i++) {
		snprintf(name, sizeof name, "ckpt/%s", files[i]);
		fz_write(name, data, size);
		detect(dir, NULL);
		fz_unlink(name);
	}
	return 0;
}
