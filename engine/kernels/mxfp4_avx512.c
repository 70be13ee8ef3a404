/* AVX-512 MXFP4 × f32.  One zmm is the 16 lanes of mxfp4.h, and one 64-byte load the
 * packed weights of a block: dword k holds lane k's 8 nibbles, so shifting the zmm right
 * by 4j puts element 8k + j's nibble in the low 4 bits of dword k, and vpermps, which
 * reads only those bits, looks its E2M1 value up in a 16-entry table in a register.  Per
 * block: 7 shifts, 8 permutes, then per token the two fma chains over the block-ordered
 * activations and the scale's fma, as the reference.  The 16 group
 * scales of 4 blocks are decoded together with k3_e8m0_scale's rule (0 → 2^-127,
 * 255 → 0) and spread to their lanes by one permute per block.  The mat-mul decodes each
 * block once for up to K3_TOKEN_BLOCK tokens, or with many tokens once per tile of
 * K3_MXFP4_TILE_TOKENS in spans and panels (kernels_isa.h). */
#include <immintrin.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "engine/kernels/avx512.h"
#include "engine/kernels/kernels.h"
#include "engine/kernels/kernels_isa.h"
#include "engine/kernels/mxfp4.h"

K3_TARGET_BEGIN("avx512f,avx512bw,avx512vl")

/* 2^(e-127) of the scales of groups g0 .. g0+n-1 (n ≤ 16) in lanes 0 .. n-1, 0 in the rest. */
static inline __m512 scales16(const uint8_t *scales, int n)
{
    __mmask16 valid = (__mmask16)((1u << n) - 1);
    __m512i e = _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(valid, scales));
    __m512i bits = _mm512_slli_epi32(e, 23);
    bits = _mm512_mask_mov_epi32(bits, _mm512_cmpeq_epi32_mask(e, _mm512_setzero_si512()),
                                 _mm512_set1_epi32(0x00400000)); /* 2^-127, subnormal */
    bits = _mm512_mask_mov_epi32(bits, _mm512_cmpeq_epi32_mask(e, _mm512_set1_epi32(255)),
                                 _mm512_setzero_si512());
    return _mm512_maskz_mov_ps(valid, _mm512_castsi512_ps(bits));
}

/* Groups g_begin .. g_end-1 of one row (g_begin a multiple of 16, g_end too or = groups)
 * against NT tokens (a constant after inlining, so acc[] stays in registers), token k's
 * activations for block b (from g_begin) at X + b·bstride + k·kstride; each block's weights
 * decoded once for all NT; prefetching ahead bytes past each block into L1 and, unless
 * far is 0, far bytes past it into L2.  The tokens' chains advance side by side, element
 * pair j of every token before pair j + 1 of any: the core then always has independent
 * fmas ready, where token after token it waited on each chain's latency. */
static inline __attribute__((always_inline)) void
groups_mxfp4(const uint8_t *p, const uint8_t *s, int g_begin, int g_end, int groups,
             const float *X, size_t bstride, size_t kstride, __m512 *acc, long ahead, long far,
             int NT)
{
    const __m512 table = _mm512_loadu_ps(k3_e2m1_values);
    for (int g0 = g_begin; g0 < g_end; g0 += 16) {
        int n = groups - g0 < 16 ? groups - g0 : 16;
        __m512 sc = scales16(s + g0, n);
        for (int bb = 0; 4 * bb < n; bb++) {
            int g = g0 + 4 * bb, have = n - 4 * bb; /* groups of this block in the row */
            const uint8_t *pb = p + (size_t)g * (K3_MXFP4_GROUP / 2);
            _mm_prefetch((const char *)pb + ahead, _MM_HINT_T0);
            if (far)
                _mm_prefetch((const char *)pb + far, _MM_HINT_T1);
            __m512i d = have >= 4 ? _mm512_loadu_si512(pb)
                                  : _mm512_maskz_loadu_epi8((1ull << 16 * have) - 1, pb);
            __mmask16 lanes = have >= 4 ? 0xFFFF : (__mmask16)((1u << 4 * have) - 1);
            const float *x = X + (size_t)(g - g_begin) / 4 * bstride;
            __m512 a[K3_MXFP4_TILE_TOKENS], c[K3_MXFP4_TILE_TOKENS];
            __m512 v0 = _mm512_permutexvar_ps(d, table);
            __m512 v1 = _mm512_permutexvar_ps(_mm512_srli_epi32(d, 4), table);
#pragma GCC unroll 8
            for (int k = 0; k < NT; k++) {
                a[k] = _mm512_mul_ps(_mm512_loadu_ps(x + k * kstride), v0);
                c[k] = _mm512_mul_ps(_mm512_loadu_ps(x + k * kstride + 16), v1);
            }
#pragma GCC unroll 3
            for (int j = 2; j < 8; j += 2) {
                __m512 va = _mm512_permutexvar_ps(_mm512_srli_epi32(d, 4 * j), table);
                __m512 vc = _mm512_permutexvar_ps(_mm512_srli_epi32(d, 4 * j + 4), table);
#pragma GCC unroll 8
                for (int k = 0; k < NT; k++) {
                    const float *xk = x + k * kstride + 16 * j;
                    a[k] = _mm512_fmadd_ps(_mm512_loadu_ps(xk), va, a[k]);
                    c[k] = _mm512_fmadd_ps(_mm512_loadu_ps(xk + 16), vc, c[k]);
                }
            }
            __m512 scale = _mm512_permutexvar_ps(_mm512_loadu_si512(k3_mxfp4_lane_group[bb]), sc);
#pragma GCC unroll 8
            for (int k = 0; k < NT; k++)
                acc[k] = _mm512_mask3_fmadd_ps(_mm512_add_ps(a[k], c[k]), scale, acc[k], lanes);
        }
    }
}

/* One whole row against NT ≤ K3_TOKEN_BLOCK tokens. */
static inline __attribute__((always_inline)) void
row_mxfp4_tokens(const uint8_t *p, const uint8_t *s, int groups, const float *Xb, int ldxb,
                 float *Y, int ldy, int NT)
{
    __m512 acc[K3_TOKEN_BLOCK];
#pragma GCC unroll 4
    for (int k = 0; k < NT; k++)
        acc[k] = _mm512_setzero_ps();
    groups_mxfp4(p, s, 0, groups, groups, Xb, 128, (size_t)ldxb, acc, K3_PREFETCH_AHEAD, 0, NT);
#pragma GCC unroll 4
    for (int k = 0; k < NT; k++)
        Y[(size_t)k * ldy] = k3_avx512_reduce16(acc[k]);
}

/* A span of one row against NT ≤ K3_MXFP4_TILE_TOKENS tokens (K3_MXFP4_TILED_ROWS). */
static inline __attribute__((always_inline)) void
span_mxfp4_tokens(const uint8_t *p, const uint8_t *s, int g0, int g1, int groups,
                  const float *xs, float *sums, bool first, long ahead, long far, int NT)
{
    __m512 acc[K3_MXFP4_TILE_TOKENS];
#pragma GCC unroll 8
    for (int k = 0; k < NT; k++)
        acc[k] = first ? _mm512_setzero_ps() : _mm512_load_ps(sums + K3_LANES * k);
    groups_mxfp4(p, s, g0, g1, groups, xs, (size_t)NT * 128, 128, acc, ahead, far, NT);
#pragma GCC unroll 8
    for (int k = 0; k < NT; k++)
        _mm512_store_ps(sums + K3_LANES * k, acc[k]);
}

/* The lane tree of 16 sums kept in memory between spans. */
static inline float sums_reduce(const float *sums)
{
    return k3_avx512_reduce16(_mm512_load_ps(sums));
}

K3_MXFP4_TILED_ROWS(k3_rows_mxfp4_avx512, row_mxfp4_tokens, span_mxfp4_tokens, sums_reduce)

K3_TARGET_END

/* ---- int8 activations, VNNI ------------------------------------------------------------
 * Per pair of groups (32 packed bytes): each 16-byte half is copied to two 128-bit lanes,
 * shifted by 0 or 4 and masked, so the lanes hold the nibbles of g0's even and odd
 * elements, then g1's (the lane order of mxfp4.h); vpshufb turns nibbles into 2·E2M1 + 12
 * (unsigned); vpdpbusd adds four u8·s8 products per int32 lane to the bias, which takes
 * the +12 back.  Exact integers, so the same bytes as the scalar reference. */

K3_TARGET_BEGIN("avx512f,avx512bw,avx512vl,avx512vnni")

/* Groups g and g + 1 (g even; both = 0 when the row lacks g + 1) for NT tokens; c[16k],
 * c[16k + 1] their 2^(e-127)·d/2 for the k-th token of x (a missing group's is 0, and so
 * are its weights' sums: they add 0). */
static inline __attribute__((always_inline)) void
q8_pair(const uint8_t *p, int g, int both, const struct k3_q8_token *x, const float *c,
        __m512 *acc, int NT)
{
    const __m512i spread = _mm512_set_epi64(3, 2, 3, 2, 1, 0, 1, 0);
    const __m512i shifts = _mm512_set_epi64(4, 4, 0, 0, 4, 4, 0, 0);
    const __m512i table = _mm512_broadcast_i32x4(
        _mm_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0));
    const uint8_t *pw = p + (size_t)g * 16;
    __m256i b = both ? _mm256_loadu_si256((const __m256i *)pw)
                     : _mm256_zextsi128_si256(_mm_loadu_si128((const __m128i *)pw));
    __m512i z = _mm512_permutexvar_epi64(spread, _mm512_zextsi256_si512(b));
    __m512i w = _mm512_shuffle_epi8(table, _mm512_and_si512(_mm512_srlv_epi64(z, shifts),
                                                            _mm512_set1_epi8(0x0F)));
#pragma GCC unroll 4
    for (int k = 0; k < NT; k++) {
        const int8_t *q = x->q + k * x->qstride + (size_t)g * 32;
        const int32_t *bias = x->bias + k * x->bstride + (size_t)g * 8;
        __m512i sum = _mm512_dpbusd_epi32(_mm512_loadu_si512(bias), w, _mm512_loadu_si512(q));
        __m512 cs = _mm512_mask_blend_ps(0xFF00, _mm512_set1_ps(c[16 * k]),
                                         _mm512_set1_ps(c[16 * k + 1]));
        acc[k] = _mm512_add_ps(acc[k], _mm512_mul_ps(_mm512_cvtepi32_ps(sum), cs));
    }
}

static inline __attribute__((always_inline)) void
row_q8_tokens(const uint8_t *p, const uint8_t *s, int groups, const struct k3_q8 *xq, int t0,
              float *Y, int ldy, int NT)
{
    const struct k3_q8_token x = k3_q8_token(xq, t0);
    __m512 acc[K3_TOKEN_BLOCK];
#pragma GCC unroll 4
    for (int k = 0; k < NT; k++)
        acc[k] = _mm512_setzero_ps();
    float c[K3_TOKEN_BLOCK * 16]; /* 2^(e-127) · d/2 of 16 groups, token by token */
    for (int g0 = 0; g0 < groups; g0 += 16) {
        int n = groups - g0 < 16 ? groups - g0 : 16;
        __m512 sw = scales16(s + g0, n); /* a missing g1: 0, and 0·0 adds nothing */
        __mmask16 have = (__mmask16)((1u << (n + (n & 1))) - 1); /* d/2 exists for a missing g1 */
#pragma GCC unroll 4
        for (int k = 0; k < NT; k++) {
            __m512 dh = _mm512_maskz_loadu_ps(have, x.dh + k * x.dstride + g0);
            _mm512_storeu_ps(c + 16 * k, _mm512_mul_ps(sw, dh));
        }
        int j = 0;
        for (; j + 1 < n; j += 2) {
            int g = g0 + j;
            if (!(j & 3)) /* once per 64-byte line of weights */
                _mm_prefetch((const char *)(p + (size_t)g * 16) + K3_PREFETCH_AHEAD, _MM_HINT_T0);
            q8_pair(p, g, 1, &x, c + j, acc, NT);
        }
        if (j < n)
            q8_pair(p, g0 + j, 0, &x, c + j, acc, NT);
    }
#pragma GCC unroll 4
    for (int k = 0; k < NT; k++)
        Y[(size_t)k * ldy] = k3_avx512_reduce16(acc[k]);
}

K3_MXFP4_Q8_ROWS(k3_rows_mxfp4_q8_avx512vnni, row_q8_tokens)

K3_TARGET_END
