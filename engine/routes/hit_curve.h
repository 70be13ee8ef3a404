/* Hit curves: how often a per-layer expert cache of C records finds what a layer asks
 * for, C = 0 .. E, worked out by simulating the engine's replacement policy
 * (stream/policy.h, the same code) over the batches a replay ran; written by `replay
 * --hit-curve`, read by `plan --hit-curve` in place of uniform routing's C / E.
 *
 * Owns: the per-layer cache simulation (a batch's records asked, the held ones pinned as
 * hits, each miss taking a free slot or evicting the record the policy values least, as
 * stream/cache.c does), the curve file ("records_per_layer,hit_rate", a line for C = 0 ..
 * E, rates non-decreasing in [0, 1]) and reading a rate off it between its points.
 * Does not own: the policies (stream/policy.c), the engine's cache.
 */
#ifndef K3_HIT_CURVE_H
#define K3_HIT_CURVE_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/base/err.h"
#include "engine/stream/policy.h"

/* One layer's cache of `slots` records, simulated. */
struct k3_sim_cache {
    int slots, n;
    int32_t *key;   /* [slots] policy keys (moe_layer * E + expert) */
    uint64_t *last; /* [slots] the clock of the record's last ask or fill */
    bool *pinned;   /* [slots] asked by the current batch */
};

int k3_sim_cache_init(struct k3_sim_cache *c, int slots);
void k3_sim_cache_free(struct k3_sim_cache *c);
/* A batch of layer moe_layer asking keys[0..n) (distinct): the hits among them. */
int k3_sim_cache_batch(struct k3_sim_cache *c, struct k3_cache_policy *p, int moe_layer,
                       const int32_t *keys, int n, uint64_t *clock);

/* The batches a run asked for, in order: batch i is MoE layer layer[i]'s, asking
 * keys[off[i] .. off[i + 1]). */
struct k3_batches {
    int layers, experts;  /* set by the caller before the first add */
    int64_t n;
    int32_t *keys;
    int64_t *off;         /* [n + 1] */
    int *layer;           /* [n] */
    int64_t cap_keys, cap_n, cap_off;
};

int k3_batches_add(struct k3_batches *b, int moe_layer, const int32_t *keys, int n,
                   struct k3_err *err);
void k3_batches_free(struct k3_batches *b);

/* rate[C] for C = 0 .. E records per layer under policy kind. */
int k3_hit_curve(const struct k3_batches *b, enum k3_cache_policy_kind kind, double *rate,
                 struct k3_err *err);
int k3_hit_curve_write(const char *path, const double *rate, int experts, struct k3_err *err);
/* Reads a curve of up to max + 1 points; *n: its largest C. */
int k3_hit_curve_read(const char *path, double *rate, int max, int *n, struct k3_err *err);
/* The rate at x records per layer (linear between points, the last one beyond). */
double k3_hit_curve_at(const double *rate, int n, double x);

#endif
