/*
 * test_kvcache.c - cache sizes against docs/deepseek.md section 6 (MLA: 576
 * values per token per layer, 70,272 bytes per token for V3 in 16 bits),
 * the per-slot views (MLA's V inside its K rows), types, and cutting a
 * slot.
 */
#include <string.h>

#include "harness.h"
#include "model/kvcache.h"

static void v3(ds_hparams *hp)
{
	memset(hp, 0, sizeof *hp);
	hp->arch = DS_ARCH_DEEPSEEK2;
	hp->n_layer = 61;
	hp->n_head = 128;
	hp->kv_lora_rank = 512;
	hp->qk_nope_head_dim = 128;
	hp->qk_rope_head_dim = 64;
	hp->v_head_dim = 128;
}

static void llama8b(ds_hparams *hp)
{
	memset(hp, 0, sizeof *hp);
	hp->arch = DS_ARCH_LLAMA;
	hp->n_layer = 32;
	hp->n_head = 32;
	hp->n_head_kv = 8;
	hp->head_dim = 128;
}

static void test_sizes(void)
{
	ds_hparams hp;
	size_t b;
	ds_err err;

	v3(&hp);
	/* docs/deepseek.md section 6: 1152 B/token/layer in bf16 */
	T_CHECK(ds_kvcache_size(&hp, 1, 1, DS_KV_BF16, &b, &err) == 0);
	T_CHECK(b == 70272 + 4096 - 70272 % 4096 || b == 70272);
	T_CHECK(ds_kvcache_size(&hp, 1, 4096, DS_KV_F16, &b, &err) == 0 &&
		b == 70272ull * 4096);
	T_CHECK(ds_kvcache_size(&hp, 3, 4096, DS_KV_F32, &b, &err) == 0 &&
		b == 3 * 2 * 70272ull * 4096);
	/* q8: 18 blocks of {d, 32 x int8} per row */
	T_CHECK(ds_kvcache_size(&hp, 1, 4096, DS_KV_Q8, &b, &err) == 0 &&
		b == 61ull * 18 * 36 * 4096);
	llama8b(&hp);
	/* K and V of 8 heads of 128, 32 layers, 2 bytes: 128 KiB per token */
	T_CHECK(ds_kvcache_size(&hp, 1, 1024, DS_KV_F16, &b, &err) == 0 &&
		b == 131072ull * 1024);
	T_CHECK(ds_kvcache_size(&hp, 0, 1024, DS_KV_F16, &b, &err) == -1);
	T_CHECK(ds_kvcache_size(&hp, 1u << 31, 1u << 31, DS_KV_F32, &b, &err) == -1 &&
		strstr(err.msg, "overflow"));
	hp.head_dim = 48;
	T_CHECK(ds_kvcache_size(&hp, 1, 16, DS_KV_Q8, &b, &err) == -1 &&
		strstr(err.msg, "multiples of 32"));
}

static void test_views(void)
{
	ds_hparams hp;
	ds_kvcache kv;
	ds_kv k, v, k2, v2;
	ds_err err;

	v3(&hp);
	hp.n_layer = 3;
	T_CHECK(ds_kvcache_init(&kv, &hp, 2, 64, DS_KV_F16, &err) == 0);
	ds_kvcache_layer(&kv, 1, 2, &k, &v);
	T_CHECK(k.dim == 576 && v.dim == 512 && k.data == v.data);
	T_CHECK(k.ld == 1152 && v.ld == 1152 && k.type == DS_KV_F16);
	/* every layer of every slot is its own range */
	ds_kvcache_layer(&kv, 1, 1, &k2, &v2);
	T_CHECK(k2.data + 64 * 1152 <= k.data);
	ds_kvcache_layer(&kv, 0, 2, &k2, &v2);
	T_CHECK(k2.data + 64 * 1152 <= kv.data + kv.slot_bytes &&
		k2.data < k.data);
	/* writable, and zero until written */
	T_CHECK(k.data[0] == 0 && k.data[64 * 1152 - 1] == 0);
	memset(k.data, 0x5a, 64 * 1152);
	kv.len[1] = 10;
	ds_kvcache_seq_keep(&kv, 1, 4);
	T_CHECK(kv.len[1] == 4 && k.data[0] == 0x5a);
	/* emptying a slot gives its pages back */
	ds_kvcache_seq_keep(&kv, 1, 0);
	T_CHECK(kv.len[1] == 0 && k.data[0] == 0);
	ds_kvcache_free(&kv);

	llama8b(&hp);
	hp.n_layer = 2;
	T_CHECK(ds_kvcache_init(&kv, &hp, 1, 8, DS_KV_Q8, &err) == 0);
	ds_kvcache_layer(&kv, 0, 1, &k, &v);
	/* each head's K rows one after another, then each head's V rows */
	T_CHECK(k.ld == 4 * 36 && v.ld == 4 * 36);
	T_CHECK(k.head_stride == 8 * 4 * 36 && v.head_stride == 8 * 4 * 36);
	T_CHECK(v.data == k.data + 8 * 8 * 4 * 36);
	T_CHECK(v.data + 7 * v.head_stride + 7 * v.ld + 4 * 36 == k.data + kv.slot_layer_bytes);
	ds_kvcache_free(&kv);
}

static void test_names(void)
{
	enum ds_kvtype t;
	ds_err err;

	T_CHECK(ds_kvtype_parse("q8", &t, &err) == 0 && t == DS_KV_Q8);
	T_CHECK(ds_kvtype_parse("bf16", &t, &err) == 0 && t == DS_KV_BF16);
	T_CHECK(ds_kvtype_parse("f32", &t, &err) == 0 && t == DS_KV_F32);
	T_CHECK(ds_kvtype_parse("f16", &t, &err) == 0 && t == DS_KV_F16);
	T_CHECK(ds_kvtype_parse("q4", &t, &err) == -1 && strstr(err.msg, "q8"));
	T_CHECK(strcmp(ds_kvtype_name(DS_KV_Q8), "q8") == 0);
}

int main(void)
{
	T_RUN(test_sizes);
	T_RUN(test_views);
	T_RUN(test_names);
	return t_done();
}
