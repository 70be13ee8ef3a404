/* Q8_0 (engine/kernels/q8_0.h): the half conversion against F16C where the CPU has it;
 * the quantizer against hand-worked blocks and ggml's rounding, in place as out of place;
 * and every kernel variant this CPU runs (scalar, avx2, avx512, avx512vnni) giving the
 * scalar reference's bytes: odd row counts, 1 to 33 blocks a row, T = 1 .. 64 tokens, at 1
 * and 2 threads, the fused SiTU as two mat-muls and k3_situ. */
#include <errno.h>
#include <immintrin.h>
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/base/rng.h"
#include "engine/kernels/kernels.h"
#include "engine/kernels/kernels_isa.h"
#include "engine/kernels/q8_0.h"
#include "tests/check.h"

__attribute__((target("f16c"))) static uint16_t f16c_narrow(float f)
{
    return (uint16_t)_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT);
}

__attribute__((target("f16c"))) static float f16c_widen(uint16_t h) { return _cvtsh_ss(h); }

static void test_half(void)
{
    CHECK(k3_f32_to_f16(65504.0f) == 0x7bff, "65504 is the largest half");
    CHECK(k3_f32_to_f16(65519.0f) == 0x7bff, "65519 rounds down");
    CHECK(k3_f32_to_f16(65520.0f) == 0x7c00, "65520 rounds to inf");
    CHECK(k3_f32_to_f16(0x1p-24f) == 0x0001, "2^-24 is the smallest subnormal");
    CHECK(k3_f32_to_f16(0x1p-25f) == 0x0000, "2^-25 ties to even: zero");
    CHECK(k3_f32_to_f16(0x1.8p-24f) == 0x0002, "1.5 * 2^-24 ties to even: 2");
    CHECK(k3_f32_to_f16(-0.0f) == 0x8000, "-0 keeps its sign");
    CHECK(k3_f32_to_f16(1.0f + 0x1p-11f) == 0x3c00, "a tie below rounds to even");
    CHECK(k3_f32_to_f16(1.0f + 0x1.8p-10f) == 0x3c02, "a tie above rounds to even");
    for (uint32_t h = 0; h < 0x10000; h++) { /* every half survives the round trip */
        float f = k3_f16_to_f32((uint16_t)h);
        if (f == f)
            CHECK(k3_f32_to_f16(f) == h, "half %04x came back as %04x", h, k3_f32_to_f16(f));
    }
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("f16c"))
        return;
    struct k3_rng r;
    k3_rng_seed(&r, 7);
    int bad = 0;
    for (int i = 0; i < 1000000; i++) {
        uint32_t bits = (uint32_t)k3_rng_next(&r);
        float f = k3_bits_f32(bits);
        if (f != f)
            continue;
        bad += k3_f32_to_f16(f) != f16c_narrow(f);
    }
    CHECK(!bad, "%d of 1e6 random floats narrowed unlike F16C", bad);
    for (uint32_t h = 0; h < 0x10000; h++)
        bad += k3_f32_bits(k3_f16_to_f32((uint16_t)h)) != k3_f32_bits(f16c_widen((uint16_t)h));
    CHECK(!bad, "%d halves widened unlike F16C", bad);
}

static void test_quantize(void)
{
    float x[32];
    for (int j = 0; j < 32; j++)
        x[j] = (float)(j - 16) * 0.25f; /* amax 4 = |-16 · 0.25| */
    struct k3_q8_0_block b;
    k3_q8_0_quantize(x, 32, &b);
    float d = 4.0f / 127.0f;
    CHECK(b.d == k3_f32_to_f16(d), "scale %04x, want %04x", b.d, k3_f32_to_f16(d));
    CHECK(b.q[0] == -127, "the block's largest magnitude is -127: %d", b.q[0]);
    for (int j = 0; j < 32; j++)
        CHECK(b.q[j] == (int8_t)roundf(x[j] * (1.0f / d)), "q[%d] = %d", j, b.q[j]);
    x[5] = 0.5f / 127.0f * 4.0f; /* exactly half a step: roundf takes it away from zero */
    k3_q8_0_quantize(x, 32, &b);
    CHECK(b.q[5] == (int8_t)roundf(x[5] * (1.0f / d)), "half a step rounds as roundf");
    memset(x, 0, sizeof x);
    k3_q8_0_quantize(x, 32, &b);
    CHECK(b.d == 0 && b.q[0] == 0 && b.q[31] == 0, "a zero block is zero");

    /* bf16 in place equals out of place; every weight within half a step of its value,
     * plus what the half scale's rounding (2^-11 relative) moves q = ±127 by */
    enum { N = 32 * 37 };
    uint16_t *w = malloc(N * sizeof *w);
    float *f = malloc(N * sizeof *f);
    struct k3_q8_0_block *out = malloc(N / 32 * sizeof *out);
    struct k3_rng r;
    k3_rng_seed(&r, 11);
    for (int i = 0; i < N; i++) {
        w[i] = k3_f32_to_bf16((float)(0.05 * k3_rng_normal(&r)));
        f[i] = k3_bf16_to_f32(w[i]);
    }
    k3_q8_0_quantize(f, N, out);
    k3_q8_0_quantize_bf16(w, N, (struct k3_q8_0_block *)w);
    CHECK(!memcmp(out, w, N / 32 * sizeof *out), "in place differs from out of place");
    for (int i = 0; i < N; i++) {
        float amax = 0;
        for (int j = i / 32 * 32; j < i / 32 * 32 + 32; j++)
            amax = fabsf(f[j]) > amax ? fabsf(f[j]) : amax;
        float err = fabsf(k3_q8_0_get(out, i) - f[i]);
        CHECK(err <= amax / 127.0f * (0.5f + 127.0f / 2048.0f) * 1.001f, "weight %d off by %g (amax %g)", i, err, amax);
    }
    free(w);
    free(f);
    free(out);
}

static long first_diff(const float *a, const float *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (k3_f32_bits(a[i]) != k3_f32_bits(b[i]))
            return (long)i;
    return -1;
}

/* One variant's mat-mul and fused SiTU against the scalar reference, bytewise. */
static void test_variant(const char *name)
{
    static const int rows_list[] = {1, 3, 7, 17}, blocks_list[] = {1, 3, 5, 33},
                     T_list[] = {1, 2, 3, 4, 7, 16, 33, 64, 130};
    struct k3_rng r;
    k3_rng_seed(&r, 23);
    for (size_t ri = 0; ri < sizeof rows_list / sizeof *rows_list; ri++)
        for (size_t bi = 0; bi < sizeof blocks_list / sizeof *blocks_list; bi++)
            for (size_t ti = 0; ti < sizeof T_list / sizeof *T_list; ti++) {
                int rows = rows_list[ri], cols = 32 * blocks_list[bi], T = T_list[ti];
                int ldx = cols + 3, ldy = rows + 2;
                size_t nw = (size_t)rows * cols;
                float *wf = malloc(nw * sizeof *wf), *X = malloc((size_t)T * ldx * sizeof *X);
                struct k3_q8_0_block *G = malloc(nw / 32 * sizeof *G), *U = malloc(nw / 32 * sizeof *U);
                float *want = calloc((size_t)T * ldy, sizeof *want), *got = calloc((size_t)T * ldy, sizeof *got);
                float *wu = calloc((size_t)T * ldy, sizeof *wu);
                for (size_t i = 0; i < nw; i++)
                    wf[i] = (float)(0.05 * k3_rng_normal(&r)) * (i % 97 == 0 ? 300.0f : 1.0f);
                k3_q8_0_quantize(wf, (int64_t)nw, G);
                for (size_t i = 0; i < nw; i++)
                    wf[i] = (float)k3_rng_normal(&r);
                k3_q8_0_quantize(wf, (int64_t)nw, U);
                for (size_t i = 0; i < (size_t)T * ldx; i++)
                    X[i] = (float)k3_rng_normal(&r) * (i % 53 == 0 ? 1e4f : 1.0f);
                for (int t = 0; t < T; t++)
                    for (int i = 0; i < rows; i++) {
                        want[(size_t)t * ldy + i] =
                            k3_dot_q8_0_scalar(G + (size_t)i * cols / 32, X + (size_t)t * ldx, cols);
                        wu[(size_t)t * ldy + i] =
                            k3_dot_q8_0_scalar(U + (size_t)i * cols / 32, X + (size_t)t * ldx, cols);
                    }
                for (int threads = 1; threads <= 2; threads++) {
                    omp_set_num_threads(threads);
                    k3_matmul_q8_0(G, rows, cols, X, ldx, got, ldy, T);
                    long d = first_diff(want, got, (size_t)T * ldy);
                    CHECK(d < 0, "%s: rows %d cols %d T %d threads %d: Y[%ld] %a, want %a", name,
                          rows, cols, T, threads, d, got[d < 0 ? 0 : d], want[d < 0 ? 0 : d]);
                    float *s = calloc((size_t)T * ldy, sizeof *s);
                    for (int t = 0; t < T; t++)
                        for (int i = 0; i < rows; i++)
                            s[(size_t)t * ldy + i] = k3_situ(want[(size_t)t * ldy + i],
                                                             wu[(size_t)t * ldy + i], 4.0f, 25.0f);
                    memset(got, 0, (size_t)T * ldy * sizeof *got);
                    k3_matmul_q8_0_situ(G, U, rows, cols, X, ldx, got, ldy, T, 4.0f, 25.0f);
                    d = first_diff(s, got, (size_t)T * ldy);
                    CHECK(d < 0, "%s: fused SiTU rows %d cols %d T %d threads %d: Y[%ld]", name,
                          rows, cols, T, threads, d);
                    free(s);
                }
                free(wf); free(X); free(G); free(U); free(want); free(got); free(wu);
            }
    omp_set_num_threads(1);
}

int main(void)
{
    test_half();
    test_quantize();
    static const char *variants[] = {"scalar", "avx2", "avx512", "avx512vnni"};
    int ran = 0;
    for (size_t i = 0; i < sizeof variants / sizeof *variants; i++) {
        int e = k3_kernels_select(variants[i]);
        if (e == -ENOTSUP) {
            fprintf(stderr, "note: %s not on this CPU\n", variants[i]);
            continue;
        }
        REQUIRE(!e, "select %s: %d", variants[i], e);
        test_variant(variants[i]);
        ran++;
    }
    CHECK(ran >= 1, "no variant ran");
    return check_result();
}
