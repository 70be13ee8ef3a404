/* The read path's buffers as a state machine (stream_internal.h): the legal changes and
 * the invariants, asserted at every change. */
#include <assert.h>

#include "engine/stream/stream_internal.h"

static bool legal(enum buf_state from, enum buf_state to)
{
    switch (from) {
    case BUF_FREE: return to == BUF_PENDING;
    /* landed; a missed prediction with reads still landing; one whose reads were all
     * dropped unstarted */
    case BUF_PENDING: return to == BUF_LANDED || to == BUF_ABANDONED || to == BUF_FREE;
    /* checked; a bad piece re-read from its replica, or a refill; dropped */
    case BUF_LANDED: return to == BUF_READY || to == BUF_PENDING || to == BUF_FREE;
    case BUF_READY: return to == BUF_PENDING || to == BUF_FREE;
    case BUF_ABANDONED: return to == BUF_FREE;
    }
    return false;
}

void buffer_check(const struct buffer *b)
{
    assert(b->pending <= b->count);
    assert(b->inflight <= b->pending); /* pieces landed <= pieces issued */
    assert(b->pins >= 0);
    switch (b->state) {
    case BUF_FREE:
        assert(b->object < 0 && b->pending == 0 && b->pins == 0 && b->predicted < 0);
        break;
    case BUF_PENDING:
        assert(b->object >= 0 && b->pending > 0);
        break;
    case BUF_LANDED:
    case BUF_READY: /* every piece in: no read in flight */
        assert(b->object >= 0 && b->pending == 0 && b->inflight == 0);
        break;
    case BUF_ABANDONED: /* only its started reads remain, and no one holds it */
        assert(b->kind == OWN_RECORD && b->pins == 0 && b->predicted < 0 &&
               b->inflight == b->pending && b->pending > 0);
        break;
    }
    /* a prediction is not yet asked for, so not in a batch */
    assert(b->predicted < 0 || (b->kind == OWN_RECORD && b->pins == 0));
    assert(b->pins == 0 || b->state == BUF_PENDING || b->state == BUF_LANDED ||
           b->state == BUF_READY);
}

void buffer_set(struct buffer *b, enum buf_state to)
{
    assert(legal(b->state, to));
    b->state = to;
    buffer_check(b);
}

void buffer_claim(struct buffer *b, int64_t object, uint32_t first, uint32_t count)
{
    /* a pinned buffer is never refilled, nor one still landing */
    assert(b->pins == 0 && b->inflight == 0);
    assert(b->state == BUF_FREE || b->state == BUF_LANDED || b->state == BUF_READY);
    b->object = object;
    b->first_piece = first;
    b->count = b->pending = count;
    b->replica_round = b->bad = false;
    b->predicted = -1;
    buffer_set(b, BUF_PENDING);
}

void buffer_release(struct buffer *b)
{
    assert(b->pins == 0 && b->inflight == 0);
    b->object = -1;
    b->pending = 0;
    b->predicted = -1;
    buffer_set(b, BUF_FREE);
}

void buffer_pin(struct buffer *b)
{
    b->pins++;
    buffer_check(b);
}

void buffer_unpin(struct buffer *b)
{
    assert(b->pins > 0);
    b->pins--;
    buffer_check(b);
}

void buffer_predict(struct buffer *b, int layer)
{
    b->predicted = layer;
    buffer_check(b);
}

void buffer_empty(struct buffer *b)
{
    *b = (struct buffer){.base = b->base, .kind = b->kind, .index = b->index,
                         .state = BUF_FREE, .object = -1, .predicted = -1};
}
