/* AVX2 bf16 and f32 kernels: the 16 lanes of kernels.h as two ymm (lanes 0..7 and
 * 8..15); bf16 fuses each product with its add (fma), f32 multiplies then adds (the
 * build's -ffp-contract=off keeps every mul and add written apart, SiTU's too); the same
 * pairwise lane tree; a partial last block of 16 goes through the
 * scalar tail.  The mat-mul reuses each loaded weight block for up to K3_TOKEN_BLOCK
 * tokens. */
#include <cpuid.h>
#include <immintrin.h>
#include <stdbool.h>
#include <stdint.h>

#include "engine/kernels/avx2.h"
#include "engine/kernels/kernels.h"
#include "engine/kernels/kernels_isa.h"

/* F16C from CPUID leaf 1 (ECX bit 29): clang before 15 has no "f16c" for
 * __builtin_cpu_supports.  The OS's saving of ymm state, which F16C needs too, is part
 * of what "avx2" checks. */
static bool f16c_supported(void)
{
    unsigned eax, ebx, ecx, edx;
    return __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C);
}

static bool avx2_supported(void)
{
    __builtin_cpu_init();
    /* bf16, MXFP4 and Q8_0 fuse; Q8_0 widens its half scales by F16C (older than AVX2) */
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c_supported();
}

K3_TARGET_BEGIN("avx2,fma")

static inline __m256 bf16x8(const uint16_t *w)
{
    __m128i h = _mm_loadu_si128((const __m128i *)w);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

static inline float finish_bf16(__m256 lo, __m256 hi, const uint16_t *w, const float *x, int n16,
                                int n)
{
    if (n16 == n)
        return k3_avx2_reduce16(lo, hi);
    float a[K3_LANES];
    _mm256_storeu_ps(a, lo);
    _mm256_storeu_ps(a + 8, hi);
    for (int i = n16; i < n; i++)
        a[i % K3_LANES] = fmaf(k3_bf16_to_f32(w[i]), x[i], a[i % K3_LANES]);
    return k3_lane_reduce(a);
}

static float dot_bf16_avx2(const uint16_t *w, const float *x, int n)
{
    int n16 = n & ~(K3_LANES - 1);
    __m256 lo = _mm256_setzero_ps(), hi = _mm256_setzero_ps();
    for (int i = 0; i < n16; i += K3_LANES) {
        lo = _mm256_fmadd_ps(bf16x8(w + i), _mm256_loadu_ps(x + i), lo);
        hi = _mm256_fmadd_ps(bf16x8(w + i + 8), _mm256_loadu_ps(x + i + 8), hi);
    }
    return finish_bf16(lo, hi, w, x, n16, n);
}

static float dot_f32_avx2(const float *a, const float *b, int n)
{
    int n16 = n & ~(K3_LANES - 1);
    __m256 lo = _mm256_setzero_ps(), hi = _mm256_setzero_ps();
    for (int i = 0; i < n16; i += K3_LANES) {
        lo = _mm256_add_ps(lo, _mm256_mul_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i)));
        hi = _mm256_add_ps(hi, _mm256_mul_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8)));
    }
    if (n16 == n)
        return k3_avx2_reduce16(lo, hi);
    float s[K3_LANES];
    _mm256_storeu_ps(s, lo);
    _mm256_storeu_ps(s + 8, hi);
    for (int i = n16; i < n; i++)
        s[i % K3_LANES] += a[i] * b[i];
    return k3_lane_reduce(s);
}

static void axpy_f32_avx2(float *y, float a, const float *x, int n)
{
    __m256 av = _mm256_set1_ps(a);
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_add_ps(_mm256_loadu_ps(y + i),
                                              _mm256_mul_ps(av, _mm256_loadu_ps(x + i))));
    k3_axpy_f32_scalar(y + i, a, x + i, n - i);
}

static void axpy_bf16_avx2(float *y, float a, const uint16_t *x, int n)
{
    __m256 av = _mm256_set1_ps(a);
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_add_ps(_mm256_loadu_ps(y + i), _mm256_mul_ps(av, bf16x8(x + i))));
    k3_axpy_bf16_scalar(y + i, a, x + i, n - i);
}

static inline __attribute__((always_inline)) void
row_bf16_tokens(const uint16_t *w, int cols, const float *X, int ldx, float *Y, int ldy, int NT)
{
    int n16 = cols & ~(K3_LANES - 1);
    __m256 lo[K3_TOKEN_BLOCK], hi[K3_TOKEN_BLOCK];
    #pragma GCC unroll 4
    for (int k = 0; k < NT; k++)
        lo[k] = hi[k] = _mm256_setzero_ps();
    for (int i = 0; i < n16; i += K3_LANES) {
        if (!(i & 31)) /* once per 64-byte line */
            _mm_prefetch((const char *)(w + i) + K3_PREFETCH_AHEAD, _MM_HINT_T0);
        __m256 v0 = bf16x8(w + i), v1 = bf16x8(w + i + 8);
        #pragma GCC unroll 4
        for (int k = 0; k < NT; k++) {
            const float *x = X + (size_t)k * ldx + i;
            lo[k] = _mm256_fmadd_ps(v0, _mm256_loadu_ps(x), lo[k]);
            hi[k] = _mm256_fmadd_ps(v1, _mm256_loadu_ps(x + 8), hi[k]);
        }
    }
    #pragma GCC unroll 4
    for (int k = 0; k < NT; k++)
        Y[(size_t)k * ldy] = finish_bf16(lo[k], hi[k], w, X + (size_t)k * ldx, n16, cols);
}

/* Four rows against one token (long activations, K3_X_L1_BYTES): x loaded once for the
 * four rows; each row's lanes still sum in element order. */
static inline __attribute__((always_inline)) void
rows4_bf16_token(const uint16_t *w, int cols, const float *x, float *y, int RB)
{
    int n16 = cols & ~(K3_LANES - 1);
    __m256 lo[K3_ROW_BLOCK], hi[K3_ROW_BLOCK];
#pragma GCC unroll 4
    for (int r = 0; r < RB; r++)
        lo[r] = hi[r] = _mm256_setzero_ps();
    for (int i = 0; i < n16; i += K3_LANES) {
        __m256 x0 = _mm256_loadu_ps(x + i), x1 = _mm256_loadu_ps(x + i + 8);
#pragma GCC unroll 4
        for (int r = 0; r < RB; r++) {
            const uint16_t *wr = w + (size_t)r * cols + i;
            if (!(i & 31))
                _mm_prefetch((const char *)wr + K3_PREFETCH_AHEAD, _MM_HINT_T0);
            lo[r] = _mm256_fmadd_ps(bf16x8(wr), x0, lo[r]);
            hi[r] = _mm256_fmadd_ps(bf16x8(wr + 8), x1, hi[r]);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < RB; r++)
        y[r] = finish_bf16(lo[r], hi[r], w + (size_t)r * cols, x, n16, cols);
}

static void rows_bf16_avx2(const uint16_t *W, int nrows, int cols, const float *X, int ldx,
                           float *Y, int ldy, int T)
{
    if ((size_t)T * cols * sizeof(float) > K3_X_L1_BYTES) {
        _Static_assert(K3_ROW_BLOCK == 4, "rows_bf16_avx2 handles remainders of 1 to 3 rows");
        for (int r = 0; r < nrows; r += K3_ROW_BLOCK) {
            const uint16_t *w = W + (size_t)r * cols;
            for (int t = 0; t < T; t++) {
                const float *x = X + (size_t)t * ldx;
                float *y = Y + (size_t)t * ldy + r;
                switch (nrows - r < K3_ROW_BLOCK ? nrows - r : K3_ROW_BLOCK) {
                case 4: rows4_bf16_token(w, cols, x, y, 4); break;
                case 3: rows4_bf16_token(w, cols, x, y, 3); break;
                case 2: rows4_bf16_token(w, cols, x, y, 2); break;
                default: rows4_bf16_token(w, cols, x, y, 1); break;
                }
            }
        }
        return;
    }
    for (int r = 0; r < nrows; r++) {
        const uint16_t *w = W + (size_t)r * cols;
        K3_TOKEN_BLOCKS(T, t, row_bf16_tokens(w, cols, X + (size_t)t * ldx, ldx,
                                              Y + (size_t)t * ldy + r, ldy, NT_));
    }
}

/* ---- SiTU: kernels.h's k3_exp, k3_tanh and k3_situ, op for op, 8 lanes ----------- */

static inline __m256 ps(float v) { return _mm256_set1_ps(v); }

static inline __m256 mul_add(__m256 p, __m256 r, float c)
{
    return _mm256_add_ps(_mm256_mul_ps(p, r), ps(c));
}

static inline __m256 exp8(__m256 x)
{
    static const float P[] = {K3_EXP_POLY};
    x = _mm256_blendv_ps(x, ps(K3_EXP_HI), _mm256_cmp_ps(x, ps(K3_EXP_HI), _CMP_GT_OQ));
    x = _mm256_blendv_ps(x, ps(K3_EXP_LO), _mm256_cmp_ps(x, ps(K3_EXP_LO), _CMP_LT_OQ));
    __m256 t = _mm256_add_ps(_mm256_mul_ps(x, ps(K3_LOG2E)), ps(K3_ROUND_MAGIC));
    __m256 n = _mm256_sub_ps(t, ps(K3_ROUND_MAGIC));
    __m256 r = _mm256_sub_ps(x, _mm256_mul_ps(n, ps(K3_LN2_HI)));
    r = _mm256_sub_ps(r, _mm256_mul_ps(n, ps(K3_LN2_LO)));
    __m256 z = _mm256_mul_ps(r, r);
    __m256 p = ps(P[0]);
#pragma GCC unroll 8
    for (int i = 1; i < 6; i++)
        p = mul_add(p, r, P[i]);
    p = _mm256_add_ps(_mm256_add_ps(_mm256_mul_ps(p, z), r), ps(1.0f));
    __m256i e = _mm256_sub_epi32(_mm256_castps_si256(t), _mm256_set1_epi32((int)k3_f32_bits(K3_ROUND_MAGIC)));
    e = _mm256_slli_epi32(_mm256_add_epi32(e, _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

static inline __m256 tanh8(__m256 x)
{
    static const float Q[] = {K3_TANH_POLY};
    __m256i xi = _mm256_castps_si256(x);
    __m256 a = _mm256_castsi256_ps(_mm256_and_si256(xi, _mm256_set1_epi32(0x7fffffff)));
    __m256 big = _mm256_sub_ps(ps(1.0f), _mm256_div_ps(ps(2.0f), _mm256_add_ps(exp8(_mm256_add_ps(a, a)), ps(1.0f))));
    big = _mm256_castsi256_ps(_mm256_or_si256(_mm256_castps_si256(big),
                                              _mm256_and_si256(xi, _mm256_set1_epi32(INT32_MIN))));
    __m256 z = _mm256_mul_ps(x, x);
    __m256 p = ps(Q[0]);
#pragma GCC unroll 8
    for (int i = 1; i < 5; i++)
        p = mul_add(p, z, Q[i]);
    __m256 small = _mm256_add_ps(_mm256_mul_ps(_mm256_mul_ps(p, z), x), x);
    return _mm256_blendv_ps(small, big, _mm256_cmp_ps(a, ps(K3_TANH_SMALL), _CMP_GT_OQ));
}

static void situ_avx2(float *y, const float *g, const float *u, int n, float beta_gate,
                      float beta_up)
{
    __m256 bg = ps(beta_gate), bu = ps(beta_up);
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 gv = _mm256_loadu_ps(g + i), uv = _mm256_loadu_ps(u + i);
        __m256 neg_g = _mm256_sub_ps(_mm256_setzero_ps(), gv);
        __m256 sigma = _mm256_div_ps(ps(1.0f), _mm256_add_ps(ps(1.0f), exp8(neg_g)));
        __m256 gate = _mm256_mul_ps(_mm256_mul_ps(bg, tanh8(_mm256_div_ps(gv, bg))), sigma);
        __m256 up = _mm256_mul_ps(bu, tanh8(_mm256_div_ps(uv, bu)));
        _mm256_storeu_ps(y + i, _mm256_mul_ps(gate, up));
    }
    for (; i < n; i++)
        y[i] = k3_situ(g[i], u[i], beta_gate, beta_up);
}

K3_TARGET_END

const struct k3_kernel_ops k3_kernels_avx2 = {
    .name = "avx2",
    .supported = avx2_supported,
    .dot_bf16 = dot_bf16_avx2,
    .dot_f32 = dot_f32_avx2,
    .rows_bf16 = rows_bf16_avx2,
    .rows_mxfp4 = k3_rows_mxfp4_avx2,
    .rows_mxfp4_q8 = k3_rows_mxfp4_q8_avx2,
    .rows_q8_0 = k3_rows_q8_0_avx2,
    .situ = situ_avx2,
    .axpy_f32 = axpy_f32_avx2,
    .axpy_bf16 = axpy_bf16_avx2,
};
