/* `k3-uring iobench`: the read path alone, shaped like decode.  Per token it reads every
 * streamed trunk segment and, for each MoE layer, the records of top-k random experts
 * (our seeded generator; with --routes, the trace's tokens' experts in turn), through the same stream, reader and checksums as a real run,
 * with no compute in between: what the drives and the read path deliver, to set beside
 * fio on the same files. */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/base/clock.h"
#include "engine/cli/cli.h"
#include "engine/cli/drive_model.h"
#include "engine/cli/model_args.h"
#include "engine/cli/routes_args.h"
#include "engine/model/model.h"
#include "engine/pack/model_open.h"
#include "engine/base/options.h"
#include "engine/base/rng.h"
#include "engine/stream/ram_auto.h"
#include "engine/stream/stream.h"

/* The experts a token's MoE layer m reads: random, or token t's of the trace. */
static void choose(const struct k3_config *c, const struct k3_routes *trace, int64_t t, int m,
                   struct k3_rng *rng, int *ex)
{
    if (!trace) {
        k3_rng_distinct(rng, c->n_experts, c->top_k, ex);
        return;
    }
    const uint16_t *ids = k3_routes_at(trace, t, m);
    for (int j = 0; j < c->top_k; j++)
        ex[j] = ids[j];
}

static int one_token(struct k3_stream *s, const struct k3_model *m, struct k3_rng *rng,
                     const struct k3_routes *trace, int64_t t, struct k3_err *err)
{
    const struct k3_config *c = &m->cfg;
    const struct k3_trunk_source *trunk = k3_stream_trunk(s);
    struct k3_expert_store *store = k3_stream_experts(s);
    int ex[K3_MAX_TOPK];
    for (int l = 0, moe = 0; l < c->n_layers; l++) {
        if (trunk->segment(trunk->ctx, k3_seg_layer(l), err))
            return -1;
        if (!k3_layer_is_moe(c, l))
            continue;
        choose(c, trace, t, moe++, rng, ex);
        if (store->ops->begin(store, l, ex, c->top_k, err))
            return -1;
        for (int i = 0; i < c->top_k; i++) {
            struct k3_landed got;
            if (store->ops->next(store, true, &got, err) || store->ops->done(store, got.index, err))
                return -1;
        }
    }
    return trunk->segment(trunk->ctx, k3_seg_output(c), err);
}

/* The pack on the comma-separated drive folders, and the stream over it. */
static int open_pack(const char *drive_list, const struct k3_stream_opts *so, struct k3_model *m,
                     struct k3_stream **s, int *n_drives, char *note, size_t note_len,
                     struct k3_err *err)
{
    char *list = strdup(drive_list);
    if (!list)
        return k3_errf(err, "out of memory");
    const char *drives[256];
    int n = 0;
    for (char *t = strtok(list, ","); t && n < 256; t = strtok(NULL, ","))
        drives[n++] = t;
    /* one process reading the whole pack: a share pack is refused (it is one rank's) */
    int rc = k3_model_open_packed(m, drives, n, (struct k3_share){0}, err);
    if (!rc && (rc = k3_stream_open(s, m, so, note, note_len, err)))
        k3_model_close(m);
    free(list);
    *n_drives = n;
    return rc;
}

/* Reads `tokens` decode steps: a CSV line per step on stdout, the steady state on stderr. */
static int measure(struct k3_stream *s, const struct k3_model *m, int n_drives, int tokens,
                   uint64_t seed, const struct k3_routes *trace, struct k3_err *err)
{
    struct k3_rng rng;
    k3_rng_seed(&rng, seed);
    struct k3_stream_stats a = k3_stream_stats(s), b;
    double t0 = k3_now(), total_t = 0, cpu0 = 0;
    uint64_t total_bytes = 0;
    printf("token,seconds,bytes,GBps,reads,hits\n");
    for (int t = 0; t < tokens; t++) {
        if (t == 1)
            cpu0 = k3_cpu_seconds();
        double t1 = k3_now();
        if (one_token(s, m, &rng, trace, t, err))
            return -1;
        double dt = k3_now() - t1;
        b = k3_stream_stats(s);
        uint64_t bytes = b.bytes - a.bytes;
        printf("%d,%.4f,%llu,%.3f,%llu,%llu\n", t, dt, (unsigned long long)bytes, bytes / dt / 1e9,
               (unsigned long long)(b.reads - a.reads),
               (unsigned long long)(b.records_hit - a.records_hit));
        if (t > 0) { /* the first token also fills the slots: left out of the summary */
            total_t += dt;
            total_bytes += bytes;
        }
        a = b;
    }
    double cpu = tokens > 1 ? k3_cpu_seconds() - cpu0 : 0;
    fprintf(stderr,
            "k3-uring iobench: %s, %d drives, %d tokens in %.2f s; steady state %.1f MB/token, "
            "%.3f s/token, %.3f GB/s; verify %.3f s in all; CPU %.3f s per GB read\n",
            k3_stream_backend(s), n_drives, tokens, k3_now() - t0,
            tokens > 1 ? total_bytes / 1e6 / (tokens - 1) : 0.0,
            tokens > 1 ? total_t / (tokens - 1) : 0.0, total_t > 0 ? total_bytes / total_t / 1e9 : 0.0,
            k3_stream_stats(s).verify_seconds, total_bytes ? cpu / (total_bytes / 1e9) : 0.0);
    return 0;
}

/* --routes: the trace's kept tokens, one a step, must cover --tokens. */
static int load_routes(struct routes_args *a, const struct k3_config *c, int tokens,
                       struct k3_err *err)
{
    if (routes_args_load(a, c, err))
        return -1;
    if (a->path && tokens > k3_routes_tokens(&a->trace))
        return k3_errf(err, "--routes: --tokens %d; the trace's requests %d-%d hold %lld", tokens,
                       a->trace.first, a->trace.first + a->trace.n_requests - 1,
                       (long long)k3_routes_tokens(&a->trace));
    return 0;
}

int cmd_iobench(int argc, char **argv)
{
    static const struct k3_opt_choice ram_choices[] = {
        {"auto", K3_RAM_AUTO}, {"floor", K3_RAM_FLOOR}, {"trunk", K3_RAM_TRUNK}, {NULL, 0}};
    static const struct k3_opt_choice io_choices[] = {
        {"auto", K3IO_AUTO}, {"uring", K3IO_URING}, {"pread", K3IO_PREAD}, {NULL, 0}};
    const char *drive_list = NULL;
    int tokens = 16;
    uint64_t seed = 1;
    bool sync = false, no_cache = false;
    const char *drive_model_text = NULL;
    struct k3_ram_machine machine;
    k3_ram_machine_read(&machine, &k3_ram_paths_system, 1);
    struct routes_args routes = {0};
    struct k3_stream_opts so = {.ctx = 1, .threads = omp_get_max_threads(), .ram = K3_RAM_AUTO,
                                .machine = &machine,
                                .read = {.backend = K3IO_AUTO,
                                         .queue_depth = K3IO_DEFAULT_QUEUE_DEPTH}};
    const struct k3_opt opts[] = {
        {.name = "drives", .short_name = 'd', .type = K3_OPT_STRING, .dst = &drive_list,
         .arg = "D0,D1,..", .help = "packed drive folders"},
        {.name = "tokens", .short_name = 'n', .type = K3_OPT_INT, .dst = &tokens, .arg = "N",
         .help = "decode steps to read", .min = 1, .max = 1 << 20},
        {.name = "ram", .type = K3_OPT_SIZE, .dst = &so.ram, .choices = ram_choices, .min = 1,
         .help = "RAM budget (auto, floor, trunk: as run's)"},
        {.name = "io", .type = K3_OPT_ENUM, .dst = &so.read.backend, .choices = io_choices,
         .help = "read backend"},
        {.name = "sync", .type = K3_OPT_FLAG, .dst = &sync,
         .help = "one record at a time (the baseline)"},
        {.name = "no-cache", .type = K3_OPT_FLAG, .dst = &no_cache, .help = "no expert cache"},
        CLI_DRIVE_MODEL_OPT(&drive_model_text),
        {.name = "read-size", .type = K3_OPT_SIZE, .dst = &so.read.read_size, .min = 4096,
         .arg = "SIZE",
         .help = "the largest read a record is cut into (as run's)",
         .def = "4M, or less where a drive's device takes less"},
        {.name = "queue-depth", .type = K3_OPT_INT, .dst = &so.read.queue_depth, .arg = "N",
         .help = "reads in flight at most (as run's)", .min = 1, .max = K3IO_MAX_QUEUE_DEPTH},
        {.name = "seed", .short_name = 's', .type = K3_OPT_U64, .dst = &seed, .arg = "N",
         .help = "seed of the random routing"},
        CLI_ROUTES_OPTS(&routes),
    };
    _Static_assert(sizeof so.read.backend == sizeof(int), "--io parses into the enum as an int");
    const char *usage = "usage: k3-uring iobench --drives D0,D1,.. [--tokens N] [--ram floor]";
    struct k3_err err = {{0}};
    int rc = k3_opts_parse(opts, K3_OPTS_COUNT(opts), argc, argv, &err);
    if (rc > 0) {
        k3_opts_help(stdout, usage, opts, K3_OPTS_COUNT(opts));
        return 0;
    }
    if (!rc && !drive_list)
        rc = k3_errf(&err, "--drives is required");
    if (!rc)
        rc = cli_drive_model_parse(drive_model_text, &so.read.drive_model, &err);
    if (!rc)
        rc = routes_args_check(&routes, &err);
    if (!rc)
        rc = model_args_check_read_size(&so.read.read_size, drive_list, &err);
    if (rc) {
        fprintf(stderr, "k3-uring iobench: %s\n", err.msg);
        return 2;
    }
    so.cache = !no_cache;
    so.cache_fill = K3_CACHE_FILL_READS; /* the read path alone: hits from the asks, as decode's */
    so.sync = sync;
    struct k3_model m;
    struct k3_stream *s = NULL;
    char note[256] = "";
    int n_drives = 0;
    if (open_pack(drive_list, &so, &m, &s, &n_drives, note, sizeof note, &err)) {
        fprintf(stderr, "k3-uring iobench: %s\n", err.msg);
        return 1;
    }
    if (note[0])
        fprintf(stderr, "k3-uring iobench: note: %s\n", note);
    if (k3_stream_budget(s, NULL)->origin_unknown)
        fprintf(stderr, "k3-uring iobench: note: %s\n", k3_stream_budget(s, NULL)->origin);
    rc = load_routes(&routes, &m.cfg, tokens, &err);
    if (!rc)
        rc = measure(s, &m, n_drives, tokens, seed, routes.path ? &routes.trace : NULL, &err);
    if (rc)
        fprintf(stderr, "k3-uring iobench: %s\n", err.msg);
    struct k3io_stats io = k3_stream_io_stats(s);
    cli_drive_model_print(stderr, "k3-uring iobench", &so.read.drive_model, &io);
    k3_stream_close(s);
    k3_model_close(&m);
    routes_args_free(&routes);
    return rc ? 1 : 0;
}
