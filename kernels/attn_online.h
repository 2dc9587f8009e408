/*
 * attn_online.h - the generic SIMD attention kernel (kernels.h
 * ds_attn_job): a row at a time, each converted to floats once for all g
 * heads, through attn_softmax.h's steps.  Included by avx2.c and neon.c
 * after they define, besides those steps' helpers:
 *   kv_row_f32(type, row, dim, out)  a cache row as floats (out rounded up
 *                                    to a multiple of 16, zero-filled)
 *   dot(a, b, n), axpy(a, x, n, y)
 * avx2.c and neon.c run it for the widths their tiled kernels do not take.
 */
static void attn_generic(const ds_attn_job *a, float *scratch)
{
	const size_t g = a->g, kd = a->k.dim, vd = a->v.dim, C = DS_ATTN_CHUNK;
	float *sc = scratch, *mx = sc + g * C, *l = mx + g;
	float *kf = (float *)(((uintptr_t)(l + g) + 63) & ~(uintptr_t)63);
	float *vf = kf + (kd + 15) / 16 * 16;
	size_t h, j, j0, nj;

	attn_begin(a, mx, l);
	for (j0 = 0; j0 < a->n; j0 += C) {
		nj = a->n - j0 < C ? a->n - j0 : C;
		for (j = 0; j < nj; j++) {
			kv_row_f32(a->k.type, a->k.data + (j0 + j) * a->k.ld, kd, kf);
			for (h = 0; h < g; h++)
				sc[h * C + j] = a->scale * dot(a->q + h * a->q_ld, kf, kd);
		}
		attn_weights(a, sc, mx, l, j0, nj);
		for (j = 0; j < nj; j++) {
			kv_row_f32(a->v.type, a->v.data + (j0 + j) * a->v.ld, vd, vf);
			for (h = 0; h < g; h++)
				axpy(sc[h * C + j], vf, vd, a->o + h * a->o_ld);
		}
	}
	attn_end(a, mx, l);
}
