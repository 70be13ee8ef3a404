/* MXFP4 (OCP microscaling FP4) as K3 ships its routed experts.
 *
 * Format (frozen by the checkpoint): a row of n weights is n/2 packed bytes, element 2b
 * in the LOW nibble of byte b and 2b+1 in the high nibble; each nibble is E2M1 (bit 3
 * sign, bits 0-2 index {0, .5, 1, 1.5, 2, 3, 4, 6}); one E8M0 byte e per 32 consecutive
 * inputs scales them by 2^(e-127).  Reserved codes: e = 255 (NaN in the OCP spec)
 * zeroes its group and is counted; e = 0 means 2^-127.
 *
 * Owns: decoding and the dot product straight from packed form (no dequantized copy).
 * Does not own memory: the scratch its products rewrite the activations into is the
 * caller's, planned once (k3_mxfp4_scratch_bytes, below).
 * Summation order (every variant follows it, so results are identical bytes): a row is
 * cut into blocks of 128 elements (4 groups, 64 packed bytes).  Lane k < 16 of block b
 * takes the 8 elements i = 128b + 8k + j, j < 8 (the 4 packed bytes 4k..4k+3 of the
 * block, all in group g = 4b + k/4), even j in one chain and odd j in another, each
 * product fused with its add (fma: one rounding):
 *     a = x_0·v_0,  a = fma(x_2, v_2, a),  a = fma(x_4, v_4, a),  a = fma(x_6, v_6, a)
 *     c = x_1·v_1,  c = fma(x_3, v_3, c),  c = fma(x_5, v_5, c),  c = fma(x_7, v_7, c)
 *     acc[k] = fma(a + c, 2^(e_g - 127), acc[k])
 * (x_j, v_j: element 128b + 8k + j); lanes of groups past the end of the row add nothing;
 * then the lane tree of kernels.h.  Why this order: one 32-bit word of packed weights
 * per lane, so a SIMD kernel gets the nibble indices of 16 lanes by one shift of the 64
 * loaded bytes and one table permute, reads the activations in "block order" (below),
 * rearranged once per mat-vec, not once per row, and spends 10 float operations per 128
 * weights where multiply-then-add took 17 (bench/results/kernels-choices.md, "fused
 * multiply-add").
 */
#ifndef K3_MXFP4_H
#define K3_MXFP4_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define K3_MXFP4_GROUP 32

extern const float k3_e2m1_values[16];

/* 2^(e-127) as float; 0 for e = 255. */
float k3_e8m0_scale(uint8_t e);

/* Logical element c of a packed row. */
float k3_mxfp4_get(const uint8_t *packed, const uint8_t *scales, int c);

/* Block order: the activations as the lanes above read them, xb[128b + 16j + k] =
 * x[128b + 8k + j], the row length rounded up to a whole block with zeros.  Floats in
 * k3_mxfp4_block_floats(n). */
static inline size_t k3_mxfp4_block_floats(int n)
{
    return ((size_t)n + 127) / 128 * 128;
}
void k3_mxfp4_block_order(const float *x, int n, float *xb);

/* ---- scratch: the activations as the kernels read them ------------------------------
 *
 * Every MXFP4 product below (but k3_dot_mxfp4_q8) first rewrites X once, on its calling
 * thread, into block order (or int8 with K3_MXFP4_ACT=q8), then splits the rows over the
 * threads.  That copy lives in scratch the caller planned and gave once: the kernels
 * allocate nothing, so they cannot fail and their memory is in the caller's budget.  A
 * call holds one slot of it while it runs, so the scratch has a slot per thread that may
 * call at the same time (inside a team's work every member calls: numa/teams.h).  Calling
 * with nothing bound, with more tokens or activations than bound, or from more threads at
 * once than bound is a caller's bug (an assert). */

/* Bytes of scratch for calls of up to max_tokens tokens of up to max_inputs activations
 * (cols) each, from up to callers threads at once; either activation type. */
size_t k3_mxfp4_scratch_bytes(int max_tokens, int max_inputs, int callers);
/* The MXFP4 products use mem (k3_mxfp4_scratch_bytes of the same arguments, 64-byte
 * aligned) from now on, for every thread, until the next bind or its unbind.  Not to be
 * called while MXFP4 products run. */
void k3_mxfp4_scratch_bind(void *mem, int max_tokens, int max_inputs, int callers);
/* Unbinds mem if it is the scratch bound (freeing one session's leaves another's bound). */
void k3_mxfp4_scratch_unbind(const void *mem);

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

/* ---- int8 activations (optional; off unless K3_MXFP4_ACT=q8 or called by name) --------
 *
 * A different contract, as llama.cpp's MXFP4 × q8_0 dot products: the activations of each
 * group of 32 become int8, q = rint(x·127/amax) with d = amax/127 (amax = max|x| of the
 * group; q = 0 and d = 0 for an all-zero group; q = 0 and d = NaN when the group holds an
 * inf or NaN), and the weights the integers w = 2·E2M1 in [-12, 12].  Per pair of groups
 * (g0 = 2p, g1 = 2p+1; a missing g1 contributes nothing) lane j < 16 sums four products
 * exactly in int32: lanes 0-3 the even elements of g0, 4-7 its odd elements, 8-11 and
 * 12-15 the same for g1, lane j taking elements 2i + (j/4 & 1) for i = 4(j%4) .. 4(j%4)+3;
 * then acc[j] += (float)sum_j · (2^(e-127) · d/2), mul then add, and the lane tree of
 * kernels.h.  Every variant gives the same bytes (integer sums are exact); against the f32
 * contract the difference is the 8-bit rounding of x (tests/unit/test_kernels_q8.c states
 * it).  n is a multiple of 32. */
struct k3_q8 {
    int n, T;       /* activations per token, tokens */
    int pairs;      /* ceil(n / 64) pairs of groups per token */
    int8_t *q;      /* [T][pairs · 64] in the lane order above */
    float *dh;      /* [T][pairs · 2] d/2 per group (0 for a missing g1) */
    int32_t *bias;  /* [T][pairs · 16] -12 · (sum of the lane's four q): the kernels add 12
                       to each weight to make it unsigned, and start each lane here */
};

/* Token t's q, d/2 and biases in xq, and the strides from one token's to the next's. */
struct k3_q8_token {
    const int8_t *q;
    const float *dh;
    const int32_t *bias;
    size_t qstride, dstride, bstride;
};
static inline struct k3_q8_token k3_q8_token(const struct k3_q8 *xq, int t)
{
    size_t qs = (size_t)xq->pairs * 64, ds = (size_t)xq->pairs * 2, bs = (size_t)xq->pairs * 16;
    return (struct k3_q8_token){xq->q + t * qs, xq->dh + t * ds, xq->bias + t * bs, qs, ds, bs};
}

/* Bytes k3_q8_quantize needs for T tokens of n activations. */
size_t k3_q8_bytes(int n, int T);
/* Quantizes X [T, ldx] (n per token) into mem (k3_q8_bytes(n, T) bytes, 64-byte aligned
 * is best) and describes it in xq. */
void k3_q8_quantize(struct k3_q8 *xq, void *mem, const float *X, int n, int ldx, int T);

/* The int8 counterparts: the same shapes as k3_dot_mxfp4 and k3_matmul_mxfp4.  The mat-mul
 * quantizes X itself (into the bound scratch). */
float k3_dot_mxfp4_q8(const uint8_t *packed, const uint8_t *scales, const struct k3_q8 *xq);
void k3_matmul_mxfp4_q8(const uint8_t *packed, const uint8_t *scales, int rows, int cols,
                        const float *X, int ldx, float *Y, int ldy, int T);

/* True after k3_mxfp4_set_q8(true) (the CLI's K3_MXFP4_ACT=q8): k3_dot_mxfp4,
 * k3_matmul_mxfp4 and k3_matmul_mxfp4_situ then take the int8 path.  Off by default; not
 * to be switched while kernels run. */
int k3_mxfp4_q8_enabled(void);
void k3_mxfp4_set_q8(bool on);

/* Number of scale bytes equal to 255 (groups that decode to zero). */
size_t k3_mxfp4_count_nan_scales(const uint8_t *scales, size_t n);

#endif
