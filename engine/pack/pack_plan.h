/* Where a pack puts everything (pack_format.h's placement rule), as pure arithmetic:
 * the object table, every piece's drive, size and offset, the replicas, each drive's data
 * bytes, and the manifest's size.
 *
 * Owns: the plan, from the trunk's segment sizes, the record size and the drives.  `pack`
 * writes by it; `plan` sizes a pack's manifest with it without any weights.
 * Does not own: reading the checkpoint, writing, checksums (pack.c fills them in).
 */
#ifndef K3_PACK_PLAN_H
#define K3_PACK_PLAN_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/base/err.h"
#include "engine/model/config.h"
#include "engine/model/share.h"
#include "engine/pack/pack_format.h"

/* How the objects are cut and spread. */
struct k3_pack_geometry {
    int n_drives;
    uint64_t chunk;      /* largest piece, bytes; 0: each record in one piece per drive */
    bool whole_records;  /* each record whole on one drive, round-robin */
    int replicas;        /* 1, or 2: a copy of every piece on the next drive */
    struct k3_share share; /* the records the pack holds (whole: all of them) */
};

struct k3_pack_plan {
    uint64_t n_objects, n_pieces, n_trunk;
    struct k3_pack_object *objects;   /* [n_objects] (checksums zero until written) */
    struct k3_pack_piece *pieces;     /* [n_pieces] */
    struct k3_pack_replica *replicas; /* [n_pieces] with 2 replicas, else NULL */
    uint64_t *data_bytes;             /* [n_drives] each drive's data file */
    uint64_t trunk_piece, record_piece; /* piece sizes */
};

/* Object o's place in the model (its layer and expert; the rest zero): the trunk
 * segments [0, n_trunk) in tensors.h's order, then every record, MoE layers in order,
 * experts in order.  Every layout of objects (a pack, a checkpoint seen as one) numbers
 * them so. */
struct k3_pack_object k3_pack_object_id(const struct k3_config *c, uint64_t n_trunk, uint64_t o);

/* Plans a pack of the trunk segments segment_bytes[0..n_segments) (tensors.h's order)
 * and c's routed-expert records of record_bytes each; records outside g->share get no
 * pieces (pack_format.h). */
int k3_pack_plan(struct k3_pack_plan *pl, const struct k3_config *c, const uint64_t *segment_bytes,
                 int n_segments, uint64_t record_bytes, const struct k3_pack_geometry *g,
                 struct k3_err *err);
void k3_pack_plan_free(struct k3_pack_plan *pl);

/* The sections of a manifest, by their byte counts (pack_format.h's order). */
struct k3_pack_sections {
    uint64_t config, tiktoken, tokconfig;  /* the checkpoint's files as stored */
    uint64_t n_tensors, names;             /* trunk tensors; their names with NULs */
    bool share;                            /* a share pack's K3_SEC_SHARE */
};

/* Bytes of the manifest of plan pl with those sections (each padded to 8 bytes). */
uint64_t k3_pack_manifest_bytes(const struct k3_pack_plan *pl, const struct k3_pack_sections *s);

#endif
