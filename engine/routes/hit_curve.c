/* Hit curves (hit_curve.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/routes/hit_curve.h"

int k3_sim_cache_init(struct k3_sim_cache *c, int slots)
{
    memset(c, 0, sizeof *c);
    c->slots = slots;
    c->key = calloc((size_t)slots + 1, sizeof *c->key);
    c->last = calloc((size_t)slots + 1, sizeof *c->last);
    c->pinned = calloc((size_t)slots + 1, sizeof *c->pinned);
    return c->key && c->last && c->pinned ? 0 : -1;
}

void k3_sim_cache_free(struct k3_sim_cache *c)
{
    free(c->key);
    free(c->last);
    free(c->pinned);
    memset(c, 0, sizeof *c);
}

static int find(const struct k3_sim_cache *c, int32_t key)
{
    for (int i = 0; i < c->n; i++)
        if (c->key[i] == key)
            return i;
    return -1;
}

/* The unpinned record the policy values least (the least recently used among equals). */
static int victim(const struct k3_sim_cache *c, const struct k3_cache_policy *p)
{
    int v = -1;
    double best = 0;
    for (int s = 0; s < c->n; s++) {
        if (c->pinned[s])
            continue;
        double keep = p->ops->keep(p, (uint32_t)c->key[s], c->last[s]);
        if (v < 0 || keep < best || (keep == best && c->last[s] < c->last[v]))
            v = s, best = keep;
    }
    return v;
}

int k3_sim_cache_batch(struct k3_sim_cache *c, struct k3_cache_policy *p, int moe_layer,
                       const int32_t *keys, int n, uint64_t *clock)
{
    int hits = 0;
    p->ops->batch(p, moe_layer);
    for (int j = 0; j < n; j++)
        p->ops->asked(p, (uint32_t)keys[j]);
    memset(c->pinned, 0, sizeof(bool) * (size_t)c->slots);
    for (int j = 0; j < n; j++) {
        int s = find(c, keys[j]);
        if (s >= 0) {
            hits++;
            c->pinned[s] = true;
            c->last[s] = ++*clock;
        }
    }
    for (int j = 0; j < n; j++) {
        int s = find(c, keys[j]);
        if (s >= 0 && c->pinned[s])
            continue;
        int v = c->n < c->slots ? c->n++ : victim(c, p);
        if (v < 0)
            continue; /* every slot pinned: read and not kept */
        c->key[v] = keys[j];
        c->last[v] = ++*clock;
        c->pinned[v] = true;
    }
    return hits;
}

static int grow(void **p, int64_t *cap, int64_t need, size_t size, struct k3_err *err)
{
    if (need <= *cap)
        return 0;
    int64_t c = *cap ? *cap : 4096;
    while (c < need)
        c *= 2;
    void *q = realloc(*p, size * (size_t)c);
    if (!q)
        return k3_errf(err, "out of memory for the hit curve's batches");
    *p = q;
    *cap = c;
    return 0;
}

int k3_batches_add(struct k3_batches *b, int moe_layer, const int32_t *keys, int n,
                   struct k3_err *err)
{
    int64_t at = b->n ? b->off[b->n] : 0;
    if (grow((void **)&b->off, &b->cap_off, b->n + 2, sizeof *b->off, err) ||
        grow((void **)&b->layer, &b->cap_n, b->n + 2, sizeof *b->layer, err) ||
        grow((void **)&b->keys, &b->cap_keys, at + n, sizeof *b->keys, err))
        return -1;
    memcpy(b->keys + at, keys, sizeof *keys * (size_t)n);
    b->off[b->n] = at;
    b->off[b->n + 1] = at + n;
    b->layer[b->n++] = moe_layer;
    return 0;
}

void k3_batches_free(struct k3_batches *b)
{
    free(b->keys);
    free(b->off);
    free(b->layer);
    b->keys = NULL, b->off = NULL, b->layer = NULL;
    b->n = b->cap_keys = b->cap_n = b->cap_off = 0;
}

/* The hit rate of caches of `slots` records per layer over every batch. */
static int rate_at(const struct k3_batches *b, enum k3_cache_policy_kind kind, int slots,
                   double *rate, struct k3_err *err)
{
    struct k3_cache_policy p;
    struct k3_sim_cache *c = calloc((size_t)b->layers, sizeof *c);
    if (!c || k3_cache_policy_init(&p, kind, b->layers, b->experts, 0, err)) {
        free(c);
        return c ? -1 : k3_errf(err, "out of memory");
    }
    int rc = 0;
    for (int m = 0; m < b->layers && !rc; m++)
        if (k3_sim_cache_init(&c[m], slots))
            rc = k3_errf(err, "out of memory");
    uint64_t clock = 0, hits = 0;
    for (int64_t i = 0; i < b->n && !rc; i++)
        hits += (uint64_t)k3_sim_cache_batch(&c[b->layer[i]], &p, b->layer[i], b->keys + b->off[i],
                                            (int)(b->off[i + 1] - b->off[i]), &clock);
    *rate = b->n && b->off[b->n] ? (double)hits / (double)b->off[b->n] : 0;
    for (int m = 0; m < b->layers; m++)
        k3_sim_cache_free(&c[m]);
    free(c);
    k3_cache_policy_free(&p);
    return rc;
}

int k3_hit_curve(const struct k3_batches *b, enum k3_cache_policy_kind kind, double *rate,
                 struct k3_err *err)
{
    rate[0] = 0;
    for (int slots = 1; slots <= b->experts; slots++)
        if (rate_at(b, kind, slots, &rate[slots], err))
            return -1;
    return 0;
}

int k3_hit_curve_write(const char *path, const double *rate, int experts, struct k3_err *err)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return k3_errf(err, "%s: %s", path, strerror(errno));
    fprintf(f, "records_per_layer,hit_rate\n");
    for (int c = 0; c <= experts; c++)
        fprintf(f, "%d,%.6f\n", c, rate[c]);
    if (fclose(f))
        return k3_errf(err, "%s: %s", path, strerror(errno));
    return 0;
}

int k3_hit_curve_read(const char *path, double *rate, int max, int *n, struct k3_err *err)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return k3_errf(err, "%s: %s", path, strerror(errno));
    char line[256];
    int rc = 0, lineno = 0;
    *n = -1;
    while (!rc && fgets(line, sizeof line, f)) {
        lineno++;
        int c;
        double r;
        char tail;
        if (lineno == 1 && !strncmp(line, "records_per_layer,hit_rate", 26))
            continue;
        if (sscanf(line, "%d,%lf %c", &c, &r, &tail) != 2)
            rc = k3_errf(err, "%s:%d: want \"records_per_layer,hit_rate\"", path, lineno);
        else if (c != *n + 1 || c > max)
            rc = k3_errf(err, "%s:%d: records %d out of order (want %d, at most %d)", path, lineno,
                         c, *n + 1, max);
        else if (!(r >= 0 && r <= 1) || (c && r < rate[c - 1]))
            rc = k3_errf(err, "%s:%d: hit rate %g is outside [0, 1] or below the one before", path,
                         lineno, r);
        else
            rate[++*n] = r;
    }
    fclose(f);
    if (!rc && *n < 1)
        rc = k3_errf(err, "%s: no curve (want lines records_per_layer,hit_rate from 0)", path);
    return rc;
}

double k3_hit_curve_at(const double *rate, int n, double x)
{
    if (x <= 0)
        return rate[0];
    if (x >= n)
        return rate[n];
    int i = (int)x;
    return rate[i] + (rate[i + 1] - rate[i]) * (x - i);
}
