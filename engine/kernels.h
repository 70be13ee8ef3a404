/* Dense kernels: bf16 × f32 mat-vec/mat-mul, norms, activations.
 *
 * Owns: the summation order of every dot product.  A dot product runs in 16 lanes
 * (element i goes to lane i mod 16, products rounded before the add, no FMA) and the
 * lanes are reduced by a fixed pairwise tree.  Every variant (scalar reference, AVX2,
 * AVX-512) follows that order, so results are identical bytes whatever the ISA or
 * thread count.  Rows are split across OpenMP threads; each row is one thread's.
 * Does not own: MXFP4 (mxfp4.h), model structure.
 *
 * Variants are chosen at the first kernel call (kernels_isa.h): the best the CPU has, or
 * the one named by K3_KERNELS=scalar|avx2|avx512|avx512vbmi|auto.  Identical bytes hold
 * for every input whose sums meet at most one NaN payload (two different NaNs meeting in
 * an add may keep either payload; the result is NaN either way).
 */
#ifndef K3_KERNELS_H
#define K3_KERNELS_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#define K3_LANES 16

static inline float k3_bf16_to_f32(uint16_t v)
{
    uint32_t bits = (uint32_t)v << 16;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* Round to nearest even; NaN stays NaN. */
static inline uint16_t k3_f32_to_bf16(float f)
{
    uint32_t bits;
    memcpy(&bits, &f, sizeof bits);
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

/* Y[t][r] = W[r]·X[t] for t < T: W [rows, cols] bf16, X [T, ldx], Y [T, ldy]. */
void k3_matmul_bf16(const uint16_t *W, int rows, int cols, const float *X, int ldx, float *Y,
                    int ldy, int T);

/* Y[t][r] = k3_situ(G[r]·X[t], U[r]·X[t], beta_gate, beta_up): the gate and up projections
 * of a SiTU MLP and its activation in one pass (G, U [rows, cols] bf16).  The same bytes
 * as two k3_matmul_bf16 calls followed by k3_situ on each pair. */
void k3_matmul_bf16_situ(const uint16_t *G, const uint16_t *U, int rows, int cols,
                         const float *X, int ldx, float *Y, int ldy, int T, float beta_gate,
                         float beta_up);

/* The kernel variant in use: "scalar", "avx2", "avx512" or "avx512vbmi". */
const char *k3_kernels_name(void);
/* Use variant NAME ("auto" = the best supported) from now on: 0, -EINVAL for an unknown
 * name, -ENOTSUP when this CPU lacks it.  Not to be called while kernels run. */
int k3_kernels_select(const char *name);

/* y = γ ⊙ x / sqrt(mean(x²) + eps).  y may alias x. */
void k3_rmsnorm(float *y, const float *x, const float *gain, int n, float eps);
/* 1 / sqrt(mean(x²) + eps) */
float k3_rms_inv(const float *x, int n, float eps);

static inline float k3_sigmoid(float z) { return 1.0f / (1.0f + expf(-z)); }
static inline float k3_silu(float z) { return z * k3_sigmoid(z); }

/* SiTU-GLU activation: β₁·tanh(g/β₁)·σ(g) · β₂·tanh(u/β₂); σ sees the uncapped g. */
static inline float k3_situ(float g, float u, float beta_gate, float beta_up)
{
    return beta_gate * tanhf(g / beta_gate) * k3_sigmoid(g) * (beta_up * tanhf(u / beta_up));
}

#endif
