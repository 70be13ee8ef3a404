/* End of file, on both backends and on direct and buffered opens: a read over the end
 * returns the bytes up to it (also when it spans several chunks, the tail chunks reading
 * nothing), a read at or after the end returns 0, and a file whose size is a multiple of
 * 4096 (so the short direct read is aligned and its remainder is tried) ends the same. */
#include "tests/unit/test_reader.h"

#define SEED 11
#define ODD_BYTES ((3u << 20) + 1000)   /* not a multiple of 4096 */
#define EVEN_BYTES (2u << 20)
#define AREA_BYTES (16u << 20)

struct eof_case {
    int file;          /* 0: ODD_BYTES, 1: EVEN_BYTES */
    uint64_t offset;
    uint32_t len;
    int32_t want;
};

static const struct eof_case cases[] = {
    {0, 0, 4u << 20, ODD_BYTES},                          /* over the end, 4 chunks */
    {0, 3u << 20, 1u << 20, 1000},                       /* the last partial block */
    {0, (3u << 20) - 8192, 64 << 10, 8192 + 1000},       /* across the last block */
    {0, (3u << 20) + 4096, 4096, 0},                     /* just past the end */
    {0, 8u << 20, 2u << 20, 0},                          /* far past the end */
    {1, 0, 3u << 20, EVEN_BYTES},                        /* aligned end: remainder tried */
    {1, EVEN_BYTES, 4096, 0},                            /* at the end */
    {1, (1u << 20) + 4096, 3u << 20, EVEN_BYTES - (1u << 20) - 4096},
};
#define N_CASES (int)(sizeof cases / sizeof cases[0])

static void run(enum k3io_backend b, const struct k3io_file *files, const char *mode, char *area)
{
    int fds[2] = {files[0].fd, files[1].fd};
    struct k3io_config cfg = {.fds = fds, .n_files = 2, .area = area, .area_bytes = AREA_BYTES,
                              .queue_depth = 8, .max_io_bytes = 1u << 20, .pread_threads = 3};
    struct k3io_reader *r = open_reader(b, cfg);
    if (!r)
        return;
    struct k3io_req req[N_CASES];
    uint64_t at = 0;
    for (int i = 0; i < N_CASES; i++) {
        req[i] = (struct k3io_req){.file = (uint32_t)cases[i].file, .len = cases[i].len,
                                   .offset = cases[i].offset, .buf = area + at, .tag = (uint64_t)i};
        at += cases[i].len;
    }
    REQUIRE(at <= AREA_BYTES, "area too small");
    memset(area, 0xEE, AREA_BYTES);
    REQUIRE(k3io_submit(r, req, N_CASES) == 0, "submit");
    struct k3io_done done[N_CASES];
    int n = wait_all(r, done, N_CASES);
    for (int i = 0; i < N_CASES; i++) {
        int32_t res = result_of(done, n, (uint64_t)i);
        CHECK(res == cases[i].want, "%s %s case %d (file %d off %llu len %u): res %d, want %d",
              backend_label(b), mode, i, cases[i].file, (unsigned long long)cases[i].offset,
              cases[i].len, res, cases[i].want);
        const uint8_t *got = req[i].buf;
        uint64_t seed = SEED + (uint64_t)cases[i].file;
        for (int32_t k = 0; k < res; k++)
            if (got[k] != pattern_byte(seed, cases[i].offset + (uint64_t)k)) {
                CHECK(0, "%s %s case %d: byte %d differs", backend_label(b), mode, i, k);
                break;
            }
    }
    k3io_reader_destroy(r);
}

int main(void)
{
    const char *paths[2] = {test_path("reader_eof_odd.bin"), test_path("reader_eof_even.bin")};
    make_pattern_file(paths[0], ODD_BYTES, SEED);
    make_pattern_file(paths[1], EVEN_BYTES, SEED + 1);
    char *area = k3io_alloc(AREA_BYTES);
    REQUIRE(area, "alloc");
    for (int direct = 1; direct >= 0; direct--) {
        struct k3io_file files[2];
        for (int f = 0; f < 2; f++)
            REQUIRE(k3io_open(&files[f], paths[f], O_RDONLY, direct) == 0, "open %s", paths[f]);
        if (direct && !files[0].direct)
            printf("note: O_DIRECT refused here; the direct run reads buffered\n");
        for (int i = 0; i < N_TEST_BACKENDS; i++)
            run(test_backends[i], files, direct ? "direct" : "buffered", area);
        for (int f = 0; f < 2; f++)
            k3io_close(&files[f]);
    }
    free(area);
    unlink(paths[0]);
    unlink(paths[1]);
    return reader_result();
}
