/* AVX-512 Q8_0 × f32 rows (q8_0.h's order): one zmm is the 16 lanes; a block's 32 int8
 * are widened in two halves (elements k and k + 16 of lane k), then per token a multiply,
 * the fused second product and the fused scale, as the reference.  One row at a time
 * against up to K3_TOKEN_BLOCK tokens (a block decoded once for them), many tokens a chunk
 * at a time (K3_X_L2_BYTES). */
#include <immintrin.h>
#include <stdint.h>

#include "engine/kernels/avx512.h"
#include "engine/kernels/kernels.h"
#include "engine/kernels/kernels_isa.h"
#include "engine/kernels/q8_0.h"

K3_TARGET_BEGIN("avx512f,avx512bw,avx512vl")

static inline __m512 widen16(const int8_t *q)
{
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)q)));
}

static inline __attribute__((always_inline)) void
row_q8_0_tokens(const struct k3_q8_0_block *w, int blocks, const float *X, int ldx, float *Y,
                int ldy, int NT)
{
    __m512 acc[K3_TOKEN_BLOCK];
#pragma GCC unroll 4
    for (int k = 0; k < NT; k++)
        acc[k] = _mm512_setzero_ps();
    for (int b = 0; b < blocks; b++) {
        if (!(b & 1)) /* about once per 64-byte line */
            _mm_prefetch((const char *)(w + b) + K3_PREFETCH_AHEAD, _MM_HINT_T0);
        __m512 lo = widen16(w[b].q), hi = widen16(w[b].q + 16);
        __m512 d = _mm512_set1_ps(k3_f16_to_f32(w[b].d));
        const float *x = X + (size_t)b * K3_Q8_0_BLOCK;
#pragma GCC unroll 4
        for (int k = 0; k < NT; k++) {
            const float *xk = x + (size_t)k * ldx;
            __m512 a = _mm512_mul_ps(lo, _mm512_loadu_ps(xk));
            a = _mm512_fmadd_ps(hi, _mm512_loadu_ps(xk + 16), a);
            acc[k] = _mm512_fmadd_ps(a, d, acc[k]);
        }
    }
#pragma GCC unroll 4
    for (int k = 0; k < NT; k++)
        Y[(size_t)k * ldy] = k3_avx512_reduce16(acc[k]);
}

void k3_rows_q8_0_avx512(const struct k3_q8_0_block *W, int nrows, int cols, const float *X,
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
