#include "engine/mxfp4.h"

#include <string.h>

#include "engine/kernels.h"
#include "engine/kernels_isa.h"

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

/* The reference: lane l of group g adds (x[32g+l]·v[32g+l] + x[32g+16+l]·v[32g+16+l])·scale. */
float k3_dot_mxfp4_scalar(const uint8_t *packed, const uint8_t *scales, const float *x, int n)
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

void k3_rows_mxfp4_scalar(const uint8_t *packed, const uint8_t *scales, int nrows, int cols,
                          const float *X, int ldx, float *Y, int ldy, int T)
{
    size_t prow = (size_t)cols / 2, srow = (size_t)cols / K3_MXFP4_GROUP;
    for (int r = 0; r < nrows; r++)
        for (int t = 0; t < T; t++)
            Y[(size_t)t * ldy + r] = k3_dot_mxfp4_scalar(packed + r * prow, scales + r * srow,
                                                         X + (size_t)t * ldx, cols);
}

float k3_dot_mxfp4(const uint8_t *packed, const uint8_t *scales, const float *x, int n)
{
    return k3_kernels()->dot_mxfp4(packed, scales, x, n);
}

struct mxfp4_job {
    k3_rows_mxfp4_fn *rows;
    const uint8_t *p1, *s1, *p3, *s3; /* p3, s3: the up rows of a fused SiTU, else NULL */
    int cols, ldx, ldy, T;
    const float *X;
    float *Y;
    float beta_gate, beta_up;
};

static void mxfp4_chunk(void *arg, int r0, int nrows)
{
    const struct mxfp4_job *j = arg;
    size_t prow = (size_t)j->cols / 2, srow = (size_t)j->cols / K3_MXFP4_GROUP;
    j->rows(j->p1 + r0 * prow, j->s1 + r0 * srow, nrows, j->cols, j->X, j->ldx, j->Y + r0,
            j->ldy, j->T);
}

static long mxfp4_row_bytes(int cols)
{
    return cols / 2 + cols / K3_MXFP4_GROUP;
}

void k3_matmul_mxfp4(const uint8_t *packed, const uint8_t *scales, int rows, int cols,
                     const float *X, int ldx, float *Y, int ldy, int T)
{
    struct mxfp4_job j = {k3_kernels()->rows_mxfp4, packed, scales, NULL, NULL, cols, ldx, ldy,
                          T, X, Y, 0, 0};
    k3_rows_parallel(rows, mxfp4_row_bytes(cols), (long)rows * cols * T, &j, mxfp4_chunk);
}

/* Fused SiTU: blocks of SITU_ROWS rows × SITU_TOKENS tokens through small buffers; all the
 * gate rows of a block, then all its up rows (two streams switching every few hundred KB,
 * not every few KB, which costs the prefetchers less). */
#define SITU_ROWS 256
#define SITU_TOKENS 8

static void mxfp4_situ_chunk(void *arg, int r0, int nrows)
{
    const struct mxfp4_job *j = arg;
    size_t prow = (size_t)j->cols / 2, srow = (size_t)j->cols / K3_MXFP4_GROUP;
    float g[SITU_TOKENS * SITU_ROWS], u[SITU_TOKENS * SITU_ROWS];
    for (int b = r0; b < r0 + nrows; b += SITU_ROWS) {
        int nb = r0 + nrows - b < SITU_ROWS ? r0 + nrows - b : SITU_ROWS;
        for (int t0 = 0; t0 < j->T; t0 += SITU_TOKENS) {
            int nt = j->T - t0 < SITU_TOKENS ? j->T - t0 : SITU_TOKENS;
            const float *X = j->X + (size_t)t0 * j->ldx;
            j->rows(j->p1 + b * prow, j->s1 + b * srow, nb, j->cols, X, j->ldx, g, SITU_ROWS, nt);
            j->rows(j->p3 + b * prow, j->s3 + b * srow, nb, j->cols, X, j->ldx, u, SITU_ROWS, nt);
            for (int t = 0; t < nt; t++)
                for (int i = 0; i < nb; i++)
                    j->Y[(size_t)(t0 + t) * j->ldy + b + i] =
                        k3_situ(g[t * SITU_ROWS + i], u[t * SITU_ROWS + i], j->beta_gate, j->beta_up);
        }
    }
}

void k3_matmul_mxfp4_situ(const uint8_t *packed1, const uint8_t *scales1, const uint8_t *packed3,
                          const uint8_t *scales3, int rows, int cols, const float *X, int ldx,
                          float *Y, int ldy, int T, float beta_gate, float beta_up)
{
    struct mxfp4_job j = {k3_kernels()->rows_mxfp4, packed1, scales1, packed3, scales3, cols,
                          ldx, ldy, T, X, Y, beta_gate, beta_up};
    k3_rows_parallel(rows, 2 * mxfp4_row_bytes(cols), 2L * rows * cols * T, &j, mxfp4_situ_chunk);
}

size_t k3_mxfp4_count_nan_scales(const uint8_t *scales, size_t n)
{
    size_t count = 0;
    for (size_t i = 0; i < n; i++)
        count += scales[i] == 255;
    return count;
}
