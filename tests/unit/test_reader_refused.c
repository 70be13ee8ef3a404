/* AUTO falls back to pread where io_uring is refused, the one unprivileged test of that
 * fallback: in a child process a seccomp filter makes io_uring_setup answer EPERM (as
 * Docker's default profile does) or ENOSYS (as a kernel without io_uring does); AUTO then
 * serves through pread and its note names the call and the errno text, and K3IO_URING
 * fails with that errno.  Skips (77) where io_uring is absent already or seccomp cannot
 * be installed, fails where io_uring is refused for any other reason; a child that skips
 * after those were found fails. */
#include <sys/syscall.h>
#include <sys/wait.h>

#include "tests/unit/test_reader.h"

#define SEED 5
#define FILE_BYTES (2u << 20)
#define AREA_BYTES (2u << 20)

/* Reads the whole file into area through r and checks the bytes. */
static void read_back(struct k3io_reader *r, char *area, const char *what)
{
    struct k3io_req q = {.file = 0, .len = FILE_BYTES, .offset = 0, .buf = area, .tag = 9};
    memset(area, 0, FILE_BYTES);
    REQUIRE(k3io_submit(r, &q, 1) == 0, "%s: submit", what);
    struct k3io_done d;
    REQUIRE(k3io_wait(r, &d, 1, 1) == 1, "%s: wait", what);
    CHECK(d.tag == 9 && d.res == (int32_t)FILE_BYTES, "%s: res %d", what, d.res);
    for (uint32_t i = 0; i < FILE_BYTES; i++)
        if ((uint8_t)area[i] != pattern_byte(SEED, i)) {
            CHECK(0, "%s: byte %u differs", what, i);
            break;
        }
}

static struct k3io_reader *create(enum k3io_backend b, int *fd, char *area, char *note,
                                  size_t note_len, int *rc)
{
    struct k3io_config cfg = {.backend = b, .fds = fd, .n_files = 1, .area = area,
                              .area_bytes = AREA_BYTES, .pread_threads = 2};
    struct k3io_reader *r = NULL;
    *rc = k3io_reader_create(&r, &cfg, note, note_len);
    return r;
}

/* In a child process: refuse io_uring with err, then check AUTO and URING. */
static void refused(int err, int fd, char *area)
{
    fflush(NULL);
    pid_t pid = fork();
    REQUIRE(pid >= 0, "fork");
    if (pid == 0) {
        int rc = refuse_syscall(__NR_io_uring_setup, err);
        if (rc)
            SKIP("seccomp filter refused: %s", strerror(-rc));
        char note[200], want[120];
        struct k3io_reader *r = create(K3IO_AUTO, &fd, area, note, sizeof note, &rc);
        REQUIRE(rc == 0, "AUTO with io_uring refused (%s): %s", strerror(err), strerror(-rc));
        CHECK(strcmp(k3io_backend_name(r), "pread") == 0, "AUTO chose %s", k3io_backend_name(r));
        snprintf(want, sizeof want, "io_uring unavailable (io_uring_queue_init_params: %s); "
                 "2 pread threads", strerror(err));
        CHECK(strcmp(note, want) == 0, "note \"%s\", want \"%s\"", note, want);
        printf("refused with %s: note \"%s\"\n", strerror(err), note);
        read_back(r, area, "AUTO fallen back to pread");
        k3io_reader_destroy(r);

        r = create(K3IO_URING, &fd, area, note, sizeof note, &rc);
        CHECK(rc == -err && !r, "URING with io_uring refused: rc %d", rc);
        CHECK(strstr(note, strerror(err)), "URING note \"%s\"", note);
        exit(check_result());
    }
    int status;
    REQUIRE(waitpid(pid, &status, 0) == pid, "waitpid");
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child for %s: status %#x%s",
          strerror(err), status,
          WIFEXITED(status) && WEXITSTATUS(status) == 77 ? " (skipped after the probe)" : "");
}

int main(void)
{
    const char *path = test_path("reader_refused.bin");
    make_pattern_file(path, FILE_BYTES, SEED);
    struct k3io_file f;
    REQUIRE(k3io_open(&f, path, O_RDONLY, true) == 0, "open %s", path);
    char *area = k3io_alloc(AREA_BYTES);
    REQUIRE(area, "alloc");
    char note[200];
    int rc;
    /* A fallback here would not show it was the refusal's: io_uring must work first.
     * Refused for a reason other than absence (a ring set-up regression) fails. */
    struct k3io_reader *r = create(K3IO_URING, &f.fd, area, note, sizeof note, &rc);
    if (rc && uring_absent(rc))
        SKIP("io_uring absent on this machine already: %s", note);
    REQUIRE(rc == 0, "io_uring reader: %s (%s)", strerror(-rc), note);
    k3io_reader_destroy(r);
    rc = seccomp_probe();
    if (rc)
        SKIP("seccomp filter refused: %s", strerror(-rc));

    refused(EPERM, f.fd, area);
    refused(ENOSYS, f.fd, area);

    free(area);
    k3io_close(&f);
    unlink(path);
    return check_result();
}
