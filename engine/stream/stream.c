#include "engine/stream/stream.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <xxhash.h>

#include "engine/kernels/kernels.h"
#include "engine/kernels/mxfp4.h"
#include "engine/pack/packed.h"
#include "engine/stream/placement.h"
#include "numa/bind.h"
#include "engine/base/rng.h"
#include "iouring/file.h"

/* What a completion belongs to.  A tag is: owner (8 bits), how the piece is being read
 * (8 bits: tries so far, and whether from its replica), the owner's index (16 bits), the
 * piece (32 bits). */
enum owner { OWN_SEGMENT = 1, OWN_SLOT = 2, OWN_RECORD = 3, OWN_EMBED = 4 };

#define FROM_REPLICA 0x80u
#define SPECULATIVE 0x40u /* a prefetch: read in the background, may be dropped unstarted */
#define TRIES_MASK 0x3fu
/* Reads of a piece that fail (-EIO, short) are tried this often at the same place before
 * its replica is read (or the error stands). */
#define SAME_PLACE_TRIES 3
#define MAX_OWNER_INDEX 0xffffu
/* A drive whose reads fail this many times in a row is taken as lost: with replicas,
 * its pieces are read from them from then on instead of being tried first. */
#define DRIVE_LOST_AFTER 8

static uint64_t make_tag(enum owner kind, uint32_t how, uint32_t index, uint32_t piece)
{
    return (uint64_t)kind << 56 | (uint64_t)(how & 0xff) << 48 | (uint64_t)(index & 0xffff) << 32 |
           piece;
}

static enum owner tag_owner(uint64_t tag) { return (enum owner)(tag >> 56); }
static uint32_t tag_how(uint64_t tag) { return (uint32_t)(tag >> 48) & 0xff; }
static uint32_t tag_index(uint64_t tag) { return (uint32_t)(tag >> 32) & 0xffff; }
static uint32_t tag_piece(uint64_t tag) { return (uint32_t)tag; }

/* A buffer that pieces [first_piece, first_piece + count) of an object are read into,
 * piece first_piece + k at base + k * piece_bytes. */
struct buffer {
    uint8_t *base;
    enum owner kind;    /* who owns it, and its index there: reads are tagged with them */
    uint32_t index;
    int64_t object;     /* -1: empty */
    uint32_t first_piece, count;
    uint32_t pending;   /* pieces not yet landed */
    bool landed;        /* every piece landed */
    bool ready;         /* ... and verified */
    double submitted;   /* trace time of the reads */
    bool replica_round; /* bad pieces were re-read from replicas: another failure stands */
    int pins;           /* record slots: in the current batch */
    int predicted;      /* record slots: prefetched for this layer, not yet asked for (-1) */
    bool abandoned;     /* record slots: a missed prediction's unstarted reads were dropped;
                         * empty once the started ones land */
    uint64_t last_use;  /* record slots: for LRU eviction */
};

/* A record slot back to empty, keeping its memory and its tag (kind, index). */
static void empty_record(struct buffer *b)
{
    *b = (struct buffer){.base = b->base, .kind = b->kind, .index = b->index, .object = -1,
                         .predicted = -1};
}

struct k3_stream {
    struct k3_model *m;
    const struct k3_packed *p;
    struct k3_stream_opts o;
    struct k3io_reader *r;
    int *fds;
    int *drive_team;              /* [n_drives] the team (and I/O thread) reading each drive */
    uint8_t *area;
    size_t area_bytes;
    struct k3_budget budget;
    struct k3_budget_input in;
    uint64_t *segment_bytes;      /* [n_segments] buffer bytes */
    int n_segments;
    struct buffer *resident;      /* [n_segments]: base NULL when streamed */
    struct buffer slots[2];       /* trunk stream slots */
    int bound_slot;               /* slot of the segment in use, or -1 */
    struct buffer embed;          /* embedding-row pieces */
    uint64_t embed_capacity;
    /* expert records */
    struct k3_expert_store store;
    struct buffer *records;       /* [n_records] */
    int n_records;
    uint64_t record_stride;
    uint64_t use_clock;
    int layer, batch_n, delivered;
    const int *batch;
    int *batch_slot;              /* [capacity] slot of each batch entry */
    bool *batch_done;             /* [capacity] handed out by next() */
    int n_teams;                  /* compute teams: record slot i is on team i mod n_teams */
    int *team_load;               /* [n_teams] slots a begin() or prefetch() took per team */
    struct k3_trunk_source trunk;
    struct k3_stream_stats stats;
    struct k3_layer_stats *layer_stats; /* [n_layers + 1] */
    int cur_layer;                /* the layer computing now (n_layers: the output) */
    int inflight;                 /* pieces in flight */
    uint32_t *dropped;            /* [record_stride / K3_PACK_ALIGN + 1] pieces k3io_drop took back */
    double last_tick;             /* when busy time was last accounted */
    struct k3_faults *faults;     /* NULL unless injecting */
    int *drive_failures;          /* [n_drives] failed reads in a row */
    bool *drive_lost;             /* [n_drives] failing: read its pieces' replicas instead */
    /* the first failure seen while processing completions */
    struct k3_err failure;
    bool failed;
};

/* The compute team whose node holds record slot i, and which computes what lands there
 * (numa/plan.h rule 6). */
static int slot_team(const struct k3_stream *s, int i) { return i % s->n_teams; }

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ---- reading ------------------------------------------------------------------------ */

/* Accounts the time since the last tick as busy (reads in flight) for the layer
 * computing now; call before the number in flight or the layer changes. */
static void tick(struct k3_stream *s)
{
    double t = now();
    if (s->inflight > 0)
        s->layer_stats[s->cur_layer].busy_seconds += t - s->last_tick;
    s->last_tick = t;
}

/* Where piece k (global index) is read from: its place, or its replica's. */
static void location(const struct k3_stream *s, uint64_t k, uint32_t how, uint32_t *drive,
                     uint64_t *offset)
{
    if ((how & FROM_REPLICA) && s->p->replicas) {
        *drive = s->p->replicas[k].drive;
        *offset = s->p->replicas[k].offset;
    } else {
        *drive = s->p->pieces[k].drive;
        *offset = s->p->pieces[k].offset;
    }
}

/* Reads pieces [first, first + n) of object o into base (piece j at
 * (j - first) * piece_bytes); how: tries and replica, as in the tag. */
static int submit_pieces(struct k3_stream *s, uint64_t o, uint32_t first, uint32_t n,
                         uint8_t *base, enum owner kind, uint32_t index, uint32_t how,
                         struct k3_err *err)
{
    const struct k3_pack_object *x = &s->p->objects[o];
    struct k3io_req reqs[64];
    int q = 0;
    tick(s);
    s->inflight += (int)n;
    k3_trace_counter(s->o.trace, "pieces in flight", s->inflight);
    for (uint32_t j = first; j < first + n; j++) {
        uint64_t k = x->first_piece + j, offset;
        uint32_t drive, piece_how = how;
        if (s->p->replicas && s->drive_lost[s->p->pieces[k].drive])
            piece_how |= FROM_REPLICA;
        location(s, k, piece_how, &drive, &offset);
        reqs[q++] = (struct k3io_req){
            .file = drive,
            .len = (uint32_t)k3_pack_round_up(s->p->pieces[k].bytes, K3_PACK_ALIGN),
            .offset = offset,
            .buf = base + (uint64_t)(j - first) * x->piece_bytes,
            .tag = make_tag(kind, piece_how, index, j),
        };
        s->stats.reads++;
        if (q == 64 || j + 1 == first + n) {
            int e = how & SPECULATIVE ? k3io_submit_background(s->r, reqs, q)
                                      : k3io_submit(s->r, reqs, q);
            if (e)
                return k3_errf(err, "submitting reads of object %llu: %s", (unsigned long long)o,
                               strerror(-e));
            q = 0;
        }
    }
    return 0;
}

static void fail(struct k3_stream *s, uint64_t k, uint32_t how, const struct k3_pack_object *x,
                 const char *why)
{
    if (s->failed)
        return;
    char what[64];
    k3_packed_describe(s->p, (uint64_t)(x - s->p->objects), what, sizeof what);
    uint32_t drive;
    uint64_t offset;
    location(s, k, how, &drive, &offset);
    k3_errf(&s->failure, "drive %s: reading %s (%u bytes at offset %llu%s): %s",
            s->p->drives[drive].path, what, s->p->pieces[k].bytes, (unsigned long long)offset,
            how & FROM_REPLICA ? ", the replica" : "", why);
    s->failed = true;
}

static struct buffer *owner_buffer(struct k3_stream *s, uint64_t tag)
{
    uint32_t index = tag_index(tag);
    switch (tag_owner(tag)) {
    case OWN_SEGMENT: return &s->resident[index];
    case OWN_SLOT: return &s->slots[index];
    case OWN_EMBED: return &s->embed;
    case OWN_RECORD: break;
    }
    return &s->records[index];
}

/* One landed piece: count it against its buffer (checksums wait until the buffer is
 * complete, so they can be checked in parallel).  A failed read is tried again at the
 * same place, then from the piece's replica, before the error stands. */
static void landed(struct k3_stream *s, const struct k3io_done *d)
{
    struct buffer *b = owner_buffer(s, d->tag);
    uint32_t j = tag_piece(d->tag), how = tag_how(d->tag);
    const struct k3_pack_object *x = &s->p->objects[b->object];
    uint64_t k = x->first_piece + j;
    uint32_t bytes = s->p->pieces[k].bytes;
    tick(s);
    s->inflight--;
    if (s->o.trace) {
        char what[64];
        uint32_t drive;
        uint64_t offset;
        location(s, k, how, &drive, &offset);
        k3_packed_describe(s->p, (uint64_t)(x - s->p->objects), what, sizeof what);
        k3_trace_read(s->o.trace, (int)drive, b->submitted, k3_trace_now(s->o.trace), bytes, what);
        k3_trace_counter(s->o.trace, "pieces in flight", s->inflight);
    }
    s->stats.bytes += d->res > 0 ? (uint64_t)d->res : 0;
    if (tag_owner(d->tag) != OWN_RECORD)
        s->stats.trunk_bytes += d->res > 0 ? (uint64_t)d->res : 0;
    uint32_t drive;
    uint64_t offset;
    location(s, k, how, &drive, &offset);
    if (d->res >= 0 && (uint32_t)d->res >= bytes) {
        s->drive_failures[drive] = 0;
    } else if (++s->drive_failures[drive] >= DRIVE_LOST_AFTER && s->p->replicas &&
               !s->drive_lost[drive]) {
        s->drive_lost[drive] = true;
        fprintf(stderr, "k3-uring: note: drive %s: %d reads failed in a row; reading its pieces "
                        "from their replicas\n", s->p->drives[drive].path, DRIVE_LOST_AFTER);
    }
    if ((d->res < 0 || (uint32_t)d->res < bytes) && !b->abandoned) {
        uint32_t tries = (how & TRIES_MASK) + 1, again = UINT32_MAX;
        if (s->drive_lost[drive] && !(how & FROM_REPLICA))
            tries = SAME_PLACE_TRIES;
        if (tries < SAME_PLACE_TRIES)
            again = (how & FROM_REPLICA) | tries;
        else if (!(how & FROM_REPLICA) && s->p->replicas)
            again = FROM_REPLICA;
        struct k3_err e;
        if (again != UINT32_MAX &&
            !submit_pieces(s, (uint64_t)b->object, j, 1,
                           b->base + (uint64_t)(j - b->first_piece) * x->piece_bytes,
                           tag_owner(d->tag), tag_index(d->tag), again, &e)) {
            s->stats.retries++;
            s->stats.replica_reads += (again & FROM_REPLICA) && !(how & FROM_REPLICA);
            return; /* still pending */
        }
        fail(s, k, how, x, d->res < 0 ? strerror(-d->res) : "short read (data file truncated?)");
    }
    if (--b->pending == 0) {
        if (b->abandoned)
            empty_record(b);
        else
            b->landed = true;
    }
}

/* Checks the pieces of every landed, unchecked buffer in bufs, in parallel batches
 * (XXH3 runs near memory speed on one core; spread over the compute threads it stays off
 * the critical path).  A bad piece is read again from its replica, once per fill of its
 * buffer, and the buffer lands again; otherwise the first bad piece in order is reported.
 * Buffers whose pieces all check out become ready. */
#define VERIFY_BATCH 256
static int verify(struct k3_stream *s, struct buffer **bufs, int n, struct k3_err *err)
{
    struct job {
        struct buffer *b;
        uint32_t k; /* piece index within the buffer */
        bool bad;
    } jobs[VERIFY_BATCH];
    double t0 = now();
    int bi = 0;
    uint32_t bk = 0; /* the next (buffer, piece) to queue */
    bool *any_bad = calloc((size_t)n, sizeof *any_bad);
    if (!any_bad)
        return k3_errf(err, "out of memory");
    while (bi < n) {
        int n_jobs = 0;
        for (; bi < n && n_jobs < VERIFY_BATCH; bi++, bk = 0) {
            struct buffer *b = bufs[bi];
            if (!b->landed || b->ready)
                continue;
            for (; bk < b->count && n_jobs < VERIFY_BATCH; bk++)
                jobs[n_jobs++] = (struct job){b, bk, false};
            if (bk < b->count)
                break; /* this buffer continues in the next batch */
        }
#pragma omp parallel for schedule(dynamic, 1)
        for (int i = 0; i < n_jobs; i++) {
            const struct buffer *b = jobs[i].b;
            const struct k3_pack_object *x = &s->p->objects[b->object];
            const struct k3_pack_piece *pc = &s->p->pieces[x->first_piece + b->first_piece + jobs[i].k];
            jobs[i].bad = XXH3_64bits(b->base + (uint64_t)jobs[i].k * x->piece_bytes, pc->bytes) !=
                          pc->xxh64;
        }
        for (int i = 0; i < n_jobs; i++) {
            if (!jobs[i].bad)
                continue;
            struct buffer *b = jobs[i].b;
            const struct k3_pack_object *x = &s->p->objects[b->object];
            uint32_t j = b->first_piece + jobs[i].k;
            uint64_t k = x->first_piece + j;
            for (int q = 0; q < n; q++)
                any_bad[q] |= bufs[q] == b;
            struct k3_err e;
            if (s->p->replicas && !b->replica_round &&
                !submit_pieces(s, (uint64_t)b->object, j, 1,
                               b->base + (uint64_t)jobs[i].k * x->piece_bytes, b->kind, b->index,
                               FROM_REPLICA, &e)) {
                b->pending++;
                s->stats.replica_reads++;
                continue;
            }
            fail(s, k, b->replica_round ? FROM_REPLICA : 0, x, "checksum mismatch");
        }
    }
    for (int q = 0; q < n; q++) {
        struct buffer *b = bufs[q];
        if (!b->landed || b->ready)
            continue;
        if (any_bad[q]) { /* its bad pieces are landing again, from replicas */
            b->landed = b->pending == 0;
            b->replica_round = true;
        } else {
            b->ready = true;
        }
    }
    free(any_bad);
    s->stats.verify_seconds += now() - t0;
    if (s->failed) {
        *err = s->failure;
        return -1;
    }
    return 0;
}

/* Reaps at least min completions (time counted as stall: compute is waiting). */
static int pump(struct k3_stream *s, int min, struct k3_err *err)
{
    struct k3io_done done[64];
    double t0 = now();
    int n = k3io_wait(s->r, done, 64, min);
    double dt = now() - t0;
    s->stats.stall_seconds += dt;
    s->layer_stats[s->cur_layer].stall_seconds += dt;
    if (n < 0)
        return k3_errf(err, "waiting for reads: %s", strerror(-n));
    for (int i = 0; i < n; i++)
        landed(s, &done[i]);
    if (s->failed) {
        *err = s->failure;
        return -1;
    }
    return 0;
}

/* Waits until b has landed and checked out; a bad piece re-read from its replica means
 * landing again. */
static int wait_ready(struct k3_stream *s, struct buffer *b, struct k3_err *err)
{
    while (!b->ready) {
        while (!b->landed)
            if (pump(s, 1, err))
                return -1;
        if (verify(s, &b, 1, err))
            return -1;
    }
    return 0;
}

/* Starts reading object o whole into buffer b. */
static int fill(struct k3_stream *s, struct buffer *b, uint64_t o, enum owner kind,
                uint32_t index, struct k3_err *err)
{
    b->object = (int64_t)o;
    b->first_piece = 0;
    b->count = b->pending = s->p->objects[o].n_pieces;
    b->landed = b->ready = false;
    b->submitted = k3_trace_now(s->o.trace);
    b->kind = kind;
    b->index = index;
    b->replica_round = false;
    return submit_pieces(s, o, 0, b->pending, b->base, kind, index, 0, err);
}

/* ---- the trunk ------------------------------------------------------------------------ */

/* The streamed segment after seg, in the order a token uses them (layers, then output,
 * then the next token's first layer); -1 when every layer segment is resident. */
static int next_streamed(const struct k3_stream *s, int seg)
{
    for (int k = 1; k < s->n_segments; k++) {
        int c = 1 + (seg - 1 + k) % (s->n_segments - 1);
        if (!s->resident[c].base)
            return c;
    }
    return -1;
}

/* Reuses a buffer: reads still landing in it must finish first. */
static int drain(struct k3_stream *s, struct buffer *b, struct k3_err *err)
{
    return b->object >= 0 && !b->ready ? wait_ready(s, b, err) : 0;
}

static int trunk_segment(void *ctx, int seg, struct k3_err *err)
{
    struct k3_stream *s = ctx;
    tick(s);
    s->cur_layer = seg - 1; /* segment 1 + l is layer l; the output counts as layer L */
    if (s->resident[seg].base)
        return 0; /* bound at open */
    int slot = s->slots[0].object == seg ? 0 : s->slots[1].object == seg ? 1 : -1;
    if (slot < 0) {
        /* Not prefetched (the first use, or the output was skipped): the slot of the
         * segment just finished is free. */
        slot = s->bound_slot >= 0 ? s->bound_slot : 0;
        if (drain(s, &s->slots[slot], err) ||
            fill(s, &s->slots[slot], (uint64_t)seg, OWN_SLOT, (uint32_t)slot, err))
            return -1;
    }
    if (wait_ready(s, &s->slots[slot], err))
        return -1;
    k3_model_bind_segment(s->m, seg, s->slots[slot].base);
    s->bound_slot = slot;
    /* Read the next streamed segment into the other slot while this one computes. */
    int next = next_streamed(s, seg);
    struct buffer *other = &s->slots[1 - slot];
    if (s->o.sync || next < 0 || next == seg || other->object == next)
        return 0;
    if (drain(s, other, err) || fill(s, other, (uint64_t)next, OWN_SLOT, (uint32_t)(1 - slot), err))
        return -1;
    return 0;
}

static int trunk_embed(void *ctx, const int32_t *tokens, int T, float *out, struct k3_err *err)
{
    struct k3_stream *s = ctx;
    const struct k3_config *c = &s->m->cfg;
    uint64_t row = (uint64_t)c->hidden * 2;
    for (int t = 0; t < T; t++) {
        uint64_t at = (uint64_t)tokens[t] * row; /* the embedding is the segment's only tensor */
        const uint8_t *src;
        if (s->resident[0].base) {
            src = s->resident[0].base + at;
        } else {
            const struct k3_pack_object *x = &s->p->objects[0];
            uint32_t j0 = (uint32_t)(at / x->piece_bytes), j1 = (uint32_t)((at + row - 1) / x->piece_bytes);
            struct buffer *b = &s->embed;
            b->object = 0;
            b->first_piece = j0;
            b->count = b->pending = j1 - j0 + 1;
            b->landed = b->ready = false;
            b->submitted = k3_trace_now(s->o.trace);
            b->kind = OWN_EMBED;
            b->index = 0;
            b->replica_round = false;
            if (submit_pieces(s, 0, j0, j1 - j0 + 1, b->base, OWN_EMBED, 0, 0, err) ||
                wait_ready(s, b, err))
                return -1;
            src = b->base + (at - (uint64_t)j0 * x->piece_bytes);
        }
        const uint16_t *v = (const uint16_t *)src;
        for (int i = 0; i < c->hidden; i++)
            out[(size_t)t * c->hidden + i] = k3_bf16_to_f32(v[i]);
    }
    return 0;
}

/* ---- expert records ------------------------------------------------------------------- */

static struct k3_stream *of_store(struct k3_expert_store *st)
{
    return (struct k3_stream *)((char *)st - offsetof(struct k3_stream, store));
}

/* Where object o's record is (landed or still landing), or -1. */
static int slot_holding(const struct k3_stream *s, uint64_t o)
{
    for (int i = 0; i < s->n_records; i++)
        if (s->records[i].object == (int64_t)o && !s->records[i].abandoned)
            return i;
    return -1;
}

/* A slot to read into: empty first, else the least recently used one that is neither
 * in the current batch nor still landing; -1 if there is none.  team >= 0: only that
 * team's slots. */
static int free_slot_of(const struct k3_stream *s, int team)
{
    int victim = -1;
    for (int i = 0; i < s->n_records; i++) {
        const struct buffer *b = &s->records[i];
        if (b->pins || (b->object >= 0 && !b->landed) || (team >= 0 && slot_team(s, i) != team))
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

static void start_record(struct k3_stream *s, struct buffer *b, uint64_t o)
{
    b->object = (int64_t)o;
    b->first_piece = 0;
    b->count = b->pending = s->p->objects[o].n_pieces;
    b->landed = b->ready = false;
    b->submitted = k3_trace_now(s->o.trace);
    b->predicted = -1;
    b->replica_round = false;
    b->abandoned = false;
}

struct drop_match {
    struct k3_stream *s;
    uint32_t slot, n;
};

static bool drop_slot_piece(void *ctx, uint64_t tag)
{
    struct drop_match *dm = ctx;
    if (tag_owner(tag) != OWN_RECORD || tag_index(tag) != dm->slot)
        return false;
    dm->s->dropped[dm->n++] = tag_piece(tag);
    return true;
}

/* Takes back a prefetched record's reads that have not started: s->dropped[0..n) are
 * their pieces, which no longer count as pending or in flight. */
static uint32_t drop_unstarted(struct k3_stream *s, int slot)
{
    struct drop_match dm = {.s = s, .slot = (uint32_t)slot};
    k3io_drop(s->r, drop_slot_piece, &dm);
    s->records[slot].pending -= dm.n;
    s->inflight -= (int)dm.n;
    return dm.n;
}

/* A prediction that was asked for: what of it still waits behind the foreground is read
 * now, as the other records of the batch are. */
static int promote(struct k3_stream *s, int slot, struct k3_err *err)
{
    struct buffer *b = &s->records[slot];
    uint32_t n = drop_unstarted(s, slot);
    const struct k3_pack_object *x = &s->p->objects[b->object];
    for (uint32_t i = 0; i < n; i++) {
        uint32_t j = s->dropped[i];
        b->pending++;
        if (submit_pieces(s, (uint64_t)b->object, j, 1,
                          b->base + (uint64_t)(j - b->first_piece) * x->piece_bytes,
                          OWN_RECORD, (uint32_t)slot, 0, err))
            return -1;
    }
    return 0;
}

/* A prediction nobody asked for: its unstarted reads are dropped; the bytes already read
 * or landing are the waste.  The slot is free at once, or once those land. */
static void abandon(struct k3_stream *s, int slot, struct k3_layer_stats *ls)
{
    struct buffer *b = &s->records[slot];
    const struct k3_pack_object *x = &s->p->objects[b->object];
    uint32_t n = b->landed ? 0 : drop_unstarted(s, slot);
    uint64_t dropped = 0;
    for (uint32_t i = 0; i < n; i++)
        dropped += s->p->pieces[x->first_piece + s->dropped[i]].bytes;
    ls->wasted_bytes += x->bytes - dropped;
    b->predicted = -1;
    if (b->landed || !n)
        return;
    if (b->pending == 0)
        empty_record(b);
    else
        b->abandoned = true;
}

static int experts_begin(struct k3_expert_store *st, int layer, const int *experts, int n,
                         struct k3_err *err)
{
    struct k3_stream *s = of_store(st);
    if (n > st->capacity)
        return k3_errf(err, "expert batch of %d exceeds the store's %d buffers", n, st->capacity);
    struct k3_layer_stats *ls = &s->layer_stats[layer];
    for (int i = 0; i < s->n_records; i++) {
        struct buffer *b = &s->records[i];
        b->pins = 0;
        /* No cache: nothing is kept for later, except what was prefetched for this layer
         * and what is still landing. */
        if (!s->o.cache && b->predicted != layer && b->landed)
            b->object = -1;
    }
    s->layer = layer;
    s->batch = experts;
    s->batch_n = n;
    s->delivered = 0;
    ls->records += (uint64_t)n;
    clear_team_load(s);
    for (int i = 0; i < n; i++) {
        uint64_t o = k3_model_record_object(s->m, layer, experts[i]);
        int slot = slot_holding(s, o);
        if (slot >= 0) {
            struct buffer *b = &s->records[slot];
            s->team_load[slot_team(s, slot)]++;
            if (b->predicted == layer) {
                ls->predicted_used++;
                if (!b->landed && promote(s, slot, err))
                    return -1;
            } else {
                s->stats.records_hit++; /* in memory from an earlier token: a read avoided */
            }
            b->predicted = -1;
        } else {
            /* Every slot may be busy landing prefetched records: wait for one. */
            while ((slot = free_slot(s)) < 0)
                if (pump(s, 1, err))
                    return -1;
            start_record(s, &s->records[slot], o);
            s->stats.records_read++;
            st->stats.bytes += s->m->record.bytes;
            if (!s->o.sync && submit_pieces(s, o, 0, s->records[slot].count, s->records[slot].base,
                                            OWN_RECORD, (uint32_t)slot, 0, err))
                return -1;
        }
        s->batch_slot[i] = slot;
        s->batch_done[i] = false;
        s->records[slot].pins++;
        s->records[slot].last_use = ++s->use_clock;
    }
    /* Prefetched for this layer and not asked for: the prediction missed. */
    for (int i = 0; i < s->n_records; i++)
        if (s->records[i].predicted == layer)
            abandon(s, i, ls);
    return 0;
}

static int experts_prefetch(struct k3_expert_store *st, int layer, const int *experts, int n,
                            struct k3_err *err)
{
    struct k3_stream *s = of_store(st);
    clear_team_load(s);
    for (int i = 0; i < n; i++) {
        uint64_t o = k3_model_record_object(s->m, layer, experts[i]);
        if (slot_holding(s, o) >= 0)
            continue; /* in memory or landing already */
        int slot = free_slot(s);
        if (slot < 0)
            break;
        struct buffer *b = &s->records[slot];
        start_record(s, b, o);
        b->predicted = layer;
        b->last_use = ++s->use_clock;
        s->layer_stats[layer].predicted++;
        s->stats.records_read++;
        if (submit_pieces(s, o, 0, b->count, b->base, OWN_RECORD, (uint32_t)slot, SPECULATIVE, err))
            return -1;
    }
    return 0;
}

static int experts_next(struct k3_expert_store *st, bool wait, struct k3_landed *out,
                        struct k3_err *err)
{
    struct k3_stream *s = of_store(st);
    double stall0 = s->stats.stall_seconds;
    if (s->delivered >= s->batch_n)
        return k3_errf(err, "expert store: next() past the end of the batch");
    for (bool reaped = false;; reaped = true) {
        /* Check every record of the batch that has landed, together. */
        struct buffer *landed_now[K3_MAX_TOPK];
        int n_landed = 0;
        for (int i = 0; i < s->batch_n; i++) {
            struct buffer *b = &s->records[s->batch_slot[i]];
            if (!s->batch_done[i] && b->landed && !b->ready)
                landed_now[n_landed++] = b;
        }
        if (n_landed && verify(s, landed_now, n_landed, err))
            return -1;
        /* Any record of the batch that is ready, whatever the order it was asked in. */
        for (int i = 0; i < s->batch_n; i++) {
            struct buffer *b = &s->records[s->batch_slot[i]];
            if (s->batch_done[i] || !b->ready)
                continue;
            s->batch_done[i] = true;
            s->delivered++;
            *out = (struct k3_landed){.index = i, .record = b->base,
                                      .team = slot_team(s, s->batch_slot[i])};
            const struct k3_record_layout *r = &s->m->record;
            for (int p = K3_W1_SCALE; p < K3_EXPERT_PARTS; p += 2)
                st->stats.nan_scale_groups += k3_mxfp4_count_nan_scales(b->base + r->off[p], r->len[p]);
            st->stats.records++;
            st->stats.read_seconds += s->stats.stall_seconds - stall0;
            return 0;
        }
        if (!wait) {
            /* Take in what has completed, once, without blocking. */
            if (reaped)
                return 1;
            if (pump(s, 0, err))
                return -1;
            continue;
        }
        if (s->o.sync) {
            /* The baseline: read the next record now, wait for it, then compute. */
            for (int i = 0; i < s->batch_n; i++) {
                struct buffer *b = &s->records[s->batch_slot[i]];
                if (s->batch_done[i] || b->ready)
                    continue;
                if (submit_pieces(s, (uint64_t)b->object, 0, b->count, b->base, OWN_RECORD,
                                  (uint32_t)s->batch_slot[i], 0, err) ||
                    wait_ready(s, b, err))
                    return -1;
                break;
            }
            continue;
        }
        if (pump(s, 1, err))
            return -1;
    }
}

static void experts_close(struct k3_expert_store *st) { (void)st; /* owned by the stream */ }

static const struct k3_expert_store_ops stream_ops = {
    .name = "stream",
    .begin = experts_begin,
    .next = experts_next,
    .prefetch = experts_prefetch,
    .close = experts_close,
};

/* ---- fault injection -------------------------------------------------------------- */

/* The reader's hook: each completed chunk may be turned into a fault; a "corrupt" one
 * flips a byte of what landed, which the piece's checksum must then catch. */
static int32_t inject(void *ctx, const struct k3io_fault_at *at, int32_t res)
{
    struct k3_stream *s = ctx;
    bool flip;
    int32_t out = k3_faults_apply(s->faults, at->file, at->len, res, &flip);
    if (flip) {
        struct buffer *b = owner_buffer(s, at->tag);
        uint32_t j = tag_piece(at->tag), drive;
        uint64_t k = s->p->objects[b->object].first_piece + j, piece_at;
        location(s, k, tag_how(at->tag), &drive, &piece_at);
        uint8_t *dst = b->base + (uint64_t)(j - b->first_piece) * s->p->objects[b->object].piece_bytes +
                       (at->offset - piece_at);
        uint64_t where = at->offset ^ k; /* which byte: any, but the same for the same read */
        dst[k3_splitmix64(&where) % (uint64_t)res] ^= 0x5a;
    }
    return out;
}

/* ---- opening ----------------------------------------------------------------------------- */

/* The most records one begin() may ask for: a layer's experts (prefetched ones fill the
 * other slots). */
static int batch_capacity(const struct k3_stream *s)
{
    return s->in.inflight_records ? s->m->cfg.top_k : 0;
}

static int plan_budget(struct k3_stream *s, struct k3_err *err)
{
    const struct k3_packed *p = s->p;
    const struct k3_config *c = &s->m->cfg;
    s->n_segments = s->m->plan.layout.n_segments;
    s->segment_bytes = calloc((size_t)s->n_segments, sizeof *s->segment_bytes);
    if (!s->segment_bytes)
        return k3_errf(err, "out of memory");
    for (int i = 0; i < s->n_segments; i++)
        s->segment_bytes[i] = k3_packed_buffer_bytes(p, (uint64_t)i);
    uint64_t vectors = 0;
    for (int i = 0; i < s->m->plan.n_specs; i++)
        if (s->m->plan.specs[i].kind != K3_T_MATRIX) {
            uint64_t n = 1;
            for (int d = 0; d < s->m->plan.specs[i].ndim; d++)
                n *= (uint64_t)s->m->plan.specs[i].shape[d];
            vectors += 4 * n;
        }
    bool has_records = p->header.n_objects > p->header.n_trunk_objects;
    s->record_stride = has_records ? k3_packed_buffer_bytes(p, p->header.n_trunk_objects) : 0;
    /* An embedding row spans at most this many pieces. */
    uint64_t piece = p->objects[0].piece_bytes, row = 2 * (uint64_t)c->hidden;
    s->embed_capacity = ((row + piece - 1) / piece + 1) * piece;
    s->in = (struct k3_budget_input){
        .cfg = c,
        .ctx = s->o.ctx,
        .threads = s->o.threads,
        .teams = s->n_teams,
        .n_segments = s->n_segments,
        .segment_bytes = s->segment_bytes,
        .vector_bytes = vectors,
        .record_bytes = s->record_stride,
        .piece_bytes = s->embed_capacity / 2,
        .manifest_bytes = p->header.manifest_bytes,
        .logits_bytes = s->o.logits_bytes,
        .inflight_records = has_records ? c->top_k + s->o.prefetch_k : 0,
    };
    uint64_t ram = s->o.ram;
    if (ram == K3_RAM_TRUNK)
        ram = k3_budget_trunk_resident(&s->in);
    if (ram == K3_RAM_FLOOR) {
        k3_budget_plan(&s->in, UINT64_MAX, &s->budget, NULL);
        ram = s->budget.floor;
    }
    if (k3_budget_plan(&s->in, ram, &s->budget, err))
        return -1;
    s->n_records = s->in.inflight_records + (s->o.cache ? s->budget.cache_records : 0);
    if (s->n_records > (int)MAX_OWNER_INDEX)
        s->n_records = (int)MAX_OWNER_INDEX; /* a read's tag holds the slot in 16 bits */
    return 0;
}

static int layout_area(struct k3_stream *s, struct k3_err *err)
{
    uint64_t total = 0;
    for (int i = 0; i < s->n_segments; i++)
        if (s->budget.resident[i])
            total += s->segment_bytes[i];
    total += 2 * s->budget.stream_slot_bytes + s->embed_capacity +
             (uint64_t)s->n_records * s->record_stride;
    s->area_bytes = (size_t)total;
    s->area = k3io_alloc(s->area_bytes);
    s->resident = calloc((size_t)s->n_segments, sizeof *s->resident);
    s->records = calloc((size_t)s->n_records + 1, sizeof *s->records);
    s->batch_slot = calloc((size_t)s->in.inflight_records + 1, sizeof *s->batch_slot);
    s->batch_done = calloc((size_t)s->in.inflight_records + 1, sizeof *s->batch_done);
    s->layer_stats = calloc((size_t)s->m->cfg.n_layers + 1, sizeof *s->layer_stats);
    s->dropped = calloc(s->record_stride / K3_PACK_ALIGN + 1, sizeof *s->dropped);
    s->team_load = calloc((size_t)s->n_teams, sizeof *s->team_load);
    if (!s->area || !s->resident || !s->records || !s->batch_slot || !s->batch_done ||
        !s->layer_stats || !s->dropped || !s->team_load)
        return k3_errf(err, "out of memory for the read area (%.2f GiB)", total / 1073741824.0);
    uint8_t *at = s->area;
    for (int i = 0; i < s->n_segments; i++) {
        s->resident[i].object = i;
        if (s->budget.resident[i]) {
            s->resident[i].base = at;
            at += s->segment_bytes[i];
        }
    }
    for (int k = 0; k < 2; k++) {
        s->slots[k] = (struct buffer){.base = at, .object = -1};
        at += s->budget.stream_slot_bytes;
    }
    s->embed = (struct buffer){.base = at, .object = -1};
    at += s->embed_capacity;
    for (int i = 0; i < s->n_records; i++) {
        s->records[i] = (struct buffer){.base = at, .object = -1, .predicted = -1,
                                        .kind = OWN_RECORD, .index = (uint32_t)i};
        at += s->record_stride;
    }
    return 0;
}

/* NUMA (numa/plan.h rules 6 and 7): record slot i goes to the node of team i mod n_teams,
 * the team that computes what lands there.  A trunk mat-vec gives team k the rows its
 * threads take (kernels_isa.h: thread t of T computes rows [R·t/T, R·(t+1)/T)), so in a
 * resident segment each matrix's rows go to the node of the team that computes them, the
 * rest of the segment interleaved over the teams' nodes.  The two stream slots hold a
 * different layer's layout each time: interleaved.  One area is registered with the ring;
 * its parts are bound per node.  A refused binding leaves memory where it is. */
static void place_rows(struct k3_stream *s, uint8_t *base, int seg)
{
    const struct k3_placement *pl = s->o.place;
    const struct k3numa_plan *p = pl->plan;
    const struct k3_ckpt_plan *cp = &s->m->plan;
    for (int i = 0; i < cp->n_specs; i++) {
        const struct k3_tensor_spec *t = &cp->specs[i];
        if (t->kind != K3_T_MATRIX || t->ndim != 2 || cp->layout.segment[i] != seg)
            continue;
        uint64_t row_bytes = (uint64_t)t->shape[1] * (uint64_t)k3_dtype_size(cp->dtypes[i]);
        for (int k = 0; k < p->n_teams; k++) {
            int r0, r1;
            k3numa_plan_team_rows(p, (int)t->shape[0], 1, k, &r0, &r1);
            k3numa_range_bind(pl->topo, base + cp->layout.offset[i] + (uint64_t)r0 * row_bytes,
                              (uint64_t)(r1 - r0) * row_bytes, p->teams[k].node);
        }
    }
}

static void place_buffers(struct k3_stream *s)
{
    const struct k3_placement *pl = s->o.place;
    if (!pl || !pl->plan->bind || pl->plan->n_teams < 2)
        return;
    const struct k3numa_plan *p = pl->plan;
    int nodes[64], n_nodes = 0;
    for (int k = 0; k < p->n_teams && n_nodes < 64; k++)
        nodes[n_nodes++] = p->teams[k].node;
    for (int i = 0; i < s->n_records; i++)
        k3numa_range_bind(pl->topo, s->records[i].base, s->record_stride,
                          p->teams[slot_team(s, i)].node);
    for (int i = 0; i < 2; i++)
        k3numa_range_interleave(pl->topo, s->slots[i].base, s->budget.stream_slot_bytes, nodes,
                                n_nodes);
    for (int i = 0; i < s->n_segments; i++)
        if (s->resident[i].base) {
            k3numa_range_interleave(pl->topo, s->resident[i].base, s->segment_bytes[i], nodes,
                                    n_nodes);
            place_rows(s, s->resident[i].base, i);
        }
}

/* An I/O thread of the reader starts: it runs on its team's node (plan.h rule 5). */
static void pin_io_thread(void *ctx, int team)
{
    const struct k3_stream *s = ctx;
    k3_placement_pin_to_team(s->o.place, team);
}

static int load_resident(struct k3_stream *s, struct k3_err *err)
{
    for (int i = 0; i < s->n_segments; i++)
        if (s->resident[i].base && fill(s, &s->resident[i], (uint64_t)i, OWN_SEGMENT, (uint32_t)i, err))
            return -1;
    for (int i = 0; i < s->n_segments; i++) {
        if (!s->resident[i].base)
            continue;
        if (wait_ready(s, &s->resident[i], err))
            return -1;
        k3_model_bind_segment(s->m, i, s->resident[i].base);
    }
    return 0;
}

int k3_stream_open(struct k3_stream **out, struct k3_model *m, const struct k3_stream_opts *o,
                   char *note, size_t note_len, struct k3_err *err)
{
    *out = NULL;
    if (!m->packed)
        return k3_errf(err, "the read path serves packed models (k3-uring pack)");
    struct k3_stream *s = calloc(1, sizeof *s);
    if (!s)
        return k3_errf(err, "out of memory");
    s->m = m;
    s->p = m->packed;
    s->o = *o;
    s->bound_slot = -1;
    s->n_teams = o->place ? o->place->plan->n_teams : 1;
    int rc = plan_budget(s, err);
    if (!rc)
        rc = layout_area(s, err);
    if (!rc)
        place_buffers(s);
    if (!rc) {
        s->fds = calloc((size_t)s->p->n_drives, sizeof *s->fds);
        s->drive_team = calloc((size_t)s->p->n_drives, sizeof *s->drive_team);
        s->drive_failures = calloc((size_t)s->p->n_drives, sizeof *s->drive_failures);
        s->drive_lost = calloc((size_t)s->p->n_drives, sizeof *s->drive_lost);
        if (!s->fds || !s->drive_team || !s->drive_failures || !s->drive_lost)
            rc = k3_errf(err, "out of memory");
        for (int d = 0; !rc && d < s->p->n_drives; d++) {
            s->fds[d] = s->p->drives[d].data.fd;
            s->drive_team[d] = o->place ? k3_placement_drive_team(o->place, s->p->drives[d].path) : 0;
        }
    }
    if (!rc) {
        struct k3io_config rc_cfg = {
            .backend = o->backend,
            .fds = s->fds,
            .n_files = s->p->n_drives,
            .area = s->area,
            .area_bytes = s->area_bytes,
            .queue_depth = 64,
            .max_io_bytes = 1u << 20,
            .background_depth = (unsigned)(o->prefetch_depth * s->p->n_drives),
            /* several nodes: an I/O thread and ring per node, reading its drives */
            .io_threads = s->n_teams > 1 ? s->n_teams : 0,
            .file_thread = s->drive_team,
            .thread_start = pin_io_thread,
            .thread_ctx = s,
        };
        int e = k3io_reader_create(&s->r, &rc_cfg, note, note_len);
        if (e)
            rc = k3_errf(err, "--io %s: cannot set up the reader: %s",
                         o->backend == K3IO_URING ? "uring" : o->backend == K3IO_PREAD ? "pread" : "auto",
                         strerror(-e));
    }
    if (!rc && o->faults)
        rc = k3_stream_set_faults(s, o->faults, o->fault_seed, err);
    if (!rc)
        rc = load_resident(s, err);
    if (rc) {
        k3_stream_close(s);
        return rc;
    }
    s->store.ops = &stream_ops;
    s->store.capacity = batch_capacity(s);
    s->trunk = (struct k3_trunk_source){.segment = trunk_segment, .embed = trunk_embed, .ctx = s};
    *out = s;
    return 0;
}

void k3_stream_close(struct k3_stream *s)
{
    if (!s)
        return;
    if (s->r) {
        /* Reads still in flight (a prefetch nobody used) must land before the area goes. */
        struct k3io_done done[64];
        while (k3io_pending(s->r) > 0 && k3io_wait(s->r, done, 64, 1) > 0)
            ;
        k3io_reader_destroy(s->r);
    }
    k3_faults_free(s->faults);
    free(s->drive_failures);
    free(s->drive_lost);
    free(s->fds);
    free(s->area);
    free(s->resident);
    free(s->records);
    free(s->batch_slot);
    free(s->drive_team);
    free(s->team_load);
    free(s->batch_done);
    free(s->layer_stats);
    free(s->dropped);
    free(s->segment_bytes);
    free(s);
}

const struct k3_budget *k3_stream_budget(const struct k3_stream *s,
                                         const struct k3_budget_input **in)
{
    if (in)
        *in = &s->in;
    return &s->budget;
}

struct k3_expert_store *k3_stream_experts(struct k3_stream *s) { return &s->store; }
const struct k3_trunk_source *k3_stream_trunk(struct k3_stream *s) { return &s->trunk; }
struct k3_stream_stats k3_stream_stats(const struct k3_stream *s) { return s->stats; }
const struct k3_layer_stats *k3_stream_layer_stats(const struct k3_stream *s)
{
    return s->layer_stats;
}
const char *k3_stream_backend(const struct k3_stream *s) { return k3io_backend_name(s->r); }

/* Back to a clean state after a failed run: reads still in flight land (and are
 * dropped), and every buffer but the resident segments is emptied. */
static void reset(struct k3_stream *s)
{
    struct k3io_done done[64];
    while (k3io_pending(s->r) > 0 && k3io_wait(s->r, done, 64, 1) > 0)
        ;
    s->inflight = 0;
    for (int k = 0; k < 2; k++)
        s->slots[k] = (struct buffer){.base = s->slots[k].base, .object = -1};
    s->bound_slot = -1;
    s->embed = (struct buffer){.base = s->embed.base, .object = -1};
    for (int i = 0; i < s->n_records; i++)
        empty_record(&s->records[i]);
    s->failed = false;
}

void k3_stream_recover(struct k3_stream *s) { reset(s); }

int k3_stream_set_faults(struct k3_stream *s, const char *spec, uint64_t seed, struct k3_err *err)
{
    struct k3_faults *f = NULL;
    if (spec && k3_faults_parse(&f, spec, seed, err))
        return -1;
    reset(s);
    k3_faults_free(s->faults);
    s->faults = f;
    k3io_set_fault(s->r, f ? inject : NULL, f ? s : NULL);
    for (int d = 0; d < s->p->n_drives; d++) {
        s->drive_failures[d] = 0;
        s->drive_lost[d] = false;
    }
    return 0;
}

bool k3_stream_faults(const struct k3_stream *s, struct k3_fault_counts *counts)
{
    if (s->faults)
        *counts = k3_faults_counts(s->faults);
    return s->faults != NULL;
}
