/* Counters, on both backends: requests accepted, chunks cut (a request of 2.5 max_io is
 * three when the queue holds them all; at depth 1 the chunks past the end of file are
 * never cut), bytes read, short-read resubmissions at a buffered end of file (one: the
 * remainder, which reads nothing) and none at a direct one (the unaligned count is the
 * end), time blocked in k3io_wait. */

#include "engine/base/clock.h"
#include "tests/unit/test_reader.h"

#define SEED 17
#define FILE_BYTES ((1u << 20) + 100)
#define AREA_BYTES (8u << 20)
#define MiB (1u << 20)

static void run(enum k3io_backend b, const struct k3io_file *f, char *area, unsigned depth)
{
    struct k3io_config cfg = {.fds = &f->fd, .n_files = 1, .area = area,
                              .area_bytes = AREA_BYTES, .queue_depth = depth,
                              .max_io_bytes = MiB, .pread_threads = 2};
    struct k3io_reader *r = open_reader(b, cfg);
    if (!r)
        return;
    char name[32];
    snprintf(name, sizeof name, "%s depth %u", backend_label(b), depth);
    const char *mode = f->direct ? "direct" : "buffered";
    struct k3io_stats st = k3io_stats(r);
    CHECK(st.requests == 0 && st.chunks == 0 && st.bytes == 0 && st.wait_seconds == 0,
          "%s %s: a new reader's counters are not zero", name, mode);

    /* 1 MiB in 1 chunk; 4 KiB in 1; the file's 1 MiB + 100 from a 2.5 MiB request */
    struct k3io_req q[] = {
        {.file = 0, .len = MiB, .offset = 0, .buf = area, .tag = 1},
        {.file = 0, .len = 4096, .offset = 8192, .buf = area + MiB, .tag = 2},
        {.file = 0, .len = 5 * MiB / 2, .offset = 0, .buf = area + 2 * MiB, .tag = 3},
    };
    double t0 = k3_now();
    REQUIRE(k3io_submit(r, q, 3) == 0, "submit");
    struct k3io_done d[3];
    int n = wait_all(r, d, 3);
    double elapsed = k3_now() - t0;
    CHECK(result_of(d, n, 1) == (int32_t)MiB && result_of(d, n, 2) == 4096 &&
              result_of(d, n, 3) == (int32_t)FILE_BYTES,
          "%s %s: results %d %d %d", name, mode, result_of(d, n, 1), result_of(d, n, 2),
          result_of(d, n, 3));
    st = k3io_stats(r);
    /* depth 1: the second chunk of request 3 meets the end of file before a third is cut */
    uint64_t want_chunks = depth >= 5 ? 5 : 4, want_short = f->direct ? 0 : 1;
    CHECK(st.requests == 3, "%s %s: requests %llu", name, mode, (unsigned long long)st.requests);
    CHECK(st.chunks == want_chunks, "%s %s: chunks %llu, want %llu", name, mode,
          (unsigned long long)st.chunks, (unsigned long long)want_chunks);
    CHECK(st.bytes == MiB + 4096 + FILE_BYTES, "%s %s: bytes %llu, want %llu", name, mode,
          (unsigned long long)st.bytes, (unsigned long long)(MiB + 4096 + FILE_BYTES));
    CHECK(st.resubmit_short == want_short && st.resubmit_eagain == 0 && st.resubmit_eintr == 0,
          "%s %s: resubmits short %llu eagain %llu eintr %llu", name, mode,
          (unsigned long long)st.resubmit_short, (unsigned long long)st.resubmit_eagain,
          (unsigned long long)st.resubmit_eintr);
    CHECK(st.wait_seconds >= 0 && st.wait_seconds <= elapsed, "%s %s: waited %.6f s of %.6f s",
          name, mode, st.wait_seconds, elapsed);

    /* a request that only starts past the end: one chunk, reading nothing */
    struct k3io_req past = {.file = 0, .len = 3 * MiB, .offset = 4 * MiB, .buf = area, .tag = 4};
    REQUIRE(k3io_submit(r, &past, 1) == 0, "submit");
    n = wait_all(r, d, 1);
    struct k3io_stats st2 = k3io_stats(r);
    CHECK(n == 1 && d[0].res == 0, "%s %s: past the end gave %d", name, mode, d[0].res);
    CHECK(st2.requests == 4 && st2.bytes == st.bytes, "%s %s: requests %llu bytes %llu", name,
          mode, (unsigned long long)st2.requests, (unsigned long long)st2.bytes);
    CHECK(st2.chunks == st.chunks + (depth >= 3 ? 3 : 1), "%s %s: %llu chunks for a read past the end", name, mode,
          (unsigned long long)(st2.chunks - st.chunks));
    k3io_reader_destroy(r);
}

int main(void)
{
    const char *path = test_path("reader_stats.bin");
    make_pattern_file(path, FILE_BYTES, SEED);
    char *area = k3io_alloc(AREA_BYTES);
    REQUIRE(area, "alloc");
    for (int direct = 1; direct >= 0; direct--) {
        struct k3io_file f;
        REQUIRE(k3io_open(&f, path, O_RDONLY, direct) == 0, "open %s", path);
        for (int i = 0; i < N_TEST_BACKENDS; i++)
            for (unsigned depth = 1; depth <= 8; depth += 7)
                run(test_backends[i], &f, area, depth);
        k3io_close(&f);
    }
    free(area);
    unlink(path);
    return reader_result();
}
