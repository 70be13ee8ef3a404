/* What the AVX-512 files share (kernels_avx512.c, mxfp4_avx512.c): the 16 lanes of
 * kernels.h as one zmm.  Internal to the kernels.
 * Owns: the lane tree's AVX-512 form (k3_avx512_reduce16).  Does not own: the tree's
 * order, which k3_lane_reduce (kernels.h) defines.
 */
#ifndef K3_KERNELS_AVX512_H
#define K3_KERNELS_AVX512_H

#include <immintrin.h>

#include "engine/kernels/avx2.h"
#include "engine/kernels/kernels_isa.h"

K3_TARGET_BEGIN("avx512f,avx512bw,avx512vl")

/* The tree of k3_lane_reduce, in registers: (l, l+8), (l, l+4), (l, l+2), (l, l+1). */
static inline float k3_avx512_reduce16(__m512 acc)
{
    __m256 lo = _mm512_castps512_ps256(acc);
    __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc), 1));
    return k3_avx2_reduce16(lo, hi);
}

K3_TARGET_END

#endif
