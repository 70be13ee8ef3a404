#include "engine/pack/ckpt_view.h"

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>

#include "engine/pack/pack_plan.h"

/* One tensor's bytes in a shard, and (records) where they go in the record. */
struct extent {
    int shard;
    uint64_t off, len;
    uint64_t dst;
    int spec; /* trunk: its spec index */
};

/* The tables as they grow; packed into one block at the end. */
struct view {
    struct k3_pack_object *objects;   /* [n_objects] */
    uint64_t *first_move;             /* [n_objects + 1] */
    struct k3_pack_piece *pieces;
    uint64_t *piece_at;
    uint64_t n_pieces, cap_pieces;
    struct k3_pack_move *moves;
    uint64_t n_moves, cap_moves;
    uint64_t at;                      /* the current object's buffer bytes so far */
};

static uint64_t down(uint64_t x) { return x / K3_PACK_ALIGN * K3_PACK_ALIGN; }
static uint64_t up(uint64_t x) { return k3_pack_round_up(x, K3_PACK_ALIGN); }

static int grow(void **p, uint64_t *cap, uint64_t need, size_t size)
{
    if (need <= *cap)
        return 0;
    uint64_t c = *cap ? *cap * 2 : 1024;
    while (c < need)
        c *= 2;
    void *np = realloc(*p, c * size);
    if (!np)
        return -1;
    *p = np;
    *cap = c;
    return 0;
}

static int add_piece(struct view *v, struct k3_pack_piece pc, uint64_t at)
{
    uint64_t cap = v->cap_pieces; /* both tables grow alike */
    if (grow((void **)&v->pieces, &cap, v->n_pieces + 1, sizeof *v->pieces) ||
        grow((void **)&v->piece_at, &v->cap_pieces, v->n_pieces + 1, sizeof *v->piece_at))
        return -1;
    v->pieces[v->n_pieces] = pc;
    v->piece_at[v->n_pieces++] = at;
    return 0;
}

/* The span [start, end) of shard (start aligned), landing at v->at, cut into pieces. */
static int add_span(struct view *v, int shard, uint64_t start, uint64_t end, uint32_t piece)
{
    for (uint64_t q = start; q < end; q += piece) {
        uint64_t n = end - q < piece ? end - q : piece;
        if (add_piece(v, (struct k3_pack_piece){.offset = q, .bytes = (uint32_t)n,
                                                .drive = (uint32_t)shard},
                      v->at + (q - start)))
            return -1;
    }
    v->at += up(end - start);
    return 0;
}

/* A record's part: len bytes at src go to dst; joined to the last move when both run on. */
static int add_move(struct view *v, uint64_t src, uint64_t dst, uint64_t len, uint64_t first)
{
    struct k3_pack_move *last = v->n_moves > first ? &v->moves[v->n_moves - 1] : NULL;
    if (last && last->src + last->len == src && last->dst + last->len == dst) {
        last->len += len;
        return 0;
    }
    if (grow((void **)&v->moves, &v->cap_moves, v->n_moves + 1, sizeof *v->moves))
        return -1;
    v->moves[v->n_moves++] = (struct k3_pack_move){src, dst, len};
    return 0;
}

/* Object o's entry, once its pieces are in (an object with none gets one, empty, as in a
 * pack). */
static int close_object(struct view *v, uint64_t o, uint64_t first_piece, uint32_t piece,
                        const struct k3_config *c, uint64_t n_trunk)
{
    if (v->n_pieces == first_piece && add_piece(v, (struct k3_pack_piece){0}, 0))
        return -1;
    const struct k3_pack_piece *last = &v->pieces[v->n_pieces - 1];
    struct k3_pack_object *x = &v->objects[o];
    *x = k3_pack_object_id(c, n_trunk, o);
    x->first_piece = first_piece;
    x->n_pieces = (uint32_t)(v->n_pieces - first_piece);
    x->piece_bytes = piece;
    x->bytes = v->piece_at[v->n_pieces - 1] + last->bytes;
    v->first_move[o + 1] = v->n_moves;
    return 0;
}

static int by_place(const void *a, const void *b)
{
    const struct extent *x = a, *y = b;
    if (x->shard != y->shard)
        return x->shard < y->shard ? -1 : 1;
    return x->off < y->off ? -1 : x->off > y->off;
}

/* Trunk segment seg: its tensors in shard order, one span per run of touching tensors;
 * each tensor is used where it lands, so the layout takes that offset. */
static int add_segment(struct view *v, struct k3_ckpt_plan *plan, int seg, struct extent *ex,
                       const struct k3_config *c)
{
    int n = 0;
    for (int i = 0; i < plan->n_specs; i++)
        if (plan->layout.segment[i] == seg)
            ex[n++] = (struct extent){plan->trunk[i]->shard, plan->trunk[i]->t->offset,
                                      plan->trunk[i]->t->nbytes, 0, i};
    qsort(ex, (size_t)n, sizeof *ex, by_place);
    uint64_t first = v->n_pieces;
    v->at = 0;
    for (int i = 0; i < n;) {
        uint64_t start = down(ex[i].off), end = ex[i].off + ex[i].len, at = v->at;
        int k = i;
        for (; k < n && ex[k].shard == ex[i].shard && down(ex[k].off) <= up(end); k++) {
            plan->layout.offset[ex[k].spec] = at + (ex[k].off - start);
            end = ex[k].off + ex[k].len > end ? ex[k].off + ex[k].len : end;
        }
        if (add_span(v, ex[i].shard, start, end, K3_VIEW_TRUNK_PIECE))
            return -1;
        i = k;
    }
    if (close_object(v, (uint64_t)seg, first, K3_VIEW_TRUNK_PIECE, c, (uint64_t)plan->layout.n_segments))
        return -1;
    plan->layout.segment_bytes[seg] = v->objects[seg].bytes;
    return 0;
}

/* Record o: its parts in record order; a part joins the span before when it follows it
 * in the same shard and touches it.  A span lands no lower than its first part's place
 * in the record, so every move goes down and, done in order, never overwrites a part
 * still to move. */
static int add_record(struct view *v, const struct k3_expert_loc *loc,
                      const struct k3_record_layout *rec, uint64_t o, const struct k3_config *c,
                      uint64_t n_trunk)
{
    uint64_t first = v->n_pieces, first_move = v->n_moves;
    v->at = 0;
    for (int p = 0; p < K3_EXPERT_PARTS;) {
        const struct k3_ckpt_tensor *t = loc->part[p];
        uint64_t start = down(t->t->offset), end = t->t->offset + rec->len[p];
        uint64_t lead = t->t->offset - start;
        uint64_t at = rec->off[p] > lead ? up(rec->off[p] - lead) : 0;
        v->at = at > v->at ? at : v->at;
        at = v->at;
        int q = p;
        for (; q < K3_EXPERT_PARTS; q++) {
            const struct k3_ckpt_tensor *u = loc->part[q];
            if (q > p && (u->shard != t->shard || u->t->offset < end || down(u->t->offset) > up(end)))
                break;
            end = u->t->offset + rec->len[q];
            if (add_move(v, at + (u->t->offset - start), rec->off[q], rec->len[q], first_move))
                return -1;
        }
        if (add_span(v, t->shard, start, end, K3_VIEW_RECORD_PIECE))
            return -1;
        p = q;
    }
    /* A part already in its place needs no move. */
    uint64_t kept = first_move;
    for (uint64_t i = first_move; i < v->n_moves; i++)
        if (v->moves[i].src != v->moves[i].dst)
            v->moves[kept++] = v->moves[i];
    v->n_moves = kept;
    return close_object(v, o, first, K3_VIEW_RECORD_PIECE, c, n_trunk);
}

static int add_objects(struct view *v, struct k3_ckpt_plan *plan, const struct k3_config *c,
                       const struct k3_record_layout *rec, uint64_t n_objects)
{
    uint64_t n_trunk = (uint64_t)plan->layout.n_segments;
    struct extent *ex = calloc((size_t)plan->n_specs + 1, sizeof *ex);
    int rc = ex ? 0 : -1;
    for (int s = 0; !rc && s < plan->layout.n_segments; s++)
        rc = add_segment(v, plan, s, ex, c);
    free(ex);
    for (uint64_t o = n_trunk; !rc && o < n_objects; o++) {
        struct k3_pack_object id = k3_pack_object_id(c, n_trunk, o);
        rc = add_record(v, &plan->experts[(size_t)id.layer * c->n_experts + (size_t)id.expert],
                        rec, o, c, n_trunk);
    }
    return rc;
}

/* The tables into one block (the view's "manifest"), pointed at from p. */
static int pack_tables(struct k3_packed *p, const struct view *v, uint64_t n_objects)
{
    uint64_t sizes[5] = {n_objects * sizeof *v->objects, (n_objects + 1) * sizeof *v->first_move,
                         v->n_pieces * sizeof *v->pieces, v->n_pieces * sizeof *v->piece_at,
                         v->n_moves * sizeof *v->moves};
    const void *src[5] = {v->objects, v->first_move, v->pieces, v->piece_at, v->moves};
    uint64_t total = 0;
    for (int i = 0; i < 5; i++)
        total += k3_pack_round_up(sizes[i], 8);
    if (!(p->manifest = malloc(total + 8)))
        return -1;
    uint8_t *at[5], *w = p->manifest;
    for (int i = 0; i < 5; i++) {
        at[i] = w;
        if (sizes[i])
            memcpy(w, src[i], sizes[i]);
        w += k3_pack_round_up(sizes[i], 8);
    }
    p->objects = (const void *)at[0];
    p->first_move = (const void *)at[1];
    p->pieces = (const void *)at[2];
    p->piece_at = (const void *)at[3];
    p->moves = (const void *)at[4];
    p->header.manifest_bytes = total;
    p->header.n_objects = n_objects;
    p->header.n_pieces = v->n_pieces;
    return 0;
}

/* The shards as the view's drives, each opened for O_DIRECT reads where allowed. */
static int open_shards(struct k3_packed *p, const struct k3_checkpoint *ck, struct k3_err *err)
{
    p->n_drives = ck->n_shards;
    p->drives = calloc((size_t)ck->n_shards, sizeof *p->drives);
    if (!p->drives)
        return k3_errf(err, "out of memory");
    for (int i = 0; i < ck->n_shards; i++)
        p->drives[i].data.fd = -1;
    for (int i = 0; i < ck->n_shards; i++) {
        struct k3_pack_drive *d = &p->drives[i];
        if (!(d->path = strdup(ck->shards[i].path)))
            return k3_errf(err, "out of memory");
        int e = k3io_open(&d->data, d->path, O_RDONLY, true);
        if (e)
            return k3_errf(err, "%s: %s", d->path, strerror(-e));
    }
    return 0;
}

static void view_free(struct view *v)
{
    free(v->objects);
    free(v->first_move);
    free(v->pieces);
    free(v->piece_at);
    free(v->moves);
}

int k3_packed_view_checkpoint(struct k3_packed **out, const struct k3_checkpoint *ck,
                              struct k3_ckpt_plan *plan, const struct k3_config *c,
                              const struct k3_record_layout *rec, struct k3_err *err)
{
    *out = NULL;
    uint64_t n_trunk = (uint64_t)plan->layout.n_segments;
    uint64_t n_objects = n_trunk + (uint64_t)k3_moe_layer_count(c) * (uint64_t)c->n_experts;
    struct view v = {.objects = calloc(n_objects, sizeof *v.objects),
                     .first_move = calloc(n_objects + 1, sizeof *v.first_move)};
    struct k3_packed *p = calloc(1, sizeof *p);
    int rc = p && v.objects && v.first_move && (p->checkpoint = strdup(ck->dir)) &&
                     !add_objects(&v, plan, c, rec, n_objects) && !pack_tables(p, &v, n_objects)
                 ? 0
                 : k3_errf(err, "%s: out of memory laying out the checkpoint", ck->dir);
    view_free(&v);
    if (!rc) {
        p->header.n_trunk_objects = (uint32_t)n_trunk;
        p->header.n_tensors = (uint64_t)plan->n_specs;
        p->header.drive_count = (uint32_t)ck->n_shards;
        rc = open_shards(p, ck, err);
    }
    if (rc) {
        k3_packed_close(p);
        return -1;
    }
    *out = p;
    return 0;
}
