/* `k3-uring pack`: a checkpoint folder to the striped layout on N drives; with --ranks R,
 * one rank's share of the routed experts (or every rank's, each onto its own drives). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/base/clock.h"
#include "engine/cli/cli.h"
#include "engine/base/options.h"
#include "engine/model/share.h"
#include "engine/pack/pack.h"
#include "engine/pack/pack_format.h"

#define MAX_DRIVES 256
#define DRIVES_TEXT_MAX (1 << 16) /* --drives, %r replaced: room for MAX_DRIVES long paths */
#define MIN_CHUNK (64u << 10)
#define CHUNK_RECORD UINT64_MAX /* --chunk record */

/* What pack says: a line per phase (none with -q), warnings always, and on a terminal a
 * progress bar. */
struct report {
    bool quiet, tty;
    double start, last;
};

static void pack_note(void *ctx, bool warning, const char *line)
{
    const struct report *r = ctx;
    if (warning || !r->quiet)
        fprintf(stderr, "pack: %s%s\n", warning ? "warning: " : "", line);
}

static void pack_progress(void *ctx, uint64_t done, uint64_t total)
{
    struct report *r = ctx;
    double t = k3_now(), el = t - r->start;
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

/* Splits the comma-separated list (modified in place) into drives[0..*n). */
static int split_drives(char *list, const char **drives, int *n, struct k3_err *err)
{
    *n = 0;
    for (char *t = strtok(list, ","); t; t = strtok(NULL, ","))
        if (*n < MAX_DRIVES)
            drives[(*n)++] = t;
        else
            return k3_errf(err, "--drives: more than %d drives", MAX_DRIVES);
    return *n ? 0 : k3_errf(err, "--drives: no drives");
}

/* drive_list for rank r (k3_share_path), its error naming --drives. */
static int rank_path(const char *drive_list, int r, char *out, size_t cap, struct k3_err *err)
{
    if (!k3_share_path(drive_list, r, out, cap, err))
        return 0;
    char why[sizeof err->msg];
    snprintf(why, sizeof why, "%s", err->msg);
    return k3_errf(err, "--drives %s", why);
}

/* The share of each rank to write: --rank's alone, or every rank's (then the drive list
 * must name each rank's own drives through %r).  ranks 0: --ranks not given, the whole
 * model. */
static int shares_to_write(const char *drive_list, int ranks, int rank, int *first, int *last,
                           struct k3_err *err)
{
    if (rank >= 0 && !ranks)
        return k3_errf(err, "--rank %d: needs --ranks R (the number of ranks sharing the "
                       "experts)", rank);
    if (rank >= ranks)
        return k3_errf(err, "--rank %d: outside [0, %d) (--ranks %d)", rank, ranks, ranks);
    *first = rank >= 0 ? rank : 0;
    *last = rank >= 0 ? rank : ranks > 1 ? ranks - 1 : 0;
    if (*first == *last)
        return 0;
    static char a[DRIVES_TEXT_MAX], b[DRIVES_TEXT_MAX];
    if (rank_path(drive_list, 0, a, sizeof a, err) || rank_path(drive_list, 1, b, sizeof b, err))
        return -1;
    return strcmp(a, b) ? 0
                        : k3_errf(err, "--drives %s: no %%r, so all %d ranks' shares would land on "
                                  "the same drives (e.g. /box%%r/nvme0,/box%%r/nvme1), or give "
                                  "--rank", drive_list, ranks);
}

/* Rank r's drives: drive_list with %r replaced by r (0 for a whole pack, as run and serve
 * read it), split into drives[0..*n) pointing into list. */
static int rank_drives(const char *drive_list, int r, char *list, size_t cap, const char **drives,
                       int *n, struct k3_err *err)
{
    return rank_path(drive_list, r, list, cap, err) ? -1 : split_drives(list, drives, n, err);
}

int cmd_pack(int argc, char **argv)
{
    static const struct k3_opt_choice chunk_choices[] = {{"record", CHUNK_RECORD}, {NULL, 0}};
    const char *checkpoint = NULL, *drive_list = NULL, *trunk_type = "bf16";
    bool quiet = false;
    int replicas = 1, ranks = 0, rank = -1;
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
        {.name = "ranks", .type = K3_OPT_INT, .dst = &ranks, .arg = "R",
         .help = "pack for mpirun -np R: each rank's share holds the trunk and experts e with "
                 "e mod R = rank; %r in --drives is the rank", .min = 1, .max = K3_MAX_RANKS,
         .def = "1, the whole model"},
        {.name = "rank", .type = K3_OPT_INT, .dst = &rank, .arg = "r",
         .help = "write rank r's share only", .min = 0, .max = K3_MAX_RANKS - 1,
         .def = "every rank's, each onto its own drives"},
        {.name = "trunk-type", .type = K3_OPT_STRING, .dst = &trunk_type, .arg = "bf16|q8_0",
         .help = "the trunk's large matrices as shipped (bf16) or as Q8_0 (llama.cpp's blocks "
                 "of 32 int8 with one scale: about half the bytes)"},
        {.name = "quiet", .short_name = 'q', .type = K3_OPT_FLAG, .dst = &quiet,
         .help = "print nothing but warnings and errors"},
    };
    const char *usage = "usage: k3-uring pack --checkpoint DIR --drives D0,D1,.. [--chunk SIZE] "
                        "[--ranks R [--rank r]]";
    struct k3_err err = {{0}};
    int rc = k3_opts_parse(opts, K3_OPTS_COUNT(opts), argc, argv, &err);
    if (rc > 0) {
        k3_opts_help(stdout, usage, opts, K3_OPTS_COUNT(opts));
        return 0;
    }
    struct report report = {.quiet = quiet, .tty = isatty(2) != 0, .start = k3_now()};
    struct k3_pack_opts po = {.checkpoint = checkpoint, .replicas = replicas, .note = pack_note,
                              .progress = pack_progress, .ctx = &report,
                              .whole_records = chunk == CHUNK_RECORD};
    if (!po.whole_records)
        po.chunk = k3_pack_round_up(chunk, K3_PACK_ALIGN);
    enum k3_trunk_type tt = K3_TRUNK_BF16;
    if (!rc && k3_trunk_type_parse(trunk_type, &tt, &err))
        rc = -1;
    po.trunk_type = tt;
    if (!rc && (!checkpoint || !drive_list))
        rc = k3_errf(&err, "pack: --checkpoint and --drives are required (see --help)");
    int first = 0, last = 0, n;
    static char list[DRIVES_TEXT_MAX];
    const char *drives[MAX_DRIVES];
    if (!rc)
        rc = shares_to_write(drive_list, ranks, rank, &first, &last, &err);
    for (int r = first; !rc && r <= last; r++) /* every rank's list, before packing any */
        rc = rank_drives(drive_list, r, list, sizeof list, drives, &n, &err);
    if (rc) {
        fprintf(stderr, "k3-uring pack: %s\n", err.msg);
        return 2;
    }
    for (int r = first; r <= last; r++) {
        po.share = (struct k3_share){.rank = r, .ranks = ranks};
        rank_drives(drive_list, r, list, sizeof list, drives, &n, &err);
        po.drives = drives;
        po.n_drives = n;
        if (k3_pack(&po, &err)) {
            fprintf(stderr, "k3-uring pack: %s\n", err.msg);
            return 1;
        }
    }
    return 0;
}
