/* `k3-uring pack`: a checkpoint folder to the striped layout on N drives. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "engine/cli/cli.h"
#include "engine/base/options.h"
#include "engine/pack/pack.h"
#include "engine/pack/pack_format.h"

#define MAX_DRIVES 256
#define MIN_CHUNK (64u << 10)
#define CHUNK_RECORD UINT64_MAX /* --chunk record */

/* What pack says: a line per phase (none with -q), warnings always, and on a terminal a
 * progress bar. */
struct report {
    bool quiet, tty;
    double start, last;
};

static double seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void pack_note(void *ctx, bool warning, const char *line)
{
    const struct report *r = ctx;
    if (warning || !r->quiet)
        fprintf(stderr, "pack: %s%s\n", warning ? "warning: " : "", line);
}

static void pack_progress(void *ctx, uint64_t done, uint64_t total)
{
    struct report *r = ctx;
    double t = seconds(), el = t - r->start;
    if (r->quiet || !r->tty || (done < total && t - r->last < 0.25))
        return;
    r->last = t;
    double frac = total ? (double)done / total : 1, rate = el > 0 ? done / el : 0;
    char bar[31];
    for (int i = 0; i < 30; i++)
        bar[i] = i < (int)(frac * 30) ? '#' : ' ';
    bar[30] = 0;
    fprintf(stderr, "\rpack: [%s] %5.1f%% %.2f/%.2f GB %4.0f MB/s ETA %4.0f s %s", bar,
            100 * frac, done / 1e9, total / 1e9, rate / 1e6, rate > 0 ? (total - done) / rate : 0,
            done == total ? "\n" : "");
}

int cmd_pack(int argc, char **argv)
{
    static const struct k3_opt_choice chunk_choices[] = {{"record", CHUNK_RECORD}, {NULL, 0}};
    const char *checkpoint = NULL, *drive_list = NULL;
    bool quiet = false;
    int replicas = 1;
    uint64_t chunk = 0;
    const struct k3_opt opts[] = {
        {.name = "checkpoint", .short_name = 'm', .type = K3_OPT_STRING, .dst = &checkpoint,
         .arg = "DIR", .help = "checkpoint folder as shipped"},
        {.name = "drives", .short_name = 'd', .type = K3_OPT_STRING, .dst = &drive_list,
         .arg = "D0,D1,..", .help = "drive folders (mount points), in drive order"},
        {.name = "chunk", .type = K3_OPT_SIZE, .dst = &chunk, .choices = chunk_choices,
         .min = MIN_CHUNK, .def = "each record in one piece per drive",
         .help = "largest piece, e.g. 1M; record: each record whole on one drive, round-robin"},
        {.name = "replicas", .type = K3_OPT_INT, .dst = &replicas, .arg = "N",
         .help = "copies of every piece: 2 puts a second one on the next drive", .min = 1, .max = 2},
        {.name = "quiet", .short_name = 'q', .type = K3_OPT_FLAG, .dst = &quiet,
         .help = "print nothing but warnings and errors"},
    };
    const char *usage = "usage: k3-uring pack --checkpoint DIR --drives D0,D1,.. [--chunk SIZE]";
    struct k3_err err = {{0}};
    int rc = k3_opts_parse(opts, K3_OPTS_COUNT(opts), argc, argv, &err);
    if (rc > 0) {
        k3_opts_help(stdout, usage, opts, K3_OPTS_COUNT(opts));
        return 0;
    }
    struct report report = {.quiet = quiet, .tty = isatty(2) != 0, .start = seconds()};
    struct k3_pack_opts po = {.checkpoint = checkpoint, .replicas = replicas, .note = pack_note,
                              .progress = pack_progress, .ctx = &report,
                              .whole_records = chunk == CHUNK_RECORD};
    if (!po.whole_records)
        po.chunk = k3_pack_round_up(chunk, K3_PACK_ALIGN);
    if (!rc && (!checkpoint || !drive_list))
        rc = k3_errf(&err, "pack: --checkpoint and --drives are required (see --help)");
    char *list = drive_list ? strdup(drive_list) : NULL;
    const char *drives[MAX_DRIVES];
    int n = 0;
    for (char *t = list ? strtok(list, ",") : NULL; !rc && t; t = strtok(NULL, ","))
        if (n < MAX_DRIVES)
            drives[n++] = t;
        else
            rc = k3_errf(&err, "--drives: more than %d drives", MAX_DRIVES);
    if (!rc && list && !n)
        rc = k3_errf(&err, "--drives: no drives");
    if (rc) {
        fprintf(stderr, "k3-uring pack: %s\n", err.msg);
        free(list);
        return 2;
    }
    po.drives = drives;
    po.n_drives = n;
    rc = k3_pack(&po, &err);
    free(list);
    if (rc) {
        fprintf(stderr, "k3-uring pack: %s\n", err.msg);
        return 1;
    }
    return 0;
}
