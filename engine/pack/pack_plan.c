#include "engine/pack/pack_plan.h"

#include <stdlib.h>
#include <string.h>

/* Record piece size: the stripe unit asked for (chunk), else one piece per drive; whole
 * records when asked.  Trunk segments use the stripe unit of a striped record (whole-
 * record packs too). */
static void piece_sizes(struct k3_pack_plan *pl, uint64_t record_bytes,
                        const struct k3_pack_geometry *g)
{
    uint32_t N = (uint32_t)g->n_drives;
    uint64_t per_drive = (record_bytes + N - 1) / N;
    pl->record_piece = k3_pack_record_piece_bytes(
        record_bytes, g->whole_records ? 0 : g->chunk ? g->chunk : per_drive, N);
    pl->trunk_piece = g->chunk ? k3_pack_round_up(g->chunk, K3_PACK_ALIGN)
                               : k3_pack_record_piece_bytes(record_bytes, per_drive, N);
}

/* The layer of the moe-th MoE layer. */
static int moe_layer(const struct k3_config *c, int moe)
{
    int l = 0;
    for (int k = -1; l < c->n_layers; l++)
        if (k3_layer_is_moe(c, l) && ++k == moe)
            break;
    return l;
}

struct k3_pack_object k3_pack_object_id(const struct k3_config *c, uint64_t n_trunk, uint64_t o)
{
    if (o < n_trunk)
        return (struct k3_pack_object){.layer = (int32_t)o - 1, .expert = -1};
    uint64_t r = o - n_trunk;
    return (struct k3_pack_object){.layer = moe_layer(c, (int)(r / (uint64_t)c->n_experts)),
                                   .expert = (int32_t)(r % (uint64_t)c->n_experts)};
}

/* Objects: the trunk segments, then every record, MoE layers in order, experts in
 * order; each cut into pieces (an empty segment still gets one, empty), but a record
 * outside the share gets none. */
static int plan_objects(struct k3_pack_plan *pl, const struct k3_config *c,
                        const uint64_t *segment_bytes, uint64_t record_bytes,
                        struct k3_share share, struct k3_err *err)
{
    pl->n_objects = pl->n_trunk + (uint64_t)k3_moe_layer_count(c) * (uint64_t)c->n_experts;
    pl->objects = calloc(pl->n_objects, sizeof *pl->objects);
    if (!pl->objects)
        return k3_errf(err, "out of memory planning %llu objects",
                       (unsigned long long)pl->n_objects);
    for (uint64_t o = 0; o < pl->n_objects; o++) {
        struct k3_pack_object *x = &pl->objects[o];
        *x = k3_pack_object_id(c, pl->n_trunk, o);
        bool trunk = o < pl->n_trunk;
        x->bytes = trunk ? segment_bytes[o] : record_bytes;
        x->piece_bytes = (uint32_t)(trunk ? pl->trunk_piece : pl->record_piece);
        x->n_pieces = x->bytes ? (uint32_t)((x->bytes + x->piece_bytes - 1) / x->piece_bytes) : 1;
        if (!trunk && !k3_share_owns(share, x->expert))
            x->n_pieces = x->piece_bytes = 0;
        x->first_piece = pl->n_pieces;
        pl->n_pieces += x->n_pieces;
    }
    return 0;
}

/* Primary pieces: piece j of the held-th object with pieces on drive (held + j) mod N
 * (held is the object's index in a whole pack); a drive's pieces of one object back to
 * back, so piece j is the (j / N)-th of its drive's run. */
static void place_pieces(struct k3_pack_plan *pl, uint32_t N, uint64_t *run)
{
    uint64_t held = 0;
    for (uint64_t o = 0; o < pl->n_objects; o++) {
        const struct k3_pack_object *x = &pl->objects[o];
        if (!x->n_pieces)
            continue;
        memset(run, 0, N * sizeof *run);
        for (uint32_t j = 0; j < x->n_pieces; j++) {
            struct k3_pack_piece *pc = &pl->pieces[x->first_piece + j];
            pc->drive = k3_pack_piece_drive(held, j, N);
            pc->bytes = j + 1 < x->n_pieces ? x->piece_bytes
                                            : (uint32_t)(x->bytes - (uint64_t)j * x->piece_bytes);
            pc->offset = pl->data_bytes[pc->drive] + (uint64_t)(j / N) * x->piece_bytes;
            run[pc->drive] += k3_pack_round_up(pc->bytes, K3_PACK_ALIGN);
        }
        for (uint32_t d = 0; d < N; d++)
            pl->data_bytes[d] += run[d];
        held++;
    }
}

/* Replicas: the same layout again after every primary, each piece on the next drive. */
static void place_replicas(struct k3_pack_plan *pl, uint32_t N, uint64_t *run)
{
    for (uint64_t o = 0; o < pl->n_objects; o++) {
        const struct k3_pack_object *x = &pl->objects[o];
        memset(run, 0, N * sizeof *run);
        for (uint32_t j = 0; j < x->n_pieces; j++) {
            const struct k3_pack_piece *pc = &pl->pieces[x->first_piece + j];
            struct k3_pack_replica *rp = &pl->replicas[x->first_piece + j];
            rp->drive = (pc->drive + 1) % N;
            rp->offset = pl->data_bytes[rp->drive] + run[rp->drive];
            run[rp->drive] += k3_pack_round_up(pc->bytes, K3_PACK_ALIGN);
        }
        for (uint32_t d = 0; d < N; d++)
            pl->data_bytes[d] += run[d];
    }
}

int k3_pack_plan(struct k3_pack_plan *pl, const struct k3_config *c, const uint64_t *segment_bytes,
                 int n_segments, uint64_t record_bytes, const struct k3_pack_geometry *g,
                 struct k3_err *err)
{
    memset(pl, 0, sizeof *pl);
    uint32_t N = (uint32_t)g->n_drives;
    piece_sizes(pl, record_bytes, g);
    pl->n_trunk = (uint64_t)n_segments;
    if (plan_objects(pl, c, segment_bytes, record_bytes, g->share, err))
        return -1;
    pl->pieces = calloc(pl->n_pieces + 1, sizeof *pl->pieces);
    pl->data_bytes = calloc(N, sizeof *pl->data_bytes);
    pl->replicas = g->replicas > 1 ? calloc(pl->n_pieces + 1, sizeof *pl->replicas) : NULL;
    uint64_t *run = calloc(N, sizeof *run);
    int rc = pl->pieces && pl->data_bytes && run && (g->replicas < 2 || pl->replicas)
                 ? 0
                 : k3_errf(err, "out of memory planning %llu pieces",
                           (unsigned long long)pl->n_pieces);
    if (!rc) {
        place_pieces(pl, N, run);
        if (pl->replicas)
            place_replicas(pl, N, run);
    }
    free(run);
    return rc;
}

void k3_pack_plan_free(struct k3_pack_plan *pl)
{
    free(pl->objects);
    free(pl->pieces);
    free(pl->replicas);
    free(pl->data_bytes);
    memset(pl, 0, sizeof *pl);
}

static uint64_t pad8(uint64_t n) { return (n + 7) / 8 * 8; }

uint64_t k3_pack_manifest_bytes(const struct k3_pack_plan *pl, const struct k3_pack_sections *s)
{
    uint64_t tables = pl->n_objects * sizeof(struct k3_pack_object) +
                      pl->n_pieces * sizeof(struct k3_pack_piece) +
                      s->n_tensors * sizeof(struct k3_pack_tensor) +
                      (pl->replicas ? pl->n_pieces * sizeof(struct k3_pack_replica) : 0);
    return sizeof(struct k3_pack_header) + pad8(s->config) + pad8(s->tiktoken) +
           pad8(s->tokconfig) + pad8(s->names) + tables +
           (s->share ? sizeof(struct k3_pack_share) : 0);
}
