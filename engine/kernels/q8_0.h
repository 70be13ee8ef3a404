/* Q8_0 (llama.cpp's layout): the trunk's large matrices at half of bf16's bytes.
 *
 * Format (FROZEN: it is ggml's block_q8_0, and a pack stores it as is): a row of n
 * weights (n a multiple of 32) is n/32 blocks of 34 bytes, each an IEEE half scale d
 * (little-endian) then 32 int8 q; weight j of the block is q[j]·d.  Rows follow each other
 * with no padding, so a [rows, cols] matrix is rows·cols/32·34 bytes and its blocks are
 * those of the flat array.
 *
 * Quantization (k3_q8_0_quantize, ggml's quantize_row_q8_0_ref op for op, so a pack is
 * deterministic and agrees with llama.cpp's tools): amax = max |x| over the block,
 * d = amax/127 in f32, id = d ? 1/d : 0, the stored scale is d rounded to the nearest
 * half (ties to even; above 65504 it is inf, as ggml's), q[j] = roundf(x[j]·id) (halves
 * away from zero).  Note q uses the f32 d, the dot product the stored half.
 *
 * Owns: the block, the half conversions, quantizing, and the dot product with f32
 * activations straight from the blocks.  Does not own: which matrices are Q8_0
 * (engine/model/trunk_type.h), threads (kernels.c's row split).
 *
 * Summation order (every variant follows it, so results are identical bytes): 16 lanes;
 * lane k < 16 of block b takes elements 32b + k and 32b + k + 16, each q widened to f32
 * (exact), the second product fused with the first, the block's scale with the lane sum:
 *     a = q_k·x_k,  a = fma(q_{k+16}, x_{k+16}, a),  acc[k] = fma(a, d_b, acc[k])
 * then the lane tree of kernels.h.  One block fills a zmm twice (two widening loads of 16
 * int8), or two ymm twice on AVX2 (lanes 0..7 and 8..15): no shuffles, 3 float operations
 * per 32 weights and token.
 */
#ifndef K3_Q8_0_H
#define K3_Q8_0_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define K3_Q8_0_BLOCK 32

struct k3_q8_0_block {
    uint16_t d;                   /* IEEE half scale */
    int8_t q[K3_Q8_0_BLOCK];
};
_Static_assert(sizeof(struct k3_q8_0_block) == 34, "frozen: ggml's block_q8_0");

/* Bytes of a row of cols weights (cols a multiple of K3_Q8_0_BLOCK). */
static inline size_t k3_q8_0_row_bytes(int64_t cols)
{
    return (size_t)(cols / K3_Q8_0_BLOCK) * sizeof(struct k3_q8_0_block);
}

/* IEEE half to f32, exactly (a NaN comes out quiet, as F16C's vcvtph2ps gives it). */
static inline float k3_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff, bits;
    if (e == 0) { /* zero or subnormal: m · 2^-24, exact in f32 */
        float v = (float)m * 0x1p-24f;
        memcpy(&bits, &v, sizeof bits);
    } else if (e == 31) {
        bits = 0x7f800000u | (m ? 0x400000u : 0) | m << 13;
    } else {
        bits = (e + 112) << 23 | m << 13;
    }
    bits |= sign;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* f32 to IEEE half: round to nearest even, subnormals kept, inf past 65504 (from 65520
 * on), a NaN stays a NaN. */
uint16_t k3_f32_to_f16(float f);

/* n values (a multiple of 32) into n/32 blocks, as ggml's quantize_row_q8_0_ref. */
void k3_q8_0_quantize(const float *x, int64_t n, struct k3_q8_0_block *y);
/* The same from bf16 (widened exactly first).  y may overlap x when y starts at or
 * before x (each block is read whole before it is written), so a bf16 tensor can become
 * Q8_0 in place. */
void k3_q8_0_quantize_bf16(const uint16_t *x, int64_t n, struct k3_q8_0_block *y);

/* Weight c of a Q8_0 row: q·d. */
float k3_q8_0_get(const struct k3_q8_0_block *row, int c);

/* The reference dot product of the order above; n a multiple of 32. */
float k3_dot_q8_0_scalar(const struct k3_q8_0_block *w, const float *x, int n);

/* Y[t][r] = W[r]·X[t] for t < T: W [rows, cols] Q8_0 (cols a multiple of 32), X [T, ldx],
 * Y [T, ldy]; rows over the threads as k3_matmul_bf16. */
void k3_matmul_q8_0(const struct k3_q8_0_block *W, int rows, int cols, const float *X, int ldx,
                    float *Y, int ldy, int T);
/* The gate and up projections of a SiTU MLP and its activation, as k3_matmul_bf16_situ. */
void k3_matmul_q8_0_situ(const struct k3_q8_0_block *G, const struct k3_q8_0_block *U, int rows,
                         int cols, const float *X, int ldx, float *Y, int ldy, int T,
                         float beta_gate, float beta_up);

#endif
