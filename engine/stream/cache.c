/* The stream's expert store (experts.h): record slots kept as a cache.  begin() pins a
 * layer's records in slots (a hit when one is there already), prefetch() reads predicted
 * records into free slots in the background, next() hands back records as they land and
 * check out.  A slot is reused least recently used first, never while pinned or landing;
 * each team's slots are taken in turn, so a layer's experts spread over the teams. */
#include <assert.h>

#include "engine/kernels/mxfp4.h"
#include "engine/stream/stream_internal.h"

static struct k3_stream *of_store(struct k3_expert_store *st)
{
    return (struct k3_stream *)((char *)st - offsetof(struct k3_stream, store));
}

/* Where object o's record is (landed or still landing), or -1. */
static int slot_holding(const struct k3_stream *s, uint64_t o)
{
    for (int i = 0; i < s->n_records; i++)
        if (s->records[i].object == (int64_t)o && s->records[i].state != BUF_ABANDONED)
            return i;
    return -1;
}

/* Can slot b be refilled: no one holds it and nothing lands in it. */
static bool reusable(const struct buffer *b)
{
    return !b->pins && (b->state == BUF_FREE || b->state == BUF_LANDED || b->state == BUF_READY);
}

/* A slot to read into: a free one first, else the least recently used reusable one; -1
 * if there is none.  team >= 0: only that team's slots. */
static int free_slot_of(const struct k3_stream *s, int team)
{
    int victim = -1;
    for (int i = 0; i < s->n_records; i++) {
        const struct buffer *b = &s->records[i];
        if (!reusable(b) || (team >= 0 && slot_team(s, i) != team))
            continue;
        const struct buffer *v = victim >= 0 ? &s->records[victim] : NULL;
        if (!v || (b->object < 0 && v->object >= 0) ||
            (b->object >= 0 && v->object >= 0 && b->last_use < v->last_use))
            victim = i;
    }
    return victim;
}

/* A free slot on the team that has taken the fewest since team_load was cleared, so
 * that each team gets its share of a layer's experts; any team's when that one has none. */
static int free_slot(struct k3_stream *s)
{
    int team = 0;
    for (int i = 1; i < s->n_teams; i++)
        if (s->team_load[i] < s->team_load[team])
            team = i;
    int slot = free_slot_of(s, s->n_teams > 1 ? team : -1);
    if (slot < 0 && s->n_teams > 1)
        slot = free_slot_of(s, -1);
    if (slot >= 0)
        s->team_load[slot_team(s, slot)]++;
    return slot;
}

static void clear_team_load(struct k3_stream *s)
{
    for (int i = 0; i < s->n_teams; i++)
        s->team_load[i] = 0;
}

/* Slot takes object o's record: pending, its reads issued unless sync mode defers them
 * to next(). */
static int start_record(struct k3_stream *s, int slot, uint64_t o, uint32_t how,
                        struct k3_err *err)
{
    struct buffer *b = &s->records[slot];
    buffer_claim(b, (int64_t)o, 0, s->p->objects[o].n_pieces);
    b->submitted = k3_trace_now(s->o.trace);
    s->stats.records_read++;
    return s->o.sync && !(how & SPECULATIVE) ? 0 : read_pieces(s, b, 0, b->count, how, err);
}

/* A prediction that was asked for: what of it still waits behind the foreground is read
 * now, as the other records of the batch are. */
static int promote(struct k3_stream *s, int slot, struct k3_err *err)
{
    struct buffer *b = &s->records[slot];
    uint32_t n = drop_unstarted(s, slot);
    for (uint32_t i = 0; i < n; i++)
        if (read_pieces(s, b, s->dropped[i], 1, 0, err))
            return -1;
    return 0;
}

/* A prediction nobody asked for: its unstarted reads are dropped; the bytes already read
 * or landing are the waste.  The slot is free at once, or once those land; when every
 * read had started it stays, as a record landing into the cache. */
static void abandon(struct k3_stream *s, int slot, struct k3_layer_stats *ls)
{
    struct buffer *b = &s->records[slot];
    const struct k3_pack_object *x = &s->p->objects[b->object];
    uint32_t n = b->state == BUF_PENDING ? drop_unstarted(s, slot) : 0;
    uint64_t dropped = 0;
    for (uint32_t i = 0; i < n; i++)
        dropped += s->p->pieces[x->first_piece + s->dropped[i]].bytes;
    ls->wasted_bytes += x->bytes - dropped;
    b->predicted = -1;
    b->pending -= n;
    if (!n)
        buffer_check(b);
    else if (b->pending == 0)
        buffer_release(b);
    else
        buffer_set(b, BUF_ABANDONED);
}

/* A new batch: last batch's slots are let go; without a cache, so are the records it
 * used (what was prefetched for this layer, and what is still landing, stays). */
static void unpin_all(struct k3_stream *s, int layer)
{
    for (int i = 0; i < s->n_records; i++) {
        struct buffer *b = &s->records[i];
        b->pins = 0;
        if (!s->o.cache && b->predicted != layer && (b->state == BUF_LANDED || b->state == BUF_READY))
            buffer_release(b);
    }
}

/* Batch entry i asks for object o: a hit (prefetched for this layer, or cached from an
 * earlier token) or a read into a free slot.  Returns the slot, or -1. */
static int take(struct k3_stream *s, int layer, uint64_t o, struct k3_err *err)
{
    struct k3_layer_stats *ls = &s->layer_stats[layer];
    if (k3_packed_holds(s->p, o, err)) /* another rank's expert: never read garbage */
        return -1;
    int slot = slot_holding(s, o);
    if (slot >= 0) {
        struct buffer *b = &s->records[slot];
        s->team_load[slot_team(s, slot)]++;
        if (b->predicted == layer) {
            ls->predicted_used++;
            if (b->state == BUF_PENDING && promote(s, slot, err))
                return -1;
        } else {
            s->stats.records_hit++; /* in memory from an earlier token: a read avoided */
        }
        b->predicted = -1;
        return slot;
    }
    /* Every slot may be busy landing prefetched records: wait for one. */
    while ((slot = free_slot(s)) < 0)
        if (pump(s, 1, err))
            return -1;
    s->store.stats.bytes += s->m->record.bytes;
    return start_record(s, slot, o, 0, err) ? -1 : slot;
}

static int experts_begin(struct k3_expert_store *st, int layer, const int *experts, int n,
                         struct k3_err *err)
{
    struct k3_stream *s = of_store(st);
    if (n > st->capacity)
        return k3_errf(err, "expert batch of %d exceeds the store's %d buffers", n, st->capacity);
    unpin_all(s, layer);
    s->layer = layer;
    s->batch = experts;
    s->batch_n = n;
    s->delivered = 0;
    s->layer_stats[layer].records += (uint64_t)n;
    clear_team_load(s);
    for (int i = 0; i < n; i++) {
        int slot = take(s, layer, k3_model_record_object(s->m, layer, experts[i]), err);
        if (slot < 0)
            return -1;
        s->batch_slot[i] = slot;
        s->batch_done[i] = false;
        s->records[slot].pins++;
        s->records[slot].last_use = ++s->use_clock;
        buffer_check(&s->records[slot]);
    }
    /* Prefetched for this layer and not asked for: the prediction missed. */
    for (int i = 0; i < s->n_records; i++)
        if (s->records[i].predicted == layer)
            abandon(s, i, &s->layer_stats[layer]);
    return 0;
}

static int experts_prefetch(struct k3_expert_store *st, int layer, const int *experts, int n,
                            struct k3_err *err)
{
    struct k3_stream *s = of_store(st);
    clear_team_load(s);
    for (int i = 0; i < n; i++) {
        uint64_t o = k3_model_record_object(s->m, layer, experts[i]);
        if (slot_holding(s, o) >= 0 || !s->p->objects[o].n_pieces)
            continue; /* in memory or landing already, or another rank's to read */
        int slot = free_slot(s);
        if (slot < 0)
            break;
        if (start_record(s, slot, o, SPECULATIVE, err))
            return -1;
        s->records[slot].predicted = layer;
        s->records[slot].last_use = ++s->use_clock;
        s->layer_stats[layer].predicted++;
    }
    return 0;
}

/* Checks every record of the batch that has landed, together. */
static int verify_landed(struct k3_stream *s, struct k3_err *err)
{
    struct buffer *landed_now[K3_MAX_TOPK];
    int n = 0;
    for (int i = 0; i < s->batch_n; i++) {
        struct buffer *b = &s->records[s->batch_slot[i]];
        if (!s->batch_done[i] && b->state == BUF_LANDED)
            landed_now[n++] = b;
    }
    return n ? verify(s, landed_now, n, err) : 0;
}

/* Hands out a ready record of the batch, whatever the order it was asked in; false if
 * none is ready. */
static bool deliver(struct k3_stream *s, double stall0, struct k3_landed *out)
{
    for (int i = 0; i < s->batch_n; i++) {
        struct buffer *b = &s->records[s->batch_slot[i]];
        if (s->batch_done[i] || b->state != BUF_READY)
            continue;
        s->batch_done[i] = true;
        s->delivered++;
        *out = (struct k3_landed){.index = i, .record = b->base,
                                  .team = slot_team(s, s->batch_slot[i])};
        const struct k3_record_layout *r = &s->m->record;
        for (int p = K3_W1_SCALE; p < K3_EXPERT_PARTS; p += 2)
            s->store.stats.nan_scale_groups += k3_mxfp4_count_nan_scales(b->base + r->off[p], r->len[p]);
        s->store.stats.records++;
        s->store.stats.read_seconds += s->stats.stall_seconds - stall0;
        return true;
    }
    return false;
}

/* The no-overlap baseline (--sync): reads the next record of the batch now and waits;
 * when every read is issued (a re-read from a replica is landing), waits for one. */
static int read_next_sync(struct k3_stream *s, struct k3_err *err)
{
    for (int i = 0; i < s->batch_n; i++) {
        struct buffer *b = &s->records[s->batch_slot[i]];
        if (s->batch_done[i] || b->state != BUF_PENDING || b->inflight)
            continue;
        return read_pieces(s, b, 0, b->count, 0, err) || wait_ready(s, b, err) ? -1 : 0;
    }
    return pump(s, 1, err);
}

static int experts_next(struct k3_expert_store *st, bool wait, struct k3_landed *out,
                        struct k3_err *err)
{
    struct k3_stream *s = of_store(st);
    double stall0 = s->stats.stall_seconds;
    if (s->delivered >= s->batch_n)
        return k3_errf(err, "expert store: next() past the end of the batch");
    for (bool reaped = false;; reaped = true) {
        if (verify_landed(s, err))
            return -1;
        if (deliver(s, stall0, out))
            return 0;
        if (!wait && reaped)
            return 1;
        int rc = !wait ? pump(s, 0, err) : s->o.sync ? read_next_sync(s, err) : pump(s, 1, err);
        if (rc)
            return -1;
    }
}

static void experts_close(struct k3_expert_store *st) { (void)st; /* owned by the stream */ }

const struct k3_expert_store_ops stream_store_ops = {
    .name = "stream",
    .begin = experts_begin,
    .next = experts_next,
    .prefetch = experts_prefetch,
    .close = experts_close,
};
