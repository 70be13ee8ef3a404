/* The int8-activation MXFP4 path (mxfp4.h, optional): the quantizer's edge cases, the
 * error against the exact (double) product with a stated bound, and the K3_MXFP4_ACT=q8
 * route through k3_matmul_mxfp4 and the fused SiTU; the scalar variant's mat-muls against
 * its reference.  (Each SIMD variant's: test_kernels_<variant>.c, which skip on a CPU
 * without it; under an address-space cap: test_kernels_q8_nomem.c.)
 *
 * Bound: x_i = d_g·q_i + r_i with |r_i| ≤ d_g/2 (d_g = amax_g/127), the integer sums are
 * exact, so against the exact Σ v_i·x_i the result is off by at most
 * Σ_g 2^(e_g-127)·(d_g/2)·Σ_{i∈g}|v_i| (the rounding of x) plus f32 rounding,
 * (G/2 + 7)·u·Σ|v_i·x_i| with u = 2^-24 and G groups (checked with that margin). */

#include "tests/unit/test_kernels.h"
#include "tests/util.h"

static void test_quantizer(void)
{
    float x[96];
    for (int i = 0; i < 96; i++)
        x[i] = (float)(i - 40) * 0.37f;
    for (int i = 32; i < 64; i++)
        x[i] = 0; /* an all-zero group */
    x[70] = INFINITY;
    void *mem = xmalloc(k3_q8_bytes(96, 1));
    struct k3_q8 xq;
    k3_q8_quantize(&xq, mem, x, 96, 96, 1);
    CHECK(xq.pairs == 2, "96 activations are 2 pairs of groups, got %d", xq.pairs);
    CHECK(xq.dh[0] == fabsf(-40 * 0.37f) / 127.0f * 0.5f, "d/2 of group 0: %g", xq.dh[0]);
    CHECK(xq.dh[1] == 0, "an all-zero group has d = 0");
    CHECK(isnan(xq.dh[2]), "a group holding inf has d = NaN");
    CHECK(xq.dh[3] == 0, "the missing fourth group has d = 0");
    int maxq = 0;
    for (int i = 0; i < 128; i++)
        maxq = abs(xq.q[i]) > maxq ? abs(xq.q[i]) : maxq;
    CHECK(maxq == 127, "the largest |q| is 127, got %d", maxq);
    /* Element 0 of group 0 (x = -14.8, the group's amax) sits first in lane 0. */
    CHECK(xq.q[0] == -127, "q of the group's largest magnitude is -127, got %d", xq.q[0]);
    /* Element 1 (odd) sits first in the second 16-byte lane. */
    CHECK(xq.q[16] == (int8_t)nearbyintf(x[1] * (127.0f / (40 * 0.37f))), "element 1 at byte 16");
    uint8_t p[48] = {0}, sc[3] = {127, 127, 127};
    memset(p, 0x22, sizeof p); /* every weight 1.0 */
    float y = k3_dot_mxfp4_q8(p, sc, &xq);
    CHECK(isnan(y), "an inf activation makes the result NaN, got %g", y);
    free(mem);
}

/* q is x·127/amax rounded to nearest, ties to even, as nearbyintf: with amax = 127 the
 * scale is exactly 1, so every tie k + 0.5 in [-127, 127] and both its float neighbours
 * reach the rounding as they are. */
static void test_rounding(void)
{
    enum { N = 3 * 255 };
    float x[N];
    int n = 0;
    for (int k = -127; k < 127; k++)
        for (int d = -1; d <= 1; d++) {
            float tie = (float)k + 0.5f;
            x[n++] = d < 0 ? nextafterf(tie, -INFINITY) : d > 0 ? nextafterf(tie, INFINITY) : tie;
        }
    int groups = (n + 30) / 31, cols = 32 * groups; /* each group: 127, then 31 of x */
    float *row = xmalloc(sizeof *row * (size_t)cols);
    for (int g = 0, i = 0; g < groups; g++) {
        row[32 * g] = 127.0f;
        for (int e = 1; e < 32; e++)
            row[32 * g + e] = i < n ? x[i++] : 0.0f;
    }
    void *mem = xmalloc(k3_q8_bytes(cols, 1));
    struct k3_q8 xq;
    k3_q8_quantize(&xq, mem, row, cols, cols, 1);
    int wrong = 0;
    for (int g = 0; g < groups; g++)
        for (int e = 0; e < 32; e++) {
            int at = 64 * (g / 2) + 16 * (2 * (g % 2) + (e & 1)) + e / 2; /* mxfp4.h's lanes */
            float v = row[32 * g + e];
            wrong += xq.q[at] != (int8_t)nearbyintf(v);
        }
    CHECK(wrong == 0, "%d of %d activations not rounded to nearest even", wrong, cols);
    free(row), free(mem);
}

static void test_error(void)
{
    struct k3_rng r;
    k3_rng_seed(&r, 21);
    int cols = 3584, rows = 64;
    uint8_t *p = xmalloc((size_t)rows * cols / 2), *s = xmalloc((size_t)rows * cols / 32);
    float *x = xmalloc(sizeof *x * cols), *y = xmalloc(sizeof *y * rows);
    double worst_bound = 0, sum_rel = 0, worst_rel = 0, sum_rel32 = 0;
    int n = 0;
    for (int rep = 0; rep < 8; rep++) {
        fill_mxfp4(p, (size_t)rows * cols / 2, s, (size_t)rows * cols / 32, &r, 0);
        fill_x(x, (size_t)cols, &r, 0);
        k3_matmul_mxfp4_q8(p, s, rows, cols, x, cols, y, rows, 1);
        for (int row = 0; row < rows; row++) {
            const uint8_t *pr = p + (size_t)row * cols / 2, *sr = s + (size_t)row * cols / 32;
            double exact = 0, mag = 0, qbound = 0;
            for (int g = 0; g < cols / 32; g++) {
                double amax = 0, vsum = 0;
                for (int e = 0; e < 32; e++) {
                    int c = 32 * g + e;
                    double v = k3_mxfp4_get(pr, sr, c);
                    exact += v * x[c], mag += fabs(v * x[c]);
                    amax = fmax(amax, fabs(x[c]));
                    vsum += fabs(v);
                }
                qbound += vsum * (amax / 127) / 2;
            }
            double err = fabs(y[row] - exact);
            double bound = qbound + (cols / 64 + 7) * ldexp(1, -24) * mag;
            CHECK(err <= bound, "row %d: error %g above the bound %g", row, err, bound);
            worst_bound = fmax(worst_bound, err / bound);
            double rel = err / mag, rel32 = fabs(k3_dot_mxfp4_scalar(pr, sr, x, cols) - exact) / mag;
            sum_rel += rel, sum_rel32 += rel32, worst_rel = fmax(worst_rel, rel);
            n++;
        }
    }
    printf("int8 path against the exact product (%d rows of %d, x ~ N(0,1)): mean |err|/Σ|v·x| "
           "%.2e (f32 contract %.2e), worst %.2e; worst error %.2f of the bound\n",
           n, cols, sum_rel / n, sum_rel32 / n, worst_rel, worst_bound);
    free(p), free(s), free(x), free(y);
}

/* k3_mxfp4_set_q8(true) (K3_MXFP4_ACT=q8): the public f32 entries take the int8 path. */
static void test_env_route(void)
{
    CHECK(k3_mxfp4_q8_enabled(), "k3_mxfp4_set_q8(true) is seen");
    struct k3_rng r;
    k3_rng_seed(&r, 5);
    int rows = 300, cols = 1024, T = 3;
    size_t np = (size_t)rows * cols / 2, ns = (size_t)rows * cols / 32;
    uint8_t *p1 = xmalloc(np), *s1 = xmalloc(ns), *p3 = xmalloc(np), *s3 = xmalloc(ns);
    float *X = xmalloc(sizeof *X * (size_t)T * cols), *a = xmalloc(sizeof *a * (size_t)T * rows);
    float *b = xmalloc(sizeof *b * (size_t)T * rows), *u = xmalloc(sizeof *u * (size_t)T * rows);
    fill_mxfp4(p1, np, s1, ns, &r, 0);
    fill_mxfp4(p3, np, s3, ns, &r, 0);
    fill_x(X, (size_t)T * cols, &r, 0);
    k3_matmul_mxfp4_q8(p1, s1, rows, cols, X, cols, a, rows, T);
    k3_matmul_mxfp4(p1, s1, rows, cols, X, cols, b, rows, T);
    CHECK(first_diff(a, b, (size_t)T * rows) < 0, "k3_matmul_mxfp4 takes the int8 path");
    float d = k3_dot_mxfp4(p1, s1, X, cols);
    CHECK(!memcmp(&d, &a[0], sizeof d), "k3_dot_mxfp4 takes the int8 path");
    k3_matmul_mxfp4_q8(p3, s3, rows, cols, X, cols, u, rows, T);
    for (int i = 0; i < T * rows; i++)
        a[i] = k3_situ(a[i], u[i], 4.0f, 25.0f);
    for (int threads = 1; threads <= 2; threads++) {
        omp_set_num_threads(threads);
        k3_matmul_mxfp4_situ(p1, s1, p3, s3, rows, cols, X, cols, b, rows, T, 4.0f, 25.0f);
        CHECK(first_diff(a, b, (size_t)T * rows) < 0, "fused SiTU takes the int8 path, %d threads",
              threads);
    }
    free(p1), free(s1), free(p3), free(s3), free(X), free(a), free(b), free(u);
}

int main(void)
{
    k3_mxfp4_set_q8(true);
    bind_mxfp4_scratch(MAX_TOKENS, MAX_INPUTS, 1);
    test_quantizer();
    test_rounding();
    REQUIRE(k3_kernels_select("scalar") == 0, "select scalar");
    test_q8_against_reference(k3_kernels_find("scalar"), 9);
    REQUIRE(k3_kernels_select("auto") == 0, "select auto");
    test_error();
    test_env_route();
    return check_result();
}
