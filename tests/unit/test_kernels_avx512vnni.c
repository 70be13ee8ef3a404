/* The AVX-512 kernels of the VNNI variant give the scalar reference's bytes: dot
 * products (tails, edge scale codes, negative zero nibbles, subnormals, infinities),
 * mat-muls at 1 and 2 threads, the fused SiTU.  Skips (77) on a CPU without AVX-512 F, BW,
 * VL and VNNI. */
#include "tests/unit/test_kernels.h"

int main(void)
{
    return run_variant_tests("avx512vnni");
}
