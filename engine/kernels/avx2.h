/* What the AVX2 files share (kernels_avx2.c, mxfp4_avx2.c): the 16 lanes of kernels.h as
 * two ymm, lanes 0..7 and 8..15.  Internal to the kernels.
 * Owns: the lane tree's AVX2 form (k3_avx2_reduce16).  Does not own: the tree's order,
 * which k3_lane_reduce (kernels.h) defines.
 */
#ifndef K3_KERNELS_AVX2_H
#define K3_KERNELS_AVX2_H

#include <immintrin.h>

#include "engine/kernels/kernels_isa.h"

K3_TARGET_BEGIN("avx2")

/* The tree of k3_lane_reduce on lanes lo = 0..7, hi = 8..15. */
static inline float k3_avx2_reduce16(__m256 lo, __m256 hi)
{
    __m256 a8 = _mm256_add_ps(lo, hi);
    __m128 a4 = _mm_add_ps(_mm256_castps256_ps128(a8), _mm256_extractf128_ps(a8, 1));
    __m128 a2 = _mm_add_ps(a4, _mm_movehl_ps(a4, a4));
    return _mm_cvtss_f32(_mm_add_ss(a2, _mm_movehdup_ps(a2)));
}

K3_TARGET_END

#endif
