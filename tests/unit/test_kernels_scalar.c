/* The scalar reference itself: within a stated bound of a double-precision sum, bytewise
 * the same at 1 and 2 threads, and the choice of variant (k3_kernels_prefer, k3_kernels_select).
 *
 * Bounds (u = 2^-24, valid while no partial sum leaves the normal range): a bf16 dot
 * product of n terms fuses each product into its lane (one rounding per term, m =
 * ceil(n/16) in a lane), then 4 tree levels, so |got − exact| ≤ (m + 5)·u·Σ|w_i·x_i|
 * (one level of slack).  An MXFP4 dot product of
 * G = n/32 groups rounds the product, the pair sum t and (for subnormal results only) the
 * scaled t, then G lane adds and 4 tree levels: |got − exact| ≤ (G + 7)·u·Σ|v_i·x_i|.
 * k3_exp and k3_tanh (kernels.h) stay within 2 ulp of libm's expf and tanhf. */
#include "tests/unit/test_kernels.h"

static void test_selection(void)
{
    CHECK(!strcmp(k3_kernels_name(), "scalar"), "preferring scalar gives %s", k3_kernels_name());
    CHECK(k3_kernels_prefer("avx1") == -EINVAL, "an unknown preference is refused");
    CHECK(k3_kernels_select("nonsense") == -EINVAL, "an unknown variant is refused");
    CHECK(!strcmp(k3_kernels_name(), "scalar"), "a refused select keeps the variant");
    CHECK(k3_kernels_select("auto") == 0, "auto is always available");
    const char *best = k3_kernels_name();
    CHECK(k3_kernels_find(best) && k3_kernels_find(best)->supported(), "auto chose %s", best);
    printf("auto selects %s on this CPU\n", best);
    for (const char *const *v = (const char *const[]){"avx512vnni", "avx512", "avx2", NULL}; *v; v++) {
        const struct k3_kernel_ops *k = k3_kernels_find(*v);
        REQUIRE(k, "%s is in the table", *v);
        int rc = k3_kernels_select(*v);
        CHECK(rc == (k->supported() ? 0 : -ENOTSUP), "select %s = %d", *v, rc);
    }
    CHECK(k3_kernels_prefer("avx512vnni") == 0, "a preference the CPU may lack is taken");
    const struct k3_kernel_ops *chose = k3_kernels_find(k3_kernels_name());
    CHECK(chose && chose->supported(), "preferring avx512vnni runs %s, which this CPU has",
          k3_kernels_name());
    CHECK(k3_kernels_select("scalar") == 0, "scalar is always available");
}

static void test_bf16_against_double(void)
{
    struct k3_rng r;
    k3_rng_seed(&r, 11);
    int max_n = 12288;
    uint16_t *w = xmalloc(sizeof *w * max_n);
    float *x = xmalloc(sizeof *x * max_n);
    double worst = 0;
    for (int li = 0; li < N_OF(dot_lengths); li++) {
        int n = dot_lengths[li];
        for (int rep = 0; rep < 20; rep++) {
            fill_bf16(w, (size_t)n, &r, 0);
            fill_x(x, (size_t)n, &r, 0);
            double exact = 0, mag = 0;
            for (int i = 0; i < n; i++) {
                double p = (double)k3_bf16_to_f32(w[i]) * x[i];
                exact += p, mag += fabs(p);
            }
            double err = fabs(k3_dot_bf16_scalar(w, x, n) - exact), m = (n + 15) / 16;
            double bound = (m + 5) * ldexp(1, -24) * mag;
            CHECK(err <= bound, "bf16 n=%d: error %g above the bound %g", n, err, bound);
            if (mag > 0 && err / bound > worst)
                worst = err / bound;
        }
    }
    printf("bf16 reference vs double: worst error %.3f of the bound (m+5)·u·Σ|w·x|\n", worst);
    free(w), free(x);
}

static void test_mxfp4_against_double(void)
{
    struct k3_rng r;
    k3_rng_seed(&r, 12);
    int max_n = 12288;
    uint8_t *p = xmalloc((size_t)max_n / 2), *s = xmalloc((size_t)max_n / 32);
    float *x = xmalloc(sizeof *x * max_n);
    double worst = 0;
    for (int li = 0; li < N_OF(mxfp4_lengths); li++) {
        /* Each product passes through at most 4 roundings in its chain, 1 joining the two
         * chains, B (one fma into the lane per block of 128) and 4 (the lane tree). */
        int n = mxfp4_lengths[li], G = n / 32, B = (G + 3) / 4;
        for (int rep = 0; rep < 20; rep++) {
            fill_mxfp4(p, (size_t)n / 2, s, (size_t)(n + 31) / 32, &r, 0);
            fill_x(x, (size_t)n, &r, 0);
            double exact = 0, mag = 0;
            for (int i = 0; i < G * 32; i++) {
                double t = (double)k3_mxfp4_get(p, s, i) * x[i];
                exact += t, mag += fabs(t);
            }
            double err = fabs(k3_dot_mxfp4_scalar(p, s, x, n) - exact);
            double bound = (B + 9) * ldexp(1, -24) * mag;
            CHECK(err <= bound, "mxfp4 n=%d: error %g above the bound %g", n, err, bound);
            if (mag > 0 && err / bound > worst)
                worst = err / bound;
        }
    }
    printf("mxfp4 reference vs double: worst error %.3f of the bound (B+9)·u·Σ|v·x| (B blocks of 128)\n", worst);
    free(p), free(s), free(x);
}

/* ulps between two floats of the same sign (0 when equal). */
static double ulps(float a, float b)
{
    double step = fabs(nextafterf(b, INFINITY) - b);
    return fabs((double)a - (double)b) / step;
}

/* k3_exp and k3_tanh against libm where the result is a normal float, and SiTU against
 * the same formula in double. */
static void test_activation_accuracy(void)
{
    double worst_exp = 0, worst_tanh = 0, worst_situ = 0;
    for (float x = -87.0f; x <= 88.0f; x += 0.0009765625f) {
        worst_exp = fmax(worst_exp, ulps(k3_exp(x), expf(x)));
        if (fabsf(x) < 10.0f)
            worst_tanh = fmax(worst_tanh, ulps(k3_tanh(x), tanhf(x)));
    }
    for (float x = 1e-30f; x < 0.7f; x *= 1.001f) {
        worst_tanh = fmax(worst_tanh, ulps(k3_tanh(x), tanhf(x)));
        worst_tanh = fmax(worst_tanh, ulps(k3_tanh(-x), tanhf(-x)));
    }
    CHECK(worst_exp <= 2.0, "k3_exp is %.2f ulp from expf", worst_exp);
    CHECK(worst_tanh <= 2.0, "k3_tanh is %.2f ulp from tanhf", worst_tanh);
    CHECK(k3_tanh(30.0f) == 1.0f && k3_tanh(-30.0f) == -1.0f && isnan(k3_tanh(NAN)),
          "tanh(±30), tanh(NaN)");
    CHECK(k3_exp(100.0f) == k3_exp(K3_EXP_HI) && isnan(k3_exp(NAN)), "exp's clamp, exp(NaN)");
    for (float g = -20.0f; g <= 20.0f; g += 0.0078125f) {
        float u = 0.75f * g - 1.0f;
        double want = 4.0 * tanh(g / 4.0) / (1.0 + exp(-(double)g)) * (25.0 * tanh(u / 25.0));
        double scale = fmax(fabs(want), 1e-3);
        worst_situ = fmax(worst_situ, fabs(k3_situ(g, u, 4.0f, 25.0f) - want) / scale);
    }
    CHECK(worst_situ < 4e-6, "SiTU relative error %.2e", worst_situ);
    printf("k3_exp within %.2f ulp of expf, k3_tanh within %.2f ulp of tanhf, SiTU within %.1e "
           "of double\n", worst_exp, worst_tanh, worst_situ);
}

int main(void)
{
    REQUIRE(k3_kernels_prefer("scalar") == 0, "prefer scalar");
    bind_mxfp4_scratch(MAX_TOKENS, MAX_INPUTS, 1);
    test_selection();
    test_bf16_against_double();
    test_mxfp4_against_double();
    /* The scalar variant through the public entries: itself, and 1 vs 2 threads. */
    test_dots(&k3_kernels_scalar, 3);
    test_matmuls(&k3_kernels_scalar, 4);
    test_tiles(&k3_kernels_scalar, 7);
    test_activation_accuracy();
    return check_result();
}
