/* The drive model (iouring/model.h): its arithmetic on made-up timelines (exact: rates and
 * sizes powers of two); the RATE[,LATENCY] syntax; and through the reader on every
 * backend, properties that hold whatever the machine's load, because they only bound
 * times from below: the bytes are the file's; each request's release is at least its
 * bytes at the rate plus the latency after it started, and on one drive at least the
 * request's bytes at the rate after the one before it (FIFO, one transfer at a time, no
 * credit for idle time); k3io_wait returns a request no earlier than its release; the
 * counters add up; destroy with reads held returns.  A storage far slower than the model
 * (one pread thread, a model of 1 PB/s) is reported late. */
#include <math.h>

#include "engine/base/clock.h"
#include "tests/unit/test_reader.h"

#define SEED 29
#define MiB (1u << 20)
#define FILE_BYTES (8u * MiB)
#define AREA_BYTES (16u * MiB)

/* ---- the arithmetic ---- */

static void test_arithmetic(void)
{
    const struct k3io_drive_model m = {.rate = 0x1p20 /* 1 MiB/s */, .latency = 0.25};
    double busy = 0;

    /* a lone read on an idle drive: latency + bytes / rate */
    double rel = k3io_model_read(&m, &busy, 10.0, 2 * MiB);
    CHECK(rel == 12.25 && busy == 12.0, "lone read: release %g busy %g", rel, busy);

    /* three reads started at once queue: the drive streams at rate, latency paid once */
    busy = 0;
    double r1 = k3io_model_read(&m, &busy, 0, MiB), r2 = k3io_model_read(&m, &busy, 0, MiB),
           r3 = k3io_model_read(&m, &busy, 0, MiB);
    CHECK(r1 == 1.25 && r2 == 2.25 && r3 == 3.25 && busy == 3.0,
          "queued reads: %g %g %g (busy %g)", r1, r2, r3, busy);

    /* idle time is never credited: after 2 s idle a read starts when it is submitted,
     * and a burst after the idle is no faster than one on a drive never idle */
    rel = k3io_model_read(&m, &busy, 5.0, MiB);
    CHECK(rel == 6.25 && busy == 6.0, "after idle: release %g busy %g, want 6.25, 6", rel, busy);
    rel = k3io_model_read(&m, &busy, 5.0, MiB);
    CHECK(rel == 7.25, "second of the burst after idle: %g, want 7.25", rel);

    /* a read submitted while the drive is busy waits for it (FIFO) */
    rel = k3io_model_read(&m, &busy, 6.5, MiB);
    CHECK(rel == 8.25 && busy == 8.0, "behind a busy drive: %g (busy %g)", rel, busy);

    /* a request cut into chunks is released when one read of all of it would be */
    double whole_busy = 0, cut_busy = 0, cut = 0;
    double whole = k3io_model_read(&m, &whole_busy, 1.0, 5 * MiB);
    for (int i = 0; i < 5; i++)
        cut = k3io_model_read(&m, &cut_busy, 1.0, MiB);
    CHECK(whole == cut && whole == 6.25, "5 MiB whole %g, in 1 MiB chunks %g", whole, cut);

    /* drives are independent: each has its own busy_until */
    double b0 = 0, b1 = 0;
    double d0 = k3io_model_read(&m, &b0, 0, 4 * MiB), d1 = k3io_model_read(&m, &b1, 0, 4 * MiB);
    CHECK(d0 == 4.25 && d1 == 4.25, "two drives at once: %g %g", d0, d1);

    /* bandwidth: n reads back to back deliver n·b in n·b/rate + latency */
    busy = 0;
    for (int i = 0; i < 1000; i++)
        rel = k3io_model_read(&m, &busy, 0, 4096);
    CHECK(rel == 1000 * 4096 / 0x1p20 + 0.25, "1000 x 4 KiB: %g", rel);
}

/* ---- the syntax ---- */

static void accepts(const char *text, double rate, double latency)
{
    struct k3io_drive_model m = {-1, -1};
    char why[160] = "";
    int rc = k3io_drive_model_parse(text, &m, why, sizeof why);
    CHECK(rc == 0 && fabs(m.rate - rate) <= 1e-9 * rate && fabs(m.latency - latency) <= 1e-15,
          "\"%s\": rc %d (%s), rate %.17g latency %.17g, want %.17g %.17g", text, rc, why,
          m.rate, m.latency, rate, latency);
}

static void refuses(const char *text, const char *needle)
{
    struct k3io_drive_model m = {0};
    char why[160] = "";
    int rc = k3io_drive_model_parse(text, &m, why, sizeof why);
    CHECK(rc == -EINVAL && strstr(why, needle), "\"%s\": rc %d, why \"%s\" (want \"%s\")", text,
          rc, why, needle);
}

static void test_syntax(void)
{
    accepts("7GB/s", 7e9, 0);
    accepts("7GB/s,80us", 7e9, 80e-6);
    accepts("7gb/s,80US", 7e9, 80e-6);
    accepts("7GB", 7e9, 0);
    accepts("500MiB/s,1ms", 500.0 * MiB, 1e-3);
    accepts("1.5GiB/s,0", 1.5 * 0x1p30, 0);
    accepts("1e9", 1e9, 0);
    accepts("250KB/s,2s", 250e3, 2);
    accepts("12TB/s,500ns", 12e12, 500e-9);
    accepts("100B/s", 100, 0);
    refuses("", "rate");
    refuses("fast", "rate \"fast\"");
    refuses("0GB/s", "positive");
    refuses("-1GB/s", "rate");
    refuses("7XB/s", "rate \"7XB/s\"");
    refuses("7GB/m", "rate");
    refuses("2000TB/s", "above 1 PB/s");
    refuses("7GB/s,", "latency \"\"");
    refuses("7GB/s,80", "latency \"80\"");
    refuses("7GB/s,80uss", "latency");
    refuses("7GB/s,-1us", "latency");
    refuses("7GB/s,11s", "above 10 s");
    refuses("7GB/s,80us,1", "latency");

    char buf[64];
    k3io_drive_model_format(&(struct k3io_drive_model){7e9, 80e-6}, buf, sizeof buf);
    CHECK(!strcmp(buf, "7 GB/s, 80 us"), "format: \"%s\"", buf);
    k3io_drive_model_format(&(struct k3io_drive_model){524288000, 0}, buf, sizeof buf);
    CHECK(!strcmp(buf, "524.3 MB/s, 0 us"), "format: \"%s\"", buf);
}

/* ---- through the reader ---- */

static bool pattern_ok(const uint8_t *buf, uint64_t offset, uint32_t len)
{
    for (uint32_t i = 0; i < len; i++)
        if (buf[i] != pattern_byte(SEED, offset + i))
            return false;
    return true;
}

/* 4 requests of 1 MiB on each of two files at once, under a model of 32 MiB/s and 5 ms. */
static void test_held(enum k3io_backend b, const int *fds, char *area)
{
    const struct k3io_drive_model m = {.rate = 32.0 * MiB, .latency = 0.005};
    struct k3io_config cfg = {.fds = fds, .n_files = 2, .area = area, .area_bytes = AREA_BYTES,
                              .max_io_bytes = MiB / 2, .pread_threads = 2, .model = m};
    struct k3io_reader *r = open_reader(b, cfg);
    if (!r)
        return;
    const char *name = backend_label(b);
    enum { N = 8 };
    struct k3io_req q[N];
    for (int i = 0; i < N; i++)
        q[i] = (struct k3io_req){.file = (uint32_t)(i % 2), .len = MiB, .offset = (uint64_t)(i / 2) * MiB,
                                 .buf = area + (size_t)i * MiB, .tag = (uint64_t)i};
    memset(area, 0, N * MiB);
    double t0 = k3_now();
    REQUIRE(k3io_submit(r, q, N) == 0, "%s: submit", name);
    struct k3io_done d[N], by_tag[N];
    int n = 0;
    while (k3io_pending(r) > 0) {
        int got = k3io_wait(r, d + n, N - n, 1);
        REQUIRE(got > 0, "%s: k3io_wait %d", name, got);
        double back = k3_now();
        for (int i = n; i < n + got; i++)
            CHECK(back >= d[i].release, "%s: request %llu returned %.6f s before its release",
                  name, (unsigned long long)d[i].tag, d[i].release - back);
        n += got;
    }
    double elapsed = k3_now() - t0;
    REQUIRE(n == N, "%s: %d completions", name, n);
    for (int i = 0; i < N; i++) {
        REQUIRE(d[i].tag < N, "%s: tag %llu", name, (unsigned long long)d[i].tag);
        by_tag[d[i].tag] = d[i];
    }
    const double xfer = MiB / m.rate, eps = 1e-9;
    for (int i = 0; i < N; i++) {
        const struct k3io_done *x = &by_tag[i];
        CHECK(x->res == (int32_t)MiB && pattern_ok((uint8_t *)q[i].buf, q[i].offset, MiB),
              "%s: request %d: res %d or its bytes differ from the file", name, i, x->res);
        CHECK(x->started >= t0 && x->landed >= x->started && x->release > 0,
              "%s: request %d: started %.6f landed %.6f release %.6f (t0 %.6f)", name, i,
              x->started, x->landed, x->release, t0);
        CHECK(x->release - x->started >= xfer + m.latency - eps,
              "%s: request %d released %.6f s after it started, under %.6f s", name, i,
              x->release - x->started, xfer + m.latency);
        if (i >= 2) /* the one before it on its drive */
            CHECK(x->release - by_tag[i - 2].release >= xfer - eps,
                  "%s: request %d released %.6f s after the one before it on its drive, "
                  "under %.6f s", name, i, x->release - by_tag[i - 2].release, xfer);
    }
    CHECK(elapsed >= 4 * xfer + m.latency, "%s: all done in %.6f s, under the model's %.6f s",
          name, elapsed, 4 * xfer + m.latency);
    struct k3io_stats st = k3io_stats(r);
    CHECK(st.model_reads == st.chunks && st.chunks == 2 * N,
          "%s: %llu reads timed of %llu chunks", name, (unsigned long long)st.model_reads,
          (unsigned long long)st.chunks);
    CHECK(st.model_busy_seconds >= 4 * xfer + m.latency - eps && st.model_busy_seconds <= elapsed,
          "%s: reads outstanding %.6f s by the model, want [%.6f, %.6f]", name,
          st.model_busy_seconds, 4 * xfer + m.latency, elapsed);
    CHECK(st.model_read_seconds >= 2 * (1 + 2 + 3 + 4) * xfer + N * m.latency - 1e-6,
          "%s: %.6f read-seconds modelled", name, st.model_read_seconds);
    CHECK(st.storage_read_seconds > 0 && st.late_seconds >= 0 && st.late_reads <= st.model_reads,
          "%s: storage %.6f s, late %llu reads %.6f s", name, st.storage_read_seconds,
          (unsigned long long)st.late_reads, st.late_seconds);

    /* destroy with reads still held or in flight returns, and nothing lands afterwards */
    REQUIRE(k3io_submit(r, q, N) == 0, "%s: submit again", name);
    k3io_reader_destroy(r);
}

/* One pread thread copying 256 MiB from the page cache (1 MiB at a time, the same file range) against a
 * model of 1 PB/s: every release comes while the copy still runs, so the caller waits
 * past releases and the storage is reported late. */
static void test_late(const int *fds, char *area)
{
    struct k3io_config cfg = {.fds = fds, .n_files = 1, .area = area, .area_bytes = AREA_BYTES,
                              .max_io_bytes = MiB, .pread_threads = 1, .backend = K3IO_PREAD,
                              .model = {.rate = 1e15, .latency = 0}};
    struct k3io_reader *r = NULL;
    REQUIRE(k3io_reader_create(&r, &cfg, NULL, 0) == 0, "pread reader");
    enum { N = 256 };
    static struct k3io_req q[N];
    for (int i = 0; i < N; i++)
        q[i] = (struct k3io_req){.file = 0, .len = MiB, .offset = 0, .buf = area, .tag = (uint64_t)i};
    REQUIRE(k3io_submit(r, q, N) == 0, "submit");
    static struct k3io_done d[N];
    CHECK(wait_all(r, d, N) == N, "completions");
    struct k3io_stats st = k3io_stats(r);
    CHECK(st.late_reads > 0 && st.late_seconds > 0 && st.late_seconds <= st.wait_seconds,
          "a storage slower than the model: %llu reads late, %.6f s of %.6f s waiting",
          (unsigned long long)st.late_reads, st.late_seconds, st.wait_seconds);
    CHECK(pattern_ok((uint8_t *)area, 0, MiB), "bytes");
    k3io_reader_destroy(r);
}

int main(void)
{
    test_arithmetic();
    test_syntax();

    const char *paths[2] = {test_path("reader_model_0.bin"), test_path("reader_model_1.bin")};
    for (int i = 0; i < 2; i++)
        make_pattern_file(paths[i], FILE_BYTES, SEED);
    char *area = k3io_alloc(AREA_BYTES);
    REQUIRE(area, "alloc");
    struct k3io_file f[2];
    for (int i = 0; i < 2; i++)
        REQUIRE(k3io_open(&f[i], paths[i], O_RDONLY, true) == 0, "open %s", paths[i]);
    int fds[2] = {f[0].fd, f[1].fd};
    for (int i = 0; i < N_TEST_BACKENDS; i++)
        test_held(test_backends[i], fds, area);
    struct k3io_file buffered; /* page cache copies: as fast as this machine reads */
    REQUIRE(k3io_open(&buffered, paths[0], O_RDONLY, false) == 0, "open %s", paths[0]);
    test_late(&buffered.fd, area);
    k3io_close(&buffered);
    for (int i = 0; i < 2; i++) {
        k3io_close(&f[i]);
        unlink(paths[i]);
    }
    free(area);
    return reader_result();
}
