/* Errors complete the request with the kernel's -errno, on both backends, and leave the
 * reader usable: a descriptor that is -1 or not open (EBADF), a directory (EISDIR), a
 * write-only descriptor (EBADF), a misaligned direct read (EINVAL); a failed request of
 * several chunks completes once.  Requests the reader cannot take (file index out of
 * range, len 0, a buffer outside the area) are refused by k3io_submit with -EINVAL and
 * none of the batch is queued; so is a batch the refusal hook refuses (-ENOMEM, as when
 * memory for it runs out), foreground or background, and the reader then takes the
 * next; configurations it cannot honour are refused by create. */
#include "tests/unit/test_reader.h"

#define SEED 3
#define FILE_BYTES (4u << 20)
#define AREA_BYTES (16u << 20)

enum { GOOD, MINUS_ONE, CLOSED, DIR_FD, WRITE_ONLY, N_FILES };

struct err_case {
    int file;
    uint64_t offset;
    uint32_t len;
    int32_t want;
};

static const struct err_case cases[] = {
    {GOOD, 0, 64 << 10, 64 << 10},
    {MINUS_ONE, 0, 4096, -EBADF},
    {CLOSED, 0, 4096, -EBADF},
    {DIR_FD, 0, 4096, -EISDIR},
    {WRITE_ONLY, 0, 4096, -EBADF},
    {CLOSED, 0, 3u << 20, -EBADF},       /* 3 chunks, one completion */
    {GOOD, 4096, 1u << 20, 1u << 20},
};
#define N_CASES (int)(sizeof cases / sizeof cases[0])

/* A descriptor number that is not open (and high, so the ring's own fd will not take it). */
static int closed_fd(void)
{
    for (int fd = 900; fd < 1000; fd++)
        if (fcntl(fd, F_GETFD) < 0 && errno == EBADF)
            return fd;
    return -1;
}

/* The refusal hook: refuses while *left counts down to 0. */
static int refuse_first(void *ctx, int n)
{
    int *left = ctx;
    if (*left <= 0)
        return 0;
    --*left;
    return -ENOMEM;
}

static void refusals(struct k3io_reader *r, const char *name, const struct k3io_req *req)
{
    int left = 2;
    struct k3io_done done[1];
    k3io_set_refusal(r, refuse_first, &left);
    CHECK(k3io_submit(r, req, 2) == -ENOMEM, "%s: a refused submit returned otherwise", name);
    CHECK(k3io_submit_background(r, req, 2) == -ENOMEM,
          "%s: a refused background submit returned otherwise", name);
    CHECK(k3io_pending(r) == 0, "%s: refusals left %d pending", name, k3io_pending(r));
    REQUIRE(k3io_submit(r, req, 1) == 0, "%s: submit after refusals", name);
    int n = wait_all(r, done, 1);
    CHECK(n == 1 && done[0].tag == 0 && done[0].res == cases[0].want,
          "%s: after refusals, %d completions (tag %llu, res %d)", name, n,
          (unsigned long long)done[0].tag, done[0].res);
    k3io_set_refusal(r, NULL, NULL);
}

static void run(enum k3io_backend b, const int *fds, bool direct, char *area)
{
    struct k3io_config cfg = {.fds = fds, .n_files = N_FILES, .area = area,
                              .area_bytes = AREA_BYTES, .queue_depth = 4,
                              .max_io_bytes = 1u << 20, .pread_threads = 2};
    struct k3io_reader *r = open_reader(b, cfg);
    if (!r)
        return;
    const char *name = backend_label(b);
    struct k3io_req req[N_CASES + 1];
    for (int i = 0; i < N_CASES; i++)
        req[i] = (struct k3io_req){.file = (uint32_t)cases[i].file, .len = cases[i].len,
                                   .offset = cases[i].offset,
                                   .buf = area + (size_t)i * (3u << 20) / 2 / 4096 * 4096,
                                   .tag = (uint64_t)i};
    /* the cases' buffers overlap only among failing reads, which write nothing */
    struct k3io_done done[N_CASES + 1];
    for (int round = 0; round < 2; round++) { /* twice: usable after errors */
        REQUIRE(k3io_submit(r, req, N_CASES) == 0, "submit");
        int n = wait_all(r, done, N_CASES);
        CHECK(n == N_CASES, "%s: %d completions for %d requests", name, n, N_CASES);
        for (int i = 0; i < N_CASES; i++) {
            int32_t res = result_of(done, n, (uint64_t)i);
            CHECK(res == cases[i].want, "%s round %d case %d: res %d (%s), want %d (%s)", name,
                  round, i, res, res < 0 ? strerror(-res) : "bytes", cases[i].want,
                  cases[i].want < 0 ? strerror(-cases[i].want) : "bytes");
        }
    }

    if (direct) { /* the kernel's alignment check, through the reader */
        struct k3io_req mis = {.file = GOOD, .len = 4096, .offset = 100, .buf = area, .tag = 77};
        REQUIRE(k3io_submit(r, &mis, 1) == 0, "submit");
        REQUIRE(k3io_wait(r, done, 1, 1) == 1, "wait");
        CHECK(done[0].tag == 77 && done[0].res == -EINVAL, "%s: misaligned direct read gave %d",
              name, done[0].res);
    }

    /* refused at submit, and nothing of the batch queued */
    struct k3io_req bad[] = {
        {.file = N_FILES, .len = 4096, .buf = area},
        {.file = GOOD, .len = 0, .buf = area},
        {.file = GOOD, .len = 8192, .buf = area + AREA_BYTES - 4096},
        {.file = GOOD, .len = 4096, .buf = area - 4096},
    };
    for (int i = 0; i < (int)(sizeof bad / sizeof bad[0]); i++) {
        struct k3io_req two[2] = {req[0], bad[i]};
        CHECK(k3io_submit(r, two, 2) == -EINVAL, "%s: bad request %d accepted", name, i);
        CHECK(k3io_pending(r) == 0, "%s: bad request %d left %d pending", name, i, k3io_pending(r));
    }
    refusals(r, name, req);
    k3io_reader_destroy(r);
}

/* Configurations the reader refuses: -EINVAL, no reader. */
static void bad_configs(int fd, char *area)
{
    const struct k3io_config good = {.fds = &fd, .n_files = 1, .area = area,
                                     .area_bytes = AREA_BYTES};
    struct k3io_config bad[5];
    for (int i = 0; i < 5; i++)
        bad[i] = good;
    bad[0].max_io_bytes = 6000;           /* not a multiple of 4096 */
    bad[1].max_io_bytes = 0x80000000u;    /* over 1 GiB */
    bad[2].queue_depth = 40000;           /* over io_uring's 32768 entries */
    bad[3].n_files = -1;
    bad[4].area = NULL;                   /* area_bytes without an area */
    for (int i = 0; i < 5; i++) {
        struct k3io_reader *r = (struct k3io_reader *)1;
        CHECK(k3io_reader_create(&r, &bad[i], NULL, 0) == -EINVAL && r == NULL,
              "bad config %d accepted", i);
    }
}

int main(void)
{
    const char *path = test_path("reader_errors.bin");
    make_pattern_file(path, FILE_BYTES, SEED);
    char *area = k3io_alloc(AREA_BYTES);
    REQUIRE(area, "alloc");
    int wronly = open(path, O_WRONLY | O_CLOEXEC);
    int dir = open(test_path(""), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    REQUIRE(wronly >= 0 && dir >= 0, "open: %s", strerror(errno));
    for (int direct = 1; direct >= 0; direct--) {
        struct k3io_file good;
        REQUIRE(k3io_open(&good, path, O_RDONLY, direct) == 0, "open %s", path);
        int fds[N_FILES] = {[GOOD] = good.fd, [MINUS_ONE] = -1, [CLOSED] = closed_fd(),
                            [DIR_FD] = dir, [WRITE_ONLY] = wronly};
        REQUIRE(fds[CLOSED] >= 0, "no closed descriptor number found");
        for (int i = 0; i < N_TEST_BACKENDS; i++)
            run(test_backends[i], fds, good.direct, area);
        k3io_close(&good);
    }
    bad_configs(wronly, area);
    close(wronly);
    close(dir);
    free(area);
    unlink(path);
    return reader_result();
}
