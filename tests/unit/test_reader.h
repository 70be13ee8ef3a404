/* Helpers for the reader tests (test_reader_*.c): files of known pseudo-random content,
 * a reader per backend ("io_uring threads" is io_uring with two I/O threads, files dealt
 * to them alternately), waiting for everything outstanding.
 *
 * Where io_uring is absent for a reason the kernel or privileges explain (ENOSYS, EPERM,
 * EOPNOTSUPP) the io_uring runs are skipped and the pread runs still go; the test then
 * ends with reader_result(), which reports a skip (77), not a pass: only pread was
 * tested.  Any other refusal of io_uring fails the test. */
#ifndef K3_TEST_READER_H
#define K3_TEST_READER_H

#include <errno.h>
#include <fcntl.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "iouring/file.h"
#include "iouring/reader.h"
#include "tests/check.h"
#include "tests/util.h"

/* Not a backend of its own: io_uring with io_threads = 2 (test_config). */
#define TEST_URING_THREADS ((enum k3io_backend)100)

static const enum k3io_backend test_backends[] = {K3IO_URING, TEST_URING_THREADS, K3IO_PREAD};
#define N_TEST_BACKENDS 3

static inline const char *backend_label(enum k3io_backend b)
{
    return b == K3IO_URING           ? "io_uring"
           : b == TEST_URING_THREADS ? "io_uring threads"
           : b == K3IO_PREAD         ? "pread"
                                     : "auto";
}

/* cfg for test backend b. */
static inline void test_config(enum k3io_backend b, struct k3io_config *cfg)
{
    static int alternate[64];
    cfg->backend = b == TEST_URING_THREADS ? K3IO_URING : b;
    if (b == TEST_URING_THREADS) {
        REQUIRE(cfg->n_files <= 64, "%d files", cfg->n_files);
        for (int i = 0; i < cfg->n_files; i++)
            alternate[i] = i % 2;
        cfg->io_threads = 2;
        cfg->file_thread = alternate;
    }
}

/* The byte at file offset i of the file made with seed. */
static inline uint8_t pattern_byte(uint64_t seed, uint64_t i)
{
    uint64_t z = seed * 0x9e3779b97f4a7c15ull + (i >> 3) + 1;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return (uint8_t)(z >> (8 * (i & 7)));
}

/* test_tmp()/name (tests/util.h). */
static inline const char *test_path(const char *name)
{
    static char path[4][4096];
    static int next;
    const char *t = test_tmp();
    mkdir(t, 0755);
    char *p = path[next++ % 4];
    snprintf(p, sizeof path[0], "%s/%s", t, name);
    return p;
}

/* Writes size bytes of the seed's pattern to path. */
static inline void make_pattern_file(const char *path, uint64_t size, uint64_t seed)
{
    struct k3io_file f;
    REQUIRE(k3io_open(&f, path, O_RDWR | O_CREAT | O_TRUNC, false) == 0, "create %s", path);
    enum { STEP = 1 << 20 };
    uint8_t *buf = malloc(STEP);
    REQUIRE(buf, "malloc");
    for (uint64_t at = 0; at < size; at += STEP) {
        uint64_t n = size - at < STEP ? size - at : STEP;
        for (uint64_t i = 0; i < n; i++)
            buf[i] = pattern_byte(seed, at + i);
        REQUIRE(k3io_pwrite_full(&f, buf, n, at) == 0, "write %s", path);
    }
    free(buf);
    k3io_close(&f);
}

/* io_uring refusals that mean "absent here" (no kernel support, a seccomp profile or
 * missing privilege, no READ opcodes) rather than a bug. */
static inline bool uring_absent(int rc)
{
    return rc == -ENOSYS || rc == -EPERM || rc == -EOPNOTSUPP;
}

/* Why the io_uring runs were skipped: the first refusal's note, "" while none was. */
static char uring_skipped[256];

/* A reader on backend b, or NULL when b is io_uring and io_uring is absent here (the run
 * is skipped, said so, and remembered for reader_result).  note (NULL: not wanted)
 * receives the reader's note. */
static inline struct k3io_reader *open_reader_note(enum k3io_backend b, struct k3io_config cfg,
                                                   char *note, size_t note_len)
{
    test_config(b, &cfg);
    char own[256];
    if (!note) {
        note = own;
        note_len = sizeof own;
    }
    struct k3io_reader *r = NULL;
    int rc = k3io_reader_create(&r, &cfg, note, note_len);
    if (rc && cfg.backend == K3IO_URING && uring_absent(rc)) {
        printf("io_uring run skipped: %s\n", note);
        if (!uring_skipped[0])
            snprintf(uring_skipped, sizeof uring_skipped, "%s", note[0] ? note : strerror(-rc));
        return NULL;
    }
    REQUIRE(rc == 0, "%s reader: %s (%s)", backend_label(b), strerror(-rc), note);
    REQUIRE(strcmp(k3io_backend_name(r), backend_label(b)) == 0, "asked %s, got %s",
            backend_label(b), k3io_backend_name(r));
    return r;
}

static inline struct k3io_reader *open_reader(enum k3io_backend b, struct k3io_config cfg)
{
    return open_reader_note(b, cfg, NULL, 0);
}

/* A reader test's exit code: 1 when a check failed; else 77 when the io_uring runs were
 * skipped (the pread runs passed, but io_uring was not tested), with the runner's "skip:"
 * line; else 0. */
static inline int reader_result(void)
{
    if (check_failures)
        return 1;
    if (uring_skipped[0]) {
        fprintf(stderr, "skip: io_uring absent, only pread tested: %s\n", uring_skipped);
        return 77;
    }
    return 0;
}

#if defined(__x86_64__)
#define THIS_AUDIT_ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define THIS_AUDIT_ARCH AUDIT_ARCH_AARCH64
#endif

/* System call nr answers -err in this process from now on, in every thread (those
 * running too: TSYNC), and nothing else changes; for a child process, as it cannot be
 * undone.  0, or -errno when seccomp is refused (-ENOTSUP: an architecture not listed
 * above). */
static inline int refuse_syscall(long nr, int err)
{
#ifndef THIS_AUDIT_ARCH
    (void)nr;
    (void)err;
    return -ENOTSUP;
#else
    struct sock_filter filter[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, THIS_AUDIT_ARCH, 0, 3),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (uint32_t)nr, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (uint32_t)err),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = {.len = sizeof filter / sizeof filter[0], .filter = filter};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))
        return -errno;
    return syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, &prog)
               ? -errno : 0;
#endif
}

/* Whether this machine lets a process refuse itself a system call (refuse_syscall, tried
 * in a child): 0, or the -errno it refused with.  A test of refused calls asks once,
 * skips the whole program when it cannot, and counts any child's skip after a yes as a
 * failure, so that no run is skipped inside a passing test. */
static inline int seccomp_probe(void)
{
    fflush(NULL);
    pid_t pid = fork();
    REQUIRE(pid >= 0, "fork");
    if (pid == 0)
        _exit(-refuse_syscall(__NR_io_uring_enter, EPERM) & 0xff);
    int status;
    REQUIRE(waitpid(pid, &status, 0) == pid, "waitpid");
    REQUIRE(WIFEXITED(status), "the seccomp probe's child: status %#x", status);
    return -WEXITSTATUS(status);
}

/* Waits for every outstanding request; done[] gets them by arrival.  Returns how many. */
static inline int wait_all(struct k3io_reader *r, struct k3io_done *done, int cap)
{
    int n = 0;
    while (k3io_pending(r) > 0) {
        int got = k3io_wait(r, done + n, cap - n, 1);
        REQUIRE(got > 0, "k3io_wait: %d (%s)", got, got < 0 ? strerror(-got) : "none");
        n += got;
    }
    return n;
}

/* The result of the request with this tag among done[0..n), which must hold it once. */
static inline int32_t result_of(const struct k3io_done *done, int n, uint64_t tag)
{
    int seen = 0;
    int32_t res = 0;
    for (int i = 0; i < n; i++)
        if (done[i].tag == tag) {
            seen++;
            res = done[i].res;
        }
    REQUIRE(seen == 1, "tag %llu completed %d times", (unsigned long long)tag, seen);
    return res;
}

#endif
