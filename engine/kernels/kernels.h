/* Dense kernels: bf16 × f32 mat-vec/mat-mul, norms, activations.
 *
 * Owns: the summation order of every bf16 and f32 dot product (MXFP4's is mxfp4.h's).
 * A dot product runs in 16 lanes (element i goes to lane i mod 16) and the lanes are
 * reduced by a fixed pairwise tree.  bf16: each product fused with its lane's add
 * (lane = fma(w_i, x_i, lane): one rounding, one instruction, so a many-token mat-mul
 * can reach the cores' FMA peak).  f32: the product rounded before the add (no FMA):
 * norms and attention scores, never a mat-mul's tile; axpy the same way.  Every variant (scalar reference,
 * AVX2, AVX-512) follows that order, so results are identical bytes whatever the ISA or
 * thread count.  Rows are split across OpenMP threads; each row is one thread's.
 * Does not own: MXFP4 (mxfp4.h), model structure.
 *
 * Variants are chosen at the first kernel call (kernels_isa.h): the best the CPU has,
 * unless the caller chose one first (k3_kernels_prefer, k3_kernels_select).  Identical bytes hold
 * for every input whose sums meet at most one NaN payload (two different NaNs meeting in
 * an add may keep either payload; the result is NaN either way).
 */
#ifndef K3_KERNELS_H
#define K3_KERNELS_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#define K3_LANES 16

static inline uint32_t k3_f32_bits(float f)
{
    uint32_t b;
    memcpy(&b, &f, sizeof b);
    return b;
}

static inline float k3_bits_f32(uint32_t b)
{
    float f;
    memcpy(&f, &b, sizeof f);
    return f;
}

static inline float k3_bf16_to_f32(uint16_t v) { return k3_bits_f32((uint32_t)v << 16); }

/* Round to nearest even; NaN stays NaN. */
static inline uint16_t k3_f32_to_bf16(float f)
{
    uint32_t bits = k3_f32_bits(f);
    if ((bits & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((bits >> 16) | 0x40);
    bits += 0x7fffu + ((bits >> 16) & 1);
    return (uint16_t)(bits >> 16);
}

/* The fixed reduction of 16 lane sums: pairwise halves (8, 4, 2, 1). */
static inline float k3_lane_reduce(float acc[K3_LANES])
{
    for (int w = K3_LANES / 2; w >= 1; w /= 2)
        for (int i = 0; i < w; i++)
            acc[i] = acc[i] + acc[i + w];
    return acc[0];
}

float k3_dot_bf16(const uint16_t *w, const float *x, int n);
float k3_dot_f32(const float *a, const float *b, int n);
/* y[i] += a * x[i] for i < n, each product rounded before its add; identical bytes in
 * every variant (no lane order to keep). */
void k3_axpy_f32(float *y, float a, const float *x, int n);
void k3_axpy_bf16(float *y, float a, const uint16_t *x, int n);

/* Y[t][r] = W[r]·X[t] for t < T: W [rows, cols] bf16, X [T, ldx], Y [T, ldy]. */
void k3_matmul_bf16(const uint16_t *W, int rows, int cols, const float *X, int ldx, float *Y,
                    int ldy, int T);

/* Y[t][r] = k3_situ(G[r]·X[t], U[r]·X[t], beta_gate, beta_up): the gate and up projections
 * of a SiTU MLP and its activation in one pass (G, U [rows, cols] bf16).  The same bytes
 * as two k3_matmul_bf16 calls followed by k3_situ on each pair. */
void k3_matmul_bf16_situ(const uint16_t *G, const uint16_t *U, int rows, int cols,
                         const float *X, int ldx, float *Y, int ldy, int T, float beta_gate,
                         float beta_up);

/* The kernel variant in use: "scalar", "avx2", "avx512" or "avx512vnni". */
const char *k3_kernels_name(void);
/* Use the best variant this CPU supports at or below NAME in the order avx512vnni,
 * avx512, avx2, scalar ("auto": the best of all) from now on: 0, or -EINVAL for an
 * unknown name.  Not to be called while kernels run. */
int k3_kernels_prefer(const char *name);
/* Use variant NAME ("auto" = the best supported) from now on: 0, -EINVAL for an unknown
 * name, -ENOTSUP when this CPU lacks it.  Not to be called while kernels run. */
int k3_kernels_select(const char *name);

/* y = γ ⊙ x / sqrt(mean(x²) + eps).  y may alias x. */
void k3_rmsnorm(float *y, const float *x, const float *gain, int n, float eps);
/* 1 / sqrt(mean(x²) + eps) */
float k3_rms_inv(const float *x, int n, float eps);

static inline float k3_sigmoid(float z) { return 1.0f / (1.0f + expf(-z)); }
static inline float k3_silu(float z) { return z * k3_sigmoid(z); }

/* ---- the activation of every expert row, defined op by op -------------------------------
 *
 * libm's expf and tanhf are slower in the fused w1/w3 pass (bench/results/
 * kernels-choices.md, "SiTU") and have no SIMD twin that returns the same bytes.  These
 * are Cephes' single-precision polynomials written as a fixed sequence of IEEE +, -, ×, /
 * and bit operations, so the SIMD variants (situ in kernels_isa.h), doing the same lane
 * by lane, give the same bytes.  Both stay within 2 ulp of expf / tanhf where the
 * results are normal floats (tests/unit/test_kernels_scalar.c); NaN stays NaN. */

#define K3_EXP_HI 88.0f            /* e^88 < FLT_MAX, and 2^127 the largest scale needed */
#define K3_EXP_LO -87.3f           /* e^-87.3 is still a normal float */
#define K3_ROUND_MAGIC 12582912.0f /* 1.5 · 2^23: adding it rounds to an integer, kept in
                                    * the low mantissa bits */
#define K3_LOG2E 1.44269504088896341f
#define K3_LN2_HI 0.693359375f     /* ln 2 in two parts: the first exact in a few bits */
#define K3_LN2_LO -2.12194440e-4f
#define K3_TANH_SMALL 0.625f       /* below: tanh's odd polynomial; above: by e^2|x| */

/* Cephes' coefficients, highest degree first, for a static const array in each variant's
 * exp and tanh (the one definition of them): e^r = 1 + r + r²·P(r), P of degree 5, and
 * tanh x = x + x³·Q(x²), Q of degree 4. */
#define K3_EXP_POLY 1.9875691500e-4f, 1.3981999507e-3f, 8.3334519073e-3f, 4.1665795894e-2f, \
                    1.6666665459e-1f, 5.0000001201e-1f
#define K3_TANH_POLY -5.70498872745e-3f, 2.06390887954e-2f, -5.37397155531e-2f, \
                     1.33314422036e-1f, -3.33332819422e-1f

/* e^x for x clamped to [K3_EXP_LO, K3_EXP_HI]: x = n ln2 + r, |r| <= ln2/2, e^r by a degree-6
 * polynomial, times 2^n built in the exponent bits. */
static inline float k3_exp(float x)
{
    if (x > K3_EXP_HI)
        x = K3_EXP_HI;
    if (x < K3_EXP_LO)
        x = K3_EXP_LO;
    static const float P[] = {K3_EXP_POLY};
    float t = x * K3_LOG2E + K3_ROUND_MAGIC;
    float n = t - K3_ROUND_MAGIC;
    float r = x - n * K3_LN2_HI;
    r = r - n * K3_LN2_LO;
    float z = r * r;
    float p = P[0];
#pragma GCC unroll 8
    for (int i = 1; i < 6; i++)
        p = p * r + P[i];
    p = p * z + r + 1.0f;
    /* n + 127 into the exponent field (n's bits sit in t; unsigned, so a NaN's wrap) */
    float scale = k3_bits_f32((k3_f32_bits(t) - k3_f32_bits(K3_ROUND_MAGIC) + 127u) << 23);
    return p * scale;
}

/* tanh: an odd polynomial below |x| = 0.625, else 1 - 2/(e^2|x| + 1) with x's sign. */
static inline float k3_tanh(float x)
{
    static const float Q[] = {K3_TANH_POLY};
    float a = k3_bits_f32(k3_f32_bits(x) & 0x7fffffffu);
    if (a > K3_TANH_SMALL) {
        float big = 1.0f - 2.0f / (k3_exp(a + a) + 1.0f);
        return k3_bits_f32(k3_f32_bits(big) | (k3_f32_bits(x) & 0x80000000u));
    }
    float z = x * x;
    float p = Q[0];
#pragma GCC unroll 8
    for (int i = 1; i < 5; i++)
        p = p * z + Q[i];
    return p * z * x + x;
}

/* SiTU-GLU activation: β₁·tanh(g/β₁)·σ(g) · β₂·tanh(u/β₂); σ sees the uncapped g. */
static inline float k3_situ(float g, float u, float beta_gate, float beta_up)
{
    float sigma = 1.0f / (1.0f + k3_exp(0.0f - g)); /* not -g: a NaN g keeps its sign */
    return beta_gate * k3_tanh(g / beta_gate) * sigma * (beta_up * k3_tanh(u / beta_up));
}

/* y[i] = k3_situ(g[i], u[i], beta_gate, beta_up) for i < n, in the variant's SIMD width. */
void k3_situ_n(float *y, const float *g, const float *u, int n, float beta_gate, float beta_up);

#endif
