/* routesim: what real routing does to the read path, worked out from a routes v1 trace
 * alone (no model, no drives), for bench/replay.sh.  Requests run one after another,
 * one token a decode step (B = 1) unless said otherwise.
 *
 *   routesim hits FILE A-B [HALF_LIFE]   hit rate of a per-layer cache of 1/16, 1/8, 1/4,
 *       1/2 of a layer's experts: each policy of engine/stream/policy.h (the engine's own
 *       code), the offline optimum (Belady: evict what is asked again last), the next-step
 *       oracle (keeps the next step's experts first, then as lfru: the most any predictor
 *       of the next token's experts could give), each keeping every miss or free to
 *       decline one ("-bypass"), and the same on uniform routing of the trace's shape
 *       (seeded).  CSV: routing,policy,fraction,slots,hit_rate.
 *   routesim predict FILE A-B            recall of next-layer predictions from ids alone
 *       (the previous token's experts at that layer, rank order; layer-to-layer
 *       co-occurrence counts learned online, as --predict-from ids), at k' = top_k, 2 top_k, 3 top_k guesses, and the wasted
 *       reads per token (guesses not asked for).  CSV: predictor,guesses,recall,wasted_per_token.
 *   routesim unions FILE A-B             mean union per MoE layer of B = 1, 2, 4, 8, 16
 *       requests' tokens decoding together (one row each, a request taking a free place
 *       as one ends) and of prompt passes of 32, 128 and 1024 rows, beside the uniform
 *       expectation E(1 - (1 - k/E)^P).  CSV: shape,rows,union,uniform.
 */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/base/rng.h"
#include "engine/routes/hit_curve.h"
#include "engine/routes/routes.h"
#include "engine/stream/policy.h"

static void die(const char *msg)
{
    fprintf(stderr, "routesim: %s\n", msg);
    exit(1);
}

static void *xcalloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size);
    if (!p)
        die("out of memory");
    return p;
}

/* ---- offline judges' per-layer caches ------------------------------------------------- */

struct cache {
    int slots, n;
    int32_t *key;     /* [slots] */
    uint64_t *last;   /* [slots] the step of the record's next ask */
    bool *pinned;     /* [slots] asked by the current batch */
};

static int find(const struct cache *c, int32_t key)
{
    for (int i = 0; i < c->n; i++)
        if (c->key[i] == key)
            return i;
    return -1;
}

/* Who picks what gives way knowing the future: Belady (the record asked again last), or
 * the next-step oracle, which knows only the next step's asks: those are kept first, then
 * what the default policy values most.  The oracle bounds any policy that predicts the
 * next step's experts, however well. */
struct judge {
    struct k3_cache_policy *p; /* the next-step oracle's policy; NULL: Belady */
    bool bypass;               /* a miss worth less than every cached record is read and
                                * not kept; without, every miss is kept, as the engine's are */
    int64_t now;               /* the step being asked */
};

static double worth(const struct judge *j, int32_t key, uint64_t next)
{
    if (!j->p)
        return -(double)next;
    return (next == (uint64_t)j->now + 1 ? 1e9 : 0) + j->p->ops->keep(j->p, (uint32_t)key, 0);
}

/* A batch of layer m asking ids (their next asks in next[]): the unpinned record worth
 * least gives way to each miss; the hits. */
static int batch_judged(struct cache *c, const struct judge *jd, int m, const int32_t *ids,
                        const int64_t *next, int k)
{
    int hits = 0;
    if (jd->p) {
        jd->p->ops->batch(jd->p, m);
        for (int j = 0; j < k; j++)
            jd->p->ops->asked(jd->p, (uint32_t)ids[j]);
    }
    memset(c->pinned, 0, sizeof(bool) * (size_t)c->slots);
    bool miss[K3_MAX_TOPK];
    for (int j = 0; j < k; j++) {
        int s = find(c, ids[j]);
        miss[j] = s < 0;
        if (s >= 0) {
            hits++;
            c->pinned[s] = true;
            c->last[s] = (uint64_t)next[j];
        }
    }
    for (int j = 0; j < k; j++) {
        if (!miss[j])
            continue;
        int v = c->n < c->slots ? c->n++ : -1;
        double least = 0;
        for (int s = 0; v < 0 && s < c->n; s++)
            if (!c->pinned[s])
                v = s, least = worth(jd, c->key[s], c->last[s]);
        for (int s = 0; v >= 0 && c->key[v] >= 0 && s < c->n; s++) {
            double w = c->pinned[s] ? 0 : worth(jd, c->key[s], c->last[s]);
            if (!c->pinned[s] && w < least)
                v = s, least = w;
        }
        if (v < 0 || (jd->bypass && c->key[v] >= 0 && least > worth(jd, ids[j], (uint64_t)next[j])))
            continue;
        c->key[v] = ids[j];
        c->last[v] = (uint64_t)next[j];
        c->pinned[v] = true;
    }
    return hits;
}

/* ---- the traces ------------------------------------------------------------------- */

/* ids [tokens][L][K] as int32 keys m * E + e, and each one's next ask (same layer). */
struct flat {
    int64_t tokens;
    int L, K, E;
    int32_t *key;
    int64_t *next;
};

static void flatten(struct flat *f, const struct k3_routes *r, bool uniform, uint64_t seed)
{
    f->tokens = k3_routes_tokens(r);
    f->L = r->layers, f->K = r->top_k, f->E = r->experts;
    size_t n = (size_t)f->tokens * f->L * f->K;
    f->key = xcalloc(n, sizeof *f->key);
    f->next = xcalloc(n, sizeof *f->next);
    struct k3_rng rng;
    k3_rng_seed(&rng, seed);
    int ids[K3_MAX_TOPK];
    for (int64_t t = 0; t < f->tokens; t++)
        for (int m = 0; m < f->L; m++) {
            const uint16_t *row = k3_routes_at(r, t, m);
            if (uniform)
                k3_rng_distinct(&rng, f->E, f->K, ids);
            for (int j = 0; j < f->K; j++)
                f->key[((size_t)t * f->L + m) * f->K + j] = m * f->E + (uniform ? ids[j] : row[j]);
        }
    int64_t *seen = xcalloc((size_t)f->L * f->E, sizeof *seen);
    for (size_t i = 0; i < (size_t)f->L * f->E; i++)
        seen[i] = INT64_MAX;
    for (int64_t t = f->tokens - 1; t >= 0; t--)
        for (int i = 0; i < f->L * f->K; i++) {
            size_t at = (size_t)t * f->L * f->K + i;
            f->next[at] = seen[f->key[at]];
            seen[f->key[at]] = t;
        }
    free(seen);
}

static void sorted_row(const struct flat *f, int64_t t, int m, int32_t *ids, int64_t *next)
{
    const int32_t *k = f->key + ((size_t)t * f->L + m) * f->K;
    const int64_t *x = f->next + ((size_t)t * f->L + m) * f->K;
    for (int j = 0; j < f->K; j++) {
        int i = j;
        for (; i > 0 && ids[i - 1] > k[j]; i--)
            ids[i] = ids[i - 1], next[i] = next[i - 1];
        ids[i] = k[j], next[i] = x[j];
    }
}

/* The offline judges, as hit_rate's policy (an engine policy is >= 0). */
enum {
    BELADY = -1,             /* keeping every miss */
    BELADY_BYPASS = -2,      /* free to decline one */
    ORACLE_NEXT = -3,        /* the next-step oracle, keeping every miss */
    ORACLE_NEXT_BYPASS = -4, /* free to decline one */
};

/* The hit rate of per-layer caches of `slots` records over the trace's tokens, one a step:
 * policy >= 0 runs that policy through the engine's code (routes/hit_curve.h), < 0 a judge
 * (the enum above), the oracle over the default policy. */
static double hit_rate(const struct flat *f, int slots, int policy, double half_life)
{
    struct cache *c = xcalloc((size_t)f->L, sizeof *c);
    struct k3_sim_cache *sc = xcalloc((size_t)f->L, sizeof *sc);
    for (int m = 0; m < f->L; m++) {
        c[m].slots = slots;
        c[m].key = xcalloc((size_t)slots, sizeof(int32_t));
        c[m].last = xcalloc((size_t)slots, sizeof(uint64_t));
        c[m].pinned = xcalloc((size_t)slots, sizeof(bool));
        for (int s = 0; s < slots; s++)
            c[m].key[s] = -1;
        if (k3_sim_cache_init(&sc[m], slots))
            die("out of memory");
    }
    struct k3_cache_policy p;
    struct k3_err err;
    bool oracle = policy == ORACLE_NEXT || policy == ORACLE_NEXT_BYPASS;
    if ((policy >= 0 || oracle) &&
        k3_cache_policy_init(&p, oracle ? K3_POLICY_LFRU : policy, f->L, f->E, half_life, &err))
        die(err.msg);
    struct judge jd = {.p = oracle ? &p : NULL,
                       .bypass = policy == BELADY_BYPASS || policy == ORACLE_NEXT_BYPASS};
    uint64_t clock = 0, hits = 0, asks = 0;
    int32_t ids[K3_MAX_TOPK];
    int64_t next[K3_MAX_TOPK];
    for (int64_t t = 0; t < f->tokens; t++)
        for (int m = 0; m < f->L; m++) {
            sorted_row(f, t, m, ids, next);
            jd.now = t;
            hits += (uint64_t)(policy >= 0 ? k3_sim_cache_batch(&sc[m], &p, m, ids, f->K, &clock)
                                           : batch_judged(&c[m], &jd, m, ids, next, f->K));
            asks += (uint64_t)f->K;
        }
    for (int m = 0; m < f->L; m++) {
        free(c[m].key), free(c[m].last), free(c[m].pinned);
        k3_sim_cache_free(&sc[m]);
    }
    free(c);
    free(sc);
    if (policy >= 0 || oracle)
        k3_cache_policy_free(&p);
    return (double)hits / (double)asks;
}

static void hits_table(const struct k3_routes *r, double half_life)
{
    static const char *const names[] = {"lfru", "lru"};
    static const int kinds[] = {K3_POLICY_LFRU, K3_POLICY_LRU};
    printf("routing,policy,fraction,slots,hit_rate\n");
    for (int uniform = 0; uniform < 2; uniform++) {
        struct flat f;
        flatten(&f, r, uniform, 1);
        for (int div = 16; div >= 2; div /= 2) {
            int slots = f.E / div;
            for (int i = 0; i < 2; i++)
                printf("%s,%s,1/%d,%d,%.4f\n", uniform ? "uniform" : "trace", names[i], div, slots,
                       hit_rate(&f, slots, kinds[i], half_life));
            static const char *const judges[] = {"belady", "belady-bypass", "oracle-next",
                                                 "oracle-next-bypass"};
            for (int i = 0; i < 4; i++)
                printf("%s,%s,1/%d,%d,%.4f\n", uniform ? "uniform" : "trace", judges[i], div, slots,
                       hit_rate(&f, slots, -1 - i, half_life));
            fflush(stdout);
        }
        free(f.key), free(f.next);
    }
}

/* ---- prediction from ids ------------------------------------------------------------ */

/* Guesses for layer m + 1 at token t from ids alone: scores over its experts from the
 * previous token's choice at m + 1 (prev) and co-occurrence counts of this token's layer
 * m experts with the next layer's (co[m][i][j], learned from the tokens before). */
static void predict_scores(const struct k3_routes *r, const double *co, int64_t t, int64_t t0,
                           int m, int which, double *score)
{
    int E = r->experts, K = r->top_k;
    memset(score, 0, sizeof(double) * (size_t)E);
    if (which & 2) {
        const uint16_t *now = k3_routes_at(r, t, m);
        for (int a = 0; a < K; a++) {
            const double *row = co + ((size_t)m * E + now[a]) * E;
            double total = 0;
            for (int e = 0; e < E; e++)
                total += row[e];
            for (int e = 0; total > 0 && e < E; e++)
                score[e] += row[e] / total;
        }
    }
    if ((which & 1) && t > t0) {
        const uint16_t *prev = k3_routes_at(r, t - 1, m + 1);
        for (int j = 0; j < K; j++)
            score[prev[j]] += 1.0 + (K - j) * 1e-3;
    }
}

static void predict_table(const struct k3_routes *r)
{
    static const char *const names[] = {"", "previous-token", "co-occurrence"};
    int E = r->experts, K = r->top_k, L = r->layers;
    printf("predictor,guesses,recall,wasted_per_token\n");
    double *co = xcalloc((size_t)L * E * E, sizeof *co);
    double *score = xcalloc((size_t)E, sizeof *score);
    for (int which = 1; which <= 2; which++)
        for (int mult = 1; mult <= 3; mult++) {
            int g = mult * K;
            memset(co, 0, sizeof(double) * (size_t)L * E * E);
            uint64_t found = 0, asked = 0, wasted = 0;
            for (int q = 0; q < r->n_requests; q++)
                for (int64_t t = r->start[q]; t < r->start[q + 1]; t++) {
                    for (int m = 0; m + 1 < L; m++) {
                        predict_scores(r, co, t, r->start[q], m, which, score);
                        bool pick[1024] = {0};
                        for (int n = 0; n < g; n++) {
                            int best = -1;
                            for (int e = 0; e < E; e++)
                                if (!pick[e] && (best < 0 || score[e] > score[best]))
                                    best = e;
                            pick[best] = true;
                        }
                        const uint16_t *truth = k3_routes_at(r, t, m + 1);
                        int hit = 0;
                        for (int j = 0; j < K; j++)
                            hit += pick[truth[j]];
                        found += (uint64_t)hit;
                        asked += (uint64_t)K;
                        wasted += (uint64_t)(g - hit);
                    }
                    for (int m = 0; m + 1 < L; m++) { /* learn after guessing */
                        const uint16_t *a = k3_routes_at(r, t, m), *b = k3_routes_at(r, t, m + 1);
                        for (int i = 0; i < K; i++)
                            for (int j = 0; j < K; j++)
                                co[((size_t)m * E + a[i]) * E + b[j]] += 1;
                    }
                }
            printf("%s,%d,%.4f,%.1f\n", names[which], g, (double)found / (double)asked,
                   (double)wasted / (double)k3_routes_tokens(r));
            fflush(stdout);
        }
    free(co);
    free(score);
}

/* ---- unions ------------------------------------------------------------------------- */

static double uniform_union(int E, int k, int rows)
{
    return E * (1 - pow(1 - (double)k / E, rows));
}

/* Mean distinct experts per layer and step over steps of the given rows. */
static double union_of(const struct k3_routes *r, const int64_t *rows, int n, uint8_t *mark)
{
    int E = r->experts, K = r->top_k, total = 0;
    for (int m = 0; m < r->layers; m++) {
        memset(mark, 0, (size_t)E);
        for (int i = 0; i < n; i++) {
            const uint16_t *ids = k3_routes_at(r, rows[i], m);
            for (int j = 0; j < K; j++)
                total += !mark[ids[j]], mark[ids[j]] = 1;
        }
    }
    return (double)total / r->layers;
}

static void unions_table(const struct k3_routes *r)
{
    uint8_t mark[65536];
    int64_t rows[1024];
    int E = r->experts, K = r->top_k;
    printf("shape,rows,union,uniform\n");
    for (int B = 1; B <= 16; B *= 2) {
        int next_q = 0, req[16];
        int64_t pos[16];
        for (int i = 0; i < B; i++)
            req[i] = -1;
        double sum = 0;
        uint64_t steps = 0, rowsum = 0;
        for (;;) {
            int n = 0;
            for (int i = 0; i < B; i++) {
                if (req[i] >= 0 && r->start[req[i]] + pos[i] >= r->start[req[i] + 1])
                    req[i] = -1;
                if (req[i] < 0 && next_q < r->n_requests)
                    req[i] = next_q++, pos[i] = 0;
                if (req[i] >= 0)
                    rows[n++] = r->start[req[i]] + pos[i]++;
            }
            if (!n)
                break;
            if (n == B) { /* full steps only: the tail's are not B requests' */
                sum += union_of(r, rows, n, mark);
                steps++;
                rowsum += (uint64_t)n;
            }
        }
        printf("decode,%d,%.2f,%.2f\n", B, steps ? sum / steps : 0.0, uniform_union(E, K, B));
    }
    static const int passes[] = {32, 128, 1024};
    for (int i = 0; i < 3; i++) {
        int P = passes[i];
        double sum = 0;
        uint64_t n_passes = 0;
        for (int q = 0; q < r->n_requests; q++)
            for (int64_t t = r->start[q]; t + P <= r->start[q + 1]; t += P) {
                for (int j = 0; j < P; j++)
                    rows[j] = t + j;
                sum += union_of(r, rows, P, mark);
                n_passes++;
            }
        if (n_passes)
            printf("prefill,%d,%.2f,%.2f\n", P, sum / n_passes, uniform_union(E, K, P));
        else
            printf("prefill,%d,,%.2f\n", P, uniform_union(E, K, P));
    }
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: routesim hits|predict|unions FILE A-B [HALF_LIFE]\n");
        return 2;
    }
    struct k3_err err;
    int first, last;
    struct k3_routes r;
    if (k3_routes_parse_range(argv[3], &first, &last, &err) ||
        k3_routes_load(&r, argv[2], first, last, &err))
        die(err.msg);
    if (!strcmp(argv[1], "hits"))
        hits_table(&r, argc > 4 ? atof(argv[4]) : 0);
    else if (!strcmp(argv[1], "predict"))
        predict_table(&r);
    else if (!strcmp(argv[1], "unions"))
        unions_table(&r);
    else
        die("the mode is hits, predict or unions");
    k3_routes_free(&r);
    return 0;
}
