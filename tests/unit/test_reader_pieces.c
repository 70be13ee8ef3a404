/* An area is registered as several buffers (pieces of 32 MiB here; 1 GiB at most, the
 * kernel's limit): on both backends a read whose destination crosses the piece boundary
 * at 1 GiB is cut there (each part in one registered buffer, READ_FIXED with the right
 * buf_index) and one wholly in the next piece lands too.  Pieces are registered (pinned,
 * so faulted in) only as reads reach them: after these reads, of the untouched 4 GiB
 * area at most the two pieces read into, the first (registered at once, to find out
 * whether registration works at all) and the look-ahead past each are resident, and
 * k3io_area_present says so: a piece read into is present, the piece after the furthest
 * one becomes present once the look-ahead thread has faulted it in, one far past is not; without
 * pieces (pread, or a kernel that registers the area whole) everything counts as present. */
#include <sys/mman.h>
#include <unistd.h>

#include "iouring/reader_internal.h"
#include "tests/unit/test_reader.h"

#define SEED 29
#define FILE_BYTES (4u << 20)
#define GiB (1ull << 30)
#define AREA_BYTES (4 * GiB + (8u << 20))

/* Bytes of [area, area + AREA_BYTES) in memory. */
static uint64_t resident_bytes(char *area)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE), n = AREA_BYTES / page;
    unsigned char *in = malloc(n);
    REQUIRE(in && mincore(area, AREA_BYTES, in) == 0, "mincore");
    uint64_t bytes = 0;
    for (size_t i = 0; i < n; i++)
        bytes += (in[i] & 1) ? page : 0;
    free(in);
    return bytes;
}

/* What k3io_area_present says of the pieces after the reads into pieces 31 and 32. */
static void check_present(struct k3io_reader *r, enum k3io_backend b, char *area, bool whole)
{
    const size_t piece = 32u << 20;
    bool by_piece = b != K3IO_PREAD && !whole;
    CHECK(k3io_area_present(r, area, piece) && k3io_area_present(r, area + 31 * piece, 2 * piece),
          "%s: pieces 0 (registered first), 31 and 32 (read into) not present", backend_label(b));
    CHECK(k3io_area_present(r, area + 100 * piece, piece) == !by_piece,
          "%s: piece 100, never reached, %s", backend_label(b),
          by_piece ? "present" : "absent though the area is not taken by pieces");
    /* The look-ahead thread runs at the lowest priority: on a loaded machine it may take
     * a while. */
    double deadline = k3io__now() + 120;
    while (!k3io_area_present(r, area + 33 * piece, piece) && k3io__now() < deadline)
        usleep(10000);
    CHECK(k3io_area_present(r, area + 33 * piece, piece), "%s: piece 33 not present after 120 s",
          backend_label(b));
    CHECK(k3io_area_present(r, area + 32 * piece, 69 * piece) == !by_piece,
          "%s: a range is present only when every piece it spans is", backend_label(b));
    struct k3io_stats st = k3io_stats(r);
    CHECK(!by_piece || st.area_ahead_bytes >= piece, "%s: %llu bytes faulted in ahead, want "
          "piece 33's at least", backend_label(b), (unsigned long long)st.area_ahead_bytes);
}

static void run(enum k3io_backend b, const int *fd, char *area)
{
    struct k3io_config cfg = {.fds = fd, .n_files = 1, .area = area, .area_bytes = AREA_BYTES,
                              .queue_depth = 8, .max_io_bytes = 4u << 20, .pread_threads = 2};
    char note[256];
    struct k3io_reader *r = open_reader_note(b, cfg, note, sizeof note);
    if (!r)
        return;
    /* A kernel without sparse tables registers the area whole, and says so. */
    bool whole = strstr(note, "registered whole") != NULL;
    CHECK(note[0] == 0 || whole, "%s: note \"%s\"", backend_label(b), note);
    struct k3io_req q[] = {
        {.file = 0, .len = 3u << 20, .offset = 4096, .buf = area + GiB - (1u << 20), .tag = 1},
        {.file = 0, .len = 2u << 20, .offset = 1u << 20, .buf = area + GiB + (4u << 20), .tag = 2},
    };
    REQUIRE(k3io_submit(r, q, 2) == 0, "submit");
    struct k3io_done d[2];
    int n = wait_all(r, d, 2);
    for (int i = 0; i < 2; i++) {
        int32_t res = result_of(d, n, q[i].tag);
        CHECK(res == (int32_t)q[i].len, "%s: request %d res %d (%s)", backend_label(b), i, res,
              res < 0 ? strerror(-res) : "bytes");
        const uint8_t *got = q[i].buf;
        for (uint32_t k = 0; res > 0 && k < q[i].len; k++)
            if (got[k] != pattern_byte(SEED, q[i].offset + k)) {
                CHECK(0, "%s: request %d byte %u differs", backend_label(b), i, k);
                break;
            }
    }
    struct k3io_stats st = k3io_stats(r);
    CHECK(st.chunks == 3, "%s: %llu chunks, want 3 (the crossing read cut in two)",
          backend_label(b), (unsigned long long)st.chunks);
    uint64_t resident = resident_bytes(area);
    uint64_t most = 3 * (32u << 20) + 2 * K3IO_AHEAD_BYTES; /* ahead of pieces 0 and 32 */
    CHECK(whole || resident <= most, "%s: %llu MiB of the 4 GiB area resident after reads "
          "into two 32 MiB pieces, want at most %llu", backend_label(b),
          (unsigned long long)(resident >> 20), (unsigned long long)(most >> 20));
    check_present(r, b, area, whole);
    k3io_reader_destroy(r);
}

int main(void)
{
    const char *path = test_path("reader_pieces.bin");
    make_pattern_file(path, FILE_BYTES, SEED);
    struct k3io_file f;
    REQUIRE(k3io_open(&f, path, O_RDONLY, true) == 0, "open %s", path);
    char *area = mmap(NULL, AREA_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (area == MAP_FAILED)
        SKIP("no room for a %llu-byte area", (unsigned long long)AREA_BYTES);
    for (int i = 0; i < N_TEST_BACKENDS; i++) {
        run(test_backends[i], &f.fd, area);
        madvise(area, AREA_BYTES, MADV_DONTNEED); /* untouched again for the next */
    }
    munmap(area, AREA_BYTES);
    k3io_close(&f);
    unlink(path);
    return reader_result();
}
