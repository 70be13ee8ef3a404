/* log and cos of our own, for the bytes that must not depend on the libc.
 *
 * libm's log and cos differ between libcs (and glibc versions) in the last bit; the
 * seeded generator's normal draws (rng.h) and synth's weights must not.  These are
 * fdlibm's algorithms and coefficients (e_log.c, k_sin.c, k_cos.c; Sun Microsystems,
 * freely redistributable) written as a fixed sequence of IEEE binary64 +, -, ×, / and
 * bit operations, so they give the same bytes wherever doubles are IEEE binary64
 * evaluated in their own precision (FLT_EVAL_METHOD 0: x86-64 SSE2, AArch64) and the
 * compiler does not fuse a*b+c (the Makefile's -ffp-contract=off).  k3_log stays within
 * 1 ulp of the exact result, k3_cos_2pi within 2 (the rounded angle adds up to one);
 * tests/unit/test_fixed_math.c measures both.
 * sqrt needs no twin: IEEE 754 makes it correctly rounded everywhere.
 * Owns: k3_log and k3_cos_2pi.  Does not own: the float kernels' exp and tanh (engine/kernels/kernels.h).
 */
#ifndef K3_FIXED_MATH_H
#define K3_FIXED_MATH_H

#include <float.h>

#if !defined(FLT_EVAL_METHOD) || FLT_EVAL_METHOD != 0
#error "fixed_math.h promises the same bytes only where doubles are evaluated as doubles"
#endif

/* Natural logarithm of a positive, normal, finite x. */
double k3_log(double x);

/* cos(2π·u) for u in [0, 1]: the angle is reduced in turns, exactly, so no rounded 2π
 * enters. */
double k3_cos_2pi(double u);

#endif
