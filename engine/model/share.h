/* A rank's share of the routed experts, when `mpirun -np R` spreads one model over R
 * boxes: expert e of every layer belongs to rank e mod R.  Interleaving (not blocks of
 * E/R) keeps each rank's count within one of E/R and spreads neighbouring experts, so a
 * token's choices load the ranks evenly on average.  When every rank's storage holds
 * every expert (a whole pack on each box, or one checkpoint folder), a layer's chosen
 * experts are dealt out evenly instead (engine/forward/moe.c), so each rank reads about
 * n/R of them in every layer, not only on average (the busiest of 2 ranks reads 9.56 of
 * a token's 16 by owner, 8 dealt).  The trunk is not shared out: every rank holds all of
 * it.
 * Owns the rule and the "%r" in a per-rank path.  Does not own: MPI (engine/cluster),
 * where a share's records are stored (engine/pack). */
#ifndef K3_MODEL_SHARE_H
#define K3_MODEL_SHARE_H

#include <stdbool.h>
#include <stddef.h>

#include "engine/base/err.h"

#define K3_MAX_RANKS 64

/* ranks 0 or 1: the whole model (one process). */
struct k3_share {
    int rank, ranks;
    bool dealt; /* every rank holds every expert: a layer's choices are dealt out evenly
                 * (engine/forward/moe.c), not by owner */
};

static inline bool k3_share_whole(struct k3_share s) { return s.ranks <= 1; }

static inline bool k3_share_owns(struct k3_share s, int expert)
{
    return k3_share_whole(s) || expert % s.ranks == s.rank;
}

/* Experts of one layer of E that the rank owns. */
static inline int k3_share_experts(struct k3_share s, int E)
{
    return k3_share_whole(s) ? E : (E - s.rank + s.ranks - 1) / s.ranks;
}

/* path with every "%r" replaced by rank (so one command line names each rank's drives:
 * --drives /box%r/nvme0,/box%r/nvme1); "%%" is a '%'.  -1 with err when it does not fit
 * or holds another '%' sequence. */
int k3_share_path(const char *path, int rank, char *out, size_t cap, struct k3_err *err);

#endif
