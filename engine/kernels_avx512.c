/* AVX-512 bf16 and f32 kernels (F, BW, VL), and the tables of the "avx512" and
 * "avx512vbmi" variants (they differ in the MXFP4 decode only): one zmm holds the 16 lanes of kernels.h, so
 * element i lands in lane i mod 16 as in the reference; mul then add, never FMA; the
 * same pairwise lane tree; a partial last block of 16 goes through the scalar tail.
 * The mat-mul keeps one weight row in registers for up to K3_TOKEN_BLOCK tokens. */
#include <immintrin.h>
#include <stdbool.h>
#include <stdint.h>

#include "engine/kernels.h"
#include "engine/kernels_isa.h"

static bool avx512_supported(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl");
}

static bool avx512vbmi_supported(void)
{
    return avx512_supported() && __builtin_cpu_supports("avx512vbmi") &&
           __builtin_cpu_supports("avx512vnni");
}

K3_TARGET_BEGIN("avx512f,avx512bw,avx512vl")

/* The tree of k3_lane_reduce, in registers: (l, l+8), (l, l+4), (l, l+2), (l, l+1). */
static inline float reduce16(__m512 acc)
{
    __m256 lo = _mm512_castps512_ps256(acc);
    __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc), 1));
    __m256 a8 = _mm256_add_ps(lo, hi);
    __m128 a4 = _mm_add_ps(_mm256_castps256_ps128(a8), _mm256_extractf128_ps(a8, 1));
    __m128 a2 = _mm_add_ps(a4, _mm_movehl_ps(a4, a4));
    return _mm_cvtss_f32(_mm_add_ss(a2, _mm_movehdup_ps(a2)));
}

/* 16 bf16 weights as f32: the bits shifted into the high half. */
static inline __m512 bf16x16(const uint16_t *w)
{
    __m256i h = _mm256_loadu_si256((const __m256i *)w);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* Finishes a dot product: the elements from n16 on added to their lanes one by one. */
static inline float finish_bf16(__m512 acc, const uint16_t *w, const float *x, int n16, int n)
{
    if (n16 == n)
        return reduce16(acc);
    float a[K3_LANES];
    _mm512_storeu_ps(a, acc);
    for (int i = n16; i < n; i++)
        a[i % K3_LANES] += k3_bf16_to_f32(w[i]) * x[i];
    return k3_lane_reduce(a);
}

static float dot_bf16_avx512(const uint16_t *w, const float *x, int n)
{
    int n16 = n & ~(K3_LANES - 1);
    __m512 acc = _mm512_setzero_ps();
    for (int i = 0; i < n16; i += K3_LANES)
        acc = _mm512_add_ps(acc, _mm512_mul_ps(bf16x16(w + i), _mm512_loadu_ps(x + i)));
    return finish_bf16(acc, w, x, n16, n);
}

static float dot_f32_avx512(const float *a, const float *b, int n)
{
    int n16 = n & ~(K3_LANES - 1);
    __m512 acc = _mm512_setzero_ps();
    for (int i = 0; i < n16; i += K3_LANES)
        acc = _mm512_add_ps(acc, _mm512_mul_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i)));
    if (n16 == n)
        return reduce16(acc);
    float s[K3_LANES];
    _mm512_storeu_ps(s, acc);
    for (int i = n16; i < n; i++)
        s[i % K3_LANES] += a[i] * b[i];
    return k3_lane_reduce(s);
}

/* RB rows against NT tokens (constants after inlining, so acc[][] stays in registers): the
 * rows advance together, so each 16 activations are loaded once for RB rows (a long x
 * need not survive in L1 while a whole row streams past; K3_X_L1_BYTES) and RB·NT
 * accumulator chains run side by side.  Each (row, token) pair still sums its lanes in
 * element order. */
static inline __attribute__((always_inline)) void
block_bf16(const uint16_t *W, int cols, const float *X, int ldx, float *Y, int ldy, int RB, int NT)
{
    int n16 = cols & ~(K3_LANES - 1);
    __m512 acc[K3_ROW_BLOCK][K3_TOKEN_BLOCK];
#pragma GCC unroll 4
    for (int r = 0; r < RB; r++)
#pragma GCC unroll 4
        for (int k = 0; k < NT; k++)
            acc[r][k] = _mm512_setzero_ps();
    for (int i = 0; i < n16; i += K3_LANES) {
        __m512 x[K3_TOKEN_BLOCK];
#pragma GCC unroll 4
        for (int k = 0; k < NT; k++)
            x[k] = _mm512_loadu_ps(X + (size_t)k * ldx + i);
#pragma GCC unroll 4
        for (int r = 0; r < RB; r++) {
            __m512 w = bf16x16(W + (size_t)r * cols + i);
#pragma GCC unroll 4
            for (int k = 0; k < NT; k++)
                acc[r][k] = _mm512_add_ps(acc[r][k], _mm512_mul_ps(w, x[k]));
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < RB; r++)
#pragma GCC unroll 4
        for (int k = 0; k < NT; k++)
            Y[(size_t)k * ldy + r] =
                finish_bf16(acc[r][k], W + (size_t)r * cols, X + (size_t)k * ldx, n16, cols);
}

static void rows_bf16_avx512(const uint16_t *W, int nrows, int cols, const float *X, int ldx,
                             float *Y, int ldy, int T)
{
    int rows_together = (size_t)T * cols * sizeof(float) > K3_X_L1_BYTES ? K3_ROW_BLOCK : 1;
    for (int r = 0; r < nrows; r += rows_together) {
        const uint16_t *w = W + (size_t)r * cols;
        int rb = nrows - r < rows_together ? nrows - r : rows_together;
        for (int t = 0; t < T; t += K3_TOKEN_BLOCK) {
            int nt = T - t < K3_TOKEN_BLOCK ? T - t : K3_TOKEN_BLOCK;
            const float *x = X + (size_t)t * ldx;
            float *y = Y + (size_t)t * ldy + r;
            K3_BLOCK_DISPATCH(rb, nt, block_bf16(w, cols, x, ldx, y, ldy, RB_, NT_));
        }
    }
}

K3_TARGET_END

const struct k3_kernel_ops k3_kernels_avx512 = {
    .name = "avx512",
    .supported = avx512_supported,
    .dot_bf16 = dot_bf16_avx512,
    .dot_f32 = dot_f32_avx512,
    .dot_mxfp4 = k3_dot_mxfp4_avx512,
    .rows_bf16 = rows_bf16_avx512,
    .rows_mxfp4 = k3_rows_mxfp4_avx512,
    .rows_mxfp4_q8 = k3_rows_mxfp4_q8_scalar,
};

/* The same bf16 kernels; MXFP4 with the VBMI nibble decode and the int8 path with VNNI
 * (mxfp4_avx512.c).  Every CPU with VBMI but one (Cannon Lake) has VNNI. */
const struct k3_kernel_ops k3_kernels_avx512vbmi = {
    .name = "avx512vbmi",
    .supported = avx512vbmi_supported,
    .dot_bf16 = dot_bf16_avx512,
    .dot_f32 = dot_f32_avx512,
    .dot_mxfp4 = k3_dot_mxfp4_avx512vbmi,
    .rows_bf16 = rows_bf16_avx512,
    .rows_mxfp4 = k3_rows_mxfp4_avx512vbmi,
    .rows_mxfp4_q8 = k3_rows_mxfp4_q8_avx512vnni,
};
