/* AVX2 MXFP4 × f32, and × int8 activations at the end.  The 16 lanes of mxfp4.h as two
 * ymm (lanes 0..7, 8..15), each the 32 packed bytes of its lanes: shifting right by 4j
 * puts element 8k + j's nibble in the low bits of dword k; vpermps, which reads the low
 * 3, looks up its magnitude in an 8-entry table, and the sign (nibble bit 3, shifted
 * left to bit 31) is xor-ed in.  Per token the two fma chains and the scale's fma, as
 * the reference.  Scales follow k3_e8m0_scale (0 → 2^-127, 255 → 0), 8 decoded together
 * and spread to their lanes by a permute per half block. */
#include <immintrin.h>
#include <stdint.h>

#include "engine/kernels/avx2.h"
#include "engine/kernels/kernels.h"
#include "engine/kernels/kernels_isa.h"
#include "engine/kernels/mxfp4.h"

K3_TARGET_BEGIN("avx2,fma")

/* 2^(e-127) of the scales of groups g0 .. g0+n-1 (n ≤ 8) in lanes 0 .. n-1 (2^-127 in
 * the rest, whose lanes have no weights). */
static inline __m256 scales8(const uint8_t *scales, int n)
{
    uint8_t e8[8] = {0};
    if (n < 8) { /* the row's end: copied, not read past (and a copy's bytes stored one by
                  * one can't be forwarded to the 8-byte load, so not in the row's body) */
        for (int i = 0; i < n; i++)
            e8[i] = scales[i];
        scales = e8;
    }
    __m256i e = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)scales));
    __m256i bits = _mm256_slli_epi32(e, 23);
    bits = _mm256_blendv_epi8(bits, _mm256_set1_epi32(0x00400000), /* e = 0: 2^-127 */
                              _mm256_cmpeq_epi32(e, _mm256_setzero_si256()));
    bits = _mm256_andnot_si256(_mm256_cmpeq_epi32(e, _mm256_set1_epi32(255)), bits);
    return _mm256_castsi256_ps(bits);
}

/* E2M1 value of the nibble at bits 4j..4j+3 of each dword. */
static inline __m256 decode(__m256i d, int j, __m256 magnitudes)
{
    __m256 mag = _mm256_permutevar8x32_ps(magnitudes, _mm256_srli_epi32(d, 4 * j));
    __m256i sign = _mm256_and_si256(_mm256_slli_epi32(d, 28 - 4 * j), _mm256_set1_epi32(INT32_MIN));
    return _mm256_xor_ps(mag, _mm256_castsi256_ps(sign));
}

/* a + c of 8 lanes (mxfp4.h) for one token: x at the lanes' first activation. */
static inline __m256 lanes_sum(const __m256 v[8], const float *x)
{
    __m256 a = _mm256_mul_ps(_mm256_loadu_ps(x), v[0]);
    __m256 c = _mm256_mul_ps(_mm256_loadu_ps(x + 16), v[1]);
#pragma GCC unroll 3
    for (int j = 2; j < 8; j += 2) {
        a = _mm256_fmadd_ps(_mm256_loadu_ps(x + 16 * j), v[j], a);
        c = _mm256_fmadd_ps(_mm256_loadu_ps(x + 16 * j + 16), v[j + 1], c);
    }
    return _mm256_add_ps(a, c);
}

static inline __attribute__((always_inline)) void
row_mxfp4_tokens(const uint8_t *p, const uint8_t *s, int groups, const float *Xb, int ldxb,
                 float *Y, int ldy, int NT)
{
    const __m256 magnitudes = _mm256_loadu_ps(k3_e2m1_values);
    __m256 lo[K3_TOKEN_BLOCK], hi[K3_TOKEN_BLOCK];
#pragma GCC unroll 4
    for (int k = 0; k < NT; k++)
        lo[k] = hi[k] = _mm256_setzero_ps();
    for (int g0 = 0; g0 < groups; g0 += 8) {
        int n = groups - g0 < 8 ? groups - g0 : 8;
        __m256 sc = scales8(s + g0, n);
        for (int bb = 0; 4 * bb < n; bb++) {
            int g = g0 + 4 * bb, have = n - 4 * bb; /* groups of this block in the row */
            const uint8_t *pb = p + (size_t)g * (K3_MXFP4_GROUP / 2);
            _mm_prefetch((const char *)pb + K3_PREFETCH_AHEAD, _MM_HINT_T0);
            __m256i dlo, dhi;
            if (have >= 4) {
                dlo = _mm256_loadu_si256((const __m256i *)pb);
                dhi = _mm256_loadu_si256((const __m256i *)(pb + 32));
            } else { /* lanes 4·have .. 15 are past the row: nothing read, so their weights
                      * and (padded) activations are 0 and they add +0, which is adding
                      * nothing (a lane sum starts at +0, so it is never -0) */
                const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
                dlo = _mm256_maskload_epi32((const int *)pb,
                                            _mm256_cmpgt_epi32(_mm256_set1_epi32(4 * have), lane));
                dhi = _mm256_maskload_epi32((const int *)(pb + 32),
                                            _mm256_cmpgt_epi32(_mm256_set1_epi32(4 * have - 8), lane));
            }
            __m256 vlo[8], vhi[8];
#pragma GCC unroll 8
            for (int j = 0; j < 8; j++) {
                vlo[j] = decode(dlo, j, magnitudes);
                vhi[j] = decode(dhi, j, magnitudes);
            }
            const int32_t *lane_group = k3_mxfp4_lane_group[bb];
            __m256 slo = _mm256_permutevar8x32_ps(sc, _mm256_loadu_si256((const __m256i *)lane_group));
            __m256 shi = _mm256_permutevar8x32_ps(sc, _mm256_loadu_si256((const __m256i *)(lane_group + 8)));
#pragma GCC unroll 4
            for (int k = 0; k < NT; k++) {
                const float *x = Xb + (size_t)k * ldxb + (size_t)g * K3_MXFP4_GROUP;
                lo[k] = _mm256_fmadd_ps(lanes_sum(vlo, x), slo, lo[k]);
                hi[k] = _mm256_fmadd_ps(lanes_sum(vhi, x + 8), shi, hi[k]);
            }
        }
    }
#pragma GCC unroll 4
    for (int k = 0; k < NT; k++)
        Y[(size_t)k * ldy] = k3_avx2_reduce16(lo[k], hi[k]);
}

K3_MXFP4_ROWS(k3_rows_mxfp4_avx2, row_mxfp4_tokens)

K3_TARGET_END

/* ---- int8 activations ------------------------------------------------------------------
 * Group by group, each into the 8 lanes of its half of the pair (even groups lanes 0-7,
 * odd ones 8-15, mxfp4.h): its 16 packed bytes in both 128-bit lanes, shifted by 0 and 4
 * and masked, hold the nibbles of its even then odd elements in the order of q; vpshufb
 * turns them into 2·E2M1 + 12 (unsigned); vpmaddubsw multiplies by q and adds pairs
 * (at most 2·24·127, no saturation), vpmaddwd by 1 adds those pairs, and the bias takes
 * the +12 back.  Exact integers, so the same bytes as the scalar reference.  A pair's two
 * groups are one step of the loop, so each half's accumulators stay in registers (a half
 * picked at run time would put them in memory: bench/results/kernels-choices.md, "a pair
 * of groups per loop step"). */

K3_TARGET_BEGIN("avx2,fma")

/* Group g's products for NT tokens into acc, the 8 lanes of its half (a pair's q and
 * biases hold group g's at 32g and 8g: even groups lanes 0-7, odd ones 8-15); c[8k] its
 * 2^(e-127)·d/2 for the k-th token of x. */
static inline __attribute__((always_inline)) void
q8_group(const uint8_t *p, int g, const struct k3_q8_token *x, const float *c, __m256 *acc,
         int NT)
{
    const __m256i shifts = _mm256_set_epi64x(4, 4, 0, 0);
    const __m256i table = _mm256_broadcastsi128_si256(
        _mm_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0));
    const __m128i *pw = (const __m128i *)(p + (size_t)g * 16);
    __m256i b = _mm256_broadcastsi128_si256(_mm_loadu_si128(pw));
    __m256i w = _mm256_shuffle_epi8(
        table, _mm256_and_si256(_mm256_srlv_epi64(b, shifts), _mm256_set1_epi8(0x0F)));
#pragma GCC unroll 4
    for (int k = 0; k < NT; k++) {
        const int8_t *q = x->q + k * x->qstride + (size_t)g * 32;
        const int32_t *bias = x->bias + k * x->bstride + (size_t)g * 8;
        __m256i prod = _mm256_maddubs_epi16(w, _mm256_loadu_si256((const __m256i *)q));
        __m256i sum = _mm256_add_epi32(_mm256_madd_epi16(prod, _mm256_set1_epi16(1)),
                                       _mm256_loadu_si256((const __m256i *)bias));
        acc[k] = _mm256_add_ps(acc[k], _mm256_mul_ps(_mm256_cvtepi32_ps(sum),
                                                     _mm256_set1_ps(c[8 * k])));
    }
}

static inline __attribute__((always_inline)) void
row_q8_tokens(const uint8_t *p, const uint8_t *s, int groups, const struct k3_q8 *xq, int t0,
              float *Y, int ldy, int NT)
{
    const struct k3_q8_token x = k3_q8_token(xq, t0);
    __m256 lo[K3_TOKEN_BLOCK], hi[K3_TOKEN_BLOCK]; /* lanes 0-7 (even groups), 8-15 (odd) */
#pragma GCC unroll 4
    for (int k = 0; k < NT; k++)
        lo[k] = hi[k] = _mm256_setzero_ps();
    float c[K3_TOKEN_BLOCK * 8]; /* 2^(e-127) · d/2 of 8 groups, token by token */
    for (int g0 = 0; g0 < groups; g0 += 8) {
        int n = groups - g0 < 8 ? groups - g0 : 8;
        __m256 sw = scales8(s + g0, n);
        __m256i have = _mm256_cmpgt_epi32(_mm256_set1_epi32(n),
                                          _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
#pragma GCC unroll 4
        for (int k = 0; k < NT; k++) {
            __m256 dh = _mm256_maskload_ps(x.dh + k * x.dstride + g0, have);
            _mm256_storeu_ps(c + 8 * k, _mm256_mul_ps(sw, dh));
        }
        int j = 0;
        for (; j + 1 < n; j += 2) {
            int g = g0 + j;
            if (!(j & 3)) /* once per 64-byte line of weights */
                _mm_prefetch((const char *)(p + (size_t)g * 16) + K3_PREFETCH_AHEAD, _MM_HINT_T0);
            q8_group(p, g, &x, c + j, lo, NT);
            q8_group(p, g + 1, &x, c + j + 1, hi, NT);
        }
        if (j < n) /* the row's last pair lacks its odd group */
            q8_group(p, g0 + j, &x, c + j, lo, NT);
    }
#pragma GCC unroll 4
    for (int k = 0; k < NT; k++)
        Y[(size_t)k * ldy] = k3_avx2_reduce16(lo[k], hi[k]);
}

K3_MXFP4_Q8_ROWS(k3_rows_mxfp4_q8_avx2, row_q8_tokens)

K3_TARGET_END
