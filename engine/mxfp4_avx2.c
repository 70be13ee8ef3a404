/* AVX2 MXFP4 × f32.  The 16 lanes of mxfp4.h as two ymm (lanes 0..7, 8..15).  Per group the
 * 16 packed bytes become four ymm of E2M1 values (elements 0..7, 8..15, 16..23, 24..31)
 * through in-lane byte tables: vpshufb looks up the high and the low byte of each value's
 * bf16 pattern, unpacks interleave them into words and the words into the high halves of
 * dwords (f32).  The nibble bytes are first arranged (xmm unpacks) so that the in-lane
 * unpacks leave the elements in order.  Lane l adds (x[l]·v[l] + x[16+l]·v[16+l])·2^(e-127)
 * exactly as the reference, mul then add.  Scales follow k3_e8m0_scale (0 → 2^-127,
 * 255 → 0). */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "engine/kernels.h"
#include "engine/kernels_isa.h"
#include "engine/mxfp4.h"

_Static_assert(K3_TOKEN_BLOCK == 4, "k3_rows_mxfp4_avx2 handles remainders of 1 to 3 tokens");

K3_TARGET_BEGIN("avx2")

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

/* The byte tables: the high and the low byte of each E2M1 value's bf16 pattern (its f32
 * bits 31..24 and 23..16; bits 15..0 are zero), in both 128-bit lanes. */
struct tables {
    __m256i hi, lo;
};

static inline struct tables e2m1_tables(void)
{
    uint8_t hi[16], lo[16];
    for (int i = 0; i < 16; i++) {
        uint32_t b;
        memcpy(&b, &k3_e2m1_values[i], sizeof b);
        hi[i] = (uint8_t)(b >> 24);
        lo[i] = (uint8_t)(b >> 16);
    }
    return (struct tables){_mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)hi)),
                           _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)lo))};
}

/* The 32 values of one group: v[0] = elements 0..7, v[1] = 8..15, v[2] = 16..23,
 * v[3] = 24..31. */
static inline void decode32(const uint8_t *p, struct tables tb, __m256 v[4])
{
    const __m128i low4 = _mm_set1_epi8(0x0F);
    __m128i q = _mm_loadu_si128((const __m128i *)p);
    __m128i lo = _mm_and_si128(q, low4), hi = _mm_and_si128(_mm_srli_epi16(q, 4), low4);
    __m128i a = _mm_unpacklo_epi8(lo, hi);   /* nibbles of elements 0..15 */
    __m128i b = _mm_unpackhi_epi8(lo, hi);   /* 16..31 */
    __m128i ab0 = _mm_unpacklo_epi32(a, b);  /* e0..3, e16..19, e4..7, e20..23 */
    __m128i ab1 = _mm_unpackhi_epi32(a, b);  /* e8..11, e24..27, e12..15, e28..31 */
    /* lane 0: e0..3 e16..19 e8..11 e24..27; lane 1: e4..7 e20..23 e12..15 e28..31 */
    __m256i n = _mm256_set_m128i(_mm_unpackhi_epi64(ab0, ab1), _mm_unpacklo_epi64(ab0, ab1));
    __m256i h = _mm256_shuffle_epi8(tb.hi, n), l = _mm256_shuffle_epi8(tb.lo, n);
    __m256i w0 = _mm256_unpacklo_epi8(l, h); /* bf16 of e0..3 e16..19 | e4..7 e20..23 */
    __m256i w1 = _mm256_unpackhi_epi8(l, h); /* bf16 of e8..11 e24..27 | e12..15 e28..31 */
    __m256i z = _mm256_setzero_si256();
    v[0] = _mm256_castsi256_ps(_mm256_unpacklo_epi16(z, w0));
    v[2] = _mm256_castsi256_ps(_mm256_unpackhi_epi16(z, w0));
    v[1] = _mm256_castsi256_ps(_mm256_unpacklo_epi16(z, w1));
    v[3] = _mm256_castsi256_ps(_mm256_unpackhi_epi16(z, w1));
}

static inline __attribute__((always_inline)) void
row_mxfp4_tokens(const uint8_t *p, const uint8_t *s, int groups, const float *X, int ldx, float *Y,
                 int ldy, int NT)
{
    const struct tables tb = e2m1_tables();
    __m256 lo[K3_TOKEN_BLOCK], hi[K3_TOKEN_BLOCK];
#pragma GCC unroll 4
    for (int k = 0; k < NT; k++)
        lo[k] = hi[k] = _mm256_setzero_ps();
    float sc[8];
    for (int g0 = 0; g0 < groups; g0 += 8) {
        int n = groups - g0 < 8 ? groups - g0 : 8;
        scales8(s + g0, n, sc);
        for (int j = 0; j < n; j++) {
            int g = g0 + j;
            __m256 v[4];
            decode32(p + (size_t)g * (K3_MXFP4_GROUP / 2), tb, v);
            __m256 scale = _mm256_set1_ps(sc[j]);
#pragma GCC unroll 4
            for (int k = 0; k < NT; k++) {
                const float *x = X + (size_t)k * ldx + (size_t)g * K3_MXFP4_GROUP;
                __m256 t0 = _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(x), v[0]),
                                          _mm256_mul_ps(_mm256_loadu_ps(x + 16), v[2]));
                __m256 t1 = _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(x + 8), v[1]),
                                          _mm256_mul_ps(_mm256_loadu_ps(x + 24), v[3]));
                lo[k] = _mm256_add_ps(lo[k], _mm256_mul_ps(t0, scale));
                hi[k] = _mm256_add_ps(hi[k], _mm256_mul_ps(t1, scale));
            }
        }
    }
#pragma GCC unroll 4
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

K3_TARGET_END
