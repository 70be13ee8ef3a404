/* AVX-512 bf16 and f32 kernels (F, BW, VL), and the tables of the "avx512" and
 * "avx512vnni" variants (they differ in the int8 path only): one zmm holds the 16 lanes
 * of kernels.h, so element i lands in lane i mod 16 as in the reference; bf16 fuses each
 * product with its add (fma), f32 multiplies then adds, as kernels.h says; the same
 * pairwise lane tree; a partial last block of 16 goes through the scalar tail.
 * The mat-mul keeps two weight rows (one from each half of the rows) in registers for up
 * to BF16_TILE_TOKENS tokens, or with long activations K3_ROW_BLOCK adjacent rows, and
 * takes many tokens a chunk at a time (K3_X_L2_BYTES). */
#include <immintrin.h>
#include <stdbool.h>
#include <stdint.h>

#include "engine/kernels/avx512.h"
#include "engine/kernels/kernels.h"
#include "engine/kernels/kernels_isa.h"

static bool avx512_supported(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl");
}

static bool avx512vnni_supported(void)
{
    return avx512_supported() && __builtin_cpu_supports("avx512vnni") &&
           __builtin_cpu_supports("avx512vnni");
}

K3_TARGET_BEGIN("avx512f,avx512bw,avx512vl")

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
        return k3_avx512_reduce16(acc);
    float a[K3_LANES];
    _mm512_storeu_ps(a, acc);
    for (int i = n16; i < n; i++)
        a[i % K3_LANES] = fmaf(k3_bf16_to_f32(w[i]), x[i], a[i % K3_LANES]);
    return k3_lane_reduce(a);
}

static float dot_bf16_avx512(const uint16_t *w, const float *x, int n)
{
    int n16 = n & ~(K3_LANES - 1);
    __m512 acc = _mm512_setzero_ps();
    for (int i = 0; i < n16; i += K3_LANES)
        acc = _mm512_fmadd_ps(bf16x16(w + i), _mm512_loadu_ps(x + i), acc);
    return finish_bf16(acc, w, x, n16, n);
}

static float dot_f32_avx512(const float *a, const float *b, int n)
{
    int n16 = n & ~(K3_LANES - 1);
    __m512 acc = _mm512_setzero_ps();
    for (int i = 0; i < n16; i += K3_LANES)
        acc = _mm512_add_ps(acc, _mm512_mul_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i)));
    if (n16 == n)
        return k3_avx512_reduce16(acc);
    float s[K3_LANES];
    _mm512_storeu_ps(s, acc);
    for (int i = n16; i < n; i++)
        s[i % K3_LANES] += a[i] * b[i];
    return k3_lane_reduce(s);
}

static void axpy_f32_avx512(float *y, float a, const float *x, int n)
{
    __m512 av = _mm512_set1_ps(a);
    int i = 0;
    for (; i + K3_LANES <= n; i += K3_LANES)
        _mm512_storeu_ps(y + i, _mm512_add_ps(_mm512_loadu_ps(y + i),
                                              _mm512_mul_ps(av, _mm512_loadu_ps(x + i))));
    k3_axpy_f32_scalar(y + i, a, x + i, n - i);
}

static void axpy_bf16_avx512(float *y, float a, const uint16_t *x, int n)
{
    __m512 av = _mm512_set1_ps(a);
    int i = 0;
    for (; i + K3_LANES <= n; i += K3_LANES)
        _mm512_storeu_ps(y + i, _mm512_add_ps(_mm512_loadu_ps(y + i), _mm512_mul_ps(av, bf16x16(x + i))));
    k3_axpy_bf16_scalar(y + i, a, x + i, n - i);
}

/* The register tile of the bf16 mat-mul: up to K3_ROW_BLOCK rows against up to
 * BF16_TILE_TOKENS tokens.  4 × 6 accumulators, 6 activations and one converted weight
 * block fill 31 of the 32 zmm registers.  Each converted block serves 6 tokens: widening
 * and shifting 16 weights take two slots of the ports the FMAs need, which against 4
 * tokens held the tile to about two thirds of the FMA peak; each activation load serves 4
 * rows (bench/results/kernels-choices.md, "bf16 with FMA"). */
#define BF16_TILE_TOKENS 6

/* Runs CALL with RB_ = rb and NT_ = nt as constants (1 ≤ rb ≤ 4, 1 ≤ nt ≤ 6), so the
 * always_inline tile keeps its accumulators in registers. */
#define BF16_TOKENS_DISPATCH(nt, CALL)                                                         \
    switch (nt) {                                                                              \
    case 1: { enum { NT_ = 1 }; CALL; } break;                                                 \
    case 2: { enum { NT_ = 2 }; CALL; } break;                                                 \
    case 3: { enum { NT_ = 3 }; CALL; } break;                                                 \
    case 4: { enum { NT_ = 4 }; CALL; } break;                                                 \
    case 5: { enum { NT_ = 5 }; CALL; } break;                                                 \
    case 6: { enum { NT_ = 6 }; CALL; } break;                                                 \
    default: break;                                                                            \
    }
#define BF16_TILE_DISPATCH(rb, nt, CALL)                                                       \
    do {                                                                                       \
        _Static_assert(K3_ROW_BLOCK == 4 && BF16_TILE_TOKENS == 6, "the cases below");          \
        switch (rb) {                                                                          \
        case 1: { enum { RB_ = 1 }; BF16_TOKENS_DISPATCH(nt, CALL) } break;                    \
        case 2: { enum { RB_ = 2 }; BF16_TOKENS_DISPATCH(nt, CALL) } break;                    \
        case 3: { enum { RB_ = 3 }; BF16_TOKENS_DISPATCH(nt, CALL) } break;                    \
        case 4: { enum { RB_ = 4 }; BF16_TOKENS_DISPATCH(nt, CALL) } break;                    \
        default: break;                                                                        \
        }                                                                                      \
    } while (0)

/* RB rows against NT tokens (constants after inlining, so acc[][] stays in registers):
 * row k's weights at W + k·wstride, its results at Y[t·ldy + k·ystride].  The rows
 * advance together, so each 16 activations are loaded once for RB rows (a long x need
 * not survive in L1 while a whole row streams past; K3_X_L1_BYTES) and RB·NT
 * accumulator chains run side by side.  Each (row, token) pair still sums its lanes in
 * element order. */
static inline __attribute__((always_inline)) void
block_bf16(const uint16_t *W, size_t wstride, int ystride, int cols, const float *X, int ldx,
           float *Y, int ldy, int RB, int NT)
{
    int n16 = cols & ~(K3_LANES - 1);
    __m512 acc[K3_ROW_BLOCK][BF16_TILE_TOKENS];
#pragma GCC unroll 4
    for (int r = 0; r < RB; r++)
#pragma GCC unroll 6
        for (int k = 0; k < NT; k++)
            acc[r][k] = _mm512_setzero_ps();
    for (int i = 0; i < n16; i += K3_LANES) {
        __m512 x[BF16_TILE_TOKENS];
#pragma GCC unroll 6
        for (int k = 0; k < NT; k++)
            x[k] = _mm512_loadu_ps(X + (size_t)k * ldx + i);
#pragma GCC unroll 4
        for (int r = 0; r < RB; r++) {
            if (!(i & 31)) /* once per 64-byte line */
                _mm_prefetch((const char *)(W + r * wstride + i) + K3_PREFETCH_AHEAD, _MM_HINT_T0);
            __m512 w = bf16x16(W + r * wstride + i);
#pragma GCC unroll 6
            for (int k = 0; k < NT; k++)
                acc[r][k] = _mm512_fmadd_ps(w, x[k], acc[r][k]);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < RB; r++)
#pragma GCC unroll 6
        for (int k = 0; k < NT; k++)
            Y[(size_t)k * ldy + (size_t)r * ystride] =
                finish_bf16(acc[r][k], W + r * wstride, X + (size_t)k * ldx, n16, cols);
}

/* Rows r .. r+rb-1 spaced wstride weights and ystride results apart, against all T tokens a
 * tile at a time. */
static inline void rows_tiles_bf16(const uint16_t *W, size_t wstride, int ystride, int rb,
                                   int cols, const float *X, int ldx, float *Y, int ldy, int T)
{
    for (int t = 0; t < T; t += BF16_TILE_TOKENS) {
        int nt = T - t < BF16_TILE_TOKENS ? T - t : BF16_TILE_TOKENS;
        const float *x = X + (size_t)t * ldx;
        float *y = Y + (size_t)t * ldy;
        BF16_TILE_DISPATCH(rb, nt, block_bf16(W, wstride, ystride, cols, x, ldx, y, ldy, RB_, NT_));
    }
}

static void rows_bf16_avx512(const uint16_t *W, int nrows, int cols, const float *X, int ldx,
                             float *Y, int ldy, int T)
{
    /* whole tiles per chunk of tokens (K3_X_L2_BYTES), at least one */
    int chunk = k3_token_chunk(cols) / BF16_TILE_TOKENS * BF16_TILE_TOKENS;
    chunk = chunk > BF16_TILE_TOKENS ? chunk : BF16_TILE_TOKENS;
    if (T > chunk) {
        for (int c0 = 0; c0 < T; c0 += chunk)
            rows_bf16_avx512(W, nrows, cols, X + (size_t)c0 * ldx, ldx, Y + (size_t)c0 * ldy, ldy,
                             T - c0 < chunk ? T - c0 : chunk);
        return;
    }
    if ((size_t)T * cols * sizeof(float) > K3_X_L1_BYTES) {
        for (int r = 0; r < nrows; r += K3_ROW_BLOCK) {
            int rb = nrows - r < K3_ROW_BLOCK ? nrows - r : K3_ROW_BLOCK;
            rows_tiles_bf16(W + (size_t)r * cols, (size_t)cols, 1, rb, cols, X, ldx, Y + r, ldy, T);
        }
        return;
    }
    /* Activations that stay in L1: the first and the second half of the rows side by side,
     * two sequential streams (adjacent rows together broke each stream at every row and
     * were slower from memory), two independent chains of fused multiply-adds where one
     * row alone waits on each one's latency. */
    int half = (nrows + 1) / 2;
    for (int r = 0; r < half; r++)
        rows_tiles_bf16(W + (size_t)r * cols, (size_t)half * cols, half, r + half < nrows ? 2 : 1,
                        cols, X, ldx, Y + r, ldy, T);
}

/* ---- SiTU: kernels.h's k3_exp, k3_tanh and k3_situ, op for op, 16 lanes ---------- */

static inline __m512 ps(float v) { return _mm512_set1_ps(v); }

static inline __m512 mul_add(__m512 p, __m512 r, float c)
{
    return _mm512_add_ps(_mm512_mul_ps(p, r), ps(c));
}

static inline __m512 exp16(__m512 x)
{
    static const float P[] = {K3_EXP_POLY};
    x = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, ps(K3_EXP_HI), _CMP_GT_OQ), x, ps(K3_EXP_HI));
    x = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, ps(K3_EXP_LO), _CMP_LT_OQ), x, ps(K3_EXP_LO));
    __m512 t = _mm512_add_ps(_mm512_mul_ps(x, ps(K3_LOG2E)), ps(K3_ROUND_MAGIC));
    __m512 n = _mm512_sub_ps(t, ps(K3_ROUND_MAGIC));
    __m512 r = _mm512_sub_ps(x, _mm512_mul_ps(n, ps(K3_LN2_HI)));
    r = _mm512_sub_ps(r, _mm512_mul_ps(n, ps(K3_LN2_LO)));
    __m512 z = _mm512_mul_ps(r, r);
    __m512 p = ps(P[0]);
#pragma GCC unroll 8
    for (int i = 1; i < 6; i++)
        p = mul_add(p, r, P[i]);
    p = _mm512_add_ps(_mm512_add_ps(_mm512_mul_ps(p, z), r), ps(1.0f));
    __m512i e = _mm512_sub_epi32(_mm512_castps_si512(t), _mm512_set1_epi32((int)k3_f32_bits(K3_ROUND_MAGIC)));
    e = _mm512_slli_epi32(_mm512_add_epi32(e, _mm512_set1_epi32(127)), 23);
    return _mm512_mul_ps(p, _mm512_castsi512_ps(e));
}

static inline __m512 tanh16(__m512 x)
{
    static const float Q[] = {K3_TANH_POLY};
    __m512i xi = _mm512_castps_si512(x);
    __m512 a = _mm512_castsi512_ps(_mm512_and_si512(xi, _mm512_set1_epi32(0x7fffffff)));
    __m512 big = _mm512_sub_ps(ps(1.0f), _mm512_div_ps(ps(2.0f), _mm512_add_ps(exp16(_mm512_add_ps(a, a)), ps(1.0f))));
    big = _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(big),
                                              _mm512_and_si512(xi, _mm512_set1_epi32(INT32_MIN))));
    __m512 z = _mm512_mul_ps(x, x);
    __m512 p = ps(Q[0]);
#pragma GCC unroll 8
    for (int i = 1; i < 5; i++)
        p = mul_add(p, z, Q[i]);
    __m512 small = _mm512_add_ps(_mm512_mul_ps(_mm512_mul_ps(p, z), x), x);
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(a, ps(K3_TANH_SMALL), _CMP_GT_OQ), small, big);
}

static void situ_avx512(float *y, const float *g, const float *u, int n, float beta_gate,
                        float beta_up)
{
    __m512 bg = ps(beta_gate), bu = ps(beta_up);
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 gv = _mm512_loadu_ps(g + i), uv = _mm512_loadu_ps(u + i);
        __m512 neg_g = _mm512_sub_ps(_mm512_setzero_ps(), gv);
        __m512 sigma = _mm512_div_ps(ps(1.0f), _mm512_add_ps(ps(1.0f), exp16(neg_g)));
        __m512 gate = _mm512_mul_ps(_mm512_mul_ps(bg, tanh16(_mm512_div_ps(gv, bg))), sigma);
        __m512 up = _mm512_mul_ps(bu, tanh16(_mm512_div_ps(uv, bu)));
        _mm512_storeu_ps(y + i, _mm512_mul_ps(gate, up));
    }
    for (; i < n; i++)
        y[i] = k3_situ(g[i], u[i], beta_gate, beta_up);
}

K3_TARGET_END

const struct k3_kernel_ops k3_kernels_avx512 = {
    .name = "avx512",
    .supported = avx512_supported,
    .dot_bf16 = dot_bf16_avx512,
    .dot_f32 = dot_f32_avx512,
    .rows_bf16 = rows_bf16_avx512,
    .rows_mxfp4 = k3_rows_mxfp4_avx512,
    .rows_mxfp4_q8 = k3_rows_mxfp4_q8_avx2,
    .rows_q8_0 = k3_rows_q8_0_avx512,
    .situ = situ_avx512,
    .axpy_f32 = axpy_f32_avx512,
    .axpy_bf16 = axpy_bf16_avx512,
};

/* The same kernels, and the int8 path with VNNI (mxfp4_avx512.c). */
const struct k3_kernel_ops k3_kernels_avx512vnni = {
    .name = "avx512vnni",
    .supported = avx512vnni_supported,
    .dot_bf16 = dot_bf16_avx512,
    .dot_f32 = dot_f32_avx512,
    .rows_bf16 = rows_bf16_avx512,
    .rows_mxfp4 = k3_rows_mxfp4_avx512,
    .rows_mxfp4_q8 = k3_rows_mxfp4_q8_avx512vnni,
    .rows_q8_0 = k3_rows_q8_0_avx512,
    .situ = situ_avx512,
    .axpy_f32 = axpy_f32_avx512,
    .axpy_bf16 = axpy_bf16_avx512,
};
