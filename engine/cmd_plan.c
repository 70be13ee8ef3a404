/* `k3-uring plan`: the memory floor and how a RAM budget is spent, for any config of
 * the family, without its weights (the full K3 included). */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/budget.h"
#include "engine/cli.h"
#include "engine/config.h"
#include "engine/forward.h"
#include "engine/options.h"
#include "engine/pack_format.h"
#include "engine/tensors.h"

/* What a pack of cfg over n_drives would hold, as the budget sees it. */
static int budget_input(const struct k3_config *c, int n_drives, int ctx, int threads,
                        struct k3_budget_input *in, uint64_t **segments, struct k3_err *err)
{
    struct k3_tensor_spec *specs;
    int n;
    if (k3_trunk_specs(c, &specs, &n))
        return k3_errf(err, "out of memory");
    uint64_t *bytes = calloc((size_t)n, sizeof *bytes), vectors = 0;
    for (int i = 0; bytes && i < n; i++) {
        uint64_t numel = 1;
        for (int d = 0; d < specs[i].ndim; d++)
            numel *= (uint64_t)specs[i].shape[d];
        bytes[i] = numel * (specs[i].kind == K3_T_F32 ? 4 : 2);
        if (specs[i].kind != K3_T_MATRIX)
            vectors += numel * 4;
    }
    struct k3_trunk_layout t = {0};
    int rc = bytes && !k3_trunk_layout_init(&t, c, specs, n, bytes) ? 0
                                                                     : k3_errf(err, "out of memory");
    struct k3_record_layout rec;
    k3_record_layout_init(&rec, c);
    uint64_t piece = k3_pack_record_piece_bytes(rec.bytes, (rec.bytes + n_drives - 1) / n_drives,
                                                (uint32_t)n_drives);
    uint64_t records = (uint64_t)k3_moe_layer_count(c) * c->n_experts;
    uint64_t pieces = records * (uint64_t)n_drives, trunk = 0;
    if (!rc) {
        *segments = calloc((size_t)t.n_segments, sizeof **segments);
        rc = *segments ? 0 : k3_errf(err, "out of memory");
    }
    for (int s = 0; !rc && s < t.n_segments; s++) {
        (*segments)[s] = k3_pack_round_up(t.segment_bytes[s], K3_PACK_ALIGN);
        trunk += t.segment_bytes[s];
    }
    if (!rc) {
        pieces += trunk / piece + (uint64_t)t.n_segments;
        *in = (struct k3_budget_input){
            .cfg = c,
            .ctx = ctx,
            .threads = threads,
            .n_segments = t.n_segments,
            .segment_bytes = *segments,
            .vector_bytes = vectors,
            .record_bytes = k3_pack_round_up(rec.bytes, K3_PACK_ALIGN),
            .piece_bytes = piece,
            .manifest_bytes = pieces * sizeof(struct k3_pack_piece) +
                              (records + (uint64_t)t.n_segments) * sizeof(struct k3_pack_object),
            .logits_bytes = (uint64_t)K3_CHUNK * (uint64_t)c->vocab * sizeof(float),
            .inflight_records = c->top_k,
        };
    }
    k3_trunk_layout_free(&t);
    free(bytes);
    free(specs);
    return rc;
}

int cmd_plan(int argc, char **argv)
{
    const char *config = "k3", *ram_text = NULL;
    int ctx = 4096, drives = 8, threads = 0;
    const struct k3_opt opts[] = {
        {"config", 'c', K3_OPT_STRING, &config, "NAME|FILE", "k3, k3-bench, k3-tiny or a config.json", 0, 0},
        {"ram", 0, K3_OPT_STRING, &ram_text, "SIZE|floor|trunk", "budget to plan (default: show the floor)", 0, 0},
        {"ctx", 0, K3_OPT_INT, &ctx, "N", "context positions the session holds", 1, 1 << 24},
        {"drives", 0, K3_OPT_INT, &drives, "N", "drives the pack stripes over", 1, 256},
        {"threads", 't', K3_OPT_INT, &threads, "N", "compute threads; 0 = one per core", 0, 4096},
    };
    const char *usage = "usage: k3-uring plan [--config k3] [--ram 8G] [--ctx 4096] [--drives 8]";
    struct k3_err err = {{0}};
    int rc = k3_opts_parse(opts, (int)(sizeof opts / sizeof opts[0]), argc, argv, usage, &err);
    if (rc > 0)
        return 0;
    if (rc) {
        fprintf(stderr, "k3-uring plan: %s\n", err.msg);
        return 2;
    }
    struct k3_config c;
    if (k3_config_named(&c, config, &err)) {
        fprintf(stderr, "k3-uring plan: %s\n", err.msg);
        return 1;
    }
    struct k3_budget_input in;
    uint64_t *segments = NULL;
    rc = budget_input(&c, drives, ctx, threads ? threads : omp_get_max_threads(), &in, &segments,
                      &err);
    struct k3_budget b;
    uint64_t ram = 0;
    if (!rc) {
        k3_budget_plan(&in, UINT64_MAX, &b, NULL); /* the floor, whatever the budget */
        if (!ram_text || !strcmp(ram_text, "floor"))
            ram = b.floor;
        else if (!strcmp(ram_text, "trunk"))
            ram = k3_budget_trunk_resident(&in);
        else if (k3_parse_size(ram_text, &ram))
            rc = k3_errf(&err, "--ram: \"%s\" is not a size, floor or trunk", ram_text);
    }
    if (!rc)
        rc = k3_budget_plan(&in, ram, &b, &err);
    if (!rc) {
        printf("%s over %d drives, %d threads:\n", config, drives, in.threads);
        k3_budget_print(stdout, &b, &in);
    } else {
        fprintf(stderr, "k3-uring plan: %s\n", err.msg);
    }
    free(segments);
    k3_config_free(&c);
    return rc ? 1 : 0;
}
