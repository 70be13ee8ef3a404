/* `k3-uring replay`: a routing trace's requests walked through the real forward pass, the
 * trace choosing every MoE layer's experts (engine/routes), to measure what the read
 * path does on a trained model's routing: a request's prompt tokens run as prefill
 * passes (-b rows, as `run` does), its generated tokens as decode steps of up to
 * --parallel requests, one row each (as serve's).  A request takes a free place as soon
 * as one frees, in file order.  Per MoE layer on stdout (CSV): what it asked for, read,
 * found in memory, prefetched and wasted, its mean union per step and its stall; one
 * summary on stderr.  The trace carries no token ids: each position gets a fixed
 * pseudo-random one, so a replay is deterministic. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/cli/cli.h"
#include "engine/cli/model_args.h"
#include "engine/cli/routes_args.h"
#include "engine/routes/hit_curve.h"
#include "engine/runtime/runtime.h"

enum phase_mode { PHASE_AUTO, PHASE_PREFILL, PHASE_DECODE };

struct replay_opts {
    struct model_args model;
    struct routes_args routes;
    int parallel;
    int phase; /* enum phase_mode */
    const char *hit_curve; /* --hit-curve FILE, or NULL */
};

/* A place for one request in decode steps (serve's slot). */
struct place {
    struct k3_seq seq;
    int req;  /* kept request index, or -1 when free */
    int next; /* its next position */
};

struct replay {
    const struct replay_opts *o;
    struct k3_runtime *rt;
    struct routes_args routes;
    struct place *places;   /* [parallel] */
    int32_t *tokens;        /* [longest request] a prompt's ids */
    int ctx;                /* the longest request's tokens */
    uint64_t passes, steps, prompt_rows, decode_rows;
    struct k3_batches batches; /* --hit-curve: every layer's batch, step by step */
    int64_t *rows;             /* [max(pass rows, parallel)] a step's tokens in the trace */
    int32_t *keys;             /* [E] a batch's policy keys */
    bool *seen;                /* [E] */
};

/* The id position pos of file request req gets (splitmix-style mixing of both). */
static int32_t token_id(int req, int pos, int vocab)
{
    uint64_t x = ((uint64_t)req << 32 | (uint32_t)pos) + 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return (int32_t)((x ^ (x >> 31)) % (uint64_t)vocab);
}

/* The leading tokens of request req that run as a prompt. */
static int prompt_tokens(const struct replay *p, int req)
{
    const struct k3_routes *r = &p->routes.trace;
    int n = k3_routes_length(r, req);
    if (p->o->phase != PHASE_AUTO)
        return p->o->phase == PHASE_PREFILL ? n : 0;
    int k = 0;
    while (k < n && r->phase[r->start[req] + k] == 'p')
        k++;
    return k;
}

static int setup(struct replay *p, struct k3_err *err)
{
    const struct replay_opts *o = p->o;
    struct k3_runtime_opts ro = o->model.runtime;
    p->routes = o->routes;
    if (k3_runtime_open(&p->rt, &ro, err) ||
        routes_args_load(&p->routes, k3_runtime_config(p->rt), err))
        return -1;
    const struct k3_config *c = k3_runtime_config(p->rt);
    const struct k3_routes *r = &p->routes.trace;
    for (int q = 0; q < r->n_requests; q++)
        p->ctx = k3_routes_length(r, q) > p->ctx ? k3_routes_length(r, q) : p->ctx;
    if (p->ctx > c->max_positions)
        return k3_errf(err, "--routes: a request of %d tokens exceeds max_position_embeddings %d",
                       p->ctx, c->max_positions);
    struct k3_runtime_hooks hooks = {.routes = &p->routes.player.source};
    if (k3_runtime_start(p->rt, p->ctx, o->parallel, o->model.runtime.batch,
                         k3_runtime_caller_bytes(c->vocab, o->parallel, false), &hooks, err))
        return -1;
    model_args_print_opened(p->rt, false);
    routes_args_say(&p->routes, stderr, "k3-uring replay");
    int E = c->n_experts, rows = k3_runtime_rows(p->rt);
    p->places = calloc((size_t)o->parallel, sizeof *p->places);
    p->tokens = malloc(sizeof(int32_t) * (size_t)p->ctx);
    p->rows = malloc(sizeof(int64_t) * (size_t)(rows > o->parallel ? rows : o->parallel));
    p->keys = malloc(sizeof(int32_t) * (size_t)E);
    p->seen = malloc((size_t)E);
    p->batches = (struct k3_batches){.layers = r->layers, .experts = E};
    if (!p->places || !p->tokens || !p->rows || !p->keys || !p->seen)
        return k3_errf(err, "out of memory");
    for (int i = 0; i < o->parallel; i++) {
        p->places[i].req = -1;
        if (k3_seq_init(&p->places[i].seq, c, p->ctx, err))
            return -1;
    }
    return 0;
}

static void teardown(struct replay *p)
{
    for (int i = 0; p->places && i < p->o->parallel; i++)
        k3_seq_free(&p->places[i].seq);
    free(p->places);
    free(p->tokens);
    free(p->rows);
    free(p->keys);
    free(p->seen);
    k3_batches_free(&p->batches);
    routes_args_free(&p->routes);
    k3_runtime_close(p->rt, NULL);
}

/* --hit-curve: the batches a step of the trace's tokens rows[0..n) asks for, each
 * layer's union ascending, as moe.c asks the store. */
static int record_step(struct replay *p, const int64_t *rows, int n, struct k3_err *err)
{
    const struct k3_routes *r = &p->routes.trace;
    int E = r->experts;
    if (!p->o->hit_curve)
        return 0;
    for (int m = 0; m < r->layers; m++) {
        memset(p->seen, 0, (size_t)E);
        for (int i = 0; i < n; i++) {
            const uint16_t *ids = k3_routes_at(r, rows[i], m);
            for (int j = 0; j < r->top_k; j++)
                p->seen[ids[j]] = true;
        }
        int k = 0;
        for (int e = 0; e < E; e++)
            if (p->seen[e])
                p->keys[k++] = m * E + e;
        if (k3_batches_add(&p->batches, m, p->keys, k, err))
            return -1;
    }
    return 0;
}

/* A prompt of n tokens of request req, in the passes k3_forward_tokens cuts. */
static int record_prompt(struct replay *p, int req, int n, struct k3_err *err)
{
    int P = k3_runtime_rows(p->rt);
    for (int done = 0; done < n; done += P) {
        int T = n - done < P ? n - done : P;
        for (int i = 0; i < T; i++)
            p->rows[i] = p->routes.trace.start[req] + done + i;
        if (record_step(p, p->rows, T, err))
            return -1;
    }
    return 0;
}

/* Request req takes place pl: its prompt runs at once, in passes. */
static int admit(struct replay *p, struct place *pl, int req, struct k3_err *err)
{
    const struct k3_config *c = k3_runtime_config(p->rt);
    const struct k3_routes *r = &p->routes.trace;
    k3_seq_reset(&pl->seq, c);
    pl->req = req;
    pl->next = prompt_tokens(p, req);
    if (k3_routes_bind(&p->routes.player, &pl->seq, req, err))
        return -1;
    for (int i = 0; i < pl->next; i++)
        p->tokens[i] = token_id(r->first + req, i, c->vocab);
    if (pl->next && (k3_runtime_tokens(p->rt, &pl->seq, p->tokens, pl->next, NULL, false, err) ||
                     record_prompt(p, req, pl->next, err)))
        return k3_err_prefix(err, "request %d", r->first + req);
    uint64_t P = (uint64_t)k3_runtime_rows(p->rt);
    p->passes += ((uint64_t)pl->next + P - 1) / P;
    p->prompt_rows += (uint64_t)pl->next;
    return 0;
}

/* One decode step: a row for each place holding a request with tokens left. */
static int decode_step(struct replay *p, struct k3_err *err)
{
    const struct k3_routes *r = &p->routes.trace;
    int32_t tok[K3_ROUTES_MAX_BOUND];
    struct k3_seq *seq[K3_ROUTES_MAX_BOUND];
    int n = 0;
    for (int i = 0; i < p->o->parallel; i++) {
        struct place *pl = &p->places[i];
        if (pl->req < 0 || pl->next >= k3_routes_length(r, pl->req))
            continue;
        tok[n] = token_id(r->first + pl->req, pl->next, k3_runtime_config(p->rt)->vocab);
        p->rows[n] = r->start[pl->req] + pl->next;
        seq[n++] = &pl->seq;
        pl->next++;
    }
    if (!n)
        return 0;
    struct k3_step st = {.n = n, .tokens = tok, .seq = seq};
    if (k3_runtime_step(p->rt, &st, err) || record_step(p, p->rows, n, err))
        return -1;
    p->steps++;
    p->decode_rows += (uint64_t)n;
    return 0;
}

/* Every kept request: free places take the next requests, then a decode step, until
 * all are done. */
static int walk(struct replay *p, struct k3_err *err)
{
    const struct k3_routes *r = &p->routes.trace;
    int next_req = 0;
    for (;;) {
        bool busy = false;
        for (int i = 0; i < p->o->parallel; i++) {
            struct place *pl = &p->places[i];
            if (pl->req >= 0 && pl->next >= k3_routes_length(r, pl->req))
                pl->req = -1;
            while (pl->req < 0 && next_req < r->n_requests) {
                if (admit(p, pl, next_req++, err))
                    return -1;
                if (pl->next >= k3_routes_length(r, pl->req))
                    pl->req = -1; /* all prompt */
            }
            busy = busy || pl->req >= 0;
        }
        if (!busy)
            return 0;
        if (decode_step(p, err))
            return -1;
    }
}

/* Per MoE layer and overall, the counters' growth since a. */
static void report(const struct replay *p, const struct k3_layer_stats *a, double seconds,
                   const struct k3_runtime_snapshot *s0, const struct k3_runtime_snapshot *s1)
{
    const struct k3_config *c = k3_runtime_config(p->rt);
    const struct k3_layer_stats *b = k3_stream_layer_stats(k3_runtime_stream(p->rt));
    uint64_t rec = k3_runtime_model(p->rt)->record.bytes, per_step = p->passes + p->steps;
    struct k3_layer_stats all = {0};
    printf("layer,asked,read,hit,prefetched,prefetch_used,wasted_bytes,bytes,union_per_step,"
           "stall_seconds\n");
    for (int l = 0; l <= c->n_layers; l++) {
        struct k3_layer_stats d = {0};
        if (l < c->n_layers) {
            if (!k3_layer_is_moe(c, l))
                continue;
            d = (struct k3_layer_stats){
                .records = b[l].records - a[l].records, .read = b[l].read - a[l].read,
                .hit = b[l].hit - a[l].hit, .predicted = b[l].predicted - a[l].predicted,
                .predicted_used = b[l].predicted_used - a[l].predicted_used,
                .wasted_bytes = b[l].wasted_bytes - a[l].wasted_bytes,
                .stall_seconds = b[l].stall_seconds - a[l].stall_seconds};
            all.records += d.records, all.read += d.read, all.hit += d.hit;
            all.predicted += d.predicted, all.predicted_used += d.predicted_used;
            all.wasted_bytes += d.wasted_bytes, all.stall_seconds += d.stall_seconds;
        } else {
            d = all;
        }
        if (l < c->n_layers)
            printf("%d,", l);
        else
            printf("all,");
        printf("%llu,%llu,%llu,%llu,%llu,%llu,%llu,%.3f,%.4f\n", (unsigned long long)d.records,
               (unsigned long long)d.read, (unsigned long long)d.hit,
               (unsigned long long)d.predicted, (unsigned long long)d.predicted_used,
               (unsigned long long)d.wasted_bytes,
               (unsigned long long)((d.read + d.predicted_used) * rec + d.wasted_bytes),
               per_step ? (double)d.records / (double)per_step : 0.0, d.stall_seconds);
    }
    const struct k3_budget_input *in;
    const struct k3_budget *bud = k3_stream_budget(k3_runtime_stream(p->rt), &in);
    int cache = p->o->model.runtime.no_cache ? 0 : bud->cache_records;
    const struct k3_routes *r = &p->routes.trace;
    fprintf(stderr,
            "k3-uring replay: %d requests, %lld tokens: %llu prompt rows in %llu passes of up to %d, "
            "%llu decode rows in %llu steps of up to %d; %llu records asked, %llu read, %llu hit "
            "(%.1f%%), %llu prefetched (%llu used); %.3f GB read; slots %d (%d cache + %d in "
            "flight); %.2f s, stall %.2f s\n",
            r->n_requests, (long long)k3_routes_tokens(r), (unsigned long long)p->prompt_rows,
            (unsigned long long)p->passes, k3_runtime_rows(p->rt),
            (unsigned long long)p->decode_rows,
            (unsigned long long)p->steps, p->o->parallel, (unsigned long long)all.records,
            (unsigned long long)all.read, (unsigned long long)all.hit,
            all.records ? 100.0 * (double)all.hit / (double)all.records : 0.0,
            (unsigned long long)all.predicted, (unsigned long long)all.predicted_used,
            (double)(s1->io.bytes - s0->io.bytes) / 1e9, in->inflight_records + cache, cache,
            in->inflight_records, seconds, s1->io.stall_seconds - s0->io.stall_seconds);
}

/* --hit-curve: the run's batches through per-layer caches of every size, under the
 * policy the run used. */
static int write_curve(struct replay *p, struct k3_err *err)
{
    int E = k3_runtime_config(p->rt)->n_experts;
    double *rate = malloc(sizeof(double) * (size_t)(E + 1));
    int rc = rate ? 0 : k3_errf(err, "out of memory");
    if (!rc)
        rc = k3_hit_curve(&p->batches, p->o->model.runtime.cache_policy, rate, err) ||
             k3_hit_curve_write(p->o->hit_curve, rate, E, err);
    free(rate);
    return rc ? k3_err_prefix(err, "--hit-curve") : 0;
}

static int replay(const struct replay_opts *o, struct k3_err *err)
{
    struct replay p = {.o = o};
    int rc = setup(&p, err);
    struct k3_layer_stats *at = NULL;
    if (!rc) {
        size_t n = (size_t)k3_runtime_config(p.rt)->n_layers + 1;
        if (!(at = malloc(n * sizeof *at)))
            rc = k3_errf(err, "out of memory");
        else
            memcpy(at, k3_stream_layer_stats(k3_runtime_stream(p.rt)), n * sizeof *at);
    }
    if (!rc) {
        struct k3_runtime_snapshot s0 = k3_runtime_snap(p.rt);
        rc = walk(&p, err);
        struct k3_runtime_snapshot s1 = k3_runtime_snap(p.rt);
        if (!rc)
            report(&p, at, s1.t - s0.t, &s0, &s1);
    }
    if (!rc && o->hit_curve)
        rc = write_curve(&p, err);
    free(at);
    teardown(&p);
    return rc;
}

int cmd_replay(int argc, char **argv)
{
    static const struct k3_opt_choice phase_choices[] = {
        {"auto", PHASE_AUTO}, {"prefill", PHASE_PREFILL}, {"decode", PHASE_DECODE}, {NULL, 0}};
    struct replay_opts o = {.parallel = 1};
    model_args_init(&o.model);
    o.model.runtime.cache_fill = K3_CACHE_FILL_READS; /* judging a policy: hits from the asks alone */
    const struct k3_opt own[] = {
        CLI_ROUTES_OPTS(&o.routes),
        {.name = "parallel", .short_name = 'P', .type = K3_OPT_INT, .dst = &o.parallel, .arg = "B",
         .help = "requests decoding together, one row each per step", .min = 1,
         .max = K3_CHUNK},
        {.name = "phase", .type = K3_OPT_ENUM, .dst = &o.phase, .choices = phase_choices,
         .help = "how tokens run: auto as the trace says (p: prompt passes, d: decode steps); "
                 "prefill or decode: every token so"},
        {.name = "hit-curve", .type = K3_OPT_STRING, .dst = &o.hit_curve, .arg = "FILE",
         .help = "write the hit rate of a per-layer cache of 0..E records under --cache-policy "
                 "over this run's batches (CSV; plan --hit-curve reads it)"},
    };
    const char *usage =
        "usage: k3-uring replay (-m DIR | --drives D0,D1,..) --routes FILE [--routes-requests A-B] "
        "[--parallel B] [options]\n\n"
        "Walks a routing trace's requests through the forward pass, the trace choosing every MoE\n"
        "layer's experts: prompt tokens as prefill passes (-b rows), generated tokens as decode\n"
        "steps of up to --parallel requests.  Per MoE layer on stdout (CSV): records asked, read,\n"
        "hit in the cache, prefetched, prefetched and used, wasted bytes, bytes read, the mean\n"
        "union per step and the stall; a summary on stderr.";
    struct k3_err err = {{0}};
    int rc = model_args_parse(&o.model, own, K3_OPTS_COUNT(own), argc, argv, usage, &err);
    if (rc > 0)
        return 0;
    if (!rc && !o.routes.path)
        rc = k3_errf(&err, "--routes is required");
    if (!rc)
        rc = routes_args_check(&o.routes, &err);
    if (!rc && (rc = model_args_check(&o.model, &err)) == 0 && o.model.runtime.share.ranks > 1)
        rc = k3_errf(&err, "replay: not under mpirun");
    if (rc) {
        model_args_print_error(&o.model, &err);
        return model_args_exit(&o.model, 2);
    }
    rc = replay(&o, &err);
    if (rc)
        model_args_print_error(&o.model, &err);
    return model_args_exit(&o.model, rc ? 1 : 0);
}
