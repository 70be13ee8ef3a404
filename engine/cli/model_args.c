/* The options shared by run and serve that open a model: see model_args.h. */
#include "engine/cli/model_args.h"

#include "engine/cli/drive_model.h"
#include "engine/cli/env.h"
#include "engine/cluster/cluster.h"
#include "iouring/file.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MODEL_ARGS_COUNT 20

const struct k3_opt_choice k3_predict_from_choices[] = {
    {"moe-input", K3_PREDICT_MOE_INPUT}, {"moe-input-next", K3_PREDICT_MOE_INPUT_NEXT},
    {"layer-output", K3_PREDICT_LAYER_OUTPUT}, {"ids", K3_PREDICT_IDS}, {NULL, 0}};

/* What the read path says while running (a drive taken as lost). */
static void read_path_note(void *ctx, const char *line)
{
    (void)ctx;
    fprintf(stderr, "k3-uring: note: %s\n", line);
}

/* A rank stalled: said by the rank that noticed, the only one that can. */
static void cluster_fatal(const char *line)
{
    fflush(stdout);
    fprintf(stderr, "k3-uring: %s\n", line);
}

void model_args_init(struct model_args *a)
{
    *a = (struct model_args){
        .rank_timeout = 60,
        .leader = true,
        .runtime = {.ram = K3_RAM_AUTO, .prefetch_k = K3_PREFETCH_K_DEFAULT,
               .read = {.backend = K3IO_AUTO, .prefetch_depth = 2,
                        .queue_depth = K3IO_DEFAULT_QUEUE_DEPTH},
               .batch = K3_BATCH_DEFAULT, .note = read_path_note},
        .predict_on = 1,
        .predict_from = K3_PREDICT_MOE_INPUT_NEXT,
    };
}

static void model_args_table(struct model_args *a, struct k3_opt table[MODEL_ARGS_COUNT])
{
    static const struct k3_opt_choice numa_choices[] = {{"auto", 0}, {"off", 1}, {NULL, 0}};
    static const struct k3_opt_choice ram_choices[] = {
        {"auto", K3_RAM_AUTO}, {"floor", K3_RAM_FLOOR}, {"trunk", K3_RAM_TRUNK}, {NULL, 0}};
    static const struct k3_opt_choice io_choices[] = {
        {"auto", K3IO_AUTO}, {"uring", K3IO_URING}, {"pread", K3IO_PREAD}, {NULL, 0}};
    static const struct k3_opt_choice policy_choices[] = {
        {"lfru", K3_POLICY_LFRU}, {"lru", K3_POLICY_LRU}, {NULL, 0}};
    static const struct k3_opt_choice fill_choices[] = {
        {"ahead", K3_CACHE_FILL_AHEAD}, {"reads", K3_CACHE_FILL_READS}, {NULL, 0}};
    const struct k3_opt entries[] = {
        {.name = "model", .short_name = 'm', .type = K3_OPT_STRING, .dst = &a->runtime.model_dir,
         .arg = "DIR", .help = "checkpoint folder as shipped"},
        {.name = "drives", .short_name = 'd', .type = K3_OPT_STRING, .dst = &a->runtime.drives,
         .arg = "D0,D1,..", .help = "packed drive folders, any order (k3-uring pack)"},
        {.name = "threads", .short_name = 't', .type = K3_OPT_INT, .dst = &a->runtime.threads,
         .arg = "N", .help = "compute threads; 0 = one per core", .min = 0, .max = 4096},
        {.name = "numa", .type = K3_OPT_ENUM, .dst = &a->numa_off, .choices = numa_choices,
         .help = "auto: a pinned team per NUMA node, buffers on the drives' nodes; off: unpinned"},
        {.name = "ram", .type = K3_OPT_SIZE, .dst = &a->runtime.ram, .choices = ram_choices, .min = 1,
         .help = "RAM budget, a ceiling taken as used; auto: the memory cgroup's limit or "
         "MemAvailable, less a margin (-v says); floor: every segment streamed; trunk: the "
         "whole trunk resident"},
        {.name = "trunk-type", .type = K3_OPT_STRING, .dst = &a->runtime.trunk_type, .arg = "bf16|q8_0",
         .help = "hold the trunk's large matrices as bf16 or Q8_0 (with -m DIR, q8_0 quantizes "
         "each segment as it is read)", .def = "as the pack holds them; bf16 for -m DIR"},
        {.name = "io", .type = K3_OPT_ENUM, .dst = &a->runtime.read.backend, .choices = io_choices,
         .help = "read backend"},
        {.name = "batch-size", .short_name = 'b', .type = K3_OPT_INT, .dst = &a->runtime.batch,
         .arg = "N", .help = "prompt rows one pass may take, at most (the RAM budget may allow "
         "fewer; -v says)", .min = 1, .max = 1 << 20},
        {.name = "no-cache", .type = K3_OPT_FLAG, .dst = &a->runtime.no_cache,
         .help = "no expert cache in the spare budget"},
        {.name = "cache-policy", .type = K3_OPT_ENUM, .dst = &a->runtime.cache_policy,
         .choices = policy_choices,
         .help = "which cached expert gives way: lfru (recent asks counted, halving every "
                 "24 steps) or lru"},
        {.name = "cache-fill", .type = K3_OPT_ENUM, .dst = &a->runtime.cache_fill,
         .choices = fill_choices,
         .help = "where the expert cache grows: ahead, only into memory a low-priority "
                 "thread faulted in ahead of the reads (they never wait on fresh memory; hits "
                 "vary with that thread's pace); reads, into fresh memory as reads reach it "
                 "(hits depend on the asks alone)",
         .def = "ahead; replay: reads"},
        {.name = "sync", .type = K3_OPT_FLAG, .dst = &a->runtime.sync,
         .help = "read one record at a time, no overlap (baseline)"},
        CLI_DRIVE_MODEL_OPT(&a->drive_model_text),
        {.name = "predict", .type = K3_OPT_ENUM, .dst = &a->predict_on, .choices = k3_opt_on_off,
         .help = "prefetch the next layer's likely experts"},
        {.name = "prefetch-k", .type = K3_OPT_INT, .dst = &a->runtime.prefetch_k, .arg = "K",
         .help = "experts prefetched per layer", .min = 1, .max = 4096},
        {.name = "prefetch-depth", .type = K3_OPT_INT, .dst = &a->runtime.read.prefetch_depth,
         .arg = "N",
         .help = "prefetch reads in flight per drive, started only while no demand read waits",
         .min = 1, .max = 1024},
        {.name = "read-size", .type = K3_OPT_SIZE, .dst = &a->runtime.read.read_size, .min = 4096,
         .arg = "SIZE",
         .help = "the largest read a record is cut into: a multiple of 4K, at most what the "
                 "drives' devices take in one request (queue/max_sectors_kb)",
         .def = "4M, or less where a drive's device takes less"},
        {.name = "queue-depth", .type = K3_OPT_INT, .dst = &a->runtime.read.queue_depth, .arg = "N",
         .help = "reads in flight at most (the ring's entries)", .min = 1,
         .max = K3IO_MAX_QUEUE_DEPTH},
        {.name = "predict-from", .type = K3_OPT_ENUM, .dst = &a->predict_from,
         .choices = k3_predict_from_choices,
         .help = "the hidden state the next layer's router is applied to, or ids: no router, the experts this layer chose, by co-occurrence counts learned online"},
        {.name = "rank-timeout", .type = K3_OPT_FLOAT, .dst = &a->rank_timeout, .arg = "S",
         .help = "mpirun: seconds a rank waits for another within a step before ending the run",
         .min = 0.001, .max = 1e6},
    };
    _Static_assert(K3_OPTS_COUNT(entries) == MODEL_ARGS_COUNT,
                   "MODEL_ARGS_COUNT is the number of entries in the table");
    memcpy(table, entries, sizeof entries);
}

int model_args_parse(struct model_args *a, const struct k3_opt *own, int n_own, int argc,
                     char **argv, const char *usage, struct k3_err *err)
{
    struct k3_opt *opts = malloc(sizeof *opts * (size_t)(MODEL_ARGS_COUNT + n_own));
    if (!opts)
        return k3_errf(err, "out of memory");
    model_args_table(a, opts);
    memcpy(opts + MODEL_ARGS_COUNT, own, sizeof *own * (size_t)n_own);
    int rc = k3_opts_parse(opts, MODEL_ARGS_COUNT + n_own, argc, argv, err);
    if (rc > 0) {
        k3_opts_help(stdout, usage, opts, MODEL_ARGS_COUNT + n_own);
        cli_env_help(stdout);
    }
    free(opts);
    return rc;
}

static int join_ranks(struct model_args *a, struct k3_err *err);

uint64_t model_args_default_read_size(const char *list)
{
    uint64_t size = MODEL_ARGS_READ_SIZE;
    for (const char *at = list; *at;) {
        size_t len = strcspn(at, ",");
        char path[4096];
        snprintf(path, sizeof path, "%.*s", (int)len, at);
        uint64_t most = k3io_device_max_read(path) / K3IO_ALIGN * K3IO_ALIGN;
        if (most && most < size)
            size = most;
        at += len + (at[len] == ',');
    }
    return size;
}

int model_args_check_read_size(uint64_t *read_size_p, const char *list, struct k3_err *err)
{
    if (!*read_size_p) {
        *read_size_p = model_args_default_read_size(list);
        return 0;
    }
    uint64_t read_size = *read_size_p;
    if (read_size % K3IO_ALIGN)
        return k3_errf(err, "--read-size: %llu bytes is not a multiple of 4 KiB (4096)",
                       (unsigned long long)read_size);
    if (read_size > K3IO_MAX_IO)
        return k3_errf(err, "--read-size: %llu bytes is above 1 GiB, the most one read "
                            "carries (a registered buffer)", (unsigned long long)read_size);
    for (const char *at = list; *at;) {
        size_t len = strcspn(at, ",");
        char path[4096];
        snprintf(path, sizeof path, "%.*s", (int)len, at);
        uint64_t most = k3io_device_max_read(path);
        if (most && read_size > most)
            return k3_errf(err, "--read-size: %llu bytes is above %llu, the most the device "
                                "under %s takes in one read (its queue/max_sectors_kb)",
                           (unsigned long long)read_size, (unsigned long long)most, path);
        at += len + (at[len] == ',');
    }
    return 0;
}

int model_args_check(struct model_args *a, struct k3_err *err)
{
    struct k3_runtime_opts *o = &a->runtime;
    if (!!o->model_dir == !!o->drives)
        return k3_errf(err, "give the model as exactly one of -m DIR or --drives D0,D1,...");
    /* A checkpoint folder reads its shards as if each were a drive; modelled so, one disk
     * would look like as many drives as it has shards. */
    if (o->model_dir && a->drive_model_text)
        return k3_errf(err, "--drive-model needs --drives: a checkpoint folder's shards are "
                            "not drives (pack it onto the drives to model)");
    enum k3_trunk_type tt;
    if (o->trunk_type && k3_trunk_type_parse(o->trunk_type, &tt, err))
        return -1;
    if (cli_drive_model_parse(a->drive_model_text, &o->read.drive_model, err))
        return -1;
    o->numa_off = a->numa_off;
    o->topology = cli_env()->topology;
    o->faults = cli_env()->faults;
    o->fault_seed = cli_env()->fault_seed;
    o->check_cache = cli_env()->check_cache;
    o->predict = a->predict_on ? a->predict_from : K3_PREDICT_OFF;
    const char *where = o->drives ? o->drives : o->model_dir;
    return join_ranks(a, err) || model_args_check_read_size(&o->read.read_size, where, err)
               ? -1
               : 0;
}

/* Under mpirun: this rank's share, and its own paths where they hold "%r". */
static int join_ranks(struct model_args *a, struct k3_err *err)
{
    struct k3_runtime_opts *o = &a->runtime;
    struct k3_cluster_opts co = {.timeout = a->rank_timeout, .fatal = cluster_fatal,
                                 .fault = cli_env()->rank_fault};
    if (k3_cluster_init(&o->cluster, &co, err))
        return -1;
    o->share = k3_cluster_share(o->cluster);
    a->leader = k3_cluster_leader(o->cluster);
    int rank = o->share.rank;
    if (o->drives && k3_share_path(o->drives, rank, a->drives_path, sizeof a->drives_path, err))
        return k3_err_prefix(err, "--drives");
    if (o->model_dir && k3_share_path(o->model_dir, rank, a->model_path, sizeof a->model_path, err))
        return k3_err_prefix(err, "-m");
    o->drives = o->drives ? a->drives_path : NULL;
    o->model_dir = o->model_dir ? a->model_path : NULL;
    return 0;
}

bool model_args_leader(const struct model_args *a) { return a->leader; }

void model_args_print_error(const struct model_args *a, const struct k3_err *err)
{
    /* Every rank parsed the same command line; one says what is wrong with it. */
    if (a->leader && k3_cluster_env_rank() == 0) {
        fflush(stdout);
        fprintf(stderr, "k3-uring: %s\n", err->msg);
    }
}

int model_args_exit(struct model_args *a, int status)
{
    k3_cluster_finish(a->runtime.cluster, status != 0);
    a->runtime.cluster = NULL;
    return a->leader ? status : 0;
}

void model_args_print_opened(const struct k3_runtime *rt, bool verbose)
{
    for (const char *at = k3_runtime_notes(rt); *at;) {
        size_t len = strcspn(at, "\n");
        fprintf(stderr, "k3-uring: note: %.*s\n", (int)len, at);
        at += len + (at[len] == '\n');
    }
    const struct k3_stream *stream = k3_runtime_stream(rt);
    if (verbose && stream) {
        const struct k3_budget_input *in;
        const struct k3_budget *b = k3_stream_budget(stream, &in);
        if (!b->origin_unknown) /* else a note above said it */
            fprintf(stderr, "k3-uring: %s\n", b->origin);
        fprintf(stderr, "k3-uring: reads through %s; ", k3_stream_backend(stream));
        k3_budget_print(stderr, b, in);
        k3_placement_print(stderr, k3_runtime_placement(rt), b->expert_inflight + b->cache_bytes);
    }
}
