/* Q8_0: the half conversion, the quantizer, the scalar reference and the mat-muls over
 * threads (q8_0.h).  The SIMD rows live in q8_0_avx2.c and q8_0_avx512.c. */
#include "engine/kernels/q8_0.h"

#include <math.h>

#include "engine/kernels/kernels.h"
#include "engine/kernels/kernels_isa.h"

uint16_t k3_f32_to_f16(float f)
{
    uint32_t x = k3_f32_bits(f), ax = x & 0x7fffffffu;
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
    if (ax > 0x7f800000u) /* NaN: quiet, the payload's top bits kept */
        return (uint16_t)(sign | 0x7e00 | ((ax >> 13) & 0x3ff));
    if (ax >= 0x38800000u) { /* 2^-14 and up: normal, or inf after rounding */
        uint32_t r = ax - (112u << 23);
        r = (r + 0xfffu + ((r >> 13) & 1)) >> 13;
        return (uint16_t)(sign | (r >= 0x7c00 ? 0x7c00 : r));
    }
    uint32_t e = ax >> 23;
    if (e < 102) /* below 2^-25: rounds to zero */
        return sign;
    uint32_t m = (ax & 0x7fffffu) | 0x800000u, shift = 126 - e; /* units of 2^-24 */
    uint32_t r = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (r & 1)))
        r++;
    return (uint16_t)(sign | r);
}

/* One block of ggml's quantize_row_q8_0_ref. */
static void quantize_block(const float *x, struct k3_q8_0_block *y)
{
    float amax = 0.0f;
    for (int j = 0; j < K3_Q8_0_BLOCK; j++) {
        float a = fabsf(x[j]);
        amax = a > amax ? a : amax;
    }
    float d = amax / 127.0f;
    float id = d != 0.0f ? 1.0f / d : 0.0f;
    y->d = k3_f32_to_f16(d);
    for (int j = 0; j < K3_Q8_0_BLOCK; j++) {
        float r = roundf(x[j] * id); /* |r| <= 127 for finite x; inf or NaN gives 0 */
        y->q[j] = (int8_t)(r == r && fabsf(r) <= 127.0f ? r : 0.0f);
    }
}

void k3_q8_0_quantize(const float *x, int64_t n, struct k3_q8_0_block *y)
{
    for (int64_t b = 0; b < n / K3_Q8_0_BLOCK; b++)
        quantize_block(x + b * K3_Q8_0_BLOCK, &y[b]);
}

void k3_q8_0_quantize_bf16(const uint16_t *x, int64_t n, struct k3_q8_0_block *y)
{
    for (int64_t b = 0; b < n / K3_Q8_0_BLOCK; b++) {
        uint16_t h[K3_Q8_0_BLOCK];
        float f[K3_Q8_0_BLOCK];
        struct k3_q8_0_block out;
        memcpy(h, x + b * K3_Q8_0_BLOCK, sizeof h); /* whole, before y[b] may cover it */
        for (int j = 0; j < K3_Q8_0_BLOCK; j++)
            f[j] = k3_bf16_to_f32(h[j]);
        quantize_block(f, &out);
        memcpy(&y[b], &out, sizeof out);
    }
}

float k3_q8_0_get(const struct k3_q8_0_block *row, int c)
{
    const struct k3_q8_0_block *b = &row[c / K3_Q8_0_BLOCK];
    return (float)b->q[c % K3_Q8_0_BLOCK] * k3_f16_to_f32(b->d);
}

/* ---- the reference ------------------------------------------------------------------- */

float k3_dot_q8_0_scalar(const struct k3_q8_0_block *w, const float *x, int n)
{
    float acc[K3_LANES] = {0};
    for (int b = 0; b < n / K3_Q8_0_BLOCK; b++, x += K3_Q8_0_BLOCK) {
        float d = k3_f16_to_f32(w[b].d);
        for (int k = 0; k < K3_LANES; k++) {
            float a = (float)w[b].q[k] * x[k];
            a = fmaf((float)w[b].q[k + K3_LANES], x[k + K3_LANES], a);
            acc[k] = fmaf(a, d, acc[k]);
        }
    }
    return k3_lane_reduce(acc);
}

void k3_rows_q8_0_scalar(const struct k3_q8_0_block *W, int nrows, int cols, const float *X,
                         int ldx, float *Y, int ldy, int T)
{
    size_t blocks = (size_t)cols / K3_Q8_0_BLOCK;
    for (int r = 0; r < nrows; r++)
        for (int t = 0; t < T; t++)
            Y[(size_t)t * ldy + r] = k3_dot_q8_0_scalar(W + r * blocks, X + (size_t)t * ldx, cols);
}

/* ---- over threads ---------------------------------------------------------------------- */

struct q8_0_job {
    k3_rows_q8_0_fn *rows;
    const struct k3_q8_0_block *W, *U; /* U: the up rows of a fused SiTU, else NULL */
    int cols, ldx, ldy, T;
    const float *X;
    float *Y;
    float beta_gate, beta_up;
};

static size_t row_blocks(const struct q8_0_job *j) { return (size_t)j->cols / K3_Q8_0_BLOCK; }

static void q8_0_chunk(void *arg, int r0, int nrows)
{
    const struct q8_0_job *j = arg;
    j->rows(j->W + r0 * row_blocks(j), nrows, j->cols, j->X, j->ldx, j->Y + r0, j->ldy, j->T);
}

void k3_matmul_q8_0(const struct k3_q8_0_block *W, int rows, int cols, const float *X, int ldx,
                    float *Y, int ldy, int T)
{
    struct q8_0_job j = {k3_kernels()->rows_q8_0, W, NULL, cols, ldx, ldy, T, X, Y, 0, 0};
    k3_rows_parallel(rows, (long)k3_q8_0_row_bytes(cols), (long)rows * cols * T, &j, q8_0_chunk);
}

static void q8_0_gate_up(const void *arg, int b, int nb, int t0, int nt, float *g, float *u,
                         int ld)
{
    const struct q8_0_job *j = arg;
    const float *X = j->X + (size_t)t0 * j->ldx;
    j->rows(j->W + b * row_blocks(j), nb, j->cols, X, j->ldx, g, ld, nt);
    j->rows(j->U + b * row_blocks(j), nb, j->cols, X, j->ldx, u, ld, nt);
}

static void q8_0_situ_chunk(void *arg, int r0, int nrows)
{
    const struct q8_0_job *j = arg;
    k3_situ_rows(j, q8_0_gate_up, r0, nrows, j->T, j->Y, j->ldy, j->beta_gate, j->beta_up);
}

void k3_matmul_q8_0_situ(const struct k3_q8_0_block *G, const struct k3_q8_0_block *U, int rows,
                         int cols, const float *X, int ldx, float *Y, int ldy, int T,
                         float beta_gate, float beta_up)
{
    struct q8_0_job j = {k3_kernels()->rows_q8_0, G, U, cols, ldx, ldy, T, X, Y, beta_gate,
                         beta_up};
    k3_rows_parallel(rows, 2L * (long)k3_q8_0_row_bytes(cols), 2L * rows * cols * T, &j,
                     q8_0_situ_chunk);
}
