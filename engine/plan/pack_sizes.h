/* The sizes the budget and the projection need of a pack that is not there: what `pack`
 * would write for a config, its trunk as bf16 or Q8_0.
 *
 * Owns: a default pack's segments, records, embedding pieces and manifest as the budget
 * sees them (struct k3_budget_pack, the same the runtime fills from an opened pack), and
 * the trunk bytes the projection splits by kind.
 * Does not own: the budget (engine/stream/budget.h), writing packs (engine/pack).
 */
#ifndef K3_PLAN_PACK_SIZES_H
#define K3_PLAN_PACK_SIZES_H

#include <stdint.h>

#include "engine/base/err.h"
#include "engine/model/config.h"
#include "engine/model/trunk_type.h"
#include "engine/stream/budget.h"

struct k3_plan_pack {
    struct k3_budget_pack pack; /* its segment_bytes are segments below */
    uint64_t *segments;         /* [pack.n_segments], malloc'd */
    double overlapping;         /* trunk bytes a decode step computes while its layer's reads
                                 * are in flight: each MoE layer's latent down projection and
                                 * shared experts (forward/moe.c runs them between the router
                                 * and the routed experts) */
    double q8;                  /* the trunk's Q8_0 bytes (0 for bf16) */
};

/* A default pack (one replica) of c over n_drives, its trunk as tt holds it; `config` is
 * c's name or config.json path (the manifest holds its text, and the tokenizer files of
 * the folder it sits in). */
int k3_plan_pack_of(const struct k3_config *c, const char *config, int n_drives,
                    enum k3_trunk_type tt, struct k3_plan_pack *out, struct k3_err *err);
void k3_plan_pack_free(struct k3_plan_pack *pk);

#endif
