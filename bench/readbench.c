/* readbench: random reads of one size from one file through the k3io reader, kept at a
 * fixed depth for a fixed time, as fio's randread with time_based does; prints one CSV
 * line (backend, depth, block, seconds, MiB/s, IOPS, latency percentiles).
 * Built and driven by bench/readbench.sh (it needs only iouring/ and liburing).
 * Usage: readbench FILE [--option value]...  (--help lists options with their defaults) */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "iouring/file.h"
#include "iouring/reader.h"

struct opts {
    char backend[16];
    long depth, block_kib, size_mib, seconds, seed, thp, io_threads;
};

static struct opts o = {"io_uring", 8, 1024, 1024, 10, 1, 0, 0};

/* The options as data, so that --help prints each with its default and cannot drift. */
static const struct opt {
    const char *name;
    char *text;   /* one of text or num */
    long *num;
    long min;     /* smallest value num takes */
    const char *help;
} opt_table[] = {
    {"--backend", o.backend, NULL, 0, "io_uring, pread or auto"},
    {"--depth", NULL, &o.depth, 1, "requests in flight (pread: as many threads)"},
    {"--block-kib", NULL, &o.block_kib, 4, "read size in KiB, a multiple of 4"},
    {"--size-mib", NULL, &o.size_mib, 1, "read offsets fall in the first SIZE MiB of the file"},
    {"--seconds", NULL, &o.seconds, 1, "run time"},
    {"--seed", NULL, &o.seed, 0, "offset generator seed"},
    {"--thp", NULL, &o.thp, 0, "1: buffers on transparent huge pages (MADV_HUGEPAGE)"},
    {"--io-threads", NULL, &o.io_threads, 0,
     "io_uring: > 1 reads from an I/O thread with its own ring (the file on thread 0), "
     "handing chunks over as the engine does on several NUMA nodes"},
};
#define N_OPTS (sizeof opt_table / sizeof opt_table[0])

static void usage(FILE *to)
{
    fprintf(to, "usage: readbench FILE [options]\n");
    for (size_t i = 0; i < N_OPTS; i++) {
        const struct opt *p = &opt_table[i];
        if (p->text)
            fprintf(to, "  %-12s %s (default %s)\n", p->name, p->help, p->text);
        else
            fprintf(to, "  %-12s %s (default %ld)\n", p->name, p->help, *p->num);
    }
}

static int parse(int argc, char **argv, const char **file)
{
    *file = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help")) {
            usage(stdout);
            exit(0);
        }
        if (argv[i][0] != '-') {
            *file = argv[i];
            continue;
        }
        size_t k = 0;
        while (k < N_OPTS && strcmp(argv[i], opt_table[k].name))
            k++;
        if (k == N_OPTS || i + 1 == argc) {
            fprintf(stderr, "readbench: bad option %s\n", argv[i]);
            return -1;
        }
        const char *v = argv[++i];
        if (opt_table[k].text) {
            snprintf(opt_table[k].text, sizeof o.backend, "%s", v);
        } else {
            char *end;
            *opt_table[k].num = strtol(v, &end, 10);
            if (*end || *opt_table[k].num < opt_table[k].min) {
                fprintf(stderr, "readbench: %s wants a number >= %ld, not %s\n", argv[i - 1],
                        opt_table[k].min, v);
                return -1;
            }
        }
    }
    return *file ? 0 : -1;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static uint64_t rng(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* Anonymous memory aligned to 2 MiB so that huge pages can back all of it; with thp, asks
 * for them.  Physically contiguous buffers mean fewer segments per request, which the
 * virtual disk here rewards. */
static char *alloc_area(size_t bytes, bool thp)
{
    size_t huge = 2u << 20, len = bytes + huge;
    char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
    char *a = (char *)(((uintptr_t)p + huge - 1) & ~(uintptr_t)(huge - 1));
    if (thp)
        madvise(a, bytes, MADV_HUGEPAGE);
    return a; /* freed at exit */
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    const char *path;
    if (parse(argc, argv, &path)) {
        usage(stderr);
        return 2;
    }
    enum k3io_backend backend = !strcmp(o.backend, "pread") ? K3IO_PREAD
                                : !strcmp(o.backend, "auto") ? K3IO_AUTO : K3IO_URING;
    uint32_t block = (uint32_t)o.block_kib * 1024;
    uint64_t blocks = (uint64_t)o.size_mib * 1024 * 1024 / block;
    struct k3io_file f;
    int rc = k3io_open(&f, path, O_RDONLY, true);
    if (rc || f.size < blocks * block || !blocks || block % K3IO_ALIGN) {
        fprintf(stderr, "readbench: %s: %s\n", path,
                rc ? strerror(-rc) : "smaller than --size-mib, or a bad --block-kib");
        return 1;
    }
    int depth = (int)o.depth;
    char *area = alloc_area((size_t)depth * block, o.thp);
    struct k3io_config cfg = {.backend = backend, .fds = &f.fd, .n_files = 1, .area = area,
                              .area_bytes = (size_t)depth * block, .queue_depth = (unsigned)depth,
                              .max_io_bytes = block, .pread_threads = depth,
                              .io_threads = (int)o.io_threads, .file_thread = (const int[]){0}};
    char note[256];
    struct k3io_reader *r;
    if (!area || (rc = k3io_reader_create(&r, &cfg, note, sizeof note))) {
        fprintf(stderr, "readbench: reader: %s %s\n", strerror(area ? -rc : ENOMEM), note);
        return 1;
    }
    if (note[0])
        fprintf(stderr, "readbench: %s\n", note);

    uint64_t seed = (uint64_t)o.seed * 0x9e3779b97f4a7c15ull | 1;
    double *started = calloc((size_t)depth, sizeof *started);
    size_t lat_cap = 1 << 20, n_lat = 0;
    double *lat = malloc(lat_cap * sizeof *lat);
    struct k3io_done *done = malloc((size_t)depth * sizeof *done);
    if (!started || !lat || !done)
        return 1;
    double t0 = now(), end = t0 + (double)o.seconds;
    for (int slot = 0; slot < depth; slot++) { /* tag = slot: one buffer per slot */
        struct k3io_req q = {.file = 0, .len = block, .offset = rng(&seed) % blocks * block,
                             .buf = area + (size_t)slot * block, .tag = (uint64_t)slot};
        started[slot] = now();
        if ((rc = k3io_submit(r, &q, 1)))
            break;
    }
    uint64_t bytes = 0, ios = 0;
    int errors = 0;
    struct k3io_req *refill = malloc((size_t)depth * sizeof *refill);
    while (!rc && refill && k3io_pending(r) > 0) {
        int n = k3io_wait(r, done, depth, 1);
        if (n < 0) {
            rc = n;
            break;
        }
        double t = now();
        int n_refill = 0;
        for (int i = 0; i < n; i++) {
            int slot = (int)done[i].tag;
            errors += done[i].res != (int32_t)block;
            bytes += done[i].res > 0 ? (uint64_t)done[i].res : 0;
            ios++;
            if (n_lat < lat_cap)
                lat[n_lat++] = t - started[slot];
            if (t >= end)
                continue;
            /* the slot's buffer is free again: read the next random block into it */
            refill[n_refill++] = (struct k3io_req){.file = 0, .len = block,
                                                   .offset = rng(&seed) % blocks * block,
                                                   .buf = area + (size_t)slot * block,
                                                   .tag = (uint64_t)slot};
            started[slot] = t;
        }
        rc = k3io_submit(r, refill, n_refill); /* one batch, as fio commits its refills */
    }
    free(refill);
    double secs = now() - t0;
    if (rc || errors) {
        fprintf(stderr, "readbench: %s, %d reads short or failed\n", rc ? strerror(-rc) : "ok",
                errors);
        return 1;
    }
    qsort(lat, n_lat, sizeof *lat, cmp_double);
    printf("backend,thp,depth,block_kib,seconds,mib_s,iops,lat_p50_ms,lat_p99_ms\n");
    printf("%s,%ld,%d,%ld,%.2f,%.1f,%.1f,%.3f,%.3f\n", k3io_backend_name(r), o.thp, depth,
           o.block_kib, secs,
           (double)bytes / secs / (1 << 20), (double)ios / secs, lat[n_lat / 2] * 1e3,
           lat[n_lat * 99 / 100] * 1e3);
    k3io_reader_destroy(r);
    k3io_close(&f);
    free(started);
    free(lat);
    free(done);
    return 0;
}
