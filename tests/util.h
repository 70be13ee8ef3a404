/* Helpers shared by the unit tests: the synthetic k3-tiny checkpoint (made once per test
 * run in $K3_TEST_TMP), the committed fixtures, a test's own folder, small file I/O,
 * base64 for hand-written vocabularies, the address space held. */
#ifndef K3_TESTS_UTIL_H
#define K3_TESTS_UTIL_H

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/base/files.h"
#include "engine/model/config.h"
#include "engine/synth/synth.h"
#include "engine/text/base64.h"
#include "tests/check.h"

static inline const char *test_tmp(void)
{
    const char *t = getenv("K3_TEST_TMP");
    return t && *t ? t : "build/test-tmp";
}

/* A new folder of its own for this run of a test: test_tmp()/NAME.XXXXXX (mkdtemp).
 * The path stays valid until the next call. */
static inline const char *test_tmp_dir(const char *name)
{
    static char dir[4096];
    mkdir(test_tmp(), 0755);
    snprintf(dir, sizeof dir, "%s/%s.XXXXXX", test_tmp(), name);
    REQUIRE(mkdtemp(dir), "mkdtemp %s: %s", dir, strerror(errno));
    return dir;
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

/* p[0..n) in base64 as tiktoken.model spells a token (engine/text/base64.h), with a NUL:
 * out has room for K3_B64_LEN(n) + 1 bytes.  Returns out. */
static inline char *test_b64(const void *p, size_t n, char *out)
{
    out[k3_b64_encode(p, n, out)] = 0;
    return out;
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
