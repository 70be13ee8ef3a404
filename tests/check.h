/* Minimal assertions for the unit tests: each test is a small program that exits
 * 0 (pass), 1 (fail) or 77 (skip: the machine lacks a feature), as liburing's do.
 * CHECK keeps going after a failure so one run shows every property that broke. */
#ifndef K3_TESTS_CHECK_H
#define K3_TESTS_CHECK_H

#include <stdio.h>
#include <stdlib.h>

static int check_failures;

#define CHECK(cond, ...)                                                         \
    do {                                                                         \
        if (!(cond)) {                                                           \
            fprintf(stderr, "%s:%d: CHECK(%s) failed: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                        \
            fputc('\n', stderr);                                                 \
            check_failures++;                                                    \
        }                                                                        \
    } while (0)

/* Stops the test at once: for failures that make the rest meaningless. */
#define REQUIRE(cond, ...)                                                       \
    do {                                                                         \
        int check_before_ = check_failures;                                      \
        CHECK(cond, __VA_ARGS__);                                                \
        if (check_failures != check_before_)                                     \
            exit(1);                                                             \
    } while (0)

#define SKIP(...)                                                                \
    do {                                                                         \
        fprintf(stderr, "skip: " __VA_ARGS__);                                   \
        fputc('\n', stderr);                                                     \
        exit(77);                                                                \
    } while (0)

/* How many times slower a sanitized build runs than a release one, for the few bounds a
 * test puts on CPU time (never wall time, which another tenant's load stretches): ASan
 * and UBSan together run the tokenizer and the synthesis 2-5x slower, so 6 with margin. */
#if defined(__SANITIZE_ADDRESS__)
#define CHECK_SLOWDOWN 6.0
#else
#define CHECK_SLOWDOWN 1.0
#endif

static inline int check_result(void)
{
    return check_failures ? 1 : 0;
}

#endif
