/* The stream's expert store (forward/expert_store.h): record slots kept as a cache.  begin() pins
 * the records of a layer's batch that are in slots already (a hit) and queues the rest, whose reads
 * stream through free slots, at most `capacity` in flight, each slot refilled as soon as done()
 * says its record is computed; prefetch() reads predicted records into free slots in the background
 * once the batch has no queue; next() hands back records as they land and check out.  A slot is
 * reused free first; then, in this order, one not prefetched and waiting, one not asked for by the
 * current batch, one of the reading layer once it holds its share of the slots (an equal share per
 * MoE layer), one of a layer holding more than its share, and among those the record the
 * replacement policy (policy.h: --cache-policy) values least; never while pinned or landing
 * (slots.c chooses, from indexes kept as slots change hands); each team's slots are taken in turn,
 * so a layer's experts spread over the teams.  The shares make the cache the per-layer caches that
 * bench/routesim, --hit-curve and plan judge: one pool shared freely lets the layers whose choices
 * churn most crowd out the rest, and hits less (bench/results/engine-choices.md).
 * With --cache-fill ahead a read lands only in memory the reader's low-priority thread has
 * faulted in (k3io_area_present), a prompt pass's and decode's alike, never faulting fresh memory
 * on its way unless nothing else lets the batch go on: on a VM that costs seconds a GB, several
 * times a token's reads.  The cache grows behind the reads at that thread's pace; until it has
 * memory a miss recycles a slot, as --no-cache does. */
#include <assert.h>
#include <string.h>

#include "engine/kernels/mxfp4.h"
#include "engine/stream/stream_internal.h"

static struct k3_stream *of_store(struct k3_expert_store *st)
{
    return (struct k3_stream *)((char *)st - offsetof(struct k3_stream, experts.store));
}

/* Where object o's record is (landed or still landing), or -1: the slot that last took
 * it (start_record notes it), if that slot still holds it.  Only one slot at a time holds
 * a record that is not abandoned: a record is read into a slot only when none holds it. */
static int slot_holding(const struct k3_stream *s, uint64_t o)
{
    const struct stream_experts *x = &s->experts;
    int i = x->slot_hint[policy_key(s, (int64_t)o)];
    return i >= 0 && x->records[i].object == (int64_t)o && x->records[i].state != BUF_ABANDONED
               ? i
               : -1;
}

static void clear_team_load(struct k3_stream *s)
{
    for (int i = 0; i < s->experts.n_teams; i++)
        s->experts.team_load[i] = 0;
}

/* ---- the batch: each entry's state, the counts, checked at every change ---- */

/* The batch's counts, and entry i's invariants. */
static void batch_check(const struct k3_stream *s, int i)
{
    const struct batch_entry *en = &s->experts.batch[i];
    assert(s->experts.batch_n <= s->m->cfg.n_experts && i >= 0 && i < s->experts.batch_n);
    assert(s->experts.delivered >= 0 && s->experts.delivered <= s->experts.batch_n);
    assert(s->experts.queued >= 0 && s->experts.queued <= s->experts.batch_n);
    assert(s->experts.reading >= 0 && s->experts.reading <= s->experts.store.capacity);
    if (en->state == ENTRY_QUEUED) {
        assert(en->slot < 0 && !en->read && i >= s->experts.queued);
        return;
    }
    assert(en->slot >= 0 && en->slot < s->experts.n_records);
    if (en->state == ENTRY_DONE)
        return; /* its slot may have taken another record since */
    /* its slot holds its record, pinned by it alone (a batch's records are distinct) */
    const struct buffer *b = &s->experts.records[en->slot];
    assert(b->object == (int64_t)en->object && b->pins == 1 && b->predicted < 0);
    assert(en->state == ENTRY_HELD || b->state == BUF_READY);
}

/* Every entry, and the counts they add up to. */
static void batch_check_all(const struct k3_stream *s)
{
    int delivered = 0, reading = 0;
    for (int i = 0; i < s->experts.batch_n; i++) {
        const struct batch_entry *en = &s->experts.batch[i];
        batch_check(s, i);
        delivered += en->state >= ENTRY_DELIVERED;
        reading += en->read && en->state == ENTRY_HELD;
    }
    assert(delivered == s->experts.delivered && reading == s->experts.reading);
}

/* Entry i moves on to state to, the next in order. */
static void entry_set(struct k3_stream *s, int i, enum entry_state to)
{
    assert(to == s->experts.batch[i].state + 1);
    s->experts.batch[i].state = to;
    batch_check(s, i);
}

/* Entry i's record is in slot (read for this batch, or a hit): held, and its slot pinned
 * until done() or the next begin(). */
static int hold(struct k3_stream *s, int i, int slot, bool read, struct k3_err *err)
{
    struct batch_entry *en = &s->experts.batch[i];
    struct buffer *b = &s->experts.records[slot];
    en->slot = slot;
    en->read = read;
    s->experts.reading += read;
    b->last_use = ++s->experts.use_clock;
    buffer_pin(b);
    entry_set(s, i, ENTRY_HELD);
    return slot_used(s, slot, err);
}

/* Slot takes object o's record: pending, its reads issued unless sync mode defers them
 * to next(). */
static int start_record(struct k3_stream *s, int slot, uint64_t o, uint32_t how,
                        struct k3_err *err)
{
    struct buffer *b = &s->experts.records[slot];
    slot_claim(s, slot, o);
    b->submitted = k3_trace_now(s->o.trace);
    s->stats.records_read++;
    return s->o.sync && !(how & SPECULATIVE) ? 0 : read_pieces(s, b, 0, b->count, how, err);
}

/* A prediction that was asked for: what of it still waits behind the foreground is read
 * now, as the other records of the batch are. */
static int promote(struct k3_stream *s, int slot, struct k3_err *err)
{
    struct buffer *b = &s->experts.records[slot];
    uint32_t n = drop_unstarted(s, slot);
    for (uint32_t i = 0; i < n; i++)
        if (read_pieces(s, b, s->reads.dropped[i], 1, 0, err))
            return -1;
    return 0;
}

/* A prediction nobody asked for: its unstarted reads are dropped; the bytes already read
 * or landing are the waste.  The slot is free at once, or once those land; when every
 * read had started it stays, as a record landing into the cache. */
static void abandon(struct k3_stream *s, int slot, struct k3_layer_stats *ls)
{
    struct buffer *b = &s->experts.records[slot];
    const struct k3_pack_object *x = &s->p->objects[b->object];
    uint32_t n = b->state == BUF_PENDING ? drop_unstarted(s, slot) : 0;
    uint64_t dropped = 0;
    for (uint32_t i = 0; i < n; i++)
        dropped += s->p->pieces[x->first_piece + s->reads.dropped[i]].bytes;
    ls->wasted_bytes += x->bytes - dropped;
    buffer_predict(b, -1);
    b->pending -= n;
    if (!n)
        buffer_check(b);
    else if (b->pending == 0)
        slot_release(s, slot);
    else
        slot_abandon(s, slot);
}

/* A new batch: the last one's records are let go, done() or not (experts.h: each stays
 * valid until done() or the next begin()); without a cache, so are the records it used
 * (what was prefetched for this layer, and what is still landing, stays). */
static void let_go(struct k3_stream *s, int layer)
{
    batch_check_all(s);
    for (int i = 0; i < s->experts.batch_n; i++)
        if (s->experts.batch[i].state == ENTRY_HELD || s->experts.batch[i].state == ENTRY_DELIVERED)
            buffer_unpin(&s->experts.records[s->experts.batch[i].slot]);
    s->experts.batch_n = s->experts.delivered = s->experts.queued = s->experts.reading = 0;
    for (int i = 0; i < s->experts.n_records; i++) {
        struct buffer *b = &s->experts.records[i];
        assert(b->pins == 0); /* only a batch entry pins a record slot */
        if (!s->o.cache && b->predicted != layer && (b->state == BUF_LANDED || b->state == BUF_READY))
            slot_release(s, i);
    }
}

/* Whether batch entry i's record is in a slot already (prefetched for this layer, or
 * cached from an earlier token): then held (pinned, so nothing evicts it before it is
 * computed).  -1 on error. */
static int take_held(struct k3_stream *s, int i, struct k3_err *err)
{
    struct batch_entry *en = &s->experts.batch[i];
    int slot = slot_holding(s, en->object);
    if (slot < 0)
        return 0;
    struct buffer *b = &s->experts.records[slot];
    struct k3_layer_stats *ls = &s->layer_stats[s->experts.layer];
    s->experts.team_load[slot_team(s, slot)]++;
    if (b->predicted == s->experts.layer) {
        ls->predicted_used++;
        if (b->state == BUF_PENDING && promote(s, slot, err))
            return -1;
    } else {
        s->stats.records_hit++; /* in memory from an earlier token: a read avoided */
        ls->hit++;
    }
    buffer_predict(b, -1);
    return hold(s, i, slot, false, err);
}

/* Starts the reads of the batch's queued entries, in order, while fewer than the store's
 * depth are in flight and a slot is free: the union streams through the slots as one
 * queue, each slot refilled as soon as its record is done (experts_done). */
static int start_queued(struct k3_stream *s, struct k3_err *err)
{
    struct stream_experts *x = &s->experts;
    while (x->queued < x->batch_n && x->reading < x->store.capacity) {
        struct batch_entry *en = &s->experts.batch[s->experts.queued];
        if (en->state != ENTRY_QUEUED) { /* held since begin */
            s->experts.queued++;
            continue;
        }
        /* Fresh memory only when no read of the batch is in flight or waiting to be
         * handed out: otherwise a slot comes back as soon as one is computed. */
        int slot = slot_for(s, en->object, s->experts.reading == 0);
        if (slot < 0)
            return 0;
        s->experts.store.stats.bytes += s->m->record.bytes;
        if (start_record(s, slot, en->object, 0, err))
            return -1;
        s->layer_stats[s->experts.layer].read++;
        if (hold(s, s->experts.queued++, slot, true, err))
            return -1;
    }
    return 0;
}

/* The reads begin(), next(), done() and prefetch() start go to the drives together, in
 * one system call (k3io_plug): a layer's records as soon as routing names them. */
static int submitted(struct k3_stream *s, int rc, struct k3_err *err)
{
    int e = k3io_unplug(s->reads.r);
    if (!rc && e)
        return k3_errf(err, "submitting reads: %s", strerror(-e));
    return rc;
}

static int begin(struct k3_stream *s, int layer, const int *experts, int n, struct k3_err *err)
{
    if (n > s->m->cfg.n_experts)
        return k3_errf(err, "expert batch of %d exceeds a layer's %d experts", n,
                       s->m->cfg.n_experts);
    let_go(s, layer);
    s->experts.batch_clock = s->experts.use_clock;
    s->experts.layer = layer;
    s->layer_stats[layer].records += (uint64_t)n;
    s->stats.records_asked += (uint64_t)n;
    clear_team_load(s);
    s->experts.policy.ops->batch(&s->experts.policy, s->m->moe_index[layer]);
    for (int i = 0; i < n; i++)
        s->experts.policy.ops->asked(&s->experts.policy,
                             policy_key(s, (int64_t)k3_model_record_object(s->m, layer, experts[i])));
    for (int i = 0; i < n; i++) {
        uint64_t o = k3_model_record_object(s->m, layer, experts[i]);
        if (k3_packed_holds(s->p, o, err)) /* another rank's expert: never read garbage */
            return -1;
        s->experts.batch[i] = (struct batch_entry){.object = o, .slot = -1, .state = ENTRY_QUEUED};
        s->experts.batch_n = i + 1; /* the batch so far, whole at every step */
        batch_check(s, i);
        if (take_held(s, i, err))
            return -1;
    }
    /* Prefetched for this layer and not asked for: the prediction missed. */
    for (int i = 0; i < s->experts.n_records; i++)
        if (s->experts.records[i].predicted == layer)
            abandon(s, i, &s->layer_stats[layer]);
    if (start_queued(s, err))
        return -1;
    batch_check_all(s);
    return 0;
}

static int start_queued_together(struct k3_stream *s, struct k3_err *err)
{
    k3io_plug(s->reads.r);
    return submitted(s, start_queued(s, err), err);
}

static int experts_begin(struct k3_expert_store *st, int layer, const int *experts, int n,
                         struct k3_err *err)
{
    struct k3_stream *s = of_store(st);
    k3io_plug(s->reads.r);
    return submitted(s, begin(s, layer, experts, n, err), err);
}

/* Whether the batch still has entries to read: prefetches wait for them. */
static bool batch_queued(const struct k3_stream *s)
{
    for (int i = s->experts.queued; i < s->experts.batch_n; i++)
        if (s->experts.batch[i].state == ENTRY_QUEUED)
            return true;
    return false;
}

static int prefetch(struct k3_stream *s, int layer, const int *experts, int n,
                    struct k3_err *err)
{
    if (batch_queued(s))
        return 0; /* the slots are this layer's first */
    clear_team_load(s);
    for (int i = 0; i < n; i++) {
        uint64_t o = k3_model_record_object(s->m, layer, experts[i]);
        if (slot_holding(s, o) >= 0 || !s->p->objects[o].n_pieces)
            continue; /* in memory or landing already, or another rank's to read */
        int slot = slot_for(s, o, false); /* in a pass, a guess never takes fresh memory */
        if (slot < 0)
            break;
        if (start_record(s, slot, o, SPECULATIVE, err))
            return -1;
        buffer_predict(&s->experts.records[slot], layer);
        s->experts.records[slot].last_use = ++s->experts.use_clock;
        if (slot_used(s, slot, err))
            return -1;
        s->layer_stats[layer].predicted++;
    }
    return 0;
}

static int experts_prefetch(struct k3_expert_store *st, int layer, const int *experts, int n,
                            struct k3_err *err)
{
    struct k3_stream *s = of_store(st);
    k3io_plug(s->reads.r);
    return submitted(s, prefetch(s, layer, experts, n, err), err);
}

/* Checks every record of the batch that has landed, together (in batches of what one
 * check takes). */
static int verify_landed(struct k3_stream *s, struct k3_err *err)
{
    struct buffer *landed_now[K3_MAX_TOPK];
    int n = 0;
    for (int i = 0; i < s->experts.batch_n; i++) {
        const struct batch_entry *en = &s->experts.batch[i];
        struct buffer *b = en->state == ENTRY_HELD ? &s->experts.records[en->slot] : NULL;
        if (!b || b->state != BUF_LANDED)
            continue;
        landed_now[n++] = b;
        if (n == K3_MAX_TOPK) {
            if (verify(s, landed_now, n, err))
                return -1;
            n = 0;
        }
    }
    return n ? verify(s, landed_now, n, err) : 0;
}

/* Hands out a ready record of the batch, whatever the order it was asked in; false if
 * none is ready. */
static bool deliver(struct k3_stream *s, double stall0, struct k3_landed *out)
{
    for (int i = 0; i < s->experts.batch_n; i++) {
        struct batch_entry *en = &s->experts.batch[i];
        struct buffer *b = en->state == ENTRY_HELD ? &s->experts.records[en->slot] : NULL;
        if (!b || b->state != BUF_READY)
            continue;
        s->experts.delivered++;
        s->experts.reading -= en->read;
        entry_set(s, i, ENTRY_DELIVERED);
        *out = (struct k3_landed){.index = i, .record = b->base, .team = slot_team(s, en->slot)};
        const struct k3_record_layout *r = &s->m->record;
        for (int p = K3_W1_SCALE; p < K3_EXPERT_PARTS; p += 2)
            s->experts.store.stats.nan_scale_groups +=
                k3_mxfp4_count_nan_scales(b->base + r->off[p], r->len[p]);
        s->experts.store.stats.records++;
        s->experts.store.stats.read_seconds += s->stats.stall_seconds - stall0;
        return true;
    }
    return false;
}

/* The no-overlap baseline (--sync): reads the next record of the batch now and waits;
 * when every read is issued (a re-read from a replica is landing), waits for one. */
static int read_next_sync(struct k3_stream *s, struct k3_err *err)
{
    for (int i = 0; i < s->experts.batch_n; i++) {
        const struct batch_entry *en = &s->experts.batch[i];
        struct buffer *b = en->state == ENTRY_HELD ? &s->experts.records[en->slot] : NULL;
        if (!b || b->state != BUF_PENDING || b->inflight)
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
    if (s->experts.delivered >= s->experts.batch_n)
        return k3_errf(err, "expert store: next() past the end of the batch");
    for (bool reaped = false;; reaped = true) {
        if (start_queued_together(s, err) || verify_landed(s, err))
            return -1;
        if (deliver(s, stall0, out))
            return 0;
        if (!wait && reaped)
            return 1;
        if (wait && s->experts.reading == 0 && s->reads.inflight == 0)
            return k3_errf(err, "expert store: every slot is held by records not yet done");
        int rc = !wait ? pump(s, 0, err) : s->o.sync ? read_next_sync(s, err) : pump(s, 1, err);
        if (rc)
            return -1;
    }
}

/* The caller is done with entry i's record: its slot may take the next queued read (the
 * record stays cached when there is a cache). */
static int experts_done(struct k3_expert_store *st, int i, struct k3_err *err)
{
    struct k3_stream *s = of_store(st);
    struct batch_entry *en = &s->experts.batch[i];
    assert(i >= 0 && i < s->experts.batch_n && en->state == ENTRY_DELIVERED);
    struct buffer *b = &s->experts.records[en->slot];
    buffer_unpin(b);
    entry_set(s, i, ENTRY_DONE);
    if (!b->pins && !s->o.cache && b->predicted < 0)
        slot_release(s, en->slot);
    return start_queued_together(s, err);
}

static void experts_close(struct k3_expert_store *st) { (void)st; /* owned by the stream */ }

const struct k3_expert_store_ops stream_store_ops = {
    .name = "stream",
    .begin = experts_begin,
    .next = experts_next,
    .done = experts_done,
    .prefetch = experts_prefetch,
    .close = experts_close,
};
