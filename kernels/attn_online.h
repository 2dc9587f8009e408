/*
 * attn_online.h - the generic SIMD attention kernel (kernels.h
 * ds_attn_job), included by avx2.c after it defines, with its vectors:
 *   kv_row_f32(type, row, dim, out)  a cache row as floats (out rounded up
 *                                    to a multiple of 16, zero-filled)
 *   dot(a, b, n), axpy(a, x, n, y), scale_row(o, n, c)
 *   exp_sub_sum(s, n, m)             s[i] = e^(s[i] - m), returns the sum
 *
 * One pass over the keys in chunks of DS_ATTN_CHUNK with a running maximum
 * and sum per head (the online softmax), so each key and value row is read
 * and converted once for all g heads.  scalar.c's two-pass version is the
 * reference.  avx2.c runs it for the widths its tiled kernel does not take.
 */
static void attn_generic(const ds_attn_job *a, float *scratch)
{
	const size_t g = a->g, kd = a->k.dim, vd = a->v.dim, C = DS_ATTN_CHUNK;
	float *sc = scratch, *mx = sc + g * C, *l = mx + g;
	float *kf = (float *)(((uintptr_t)(l + g) + 63) & ~(uintptr_t)63);
	float *vf = kf + (kd + 15) / 16 * 16;
	size_t h, j, j0, nj;

	for (h = 0; h < g; h++) {
		mx[h] = -INFINITY;
		l[h] = 0;
		memset(a->o + h * a->o_ld, 0, vd * sizeof(float));
	}
	for (j0 = 0; j0 < a->n; j0 += C) {
		nj = a->n - j0 < C ? a->n - j0 : C;
		for (j = 0; j < nj; j++) {
			kv_row_f32(a->k.type, a->k.data + (j0 + j) * a->k.ld, kd, kf);
			for (h = 0; h < g; h++)
				sc[h * C + j] = a->scale * dot(a->q + h * a->q_ld, kf, kd);
		}
		for (h = 0; h < g; h++) {
			float *s = sc + h * C, m = mx[h], sum;

			for (j = 0; j < nj; j++)
				m = s[j] > m ? s[j] : m;
			sum = exp_sub_sum(s, nj, m);
			if (m != mx[h]) {
				float corr = mx[h] == -INFINITY ? 0.0f : expf(mx[h] - m);

				l[h] *= corr;
				scale_row(a->o + h * a->o_ld, vd, corr);
				mx[h] = m;
			}
			l[h] += sum;
		}
		for (j = 0; j < nj; j++) {
			kv_row_f32(a->v.type, a->v.data + (j0 + j) * a->v.ld, vd, vf);
			for (h = 0; h < g; h++)
				axpy(sc[h * C + j], vf, vd, a->o + h * a->o_ld);
		}
	}
	for (h = 0; h < g; h++)
		scale_row(a->o + h * a->o_ld, vd, 1.0f / l[h]);
}
