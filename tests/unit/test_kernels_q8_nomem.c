/* The int8-activation path (K3_MXFP4_ACT=q8) needs no memory of its own: with the address
 * space capped just above what the process holds, so that megabytes of int8 activations
 * cannot be had, an expert's fused w1 + w3 + SiTU and its w2 still give the int8 bytes
 * (the kernels take their activations from the scratch bound before, never an f32 path of
 * their own).  Skips (77) under ASan, whose shadow memory the cap would starve. */
#include <sys/resource.h>
#include <unistd.h>

#include "tests/unit/test_kernels.h"
#include "tests/util.h"

int main(void)
{
#if defined(__SANITIZE_ADDRESS__)
    SKIP("ASan's shadow memory takes the address space the cap would leave");
#else
    k3_mxfp4_set_q8(true);
    enum { T = 32, COLS = 65536, ROWS = 4 };
    struct k3_rng r;
    k3_rng_seed(&r, 13);
    size_t np = (size_t)ROWS * COLS / 2, ns = (size_t)ROWS * COLS / 32, ny = (size_t)T * ROWS;
    uint8_t *p1 = xmalloc(np), *s1 = xmalloc(ns), *p3 = xmalloc(np), *s3 = xmalloc(ns);
    float *X = xmalloc(sizeof *X * T * COLS), *want = xmalloc(sizeof *want * ny);
    float *u = xmalloc(sizeof *u * ny), *got = xmalloc(sizeof *got * ny);
    float *w2 = xmalloc(sizeof *w2 * ny);
    fill_mxfp4(p1, np, s1, ns, &r, 0);
    fill_mxfp4(p3, np, s3, ns, &r, 0);
    fill_x(X, (size_t)T * COLS, &r, 0);
    void *mem = xmalloc(k3_q8_bytes(COLS, T));
    struct k3_q8 xq;
    k3_q8_quantize(&xq, mem, X, COLS, COLS, T);
    k3_rows_mxfp4_q8_scalar(p1, s1, ROWS, &xq, want, ROWS);
    k3_rows_mxfp4_q8_scalar(p3, s3, ROWS, &xq, u, ROWS);
    for (size_t i = 0; i < ny; i++)
        want[i] = k3_situ(want[i], u[i], 4.0f, 25.0f);
    bind_mxfp4_scratch(T, COLS, 1);
    omp_set_num_threads(2);
    /* the same calls for one token before the cap, so that their threads are up (thread
     * stacks are not the point) while a buffer of the kernels' own sized for 32 tokens
     * would still have to grow under it */
    k3_matmul_mxfp4_situ(p1, s1, p3, s3, ROWS, COLS, X, COLS, got, ROWS, 1, 4.0f, 25.0f);
    k3_matmul_mxfp4(p3, s3, ROWS, COLS, X, COLS, w2, ROWS, 1);
    struct rlimit old, cap;
    long held = test_address_space();
    REQUIRE(held > 0 && getrlimit(RLIMIT_AS, &old) == 0, "address space %ld", held);
    cap = (struct rlimit){(rlim_t)held + (2 << 20), old.rlim_max};
    REQUIRE(setrlimit(RLIMIT_AS, &cap) == 0, "setrlimit");
    void *probe = malloc(k3_q8_bytes(COLS, T));
    k3_matmul_mxfp4_situ(p1, s1, p3, s3, ROWS, COLS, X, COLS, got, ROWS, T, 4.0f, 25.0f);
    k3_matmul_mxfp4(p3, s3, ROWS, COLS, X, COLS, w2, ROWS, T);
    REQUIRE(setrlimit(RLIMIT_AS, &old) == 0, "setrlimit back");
    CHECK(!probe, "the cap leaves no room for %zu bytes of int8 activations",
          k3_q8_bytes(COLS, T));
    long d = first_diff(want, got, ny);
    CHECK(d < 0, "fused SiTU without memory: [%ld] %a, int8 reference %a", d, d < 0 ? 0 : got[d],
          d < 0 ? 0 : want[d]);
    d = first_diff(u, w2, ny);
    CHECK(d < 0, "mat-mul without memory: [%ld] %a, int8 reference %a", d, d < 0 ? 0 : w2[d],
          d < 0 ? 0 : u[d]);
    if (check_failures == 0)
        printf("int8 path under an address-space cap: the int8 bytes (%zu bytes of activations "
               "from the bound scratch)\n", k3_q8_bytes(COLS, T));
    free(probe), free(mem), free(p1), free(s1), free(p3), free(s3), free(X), free(want), free(u);
    free(got), free(w2);
    return check_result();
#endif
}

