/* k3_packed_open's refusals say what went wrong: no drives is "no drives given", and an
 * allocation that fails is "out of memory" (it once said "no drives given" for both).
 * The allocation fails for real: the address space is capped (RLIMIT_AS) in a plain
 * build, and ASan is told to return NULL for large allocations in a sanitized one. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "engine/pack/packed.h"
#include "tests/check.h"
#include "tests/util.h"

#define MANY_DRIVES (1 << 22) /* their tables take over a GiB */

#ifdef __SANITIZE_ADDRESS__
const char *__asan_default_options(void);
const char *__asan_default_options(void)
{
    return "allocator_may_return_null=1:max_allocation_size_mb=256";
}
#endif

int main(void)
{
    struct k3_packed *p = (struct k3_packed *)&p;
    struct k3_err e = {{0}};
    CHECK(k3_packed_open(&p, NULL, 0, (struct k3_share){0}, &e) == -1 && p == NULL && strstr(e.msg, "no drives given"),
          "no drives: %s", e.msg);

    const char **paths = malloc(sizeof *paths * MANY_DRIVES);
    REQUIRE(paths, "test setup: out of memory");
    for (int i = 0; i < MANY_DRIVES; i++)
        paths[i] = "/nonexistent/k3-drive";
#ifndef __SANITIZE_ADDRESS__
    struct rlimit was;
    REQUIRE(getrlimit(RLIMIT_AS, &was) == 0, "getrlimit");
    long held = test_address_space();
    REQUIRE(held > 0, "address space %ld", held);
    struct rlimit cap = {(rlim_t)held + (256u << 20), was.rlim_max};
    if (setrlimit(RLIMIT_AS, &cap))
        SKIP("cannot cap the address space here");
#endif
    memset(&e, 0, sizeof e);
    int rc = k3_packed_open(&p, paths, MANY_DRIVES, (struct k3_share){0}, &e);
#ifndef __SANITIZE_ADDRESS__
    setrlimit(RLIMIT_AS, &was);
#endif
    CHECK(rc == -1 && p == NULL && strstr(e.msg, "out of memory"),
          "tables for %d drives cannot be allocated: %s", MANY_DRIVES, e.msg);
    free(paths);
    return check_result();
}
