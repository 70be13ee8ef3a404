/* Piece I/O: an object's pieces submitted to the reader, each completion counted against
 * its buffer; a failed read tried again at the same place, then from its replica; a drive
 * that keeps failing read from replicas; the first failure that stands reported with its
 * drive, object and offset.  Checksums are verify.c's. */
#include <assert.h>
#include <stdio.h>
#include <string.h>

#include "engine/base/clock.h"
#include "engine/base/rng.h"
#include "engine/stream/stream_internal.h"

/* Reads of a piece that fail (-EIO, short) are tried this often at the same place before
 * its replica is read (or the error stands). */
#define SAME_PLACE_TRIES 3
/* A drive whose reads fail this many times in a row is taken as lost: with replicas,
 * its pieces are read from them from then on instead of being tried first. */
#define DRIVE_LOST_AFTER 8
/* Requests handed to the reader at once. */
#define SUBMIT_BATCH 64

void tick(struct k3_stream *s)
{
    double t = k3_now();
    if (s->reads.inflight > 0)
        s->layer_stats[s->cur_layer].busy_seconds += t - s->reads.last_tick;
    s->reads.last_tick = t;
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

static const struct k3_pack_object *object_of(const struct k3_stream *s, const struct buffer *b)
{
    return &s->p->objects[b->object];
}

/* The request for piece j of b's object. */
static struct k3io_req piece_req(const struct k3_stream *s, const struct buffer *b, uint32_t j,
                                 uint32_t how)
{
    const struct k3_pack_object *x = object_of(s, b);
    uint64_t k = x->first_piece + j, offset;
    uint32_t drive;
    if (s->p->replicas && s->reads.drive_lost[s->p->pieces[k].drive])
        how |= FROM_REPLICA;
    location(s, k, how, &drive, &offset);
    return (struct k3io_req){
        .file = drive,
        .len = (uint32_t)k3_pack_round_up(s->p->pieces[k].bytes, K3_PACK_ALIGN),
        .offset = offset,
        .buf = b->base + k3_packed_piece_at(s->p, x, j) - k3_packed_piece_at(s->p, x, b->first_piece),
        .tag = make_tag(b->kind, how, b->index, j),
    };
}

/* q reads of b the reader queued: in flight until each lands. */
static void in_flight(struct k3_stream *s, struct buffer *b, uint32_t q)
{
    tick(s);
    s->reads.inflight += (int)q;
    b->inflight += q;
    s->stats.reads += q;
    buffer_check(b);
    k3_trace_counter(s->o.trace, "pieces in flight", s->reads.inflight);
}

/* Only what the reader queued is counted in flight (k3io_submit is all or nothing per
 * call): a refused batch leaves its pieces pending with no read, and the error fails the
 * step, whose buffers k3_stream_recover empties. */
int read_pieces(struct k3_stream *s, struct buffer *b, uint32_t first, uint32_t n, uint32_t how,
                struct k3_err *err)
{
    struct k3io_req reqs[SUBMIT_BATCH];
    uint32_t q = 0;
    for (uint32_t j = first; j < first + n; j++) {
        reqs[q++] = piece_req(s, b, j, how);
        if (q < SUBMIT_BATCH && j + 1 < first + n)
            continue;
        int e = how & SPECULATIVE ? k3io_submit_background(s->reads.r, reqs, (int)q)
                                  : k3io_submit(s->reads.r, reqs, (int)q);
        if (e) {
            char what[64];
            k3_packed_describe(s->p, (uint64_t)b->object, what, sizeof what);
            return k3_errf(err, "submitting reads of %s: %s", what, strerror(-e));
        }
        in_flight(s, b, q);
        q = 0;
    }
    return 0;
}

int read_object(struct k3_stream *s, struct buffer *b, uint64_t o, struct k3_err *err)
{
    buffer_claim(b, (int64_t)o, 0, s->p->objects[o].n_pieces);
    b->submitted = k3_trace_now(s->o.trace);
    return read_pieces(s, b, 0, b->count, 0, err);
}

void fail(struct k3_stream *s, const struct buffer *b, uint32_t j, uint32_t how, const char *why)
{
    if (s->reads.failed)
        return;
    char what[64];
    k3_packed_describe(s->p, (uint64_t)b->object, what, sizeof what);
    uint64_t k = object_of(s, b)->first_piece + j, offset;
    uint32_t drive;
    location(s, k, how, &drive, &offset);
    k3_errf(&s->reads.failure, "%s %s: reading %s (%u bytes at offset %llu%s): %s",
            k3_packed_noun(s->p), s->p->drives[drive].path, what, s->p->pieces[k].bytes, (unsigned long long)offset,
            how & FROM_REPLICA ? ", the replica" : "", why);
    s->reads.failed = true;
}

static struct buffer *owner_buffer(struct k3_stream *s, uint64_t tag)
{
    uint32_t index = tag_index(tag);
    switch (tag_owner(tag)) {
    case OWN_SEGMENT: return &s->trunk.resident[index];
    case OWN_SLOT: return &s->trunk.slots[index];
    case OWN_EMBED: return &s->trunk.embed;
    case OWN_RECORD: break;
    }
    return &s->experts.records[index];
}

/* The counters and the trace of one completed read of piece j of b. */
static void account(struct k3_stream *s, const struct buffer *b, const struct k3io_done *d)
{
    uint64_t got = d->res > 0 ? (uint64_t)d->res : 0;
    s->stats.bytes += got;
    if (b->kind != OWN_RECORD)
        s->stats.trunk_bytes += got;
    if (!s->o.trace)
        return;
    char what[64];
    uint32_t drive;
    uint64_t offset, k = object_of(s, b)->first_piece + tag_piece(d->tag);
    location(s, k, tag_how(d->tag), &drive, &offset);
    k3_packed_describe(s->p, (uint64_t)b->object, what, sizeof what);
    k3_trace_read(s->o.trace, (int)drive, b->submitted, k3_trace_now(s->o.trace),
                  s->p->pieces[k].bytes, what);
    if (d->release > 0) /* a drive model held it: show the storage's own time too */
        k3_trace_storage_read(s->o.trace, (int)drive, d->started, d->landed,
                              s->p->pieces[k].bytes, what);
    k3_trace_counter(s->o.trace, "pieces in flight", s->reads.inflight);
}

/* A read on drive ended well or not: a drive failing DRIVE_LOST_AFTER reads in a row is
 * taken as lost (with replicas: said once, through the caller's note). */
static void count_drive(struct k3_stream *s, uint32_t drive, bool ok)
{
    if (ok) {
        s->reads.drive_failures[drive] = 0;
        return;
    }
    struct stream_reads *rd = &s->reads;
    if (++rd->drive_failures[drive] < DRIVE_LOST_AFTER || !s->p->replicas || rd->drive_lost[drive])
        return;
    s->reads.drive_lost[drive] = true;
    if (s->o.note) {
        char line[sizeof(struct k3_err)];
        snprintf(line, sizeof line, "drive %s: %d reads failed in a row; reading its pieces from "
                 "their replicas", s->p->drives[drive].path, DRIVE_LOST_AFTER);
        s->o.note(s->o.note_ctx, line);
    }
}

/* A failed read of piece j is read again: at the same place while tries remain, then
 * from its replica.  False when there is nothing left to try, or when the reader refused
 * the read (refused says why). */
static bool retry(struct k3_stream *s, struct buffer *b, uint32_t j, uint32_t how, uint32_t drive,
                  struct k3_err *refused)
{
    uint32_t tries = (how & TRIES_MASK) + 1, again;
    if (s->reads.drive_lost[drive] && !(how & FROM_REPLICA))
        tries = SAME_PLACE_TRIES;
    if (tries < SAME_PLACE_TRIES)
        again = (how & FROM_REPLICA) | tries;
    else if (!(how & FROM_REPLICA) && s->p->replicas)
        again = FROM_REPLICA;
    else
        return false;
    if (read_pieces(s, b, j, 1, again, refused))
        return false;
    s->stats.retries++;
    s->stats.replica_reads += (again & FROM_REPLICA) && !(how & FROM_REPLICA);
    return true;
}

/* One completed read: counted against its buffer (checksums wait until the buffer is
 * complete, so they can be checked in parallel).  A failed read is retried before the
 * error stands; an abandoned prefetch's reads are not. */
static void landed(struct k3_stream *s, const struct k3io_done *d)
{
    struct buffer *b = owner_buffer(s, d->tag);
    uint32_t j = tag_piece(d->tag), how = tag_how(d->tag), drive;
    uint64_t k = object_of(s, b)->first_piece + j, offset;
    assert(b->state == BUF_PENDING || b->state == BUF_ABANDONED);
    tick(s);
    s->reads.inflight--;
    b->inflight--;
    account(s, b, d);
    location(s, k, how, &drive, &offset);
    bool ok = d->res >= 0 && (uint32_t)d->res >= s->p->pieces[k].bytes;
    count_drive(s, drive, ok);
    if (!ok && b->state != BUF_ABANDONED) {
        struct k3_err refused = {""};
        if (retry(s, b, j, how, drive, &refused))
            return; /* still pending */
        char why[sizeof refused.msg + 64];
        snprintf(why, sizeof why, "%s%s%s",
                 d->res < 0         ? strerror(-d->res)
                 : s->p->checkpoint ? "short read (shard truncated?)"
                                    : "short read (data file truncated?)",
                 refused.msg[0] ? "; read again: " : "", refused.msg);
        fail(s, b, j, how, why);
    }
    if (--b->pending > 0)
        buffer_check(b);
    else if (b->state == BUF_ABANDONED) {
        buffer_release(b);
        cache_slot_released(s, (int)b->index);
    }
    else
        buffer_set(b, BUF_LANDED);
}

int pump(struct k3_stream *s, int min, struct k3_err *err)
{
    struct k3io_done done[64];
    double t0 = k3_now();
    int n = k3io_wait(s->reads.r, done, 64, min);
    double dt = k3_now() - t0;
    s->stats.stall_seconds += dt;
    s->layer_stats[s->cur_layer].stall_seconds += dt;
    if (n < 0)
        return k3_errf(err, "waiting for reads: %s", strerror(-n));
    for (int i = 0; i < n; i++)
        landed(s, &done[i]);
    if (s->reads.failed) {
        *err = s->reads.failure;
        return -1;
    }
    return 0;
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
    dm->s->reads.dropped[dm->n++] = tag_piece(tag);
    return true;
}

uint32_t drop_unstarted(struct k3_stream *s, int slot)
{
    struct drop_match dm = {.s = s, .slot = (uint32_t)slot};
    k3io_drop(s->reads.r, drop_slot_piece, &dm);
    s->experts.records[slot].inflight -= dm.n;
    s->reads.inflight -= (int)dm.n;
    return dm.n;
}

/* The reader's other hook: a submission may be refused, none of its reads queued. */
int refuse(void *ctx, int n)
{
    struct k3_stream *s = ctx;
    return k3_faults_refuse(s->reads.faults);
}

/* The reader's hook: each completed chunk may be turned into a fault; a "corrupt" one
 * flips a byte of what landed, which the piece's checksum must then catch. */
int32_t inject(void *ctx, const struct k3io_fault_at *at, int32_t res)
{
    struct k3_stream *s = ctx;
    bool flip;
    int32_t out = k3_faults_apply(s->reads.faults, at->file, at->len, res, &flip);
    if (flip) {
        struct buffer *b = owner_buffer(s, at->tag);
        uint32_t j = tag_piece(at->tag), drive;
        uint64_t k = object_of(s, b)->first_piece + j, piece_at;
        location(s, k, tag_how(at->tag), &drive, &piece_at);
        const struct k3_pack_object *x = object_of(s, b);
        uint8_t *dst = b->base + k3_packed_piece_at(s->p, x, j) -
                       k3_packed_piece_at(s->p, x, b->first_piece) + (at->offset - piece_at);
        uint64_t where = at->offset ^ k; /* which byte: any, but the same for the same read */
        dst[k3_splitmix64(&where) % (uint64_t)res] ^= 0x5a;
    }
    return out;
}
