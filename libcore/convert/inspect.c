/* inspect.c - ds-convert --inspect and --verify reports.
 *
 * Output (stable, for scripts): "key: value" summary lines, then a header
 * line and one tab-separated line per tensor. */
#define _GNU_SOURCE
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "convert.h"

static void describe(FILE *out, const ds_hparams *hp)
{
	fprintf(out, "%u layers, n_embd %u, n_vocab %u, n_head %u, n_head_kv %u",
		hp->n_layer, hp->n_embd, hp->n_vocab, hp->n_head, hp->n_head_kv);
	if (hp->arch == DS_ARCH_DEEPSEEK2)
		fprintf(out, ", MLA q_lora_rank %u kv_lora_rank %u", hp->q_lora_rank,
			hp->kv_lora_rank);
	if (hp->n_expert)
		fprintf(out, ", MoE %u experts (%u used, %u shared)", hp->n_expert,
			hp->n_expert_used, hp->n_expert_shared);
	if (hp->tie_embeddings)
		fprintf(out, ", tied embeddings");
	fputc('\n', out);
}

static void print_quant(FILE *out, const ds_qconfig *q)
{
	if (q->method == DS_QM_NONE) {
		fprintf(out, "quantization: none\n");
		return;
	}
	if (q->method == DS_QM_FP8) {
		fprintf(out, "quantization: fp8 e4m3, blocks of [%u, %u] (%s)\n",
			q->block[0], q->block[1], q->file);
		return;
	}
	fprintf(out, "quantization: %s %s, %u bits, group size %d", q->method ==
		DS_QM_AWQ ? "awq" : "gptq", q->variant, q->bits, q->group_size);
	if (q->method == DS_QM_GPTQ)
		fprintf(out, ", %s%s", q->sym ? "sym" : "asym",
			q->desc_act ? ", desc_act" : "");
	fprintf(out, " (%s)\n", q->file);
}

/* The multi-token-prediction layer: whether config.json names it and
 * the checkpoint carries it. */
static void print_mtp_checkpoint(FILE *out, const ds_hparams *hp,
				 const ds_st *st)
{
	char pre[48];
	size_t i, n, count = 0;

	if (hp->n_mtp == 0) {
		fprintf(out, "mtp: none\n");
		return;
	}
	n = (size_t)snprintf(pre, sizeof pre, "model.layers.%u.", hp->n_layer);
	for (i = 0; i < st->n_tensors; i++)
		count += strncmp(st->tensors[i].name, pre, n) == 0;
	if (count == 0)
		fprintf(out, "mtp: config.json names %u layer, the checkpoint does "
			"not carry it\n", hp->n_mtp);
	else
		fprintf(out, "mtp: %u layer, %s* (%zu tensors)\n", hp->n_mtp, pre,
			count);
}

static void print_mtp_model(FILE *out, const ds_model *m)
{
	if (m->hp.n_mtp == 0) {
		fprintf(out, "mtp: none\n");
		return;
	}
	fprintf(out, "mtp: %u layer, blk.%u.* and mtp.* (%zu tensors); embedding "
		"%s, head %s\n", m->hp.n_mtp, m->hp.n_layer, m->n_mtp_tensors,
		m->hp.mtp_shares_embd ? "token_embd (shared)" : "mtp.embd",
		m->hp.mtp_shares_head ? (m->hp.tie_embeddings ?
					 "token_embd (shared)" : "output (shared)")
				      : "mtp.head");
}

static int inspect_checkpoint(const char *src, FILE *out, ds_err *err)
{
	const char *tmp = getenv("TMPDIR");
	char near[512], sh[160];
	ds_source s;
	ds_hparams hp;
	ds_qconfig q;
	ds_st st;
	json_t *cfg = NULL;
	char *cp = NULL;
	uint64_t total = 0;
	size_t i;
	int rc = -1;

	snprintf(near, sizeof near, "%s/ds-inspect", tmp && *tmp ? tmp : "/tmp");
	memset(&st, 0, sizeof st);
	ds_tmpdir_clean_stale(near);
	if (ds_source_open(&s, src, near, NULL, err))
		return -1;
	cp = ds_path_join(s.dir, "config.json");
	if (cp == NULL || ds_hparams_from_hf(&hp, cp, err))
		goto out;
	cfg = json_load_file(cp, JSON_REJECT_DUPLICATES, NULL);
	if (ds_qconfig_detect(&q, s.dir, cfg, DS_QF_AUTO, err) ||
	    ds_st_open(&st, s.dir, err))
		goto out;
	for (i = 0; i < st.n_tensors; i++)
		total += st.tensors[i].nbytes;
	fprintf(out, "checkpoint: %s\n", src);
	fprintf(out, "files: %u\n", st.n_files);
	fprintf(out, "architecture: %s -> %s, ",
		json_string_value(json_object_get(cfg, "model_type")),
		ds_arch_name(hp.arch));
	describe(out, &hp);
	print_quant(out, &q);
	print_mtp_checkpoint(out, &hp, &st);
	fprintf(out, "tensors: %zu, %llu bytes\n", st.n_tensors,
		(unsigned long long)total);
	fprintf(out, "name\tdtype\tshape\tbytes\n");
	for (i = 0; i < st.n_tensors; i++) {
		const ds_st_tensor *t = &st.tensors[i];

		fprintf(out, "%s\t%s\t%s\t%llu\n", t->name, ds_st_dtype_name(t->dtype),
			ds_st_shape_str(t->ndim, t->shape, sh, sizeof sh),
			(unsigned long long)t->nbytes);
	}
	rc = 0;
out:
	json_decref(cfg);
	free(cp);
	ds_st_free(&st);
	ds_source_close(&s);
	return rc;
}

static int inspect_model(const char *dir, FILE *out, ds_err *err)
{
	uint64_t total = 0;
	char sh[160], tn[16];
	ds_model m;
	size_t i;

	if (ds_model_load(&m, dir, DS_LOAD_MTP, err))
		return -1;
	for (i = 0; i < m.n_tensors; i++)
		total += m.tensors[i].size;
	fprintf(out, "model: %s\n", dir);
	fprintf(out, "format: %s version %d\n", DS_MODEL_FORMAT, DS_MODEL_VERSION);
	fprintf(out, "architecture: %s, ", ds_arch_name(m.hp.arch));
	describe(out, &m.hp);
	fprintf(out, "quantization: %s, %u bits, group size %u, type %s\n",
		m.quant.source, m.quant.bits, m.quant.group_size, m.quant.type);
	print_mtp_model(out, &m);
	fprintf(out, "tensors: %zu, %llu bytes (model.bin %zu bytes)\n", m.n_tensors,
		(unsigned long long)total, m.bin.size);
	fprintf(out, "name\ttype\tshape\tbytes\toffset\tcrc32\n");
	for (i = 0; i < m.n_tensors; i++) {
		const ds_tensor *t = &m.tensors[i];

		fprintf(out, "%s\t%s\t%s\t%llu\t%llu\t%08x\n", t->name,
			ds_ttype_name(t->type, tn),
			ds_st_shape_str(t->ndim, t->shape, sh, sizeof sh),
			(unsigned long long)t->size, (unsigned long long)t->offset,
			t->crc32);
	}
	ds_model_free(&m);
	return 0;
}

int ds_inspect(const char *src, FILE *out, ds_err *err)
{
	char *meta = ds_path_join(src, "model.meta");
	int is_model = meta != NULL && ds_is_dir(src) && access(meta, F_OK) == 0;

	free(meta);
	return is_model ? inspect_model(src, out, err)
			: inspect_checkpoint(src, out, err);
}

int ds_verify(const char *dst, FILE *out, ds_err *err)
{
	uint64_t total = 0;
	ds_model m;
	size_t i;

	if (ds_model_load(&m, dst, DS_LOAD_MTP, err))
		return -1;
	if (ds_model_verify(&m, err)) {
		ds_model_free(&m);
		return -1;
	}
	for (i = 0; i < m.n_tensors; i++)
		total += m.tensors[i].size;
	fprintf(out, "%s: %zu tensors, %llu bytes: every CRC-32 matches\n", dst,
		m.n_tensors, (unsigned long long)total);
	ds_model_free(&m);
	return 0;
}
