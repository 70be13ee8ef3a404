/* Shared by tests/unit/test_kernels_*.c: one SIMD variant against the scalar reference,
 * bytewise, and bytewise across thread counts.  The scalar reference is called directly
 * (k3_*_scalar); the variant through the public kernels after k3_kernels_select. */
#ifndef K3_TEST_KERNELS_H
#define K3_TEST_KERNELS_H

#include <errno.h>
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/kernels/kernels.h"
#include "engine/kernels/kernels_isa.h"
#include "engine/kernels/mxfp4.h"
#include "engine/base/rng.h"
#include "tests/check.h"

/* The MXFP4 mat-mul by the scalar reference, row by row over X in natural order. */
static void reference_mxfp4(const uint8_t *p, const uint8_t *s, int rows, int cols, const float *X,
                            int ldx, float *Y, int ldy, int T)
{
    for (int t = 0; t < T; t++)
        for (int i = 0; i < rows; i++)
            Y[(size_t)t * ldy + i] = k3_dot_mxfp4_scalar(p + (size_t)i * cols / 2, s + (size_t)i * cols / 32,
                                                         X + (size_t)t * ldx, cols);
}

/* Index of the first float whose bytes differ, or -1. */
static long first_diff(const float *a, const float *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (k3_f32_bits(a[i]) != k3_f32_bits(b[i]))
            return (long)i;
    return -1;
}

/* Activations: mostly N(0, 1), with zeros of both signs, subnormals and big values. */
static void fill_x(float *x, size_t n, struct k3_rng *r, int specials)
{
    for (size_t i = 0; i < n; i++) {
        x[i] = (float)k3_rng_normal(r);
        if (!specials)
            continue;
        switch (k3_rng_next(r) % 64) {
        case 0: x[i] = 0.0f; break;
        case 1: x[i] = -0.0f; break;
        case 2: x[i] = k3_bits_f32(0x00000001u + (uint32_t)(k3_rng_next(r) % 0x7fffffu)); break;
        case 3: x[i] = 3e37f; break;
        case 4: x[i] = -1e-38f; break;
        default: break;
        }
    }
}

/* bf16 weights: N(0, 0.05), with signed zeros, bf16 subnormals, ±inf now and then. */
static void fill_bf16(uint16_t *w, size_t n, struct k3_rng *r, int specials)
{
    for (size_t i = 0; i < n; i++) {
        w[i] = k3_f32_to_bf16((float)(0.05 * k3_rng_normal(r)));
        if (!specials)
            continue;
        switch (k3_rng_next(r) % 128) {
        case 0: w[i] = 0x0000; break;
        case 1: w[i] = 0x8000; break;
        case 2: w[i] = (uint16_t)(0x0001 + k3_rng_next(r) % 0x7f); break;  /* subnormal */
        case 3: w[i] = 0x7f00; break;                                      /* 2^127 */
        case 4: w[i] = k3_rng_next(r) % 2 ? 0x7f80 : 0xff80; break;        /* ±inf */
        default: break;
        }
    }
}

static const uint8_t edge_codes[] = {0, 1, 126, 127, 128, 254, 255};

/* MXFP4 rows: random nibbles with extra negative zeros (nibble 8); scales in 115..130 with
 * the edge codes mixed in when edges. */
static void fill_mxfp4(uint8_t *p, size_t np, uint8_t *s, size_t ns, struct k3_rng *r, int edges)
{
    for (size_t i = 0; i < np; i++) {
        p[i] = (uint8_t)k3_rng_next(r);
        switch (k3_rng_next(r) % 16) {
        case 0: p[i] = 0x88; break;
        case 1: p[i] = (uint8_t)((p[i] & 0xF0) | 0x08); break;
        case 2: p[i] = (uint8_t)((p[i] & 0x0F) | 0x80); break;
        default: break;
        }
    }
    for (size_t i = 0; i < ns; i++) {
        s[i] = (uint8_t)(115 + k3_rng_next(r) % 16);
        if (edges && k3_rng_next(r) % 4 == 0)
            s[i] = edge_codes[k3_rng_next(r) % sizeof edge_codes];
    }
}

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    REQUIRE(p, "malloc %zu", n);
    return p;
}

/* The largest MXFP4 call of these tests: tokens, activations. */
enum { MAX_TOKENS = 64, MAX_INPUTS = 12288 };

/* Binds scratch for MXFP4 calls of up to T tokens of n activations from callers threads at
 * once (mxfp4.h) in place of the one bound before, until the next call. */
static void *bind_mxfp4_scratch(int T, int n, int callers)
{
    static void *mem;
    k3_mxfp4_scratch_unbind(mem);
    free(mem);
    size_t bytes = k3_mxfp4_scratch_bytes(T, n, callers);
    mem = aligned_alloc(64, (bytes + 63) / 64 * 64);
    REQUIRE(mem, "%zu bytes of MXFP4 scratch", bytes);
    k3_mxfp4_scratch_bind(mem, T, n, callers);
    return mem;
}

/* ---- dot products ------------------------------------------------------------------- */

static const int dot_lengths[] = {0, 1, 7, 15, 16, 17, 31, 32, 33, 48, 100, 1000, 1024, 3072, 3584, 7168, 12288};
static const int mxfp4_lengths[] = {0, 32, 64, 96, 100, 512, 704, 1024, 2080, 3072, 3584, 7168, 12288};
#define N_OF(a) (int)(sizeof(a) / sizeof((a)[0]))

static void test_dots(const struct k3_kernel_ops *k, uint64_t seed)
{
    struct k3_rng r;
    k3_rng_seed(&r, seed);
    int max_n = 12288;
    uint16_t *w = xmalloc(sizeof *w * max_n);
    float *x = xmalloc(sizeof *x * max_n), *x2 = xmalloc(sizeof *x2 * max_n);
    uint8_t *p = xmalloc((size_t)max_n / 2), *s = xmalloc((size_t)max_n / 32);
    int checked = 0, failures = check_failures;
    for (int rep = 0; rep < 8; rep++) {
        int specials = rep >= 2;
        for (int li = 0; li < N_OF(dot_lengths); li++) {
            int n = dot_lengths[li];
            /* Offsets 0..3 elements: the variants use unaligned loads. */
            int off = rep % 4, m = n - off > 0 ? n - off : n;
            fill_bf16(w, (size_t)max_n, &r, specials);
            fill_x(x, (size_t)max_n, &r, specials);
            fill_x(x2, (size_t)max_n, &r, specials);
            float want = k3_dot_bf16_scalar(w + off, x + off, m), got = k3_dot_bf16(w + off, x + off, m);
            CHECK(k3_f32_bits(want) == k3_f32_bits(got), "%s dot_bf16 n=%d rep %d: %a (0x%08x) vs reference %a (0x%08x)",
                  k->name, m, rep, got, k3_f32_bits(got), want, k3_f32_bits(want));
            want = k3_dot_f32_scalar(x + off, x2 + off, m);
            got = k3_dot_f32(x + off, x2 + off, m);
            CHECK(k3_f32_bits(want) == k3_f32_bits(got), "%s dot_f32 n=%d rep %d: %a vs reference %a", k->name,
                  m, rep, got, want);
            checked += 2;
        }
        for (int li = 0; li < N_OF(mxfp4_lengths); li++) {
            int n = mxfp4_lengths[li];
            fill_mxfp4(p, (size_t)max_n / 2, s, (size_t)max_n / 32, &r, rep >= 1);
            fill_x(x, (size_t)max_n, &r, specials);
            float want = k3_dot_mxfp4_scalar(p, s, x, n), got = k3_dot_mxfp4(p, s, x, n);
            CHECK(k3_f32_bits(want) == k3_f32_bits(got), "%s dot_mxfp4 n=%d rep %d: %a (0x%08x) vs reference %a (0x%08x)",
                  k->name, n, rep, got, k3_f32_bits(got), want, k3_f32_bits(want));
            checked++;
        }
    }
    /* One scale code at a time over a whole row: each edge code alone. */
    for (int c = 0; c < (int)sizeof edge_codes; c++) {
        int n = 3584;
        fill_mxfp4(p, (size_t)n / 2, s, (size_t)n / 32, &r, 0);
        memset(s, edge_codes[c], (size_t)n / 32);
        fill_x(x, (size_t)n, &r, 0);
        float want = k3_dot_mxfp4_scalar(p, s, x, n), got = k3_dot_mxfp4(p, s, x, n);
        CHECK(k3_f32_bits(want) == k3_f32_bits(got), "%s dot_mxfp4 all scales %d: %a vs reference %a", k->name,
              edge_codes[c], got, want);
        checked++;
    }
    /* A NaN input carries its payload through to the result in both. */
    fill_bf16(w, 1000, &r, 0);
    fill_x(x, 1000, &r, 0);
    x[123] = k3_bits_f32(0x7fc01234u);
    float want = k3_dot_bf16_scalar(w, x, 1000), got = k3_dot_bf16(w, x, 1000);
    CHECK(k3_f32_bits(want) == k3_f32_bits(got), "%s dot_bf16 with a NaN input: 0x%08x vs 0x%08x", k->name,
          k3_f32_bits(got), k3_f32_bits(want));
    if (check_failures == failures)
        printf("%s: %d dot products bytewise equal to the scalar reference\n", k->name, checked);
    free(w), free(x), free(x2), free(p), free(s);
}

/* ---- mat-muls ----------------------------------------------------------------------- */

struct shape {
    int rows, cols, T;
};

static const struct shape mm_shapes[] = {
    {1, 16, 1},    {3, 17, 2},     {5, 100, 3},   {64, 32, 4},    {37, 96, 5},
    {200, 256, 7}, {129, 1024, 8}, {64, 3584, 9}, {1000, 512, 1}, {300, 3072, 33},
    {96, 7168, 1}, {40, 12288, 2}, {7, 5000, 1},  {6, 4100, 2},   {11, 2056, 3},
    {9, 704, 3}, /* MXFP4: 22 groups, the last block of the second 16 holds 2 */
};
/* Rows advance together past K3_X_L1_BYTES of activations: 5000, 4100 and 2056 columns
 * (with tails of 8, 4 and 8) leave remainders of 3, 2 and 3 rows. */

/* The variant's mat-mul (public entry, threads 1 and 2) equals the scalar rows bytewise. */
static void test_matmuls(const struct k3_kernel_ops *k, uint64_t seed)
{
    struct k3_rng r;
    k3_rng_seed(&r, seed);
    int failures = check_failures;
    for (int si = 0; si < N_OF(mm_shapes); si++) {
        struct shape sh = mm_shapes[si];
        int ldx = sh.cols + 3, ldy = sh.rows + 5; /* strides wider than the rows */
        size_t nx = (size_t)sh.T * ldx, ny = (size_t)sh.T * ldy;
        uint16_t *W = xmalloc(sizeof *W * sh.rows * sh.cols), *U = xmalloc(sizeof *U * sh.rows * sh.cols);
        float *X = xmalloc(sizeof *X * nx), *want = xmalloc(sizeof *want * ny);
        float *y1 = xmalloc(sizeof *y1 * ny), *y2 = xmalloc(sizeof *y2 * ny), *u = xmalloc(sizeof *u * ny);
        fill_bf16(W, (size_t)sh.rows * sh.cols, &r, si % 2);
        fill_bf16(U, (size_t)sh.rows * sh.cols, &r, 0);
        fill_x(X, nx, &r, si % 2);
        /* Untouched gaps keep their bytes in all three. */
        for (size_t i = 0; i < ny; i++)
            want[i] = y1[i] = y2[i] = -7.0f;
        k3_rows_bf16_scalar(W, sh.rows, sh.cols, X, ldx, want, ldy, sh.T);
        omp_set_num_threads(1);
        k3_matmul_bf16(W, sh.rows, sh.cols, X, ldx, y1, ldy, sh.T);
        omp_set_num_threads(2);
        k3_matmul_bf16(W, sh.rows, sh.cols, X, ldx, y2, ldy, sh.T);
        long d = first_diff(want, y1, ny);
        CHECK(d < 0, "%s matmul_bf16 %dx%d T=%d, 1 thread: [%ld] %a vs reference %a", k->name, sh.rows,
              sh.cols, sh.T, d, d < 0 ? 0 : y1[d], d < 0 ? 0 : want[d]);
        d = first_diff(y1, y2, ny);
        CHECK(d < 0, "%s matmul_bf16 %dx%d T=%d: 2 threads differ from 1 at [%ld]", k->name, sh.rows,
              sh.cols, sh.T, d);

        /* Fused SiTU: the same bytes as the two mat-muls and k3_situ. */
        k3_rows_bf16_scalar(U, sh.rows, sh.cols, X, ldx, u, ldy, sh.T);
        for (int t = 0; t < sh.T; t++)
            for (int i = 0; i < sh.rows; i++) {
                size_t at = (size_t)t * ldy + i;
                want[at] = k3_situ(want[at], u[at], 4.0f, 25.0f);
            }
        for (int threads = 1; threads <= 2; threads++) {
            omp_set_num_threads(threads);
            k3_matmul_bf16_situ(W, U, sh.rows, sh.cols, X, ldx, y1, ldy, sh.T, 4.0f, 25.0f);
            d = first_diff(want, y1, ny);
            CHECK(d < 0, "%s matmul_bf16_situ %dx%d T=%d, %d threads: [%ld] %a vs %a", k->name,
                  sh.rows, sh.cols, sh.T, threads, d, d < 0 ? 0 : y1[d], d < 0 ? 0 : want[d]);
        }
        free(W), free(U), free(X), free(want), free(y1), free(y2), free(u);
    }

    for (int si = 0; si < N_OF(mm_shapes); si++) {
        struct shape sh = mm_shapes[si];
        if (sh.cols % K3_MXFP4_GROUP)
            continue;
        int ldx = sh.cols + 3, ldy = sh.rows + 5;
        size_t np = (size_t)sh.rows * sh.cols / 2, ns = (size_t)sh.rows * sh.cols / 32;
        size_t nx = (size_t)sh.T * ldx, ny = (size_t)sh.T * ldy;
        uint8_t *p1 = xmalloc(np), *s1 = xmalloc(ns), *p3 = xmalloc(np), *s3 = xmalloc(ns);
        float *X = xmalloc(sizeof *X * nx), *want = xmalloc(sizeof *want * ny);
        float *y1 = xmalloc(sizeof *y1 * ny), *y2 = xmalloc(sizeof *y2 * ny), *u = xmalloc(sizeof *u * ny);
        fill_mxfp4(p1, np, s1, ns, &r, si % 2);
        fill_mxfp4(p3, np, s3, ns, &r, 0);
        fill_x(X, nx, &r, si % 2);
        for (size_t i = 0; i < ny; i++)
            want[i] = y1[i] = y2[i] = -7.0f;
        reference_mxfp4(p1, s1, sh.rows, sh.cols, X, ldx, want, ldy, sh.T);
        omp_set_num_threads(1);
        k3_matmul_mxfp4(p1, s1, sh.rows, sh.cols, X, ldx, y1, ldy, sh.T);
        omp_set_num_threads(2);
        k3_matmul_mxfp4(p1, s1, sh.rows, sh.cols, X, ldx, y2, ldy, sh.T);
        long d = first_diff(want, y1, ny);
        CHECK(d < 0, "%s matmul_mxfp4 %dx%d T=%d, 1 thread: [%ld] %a vs reference %a", k->name,
              sh.rows, sh.cols, sh.T, d, d < 0 ? 0 : y1[d], d < 0 ? 0 : want[d]);
        d = first_diff(y1, y2, ny);
        CHECK(d < 0, "%s matmul_mxfp4 %dx%d T=%d: 2 threads differ from 1 at [%ld]", k->name,
              sh.rows, sh.cols, sh.T, d);

        reference_mxfp4(p3, s3, sh.rows, sh.cols, X, ldx, u, ldy, sh.T);
        for (int t = 0; t < sh.T; t++)
            for (int i = 0; i < sh.rows; i++) {
                size_t at = (size_t)t * ldy + i;
                want[at] = k3_situ(want[at], u[at], 4.0f, 25.0f);
            }
        for (int threads = 1; threads <= 2; threads++) {
            omp_set_num_threads(threads);
            k3_matmul_mxfp4_situ(p1, s1, p3, s3, sh.rows, sh.cols, X, ldx, y1, ldy, sh.T, 4.0f, 25.0f);
            d = first_diff(want, y1, ny);
            CHECK(d < 0, "%s matmul_mxfp4_situ %dx%d T=%d, %d threads: [%ld] %a vs %a", k->name,
                  sh.rows, sh.cols, sh.T, threads, d, d < 0 ? 0 : y1[d], d < 0 ? 0 : want[d]);
        }
        free(p1), free(s1), free(p3), free(s3), free(X), free(want), free(y1), free(y2), free(u);
    }
    if (check_failures == failures)
        printf("%s: mat-muls and fused SiTU bytewise equal to the scalar reference at 1 and 2 threads\n",
           k->name);
}

/* ---- tiles of tokens ----------------------------------------------------------------- */

/* Token counts that leave every remainder of the kernels' token tiles (1 to 7 past a tile
 * of 4 or 8), one whole tile and several, and the shapes they run at: row counts that
 * leave remainders of the row blocks and panels, row lengths whose last span of groups or
 * last block is partial (bf16 alone: a tail past the last 16). */
static const int tile_tokens[] = {1, 3, 4, 7, 16, 33, 64};
static const struct shape tile_shapes[] = {{37, 1056, 0}, {70, 3584, 0}, {9, 704, 0}, {13, 1000, 0}};

/* ask: "bf16", "bf16_situ", "mxfp4" or "mxfp4_situ".  want: the reference (Y, then SiTU with
 * u when fused); the public entry at 1 and 2 threads must give its bytes. */
static void check_tile(const struct k3_kernel_ops *k, const char *ask, struct shape sh,
                       const void *w, const void *ws, const void *u, const void *us,
                       const float *X, int ldx, const float *want, int ldy)
{
    size_t ny = (size_t)sh.T * ldy;
    float *got = xmalloc(sizeof *got * ny);
    for (int threads = 1; threads <= 2; threads++) {
        omp_set_num_threads(threads);
        for (size_t i = 0; i < ny; i++)
            got[i] = -7.0f; /* the gaps between rows keep their bytes */
        if (!strcmp(ask, "bf16"))
            k3_matmul_bf16(w, sh.rows, sh.cols, X, ldx, got, ldy, sh.T);
        else if (!strcmp(ask, "bf16_situ"))
            k3_matmul_bf16_situ(w, u, sh.rows, sh.cols, X, ldx, got, ldy, sh.T, 4.0f, 25.0f);
        else if (!strcmp(ask, "mxfp4"))
            k3_matmul_mxfp4(w, ws, sh.rows, sh.cols, X, ldx, got, ldy, sh.T);
        else
            k3_matmul_mxfp4_situ(w, ws, u, us, sh.rows, sh.cols, X, ldx, got, ldy, sh.T, 4.0f,
                                 25.0f);
        long d = first_diff(want, got, ny);
        CHECK(d < 0, "%s %s %dx%d T=%d, %d thread(s): [%ld] (token %ld, row %ld) %a vs reference %a",
              k->name, ask, sh.rows, sh.cols, sh.T, threads, d, d < 0 ? 0 : d / ldy,
              d < 0 ? 0 : d % ldy, d < 0 ? 0 : got[d], d < 0 ? 0 : want[d]);
    }
    free(got);
}

/* The mat-muls at every token count of tile_tokens: the bytes of the reference, which
 * takes the tokens one at a time, whatever tiles of tokens and rows the variant uses. */
static void test_tiles(const struct k3_kernel_ops *k, uint64_t seed)
{
    struct k3_rng r;
    k3_rng_seed(&r, seed);
    int failures = check_failures;
    for (int si = 0; si < N_OF(tile_shapes); si++)
        for (int ti = 0; ti < N_OF(tile_tokens); ti++) {
            struct shape sh = tile_shapes[si];
            sh.T = tile_tokens[ti];
            int ldx = sh.cols + 1, ldy = sh.rows + 3;
            size_t nw = (size_t)sh.rows * sh.cols, nx = (size_t)sh.T * ldx, ny = (size_t)sh.T * ldy;
            uint16_t *W = xmalloc(sizeof *W * nw), *U = xmalloc(sizeof *U * nw);
            float *X = xmalloc(sizeof *X * nx), *want = xmalloc(sizeof *want * ny);
            float *u = xmalloc(sizeof *u * ny);
            fill_bf16(W, nw, &r, 1);
            fill_bf16(U, nw, &r, 0);
            fill_x(X, nx, &r, ti % 2);
            for (size_t i = 0; i < ny; i++)
                want[i] = u[i] = -7.0f;
            k3_rows_bf16_scalar(W, sh.rows, sh.cols, X, ldx, want, ldy, sh.T);
            check_tile(k, "bf16", sh, W, NULL, NULL, NULL, X, ldx, want, ldy);
            k3_rows_bf16_scalar(U, sh.rows, sh.cols, X, ldx, u, ldy, sh.T);
            for (int t = 0; t < sh.T; t++)
                for (int i = 0; i < sh.rows; i++) {
                    size_t at = (size_t)t * ldy + i;
                    want[at] = k3_situ(want[at], u[at], 4.0f, 25.0f);
                }
            check_tile(k, "bf16_situ", sh, W, NULL, U, NULL, X, ldx, want, ldy);
            free(W), free(U);
            if (sh.cols % K3_MXFP4_GROUP) { /* bf16 only: the format needs whole groups */
                free(X), free(want), free(u);
                continue;
            }

            size_t np = nw / 2, ns = nw / 32;
            uint8_t *p1 = xmalloc(np), *s1 = xmalloc(ns), *p3 = xmalloc(np), *s3 = xmalloc(ns);
            fill_mxfp4(p1, np, s1, ns, &r, ti % 2);
            fill_mxfp4(p3, np, s3, ns, &r, 0);
            for (size_t i = 0; i < ny; i++)
                want[i] = u[i] = -7.0f;
            reference_mxfp4(p1, s1, sh.rows, sh.cols, X, ldx, want, ldy, sh.T);
            check_tile(k, "mxfp4", sh, p1, s1, NULL, NULL, X, ldx, want, ldy);
            reference_mxfp4(p3, s3, sh.rows, sh.cols, X, ldx, u, ldy, sh.T);
            for (int t = 0; t < sh.T; t++)
                for (int i = 0; i < sh.rows; i++) {
                    size_t at = (size_t)t * ldy + i;
                    want[at] = k3_situ(want[at], u[at], 4.0f, 25.0f);
                }
            check_tile(k, "mxfp4_situ", sh, p1, s1, p3, s3, X, ldx, want, ldy);
            free(p1), free(s1), free(p3), free(s3), free(X), free(want), free(u);
        }
    if (check_failures == failures)
        printf("%s: mat-muls at T = 1, 3, 4, 7, 16, 33, 64 bytewise equal to the scalar "
               "reference at 1 and 2 threads\n", k->name);
}

/* bf16 at every token count from 1 to 40: every remainder of its AVX-512 register tile
 * (4 rows × 6 tokens) and of the rows taken one at a time, whole chunks of tokens and a
 * partial one (12300 columns: chunks of 6 tokens, K3_X_L2_BYTES), odd row counts (7, 5,
 * 3 past the blocks of 4) and rows with a tail past the last 16 columns (1000, 12300, 13,
 * 4100). */
static const struct shape bf16_sweep_shapes[] = {{7, 1000, 0}, {5, 12300, 0}, {6, 13, 0}, {11, 4100, 0}};
enum { BF16_SWEEP_TOKENS = 40 };

static void test_bf16_tokens(const struct k3_kernel_ops *k, uint64_t seed)
{
    struct k3_rng r;
    k3_rng_seed(&r, seed);
    int failures = check_failures;
    for (int si = 0; si < N_OF(bf16_sweep_shapes); si++)
        for (int T = 1; T <= BF16_SWEEP_TOKENS; T++) {
            struct shape sh = bf16_sweep_shapes[si];
            sh.T = T;
            int ldx = sh.cols + 2, ldy = sh.rows + 1;
            size_t nw = (size_t)sh.rows * sh.cols, nx = (size_t)T * ldx, ny = (size_t)T * ldy;
            uint16_t *W = xmalloc(sizeof *W * nw);
            float *X = xmalloc(sizeof *X * nx), *want = xmalloc(sizeof *want * ny);
            fill_bf16(W, nw, &r, T % 2);
            fill_x(X, nx, &r, T % 3 == 0);
            for (size_t i = 0; i < ny; i++)
                want[i] = -7.0f;
            k3_rows_bf16_scalar(W, sh.rows, sh.cols, X, ldx, want, ldy, T);
            check_tile(k, "bf16", sh, W, NULL, NULL, NULL, X, ldx, want, ldy);
            free(W), free(X), free(want);
        }
    if (check_failures == failures)
        printf("%s: bf16 mat-muls at T = 1..%d bytewise equal to the scalar reference at 1 and "
               "2 threads\n", k->name, BF16_SWEEP_TOKENS);
}

/* Inputs for SiTU: a sweep through both polynomial/exp branch points, the clamps of the
 * exponential, zeros, subnormals, infinities and NaNs of both signs, then random ones. */
static int situ_inputs(float *g, float *u, int max, struct k3_rng *r)
{
    static const float specials[] = {0.0f, -0.0f, 0.625f, -0.625f, 0.62500006f, 1e-40f, -1e-40f,
                                     44.0f, -44.0f, 88.0f, -88.0f, 1e30f, -1e30f};
    int n = 0;
    for (size_t i = 0; i < sizeof specials / sizeof specials[0]; i++)
        for (size_t j = 0; j < sizeof specials / sizeof specials[0]; j++, n++)
            g[n] = specials[i], u[n] = specials[j];
    g[n] = INFINITY, u[n++] = -INFINITY;
    g[n] = -INFINITY, u[n++] = INFINITY;
    g[n] = NAN, u[n++] = 1.0f;
    g[n] = -NAN, u[n++] = -NAN;
    g[n] = 2.0f, u[n++] = -NAN;
    for (float v = -30.0f; v <= 30.0f && n < max; v += 0.01171875f, n++)
        g[n] = v, u[n] = -1.5f * v;
    while (n < max) {
        g[n] = (float)(4.0 * k3_rng_normal(r));
        u[n++] = (float)(8.0 * k3_rng_normal(r));
    }
    return n;
}

/* The variant's SiTU gives the scalar reference's bytes, at every length (tails). */
static void test_situ(const struct k3_kernel_ops *k, uint64_t seed)
{
    enum { N = 8192 };
    static float g[N], u[N], want[N], got[N];
    struct k3_rng r;
    k3_rng_seed(&r, seed);
    int n = situ_inputs(g, u, N, &r);
    for (int len = 0; len <= 40; len++) {
        k3_situ_scalar(want, g, u, len, 4.0f, 25.0f);
        k->situ(got, g, u, len, 4.0f, 25.0f);
        long d = first_diff(want, got, (size_t)len);
        CHECK(d < 0, "%s situ, length %d: [%ld] %a vs %a", k->name, len, d, want[d], got[d]);
    }
    k3_situ_scalar(want, g, u, n, 4.0f, 25.0f);
    k->situ(got, g, u, n, 4.0f, 25.0f);
    long d = first_diff(want, got, (size_t)n);
    CHECK(d < 0, "%s situ(%a, %a): %a, scalar %a", k->name, d >= 0 ? g[d] : 0, d >= 0 ? u[d] : 0,
          d >= 0 ? got[d] : 0, d >= 0 ? want[d] : 0);
    printf("%s: SiTU bytewise equal to the scalar reference on %d inputs\n", k->name, n);
}

/* axpy: every length 0..40 and the dot lengths, offsets 0..3, specials included. */
static void test_axpy(const struct k3_kernel_ops *k, uint64_t seed)
{
    enum { N = 12288 + 4 };
    static float x[N], y0[N], want[N], got[N];
    static uint16_t w[N];
    struct k3_rng r;
    k3_rng_seed(&r, seed);
    int checked = 0;
    for (int n = 0; n <= 40 + N_OF(dot_lengths); n++) {
        int len = n <= 40 ? n : dot_lengths[n - 41], off = n % 4;
        fill_x(x, N, &r, n % 3 == 0);
        fill_x(y0, N, &r, n % 3 == 0);
        fill_bf16(w, N, &r, n % 3 == 0);
        float a = x[N - 1];
        memcpy(want, y0, sizeof want);
        memcpy(got, y0, sizeof got);
        k3_axpy_f32_scalar(want + off, a, x + off, len);
        k->axpy_f32(got + off, a, x + off, len);
        long d = first_diff(want, got, N);
        CHECK(d < 0, "%s axpy_f32 n=%d: [%ld] %a vs reference %a", k->name, len, d, got[d], want[d]);
        memcpy(want, y0, sizeof want);
        memcpy(got, y0, sizeof got);
        k3_axpy_bf16_scalar(want + off, a, w + off, len);
        k->axpy_bf16(got + off, a, w + off, len);
        d = first_diff(want, got, N);
        CHECK(d < 0, "%s axpy_bf16 n=%d: [%ld] %a vs reference %a", k->name, len, d, got[d], want[d]);
        checked += 2;
    }
    printf("%s: %d axpy results bytewise equal to the scalar reference\n", k->name, checked);
}

/* Selects variant name and runs every comparison; 77 when the CPU lacks it. */
/* The int8-activation path (K3_MXFP4_ACT=q8): variant k's mat-muls give the bytes of
 * its scalar reference at 1 and 2 threads. */
static const int q8_lengths[] = {32, 64, 96, 1056, 3072, 3584, 7168};

static void test_q8_against_reference(const struct k3_kernel_ops *k, uint64_t seed)
{
    struct k3_rng r;
    k3_rng_seed(&r, seed);
    int failures = check_failures, checked = 0;
    for (int li = 0; li < N_OF(q8_lengths); li++)
        for (int T = 1; T <= 9; T += 4) {
            int cols = q8_lengths[li], rows = 37, ldy = rows + 3;
            size_t np = (size_t)rows * cols / 2, ns = (size_t)rows * cols / 32;
            uint8_t *p = xmalloc(np), *s = xmalloc(ns);
            float *X = xmalloc(sizeof *X * (size_t)T * cols), *want = xmalloc(sizeof *want * (size_t)T * ldy);
            float *got = xmalloc(sizeof *got * (size_t)T * ldy);
            fill_mxfp4(p, np, s, ns, &r, li % 2);
            fill_x(X, (size_t)T * cols, &r, li % 3 == 1);
            void *mem = xmalloc(k3_q8_bytes(cols, T));
            struct k3_q8 xq;
            k3_q8_quantize(&xq, mem, X, cols, cols, T);
            for (size_t i = 0; i < (size_t)T * ldy; i++)
                want[i] = got[i] = -7.0f;
            k3_rows_mxfp4_q8_scalar(p, s, rows, &xq, want, ldy);
            for (int threads = 1; threads <= 2; threads++) {
                omp_set_num_threads(threads);
                k3_matmul_mxfp4_q8(p, s, rows, cols, X, cols, got, ldy, T);
                long d = first_diff(want, got, (size_t)T * ldy);
                CHECK(d < 0, "%s q8 %dx%d T=%d, %d threads: [%ld] %a vs reference %a", k->name, rows,
                      cols, T, threads, d, d < 0 ? 0 : got[d], d < 0 ? 0 : want[d]);
                checked++;
            }
            free(p), free(s), free(X), free(want), free(got), free(mem);
        }
    if (check_failures == failures)
        printf("%s: int8 path bytewise equal to its scalar reference (%d mat-muls, 1 and 2 "
               "threads)\n", k->name, checked);
}

static inline int run_variant_tests(const char *name)
{
    const struct k3_kernel_ops *k = k3_kernels_find(name);
    REQUIRE(k, "variant %s is not in the table", name);
    if (!k->supported())
        SKIP("this CPU lacks %s", name);
    int rc = k3_kernels_select(name);
    REQUIRE(rc == 0, "k3_kernels_select(%s) = %d", name, rc);
    REQUIRE(!strcmp(k3_kernels_name(), name), "running %s, not %s", k3_kernels_name(), name);
    bind_mxfp4_scratch(MAX_TOKENS, MAX_INPUTS, 1);
    test_dots(k, 1);
    test_matmuls(k, 2);
    test_tiles(k, 6);
    test_bf16_tokens(k, 7);
    test_situ(k, 5);
    test_axpy(k, 7);
    test_q8_against_reference(k, 9);
    return check_result();
}

#endif
