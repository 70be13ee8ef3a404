/* The mat-muls of a k3_mat, by its type (matrix.h). */
#include "engine/kernels/matrix.h"

#include <assert.h>

#include "engine/kernels/kernels.h"
#include "engine/kernels/q8_0.h"

void k3_matmul(struct k3_mat W, int rows, int cols, const float *X, int ldx, float *Y, int ldy,
               int T)
{
    if (W.type == K3_MAT_Q8_0)
        k3_matmul_q8_0(W.data, rows, cols, X, ldx, Y, ldy, T);
    else
        k3_matmul_bf16(W.data, rows, cols, X, ldx, Y, ldy, T);
}

void k3_matmul_situ(struct k3_mat G, struct k3_mat U, int rows, int cols, const float *X, int ldx,
                    float *Y, int ldy, int T, float beta_gate, float beta_up)
{
    assert(G.type == U.type);
    if (G.type == K3_MAT_Q8_0)
        k3_matmul_q8_0_situ(G.data, U.data, rows, cols, X, ldx, Y, ldy, T, beta_gate, beta_up);
    else
        k3_matmul_bf16_situ(G.data, U.data, rows, cols, X, ldx, Y, ldy, T, beta_gate, beta_up);
}
