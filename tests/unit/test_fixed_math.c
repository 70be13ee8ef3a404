/* k3_log and k3_cos_2pi (engine/base/fixed_math.h): within 1 and 2 ulp of the exact
 * value (long double libm as the reference) over the ranges the generator and synth use
 * and beyond; and synth's E8M0 scale centre, now computed without log2, equals the libm
 * formula it replaced for every fan-in up to 2^20. */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "engine/base/fixed_math.h"
#include "engine/base/rng.h"
#include "engine/synth/weights.h"
#include "tests/check.h"

/* |got - want| in units of the last place of want (as a double). */
static double ulps(double got, long double want)
{
    double w = (double)want;
    double ulp = nextafter(fabs(w), INFINITY) - fabs(w);
    return (double)(fabsl((long double)got - want) / ulp);
}

static void test_log(void)
{
    struct k3_rng r;
    k3_rng_seed(&r, 7);
    double worst = 0, worst_x = 0;
    for (int i = 0; i < 2000000; i++) {
        double x;
        if (i % 4 == 0) /* Box-Muller's argument: 1 - uniform, (0, 1] */
            x = 1.0 - k3_rng_uniform(&r);
        else if (i % 4 == 1) /* synth's A_log: [1, 16) */
            x = 1.0 + 15.0 * k3_rng_uniform(&r);
        else if (i % 4 == 2) /* near 1, where log loses most */
            x = 1.0 + (k3_rng_uniform(&r) - 0.5) * 0x1p-18;
        else /* any normal double */
            x = ldexp(1.0 + k3_rng_uniform(&r), (int)(k3_rng_next(&r) % 2044) - 1022);
        double e = ulps(k3_log(x), logl((long double)x));
        if (e > worst) {
            worst = e;
            worst_x = x;
        }
    }
    CHECK(worst < 1.0, "k3_log: %.3f ulp at %a", worst, worst_x);
    CHECK(k3_log(1.0) == 0.0 && k3_log(DBL_MIN) < -708 && k3_log(DBL_MAX) > 709,
          "k3_log at 1, DBL_MIN, DBL_MAX");
    printf("k3_log: worst %.3f ulp\n", worst);
}

static void test_cos(void)
{
    struct k3_rng r;
    k3_rng_seed(&r, 8);
    const long double two_pi = 6.283185307179586476925286766559L;
    double worst = 0, worst_u = 0;
    for (int i = 0; i < 2000000; i++) {
        double u = k3_rng_uniform(&r);
        long double want = cosl(two_pi * (long double)u);
        /* near a zero of cos, relative error has no meaning: judge in absolute terms,
         * in units of the ulp of values just below 1/4 */
        double e = fabsl(want) < 0.25L ? (double)(fabsl(k3_cos_2pi(u) - want) / 0x1p-55L)
                                       : ulps(k3_cos_2pi(u), want);
        if (e > worst) {
            worst = e;
            worst_u = u;
        }
    }
    CHECK(worst < 2.0, "k3_cos_2pi: %.3f ulp at u = %a", worst, worst_u);
    CHECK(k3_cos_2pi(0) == 1.0 && k3_cos_2pi(0.25) == 0.0 && k3_cos_2pi(0.5) == -1.0 &&
              k3_cos_2pi(0.75) == 0.0 && k3_cos_2pi(1.0) == 1.0,
          "k3_cos_2pi at the quarter turns");
    printf("k3_cos_2pi: worst %.3f ulp\n", worst);
}

/* synth's E8M0 scale centre (weights.c) as it was, through libm. */
static int scale_center_libm(int fan_in)
{
    return 127 + (int)lround(log2(1.0 / (2.93 * sqrt((double)fan_in))));
}

static void test_scale_center(void)
{
    int bad = 0, first = 0;
    for (int fan_in = 1; fan_in <= 1 << 20; fan_in++)
        if (k3_e8m0_center(fan_in) != scale_center_libm(fan_in) && !bad++)
            first = fan_in;
    CHECK(!bad, "%d fan-ins differ, the first %d: %d, libm %d", bad, first,
          k3_e8m0_center(first), scale_center_libm(first));
}

int main(void)
{
    test_log();
    test_cos();
    test_scale_center();
    return check_result();
}
