/* Reads of random aligned offsets and lengths from an O_DIRECT file of known content land
 * bytewise as pread returns them, on both backends: many more requests than the queue
 * holds (the pending FIFO), requests longer than max_io_bytes (chunking), submitted all
 * at once and in batches between waits. */
#include "tests/unit/test_reader.h"

#define FILE_BYTES (48u << 20)
#define AREA_BYTES (64u << 20)
#define MAX_REQS 400
#define SEED 7

struct plan {
    struct k3io_req req[MAX_REQS];
    int n;
};

static uint64_t rng_next(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* Random requests packed one after another into the area, lengths up to max_len. */
static void make_plan(struct plan *p, char *area, uint32_t max_len, uint64_t seed)
{
    uint64_t s = seed, used = 0;
    p->n = 0;
    while (p->n < MAX_REQS) {
        uint32_t len = (uint32_t)(1 + rng_next(&s) % (max_len / K3IO_ALIGN)) * K3IO_ALIGN;
        uint64_t off = rng_next(&s) % ((FILE_BYTES - len) / K3IO_ALIGN + 1) * K3IO_ALIGN;
        if (used + len > AREA_BYTES)
            break;
        p->req[p->n] = (struct k3io_req){.file = 0, .len = len, .offset = off,
                                         .buf = area + used, .tag = 1000 + (uint64_t)p->n};
        used += len;
        p->n++;
    }
}

static void check_plan(const struct plan *p, const struct k3io_done *done, int n_done,
                       const struct k3io_file *buffered, const char *what)
{
    REQUIRE(n_done == p->n, "%s: %d of %d requests completed", what, n_done, p->n);
    uint8_t *want = k3io_alloc(4u << 20); /* >= every request of a plan */
    REQUIRE(want, "alloc");
    int bad = 0;
    for (int i = 0; i < p->n && bad < 5; i++) {
        const struct k3io_req *q = &p->req[i];
        int32_t res = result_of(done, n_done, q->tag);
        CHECK(res == (int32_t)q->len, "%s: request %d (off %llu len %u): res %d", what, i,
              (unsigned long long)q->offset, q->len, res);
        REQUIRE(k3io_pread_full(buffered, want, q->len, q->offset) == (ssize_t)q->len, "pread");
        if (memcmp(want, q->buf, q->len)) {
            CHECK(0, "%s: request %d (off %llu len %u): bytes differ from pread", what, i,
                  (unsigned long long)q->offset, q->len);
            bad++;
        }
    }
    free(want);
}

static void run(enum k3io_backend b, unsigned depth, uint32_t max_io, const struct k3io_file *direct,
                const struct k3io_file *buffered, char *area)
{
    struct k3io_config cfg = {.fds = &direct->fd, .n_files = 1, .area = area,
                              .area_bytes = AREA_BYTES, .queue_depth = depth,
                              .max_io_bytes = max_io, .pread_threads = 4};
    struct k3io_reader *r = open_reader(b, cfg);
    if (!r)
        return;
    static struct plan p;
    static struct k3io_done done[MAX_REQS];
    char what[96];

    /* all at once: far more chunks than the queue holds */
    snprintf(what, sizeof what, "%s depth %u max_io %u, one submit", backend_label(b), depth, max_io);
    memset(area, 0xAA, AREA_BYTES);
    make_plan(&p, area, 2 * max_io + K3IO_ALIGN, depth * 31 + max_io);
    REQUIRE(p.n > (int)depth, "plan too small");
    REQUIRE(k3io_submit(r, p.req, p.n) == 0, "submit");
    CHECK(k3io_pending(r) == p.n, "%s: pending %d", what, k3io_pending(r));
    int n = wait_all(r, done, MAX_REQS);
    check_plan(&p, done, n, buffered, what);
    CHECK(k3io_pending(r) == 0, "%s: pending %d after all returned", what, k3io_pending(r));

    /* in batches of 7, waiting for a few between them, with short waits of max 3 */
    snprintf(what, sizeof what, "%s depth %u max_io %u, batches", backend_label(b), depth, max_io);
    memset(area, 0x55, AREA_BYTES);
    make_plan(&p, area, 2 * max_io, depth * 17 + max_io + 1);
    n = 0;
    for (int i = 0; i < p.n; i += 7) {
        int k = p.n - i < 7 ? p.n - i : 7;
        REQUIRE(k3io_submit(r, p.req + i, k) == 0, "submit");
        int got = k3io_wait(r, done + n, 3, 2);
        REQUIRE(got >= 2 && got <= 3, "%s: wait(max 3, min 2) gave %d", what, got);
        n += got;
    }
    n += wait_all(r, done + n, MAX_REQS - n);
    check_plan(&p, done, n, buffered, what);

    struct k3io_stats st = k3io_stats(r);
    printf("%s: %llu requests, %llu chunks, %llu bytes, %.3f s waiting\n", backend_label(b),
           (unsigned long long)st.requests, (unsigned long long)st.chunks,
           (unsigned long long)st.bytes, st.wait_seconds);
    k3io_reader_destroy(r);
}

int main(void)
{
    const char *path = test_path("reader_data.bin");
    make_pattern_file(path, FILE_BYTES, SEED);
    struct k3io_file direct, buffered;
    REQUIRE(k3io_open(&direct, path, O_RDONLY, true) == 0, "open %s", path);
    if (!direct.direct)
        printf("note: O_DIRECT refused on %s; reading buffered\n", path);
    REQUIRE(k3io_open(&buffered, path, O_RDONLY, false) == 0, "open %s", path);
    char *area = k3io_alloc(AREA_BYTES);
    REQUIRE(area, "alloc area");
    for (int i = 0; i < N_TEST_BACKENDS; i++) {
        run(test_backends[i], 4, 64 << 10, &direct, &buffered, area);
        run(test_backends[i], 32, 1 << 20, &direct, &buffered, area);
    }
    free(area);
    k3io_close(&direct);
    k3io_close(&buffered);
    unlink(path);
    return reader_result();
}
