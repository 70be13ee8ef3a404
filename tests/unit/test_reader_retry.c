/* Resubmission, through the fault hook on both backends (the real read happens, the hook
 * then says what the reader sees): -EAGAIN and -EINTR resubmit the whole chunk, up to 32
 * times, then the error stands; a short read resubmits the remainder when it stays aligned
 * on a direct file (always on a buffered one) and otherwise ends the request there as end
 * of file; an error in one chunk fails the request only after every chunk cut from it has
 * finished, and no further chunk is cut from it; counters match. */
#include "tests/unit/test_reader.h"

#define SEED 13
#define FILE_BYTES (8u << 20)
#define AREA_BYTES (8u << 20)
#define MiB (1u << 20)

enum fault { EAGAIN_3, EINTR_ALWAYS, SHORT_HALF, SHORT_ODD, EIO_FIRST };

struct scenario {
    const char *name;
    enum fault fault;
    uint64_t at;            /* file offset of the chunk that misbehaves */
    unsigned depth;
    int32_t want_direct, want_buffered;   /* request res: 0..3 MiB read at offset MiB */
    uint64_t want_short_direct, want_short_buffered, want_eagain, want_eintr;
};

#define LEN (3 * MiB)
static const struct scenario scenarios[] = {
    {"EAGAIN three times", EAGAIN_3, 2 * MiB, 8, LEN, LEN, 0, 0, 3, 0},
    {"EINTR for ever", EINTR_ALWAYS, 2 * MiB, 8, -EINTR, -EINTR, 0, 0, 0, 32},
    {"short by half", SHORT_HALF, 2 * MiB, 8, LEN, LEN, 1, 1, 0, 0},
    {"short, unaligned", SHORT_ODD, 2 * MiB, 8, MiB + 1000, LEN, 0, 1, 0, 0},
    {"EIO on the first chunk", EIO_FIRST, MiB, 8, -EIO, -EIO, 0, 0, 0, 0},
    {"EIO on the first chunk, depth 1", EIO_FIRST, MiB, 1, -EIO, -EIO, 0, 0, 0, 0},
};

struct script {
    const struct scenario *s;
    int hits;               /* times the misbehaving chunk was seen */
    int results;            /* chunk results seen, first tries only */
    uint64_t retry_offset;  /* where the resubmitted remainder started */
    uint32_t retry_len;
};

static int32_t fault(void *ctx, const struct k3io_fault_at *at, int32_t res)
{
    struct script *sc = ctx;
    bool target = at->offset == sc->s->at;
    if (!target && at->offset > sc->s->at && at->offset < sc->s->at + MiB) {
        sc->retry_offset = at->offset; /* the remainder of a short read */
        sc->retry_len = at->len;
        return res;
    }
    if (!target || sc->hits++ == 0)
        sc->results++;
    if (!target)
        return res;
    switch (sc->s->fault) {
    case EAGAIN_3:
        return sc->hits <= 3 ? -EAGAIN : res;
    case EINTR_ALWAYS:
        return -EINTR;
    case SHORT_HALF:
        return sc->hits == 1 ? res / 2 : res;
    case SHORT_ODD:
        return sc->hits == 1 ? 1000 : res;
    case EIO_FIRST:
        return -EIO;
    }
    return res;
}

static void run(enum k3io_backend b, const struct k3io_file *f, char *area)
{
    const char *mode = f->direct ? "direct" : "buffered";
    for (size_t i = 0; i < sizeof scenarios / sizeof scenarios[0]; i++) {
        const struct scenario *s = &scenarios[i];
        struct k3io_config cfg = {.fds = &f->fd, .n_files = 1, .area = area,
                                  .area_bytes = AREA_BYTES, .queue_depth = s->depth,
                                  .max_io_bytes = MiB, .pread_threads = 2};
        struct k3io_reader *r = open_reader(b, cfg);
        if (!r)
            return;
        struct script sc = {.s = s};
        k3io_set_fault(r, fault, &sc);
        memset(area, 0, AREA_BYTES);
        struct k3io_req q = {.file = 0, .len = LEN, .offset = MiB, .buf = area, .tag = 5};
        REQUIRE(k3io_submit(r, &q, 1) == 0, "submit");
        struct k3io_done d;
        REQUIRE(k3io_wait(r, &d, 1, 1) == 1, "wait");
        struct k3io_stats st = k3io_stats(r);
        int32_t want = f->direct ? s->want_direct : s->want_buffered;
        uint64_t want_short = f->direct ? s->want_short_direct : s->want_short_buffered;
        const char *b_name = backend_label(b);
        CHECK(d.tag == 5 && d.res == want, "%s %s, %s: res %d, want %d", b_name, mode, s->name,
              d.res, want);
        CHECK(st.resubmit_short == want_short && st.resubmit_eagain == s->want_eagain &&
                  st.resubmit_eintr == s->want_eintr,
              "%s %s, %s: resubmits short %llu eagain %llu eintr %llu", b_name, mode, s->name,
              (unsigned long long)st.resubmit_short, (unsigned long long)st.resubmit_eagain,
              (unsigned long long)st.resubmit_eintr);
        /* every chunk cut from the request had finished when it was returned */
        CHECK((uint64_t)sc.results == st.chunks, "%s %s, %s: %d chunk results for %llu chunks",
              b_name, mode, s->name, sc.results, (unsigned long long)st.chunks);
        if (s->fault == EIO_FIRST)
            CHECK(st.chunks == (s->depth >= 3 ? 3u : 1u), "%s %s, %s: %llu chunks cut", b_name,
                  mode, s->name, (unsigned long long)st.chunks);
        if (want_short) {
            uint32_t first = s->fault == SHORT_HALF ? MiB / 2 : 1000;
            CHECK(sc.retry_offset == s->at + first && sc.retry_len == MiB - first,
                  "%s %s, %s: remainder at %llu len %u", b_name, mode, s->name,
                  (unsigned long long)sc.retry_offset, sc.retry_len);
        }
        for (int32_t k = 0; k < want; k++)
            if ((uint8_t)area[k] != pattern_byte(SEED, MiB + (uint64_t)k)) {
                CHECK(0, "%s %s, %s: byte %d differs", b_name, mode, s->name, k);
                break;
            }
        /* still usable, and without the hook everything reads */
        k3io_set_fault(r, NULL, NULL);
        REQUIRE(k3io_submit(r, &q, 1) == 0, "submit");
        REQUIRE(k3io_wait(r, &d, 1, 1) == 1, "wait");
        CHECK(d.res == LEN, "%s %s, after %s: res %d", b_name, mode, s->name, d.res);
        k3io_reader_destroy(r);
    }
}

int main(void)
{
    const char *path = test_path("reader_retry.bin");
    make_pattern_file(path, FILE_BYTES, SEED);
    char *area = k3io_alloc(AREA_BYTES);
    REQUIRE(area, "alloc");
    for (int direct = 1; direct >= 0; direct--) {
        struct k3io_file f;
        REQUIRE(k3io_open(&f, path, O_RDONLY, direct) == 0, "open %s", path);
        if (direct && !f.direct)
            printf("note: O_DIRECT refused here; the direct run reads buffered\n");
        for (int i = 0; i < N_TEST_BACKENDS; i++)
            run(test_backends[i], &f, area);
        k3io_close(&f);
    }
    free(area);
    unlink(path);
    return reader_result();
}
