/* AVX-512 Q8_0 × f32 rows (q8_0.h's order): one zmm is the 16 lanes; a block's 32 int8
 * are widened in two halves (elements k and k + 16 of lane k), then per token a multiply,
 * the fused second product and the fused scale, as the reference.  As the bf16 mat-mul
 * (kernels_avx512.c): one row against up to K3_TOKEN_BLOCK tokens (a block decoded once
 * for them), or with long activations K3_ROW_BLOCK rows together, and many tokens a chunk
 * at a time (K3_X_L2_BYTES).  The half scale by F16C (every AVX-512 CPU has it). */
#include <immintrin.h>
#include <stdint.h>

#include "engine/kernels/avx512.h"
#include "engine/kernels/kernels.h"
#include "engine/kernels/kernels_isa.h"
#include "engine/kernels/q8_0.h"

K3_TARGET_BEGIN("avx512f,avx512bw,avx512vl,f16c")

static inline __m512 widen16(const int8_t *q)
{
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)q)));
}

/* The half scale in every lane (vcvtph2ps: exact, as k3_f16_to_f32). */
static inline __m512 scale16(uint16_t d)
{
    return _mm512_broadcastss_ps(_mm_cvtph_ps(_mm_cvtsi32_si128(d)));
}

/* RB rows against NT tokens (constants after inlining, so acc[][] stays in registers):
 * each block's activations are loaded once for the RB rows, each row's block decoded
 * once for the NT tokens; every (row, token) pair still adds its blocks in order. */
static inline __attribute__((always_inline)) void
block_q8_0(const struct k3_q8_0_block *W, int blocks, const float *X, int ldx, float *Y, int ldy,
           int RB, int NT)
{
    __m512 acc[K3_ROW_BLOCK][K3_TOKEN_BLOCK];
#pragma GCC unroll 4
    for (int r = 0; r < RB; r++)
#pragma GCC unroll 4
        for (int k = 0; k < NT; k++)
            acc[r][k] = _mm512_setzero_ps();
    for (int b = 0; b < blocks; b++) {
        __m512 xl[K3_TOKEN_BLOCK], xh[K3_TOKEN_BLOCK];
#pragma GCC unroll 4
        for (int k = 0; k < NT; k++) {
            const float *xk = X + (size_t)k * ldx + (size_t)b * K3_Q8_0_BLOCK;
            xl[k] = _mm512_loadu_ps(xk);
            xh[k] = _mm512_loadu_ps(xk + 16);
        }
#pragma GCC unroll 4
        for (int r = 0; r < RB; r++) {
            const struct k3_q8_0_block *w = W + (size_t)r * blocks + b;
            if (!(b & 1)) /* about once per 64-byte line */
                _mm_prefetch((const char *)w + K3_PREFETCH_AHEAD, _MM_HINT_T0);
            __m512 lo = widen16(w->q), hi = widen16(w->q + 16), d = scale16(w->d);
#pragma GCC unroll 4
            for (int k = 0; k < NT; k++) {
                __m512 a = _mm512_mul_ps(lo, xl[k]);
                a = _mm512_fmadd_ps(hi, xh[k], a);
                acc[r][k] = _mm512_fmadd_ps(a, d, acc[r][k]);
            }
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < RB; r++)
#pragma GCC unroll 4
        for (int k = 0; k < NT; k++)
            Y[(size_t)k * ldy + r] = k3_avx512_reduce16(acc[r][k]);
}

void k3_rows_q8_0_avx512(const struct k3_q8_0_block *W, int nrows, int cols, const float *X,
                         int ldx, float *Y, int ldy, int T)
{
    int blocks = cols / K3_Q8_0_BLOCK, chunk = k3_token_chunk(cols);
    if (T > chunk) { /* the tokens a chunk at a time (K3_X_L2_BYTES) */
        for (int c0 = 0; c0 < T; c0 += chunk)
            k3_rows_q8_0_avx512(W, nrows, cols, X + (size_t)c0 * ldx, ldx, Y + (size_t)c0 * ldy,
                                ldy, T - c0 < chunk ? T - c0 : chunk);
        return;
    }
    int rows_together = (size_t)T * cols * sizeof(float) > K3_X_L1_BYTES ? K3_ROW_BLOCK : 1;
    for (int r = 0; r < nrows; r += rows_together) {
        int rb = nrows - r < rows_together ? nrows - r : rows_together;
        for (int t = 0; t < T; t += K3_TOKEN_BLOCK) {
            int nt = T - t < K3_TOKEN_BLOCK ? T - t : K3_TOKEN_BLOCK;
            K3_BLOCK_DISPATCH(rb, nt, block_q8_0(W + (size_t)r * blocks, blocks,
                                                 X + (size_t)t * ldx, ldx,
                                                 Y + (size_t)t * ldy + r, ldy, RB_, NT_));
        }
    }
}

K3_TARGET_END
