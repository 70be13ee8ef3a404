/* A ring the kernel stops serving: when every io_uring_enter fails with an error that is
 * not "try again" (ENXIO, EBADF), the error reaches the caller on both io_uring backends
 * (k3io_submit queues the requests and returns 0, as its all-or-nothing contract says;
 * k3io_wait returns the error, and keeps returning it) within
 * seconds, instead of the reader waiting for completions that never come; destroy then
 * returns.  Each case runs in a child process whose seccomp filter makes io_uring_enter
 * answer the error, from the reader's creation on (setting a ring up does not enter it)
 * or from the middle of its work (a batch read first); an alarm turns a hang into a
 * failure.  Without io_uring or seccomp here the whole program skips; a run that skips
 * alone fails. */
#include <signal.h>
#include <sys/wait.h>

#include "tests/unit/test_reader.h"

#define SEED 41
#define FILE_BYTES (1u << 20)
#define AREA_BYTES (1u << 20)
#define HANG_SECONDS 10

static const int errs[] = {ENXIO, EBADF};

/* In the child: enter refused with err (mid_run: after a batch has been read), the reader
 * on backend b must give err back. */
static void child(enum k3io_backend b, int fd, char *area, int err, bool mid_run)
{
    alarm(HANG_SECONDS);
    int rc = mid_run ? 0 : refuse_syscall(__NR_io_uring_enter, err);
    if (rc)
        SKIP("seccomp filter refused: %s", strerror(-rc));
    struct k3io_config cfg = {.fds = &fd, .n_files = 1, .area = area, .area_bytes = AREA_BYTES,
                              .queue_depth = 4, .max_io_bytes = 64u << 10};
    struct k3io_reader *r = open_reader(b, cfg);
    if (!r)
        exit(reader_result());
    char name[128];
    snprintf(name, sizeof name, "%s, %s, io_uring_enter refused (%s)", backend_label(b),
             mid_run ? "mid-run" : "from creation", strerror(err));
    struct k3io_req q[4];
    for (int i = 0; i < 4; i++)
        q[i] = (struct k3io_req){.len = 256u << 10, .offset = (uint64_t)i << 18,
                                 .buf = area + ((size_t)i << 18), .tag = (uint64_t)i};
    struct k3io_done d[4];
    if (mid_run) {
        REQUIRE(k3io_submit(r, q, 4) == 0, "%s: first submit", name);
        REQUIRE(wait_all(r, d, 4) == 4, "%s: first batch", name);
        rc = refuse_syscall(__NR_io_uring_enter, err);
        if (rc)
            SKIP("seccomp filter refused: %s", strerror(-rc));
    }
    rc = k3io_submit(r, q, 4);
    CHECK(rc == 0, "%s: submit gave %d (%s), not 0 (queued)", name, rc, strerror(-rc));
    int got = k3io_wait(r, d, 4, 4);
    CHECK(got == -err, "%s: wait gave %d (%s)", name, got, got < 0 ? strerror(-got) : "completions");
    got = k3io_wait(r, d, 4, 1);
    CHECK(got == -err, "%s: a second wait gave %d", name, got);
    k3io_reader_destroy(r);
    printf("%s: submit %d, wait %d; destroyed\n", name, rc, got);
    exit(check_result());
}

int main(void)
{
    const char *path = test_path("reader_enter.bin");
    make_pattern_file(path, FILE_BYTES, SEED);
    struct k3io_file f;
    REQUIRE(k3io_open(&f, path, O_RDONLY, true) == 0, "open %s", path);
    char *area = k3io_alloc(AREA_BYTES);
    REQUIRE(area, "alloc");
    /* io_uring and seccomp present, or the whole program skips: no run is skipped alone */
    struct k3io_config probe = {.fds = &f.fd, .n_files = 1, .area = area, .area_bytes = AREA_BYTES};
    struct k3io_reader *r = open_reader(K3IO_URING, probe);
    if (!r)
        SKIP("io_uring absent here: %s", uring_skipped);
    k3io_reader_destroy(r);
    int rc = seccomp_probe();
    if (rc)
        SKIP("seccomp filter refused: %s", strerror(-rc));
    for (int i = 0; i < N_TEST_BACKENDS; i++) {
        enum k3io_backend b = test_backends[i];
        if (b == K3IO_PREAD) /* no ring */
            continue;
        for (int mid_run = 0; mid_run < 2; mid_run++)
            for (size_t e = 0; e < sizeof errs / sizeof errs[0]; e++) {
                fflush(NULL);
                pid_t pid = fork();
                REQUIRE(pid >= 0, "fork");
                if (pid == 0)
                    child(b, f.fd, area, errs[e], mid_run);
                int status;
                REQUIRE(waitpid(pid, &status, 0) == pid, "waitpid");
                const char *when = mid_run ? "mid-run" : "from creation";
                if (WIFEXITED(status) && WEXITSTATUS(status) == 77)
                    CHECK(0, "%s, %s, %s: skipped where io_uring and seccomp serve",
                          backend_label(b), when, strerror(errs[e]));
                else if (WIFSIGNALED(status) && WTERMSIG(status) == SIGALRM)
                    CHECK(0, "%s, %s, io_uring_enter refused (%s): still waiting after %d s",
                          backend_label(b), when, strerror(errs[e]), HANG_SECONDS);
                else
                    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                          "%s, %s, %s: child status %#x", backend_label(b), when,
                          strerror(errs[e]), status);
            }
    }
    free(area);
    k3io_close(&f);
    unlink(path);
    return check_result();
}
