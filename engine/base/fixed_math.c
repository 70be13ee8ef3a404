/* log and cos as fixed sequences of IEEE operations.  See fixed_math.h. */
#include "engine/base/fixed_math.h"

#include <assert.h>
#include <stdint.h>
#include <string.h>

static uint64_t bits_of(double x)
{
    uint64_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static double double_of(uint64_t u)
{
    double x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* ---- log (fdlibm e_log.c) ----------------------------------------------------------
 * x = 2^k (1 + f) with sqrt(2)/2 < 1 + f < sqrt(2); log(1 + f) = f - f²/2 + s·(f²/2 + R)
 * with s = f / (2 + f) and R a minimax polynomial in s² (error below 2^-58.45). */

static const double LN2_HI = 0x1.62e42feep-1;       /* 3fe62e42 fee00000: k·LN2_HI exact */
static const double LN2_LO = 0x1.a39ef35793c76p-33; /* 3dea39ef 35793c76 */
static const double LG1 = 0x1.5555555555593p-1, LG2 = 0x1.999999997fa04p-2,
                    LG3 = 0x1.2492494229359p-2, LG4 = 0x1.c71c51d8e78afp-3,
                    LG5 = 0x1.7466496cb03dep-3, LG6 = 0x1.39a09d078c69fp-3,
                    LG7 = 0x1.2f112df3e5244p-3;

/* log(1 + f) + k ln 2 for |f| < 2^-20, where two terms of the series suffice. */
static double log_near_one(double f, int k)
{
    double dk = (double)k;
    if (f == 0.0)
        return dk * LN2_HI + dk * LN2_LO;
    double r = f * f * (0.5 - 0.33333333333333333 * f);
    return dk * LN2_HI - ((r - dk * LN2_LO) - f);
}

double k3_log(double x)
{
    assert(x >= DBL_MIN && x <= DBL_MAX); /* positive, normal, finite */
    uint64_t u = bits_of(x);
    int32_t hx = (int32_t)(u >> 32);
    uint32_t lx = (uint32_t)u;
    int k = (hx >> 20) - 1023;
    hx &= 0x000fffff;
    int32_t i = (hx + 0x95f64) & 0x100000; /* 1: the mantissa is above sqrt(2) */
    x = double_of((uint64_t)(uint32_t)(hx | (i ^ 0x3ff00000)) << 32 | lx); /* x or x/2 */
    k += i >> 20;
    double f = x - 1.0;
    if ((0x000fffff & (2 + hx)) < 3)
        return log_near_one(f, k);
    double s = f / (2.0 + f), dk = (double)k;
    double z = s * s, w = z * z;
    double t1 = w * (LG2 + w * (LG4 + w * LG6));
    double t2 = z * (LG1 + w * (LG3 + w * (LG5 + w * LG7)));
    double r = t2 + t1;
    /* fdlibm returns early for k = 0 without the k ln 2 terms; with dk = 0 they add
     * exact zeros, so one expression serves each case with the same bits. */
    if (((hx - 0x6147a) | (0x6b851 - hx)) > 0) { /* 1 + f far from 1: keep f²/2 apart */
        double hfsq = 0.5 * f * f;
        return dk * LN2_HI - ((hfsq - (s * (hfsq + r) + dk * LN2_LO)) - f);
    }
    return dk * LN2_HI - ((s * (f - r) - dk * LN2_LO) - f);
}

/* ---- sin and cos on [-π/4, π/4] (fdlibm k_sin.c, k_cos.c, with no tail) --------------- */

static const double S1 = -0x1.5555555555549p-3, S2 = 0x1.111111110f8a6p-7,
                    S3 = -0x1.a01a019c161d5p-13, S4 = 0x1.71de357b1fe7dp-19,
                    S5 = -0x1.ae5e68a2b9cebp-26, S6 = 0x1.5d93a5acfd57cp-33;
static const double C1 = 0x1.555555555554cp-5, C2 = -0x1.6c16c16c15177p-10,
                    C3 = 0x1.a01a019cb159p-16, C4 = -0x1.27e4f809c52adp-22,
                    C5 = 0x1.1ee9ebdb4b1c4p-29, C6 = -0x1.8fae9be8838d4p-37;

static double sin_small(double x)
{
    double z = x * x, v = z * x;
    double r = S2 + z * (S3 + z * (S4 + z * (S5 + z * S6)));
    return x + v * (S1 + z * r);
}

static double cos_small(double x)
{
    double z = x * x;
    double r = z * (C1 + z * (C2 + z * (C3 + z * (C4 + z * (C5 + z * C6)))));
    uint32_t ix = (uint32_t)(bits_of(x) >> 32) & 0x7fffffff;
    if (ix < 0x3FD33333) /* |x| < 0.3 */
        return 1.0 - (0.5 * z - z * r);
    /* 1 - x²/2 loses bits here: take qx ≈ x²/4 out of both parts exactly */
    double qx = ix > 0x3fe90000 ? 0.28125 : double_of((uint64_t)(ix - 0x00200000) << 32);
    double hz = 0.5 * z - qx, a = 1.0 - qx;
    return a - (hz - z * r);
}

double k3_cos_2pi(double u)
{
    assert(u >= 0.0 && u <= 1.0);
    double t = 4.0 * u;       /* quarter turns, exact */
    int q = (int)t;           /* whole quarters: t >= 0, so this is the floor */
    double f = t - (double)q; /* in [0, 1), exact */
    if (f > 0.5) {            /* to the nearest quarter: f in [-1/2, 1/2], exact (Sterbenz) */
        q++;
        f -= 1.0;
    }
    double x = f * 1.57079632679489661923; /* in [-π/4, π/4] */
    switch (q & 3) {
    case 0: return cos_small(x);
    case 1: return -sin_small(x);
    case 2: return -cos_small(x);
    default: return sin_small(x);
    }
}
