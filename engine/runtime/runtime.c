#include "engine/runtime/runtime.h"

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/base/clock.h"
#include "engine/cluster/cluster.h"
#include "engine/pack/model_open.h"
#include "engine/pack/packed.h"
#include "engine/text/tokenizer.h"

#define MAX_DRIVES 256

struct k3_runtime {
    struct k3_runtime_opts o;
    enum k3_predict_from predict;  /* the prediction the forward pass and the read path
                                    * share: --predict-from, off under --sync */
    struct k3_placement place;
    struct k3_model m;
    struct k3_trace *trace;
    struct k3_stream *stream;      /* the read path */
    struct k3_expert_store *store; /* the stream's expert store */
    struct k3_forward fwd;
    struct k3_tokenizer *tok;      /* loaded by k3_runtime_tokenizer */
    struct k3_ram_machine machine; /* what this process may use (ram_auto.h), read when
                                    * the stream opens */
    char notes[1024];              /* fallbacks taken, a line each, or "" */
};

static void note(struct k3_runtime *rt, const char *line)
{
    size_t at = strlen(rt->notes);
    snprintf(rt->notes + at, sizeof rt->notes - at, "%s%s", at ? "\n" : "", line);
}

/* Splits "a,b,c" in place into at most cap items. */
static int split_list(char *text, const char **items, int cap)
{
    int n = 0;
    for (char *tok = strtok(text, ","); tok && n < cap; tok = strtok(NULL, ","))
        items[n++] = tok;
    return n;
}

int k3_runtime_open(struct k3_runtime **out, const struct k3_runtime_opts *o, struct k3_err *err)
{
    struct k3_runtime *rt = *out = calloc(1, sizeof *rt);
    if (!rt)
        return k3_errf(err, "out of memory");
    rt->o = *o;
    rt->predict = o->sync ? K3_PREDICT_OFF : o->predict;
    char *list = o->drives ? strdup(o->drives) : NULL;
    if (o->drives && !list)
        return k3_errf(err, "out of memory");
    const char *drives[MAX_DRIVES];
    int n = list ? split_list(list, drives, MAX_DRIVES) : 0;
    int rc = k3_placement_init(&rt->place, drives, n, o->threads, o->numa_off, &o->topology, err);
    if (!rc && o->model_dir)
        rc = k3_model_open_checkpoint(&rt->m, o->model_dir, err);
    else if (!rc)
        rc = n ? k3_model_open_packed(&rt->m, drives, n, o->share, err) : k3_errf(err, "--drives: no drives");
    free(list);
    enum k3_trunk_type tt;
    if (!rc && o->trunk_type)
        rc = k3_trunk_type_parse(o->trunk_type, &tt, err) || k3_model_use_trunk_type(&rt->m, (int)tt, err)
                 ? -1 : 0;
    return rc;
}

static int open_stream(struct k3_runtime *rt, int ctx, int seqs, int rows,
                       struct k3_caller_bytes caller, struct k3_err *err)
{
    const struct k3_runtime_opts *o = &rt->o;
    /* Ranks on one box share its memory: each plans from an equal part. */
    k3_ram_machine_read(&rt->machine, &k3_ram_paths_system, k3_cluster_box_ranks(o->cluster));
    struct k3_stream_opts so = {
        .read = o->read,
        .ram = o->ram,
        .machine = &rt->machine,
        .ctx = ctx,
        .seqs = seqs,
        .threads = omp_get_max_threads(),
        .cache = !o->no_cache,
        .cache_policy = o->cache_policy,
        .cache_fill = o->cache_fill,
        .sync = o->sync,
        .prefetch_k = rt->predict != K3_PREDICT_OFF ? o->prefetch_k : 0,
        .predict_ids = rt->predict == K3_PREDICT_IDS,
        .check_cache = o->check_cache,
        .trace = rt->trace,
        .place = &rt->place,
        .faults = o->faults,
        .fault_seed = o->fault_seed,
        .caller_bytes = caller.fixed,
        .caller_row_bytes = caller.per_row,
        .rows = rows,
        .note = o->note,
        .note_ctx = o->note_ctx,
    };
    char line[256] = "";
    if (k3_stream_open(&rt->stream, &rt->m, &so, line, sizeof line, err))
        return -1;
    if (line[0])
        note(rt, line);
    const struct k3_budget *b = k3_stream_budget(rt->stream, NULL);
    if (b->origin_unknown)
        note(rt, b->origin);
    const struct k3_packed *p = rt->m.packed;
    for (int d = 0; d < p->n_drives; d++)
        if (!p->drives[d].data.direct) {
            snprintf(line, sizeof line, "%s %s refuses O_DIRECT; reading it through the page cache",
                     k3_packed_noun(p), p->drives[d].path);
            note(rt, line);
            break;
        }
    rt->store = k3_stream_experts(rt->stream);
    return 0;
}

int k3_runtime_start(struct k3_runtime *rt, int ctx, int seqs, int rows,
                     struct k3_caller_bytes caller, const struct k3_runtime_hooks *hooks,
                     struct k3_err *err)
{
    const struct k3_runtime_opts *o = &rt->o;
    const struct k3_packed *p = rt->m.packed;
    /* Under mpirun the followers trace into parts that join the leader's file at close. */
    bool leader = k3_cluster_leader(o->cluster);
    int rank = o->cluster ? o->share.rank : -1;
    if (o->trace_path &&
        k3_trace_open(&rt->trace, leader ? o->trace_path : NULL, p->n_drives, rank, err))
        return -1;
    /* mpirun's step messages hold K3_CHUNK rows (engine/cluster). */
    if (o->cluster && rows > K3_CHUNK)
        rows = K3_CHUNK;
    if (open_stream(rt, ctx, seqs, rows, caller, err) ||
        k3_forward_init(&rt->fwd, &rt->m, rt->store, ctx,
                        k3_stream_budget(rt->stream, NULL)->rows, rt->place.plan, err))
        return -1;
    rt->fwd.hooks = (struct k3_forward_hooks){
        .trunk = k3_stream_trunk(rt->stream),
        .predict = rt->predict,
        .predict_k = o->prefetch_k,
        .trace = rt->trace,
        .routes = hooks ? hooks->routes : NULL,
        .on_layer = hooks ? hooks->on_layer : NULL,
        .on_layer_ctx = hooks ? hooks->on_layer_ctx : NULL,
    };
    if (rt->fwd.hooks.predict == K3_PREDICT_IDS && k3_forward_predict_ids(&rt->fwd, err))
        return -1;
    return k3_cluster_attach(o->cluster, &rt->fwd, err);
}

/* The trace closes after the stream, whose last reads may still land into it. */
int k3_runtime_close(struct k3_runtime *rt, struct k3_err *err)
{
    if (!rt)
        return 0;
    k3_forward_free(&rt->fwd);
    k3_stream_close(rt->stream);
    k3_cluster_stop(rt->o.cluster);
    int rc = k3_cluster_gather_trace(rt->o.cluster, rt->trace, err);
    if (k3_trace_close(rt->trace, rc ? NULL : err))
        rc = -1;
    k3_tok_free(rt->tok);
    k3_model_close(&rt->m);
    k3_placement_free(&rt->place);
    free(rt);
    return rc;
}

/* Experts may be dealt out (share.h) when every rank holds every expert.  (The deal
 * follows each rank's own next-layer predictions, which agree: every rank routes the same
 * hidden state with the same router bytes, streamed or not; stages.c.) */
int k3_runtime_agree(struct k3_runtime *rt, bool failed, struct k3_err *err)
{
    const struct k3_packed *p = rt ? rt->m.packed : NULL;
    bool holds_all = !failed && p && k3_share_whole(p->share);
    return k3_cluster_agree(rt ? rt->o.cluster : NULL, failed, holds_all, err);
}

/* A failed step is the leader's to report (every rank failed it); the follower cleans up
 * like the leader does and waits for the next. */
void k3_runtime_follow(struct k3_runtime *rt)
{
    struct k3_step st;
    struct k3_err ignored;
    while (k3_cluster_next_step(rt->o.cluster, &st) == 0)
        if (k3_forward_step(&rt->fwd, &st, &ignored))
            k3_runtime_recover(rt);
}

void k3_runtime_recover(struct k3_runtime *rt)
{
    if (rt->stream)
        k3_stream_recover(rt->stream);
}

int k3_runtime_tokenizer(struct k3_runtime *rt, const struct k3_tokenizer **tok,
                         struct k3_err *err)
{
    if (!rt->tok && k3_model_tokenizer(&rt->m, &rt->tok, err))
        return -1;
    *tok = rt->tok;
    return 0;
}

struct k3_runtime_snapshot k3_runtime_snap(const struct k3_runtime *rt)
{
    struct k3_runtime_snapshot s = {.t = k3_now()};
    if (rt->store)
        s.nan_scale_groups = rt->store->stats.nan_scale_groups;
    if (rt->stream)
        s.io = k3_stream_stats(rt->stream);
    s.ranks = k3_cluster_stats(rt->o.cluster);
    return s;
}

int k3_runtime_step(struct k3_runtime *rt, const struct k3_step *step, struct k3_err *err)
{
    return k3_forward_step(&rt->fwd, step, err);
}

int k3_runtime_tokens(struct k3_runtime *rt, struct k3_seq *q, const int32_t *tokens, int n,
                      float *logits, bool all_logits, struct k3_err *err)
{
    return k3_forward_tokens(&rt->fwd, q, tokens, n, logits, all_logits, err);
}

const struct k3_model *k3_runtime_model(const struct k3_runtime *rt) { return &rt->m; }
const struct k3_config *k3_runtime_config(const struct k3_runtime *rt) { return &rt->m.cfg; }
const struct k3_runtime_opts *k3_runtime_opts(const struct k3_runtime *rt) { return &rt->o; }
int k3_runtime_rows(const struct k3_runtime *rt) { return rt->fwd.rows; }
struct k3_trace *k3_runtime_trace(const struct k3_runtime *rt) { return rt->trace; }
const struct k3_stream *k3_runtime_stream(const struct k3_runtime *rt) { return rt->stream; }
const struct k3_forward *k3_runtime_forward(const struct k3_runtime *rt) { return &rt->fwd; }
const char *k3_runtime_notes(const struct k3_runtime *rt) { return rt->notes; }

const struct k3_placement *k3_runtime_placement(const struct k3_runtime *rt)
{
    return &rt->place;
}

struct k3_share k3_runtime_share(const struct k3_runtime *rt)
{
    return rt->fwd.hooks.peers.share;
}
