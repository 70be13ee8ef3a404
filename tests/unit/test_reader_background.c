/* Background requests (prefetches) on both backends: they start only when no foreground
 * request waits and at most background_depth of their chunks are in flight; foreground
 * requests submitted later take the free slots first; k3io_drop takes back exactly the
 * background requests not yet started, which are never read nor returned, while started
 * ones and foreground ones cannot be dropped. */
#include "tests/unit/test_reader.h"

#define AREA_BYTES (1u << 20)
#define LEN (64u << 10)
#define N_BG 4
#define N_FG 3

static const uint64_t seed = 31;

static bool drop_tags_2_and_3(void *ctx, uint64_t tag)
{
    (void)ctx;
    return tag == 102 || tag == 103;
}

static bool drop_any(void *ctx, uint64_t tag)
{
    (void)ctx;
    (void)tag;
    return true;
}

static void run(enum k3io_backend b, int fd, char *area)
{
    struct k3io_config cfg = {.fds = &fd, .n_files = 1, .area = area, .area_bytes = AREA_BYTES,
                              .queue_depth = 4, .max_io_bytes = LEN, .pread_threads = 2,
                              .background_depth = 1};
    struct k3io_reader *r = open_reader(b, cfg);
    if (!r)
        return;
    const char *name = backend_label(b);
    memset(area, 0, AREA_BYTES);
    struct k3io_req bg[N_BG], fg[N_FG];
    for (int i = 0; i < N_BG; i++) /* tags 100.. */
        bg[i] = (struct k3io_req){.len = LEN, .offset = (uint64_t)i * LEN,
                                  .buf = area + (size_t)i * LEN, .tag = 100 + (uint64_t)i};
    for (int i = 0; i < N_FG; i++) /* tags 200.. */
        fg[i] = (struct k3io_req){.len = LEN, .offset = (uint64_t)(N_BG + i) * LEN,
                                  .buf = area + (size_t)(N_BG + i) * LEN, .tag = 200 + (uint64_t)i};

    REQUIRE(k3io_submit_background(r, bg, N_BG) == 0, "submit background");
    CHECK(k3io_stats(r).chunks == 1, "%s: %llu background chunks started, depth is 1", name,
          (unsigned long long)k3io_stats(r).chunks);
    REQUIRE(k3io_submit(r, fg, N_FG) == 0, "submit foreground");
    CHECK(k3io_stats(r).chunks == 1 + N_FG, "%s: %llu chunks started; the foreground should "
          "fill the %d free slots", name, (unsigned long long)k3io_stats(r).chunks, N_FG);
    CHECK(k3io_pending(r) == N_BG + N_FG, "%s: pending %d", name, k3io_pending(r));

    CHECK(k3io_drop(r, drop_tags_2_and_3, NULL) == 2, "%s: dropping two unstarted", name);
    CHECK(k3io_pending(r) == N_BG + N_FG - 2, "%s: pending %d after the drop", name, k3io_pending(r));

    struct k3io_done d[N_BG + N_FG];
    int n = wait_all(r, d, N_BG + N_FG);
    CHECK(n == N_BG + N_FG - 2, "%s: %d returned, want %d", name, n, N_BG + N_FG - 2);
    for (int i = 0; i < N_FG; i++)
        CHECK(result_of(d, n, fg[i].tag) == (int32_t)LEN, "%s: foreground %d", name, i);
    for (int i = 0; i < 2; i++)
        CHECK(result_of(d, n, bg[i].tag) == (int32_t)LEN, "%s: background %d", name, i);
    for (int i = 0; i < N_BG + N_FG; i++) {
        const uint8_t *got = (const uint8_t *)area + (size_t)i * LEN;
        bool dropped = i == 2 || i == 3;
        for (uint32_t k = 0; k < LEN; k++)
            if (got[k] != (dropped ? 0 : pattern_byte(seed, (uint64_t)i * LEN + k))) {
                CHECK(0, "%s: request %d byte %u: %s", name, i, k,
                      dropped ? "a dropped request was read" : "differs from the file");
                break;
            }
    }

    /* Only unstarted background requests can be taken back. */
    REQUIRE(k3io_submit(r, fg, 1) == 0, "resubmit foreground");
    CHECK(k3io_drop(r, drop_any, NULL) == 0, "%s: a foreground request was dropped", name);
    REQUIRE(k3io_submit_background(r, bg, 2) == 0, "resubmit background");
    CHECK(k3io_drop(r, drop_any, NULL) == 1, "%s: want the one unstarted background dropped", name);
    n = wait_all(r, d, N_BG + N_FG);
    CHECK(n == 2, "%s: %d returned after the second drop, want 2", name, n);
    k3io_reader_destroy(r);
}

int main(void)
{
    const char *path = test_path("reader_background.bin");
    make_pattern_file(path, (uint64_t)(N_BG + N_FG) * LEN, seed);
    struct k3io_file f;
    REQUIRE(k3io_open(&f, path, O_RDONLY, true) == 0, "open %s", path);
    char *area = k3io_alloc(AREA_BYTES);
    REQUIRE(area, "alloc");
    for (int i = 0; i < N_TEST_BACKENDS; i++)
        run(test_backends[i], f.fd, area);
    free(area);
    k3io_close(&f);
    unlink(path);
    return reader_result();
}
