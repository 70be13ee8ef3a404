/* A weight matrix in whichever type the trunk holds it (bf16 as shipped, or Q8_0), and
 * the mat-muls that take it: one call site in the forward pass whatever the type.
 *
 * Owns: the handle and the dispatch on its type.  Does not own: the arithmetic
 * (kernels.h for bf16, q8_0.h for Q8_0, each with its own summation order), which matrix
 * has which type (engine/model/trunk_type.h). */
#ifndef K3_MATRIX_H
#define K3_MATRIX_H

#include <stdint.h>

enum k3_mat_type { K3_MAT_BF16, K3_MAT_Q8_0 };

struct k3_mat {
    const void *data;      /* [rows, cols] bf16, or rows of Q8_0 blocks */
    enum k3_mat_type type;
};

static inline struct k3_mat k3_mat_bf16(const uint16_t *w)
{
    return (struct k3_mat){.data = w, .type = K3_MAT_BF16};
}

/* Y[t][r] = W[r]·X[t] for t < T, as k3_matmul_bf16 or k3_matmul_q8_0. */
void k3_matmul(struct k3_mat W, int rows, int cols, const float *X, int ldx, float *Y, int ldy,
               int T);
/* The fused SiTU of k3_matmul_bf16_situ or k3_matmul_q8_0_situ; G and U of one type. */
void k3_matmul_situ(struct k3_mat G, struct k3_mat U, int rows, int cols, const float *X, int ldx,
                    float *Y, int ldy, int T, float beta_gate, float beta_up);

#endif
