/* AVX2 Q8_0 × f32 rows (q8_0.h's order): the 16 lanes as two ymm (lanes 0..7, 8..15), a
 * block's 32 int8 widened in four quarters (elements k and k + 16 of lane k), then per
 * token and half a multiply, the fused second product and the fused scale, as the
 * reference.  One row at a time against up to K3_TOKEN_BLOCK tokens, many tokens a chunk
 * at a time (K3_X_L2_BYTES).  The half scale by F16C (the avx2 variant requires it). */
#include <immintrin.h>
#include <stdint.h>

#include "engine/kernels/avx2.h"
#include "engine/kernels/kernels.h"
#include "engine/kernels/kernels_isa.h"
#include "engine/kernels/q8_0.h"

K3_TARGET_BEGIN("avx2,fma,f16c")

static inline __m256 widen8(const int8_t *q)
{
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)q)));
}

static inline __attribute__((always_inline)) void
row_q8_0_tokens(const struct k3_q8_0_block *w, int blocks, const float *X, int ldx, float *Y,
                int ldy, int NT)
{
    __m256 lo[K3_TOKEN_BLOCK], hi[K3_TOKEN_BLOCK];
#pragma GCC unroll 4
    for (int k = 0; k < NT; k++)
        lo[k] = hi[k] = _mm256_setzero_ps();
    for (int b = 0; b < blocks; b++) {
        if (!(b & 1))
            _mm_prefetch((const char *)(w + b) + K3_PREFETCH_AHEAD, _MM_HINT_T0);
        __m256 q0 = widen8(w[b].q), q1 = widen8(w[b].q + 8);
        __m256 q2 = widen8(w[b].q + 16), q3 = widen8(w[b].q + 24);
        __m256 d = _mm256_set1_ps(_mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(w[b].d))));
        const float *x = X + (size_t)b * K3_Q8_0_BLOCK;
#pragma GCC unroll 4
        for (int k = 0; k < NT; k++) {
            const float *xk = x + (size_t)k * ldx;
            __m256 a = _mm256_mul_ps(q0, _mm256_loadu_ps(xk));
            __m256 c = _mm256_mul_ps(q1, _mm256_loadu_ps(xk + 8));
            a = _mm256_fmadd_ps(q2, _mm256_loadu_ps(xk + 16), a);
            c = _mm256_fmadd_ps(q3, _mm256_loadu_ps(xk + 24), c);
            lo[k] = _mm256_fmadd_ps(a, d, lo[k]);
            hi[k] = _mm256_fmadd_ps(c, d, hi[k]);
        }
    }
#pragma GCC unroll 4
    for (int k = 0; k < NT; k++)
        Y[(size_t)k * ldy] = k3_avx2_reduce16(lo[k], hi[k]);
}

void k3_rows_q8_0_avx2(const struct k3_q8_0_block *W, int nrows, int cols, const float *X,
                       int ldx, float *Y, int ldy, int T)
{
    int blocks = cols / K3_Q8_0_BLOCK, chunk = k3_token_chunk(cols);
    for (int c0 = 0; c0 < T; c0 += chunk) {
        int nt = T - c0 < chunk ? T - c0 : chunk;
        const float *Xc = X + (size_t)c0 * ldx;
        float *Yc = Y + (size_t)c0 * ldy;
        for (int r = 0; r < nrows; r++)
            K3_TOKEN_BLOCKS(nt, t, row_q8_0_tokens(W + (size_t)r * blocks, blocks,
                                                   Xc + (size_t)t * ldx, ldx,
                                                   Yc + (size_t)t * ldy + r, ldy, NT_));
    }
}

K3_TARGET_END
