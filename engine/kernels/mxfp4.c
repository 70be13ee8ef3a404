#include "engine/kernels/mxfp4.h"

#include <assert.h>
#include <float.h>
#include <math.h>
#include <omp.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "engine/base/err.h"
#include "engine/kernels/kernels.h"
#include "engine/kernels/kernels_isa.h"

const float k3_e2m1_values[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                                  -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

float k3_e8m0_scale(uint8_t e)
{
    /* 2^(e-127) is the float with exponent field e and a zero mantissa; e = 0 is the
     * subnormal 2^-127 (mantissa bit 22). */
    return k3_bits_f32(e == 255 ? 0u : e == 0 ? 0x00400000u : (uint32_t)e << 23);
}

float k3_mxfp4_get(const uint8_t *packed, const uint8_t *scales, int c)
{
    int nib = (packed[c >> 1] >> (4 * (c & 1))) & 0xF;
    return k3_e2m1_values[nib] * k3_e8m0_scale(scales[c / K3_MXFP4_GROUP]);
}

/* Where element i of a row sits in block order (mxfp4.h). */
static inline size_t block_pos(size_t i)
{
    return (i & ~(size_t)127) | (i & 7) << 4 | (i >> 3 & 15);
}

const int32_t k3_mxfp4_lane_group[4][16] = {
    {0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3},
    {4, 4, 4, 4, 5, 5, 5, 5, 6, 6, 6, 6, 7, 7, 7, 7},
    {8, 8, 8, 8, 9, 9, 9, 9, 10, 10, 10, 10, 11, 11, 11, 11},
    {12, 12, 12, 12, 13, 13, 13, 13, 14, 14, 14, 14, 15, 15, 15, 15},
};

/* Whole blocks as plain 16 x 8 to 8 x 16 transposes, faster than placing each element by
 * block_pos (bench/results/kernels-choices.md, "Block order"): it runs on the calling
 * thread before a mat-vec splits. */
void k3_mxfp4_block_order(const float *x, int n, float *xb)
{
    size_t whole = (size_t)n / 128 * 128, padded = k3_mxfp4_block_floats(n);
    for (size_t b = 0; b < whole; b += 128)
        for (int k = 0; k < 16; k++)
            for (int j = 0; j < 8; j++)
                xb[b + 16 * j + k] = x[b + 8 * k + j];
    for (size_t i = whole; i < padded; i++)
        xb[block_pos(i)] = i < (size_t)n ? x[i] : 0.0f;
}

/* The reference, over x in natural order or in block order. */
static float dot_reference(const uint8_t *packed, const uint8_t *scales, const float *x, int n,
                           bool block_ordered)
{
    float acc[K3_LANES] = {0};
    int groups = n / K3_MXFP4_GROUP;
    for (int b = 0; 4 * b < groups; b++)
        for (int k = 0; k < K3_LANES && 4 * b + k / 4 < groups; k++) {
            float chain[2] = {0, 0}; /* even elements, odd elements */
            for (int j = 0; j < 8; j++) {
                size_t i = (size_t)128 * b + 8 * k + j;
                int nib = packed[i >> 1] >> (4 * (i & 1)) & 0xF;
                float xi = x[block_ordered ? block_pos(i) : i], vi = k3_e2m1_values[nib];
                chain[j & 1] = j < 2 ? xi * vi : fmaf(xi, vi, chain[j & 1]);
            }
            acc[k] = fmaf(chain[0] + chain[1], k3_e8m0_scale(scales[4 * b + k / 4]), acc[k]);
        }
    return k3_lane_reduce(acc);
}

float k3_dot_mxfp4_scalar(const uint8_t *packed, const uint8_t *scales, const float *x, int n)
{
    return dot_reference(packed, scales, x, n, false);
}

void k3_rows_mxfp4_scalar(const uint8_t *packed, const uint8_t *scales, int nrows, int cols,
                          const float *Xb, int ldxb, float *Y, int ldy, int T)
{
    size_t prow = (size_t)cols / 2, srow = (size_t)cols / K3_MXFP4_GROUP;
    for (int r = 0; r < nrows; r++)
        for (int t = 0; t < T; t++)
            Y[(size_t)t * ldy + r] = dot_reference(packed + r * prow, scales + r * srow,
                                                   Xb + (size_t)t * ldxb, cols, true);
}

/* ---- scratch (mxfp4.h) ------------------------------------------------------------- */

/* The bound scratch: callers slots of slot bytes, each a busy flag in its own cache line,
 * then the activations of one call. */
static struct {
    char *mem;
    size_t slot;
    int max_tokens, max_inputs, callers;
} bound;

enum { SLOT_FLAG = 64 };

static size_t align64(size_t n)
{
    return (n + 63) & ~(size_t)63;
}

static size_t slot_bytes(int max_tokens, int max_inputs)
{
    size_t block = align64((size_t)max_tokens * k3_mxfp4_block_floats(max_inputs) * sizeof(float));
    size_t q8 = k3_q8_bytes(max_inputs, max_tokens);
    return SLOT_FLAG + (block > q8 ? block : q8);
}

size_t k3_mxfp4_scratch_bytes(int max_tokens, int max_inputs, int callers)
{
    return (size_t)callers * slot_bytes(max_tokens, max_inputs);
}

void k3_mxfp4_scratch_bind(void *mem, int max_tokens, int max_inputs, int callers)
{
    assert(mem && (uintptr_t)mem % 64 == 0 && max_tokens > 0 && max_inputs > 0 && callers > 0);
    bound.mem = mem;
    bound.slot = slot_bytes(max_tokens, max_inputs);
    bound.max_tokens = max_tokens;
    bound.max_inputs = max_inputs;
    bound.callers = callers;
    for (int i = 0; i < callers; i++)
        atomic_init((_Atomic int *)(bound.mem + (size_t)i * bound.slot), 0);
}

void k3_mxfp4_scratch_unbind(const void *mem)
{
    if (mem && bound.mem == mem)
        bound.mem = NULL;
}

/* A free slot for one call of T tokens of n activations, claimed until slot_release: the
 * calling thread's own when OpenMP numbers the callers (a team's members, one caller
 * alone), else the next free one. */
static void *slot_claim(int T, int n)
{
    assert(bound.mem && "MXFP4 kernels called with no scratch bound (k3_mxfp4_scratch_bind)");
    assert(T <= bound.max_tokens && n <= bound.max_inputs &&
           "an MXFP4 call larger than the scratch bound for it");
    int first = omp_get_thread_num() % bound.callers;
    for (int i = 0; i < bound.callers; i++) {
        char *slot = bound.mem + (size_t)((first + i) % bound.callers) * bound.slot;
        if (!atomic_exchange_explicit((_Atomic int *)slot, 1, memory_order_acquire))
            return slot + SLOT_FLAG;
    }
    assert(!"more threads in the MXFP4 kernels at once than the scratch was bound for");
    return NULL;
}

static void slot_release(const void *activations)
{
    char *slot = (char *)activations - SLOT_FLAG;
    atomic_store_explicit((_Atomic int *)slot, 0, memory_order_release);
}

/* X [T, ldx] in block order into the claimed xb, T rows of k3_mxfp4_block_floats(n). */
static void block_prepare(float *xb, const float *X, int n, int ldx, int T)
{
    size_t ldxb = k3_mxfp4_block_floats(n);
    for (int t = 0; t < T; t++)
        k3_mxfp4_block_order(X + (size_t)t * ldx, n, xb + (size_t)t * ldxb);
}

float k3_dot_mxfp4(const uint8_t *packed, const uint8_t *scales, const float *x, int n)
{
    void *mem = slot_claim(1, n);
    float y;
    if (k3_mxfp4_q8_enabled()) {
        struct k3_q8 xq;
        k3_q8_quantize(&xq, mem, x, n, n, 1);
        y = k3_dot_mxfp4_q8(packed, scales, &xq);
    } else {
        block_prepare(mem, x, n, n, 1);
        k3_kernels()->rows_mxfp4(packed, scales, 1, n, mem, 0, &y, 0, 1);
    }
    slot_release(mem);
    return y;
}

struct mxfp4_job {
    bool q8;                      /* the int8 path whatever K3_MXFP4_ACT says */
    k3_rows_mxfp4_fn *rows;       /* over X, in the order it expects */
    k3_rows_mxfp4_q8_fn *rows_q8; /* set: the int8 path, over xq */
    const uint8_t *p1, *s1, *p3, *s3; /* p3, s3: the up rows of a fused SiTU, else NULL */
    int cols, ldx, ldy, T;
    const float *X;
    const struct k3_q8 *xq;
    float *Y;
    float beta_gate, beta_up;
};

static void mxfp4_chunk(void *arg, int r0, int nrows)
{
    const struct mxfp4_job *j = arg;
    size_t prow = (size_t)j->cols / 2, srow = (size_t)j->cols / K3_MXFP4_GROUP;
    if (j->rows_q8)
        j->rows_q8(j->p1 + r0 * prow, j->s1 + r0 * srow, nrows, j->xq, j->Y + r0, j->ldy);
    else
        j->rows(j->p1 + r0 * prow, j->s1 + r0 * srow, nrows, j->cols, j->X, j->ldx, j->Y + r0,
                j->ldy, j->T);
}

static long mxfp4_row_bytes(int cols)
{
    return cols / 2 + cols / K3_MXFP4_GROUP;
}

/* X rewritten once on the calling thread into a claimed slot (int8 with K3_MXFP4_ACT=q8,
 * else block order), then rows over the threads. */
static void matmul(struct mxfp4_job *j, int rows, void (*chunk)(void *, int, int))
{
    void *mem = slot_claim(j->T, j->cols);
    struct k3_q8 xq;
    if (k3_mxfp4_q8_enabled() || j->q8) {
        k3_q8_quantize(&xq, mem, j->X, j->cols, j->ldx, j->T);
        j->rows_q8 = k3_kernels()->rows_mxfp4_q8;
        j->xq = &xq;
    } else {
        block_prepare(mem, j->X, j->cols, j->ldx, j->T);
        j->rows = k3_kernels()->rows_mxfp4;
        j->X = mem;
        j->ldx = (int)k3_mxfp4_block_floats(j->cols);
    }
    k3_rows_parallel(rows, (j->p3 ? 2 : 1) * mxfp4_row_bytes(j->cols),
                     (j->p3 ? 2L : 1L) * rows * j->cols * j->T, j, chunk);
    slot_release(mem);
}

void k3_matmul_mxfp4_q8(const uint8_t *packed, const uint8_t *scales, int rows, int cols,
                        const float *X, int ldx, float *Y, int ldy, int T)
{
    struct mxfp4_job j = {.q8 = true, .p1 = packed, .s1 = scales, .cols = cols, .ldx = ldx,
                          .ldy = ldy, .T = T, .X = X, .Y = Y};
    matmul(&j, rows, mxfp4_chunk);
}

void k3_matmul_mxfp4(const uint8_t *packed, const uint8_t *scales, int rows, int cols,
                     const float *X, int ldx, float *Y, int ldy, int T)
{
    struct mxfp4_job j = {.p1 = packed, .s1 = scales, .cols = cols, .ldx = ldx, .ldy = ldy,
                          .T = T, .X = X, .Y = Y};
    matmul(&j, rows, mxfp4_chunk);
}

static void mxfp4_gate_up(const void *arg, int b, int nb, int t0, int nt, float *g, float *u,
                          int ld)
{
    const struct mxfp4_job *j = arg;
    size_t prow = (size_t)j->cols / 2, srow = (size_t)j->cols / K3_MXFP4_GROUP;
    if (j->rows_q8) {
        struct k3_q8 xt = *j->xq; /* tokens t0 .. t0+nt-1 */
        xt.T = nt;
        xt.q += (size_t)t0 * xt.pairs * 64;
        xt.dh += (size_t)t0 * xt.pairs * 2;
        xt.bias += (size_t)t0 * xt.pairs * 16;
        j->rows_q8(j->p1 + b * prow, j->s1 + b * srow, nb, &xt, g, ld);
        j->rows_q8(j->p3 + b * prow, j->s3 + b * srow, nb, &xt, u, ld);
    } else {
        const float *X = j->X + (size_t)t0 * j->ldx;
        j->rows(j->p1 + b * prow, j->s1 + b * srow, nb, j->cols, X, j->ldx, g, ld, nt);
        j->rows(j->p3 + b * prow, j->s3 + b * srow, nb, j->cols, X, j->ldx, u, ld, nt);
    }
}

static void mxfp4_situ_chunk(void *arg, int r0, int nrows)
{
    const struct mxfp4_job *j = arg;
    k3_situ_rows(j, mxfp4_gate_up, r0, nrows, j->T, j->Y, j->ldy, j->beta_gate, j->beta_up);
}

void k3_matmul_mxfp4_situ(const uint8_t *packed1, const uint8_t *scales1, const uint8_t *packed3,
                          const uint8_t *scales3, int rows, int cols, const float *X, int ldx,
                          float *Y, int ldy, int T, float beta_gate, float beta_up)
{
    struct mxfp4_job j = {.p1 = packed1, .s1 = scales1, .p3 = packed3, .s3 = scales3,
                          .cols = cols, .ldx = ldx, .ldy = ldy, .T = T, .X = X, .Y = Y,
                          .beta_gate = beta_gate, .beta_up = beta_up};
    matmul(&j, rows, mxfp4_situ_chunk);
}

/* ---- int8 activations (mxfp4.h) ----------------------------------------------------- */

/* 2·E2M1 by nibble: the weights of the int8 path, exact integers. */
static const int8_t e2m1_twice[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

size_t k3_q8_bytes(int n, int T)
{
    size_t pairs = (size_t)(n / K3_MXFP4_GROUP + 1) / 2;
    return align64((size_t)T * pairs * 64) + align64((size_t)T * pairs * 2 * sizeof(float)) +
           align64((size_t)T * pairs * 16 * sizeof(int32_t));
}

/* Position in a pair's 64 bytes of element e (< 32) of its group h (0 or 1): 16-byte lane
 * L = 2h + (e & 1), index e / 2 inside it. */
static int q8_pos(int h, int e)
{
    return 16 * (2 * h + (e & 1)) + (e >> 1);
}

/* nearbyintf(v) in round-to-nearest-even for |v| < 2^22 (here |v| <= 127): v + 1.5·2^23
 * lands where a float's step is 1, so the add rounds v to an integer, ties to even.  The
 * same integer as the libm call, which the baseline ISA cannot inline (no roundss). */
static inline float round_small(float v)
{
    const float shift = 0x1.8p23f;
    return (v + shift) - shift;
}

void k3_q8_quantize(struct k3_q8 *xq, void *mem, const float *X, int n, int ldx, int T)
{
    int groups = n / K3_MXFP4_GROUP, pairs = (groups + 1) / 2;
    uint8_t *m = mem;
    *xq = (struct k3_q8){.n = n, .T = T, .pairs = pairs};
    xq->q = (int8_t *)m;
    m += align64((size_t)T * pairs * 64);
    xq->dh = (float *)m;
    m += align64((size_t)T * pairs * 2 * sizeof(float));
    xq->bias = (int32_t *)m;
    for (int t = 0; t < T; t++) {
        const float *x = X + (size_t)t * ldx;
        int8_t *q = xq->q + (size_t)t * pairs * 64;
        float *dh = xq->dh + (size_t)t * pairs * 2;
        int32_t *bias = xq->bias + (size_t)t * pairs * 16;
        memset(q, 0, (size_t)pairs * 64);
        for (int g = 0; g < 2 * pairs; g++) {
            int8_t *qp = q + (size_t)(g / 2) * 64;
            dh[g] = 0;
            if (g >= groups)
                continue;
            const float *xg = x + (size_t)g * K3_MXFP4_GROUP;
            float amax = 0;
            int finite = 1;
            for (int e = 0; e < K3_MXFP4_GROUP; e++) {
                float a = fabsf(xg[e]);
                finite &= a <= FLT_MAX;
                amax = a > amax ? a : amax;
            }
            if (!finite) {
                dh[g] = NAN;
                continue;
            }
            if (amax == 0)
                continue;
            float id = 127.0f / amax;
            for (int e = 0; e < K3_MXFP4_GROUP; e++)
                qp[q8_pos(g % 2, e)] = (int8_t)round_small(xg[e] * id);
            dh[g] = amax / 127.0f * 0.5f;
        }
        for (int i = 0; i < pairs * 16; i++) {
            const int8_t *b = q + (size_t)i * 4;
            bias[i] = -12 * (b[0] + b[1] + b[2] + b[3]);
        }
    }
}

/* The reference: lane j of pair p sums its four products in int32, then
 * acc[j] += (float)sum · (2^(e-127) · d/2). */
static float dot_q8_scalar(const uint8_t *packed, const uint8_t *scales, const int8_t *q,
                           const float *dh, int groups)
{
    float acc[K3_LANES] = {0};
    for (int p = 0; p < (groups + 1) / 2; p++)
        for (int j = 0; j < K3_LANES; j++) {
            int L = j / 4, g = 2 * p + L / 2;
            if (g >= groups)
                continue;
            int32_t sum = 0;
            for (int k = 0; k < 4; k++) {
                int e = 2 * (4 * (j % 4) + k) + (L & 1); /* element of group g */
                int nib = (packed[16 * g + e / 2] >> (4 * (e & 1))) & 0xF;
                sum += e2m1_twice[nib] * q[64 * p + q8_pos(L / 2, e)];
            }
            acc[j] += (float)sum * (k3_e8m0_scale(scales[g]) * dh[g]);
        }
    return k3_lane_reduce(acc);
}

void k3_rows_mxfp4_q8_scalar(const uint8_t *packed, const uint8_t *scales, int nrows,
                             const struct k3_q8 *xq, float *Y, int ldy)
{
    int groups = xq->n / K3_MXFP4_GROUP;
    size_t prow = (size_t)xq->n / 2, srow = (size_t)groups;
    for (int r = 0; r < nrows; r++)
        for (int t = 0; t < xq->T; t++) {
            struct k3_q8_token x = k3_q8_token(xq, t);
            Y[(size_t)t * ldy + r] = dot_q8_scalar(packed + r * prow, scales + r * srow, x.q,
                                                   x.dh, groups);
        }
}

float k3_dot_mxfp4_q8(const uint8_t *packed, const uint8_t *scales, const struct k3_q8 *xq)
{
    struct k3_q8 one = *xq;
    one.T = 1;
    float y;
    k3_kernels()->rows_mxfp4_q8(packed, scales, 1, &one, &y, 0);
    return y;
}

static _Atomic int q8_enabled;

int k3_mxfp4_q8_enabled(void) { return atomic_load_explicit(&q8_enabled, memory_order_relaxed); }

void k3_mxfp4_set_q8(bool on) { atomic_store_explicit(&q8_enabled, on, memory_order_relaxed); }

size_t k3_mxfp4_count_nan_scales(const uint8_t *scales, size_t n)
{
    size_t count = 0;
    for (size_t i = 0; i < n; i++)
        count += scales[i] == 255;
    return count;
}
