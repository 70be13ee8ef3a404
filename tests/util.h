/* Helpers shared by the unit tests: the synthetic k3-tiny checkpoint (made once per test
 * run in $K3_TEST_TMP), the committed fixtures, small file I/O, the address space held. */
#ifndef K3_TESTS_UTIL_H
#define K3_TESTS_UTIL_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/base/files.h"
#include "engine/model/config.h"
#include "engine/synth/synth.h"
#include "tests/check.h"

static inline const char *test_tmp(void)
{
    const char *t = getenv("K3_TEST_TMP");
    return t && *t ? t : "build/test-tmp";
}

static inline const char *test_root(void)
{
    const char *r = getenv("K3_ROOT");
    return r && *r ? r : ".";
}

/* The k3-tiny checkpoint of the fixtures (seed 1), synthesized on first use. */
static inline const char *tiny_model(void)
{
    static char dir[4096];
    snprintf(dir, sizeof dir, "%s/k3-tiny-seed1", test_tmp());
    struct stat st;
    if (stat(dir, &st) == 0)
        return dir;
    mkdir(test_tmp(), 0755);
    struct k3_config c;
    struct k3_err err;
    REQUIRE(k3_config_named(&c, "k3-tiny", &err) == 0, "%s", err.msg);
    REQUIRE(k3_synth(&c, 1, dir, NULL, &err) == 0, "%s", err.msg);
    k3_config_free(&c);
    return dir;
}

/* Whole file into memory (NUL-terminated); NULL if it cannot be read. */
static inline void *read_file(const char *path, size_t *len)
{
    char *data;
    return k3_read_small_file(path, &data, len, NULL) ? NULL : data;
}

/* The address space in use now, bytes (/proc/self/statm's first field, in pages), or -1:
 * what a test caps RLIMIT_AS just above, so that an allocation fails for real. */
static inline long test_address_space(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    long pages = -1;
    if (f && fscanf(f, "%ld", &pages) != 1)
        pages = -1;
    if (f)
        fclose(f);
    return pages < 0 ? -1 : pages * sysconf(_SC_PAGESIZE);
}

#endif
