/* `pack`: a checkpoint folder turned into the striped streaming layout on N drives
 * (pack_format.h).
 *
 * Owns: checking every drive (a writable folder with the space the plan needs) before
 * writing anything, streaming the input once through one piece-sized buffer, and writing
 * the manifests last (synced data, then temporary name, sync, rename), so a pack killed at
 * any point leaves nothing that opens, and a rerun completes it.  What it has done and
 * any warning go to the caller's callbacks; nothing is printed.
 * Does not own: where objects and pieces go (pack_plan.h), reading packs (packed.h).
 */
#ifndef K3_PACK_H
#define K3_PACK_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/base/err.h"
#include "engine/model/share.h"
#include "engine/model/trunk_type.h"

struct k3_pack_opts {
    const char *checkpoint;
    const char *const *drives;
    int n_drives;
    uint64_t chunk;      /* largest piece, bytes; 0: each record in one piece per drive */
    bool whole_records;  /* each record whole on one drive, round-robin (for comparison) */
    int replicas;        /* 1, or 2: a copy of every piece on the next drive */
    enum k3_trunk_type trunk_type; /* bf16: the trunk as shipped; q8_0: its large matrices
                                    * quantized (engine/model/trunk_type.h) as written */
    struct k3_share share; /* whole, or one rank's share of the routed experts (a share
                            * pack: the trunk and that rank's records; pack_format.h) */
    /* Reports, on the packing thread; each may be NULL.  note: one line when a phase
     * ends (the plan, the data, done) or, with warning, something the user should know
     * (a drive refusing O_DIRECT).  progress: data bytes written of total, per piece. */
    void (*note)(void *ctx, bool warning, const char *line);
    void (*progress)(void *ctx, uint64_t done, uint64_t total);
    void *ctx;
};

int k3_pack(const struct k3_pack_opts *o, struct k3_err *err);

#endif
