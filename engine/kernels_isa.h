/* Kernel variants: the table each ISA fills, and the selection among them.
 *
 * Owns: the list of variants (scalar reference, AVX2, AVX-512), which one runs, and the
 * per-variant entry points the public kernels of kernels.h and mxfp4.h dispatch to.
 * Invariant: every entry of every table returns the same bytes as the scalar one for the
 * same inputs (the summation order of kernels.h and mxfp4.h; tests/unit/test_kernels*.c).
 * The SIMD files are compiled for baseline x86-64 like the rest; their functions carry a
 * target attribute, and a table is only selected when the CPU has what it needs.
 * Internal to the kernels, the tests and bench/kernels.c; the engine includes kernels.h.
 */
#ifndef K3_KERNELS_ISA_H
#define K3_KERNELS_ISA_H

#include <stdbool.h>
#include <stdint.h>

/* Rows of a row-major matrix for T tokens: Y[t*ldy + i] = W_i · X[t*ldx ...] for i < nrows,
 * where W (and scales) point at the first of the nrows rows.  One row's result never
 * depends on nrows, T or the blocking a variant uses. */
typedef void k3_rows_bf16_fn(const uint16_t *W, int nrows, int cols, const float *X, int ldx,
                             float *Y, int ldy, int T);
typedef void k3_rows_mxfp4_fn(const uint8_t *packed, const uint8_t *scales, int nrows, int cols,
                              const float *X, int ldx, float *Y, int ldy, int T);

/* SIMD mat-muls decode a weight row block once for up to this many tokens. */
#define K3_TOKEN_BLOCK 4

struct k3_kernel_ops {
    const char *name;                          /* "scalar", "avx2", "avx512", "avx512vbmi" */
    bool (*supported)(void);                            /* this CPU and OS can run it */
    float (*dot_bf16)(const uint16_t *w, const float *x, int n);
    float (*dot_f32)(const float *a, const float *b, int n);
    float (*dot_mxfp4)(const uint8_t *packed, const uint8_t *scales, const float *x, int n);
    k3_rows_bf16_fn *rows_bf16;
    k3_rows_mxfp4_fn *rows_mxfp4;
};

/* Best first; the scalar reference last (always supported). */
extern const struct k3_kernel_ops k3_kernels_avx512vbmi, k3_kernels_avx512, k3_kernels_avx2,
    k3_kernels_scalar;

/* The variant the public kernels use: K3_KERNELS (auto|scalar|avx2|avx512|avx512vbmi) at
 * the first call, else the best this CPU supports.  A requested variant the CPU lacks falls back to
 * the best supported one below it; k3_kernels_name() says which runs. */
const struct k3_kernel_ops *k3_kernels(void);
/* The table of a variant by name, or NULL when unknown. */
const struct k3_kernel_ops *k3_kernels_find(const char *name);

/* Scalar references (kernels.c, mxfp4.c): the definition of every result. */
float k3_dot_bf16_scalar(const uint16_t *w, const float *x, int n);
float k3_dot_f32_scalar(const float *a, const float *b, int n);
float k3_dot_mxfp4_scalar(const uint8_t *packed, const uint8_t *scales, const float *x, int n);
k3_rows_bf16_fn k3_rows_bf16_scalar;
k3_rows_mxfp4_fn k3_rows_mxfp4_scalar;

/* AVX2 (kernels_avx2.c, mxfp4_avx2.c) and AVX-512 (kernels_avx512.c, mxfp4_avx512.c):
 * avx512 needs F, BW and VL; avx512vbmi also VBMI (Ice Lake, Zen 4 and later). */
float k3_dot_mxfp4_avx2(const uint8_t *packed, const uint8_t *scales, const float *x, int n);
k3_rows_mxfp4_fn k3_rows_mxfp4_avx2;
float k3_dot_mxfp4_avx512(const uint8_t *packed, const uint8_t *scales, const float *x, int n);
k3_rows_mxfp4_fn k3_rows_mxfp4_avx512;
float k3_dot_mxfp4_avx512vbmi(const uint8_t *packed, const uint8_t *scales, const float *x, int n);
k3_rows_mxfp4_fn k3_rows_mxfp4_avx512vbmi;

/* Splits rows over the OpenMP threads (each row is one thread's, so the result is the same
 * at any thread count) and calls fn(arg, first row, row count) once per thread; on the
 * calling thread alone when work (multiply-adds) is small or inside a parallel region.
 * row_bytes (weight bytes per row) is a hint for the split. */
void k3_rows_parallel(int rows, long row_bytes, long work, void *arg,
                      void (*fn)(void *arg, int r0, int nrows));

#endif
