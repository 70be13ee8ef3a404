/* Completions carry the caller's tags and nothing else ties them to requests: on both
 * backends, requests over two files with scattered 64-bit tags each come back exactly once
 * with their own result and bytes, whatever the order (printed, not assumed); k3io_wait
 * honours max and min (min capped at what is outstanding, so it cannot hang), max 0 and
 * min 0 return at once, and k3io_pending counts down. */
#include "tests/unit/test_reader.h"

#define N_REQ 96
#define AREA_BYTES (32u << 20)

static const uint64_t seeds[2] = {21, 22};
static const uint64_t sizes[2] = {6u << 20, (5u << 20) + 3000};

static uint64_t tag_of(int i)
{
    return ((uint64_t)i * 0x9e3779b97f4a7c15ull) ^ 0xfeedull; /* scattered, never i */
}

static void run(enum k3io_backend b, const int *fds, char *area)
{
    struct k3io_config cfg = {.fds = fds, .n_files = 2, .area = area, .area_bytes = AREA_BYTES,
                              .queue_depth = 6, .max_io_bytes = 256 << 10, .pread_threads = 4};
    struct k3io_reader *r = open_reader(b, cfg);
    if (!r)
        return;
    const char *name = backend_label(b);
    struct k3io_req q[N_REQ];
    int32_t want[N_REQ];
    uint64_t used = 0;
    for (int i = 0; i < N_REQ; i++) {
        uint32_t file = (uint32_t)(i % 2);
        /* long ones first among short ones, and some over the end of the odd file */
        uint32_t len = (i % 5 == 0 ? 1024 : 16) * 1024;
        uint64_t off = (uint64_t)(i * 37 % 80) * 65536;
        q[i] = (struct k3io_req){.file = file, .len = len, .offset = off, .buf = area + used,
                                 .tag = tag_of(i)};
        uint64_t avail = off < sizes[file] ? sizes[file] - off : 0;
        want[i] = (int32_t)(avail < len ? avail : len);
        used += len;
    }
    REQUIRE(used <= AREA_BYTES, "area too small");
    memset(area, 0, AREA_BYTES);

    struct k3io_done none;
    CHECK(k3io_wait(r, &none, 0, 0) == 0, "%s: wait on nothing", name);
    CHECK(k3io_wait(r, &none, 1, 5) == 0, "%s: min 5 with nothing outstanding", name);
    REQUIRE(k3io_submit(r, q, N_REQ) == 0, "submit");
    CHECK(k3io_wait(r, &none, 0, 1) == 0, "%s: max 0 returned something", name);

    struct k3io_done d[N_REQ];
    int n = 0, out_of_order = 0;
    while (n < N_REQ - 8) { /* one or two at a time */
        int got = k3io_wait(r, d + n, 2, 1);
        REQUIRE(got == 1 || got == 2, "%s: wait(max 2, min 1) gave %d", name, got);
        n += got;
        CHECK(k3io_pending(r) == N_REQ - n, "%s: pending %d after %d returned", name,
              k3io_pending(r), n);
    }
    int got = k3io_wait(r, d + n, N_REQ, 100); /* min over what is outstanding: capped */
    CHECK(got == N_REQ - n, "%s: wait(min 100) with %d outstanding gave %d", name, N_REQ - n, got);
    n += got > 0 ? got : 0;
    CHECK(k3io_wait(r, d, N_REQ, 0) == 0, "%s: min 0 after all returned", name);

    for (int k = 0; k < n; k++)
        out_of_order += k > 0 && d[k].tag != tag_of(k);
    printf("%s: %d of %d completions out of submission order\n", name, out_of_order, n);
    for (int i = 0; i < N_REQ; i++) {
        int32_t res = result_of(d, n, q[i].tag);
        CHECK(res == want[i], "%s: request %d: res %d, want %d", name, i, res, want[i]);
        const uint8_t *got_bytes = q[i].buf;
        for (int32_t k = 0; k < res; k++)
            if (got_bytes[k] != pattern_byte(seeds[q[i].file], q[i].offset + (uint64_t)k)) {
                CHECK(0, "%s: request %d byte %d differs", name, i, k);
                break;
            }
    }
    k3io_reader_destroy(r);
}

int main(void)
{
    int fds[2];
    const char *paths[2] = {test_path("reader_tags_0.bin"), test_path("reader_tags_1.bin")};
    struct k3io_file files[2];
    for (int f = 0; f < 2; f++) {
        make_pattern_file(paths[f], sizes[f], seeds[f]);
        REQUIRE(k3io_open(&files[f], paths[f], O_RDONLY, true) == 0, "open %s", paths[f]);
        fds[f] = files[f].fd;
    }
    char *area = k3io_alloc(AREA_BYTES);
    REQUIRE(area, "alloc");
    for (int i = 0; i < N_TEST_BACKENDS; i++)
        run(test_backends[i], fds, area);
    free(area);
    for (int f = 0; f < 2; f++) {
        k3io_close(&files[f]);
        unlink(paths[f]);
    }
    return reader_result();
}
