/* The stream's expert store (experts.h): record slots kept as a cache.  begin() pins the
 * records of a layer's batch that are in slots already (a hit) and queues the rest,
 * whose reads stream through free slots, at most `capacity` in flight, each slot
 * refilled as soon as done() says its record is computed; prefetch() reads predicted
 * records into free slots in the background once the batch has no queue; next() hands
 * back records as they land and check out.  A slot is reused free first; then, in this
 * order, one not prefetched and waiting, one not asked for by the current batch, one of
 * the reading layer once it holds its share of the slots (an equal share per MoE layer),
 * one of a layer holding more than its share, and among those the record the
 * replacement policy (policy.h: --cache-policy) values least; never while
 * pinned or landing; each team's slots are taken in turn, so a layer's experts spread
 * over the teams.  The shares make the cache the per-layer caches that bench/routesim,
 * --hit-curve and plan judge: one pool shared freely lets the layers whose choices
 * churn most crowd out the rest, and hits less (bench/results/engine-choices.md).
 * With --cache-fill ahead a prompt pass, whose records stream through once, caches them
 * only in memory the reader's low-priority thread has faulted in (k3io_area_present),
 * never faulting fresh memory on its reads' way unless nothing else lets the pass go on:
 * on a VM that costs seconds a GB, more than the pass's compute.  Decode grows the cache
 * as its reads reach fresh memory, where the cache pays for it token after token. */
#include <assert.h>
#include <string.h>

#include "engine/kernels/mxfp4.h"
#include "engine/stream/stream_internal.h"

static struct k3_stream *of_store(struct k3_expert_store *st)
{
    return (struct k3_stream *)((char *)st - offsetof(struct k3_stream, store));
}

/* Can slot b be refilled: no one holds it and nothing lands in it. */
static bool reusable(const struct buffer *b)
{
    return !b->pins && (b->state == BUF_FREE || b->state == BUF_LANDED || b->state == BUF_READY);
}

/* The policy's key of a record: its index among the experts of the MoE layers. */
static uint32_t policy_key(const struct k3_stream *s, int64_t object)
{
    return (uint32_t)((uint64_t)object - (uint64_t)k3_seg_count(&s->m->cfg));
}

/* Where object o's record is (landed or still landing), or -1: the slot that last took
 * it (start_record notes it), if that slot still holds it.  Only one slot at a time holds
 * a record that is not abandoned: a record is read into a slot only when none holds it. */
static int slot_holding(const struct k3_stream *s, uint64_t o)
{
    int i = s->slot_hint[policy_key(s, (int64_t)o)];
    return i >= 0 && s->records[i].object == (int64_t)o && s->records[i].state != BUF_ABANDONED
               ? i
               : -1;
}

/* The MoE layer (among the MoE layers) a record belongs to. */
static int moe_layer_of(const struct k3_stream *s, int64_t object)
{
    return (int)(policy_key(s, object) / (uint32_t)s->policy.experts);
}

/* The record slots each MoE layer's records hold (landed, landing or cached). */
static void count_held(struct k3_stream *s)
{
    memset(s->layer_held, 0, sizeof *s->layer_held * (size_t)s->policy.layers);
    for (int i = 0; i < s->n_records; i++)
        if (s->records[i].object >= 0 && s->records[i].state != BUF_ABANDONED)
            s->layer_held[s->slot_layer[i]]++;
}

/* What decides whether a reusable slot gives way before another: the fields in order,
 * the lesser first (see the header). */
enum share_rank {
    READER_FULL,  /* the reading layer's, which holds its share: it gives way to itself */
    OVER_SHARE,   /* another layer's, which holds more than its share */
    WITHIN_SHARE, /* another layer's, within its share */
};

struct victim_rank {
    bool predicted;    /* prefetched, not yet asked for */
    bool this_batch;   /* asked for by the current batch */
    enum share_rank share;
    double keep;       /* the policy's worth */
    uint64_t last_use;
};

/* The slots left over from equal shares stay with the layers that took them: a layer
 * holding its share evicts its own before another's surplus, so the policy never weighs
 * one layer's records against another's (lfru's worth is per layer, and a shared
 * surplus let it act as one pool again). */
static struct victim_rank class_of(const struct k3_stream *s, int i, int layer)
{
    const struct buffer *b = &s->records[i];
    int own = s->slot_layer[i];
    int share = s->n_records / s->policy.layers, held = s->layer_held[own];
    return (struct victim_rank){
        .predicted = b->predicted >= 0,
        .this_batch = b->last_use > s->batch_clock,
        .share = own == layer && held >= share ? READER_FULL
                 : held > share                ? OVER_SHARE
                                               : WITHIN_SHARE,
        .last_use = b->last_use,
    };
}

/* The policy's worth, the last field of the rank: asked for only where the fields before
 * it tie, since it costs the most and most slots are out of the running before it. */
static void weigh(const struct k3_stream *s, const struct buffer *b, struct victim_rank *r)
{
    r->keep = s->policy.ops->keep(&s->policy, policy_key(s, b->object), b->last_use);
}

/* By the fields before the worth: < 0 when a gives way first, > 0 when b does, 0 a tie. */
static int class_order(const struct victim_rank *a, const struct victim_rank *b)
{
    if (a->predicted != b->predicted)
        return a->predicted ? 1 : -1;
    if (a->this_batch != b->this_batch)
        return a->this_batch ? 1 : -1;
    return (int)a->share - (int)b->share;
}

static bool worth_less(const struct victim_rank *a, const struct victim_rank *b)
{
    return a->keep < b->keep || (a->keep == b->keep && a->last_use < b->last_use);
}

/* Whether slot i, free, is the cache's fresh memory, that a read would fault in on its
 * way: --cache-fill ahead leaves it to decode while another slot will do for a prompt
 * pass.  The first inflight_records slots are the reads' own buffers, the only ones
 * without a cache, and always used. */
static bool fresh(const struct k3_stream *s, int i)
{
    return s->o.cache_fill == K3_CACHE_FILL_AHEAD && s->store.pass &&
           i >= s->in.inflight_records &&
           !k3io_area_present(s->r, s->records[i].base, s->record_stride);
}

/* Whether slot i may take a read now: reusable, on the team (team >= 0). */
static bool open_slot(const struct k3_stream *s, int i, int team)
{
    return reusable(&s->records[i]) && (team < 0 || slot_team(s, i) == team);
}

/* A slot to read a record of MoE layer `layer` into: the first free one (not fresh
 * memory unless fresh_ok), else the one that gives way first (the header's order;
 * layer_held counted, unless *counted already); -1 if there is none.  team >= 0: only that
 * team's slots.  The free ones are looked for first, on their own: while the cache fills,
 * ranking every held slot before the first free one cost most of a token's time at 53,760
 * slots (bench/cache-slots.sh). */
static int free_slot_of(struct k3_stream *s, int team, int layer, bool fresh_ok, bool *counted)
{
    for (int i = 0; i < s->n_records; i++)
        if (open_slot(s, i, team) && s->records[i].object < 0 && (fresh_ok || !fresh(s, i)))
            return i;
    if (!*counted) {
        count_held(s);
        *counted = true;
    }
    int victim = -1;
    struct victim_rank worst = {0};
    for (int i = 0; i < s->n_records; i++) {
        const struct buffer *b = &s->records[i];
        if (!open_slot(s, i, team) || b->object < 0)
            continue;
        struct victim_rank r = class_of(s, i, layer);
        int order = victim < 0 ? -1 : class_order(&r, &worst);
        if (order > 0)
            continue; /* stays longer than the victim so far, whatever its worth */
        weigh(s, b, &r);
        if (order < 0 || worth_less(&r, &worst)) {
            victim = i;
            worst = r;
        }
    }
    return victim;
}

/* A free slot on the team that has taken the fewest since team_load was cleared, so
 * that each team gets its share of a layer's experts; any team's when that one has none;
 * fresh memory only when no other slot will do and fresh_ok. */
static int free_slot(struct k3_stream *s, uint64_t o, bool fresh_ok)
{
    int team = 0, layer = moe_layer_of(s, (int64_t)o);
    for (int i = 1; i < s->n_teams; i++)
        if (s->team_load[i] < s->team_load[team])
            team = i;
    bool counted = false;
    int slot = free_slot_of(s, s->n_teams > 1 ? team : -1, layer, false, &counted);
    if (slot < 0 && s->n_teams > 1)
        slot = free_slot_of(s, -1, layer, false, &counted);
    if (slot < 0 && fresh_ok)
        slot = free_slot_of(s, -1, layer, true, &counted);
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
    s->slot_hint[policy_key(s, (int64_t)o)] = slot;
    s->slot_layer[slot] = moe_layer_of(s, (int64_t)o);
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

/* Whether batch entry i's record is in a slot already (prefetched for this layer, or
 * cached from an earlier token): 1, its slot noted (the caller pins it, so nothing evicts
 * it before it is computed); 0 when it is not there; -1 on error. */
static int take_held(struct k3_stream *s, int i, struct k3_err *err)
{
    struct batch_entry *en = &s->batch[i];
    int slot = slot_holding(s, en->object);
    if (slot < 0)
        return 0;
    struct buffer *b = &s->records[slot];
    struct k3_layer_stats *ls = &s->layer_stats[s->layer];
    s->team_load[slot_team(s, slot)]++;
    if (b->predicted == s->layer) {
        ls->predicted_used++;
        if (b->state == BUF_PENDING && promote(s, slot, err))
            return -1;
    } else {
        s->stats.records_hit++; /* in memory from an earlier token: a read avoided */
        ls->hit++;
    }
    b->predicted = -1;
    en->slot = slot;
    return 1;
}

/* Pins entry i's slot for the batch. */
static void pin(struct k3_stream *s, int i)
{
    struct buffer *b = &s->records[s->batch[i].slot];
    b->pins++;
    b->last_use = ++s->use_clock;
    buffer_check(b);
}

/* Starts the reads of the batch's queued entries, in order, while fewer than the store's
 * depth are in flight and a slot is free: the union streams through the slots as one
 * queue, each slot refilled as soon as its record is done (experts_done). */
static int start_queued(struct k3_stream *s, struct k3_err *err)
{
    while (s->queued < s->batch_n && s->reading < s->store.capacity) {
        struct batch_entry *en = &s->batch[s->queued];
        if (en->slot >= 0) { /* held since begin */
            s->queued++;
            continue;
        }
        /* Fresh memory only when no read of the batch is in flight or waiting to be
         * handed out: otherwise a slot comes back as soon as one is computed. */
        int slot = free_slot(s, en->object, s->reading == 0);
        if (slot < 0)
            return 0;
        s->store.stats.bytes += s->m->record.bytes;
        if (start_record(s, slot, en->object, 0, err))
            return -1;
        en->slot = slot;
        en->read = true;
        s->layer_stats[s->layer].read++;
        s->reading++;
        pin(s, s->queued++);
    }
    return 0;
}

/* The reads begin(), next(), done() and prefetch() start go to the drives together, in
 * one system call (k3io_plug): a layer's records as soon as routing names them. */
static int submitted(struct k3_stream *s, int rc, struct k3_err *err)
{
    int e = k3io_unplug(s->r);
    if (!rc && e)
        return k3_errf(err, "submitting reads: %s", strerror(-e));
    return rc;
}

static int begin(struct k3_stream *s, int layer, const int *experts, int n, struct k3_err *err)
{
    if (n > s->m->cfg.n_experts)
        return k3_errf(err, "expert batch of %d exceeds a layer's %d experts", n,
                       s->m->cfg.n_experts);
    unpin_all(s, layer);
    s->batch_clock = s->use_clock;
    s->layer = layer;
    s->batch_n = n;
    s->delivered = s->queued = s->reading = 0;
    s->layer_stats[layer].records += (uint64_t)n;
    s->stats.records_asked += (uint64_t)n;
    clear_team_load(s);
    s->policy.ops->batch(&s->policy, s->m->moe_index[layer]);
    for (int i = 0; i < n; i++)
        s->policy.ops->asked(&s->policy,
                             policy_key(s, (int64_t)k3_model_record_object(s->m, layer, experts[i])));
    for (int i = 0; i < n; i++) {
        uint64_t o = k3_model_record_object(s->m, layer, experts[i]);
        if (k3_packed_holds(s->p, o, err)) /* another rank's expert: never read garbage */
            return -1;
        s->batch[i] = (struct batch_entry){.object = o, .slot = -1};
        int held = take_held(s, i, err);
        if (held < 0)
            return -1;
        if (held)
            pin(s, i);
    }
    /* Prefetched for this layer and not asked for: the prediction missed. */
    for (int i = 0; i < s->n_records; i++)
        if (s->records[i].predicted == layer)
            abandon(s, i, &s->layer_stats[layer]);
    return start_queued(s, err);
}

static int start_queued_together(struct k3_stream *s, struct k3_err *err)
{
    k3io_plug(s->r);
    return submitted(s, start_queued(s, err), err);
}

static int experts_begin(struct k3_expert_store *st, int layer, const int *experts, int n,
                         struct k3_err *err)
{
    struct k3_stream *s = of_store(st);
    k3io_plug(s->r);
    return submitted(s, begin(s, layer, experts, n, err), err);
}

/* Whether the batch still has entries to read: prefetches wait for them. */
static bool batch_queued(const struct k3_stream *s)
{
    for (int i = s->queued; i < s->batch_n; i++)
        if (s->batch[i].slot < 0)
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
        int slot = free_slot(s, o, false); /* in a pass, a guess never takes fresh memory */
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

static int experts_prefetch(struct k3_expert_store *st, int layer, const int *experts, int n,
                            struct k3_err *err)
{
    struct k3_stream *s = of_store(st);
    k3io_plug(s->r);
    return submitted(s, prefetch(s, layer, experts, n, err), err);
}

/* Checks every record of the batch that has landed, together (in batches of what one
 * check takes). */
static int verify_landed(struct k3_stream *s, struct k3_err *err)
{
    struct buffer *landed_now[K3_MAX_TOPK];
    int n = 0;
    for (int i = 0; i < s->batch_n; i++) {
        const struct batch_entry *en = &s->batch[i];
        struct buffer *b = en->slot >= 0 ? &s->records[en->slot] : NULL;
        if (!b || en->delivered || b->state != BUF_LANDED)
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
    for (int i = 0; i < s->batch_n; i++) {
        struct batch_entry *en = &s->batch[i];
        struct buffer *b = en->slot >= 0 ? &s->records[en->slot] : NULL;
        if (!b || en->delivered || b->state != BUF_READY)
            continue;
        en->delivered = true;
        s->delivered++;
        s->reading -= en->read;
        *out = (struct k3_landed){.index = i, .record = b->base, .team = slot_team(s, en->slot)};
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
        const struct batch_entry *en = &s->batch[i];
        struct buffer *b = en->slot >= 0 ? &s->records[en->slot] : NULL;
        if (!b || en->delivered || b->state != BUF_PENDING || b->inflight)
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
        if (start_queued_together(s, err) || verify_landed(s, err))
            return -1;
        if (deliver(s, stall0, out))
            return 0;
        if (!wait && reaped)
            return 1;
        if (wait && s->reading == 0 && s->inflight == 0)
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
    struct batch_entry *en = &s->batch[i];
    assert(i >= 0 && i < s->batch_n && en->delivered && !en->done);
    struct buffer *b = &s->records[en->slot];
    en->done = true;
    b->pins--;
    if (!b->pins && !s->o.cache && b->predicted < 0)
        buffer_release(b);
    else
        buffer_check(b);
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
