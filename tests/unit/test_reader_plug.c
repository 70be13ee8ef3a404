/* k3io_plug batches submissions, and the syscall counter counts them: on one ring, N
 * requests submitted one call at a time enter the kernel N times, and the same N
 * submitted between k3io_plug and k3io_unplug enter it once, at the unplug, with nothing
 * started before it; on the pread pool nothing is read before the unplug and each chunk
 * is one pread; on every backend the bytes land right. */
#include <time.h>

#include "tests/unit/test_reader.h"

#define SEED 29
#define N_REQ 8
#define LEN (64u << 10)
#define AREA_BYTES (N_REQ * LEN)

static void requests(char *area, struct k3io_req q[N_REQ])
{
    for (int i = 0; i < N_REQ; i++)
        q[i] = (struct k3io_req){.len = LEN, .offset = (uint64_t)(N_REQ - 1 - i) * LEN,
                                 .buf = area + (size_t)i * LEN, .tag = (uint64_t)i};
}

/* Every request landed whole, with the file's bytes. */
static void check_landed(const char *name, const char *area, const struct k3io_done *d, int n)
{
    CHECK(n == N_REQ, "%s: %d completions, want %d", name, n, N_REQ);
    for (int i = 0; i < n; i++)
        CHECK(d[i].res == (int32_t)LEN, "%s: request %llu read %d", name,
              (unsigned long long)d[i].tag, d[i].res);
    for (int i = 0; i < N_REQ; i++)
        for (uint32_t k = 0; k < LEN; k += 4093) {
            uint64_t at = (uint64_t)(N_REQ - 1 - i) * LEN + k;
            if (area[(size_t)i * LEN + k] != (char)pattern_byte(SEED, at)) {
                CHECK(0, "%s: request %d: wrong byte at file offset %llu", name, i,
                      (unsigned long long)at);
                return;
            }
        }
}

static void run(enum k3io_backend b, int fd, char *area, bool plugged)
{
    struct k3io_config cfg = {.fds = &fd, .n_files = 1, .area = area, .area_bytes = AREA_BYTES,
                              .queue_depth = 2 * N_REQ, .max_io_bytes = LEN, .pread_threads = 2};
    struct k3io_reader *r = open_reader(b, cfg);
    if (!r)
        return;
    char name[64];
    snprintf(name, sizeof name, "%s, %s", backend_label(b), plugged ? "plugged" : "one call each");
    memset(area, 0, AREA_BYTES);
    struct k3io_req q[N_REQ];
    requests(area, q);
    uint64_t before = k3io_stats(r).syscalls;
    if (plugged)
        k3io_plug(r);
    for (int i = 0; i < N_REQ; i++)
        REQUIRE(k3io_submit(r, &q[i], 1) == 0, "%s: submit %d", name, i);
    uint64_t submitted = k3io_stats(r).syscalls - before;
    if (plugged) {
        nanosleep(&(struct timespec){.tv_nsec = 20000000}, NULL); /* a worker would have read */
        CHECK(submitted == 0 && k3io_stats(r).bytes == 0,
              "%s: %llu system calls and %llu bytes read before the unplug", name,
              (unsigned long long)submitted, (unsigned long long)k3io_stats(r).bytes);
        REQUIRE(k3io_unplug(r) == 0, "%s: unplug", name);
        submitted = k3io_stats(r).syscalls - before;
    }
    if (b == K3IO_URING)
        CHECK(submitted == (plugged ? 1 : N_REQ), "%s: %llu io_uring_enter calls to submit "
              "%d requests, want %d", name, (unsigned long long)submitted, N_REQ,
              plugged ? 1 : N_REQ);
    struct k3io_done d[N_REQ];
    int n = wait_all(r, d, N_REQ);
    check_landed(name, area, d, n);
    uint64_t all = k3io_stats(r).syscalls - before;
    if (b == K3IO_PREAD)
        CHECK(all == N_REQ, "%s: %llu system calls for %d one-chunk reads, want one pread each",
              name, (unsigned long long)all, N_REQ);
    else
        CHECK(all > submitted, "%s: waiting made no system call (%llu in all)", name,
              (unsigned long long)all);
    printf("%s: %llu system calls to submit, %llu in all\n", name,
           (unsigned long long)submitted, (unsigned long long)all);
    k3io_reader_destroy(r);
}

int main(void)
{
    const char *path = test_path("reader_plug.bin");
    make_pattern_file(path, AREA_BYTES, SEED);
    struct k3io_file f;
    REQUIRE(k3io_open(&f, path, O_RDONLY, true) == 0, "open %s", path);
    char *area = k3io_alloc(AREA_BYTES);
    REQUIRE(area, "alloc");
    for (int i = 0; i < N_TEST_BACKENDS; i++)
        for (int plugged = 0; plugged < 2; plugged++)
            run(test_backends[i], f.fd, area, plugged);
    free(area);
    k3io_close(&f);
    unlink(path);
    return reader_result();
}
