/* MXFP4 decoding and dot products: nibble order checked by position, E8M0 edge codes,
 * and the kernels against a double-precision dequantized reference. */
#include <math.h>
#include <omp.h>
#include <string.h>

#include "engine/kernels/mxfp4.h"
#include "engine/base/rng.h"
#include "tests/check.h"

static void test_e2m1_table(void)
{
    const float want[16] = {0, .5f, 1, 1.5f, 2, 3, 4, 6, -0.0f, -.5f, -1, -1.5f, -2, -3, -4, -6};
    for (int i = 0; i < 16; i++) {
        CHECK(k3_e2m1_values[i] == want[i], "nibble %d = %g, want %g", i, k3_e2m1_values[i], want[i]);
        CHECK(!!signbit(k3_e2m1_values[i]) == (i >= 8), "nibble %d sign bit", i);
    }
}

static void test_e8m0_codes(void)
{
    CHECK(k3_e8m0_scale(127) == 1.0f, "e=127 is 1");
    CHECK(k3_e8m0_scale(128) == 2.0f, "e=128 is 2");
    CHECK(k3_e8m0_scale(119) == ldexpf(1, -8), "e=119 is 2^-8");
    CHECK(k3_e8m0_scale(1) == ldexpf(1, -126), "e=1 is 2^-126");
    CHECK(k3_e8m0_scale(254) == ldexpf(1, 127), "e=254 is 2^127");
    /* Reserved codes, the project's choice (k3-model.md §4). */
    CHECK(k3_e8m0_scale(0) == ldexpf(1, -127), "e=0 is 2^-127, got %g", k3_e8m0_scale(0));
    CHECK(k3_e8m0_scale(0) > 0, "e=0 is not zero");
    CHECK(k3_e8m0_scale(255) == 0.0f, "e=255 zeroes the group");
    uint8_t scales[5] = {255, 3, 255, 127, 0};
    CHECK(k3_mxfp4_count_nan_scales(scales, 5) == 2, "two groups with code 255 counted");
}

/* Each byte holds two different nibbles, so a swapped order cannot pass. */
static void test_nibble_order_by_position(void)
{
    uint8_t packed[16], scales[1] = {127};
    for (int b = 0; b < 16; b++)
        packed[b] = (uint8_t)(((15 - b) << 4) | b); /* low = b, high = 15 - b */
    for (int c = 0; c < 32; c++) {
        int nib = c % 2 == 0 ? c / 2 : 15 - c / 2;
        CHECK(k3_mxfp4_get(packed, scales, c) == k3_e2m1_values[nib],
              "element %d decodes nibble %d (%g), got %g", c, nib, k3_e2m1_values[nib],
              k3_mxfp4_get(packed, scales, c));
    }
    /* The dot product agrees position by position: a one-hot x selects one weight. */
    float x[32];
    for (int c = 0; c < 32; c++) {
        memset(x, 0, sizeof x);
        x[c] = 1;
        float got = k3_dot_mxfp4(packed, scales, x, 32);
        CHECK(got == k3_mxfp4_get(packed, scales, c), "one-hot dot at %d: %g", c, got);
    }
}

/* Scales apply to groups of 32 consecutive inputs, along the row. */
static void test_group_scales_by_position(void)
{
    uint8_t packed[48], scales[3] = {126, 129, 255}; /* 1/2, 4, zeroed */
    memset(packed, 0x62, sizeof packed);             /* every element: low 2 (1.0), high 6 (4.0) */
    for (int c = 0; c < 96; c++) {
        float base = c % 2 ? 4.0f : 1.0f;
        float want = base * (c < 32 ? 0.5f : c < 64 ? 4.0f : 0.0f);
        CHECK(k3_mxfp4_get(packed, scales, c) == want, "column %d: %g, want %g", c,
              k3_mxfp4_get(packed, scales, c), want);
    }
}

static void fill_random(uint8_t *p, size_t n, struct k3_rng *r)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)k3_rng_next(r);
}

static void test_dot_against_double(void)
{
    enum { ROWS = 37, COLS = 256 };
    struct k3_rng r;
    k3_rng_seed(&r, 42);
    static uint8_t packed[ROWS * COLS / 2], scales[ROWS * COLS / 32];
    static float x[COLS];
    fill_random(packed, sizeof packed, &r);
    for (size_t i = 0; i < sizeof scales; i++)
        scales[i] = (uint8_t)(118 + k3_rng_next(&r) % 8);
    for (int i = 0; i < COLS; i++)
        x[i] = (float)k3_rng_normal(&r);
    for (int row = 0; row < ROWS; row++) {
        const uint8_t *p = packed + row * COLS / 2, *s = scales + row * COLS / 32;
        double want = 0, mag = 0;
        for (int c = 0; c < COLS; c++) {
            want += (double)k3_mxfp4_get(p, s, c) * x[c];
            mag += fabs((double)k3_mxfp4_get(p, s, c) * x[c]);
        }
        float got = k3_dot_mxfp4(p, s, x, COLS);
        /* f32 accumulation of 256 terms: within a few ulps of the magnitude sum */
        CHECK(fabs(got - want) <= 1e-6 * mag + 1e-30, "row %d: %.9g vs %.9g", row, got, want);
    }
}

/* Block order as mxfp4.h defines it, xb[128b + 16j + k] = x[128b + 8k + j], over whole
 * blocks and a last block of 1 to 3 groups padded with zeros. */
static void test_block_order_definition(void)
{
    static const int lengths[] = {128, 384, 32, 704, 2080};
    for (size_t l = 0; l < sizeof lengths / sizeof lengths[0]; l++) {
        int n = lengths[l];
        size_t padded = k3_mxfp4_block_floats(n);
        CHECK(padded % 128 == 0 && padded >= (size_t)n && padded < (size_t)n + 128,
              "n %d: %zu floats in block order", n, padded);
        float x[2080], xb[2176];
        for (int i = 0; i < n; i++)
            x[i] = (float)(i + 1);
        memset(xb, 0xff, sizeof xb); /* NaN: a slot left unwritten shows */
        k3_mxfp4_block_order(x, n, xb);
        for (size_t b = 0; b < padded; b += 128)
            for (int j = 0; j < 8; j++)
                for (int k = 0; k < 16; k++) {
                    size_t from = b + 8 * k + j;
                    float want = from < (size_t)n ? x[from] : 0.0f, got = xb[b + 16 * j + k];
                    CHECK(!memcmp(&got, &want, sizeof got), "n %d: xb[%zu] = %g, want %g", n,
                          b + 16 * j + k, got, want);
                }
    }
}

/* The mat-mul is the row dot product for every token, bytewise, at any thread count. */
static void test_matmul_matches_dot_and_threads(void)
{
    enum { ROWS = 64, COLS = 128, T = 5 };
    struct k3_rng r;
    k3_rng_seed(&r, 7);
    static uint8_t packed[ROWS * COLS / 2], scales[ROWS * COLS / 32];
    static float X[T * COLS], Y1[T * ROWS], Y2[T * ROWS];
    fill_random(packed, sizeof packed, &r);
    for (size_t i = 0; i < sizeof scales; i++)
        scales[i] = (uint8_t)(120 + k3_rng_next(&r) % 4);
    for (int i = 0; i < T * COLS; i++)
        X[i] = (float)k3_rng_normal(&r);
    omp_set_num_threads(1);
    k3_matmul_mxfp4(packed, scales, ROWS, COLS, X, COLS, Y1, ROWS, T);
    omp_set_num_threads(2);
    k3_matmul_mxfp4(packed, scales, ROWS, COLS, X, COLS, Y2, ROWS, T);
    CHECK(!memcmp(Y1, Y2, sizeof Y1), "1 and 2 threads give the same bytes");
    for (int t = 0; t < T; t++)
        for (int row = 0; row < ROWS; row++) {
            float d = k3_dot_mxfp4(packed + row * COLS / 2, scales + row * COLS / 32,
                                   X + t * COLS, COLS);
            CHECK(!memcmp(&d, &Y1[t * ROWS + row], sizeof d), "token %d row %d", t, row);
        }
}

int main(void)
{
    static _Alignas(64) unsigned char scratch[1 << 16]; /* MXFP4 calls up to 8 × 256 */
    REQUIRE(k3_mxfp4_scratch_bytes(8, 256, 1) <= sizeof scratch, "%zu bytes of scratch",
            k3_mxfp4_scratch_bytes(8, 256, 1));
    k3_mxfp4_scratch_bind(scratch, 8, 256, 1);
    test_e2m1_table();
    test_e8m0_codes();
    test_nibble_order_by_position();
    test_group_scales_by_position();
    test_block_order_definition();
    test_dot_against_double();
    test_matmul_matches_dot_and_threads();
    return check_result();
}
