/* `pack`: a checkpoint folder turned into the striped streaming layout on N drives
 * (pack_format.h).
 *
 * Owns: planning objects and pieces, checking every drive (a writable folder with the
 * space the plan needs) before writing anything, streaming the input once through one
 * piece-sized buffer, and writing the manifests last (synced data, then temporary name,
 * sync, rename), so a pack killed at any point leaves nothing that opens, and a rerun
 * completes it.  Does not own: reading packs (packed.h).
 */
#ifndef K3_PACK_H
#define K3_PACK_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/base/err.h"

struct k3_pack_opts {
    const char *checkpoint;
    const char *const *drives;
    int n_drives;
    uint64_t chunk;      /* largest piece, bytes; 0: each record in one piece per drive */
    bool whole_records;  /* each record whole on one drive, round-robin (for comparison) */
    int replicas;        /* 1, or 2: a copy of every piece on the next drive */
    bool progress;       /* a progress bar (on a terminal) instead of one line per phase */
};

int k3_pack(const struct k3_pack_opts *o, struct k3_err *err);

#endif
