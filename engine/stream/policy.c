/* Expert cache replacement policies (policy.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/stream/policy.h"

static void no_batch(struct k3_cache_policy *p, int moe_layer) { (void)p, (void)moe_layer; }
static void no_ask(struct k3_cache_policy *p, uint32_t key) { (void)p, (void)key; }

static double lru_keep(const struct k3_cache_policy *p, uint32_t key, uint64_t last_use)
{
    (void)p, (void)key;
    return (double)last_use;
}

/* LFRU: each ask adds 1 to a record's score, and the score halves every half-life
 * batches of its layer; kept in logs, so that comparing two records costs a
 * multiply-add and no score overflows however long a run is. */
static void lfru_batch(struct k3_cache_policy *p, int moe_layer)
{
    p->layer_clock[moe_layer]++;
}

static void lfru_asked(struct k3_cache_policy *p, uint32_t key)
{
    uint64_t now = p->layer_clock[key / (uint32_t)p->experts];
    double d = p->log_score[key] + (double)(now - p->at[key]) * p->log_decay;
    /* log(e^d + 1), d the decayed score's log; 0 (one ask) for a first ask */
    p->log_score[key] = !p->at[key] ? 0 : d > 0 ? d + log1p(exp(-d)) : log1p(exp(d));
    p->at[key] = now;
}

/* The decayed score's log brought back to the layer's clock 0 (log_score less the decay
 * since then), fixed between asks; a record never asked scores lowest. */
static double lfru_order(const struct k3_cache_policy *p, uint32_t key, uint64_t last_use)
{
    (void)last_use;
    return p->at[key] ? p->log_score[key] - (double)p->at[key] * p->log_decay : -HUGE_VAL;
}

/* The decayed score's log now. */
static double lfru_keep(const struct k3_cache_policy *p, uint32_t key, uint64_t last_use)
{
    double now = (double)p->layer_clock[key / (uint32_t)p->experts];
    return lfru_order(p, key, last_use) + now * p->log_decay;
}

static const struct k3_cache_policy_ops ops_of[] = {
    [K3_POLICY_LFRU] = {.name = "lfru", .batch = lfru_batch, .asked = lfru_asked, .keep = lfru_keep,
                        .order = lfru_order},
    [K3_POLICY_LRU] = {.name = "lru", .batch = no_batch, .asked = no_ask, .keep = lru_keep,
                       .order = lru_keep},
};

int k3_cache_policy_init(struct k3_cache_policy *p, enum k3_cache_policy_kind kind, int layers,
                         int experts, double half_life, struct k3_err *err)
{
    memset(p, 0, sizeof *p);
    size_t n = (size_t)layers * (size_t)experts;
    p->ops = &ops_of[kind];
    p->layers = layers;
    p->experts = experts;
    p->log_decay = -log(2.0) / (half_life > 0 ? half_life : K3_LFRU_HALF_LIFE);
    p->layer_clock = calloc((size_t)layers, sizeof *p->layer_clock);
    p->log_score = calloc(n, sizeof *p->log_score);
    p->at = calloc(n, sizeof *p->at);
    if (!p->layer_clock || !p->log_score || !p->at) {
        k3_cache_policy_free(p);
        return k3_errf(err, "out of memory for the cache policy (%zu records)", n);
    }
    return 0;
}

void k3_cache_policy_free(struct k3_cache_policy *p)
{
    free(p->layer_clock);
    free(p->log_score);
    free(p->at);
    memset(p, 0, sizeof *p);
}
