/* The expert store: gets routed-expert records into memory for the forward pass.
 *
 * Owns: the record buffers and the source they are read from, behind an ops table, so
 * that the forward pass sees one interface whatever serves the records.  A batch is begun
 * with the experts one layer needs, as many as it chose (a pass's union: up to all of
 * them); the store keeps up to `capacity` of their reads in flight and queues the rest;
 * next() hands back records in the order they land (not the order asked); each stays
 * valid until done() gives its slot back for the next queued read, or the next begin().
 * Does not own: which experts to read (the router) or how they are combined.
 */
#ifndef K3_EXPERT_STORE_H
#define K3_EXPERT_STORE_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/base/err.h"

struct k3_model;
struct k3_expert_store;

struct k3_expert_stats {
    uint64_t records;          /* records delivered */
    uint64_t bytes;            /* bytes read from storage */
    uint64_t nan_scale_groups; /* E8M0 code 255 seen (those groups decode to zero) */
    double read_seconds;       /* time spent waiting for reads */
};

/* A record next() hands back. */
struct k3_landed {
    int index;             /* its position in the begin() list */
    const uint8_t *record;
    int team;              /* the compute team whose node holds its buffer (numa/plan.h
                            * rule 6); 0 when the store has no placement */
};

struct k3_expert_store_ops {
    const char *name;
    /* Starts reading experts[0..n) of layer (distinct, n <= the layer's experts). */
    int (*begin)(struct k3_expert_store *s, int layer, const int *experts, int n,
                 struct k3_err *err);
    /* The next landed record of the batch.  wait false: returns 1 at once when none is
     * ready yet (0 when one is, -1 on error).  Waiting while every slot holds a record
     * handed out and not yet done() is an error. */
    int (*next)(struct k3_expert_store *s, bool wait, struct k3_landed *out,
                struct k3_err *err);
    /* The caller has computed the record of begin() entry `index`: its slot may take the
     * next queued read. */
    int (*done)(struct k3_expert_store *s, int index, struct k3_err *err);
    /* Optional: starts reading records a later begin() of layer will probably ask for
     * (router prediction); never blocks, and may read fewer when buffers are short. */
    int (*prefetch)(struct k3_expert_store *s, int layer, const int *experts, int n,
                    struct k3_err *err);
    void (*close)(struct k3_expert_store *s);
};

struct k3_expert_store {
    const struct k3_expert_store_ops *ops;
    int capacity; /* reads a batch keeps in flight */
    struct k3_expert_stats stats;
    char fallback[256]; /* a fallback in effect (e.g. no O_DIRECT), said once; or "" */
};

static inline void k3_expert_store_close(struct k3_expert_store *s)
{
    if (s)
        s->ops->close(s);
}

#endif
