/* AVX2 MXFP4 × f32.  The 16 lanes of mxfp4.h as two ymm (lanes 0..7, 8..15), each the 32
 * packed bytes of its lanes: shifting right by 4j puts element 8k + j's nibble in the low
 * bits of dword k; vpermps, which reads the low 3, looks up its magnitude in an 8-entry
 * table, and the sign (nibble bit 3, shifted left to bit 31) is xor-ed in.  Per token the
 * two fma chains and the scale's fma, as the reference.  Scales follow
 * k3_e8m0_scale (0 → 2^-127, 255 → 0), 8 decoded together and spread to their lanes by a
 * permute per half block. */
#include <immintrin.h>
#include <stdint.h>

#include "engine/kernels.h"
#include "engine/kernels_isa.h"
#include "engine/mxfp4.h"

K3_TARGET_BEGIN("avx2,fma")

static inline float reduce16(__m256 lo, __m256 hi)
{
    __m256 a8 = _mm256_add_ps(lo, hi);
    __m128 a4 = _mm_add_ps(_mm256_castps256_ps128(a8), _mm256_extractf128_ps(a8, 1));
    __m128 a2 = _mm_add_ps(a4, _mm_movehl_ps(a4, a4));
    return _mm_cvtss_f32(_mm_add_ss(a2, _mm_movehdup_ps(a2)));
}

/* 2^(e-127) of the scales of groups g0 .. g0+n-1 (n ≤ 8) in lanes 0 .. n-1 (2^-127 in
 * the rest, whose lanes have no weights). */
static inline __m256 scales8(const uint8_t *scales, int n)
{
    uint8_t e8[8] = {0};
    for (int i = 0; i < n; i++)
        e8[i] = scales[i];
    __m256i e = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)e8));
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
        Y[(size_t)k * ldy] = reduce16(lo[k], hi[k]);
}

K3_MXFP4_ROWS(k3_rows_mxfp4_avx2, row_mxfp4_tokens)

K3_TARGET_END
