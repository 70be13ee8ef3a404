/* The read path's insides, shared by its files; callers use stream.h.
 *
 *   stream.c     opening: the budget plan, the area's layout, NUMA placement of the
 *                buffers, the resident segments; closing, faults, accessors
 *   pieces.c     piece I/O: submitting an object's pieces, completions, retries at the
 *                same place, replicas, lost drives, failure reports, fault injection
 *   verify.c     checksums of landed pieces, in parallel; waiting for a buffer to be ready
 *   trunk.c      the trunk source: double-buffered stream slots, binding segments
 *                (the next one ahead, for prediction), embedding rows on demand
 *   cache.c      the expert store: record slots as a cache, prefetch, promote,
 *                abandon, team balancing; the batch's entries and their states
 *   slots.c      the slot a read takes (a free one, else the held record that gives way
 *                first), from counts and indexes (held.c) kept as slots change hands
 *   buffer.c     the buffers' states, their legal transitions and invariants
 *
 * Every read lands in a struct buffer, which goes through the states of enum buf_state;
 * buffer_set() asserts that each change is a legal one and buffer_check() that the
 * buffer's invariants hold after it.  Its pins and prediction change only through
 * buffer_pin, buffer_unpin and buffer_predict, which check them too.
 */
#ifndef K3_STREAM_INTERNAL_H
#define K3_STREAM_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/stream/held.h"
#include "engine/stream/stream.h"
#include "engine/pack/packed.h"

/* ---- read tags ------------------------------------------------------------------ */

/* What a completion belongs to.  A tag is: owner (3 bits), how the piece is being read
 * (8 bits: tries so far, and whether from its replica), the owner's index (21 bits: full
 * K3's 82,432 records fit a cache slot each, where 16 bits held 65,535), the piece (32
 * bits, as the pack's n_pieces). */
enum owner { OWN_SEGMENT = 1, OWN_SLOT = 2, OWN_RECORD = 3, OWN_EMBED = 4 };
_Static_assert(OWN_EMBED < 8, "a tag holds the owner in 3 bits");

#define FROM_REPLICA 0x80u
#define SPECULATIVE 0x40u /* a prefetch: read in the background, may be dropped unstarted */
#define TRIES_MASK 0x3fu
#define MAX_OWNER_INDEX 0x1fffffu

static inline uint64_t make_tag(enum owner kind, uint32_t how, uint32_t index, uint32_t piece)
{
    return (uint64_t)kind << 61 | (uint64_t)(how & 0xff) << 53 |
           (uint64_t)(index & MAX_OWNER_INDEX) << 32 | piece;
}

static inline enum owner tag_owner(uint64_t tag) { return (enum owner)(tag >> 61); }
static inline uint32_t tag_how(uint64_t tag) { return (uint32_t)(tag >> 53) & 0xff; }
static inline uint32_t tag_index(uint64_t tag) { return (uint32_t)(tag >> 32) & MAX_OWNER_INDEX; }
static inline uint32_t tag_piece(uint64_t tag) { return (uint32_t)tag; }

/* ---- buffers ---------------------------------------------------------------------- */

enum buf_state {
    BUF_FREE,      /* holds nothing */
    BUF_PENDING,   /* an object's pieces are being read; some may have landed */
    BUF_LANDED,    /* every piece in, checksums not yet checked */
    BUF_READY,     /* checked: the bytes may be used */
    BUF_ABANDONED, /* record slots: a prefetch no one asked for whose unstarted reads were
                    * dropped; the started ones still land, then the slot is free */
};

/* A buffer that pieces [first_piece, first_piece + count) of an object are read into,
 * piece first_piece + k at base + k * piece_bytes. */
struct buffer {
    uint8_t *base;      /* [count * piece_bytes of the object] */
    enum owner kind;    /* who owns it, and its index there: its reads are tagged so */
    uint32_t index;
    enum buf_state state;
    int64_t object;     /* -1 when free */
    uint32_t first_piece, count;
    uint32_t pending;   /* pieces not yet landed */
    uint32_t inflight;  /* its reads in flight, each for a piece not yet landed */
    double submitted;   /* trace time of the reads */
    bool replica_round; /* bad pieces were re-read from replicas: another failure stands */
    bool bad;           /* verify: a piece failed its checksum in this pass */
    int pins;           /* in use: a record in the current batch, the trunk slot bound to
                         * the model, a resident segment; never refilled while pinned */
    int predicted;      /* record slots: the layer it was prefetched for, not yet asked
                         * for (-1: none) */
    uint64_t last_use;  /* record slots: for LRU eviction */
};

/* Asserts b's invariants (the checking function every change of state calls). */
void buffer_check(const struct buffer *b);
/* The buffer's state becomes to; asserts the change is legal and the invariants hold. */
void buffer_set(struct buffer *b, enum buf_state to);
/* b (free, or holding landed bytes no one uses) is to receive pieces [first, first +
 * count) of object: pending, nothing issued yet. */
void buffer_claim(struct buffer *b, int64_t object, uint32_t first, uint32_t count);
/* b (no one using it, no read in flight) holds nothing again. */
void buffer_release(struct buffer *b);
/* b is in use by one more holder (a batch entry, the model), so never refilled; its
 * state must allow it (pending, landed or ready). */
void buffer_pin(struct buffer *b);
/* One holder of b is done with it. */
void buffer_unpin(struct buffer *b);
/* Record slot b was prefetched for layer, not yet asked for; -1: the prediction is
 * settled (asked for, or abandoned). */
void buffer_predict(struct buffer *b, int layer);
/* Back to free whatever its state, keeping its memory and its tag: for a reset, once
 * every read in flight has been reaped. */
void buffer_empty(struct buffer *b);

/* ---- the stream -------------------------------------------------------------------- */

/* A batch entry's states, in this order only (cache.c's entry_set and batch_check); the
 * next begin() lets go of the batch whatever its entries' states (experts.h). */
enum entry_state {
    ENTRY_QUEUED,    /* no slot yet: its read waits for one */
    ENTRY_HELD,      /* in its slot, landed or landing, which it pins */
    ENTRY_DELIVERED, /* handed out by next(): ready, still pinned */
    ENTRY_DONE,      /* the caller is done with it: its slot may be refilled */
};

/* One expert of the batch a layer asked for (cache.c). */
struct batch_entry {
    uint64_t object;
    int slot;        /* the record slot it is in or lands in; -1 while queued */
    bool read;       /* read for this batch (not a hit) */
    enum entry_state state;
};



/* The read engine: the reader over the drives and the area it reads into, the pieces in
 * flight, verification, faults and drive loss (pieces.c, verify.c, faults.c). */
struct stream_reads {
    struct k3io_reader *r;
    int *fds;                     /* [n_drives] */
    int *drive_team;              /* [n_drives] the team (and I/O thread) reading each drive */
    uint8_t *area;                /* [area_bytes] registered with the reader */
    size_t area_bytes;
    int inflight;                 /* pieces in flight, all buffers */
    double last_tick;             /* when busy time was last accounted */
    uint32_t *dropped;            /* [record_stride / K3_PACK_ALIGN + 1] pieces k3io_drop
                                   * took back */
    struct verify_job *verify_jobs; /* [K3_VERIFY_BATCH] */
    struct k3_faults *faults;     /* NULL unless injecting */
    int *drive_failures;          /* [n_drives] failed reads in a row */
    bool *drive_lost;             /* [n_drives] failing: read its pieces' replicas instead */
    struct k3_err failure;        /* the first failure seen while processing completions */
    bool failed;
};

/* The trunk: resident segments, the two slots streamed ones take turns in, and the
 * embedding's row pieces (trunk.c). */
struct stream_trunk {
    struct k3_trunk_source source; /* what the forward pass calls */
    uint64_t *segment_bytes;      /* [n_segments] buffer bytes */
    int n_segments;
    struct buffer *resident;      /* [n_segments]: base NULL when streamed */
    struct buffer slots[2];       /* stream slots */
    int bound_slot;               /* slot of the segment bound to the model, or -1 */
    struct buffer embed;          /* embedding-row pieces */
    uint64_t embed_capacity;
    uint64_t embed_at;            /* where the embedding starts in its segment */
};

/* The expert store: record slots, the cache's policy and its index, and the batch a
 * begin() asked for (cache.c, slots.c, held.c, policy.c). */
struct stream_experts {
    struct k3_expert_store store;
    struct buffer *records;       /* [n_records] */
    int n_records;
    uint64_t record_stride;
    uint64_t use_clock;
    uint64_t batch_clock;         /* use_clock when the current batch began */
    struct k3_cache_policy policy; /* which cached record gives way (policy.c) */
    int *layer_held;              /* [policy.layers] record slots holding each MoE layer's
                                   * records, landed, landing or cached (not abandoned) */
    struct held_index held;       /* the free slots, and the held records by worth per MoE
                                   * layer and team (held.h; cache.c keeps it) */
    struct held_entry *held_aside; /* [n_records] entries a victim search set aside */
    int32_t *slot_layer;          /* [n_records] the MoE layer of the record a slot took (a
                                   * division per slot per miss, otherwise) */
    int32_t *slot_hint;           /* [policy.layers * policy.experts] by policy key: the slot
                                   * that last took the record; cache.c checks it on use, so
                                   * an entry left behind by an eviction is harmless */
    int layer, batch_n;
    struct batch_entry *batch;    /* [n_experts] the experts begin() asked for, in order */
    int delivered;                /* entries next() handed out (delivered or done) */
    int queued;                   /* entries before this one have a slot */
    int reading;                  /* entries read by this batch, not yet handed out (held
                                   * and read), at most store.capacity */
    int n_teams;                  /* compute teams: record slot i is on team i mod n_teams */
    int *team_load;               /* [n_teams] slots a begin() or prefetch() took per team */
};

/* The stream: the model and pack it reads, its options and budget, its three owners'
 * state, and the counters. */
struct k3_stream {
    struct k3_model *m;
    const struct k3_packed *p;
    struct k3_stream_opts o;
    struct k3_budget budget;
    struct k3_budget_input in;
    struct stream_reads reads;
    struct stream_trunk trunk;
    struct stream_experts experts;
    /* counters */
    struct k3_stream_stats stats;
    struct k3_layer_stats *layer_stats; /* [n_layers + 1] */
    int cur_layer;                /* the layer computing now (n_layers: the output) */
};


/* pieces.c */
/* Accounts the time since the last tick as busy (reads in flight) for the layer
 * computing now; call before the number in flight or the layer changes. */
void tick(struct k3_stream *s);
/* Reads pieces [first, first + n) of b's object into b; how: tries and replica, as in
 * the tag (SPECULATIVE: in the background). */
int read_pieces(struct k3_stream *s, struct buffer *b, uint32_t first, uint32_t n, uint32_t how,
                struct k3_err *err);
/* Claims b for the whole of object o and reads it. */
int read_object(struct k3_stream *s, struct buffer *b, uint64_t o, struct k3_err *err);
/* Reaps at least min completions (time counted as stall: compute is waiting). */
int pump(struct k3_stream *s, int min, struct k3_err *err);
/* Takes back record slot's reads that have not started: s->reads.dropped[0..n) are their
 * pieces, which no longer count as in flight; returns n. */
uint32_t drop_unstarted(struct k3_stream *s, int slot);
/* Records the first failure: piece j of b's object, read as how, failed for why. */
void fail(struct k3_stream *s, const struct buffer *b, uint32_t j, uint32_t how, const char *why);
/* The reader's fault hooks (K3_FAULTS): chunk results, submissions. */
int32_t inject(void *ctx, const struct k3io_fault_at *at, int32_t res);
int refuse(void *ctx, int n);

/* verify.c */
/* Checks the landed, unchecked buffers of bufs[0..n); those whose pieces all check out
 * become ready, those with a bad piece pending again (re-read from replicas). */
int verify(struct k3_stream *s, struct buffer **bufs, int n, struct k3_err *err);
/* Waits until b has landed and checked out. */
int wait_ready(struct k3_stream *s, struct buffer *b, struct k3_err *err);

/* trunk.c */
int trunk_segment(void *ctx, int seg, struct k3_err *err);
int trunk_ahead(void *ctx, int seg, struct k3_err *err);
int trunk_embed(void *ctx, const int32_t *tokens, int T, float *out, struct k3_err *err);

/* Can slot b be refilled: no one holds it and nothing lands in it. */
static inline bool reusable(const struct buffer *b)
{
    return !b->pins && (b->state == BUF_FREE || b->state == BUF_LANDED || b->state == BUF_READY);
}

/* The policy's key of a record: its index among the experts of the MoE layers. */
static inline uint32_t policy_key(const struct k3_stream *s, int64_t object)
{
    return (uint32_t)((uint64_t)object - (uint64_t)k3_seg_count(&s->m->cfg));
}

/* The MoE layer (among the MoE layers) a record belongs to. */
static inline int moe_layer_of(const struct k3_stream *s, int64_t object)
{
    return (int)(policy_key(s, object) / (uint32_t)s->experts.policy.experts);
}

/* slots.c: the record slot a read goes to, and the counts and indexes behind the choice,
 * kept as slots change hands through these */
/* A slot for object o's record (fresh memory only when fresh_ok and nothing else will
 * do), counted to its team's load; -1 if every slot is pinned or landing. */
int slot_for(struct k3_stream *s, uint64_t o, bool fresh_ok);
/* Slot takes object o's record (buffer_claim), whatever it held. */
void slot_claim(struct k3_stream *s, int slot, uint64_t o);
/* Slot, no one using it and no read in flight, holds nothing (buffer_release). */
void slot_release(struct k3_stream *s, int slot);
/* Slot's prefetch is abandoned with reads still landing: no longer held. */
void slot_abandon(struct k3_stream *s, int slot);
/* Slot's last use (or its record's order) changed: indexed anew; -1 only out of memory. */
int slot_used(struct k3_stream *s, int slot, struct k3_err *err);

/* cache.c */
extern const struct k3_expert_store_ops stream_store_ops;
/* Record slot i was released by a read landing (an abandoned prefetch's last): free. */
void cache_slot_released(struct k3_stream *s, int i);
/* Every record slot emptied (buffer_empty): the cache's counts and indexes start over. */
void cache_reset(struct k3_stream *s);
/* The compute team whose node holds record slot i, and which computes what lands there
 * (numa/plan.h rule 6). */
static inline int slot_team(const struct k3_stream *s, int i) { return i % s->experts.n_teams; }

#endif
