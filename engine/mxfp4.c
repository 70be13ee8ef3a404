#include "engine/mxfp4.h"

#include <string.h>

#include "engine/kernels.h"

const float k3_e2m1_values[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                                  -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

float k3_e8m0_scale(uint8_t e)
{
    /* 2^(e-127) is the float with exponent field e and a zero mantissa; e = 0 is the
     * subnormal 2^-127 (mantissa bit 22). */
    uint32_t bits = e == 255 ? 0u : e == 0 ? 0x00400000u : (uint32_t)e << 23;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

float k3_mxfp4_get(const uint8_t *packed, const uint8_t *scales, int c)
{
    int nib = (packed[c >> 1] >> (4 * (c & 1))) & 0xF;
    return k3_e2m1_values[nib] * k3_e8m0_scale(scales[c / K3_MXFP4_GROUP]);
}

float k3_dot_mxfp4(const uint8_t *packed, const uint8_t *scales, const float *x, int n)
{
    float acc[K3_LANES] = {0};
    for (int g = 0; g < n / K3_MXFP4_GROUP; g++) {
        const uint8_t *p = packed + g * (K3_MXFP4_GROUP / 2);
        const float *xg = x + g * K3_MXFP4_GROUP;
        float s = k3_e8m0_scale(scales[g]);
        for (int l = 0; l < K3_LANES; l++) {
            float lo = k3_e2m1_values[(p[l >> 1] >> (4 * (l & 1))) & 0xF];
            float hi = k3_e2m1_values[(p[(l + 16) >> 1] >> (4 * (l & 1))) & 0xF];
            float t = xg[l] * lo + xg[l + 16] * hi;
            acc[l] += t * s;
        }
    }
    return k3_lane_reduce(acc);
}

void k3_matmul_mxfp4(const uint8_t *packed, const uint8_t *scales, int rows, int cols,
                     const float *X, int ldx, float *Y, int ldy, int T)
{
    size_t prow = (size_t)cols / 2, srow = (size_t)cols / K3_MXFP4_GROUP;
#pragma omp parallel for schedule(static) if ((long)rows * cols * T > 32768)
    for (int r = 0; r < rows; r++)
        for (int t = 0; t < T; t++)
            Y[(size_t)t * ldy + r] =
                k3_dot_mxfp4(packed + r * prow, scales + r * srow, X + (size_t)t * ldx, cols);
}

size_t k3_mxfp4_count_nan_scales(const uint8_t *scales, size_t n)
{
    size_t count = 0;
    for (size_t i = 0; i < n; i++)
        count += scales[i] == 255;
    return count;
}
