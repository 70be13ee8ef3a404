#include "engine/kernels.h"

#include <omp.h>

float k3_dot_bf16(const uint16_t *w, const float *x, int n)
{
    float acc[K3_LANES] = {0};
    for (int i = 0; i < n; i++)
        acc[i % K3_LANES] += k3_bf16_to_f32(w[i]) * x[i];
    return k3_lane_reduce(acc);
}

float k3_dot_f32(const float *a, const float *b, int n)
{
    float acc[K3_LANES] = {0};
    for (int i = 0; i < n; i++)
        acc[i % K3_LANES] += a[i] * b[i];
    return k3_lane_reduce(acc);
}

void k3_matmul_bf16(const uint16_t *W, int rows, int cols, const float *X, int ldx, float *Y,
                    int ldy, int T)
{
#pragma omp parallel for schedule(static) if ((long)rows * cols * T > 32768)
    for (int r = 0; r < rows; r++) {
        const uint16_t *w = W + (size_t)r * cols;
        for (int t = 0; t < T; t++)
            Y[(size_t)t * ldy + r] = k3_dot_bf16(w, X + (size_t)t * ldx, cols);
    }
}

float k3_rms_inv(const float *x, int n, float eps)
{
    return 1.0f / sqrtf(k3_dot_f32(x, x, n) / (float)n + eps);
}

void k3_rmsnorm(float *y, const float *x, const float *gain, int n, float eps)
{
    float inv = k3_rms_inv(x, n, eps);
    for (int i = 0; i < n; i++)
        y[i] = gain[i] * (x[i] * inv);
}
