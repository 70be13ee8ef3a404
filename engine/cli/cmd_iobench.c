/* `k3-uring iobench`: the read path alone, shaped like decode.  Per token it reads every
 * streamed trunk segment and, for each MoE layer, the records of top-k random experts
 * (our seeded generator), through the same stream, reader and checksums as a real run,
 * with no compute in between: what the drives and the read path deliver, to set beside
 * fio on the same files. */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/cli/cli.h"
#include "engine/model/model.h"
#include "engine/base/options.h"
#include "engine/base/rng.h"
#include "engine/stream/stream.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int one_token(struct k3_stream *s, const struct k3_model *m, struct k3_rng *rng,
                     struct k3_err *err)
{
    const struct k3_config *c = &m->cfg;
    const struct k3_trunk_source *trunk = k3_stream_trunk(s);
    struct k3_expert_store *store = k3_stream_experts(s);
    int ex[1024];
    for (int l = 0; l < c->n_layers; l++) {
        if (trunk->segment(trunk->ctx, k3_seg_layer(l), err))
            return -1;
        if (!k3_layer_is_moe(c, l))
            continue;
        k3_rng_distinct(rng, c->n_experts, c->top_k, ex);
        if (store->ops->begin(store, l, ex, c->top_k, err))
            return -1;
        for (int i = 0; i < c->top_k; i++) {
            struct k3_landed got;
            if (store->ops->next(store, true, &got, err))
                return -1;
        }
    }
    return trunk->segment(trunk->ctx, k3_seg_output(c), err);
}

int cmd_iobench(int argc, char **argv)
{
    const char *drive_list = NULL, *ram_text = "floor", *io_text = "auto";
    int tokens = 16;
    uint64_t seed = 1;
    bool sync = false, no_cache = false;
    const struct k3_opt opts[] = {
        {"drives", 'd', K3_OPT_STRING, &drive_list, "D0,D1,..", "packed drive folders", 0, 0},
        {"tokens", 'n', K3_OPT_INT, &tokens, "N", "decode steps to read", 1, 1 << 20},
        {"ram", 0, K3_OPT_STRING, &ram_text, "SIZE|floor|trunk", "RAM budget", 0, 0},
        {"io", 0, K3_OPT_STRING, &io_text, "auto|uring|pread", "read backend", 0, 0},
        {"sync", 0, K3_OPT_FLAG, &sync, NULL, "one record at a time (the baseline)", 0, 0},
        {"no-cache", 0, K3_OPT_FLAG, &no_cache, NULL, "no expert cache", 0, 0},
        {"seed", 's', K3_OPT_U64, &seed, "N", "seed of the random routing", 0, 0},
    };
    const char *usage = "usage: k3-uring iobench --drives D0,D1,.. [--tokens N] [--ram floor]";
    struct k3_err err = {{0}};
    int rc = k3_opts_parse(opts, (int)(sizeof opts / sizeof opts[0]), argc, argv, usage, &err);
    if (rc > 0)
        return 0;
    struct k3_stream_opts so = {.ctx = 1, .threads = omp_get_max_threads(), .cache = !no_cache,
                                .sync = sync};
    if (!rc && !drive_list)
        rc = k3_errf(&err, "--drives is required");
    if (!rc && !strcmp(ram_text, "floor"))
        so.ram = K3_RAM_FLOOR;
    else if (!rc && !strcmp(ram_text, "trunk"))
        so.ram = K3_RAM_TRUNK;
    else if (!rc && (k3_parse_size(ram_text, &so.ram) || !so.ram))
        rc = k3_errf(&err, "--ram: \"%s\" is not a size, floor or trunk", ram_text);
    so.backend = !strcmp(io_text, "uring") ? K3IO_URING : !strcmp(io_text, "pread") ? K3IO_PREAD : K3IO_AUTO;
    if (!rc && so.backend == K3IO_AUTO && strcmp(io_text, "auto"))
        rc = k3_errf(&err, "--io: \"%s\" is not auto, uring or pread", io_text);
    if (rc) {
        fprintf(stderr, "k3-uring iobench: %s\n", err.msg);
        return 2;
    }
    char *list = strdup(drive_list);
    const char *drives[256];
    int n = 0;
    for (char *t = strtok(list, ","); t && n < 256; t = strtok(NULL, ","))
        drives[n++] = t;
    struct k3_model m;
    struct k3_stream *s = NULL;
    char note[256] = "";
    rc = k3_model_open_packed(&m, drives, n, &err);
    if (!rc && (rc = k3_stream_open(&s, &m, &so, note, sizeof note, &err)))
        k3_model_close(&m);
    free(list);
    if (rc) {
        fprintf(stderr, "k3-uring iobench: %s\n", err.msg);
        return 1;
    }
    if (note[0])
        fprintf(stderr, "k3-uring iobench: note: %s\n", note);
    struct k3_rng rng;
    k3_rng_seed(&rng, seed);
    struct k3_stream_stats a = k3_stream_stats(s), b;
    double t0 = now(), total_t = 0;
    uint64_t total_bytes = 0;
    printf("token,seconds,bytes,GBps,reads,hits\n");
    for (int t = 0; !rc && t < tokens; t++) {
        double t1 = now();
        rc = one_token(s, &m, &rng, &err);
        double dt = now() - t1;
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
    if (!rc)
        fprintf(stderr,
                "k3-uring iobench: %s, %d drives, %d tokens in %.2f s; steady state %.1f MB/token, "
                "%.3f s/token, %.3f GB/s; verify %.3f s in all\n",
                k3_stream_backend(s), n, tokens, now() - t0,
                tokens > 1 ? total_bytes / 1e6 / (tokens - 1) : 0.0,
                tokens > 1 ? total_t / (tokens - 1) : 0.0, total_t > 0 ? total_bytes / total_t / 1e9 : 0.0,
                k3_stream_stats(s).verify_seconds);
    else
        fprintf(stderr, "k3-uring iobench: %s\n", err.msg);
    k3_stream_close(s);
    k3_model_close(&m);
    return rc ? 1 : 0;
}
