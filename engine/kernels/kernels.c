/* bf16 and f32 kernels: the scalar references, the choice of variant, the row split over
 * threads.  The SIMD variants live in kernels_avx2.c and kernels_avx512.c. */
#include "engine/kernels/kernels.h"

#include <errno.h>
#include <omp.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include "engine/base/err.h"
#include "engine/kernels/kernels_isa.h"
#include "numa/teams.h"

/* ---- scalar references -------------------------------------------------------------- */

float k3_dot_bf16_scalar(const uint16_t *w, const float *x, int n)
{
    float acc[K3_LANES] = {0};
    for (int i = 0; i < n; i++)
        acc[i % K3_LANES] = fmaf(k3_bf16_to_f32(w[i]), x[i], acc[i % K3_LANES]);
    return k3_lane_reduce(acc);
}

float k3_dot_f32_scalar(const float *a, const float *b, int n)
{
    float acc[K3_LANES] = {0};
    for (int i = 0; i < n; i++)
        acc[i % K3_LANES] += a[i] * b[i];
    return k3_lane_reduce(acc);
}

void k3_rows_bf16_scalar(const uint16_t *W, int nrows, int cols, const float *X, int ldx, float *Y,
                         int ldy, int T)
{
    for (int r = 0; r < nrows; r++)
        for (int t = 0; t < T; t++)
            Y[(size_t)t * ldy + r] =
                k3_dot_bf16_scalar(W + (size_t)r * cols, X + (size_t)t * ldx, cols);
}

void k3_situ_scalar(float *y, const float *g, const float *u, int n, float beta_gate,
                    float beta_up)
{
    for (int i = 0; i < n; i++)
        y[i] = k3_situ(g[i], u[i], beta_gate, beta_up);
}

void k3_axpy_f32_scalar(float *y, float a, const float *x, int n)
{
    for (int i = 0; i < n; i++)
        y[i] += a * x[i];
}

void k3_axpy_bf16_scalar(float *y, float a, const uint16_t *x, int n)
{
    for (int i = 0; i < n; i++)
        y[i] += a * k3_bf16_to_f32(x[i]);
}

static bool scalar_supported(void) { return true; }

const struct k3_kernel_ops k3_kernels_scalar = {
    .name = "scalar",
    .supported = scalar_supported,
    .dot_bf16 = k3_dot_bf16_scalar,
    .dot_f32 = k3_dot_f32_scalar,
    .rows_bf16 = k3_rows_bf16_scalar,
    .rows_mxfp4 = k3_rows_mxfp4_scalar,
    .rows_mxfp4_q8 = k3_rows_mxfp4_q8_scalar,
    .rows_q8_0 = k3_rows_q8_0_scalar,
    .situ = k3_situ_scalar,
    .axpy_f32 = k3_axpy_f32_scalar,
    .axpy_bf16 = k3_axpy_bf16_scalar,
};

/* ---- choice of variant -------------------------------------------------------------- */

static const struct k3_kernel_ops *const variants[] = {&k3_kernels_avx512vnni, &k3_kernels_avx512,
                                                       &k3_kernels_avx2, &k3_kernels_scalar};
enum { N_VARIANTS = sizeof variants / sizeof variants[0] };

static _Atomic(const struct k3_kernel_ops *) selected;

const struct k3_kernel_ops *k3_kernels_find(const char *name)
{
    for (int i = 0; i < N_VARIANTS; i++)
        if (!strcmp(name, variants[i]->name))
            return variants[i];
    return NULL;
}

/* The best supported variant at or below index first of variants[]. */
static const struct k3_kernel_ops *best_from(int first)
{
    for (int i = first; i < N_VARIANTS; i++)
        if (variants[i]->supported())
            return variants[i];
    return &k3_kernels_scalar;
}

const struct k3_kernel_ops *k3_kernels(void)
{
    const struct k3_kernel_ops *k = atomic_load_explicit(&selected, memory_order_acquire);
    if (!k) { /* racing first calls resolve to the same table */
        k = best_from(0);
        atomic_store_explicit(&selected, k, memory_order_release);
    }
    return k;
}

const char *k3_kernels_name(void) { return k3_kernels()->name; }

int k3_kernels_prefer(const char *name)
{
    for (int i = 0; i < N_VARIANTS; i++)
        if (!strcmp(name, "auto") || !strcmp(name, variants[i]->name)) {
            atomic_store_explicit(&selected, best_from(i), memory_order_release);
            return 0;
        }
    return -EINVAL;
}

int k3_kernels_select(const char *name)
{
    const struct k3_kernel_ops *k = strcmp(name, "auto") ? k3_kernels_find(name) : best_from(0);
    if (!k)
        return -EINVAL;
    if (!k->supported())
        return -ENOTSUP;
    atomic_store_explicit(&selected, k, memory_order_release);
    return 0;
}

/* ---- rows over threads -------------------------------------------------------------- */

/* Below this many multiply-adds a mat-mul stays on the calling thread. */
#define K3_PARALLEL_MIN_WORK 32768

/* Each thread takes one contiguous range of rows, as numa/plan.h rule 7 cuts them (the
 * stream places resident trunk rows on the node of the team computing them by that rule).
 * The weights stream through each core in order, which the prefetchers like (faster than
 * dynamic chunks: bench/results/kernels-choices.md, "One contiguous row range").  Which
 * thread computes a row never changes its bytes. */
void k3_rows_parallel(int rows, long row_bytes, long work, void *arg,
                      void (*fn)(void *arg, int r0, int nrows))
{
    (void)row_bytes;
    if (rows <= 0)
        return;
    int member, n_members;
    if (k3numa_team_self(&member, &n_members)) {
        /* Inside a team's work: its threads split the rows; all return together. */
        int r0, r1;
        k3numa_split_rows(rows, 1, member, n_members, &r0, &r1);
        if (r1 > r0)
            fn(arg, r0, r1 - r0);
        k3numa_team_barrier();
        return;
    }
    if (work <= K3_PARALLEL_MIN_WORK || omp_in_parallel() || omp_get_max_threads() == 1) {
        fn(arg, 0, rows);
        return;
    }
#pragma omp parallel
    {
        int r0, r1;
        k3numa_split_rows(rows, 1, omp_get_thread_num(), omp_get_num_threads(), &r0, &r1);
        if (r1 > r0)
            fn(arg, r0, r1 - r0);
    }
}

/* ---- public kernels ----------------------------------------------------------------- */

float k3_dot_bf16(const uint16_t *w, const float *x, int n) { return k3_kernels()->dot_bf16(w, x, n); }

float k3_dot_f32(const float *a, const float *b, int n) { return k3_kernels()->dot_f32(a, b, n); }

void k3_axpy_f32(float *y, float a, const float *x, int n) { k3_kernels()->axpy_f32(y, a, x, n); }

void k3_axpy_bf16(float *y, float a, const uint16_t *x, int n)
{
    k3_kernels()->axpy_bf16(y, a, x, n);
}

void k3_situ_n(float *y, const float *g, const float *u, int n, float beta_gate, float beta_up)
{
    k3_kernels()->situ(y, g, u, n, beta_gate, beta_up);
}

struct bf16_job {
    k3_rows_bf16_fn *rows;
    const uint16_t *W, *U; /* U: the up rows of a fused SiTU, else NULL */
    int cols, ldx, ldy, T;
    const float *X;
    float *Y;
    float beta_gate, beta_up;
};

static void bf16_chunk(void *arg, int r0, int nrows)
{
    const struct bf16_job *j = arg;
    j->rows(j->W + (size_t)r0 * j->cols, nrows, j->cols, j->X, j->ldx, j->Y + r0, j->ldy, j->T);
}

void k3_matmul_bf16(const uint16_t *W, int rows, int cols, const float *X, int ldx, float *Y,
                    int ldy, int T)
{
    struct bf16_job j = {k3_kernels()->rows_bf16, W, NULL, cols, ldx, ldy, T, X, Y, 0, 0};
    k3_rows_parallel(rows, 2L * cols, (long)rows * cols * T, &j, bf16_chunk);
}

/* Blocks of SITU_ROWS rows × SITU_TOKENS tokens: all the gate rows of a block, then all
 * its up rows (two streams switching every few hundred KB, not every few KB, which costs
 * the prefetchers less).  SITU_TOKENS is a whole number of the AVX-512 tiles of tokens
 * (bf16's 6, MXFP4's 8), so no block leaves a short tile, and a block's rows serve 24
 * tokens before the next block's stream in (bench/results/kernels-choices.md, "bf16 with
 * FMA"). */
#define SITU_ROWS 256
#define SITU_TOKENS 24

void k3_situ_rows(const void *job, k3_gate_up_fn *gate_up, int r0, int nrows, int T, float *Y,
                  int ldy, float beta_gate, float beta_up)
{
    float g[SITU_TOKENS * SITU_ROWS], u[SITU_TOKENS * SITU_ROWS];
    for (int b = r0; b < r0 + nrows; b += SITU_ROWS) {
        int nb = r0 + nrows - b < SITU_ROWS ? r0 + nrows - b : SITU_ROWS;
        for (int t0 = 0; t0 < T; t0 += SITU_TOKENS) {
            int nt = T - t0 < SITU_TOKENS ? T - t0 : SITU_TOKENS;
            gate_up(job, b, nb, t0, nt, g, u, SITU_ROWS);
            for (int t = 0; t < nt; t++)
                k3_situ_n(Y + (size_t)(t0 + t) * ldy + b, g + t * SITU_ROWS, u + t * SITU_ROWS,
                          nb, beta_gate, beta_up);
        }
    }
}

static void bf16_gate_up(const void *arg, int b, int nb, int t0, int nt, float *g, float *u,
                         int ld)
{
    const struct bf16_job *j = arg;
    const float *X = j->X + (size_t)t0 * j->ldx;
    j->rows(j->W + (size_t)b * j->cols, nb, j->cols, X, j->ldx, g, ld, nt);
    j->rows(j->U + (size_t)b * j->cols, nb, j->cols, X, j->ldx, u, ld, nt);
}

static void bf16_situ_chunk(void *arg, int r0, int nrows)
{
    const struct bf16_job *j = arg;
    k3_situ_rows(j, bf16_gate_up, r0, nrows, j->T, j->Y, j->ldy, j->beta_gate, j->beta_up);
}

void k3_matmul_bf16_situ(const uint16_t *G, const uint16_t *U, int rows, int cols,
                         const float *X, int ldx, float *Y, int ldy, int T, float beta_gate,
                         float beta_up)
{
    struct bf16_job j = {k3_kernels()->rows_bf16, G, U, cols, ldx, ldy, T, X, Y, beta_gate, beta_up};
    k3_rows_parallel(rows, 4L * cols, 2L * rows * cols * T, &j, bf16_situ_chunk);
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
