/* fp8-matvec.c - a prototype of a runtime type that keeps DeepSeek's FP8
 * bytes (e4m3fn, one scale per 128x128 block) and widens them in
 * registers, to measure it against q8g32 before adding it (issue 36).
 * Not part of the build.
 *
 *   cc -O2 -mavx512f -mavx512bw -mavx512bf16 -mavx512vl [-DPF=BYTES] \
 *      scripts/proto/fp8-matvec.c -o /tmp/fp8-matvec -lm
 *   /tmp/fp8-matvec N K REPS [COPIES]
 *
 * y = W x for W [N, K] FP8 row-major (K a multiple of 128), one thread:
 * each 64 codes are
 * widened to bf16 through a 128-entry table of magnitudes (two vpermi2w
 * and a blend per 32, then the sign), multiplied with x (bf16) by
 * vdpbf16ps into f32, and each row's 128-column block sums scaled by the
 * block's scale.  The kernel is checked against a float64 product;
 * it prints GB/s of weight bytes and the time per product.  With COPIES
 * > 1 each product reads the next of that many copies of the matrix (in
 * transparent huge pages), so the weights stream from memory as in
 * ds-bench --kernels' matvec rows; with 1 they stay in cache (the
 * kernel's own speed). */
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

static float e4m3(uint8_t c)
{
	unsigned e = (c >> 3) & 15, m = c & 7;
	float v = e == 0 ? ldexpf((float)m, -9) : ldexpf((float)(8 + m), (int)e - 10);

	return c & 0x80 ? -v : v;
}

static uint16_t bf16(float f)
{
	uint32_t u;

	memcpy(&u, &f, 4);
	return (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}

static double now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec * 1e-9;
}

#ifndef PF
#define PF 4096
#endif

/* 32 codes (zero-extended to 16 bits) -> 32 bf16 */
static inline __m512i widen(__m512i c, __m512i t0, __m512i t1, __m512i t2,
			    __m512i t3)
{
	__m512i mag = _mm512_and_si512(c, _mm512_set1_epi16(0x7f));
	__mmask32 hi = _mm512_test_epi16_mask(mag, _mm512_set1_epi16(0x40));
	__m512i lo = _mm512_permutex2var_epi16(t0, mag, t1);
	__m512i up = _mm512_permutex2var_epi16(t2, mag, t3);
	__m512i v = _mm512_mask_blend_epi16(hi, lo, up);

	return _mm512_or_si512(v, _mm512_slli_epi16(_mm512_and_si512(c,
				_mm512_set1_epi16(0x80)), 8));
}

static void matvec(float *y, const uint8_t *w, const float *sc,
		   const uint16_t *x, uint64_t n, uint64_t k, const uint16_t *tab)
{
	__m512i t0 = _mm512_loadu_si512(tab), t1 = _mm512_loadu_si512(tab + 32);
	__m512i t2 = _mm512_loadu_si512(tab + 64), t3 = _mm512_loadu_si512(tab + 96);
	uint64_t r, c0, c, nb = k / 128;

	for (r = 0; r < n; r++) {
		const uint8_t *wr = w + r * k;
		__m512 acc = _mm512_setzero_ps();

		for (c0 = 0; c0 < k; c0 += 128) {
			__m512 b = _mm512_setzero_ps();

			for (c = c0; c < c0 + 128; c += 64) {
				__m512i raw = _mm512_loadu_si512(wr + c);

				/* the next rows' bytes, PF ahead, as ds's decode streams */
				_mm_prefetch((const char *)(wr + c + PF), _MM_HINT_T0);
				__m512i a = _mm512_cvtepu8_epi16(_mm512_castsi512_si256(raw));
				__m512i d = _mm512_cvtepu8_epi16(_mm512_extracti64x4_epi64(raw, 1));

				b = _mm512_dpbf16_ps(b, (__m512bh)widen(a, t0, t1, t2, t3),
						     (__m512bh)_mm512_loadu_si512(x + c));
				b = _mm512_dpbf16_ps(b, (__m512bh)widen(d, t0, t1, t2, t3),
						     (__m512bh)_mm512_loadu_si512(x + c + 32));
			}
			acc = _mm512_fmadd_ps(b, _mm512_set1_ps(sc[(r / 128) * nb + c0 / 128]), acc);
		}
		y[r] = _mm512_reduce_add_ps(acc);
	}
}

int main(int argc, char **argv)
{
	uint64_t n = argc > 1 ? strtoull(argv[1], 0, 10) : 2048;
	uint64_t k = argc > 2 ? strtoull(argv[2], 0, 10) : 7168;
	int reps = argc > 3 ? atoi(argv[3]) : 50, i;
	int copies = argc > 4 ? atoi(argv[4]) : 1;
	uint64_t nb = k / 128, j, stride = (n * k + (2u << 20) - 1) & ~(uint64_t)((2u << 20) - 1);
	uint8_t *w = aligned_alloc(2u << 20, stride * copies);
	float *sc = malloc((n / 128 + 1) * nb * 4), *y = malloc(n * 4), err = 0;
	uint16_t *x = aligned_alloc(64, k * 2), tab[128];
	double t0, best = 1e9;

	for (i = 0; i < 128; i++)
		tab[i] = bf16(e4m3((uint8_t)i));
	madvise(w, stride * copies, MADV_HUGEPAGE);
	srand(1);
	for (j = 0; j < n * k; j++) {
		w[j] = (uint8_t)rand();
		if ((w[j] & 0x7f) == 0x7f)
			w[j] ^= 1;
	}
	for (i = 1; i < copies; i++)
		memcpy(w + i * stride, w, n * k);
	for (j = 0; j < (n / 128 + 1) * nb; j++)
		sc[j] = 1e-3f * (1 + rand() % 100 / 100.0f);
	for (j = 0; j < k; j++)
		x[j] = bf16((rand() % 2001 - 1000) / 1000.0f);
	for (i = 0; i < reps; i++) {
		int c;

		t0 = now();
		for (c = 0; c < copies; c++)
			matvec(y, w + c * stride, sc, x, n, k, tab);
		t0 = (now() - t0) / copies;
		best = t0 < best ? t0 : best;
	}
	for (j = 0; j < n; j += n / 7 + 1) { /* a few rows against scalar f32 */
		double ref = 0;
		float xf;
		uint64_t c;

		for (c = 0; c < k; c++) {
			uint32_t u = (uint32_t)x[c] << 16;

			memcpy(&xf, &u, 4);
			ref += (double)e4m3(w[j * k + c]) * sc[(j / 128) * nb + c / 128] * xf;
		}
		err = fmaxf(err, (float)fabs(ref - y[j]));
	}
	printf("fp8 matvec %llux%llu, %d copies: best %.1f us, %.2f GB/s of "
	       "weights (max abs error vs f64 %.2g)\n", (unsigned long long)n,
	       (unsigned long long)k, copies, best * 1e6, n * k / best / 1e9, err);
	return 0;
}
