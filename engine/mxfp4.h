/* MXFP4 (OCP microscaling FP4) as K3 ships its routed experts.
 *
 * Format (frozen by the checkpoint): a row of n weights is n/2 packed bytes, element 2b
 * in the LOW nibble of byte b and 2b+1 in the high nibble; each nibble is E2M1 (bit 3
 * sign, bits 0-2 index {0, .5, 1, 1.5, 2, 3, 4, 6}); one E8M0 byte e per 32 consecutive
 * inputs scales them by 2^(e-127).  Reserved codes: e = 255 (NaN in the OCP spec)
 * zeroes its group and is counted; e = 0 means 2^-127.
 *
 * Owns: decoding and the dot product straight from packed form (no dequantized copy).
 * Summation order (every variant follows it, so results are identical bytes): for
 * group g and lane l < 16, t = x[32g+l]·v[32g+l] + x[32g+16+l]·v[32g+16+l] and
 * acc[l] += t·2^(e-127); then the lane tree of kernels.h.
 */
#ifndef K3_MXFP4_H
#define K3_MXFP4_H

#include <stddef.h>
#include <stdint.h>

#define K3_MXFP4_GROUP 32

extern const float k3_e2m1_values[16];

/* 2^(e-127) as float; 0 for e = 255. */
float k3_e8m0_scale(uint8_t e);

/* Logical element c of a packed row. */
float k3_mxfp4_get(const uint8_t *packed, const uint8_t *scales, int c);

/* n is a multiple of 32 (the format needs it); elements past the last whole group are
 * ignored by every variant. */
float k3_dot_mxfp4(const uint8_t *packed, const uint8_t *scales, const float *x, int n);

/* Y[t][r] = W[r]·X[t]: W is rows × cols as packed [rows, cols/2] + scales [rows, cols/32]. */
void k3_matmul_mxfp4(const uint8_t *packed, const uint8_t *scales, int rows, int cols,
                     const float *X, int ldx, float *Y, int ldy, int T);

/* Y[t][r] = k3_situ(W1[r]·X[t], W3[r]·X[t], beta_gate, beta_up): an expert's gate (w1) and
 * up (w3) projections and SiTU in one pass; both are rows × cols MXFP4.  The same bytes as
 * two k3_matmul_mxfp4 calls followed by k3_situ on each pair. */
void k3_matmul_mxfp4_situ(const uint8_t *packed1, const uint8_t *scales1, const uint8_t *packed3,
                          const uint8_t *scales3, int rows, int cols, const float *X, int ldx,
                          float *Y, int ldy, int T, float beta_gate, float beta_up);

/* Number of scale bytes equal to 255 (groups that decode to zero). */
size_t k3_mxfp4_count_nan_scales(const uint8_t *scales, size_t n);

#endif
