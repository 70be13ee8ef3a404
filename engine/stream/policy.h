/* Expert cache replacement: which cached record gives way when a slot must take another.
 *
 * Owns: the policies as an ops table, each with the little history it keeps per record,
 * shared by the engine's cache (cache.c) and bench/routesim (which judges them against
 * the offline optimum on real routing), so what is measured is what runs.  A policy is
 * told when a layer's batch begins and which records it asks for; when the cache needs a
 * slot it asks the policy how much each reusable record is worth keeping, and evicts the
 * least.  Records are keyed moe_layer * experts + expert; a record's `last_use` (the
 * cache's clock of its last ask or fill) comes from the caller.
 * Does not own: the slots, pins and states (cache.c), what is read.
 * Invariants: the policy never changes which bytes are computed, only which records
 * stay; the same asks give the same choices (no randomness, no time).
 */
#ifndef K3_CACHE_POLICY_H
#define K3_CACHE_POLICY_H

#include <stdint.h>

#include "engine/base/err.h"

enum k3_cache_policy_kind {
    K3_POLICY_LFRU, /* decayed ask counts per record, the last use breaking ties (default) */
    K3_POLICY_LRU,  /* the least recently used */
};

struct k3_cache_policy;

struct k3_cache_policy_ops {
    const char *name;
    void (*batch)(struct k3_cache_policy *p, int moe_layer);    /* a layer's batch begins */
    void (*asked)(struct k3_cache_policy *p, uint32_t key);     /* the batch asks for key */
    /* how much keeping key is worth now: the cache evicts the least, the lesser order (below)
     * and then the least recently used (last_use) among equals */
    double (*keep)(const struct k3_cache_policy *p, uint32_t key, uint64_t last_use);
    /* keep less what all records of key's MoE layer gain or lose alike as batches pass:
     * it changes only when key is asked (or last_use changes), so a layer's records can be
     * kept ordered by it between asks, and within a layer keep never orders two records
     * otherwise (keep is order plus a term of the layer's clock, and adding one number to
     * two others keeps their order) */
    double (*order)(const struct k3_cache_policy *p, uint32_t key, uint64_t last_use);
};

struct k3_cache_policy {
    const struct k3_cache_policy_ops *ops;
    int layers, experts;
    double log_decay;       /* LFRU: log of the weight an ask loses per batch of its layer */
    uint64_t *layer_clock;  /* [layers] batches of each layer so far */
    double *log_score;      /* [layers * experts] LFRU: log of the decayed ask count at at[] */
    uint64_t *at;           /* [layers * experts] the layer clock of the last update */
};

/* The LFRU half-life, in batches of a layer (decode steps): tuned on requests 0-499 of
 * DeepSeek-V2-Lite's prompts (bench/replay.sh), judged on 500-998. */
#define K3_LFRU_HALF_LIFE 24.0

/* kind's policy for layers x experts records; half_life: LFRU's (0: the default). */
int k3_cache_policy_init(struct k3_cache_policy *p, enum k3_cache_policy_kind kind, int layers,
                         int experts, double half_life, struct k3_err *err);
void k3_cache_policy_free(struct k3_cache_policy *p);

#endif
