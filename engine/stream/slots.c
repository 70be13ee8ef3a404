/* Which record slot a read goes to (cache.c's slot_for), and the counts and indexes that
 * make the choice cost no scan of every slot.  A free slot first, the first in slot order
 * (under --cache-fill ahead not the cache's fresh memory, unless nothing else will do).
 * Else the held record that gives way first, by these fields in order,
 * the lesser first: prefetched and not yet asked for; used by the current batch; its
 * layer's standing (the reading layer's own once that layer holds its share of the slots,
 * then another layer's holding more than its share, then the rest); the policy's worth
 * (policy.h: keep, then its order, then the last use).  Never a pinned slot or one a read
 * lands in.
 *
 * Every held record that is neither prefetched nor used by the current batch is in its
 * layer and team's heap (held.h), by the policy's order, which within a layer sorts as
 * its worth does: the reading layer's least is one heap's top, another layer's standing
 * is its count, so a miss looks at a top per layer and team, not at every slot (about
 * 0.2 ms a miss at 53,760 slots when it did; bench/cache-slots.sh).  When no such record
 * is held (a cache hardly larger than a layer's batch), every slot is ranked: the
 * reference, which `check_cache` (tests) also compares every choice with. */
#include <assert.h>
#include <string.h>

#include "engine/stream/stream_internal.h"

/* ---- the counts and indexes, kept as slots change hands ---- */

static bool held(const struct buffer *b)
{
    return b->object >= 0 && b->state != BUF_ABANDONED;
}

static struct held_heap *heap_of(struct k3_stream *s, int layer, int team)
{
    return &s->experts.held.heaps[layer * s->experts.n_teams + team];
}

static struct held_entry entry_of(const struct k3_stream *s, int i)
{
    const struct buffer *b = &s->experts.records[i];
    uint32_t key = policy_key(s, b->object);
    const struct k3_cache_policy *policy = &s->experts.policy;
    return (struct held_entry){.order = policy->ops->order(policy, key, b->last_use),
                               .last_use = b->last_use, .key = key, .slot = i};
}

/* Empties the heap of a layer and team and pushes its slots' current entries again (the
 * stale ones had piled up). */
static void rebuild(struct k3_stream *s, struct held_heap *h, int layer, int team)
{
    h->n = 0;
    for (int i = team; i < s->experts.n_records; i += s->experts.n_teams)
        if (s->experts.slot_layer[i] == layer && held(&s->experts.records[i]))
            held_push(h, entry_of(s, i)); /* fewer than before: no growth */
}

void slot_claim(struct k3_stream *s, int slot, uint64_t o)
{
    struct buffer *b = &s->experts.records[slot];
    if (held(b))
        s->experts.layer_held[s->experts.slot_layer[slot]]--;
    buffer_claim(b, (int64_t)o, 0, s->p->objects[o].n_pieces);
    held_set_free(&s->experts.held, slot, false);
    s->experts.slot_hint[policy_key(s, (int64_t)o)] = slot;
    s->experts.slot_layer[slot] = moe_layer_of(s, (int64_t)o);
    s->experts.layer_held[s->experts.slot_layer[slot]]++;
}

void slot_release(struct k3_stream *s, int slot)
{
    struct buffer *b = &s->experts.records[slot];
    if (held(b))
        s->experts.layer_held[s->experts.slot_layer[slot]]--;
    buffer_release(b);
    held_set_free(&s->experts.held, slot, true);
}

void slot_abandon(struct k3_stream *s, int slot)
{
    s->experts.layer_held[s->experts.slot_layer[slot]]--;
    buffer_set(&s->experts.records[slot], BUF_ABANDONED);
}

void cache_slot_released(struct k3_stream *s, int slot)
{
    held_set_free(&s->experts.held, slot, true);
}

void cache_reset(struct k3_stream *s)
{
    struct stream_experts *x = &s->experts;
    memset(x->layer_held, 0, sizeof *x->layer_held * (size_t)x->policy.layers);
    held_clear(&s->experts.held);
}

int slot_used(struct k3_stream *s, int slot, struct k3_err *err)
{
    int layer = s->experts.slot_layer[slot], team = slot_team(s, slot);
    struct held_heap *h = heap_of(s, layer, team);
    if (held_heap_full(h, s->experts.layer_held[layer])) {
        rebuild(s, h, layer, team); /* slot's entry with the others */
        return 0;
    }
    if (held_push(h, entry_of(s, slot)))
        return k3_errf(err, "out of memory for the cache's index (%d entries)", h->n);
    return 0;
}

/* ---- the order in which held records give way ---- */

/* A layer's standing when another slot is wanted (the header's third field). */
enum share_rank {
    READER_FULL,  /* the reading layer's, which holds its share: it gives way to itself */
    OVER_SHARE,   /* another layer's, which holds more than its share */
    WITHIN_SHARE, /* another layer's, within its share */
};

/* The slots left over from equal shares stay with the layers that took them: a layer
 * holding its share evicts its own before another's surplus, so the policy never weighs
 * one layer's records against another's (lfru's worth is per layer, and a shared
 * surplus let it act as one pool again). */
static enum share_rank standing(const struct k3_stream *s, int own, int layer)
{
    int share = s->experts.n_records / s->experts.policy.layers, n = s->experts.layer_held[own];
    return own == layer && n >= share ? READER_FULL : n > share ? OVER_SHARE : WITHIN_SHARE;
}

struct victim_rank {
    bool predicted;    /* prefetched, not yet asked for */
    bool this_batch;   /* used by the current batch */
    enum share_rank share;
    double keep;       /* the policy's worth now */
    double order;      /* and its order */
    uint64_t last_use;
};

static struct victim_rank class_of(const struct k3_stream *s, int i, int layer)
{
    const struct buffer *b = &s->experts.records[i];
    return (struct victim_rank){
        .predicted = b->predicted >= 0,
        .this_batch = b->last_use > s->experts.batch_clock,
        .share = standing(s, s->experts.slot_layer[i], layer),
        .last_use = b->last_use,
    };
}

/* The policy's worth, the last fields of the rank: asked for only where the fields
 * before it tie, since it costs the most and most slots are out of the running before. */
static void weigh(const struct k3_stream *s, uint32_t key, struct victim_rank *r)
{
    r->keep = s->experts.policy.ops->keep(&s->experts.policy, key, r->last_use);
    r->order = s->experts.policy.ops->order(&s->experts.policy, key, r->last_use);
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
    if (a->keep != b->keep)
        return a->keep < b->keep;
    return a->order < b->order || (a->order == b->order && a->last_use < b->last_use);
}

/* Whether slot i may take a read now: reusable, on the team (team >= 0). */
static bool open_slot(const struct k3_stream *s, int i, int team)
{
    return reusable(&s->experts.records[i]) && (team < 0 || slot_team(s, i) == team);
}

/* The reference: every open slot holding a record ranked, the one that gives way first;
 * -1 if there is none. */
static int victim_scan(const struct k3_stream *s, int team, int layer)
{
    int victim = -1;
    struct victim_rank worst = {0};
    for (int i = 0; i < s->experts.n_records; i++) {
        const struct buffer *b = &s->experts.records[i];
        if (!open_slot(s, i, team) || b->object < 0)
            continue;
        struct victim_rank r = class_of(s, i, layer);
        int order = victim < 0 ? -1 : class_order(&r, &worst);
        if (order > 0)
            continue; /* stays longer than the victim so far, whatever its worth */
        weigh(s, policy_key(s, b->object), &r);
        if (order < 0 || worth_less(&r, &worst)) {
            victim = i;
            worst = r;
        }
    }
    return victim;
}

/* ---- the same choice through the heaps ---- */

enum entry_use {
    STALE,    /* the slot's record, last use or order changed since: dropped */
    WAITS,    /* current, but the slot may not give way now: set aside, put back */
    GIVES_WAY,
};

static enum entry_use use_of(const struct k3_stream *s, const struct held_entry *e)
{
    const struct buffer *b = &s->experts.records[e->slot];
    if (!held(b) || policy_key(s, b->object) != e->key || b->last_use != e->last_use ||
        s->experts.policy.ops->order(&s->experts.policy, e->key, b->last_use) != e->order)
        return STALE;
    bool unasked = b->predicted < 0 && b->last_use <= s->experts.batch_clock;
    return reusable(b) && unasked ? GIVES_WAY : WAITS;
}

/* The first entry of h that may give way now, or NULL; what waits is set aside. */
static const struct held_entry *heap_best(struct k3_stream *s, struct held_heap *h, int *aside)
{
    for (const struct held_entry *e; (e = held_top(h)); held_pop(h)) {
        enum entry_use u = use_of(s, e);
        if (u == GIVES_WAY)
            return e;
        if (u == WAITS)
            s->experts.held_aside[(*aside)++] = *e;
    }
    return NULL;
}

/* Layer l's record that gives way first on the team (team < 0: any team's), or NULL. */
static const struct held_entry *layer_best(struct k3_stream *s, int l, int team, int *aside)
{
    const struct held_entry *best = NULL;
    for (int t = team < 0 ? 0 : team; t < (team < 0 ? s->experts.n_teams : team + 1); t++) {
        const struct held_entry *e = heap_best(s, heap_of(s, l, t), aside);
        if (e && (!best || held_before(e, best)))
            best = e;
    }
    return best;
}

/* The slot the heaps give: the first of the lowest standing, among the records neither
 * prefetched nor used by this batch; -1 when there is none. */
static int victim_of_heaps(struct k3_stream *s, int team, int layer)
{
    int aside = 0, victim = -1;
    const struct held_entry *own = layer_best(s, layer, team, &aside);
    if (own && standing(s, layer, layer) == READER_FULL)
        victim = own->slot;
    for (enum share_rank rank = OVER_SHARE; victim < 0 && rank <= WITHIN_SHARE; rank++) {
        struct victim_rank worst = {0};
        for (int l = 0; l < s->experts.policy.layers; l++) {
            if (standing(s, l, layer) != rank)
                continue;
            const struct held_entry *e = l == layer ? own : layer_best(s, l, team, &aside);
            if (!e)
                continue;
            struct victim_rank r = {.last_use = e->last_use};
            weigh(s, e->key, &r);
            if (victim < 0 || worth_less(&r, &worst)) {
                victim = e->slot;
                worst = r;
            }
        }
    }
    for (int k = 0; k < aside; k++) { /* back where they came from: no growth */
        const struct held_entry *e = &s->experts.held_aside[k];
        held_push(heap_of(s, s->experts.slot_layer[e->slot], slot_team(s, e->slot)), *e);
    }
    return victim;
}

/* check_cache: the counts and the free bits against the slots. */
static void check_index(const struct k3_stream *s)
{
    for (int l = 0, n; l < s->experts.policy.layers; l++) {
        n = 0;
        for (int i = 0; i < s->experts.n_records; i++)
            n += held(&s->experts.records[i]) && s->experts.slot_layer[i] == l;
        assert(n == s->experts.layer_held[l]);
    }
    for (int i = 0; i < s->experts.n_records; i++)
        assert(held_is_free(&s->experts.held, i) == (s->experts.records[i].object < 0));
}

/* Whether slot i, free, is the cache's fresh memory, that a read would fault in on its
 * way: under --cache-fill ahead a read takes it only when no other slot will do.  The
 * first inflight_records slots are the reads' own buffers, the only ones without a
 * cache, and always used. */
static bool fresh(const struct k3_stream *s, int i)
{
    return s->o.cache_fill == K3_CACHE_FILL_AHEAD && i >= s->in.inflight_records &&
           !k3io_area_present(s->reads.r, s->experts.records[i].base, s->experts.record_stride);
}

/* A slot to read a record of MoE layer `layer` into: the first free one (not fresh
 * memory unless fresh_ok), else the one that gives way first; -1 if there is none.
 * team >= 0: only that team's slots. */
static int slot_of(struct k3_stream *s, int team, int layer, bool fresh_ok)
{
    const struct held_index *held = &s->experts.held;
    for (int i = held_next_free(held, 0); i >= 0; i = held_next_free(held, i + 1))
        if ((team < 0 || slot_team(s, i) == team) && (fresh_ok || !fresh(s, i)))
            return i;
    int victim = victim_of_heaps(s, team, layer);
    if (s->o.check_cache) {
        check_index(s);
        assert(victim < 0 || victim == victim_scan(s, team, layer));
    }
    return victim >= 0 ? victim : victim_scan(s, team, layer);
}

int slot_for(struct k3_stream *s, uint64_t o, bool fresh_ok)
{
    int team = 0, layer = moe_layer_of(s, (int64_t)o);
    for (int i = 1; i < s->experts.n_teams; i++)
        if (s->experts.team_load[i] < s->experts.team_load[team])
            team = i;
    int slot = slot_of(s, s->experts.n_teams > 1 ? team : -1, layer, false);
    if (slot < 0 && s->experts.n_teams > 1)
        slot = slot_of(s, -1, layer, false);
    if (slot < 0 && fresh_ok)
        slot = slot_of(s, -1, layer, true);
    if (slot >= 0)
        s->experts.team_load[slot_team(s, slot)]++;
    return slot;
}
