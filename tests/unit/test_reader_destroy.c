/* Destroying a reader with work outstanding, on both backends: with reads in flight and
 * requests still pending, k3io_reader_destroy waits for every read it started (so none
 * lands in the caller's memory afterwards), starts none of the pending ones, joins the
 * pread workers and frees everything (ASan's leak check covers that). */
#include <time.h>

#include "tests/unit/test_reader.h"

#define SEED 31
#define FILE_BYTES (16u << 20)
#define N_REQ 64
#define LEN (1u << 20)
#define AREA_BYTES ((size_t)N_REQ * LEN)

static void run(enum k3io_backend b, int fd, char *area, bool wait_one)
{
    struct k3io_config cfg = {.fds = &fd, .n_files = 1, .area = area, .area_bytes = AREA_BYTES,
                              .queue_depth = 8, .max_io_bytes = 256 << 10, .pread_threads = 3};
    struct k3io_reader *r = open_reader(b, cfg);
    if (!r)
        return;
    struct k3io_req q[N_REQ];
    for (int i = 0; i < N_REQ; i++)
        q[i] = (struct k3io_req){.file = 0, .len = LEN, .offset = (uint64_t)(i % 16) * LEN,
                                 .buf = area + (size_t)i * LEN, .tag = (uint64_t)i};
    REQUIRE(k3io_submit(r, q, N_REQ) == 0, "submit");
    if (wait_one) {
        struct k3io_done d;
        REQUIRE(k3io_wait(r, &d, 1, 1) == 1, "wait");
    }
    k3io_reader_destroy(r);
    /* anything still landing now would overwrite the marker */
    memset(area, 0x5A, AREA_BYTES);
    nanosleep(&(struct timespec){.tv_nsec = 100 * 1000 * 1000}, NULL);
    size_t changed = 0;
    for (size_t i = 0; i < AREA_BYTES; i++)
        changed += (uint8_t)area[i] != 0x5A;
    CHECK(changed == 0, "%s%s: %zu bytes written after destroy", backend_label(b),
          wait_one ? " after one wait" : "", changed);
}

int main(void)
{
    const char *path = test_path("reader_destroy.bin");
    make_pattern_file(path, FILE_BYTES, SEED);
    struct k3io_file f;
    REQUIRE(k3io_open(&f, path, O_RDONLY, true) == 0, "open %s", path);
    char *area = k3io_alloc(AREA_BYTES);
    REQUIRE(area, "alloc");
    for (int i = 0; i < N_TEST_BACKENDS; i++) {
        run(test_backends[i], f.fd, area, false);
        run(test_backends[i], f.fd, area, true);
    }
    free(area);
    k3io_close(&f);
    unlink(path);
    return reader_result();
}
