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

#include "engine/base/clock.h"
#include "engine/base/options.h"
#include "iouring/file.h"
#include "iouring/reader.h"

static const struct k3_opt_choice backend_choices[] = {
    {"io_uring", K3IO_URING}, {"pread", K3IO_PREAD}, {"auto", K3IO_AUTO}, {NULL, 0}};

static struct opts {
    const char *file;
    enum k3io_backend backend;
    int depth, block_kib, size_mib, seconds, thp, io_threads;
    uint64_t seed;
} o = {.backend = K3IO_URING, .depth = 8, .block_kib = 1024, .size_mib = 1024, .seconds = 10,
       .seed = 1};
_Static_assert(sizeof o.backend == sizeof(int), "--backend parses into the enum as an int");

static const struct k3_opt opt_table[] = {
    {.name = "FILE", .type = K3_OPT_STRING, .dst = &o.file, .positional = true,
     .help = "the file to read (O_DIRECT)"},
    {.name = "backend", .type = K3_OPT_ENUM, .dst = &o.backend, .choices = backend_choices,
     .help = "the reader's backend"},
    {.name = "depth", .type = K3_OPT_INT, .dst = &o.depth, .arg = "N",
     .help = "requests in flight (pread: as many threads)", .min = 1, .max = 4096},
    {.name = "block-kib", .type = K3_OPT_INT, .dst = &o.block_kib, .arg = "KIB",
     .help = "read size in KiB, a multiple of 4", .min = 4, .max = 1 << 20},
    {.name = "size-mib", .type = K3_OPT_INT, .dst = &o.size_mib, .arg = "MIB",
     .help = "read offsets fall in the first SIZE MiB of the file", .min = 1, .max = 1 << 24},
    {.name = "seconds", .type = K3_OPT_INT, .dst = &o.seconds, .arg = "S", .help = "run time",
     .min = 1, .max = 86400},
    {.name = "seed", .type = K3_OPT_U64, .dst = &o.seed, .arg = "N",
     .help = "offset generator seed"},
    {.name = "thp", .type = K3_OPT_INT, .dst = &o.thp, .arg = "0|1",
     .help = "1: buffers on transparent huge pages (MADV_HUGEPAGE)", .min = 0, .max = 1},
    {.name = "io-threads", .type = K3_OPT_INT, .dst = &o.io_threads, .arg = "N",
     .help = "io_uring: > 1 reads from an I/O thread with its own ring (the file on thread 0), "
             "handing chunks over as the engine does on several NUMA nodes", .min = 0,
     .max = 256},
};

/* -1 to go on, else the exit code: 0 after --help, 2 on a usage error. */
static int parse(int argc, char **argv)
{
    const char *usage = "usage: readbench FILE [options]\n\n"
                        "Random reads of one size through the k3io reader at a fixed depth; "
                        "one CSV line.";
    struct k3_err err = {{0}};
    int rc = k3_opts_parse(opt_table, K3_OPTS_COUNT(opt_table), argc, argv, &err);
    if (rc > 0) {
        k3_opts_help(stdout, usage, opt_table, K3_OPTS_COUNT(opt_table));
        return 0;
    }
    if (!rc && !o.file)
        rc = k3_errf(&err, "FILE is required (see --help)");
    if (rc) {
        fprintf(stderr, "readbench: %s\n", err.msg);
        return 2;
    }
    return -1;
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
    int rc = parse(argc, argv);
    if (rc >= 0)
        return rc;
    const char *path = o.file;
    uint32_t block = (uint32_t)o.block_kib * 1024;
    uint64_t blocks = (uint64_t)o.size_mib * 1024 * 1024 / block;
    struct k3io_file f;
    rc = k3io_open(&f, path, O_RDONLY, true);
    if (rc || f.size < blocks * block || !blocks || block % K3IO_ALIGN) {
        fprintf(stderr, "readbench: %s: %s\n", path,
                rc ? strerror(-rc) : "smaller than --size-mib, or a bad --block-kib");
        return 1;
    }
    int depth = o.depth;
    char *area = alloc_area((size_t)depth * block, o.thp);
    struct k3io_config cfg = {.backend = o.backend, .fds = &f.fd, .n_files = 1, .area = area,
                              .area_bytes = (size_t)depth * block, .queue_depth = (unsigned)depth,
                              .max_io_bytes = block, .pread_threads = depth,
                              .io_threads = o.io_threads, .file_thread = (const int[]){0}};
    char note[256];
    struct k3io_reader *r;
    if (!area || (rc = k3io_reader_create(&r, &cfg, note, sizeof note))) {
        fprintf(stderr, "readbench: reader: %s %s\n", strerror(area ? -rc : ENOMEM), note);
        return 1;
    }
    if (note[0])
        fprintf(stderr, "readbench: %s\n", note);

    uint64_t seed = o.seed * 0x9e3779b97f4a7c15ull | 1;
    double *started = calloc((size_t)depth, sizeof *started);
    size_t lat_cap = 1 << 20, n_lat = 0;
    double *lat = malloc(lat_cap * sizeof *lat);
    struct k3io_done *done = malloc((size_t)depth * sizeof *done);
    if (!started || !lat || !done)
        return 1;
    double t0 = k3_now(), end = t0 + (double)o.seconds;
    for (int slot = 0; slot < depth; slot++) { /* tag = slot: one buffer per slot */
        struct k3io_req q = {.file = 0, .len = block, .offset = rng(&seed) % blocks * block,
                             .buf = area + (size_t)slot * block, .tag = (uint64_t)slot};
        started[slot] = k3_now();
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
        double t = k3_now();
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
    double secs = k3_now() - t0;
    if (rc || errors) {
        fprintf(stderr, "readbench: %s, %d reads short or failed\n", rc ? strerror(-rc) : "ok",
                errors);
        return 1;
    }
    qsort(lat, n_lat, sizeof *lat, cmp_double);
    printf("backend,thp,depth,block_kib,seconds,mib_s,iops,lat_p50_ms,lat_p99_ms\n");
    printf("%s,%d,%d,%d,%.2f,%.1f,%.1f,%.3f,%.3f\n", k3io_backend_name(r), o.thp, depth,
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
