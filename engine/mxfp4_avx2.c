/* AVX2 MXFP4 × f32.  The 16 lanes of mxfp4.h as two ymm (lanes 0..7, 8..15).  Per group
 * the 16 packed bytes become four ymm of E2M1 values (elements 0..7, 8..15, 16..23,
 * 24..31): the magnitude from an 8-entry table in a register (vpermps reads the low 3 bits
 * of each index), the sign (nibble bit 3) moved to bit 31 and xored in, which gives -0 for
 * nibble 8 as the table does.  Lane l adds (x[l]·v[l] + x[16+l]·v[16+l])·2^(e-127) exactly
 * as the reference, mul then add.  Scales follow k3_e8m0_scale (0 → 2^-127, 255 → 0). */
#include <immintrin.h>
#include <stdint.h>

#include "engine/kernels.h"
#include "engine/kernels_isa.h"
#include "engine/mxfp4.h"

_Static_assert(K3_TOKEN_BLOCK == 4, "k3_rows_mxfp4_avx2 handles remainders of 1 to 3 tokens");

#pragma GCC push_options
#pragma GCC target("avx2")

static inline float reduce16(__m256 lo, __m256 hi)
{
    __m256 a8 = _mm256_add_ps(lo, hi);
    __m128 a4 = _mm_add_ps(_mm256_castps256_ps128(a8), _mm256_extractf128_ps(a8, 1));
    __m128 a2 = _mm_add_ps(a4, _mm_movehl_ps(a4, a4));
    return _mm_cvtss_f32(_mm_add_ss(a2, _mm_movehdup_ps(a2)));
}

/* Scales of groups g0 .. g0+7 (n of them valid) into sc[]. */
static inline void scales8(const uint8_t *scales, int n, float sc[8])
{
    if (n < 8) {
        for (int i = 0; i < n; i++)
            sc[i] = k3_e8m0_scale(scales[i]);
        return;
    }
    __m256i e = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)scales));
    __m256i bits = _mm256_slli_epi32(e, 23);
    bits = _mm256_blendv_epi8(bits, _mm256_set1_epi32(0x00400000), /* e = 0: 2^-127 */
                              _mm256_cmpeq_epi32(e, _mm256_setzero_si256()));
    bits = _mm256_andnot_si256(_mm256_cmpeq_epi32(e, _mm256_set1_epi32(255)), bits);
    _mm256_storeu_ps(sc, _mm256_castsi256_ps(bits));
}

/* E2M1 values of the low nibbles of the 8 low bytes of n. */
static inline __m256 e2m1x8(__m128i n, __m256 mag)
{
    __m256i idx = _mm256_cvtepu8_epi32(n);
    __m256i sign = _mm256_and_si256(_mm256_slli_epi32(idx, 28), _mm256_set1_epi32((int)0x80000000u));
    return _mm256_xor_ps(_mm256_permutevar8x32_ps(mag, idx), _mm256_castsi256_ps(sign));
}

static inline __attribute__((always_inline)) void
row_mxfp4_tokens(const uint8_t *p, const uint8_t *s, int groups, const float *X, int ldx, float *Y,
                 int ldy, int NT)
{
    const __m256 mag = _mm256_loadu_ps(k3_e2m1_values); /* entries 0..7: the magnitudes */
    __m256 lo[K3_TOKEN_BLOCK], hi[K3_TOKEN_BLOCK];
    for (int k = 0; k < NT; k++)
        lo[k] = hi[k] = _mm256_setzero_ps();
    float sc[8];
    for (int g0 = 0; g0 < groups; g0 += 8) {
        int n = groups - g0 < 8 ? groups - g0 : 8;
        scales8(s + g0, n, sc);
        for (int j = 0; j < n; j++) {
            int g = g0 + j;
            __m128i q = _mm_loadu_si128((const __m128i *)(p + (size_t)g * (K3_MXFP4_GROUP / 2)));
            __m128i h = _mm_srli_epi16(q, 4);
            __m128i a = _mm_unpacklo_epi8(q, h), b = _mm_unpackhi_epi8(q, h);
            __m256 v0 = e2m1x8(a, mag), v1 = e2m1x8(_mm_srli_si128(a, 8), mag);
            __m256 v2 = e2m1x8(b, mag), v3 = e2m1x8(_mm_srli_si128(b, 8), mag);
            __m256 scale = _mm256_set1_ps(sc[j]);
            for (int k = 0; k < NT; k++) {
                const float *x = X + (size_t)k * ldx + (size_t)g * K3_MXFP4_GROUP;
                __m256 t0 = _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(x), v0),
                                          _mm256_mul_ps(_mm256_loadu_ps(x + 16), v2));
                __m256 t1 = _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(x + 8), v1),
                                          _mm256_mul_ps(_mm256_loadu_ps(x + 24), v3));
                lo[k] = _mm256_add_ps(lo[k], _mm256_mul_ps(t0, scale));
                hi[k] = _mm256_add_ps(hi[k], _mm256_mul_ps(t1, scale));
            }
        }
    }
    for (int k = 0; k < NT; k++)
        Y[(size_t)k * ldy] = reduce16(lo[k], hi[k]);
}

float k3_dot_mxfp4_avx2(const uint8_t *packed, const uint8_t *scales, const float *x, int n)
{
    float y;
    row_mxfp4_tokens(packed, scales, n / K3_MXFP4_GROUP, x, 0, &y, 0, 1);
    return y;
}

void k3_rows_mxfp4_avx2(const uint8_t *packed, const uint8_t *scales, int nrows, int cols,
                        const float *X, int ldx, float *Y, int ldy, int T)
{
    int groups = cols / K3_MXFP4_GROUP;
    size_t prow = (size_t)cols / 2, srow = (size_t)groups;
    for (int r = 0; r < nrows; r++) {
        const uint8_t *p = packed + r * prow, *s = scales + r * srow;
        int t = 0;
        for (; t + K3_TOKEN_BLOCK <= T; t += K3_TOKEN_BLOCK)
            row_mxfp4_tokens(p, s, groups, X + (size_t)t * ldx, ldx, Y + (size_t)t * ldy + r, ldy,
                             K3_TOKEN_BLOCK);
        switch (T - t) {
        case 3: row_mxfp4_tokens(p, s, groups, X + (size_t)t * ldx, ldx, Y + (size_t)t * ldy + r, ldy, 3); break;
        case 2: row_mxfp4_tokens(p, s, groups, X + (size_t)t * ldx, ldx, Y + (size_t)t * ldy + r, ldy, 2); break;
        case 1: row_mxfp4_tokens(p, s, groups, X + (size_t)t * ldx, ldx, Y + (size_t)t * ldy + r, ldy, 1); break;
        default: break;
        }
    }
}

#pragma GCC pop_options
