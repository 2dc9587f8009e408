/* model.c - the numbers a plan needs from a model directory: the bytes
 * ds-run --hugepages copies (model.bin), the KV-cache bytes per token,
 * and for an MPI job the routed experts' bytes (split over the ranks)
 * and the output projection's (rank 0's alone).  The model is opened
 * with the loader (modelfile.h), so a plan is only made for a directory
 * ds-run would load. */
#include <string.h>

#include "format/modelfile.h"
#include "tune.h"

/* Values cached per token and layer: MLA's compressed latent and rope
 * key, or full K and V heads. */
static uint64_t kv_values(const ds_hparams *hp)
{
	if (hp->arch == DS_ARCH_DEEPSEEK2)
		return (uint64_t)hp->kv_lora_rank + hp->qk_rope_head_dim;
	return 2ull * hp->n_head_kv * hp->head_dim;
}

int ds_tune_model_read(const char *dir, ds_tune_model *m, ds_err *err)
{
	ds_model md;
	uint64_t v;
	int rc = 0;

	memset(m, 0, sizeof *m);
	/* with the MTP layer's tables, to leave its bytes out: a run loads
	 * it only when it drafts with it */
	if (ds_model_load(&md, dir, DS_LOAD_MTP, err) != 0)
		return -1;
	snprintf(m->arch, sizeof m->arch, "%s", ds_arch_name(md.hp.arch));
	m->bytes = md.bin.size;
	for (size_t i = md.n_tensors - md.n_mtp_tensors; i < md.n_tensors; i++)
		m->mtp_bytes += md.tensors[i].size;
	m->n_ctx_train = md.hp.n_ctx_train;
	m->n_expert = md.hp.n_expert;
	for (size_t i = 0; i + md.n_mtp_tensors < md.n_tensors; i++) {
		const ds_tensor *t = &md.tensors[i];
		size_t n = strlen(t->name);

		if (t->ndim == 3 && n > 5 && strcmp(t->name + n - 5, "_exps") == 0)
			m->exp_bytes += t->size;
		else if (strcmp(t->name, "output") == 0)
			m->out_bytes = t->size;
	}
	/* f16 values: 2 bytes each */
	if (ds_mul_u64(kv_values(&md.hp), md.hp.n_layer, &v) != 0 ||
	    ds_mul_u64(v, 2, &m->kv_token_bytes) != 0)
		rc = ds_errf(err, "%s: KV cache size overflows", dir);
	ds_model_free(&md);
	return rc;
}
