/* Checksums of landed pieces, checked in parallel batches (XXH3 runs near memory speed on
 * one core; spread over the compute threads it stays off the critical path).  A bad
 * piece is read again from its replica, once per fill of its buffer, and the buffer lands
 * again; otherwise the first bad piece in order is reported. */
#include "engine/stream/verify.h"

#include <assert.h>
#include <stdio.h>
#include <string.h>
#include <xxhash.h>

#include "engine/base/clock.h"
#include "engine/stream/stream_internal.h"

/* One piece to check. */
struct verify_job {
    struct buffer *b;
    uint32_t k; /* piece index within the buffer */
    bool bad;
};

uint64_t k3_verify_scratch_bytes(void)
{
    return K3_VERIFY_BATCH * sizeof(struct verify_job);
}

/* Queues the pieces of the landed, unchecked buffers of bufs[0..n), from buffer *bi's
 * piece *bk on, until the batch is full; returns how many were queued. */
static int queue(struct k3_stream *s, struct buffer **bufs, int n, int *bi, uint32_t *bk)
{
    int n_jobs = 0;
    for (; *bi < n && n_jobs < K3_VERIFY_BATCH; ++*bi, *bk = 0) {
        struct buffer *b = bufs[*bi];
        if (b->state != BUF_LANDED && !b->bad) /* bad: pending again, still checked */
            continue;
        for (; *bk < b->count && n_jobs < K3_VERIFY_BATCH; ++*bk)
            s->reads.verify_jobs[n_jobs++] = (struct verify_job){b, *bk, false};
        if (*bk < b->count)
            break; /* this buffer continues in the next batch */
    }
    return n_jobs;
}

static void check(struct k3_stream *s, int n_jobs)
{
    struct verify_job *jobs = s->reads.verify_jobs;
#pragma omp parallel for schedule(dynamic, 1)
    for (int i = 0; i < n_jobs; i++) {
        const struct buffer *b = jobs[i].b;
        const struct k3_pack_object *x = &s->p->objects[b->object];
        uint32_t j = b->first_piece + jobs[i].k;
        const struct k3_pack_piece *pc = &s->p->pieces[x->first_piece + j];
        const uint8_t *at = b->base + k3_packed_piece_at(s->p, x, j) -
                            k3_packed_piece_at(s->p, x, b->first_piece);
        jobs[i].bad = XXH3_64bits(at, pc->bytes) != pc->xxh3;
    }
}

/* A bad piece: read again from its replica (once per fill), or the failure stands.  The
 * buffer's other pieces are still checked in this pass, so that every bad one is re-read
 * before a second failure counts. */
static void bad_piece(struct k3_stream *s, const struct verify_job *job)
{
    struct buffer *b = job->b;
    uint32_t j = b->first_piece + job->k;
    struct k3_err refused = {""};
    b->bad = true;
    if (s->p->replicas && !b->replica_round) {
        b->pending++;
        if (b->state == BUF_LANDED)
            buffer_set(b, BUF_PENDING);
        if (!read_pieces(s, b, j, 1, FROM_REPLICA, &refused)) {
            s->stats.replica_reads++;
            return;
        }
    }
    char why[sizeof refused.msg + 64];
    snprintf(why, sizeof why, "checksum mismatch%s%s",
             refused.msg[0] ? "; its replica: " : "", refused.msg);
    fail(s, b, j, b->replica_round ? FROM_REPLICA : 0, why);
}

/* A checkpoint's record: its landed spans moved into the record layout (ckpt_view.h),
 * in table order; a checkpoint's trunk segment held as Q8_0: quantized in place
 * (model.h).  Only a buffer holding its whole object has them all. */
static void assemble(const struct k3_stream *s, const struct buffer *b)
{
    const struct k3_packed *p = s->p;
    if (b->first_piece || b->count != p->objects[b->object].n_pieces)
        return;
    if (b->object < s->trunk.n_segments)
        k3_model_segment_landed(s->m, (int)b->object, b->base);
    if (!p->moves)
        return;
    for (uint64_t i = p->first_move[b->object]; i < p->first_move[b->object + 1]; i++)
        memmove(b->base + p->moves[i].dst, b->base + p->moves[i].src, p->moves[i].len);
}

/* After the checks: a buffer with no bad piece is ready (assembled, for a checkpoint's
 * record); one with bad pieces waits for their re-reads, after which another failure
 * stands. */
static void settle(const struct k3_stream *s, struct buffer **bufs, int n)
{
    bool ready[K3_MAX_TOPK];
    assert(n <= K3_MAX_TOPK); /* a batch's records, or one buffer */
    for (int q = 0; q < n; q++) {
        struct buffer *b = bufs[q];
        ready[q] = !b->bad && b->state == BUF_LANDED;
        if (b->bad) {
            b->bad = false;
            b->replica_round = true;
        }
    }
    /* Records are assembled in parallel: each buffer's moves run in order on one thread. */
#pragma omp parallel for schedule(dynamic, 1) if (n > 1 && s->p->moves)
    for (int q = 0; q < n; q++)
        if (ready[q])
            assemble(s, bufs[q]);
    for (int q = 0; q < n; q++)
        if (ready[q])
            buffer_set(bufs[q], BUF_READY);
}

int verify(struct k3_stream *s, struct buffer **bufs, int n, struct k3_err *err)
{
    double t0 = k3_now();
    int bi = 0;
    uint32_t bk = 0;
    while (bi < n && !s->p->checkpoint) { /* a checkpoint has no checksums (ckpt_view.h) */
        int n_jobs = queue(s, bufs, n, &bi, &bk);
        check(s, n_jobs);
        for (int i = 0; i < n_jobs; i++)
            if (s->reads.verify_jobs[i].bad)
                bad_piece(s, &s->reads.verify_jobs[i]);
    }
    settle(s, bufs, n);
    s->stats.verify_seconds += k3_now() - t0;
    if (s->reads.failed) {
        *err = s->reads.failure;
        return -1;
    }
    return 0;
}

int wait_ready(struct k3_stream *s, struct buffer *b, struct k3_err *err)
{
    while (b->state != BUF_READY) {
        while (b->state != BUF_LANDED)
            if (pump(s, 1, err))
                return -1;
        if (verify(s, &b, 1, err))
            return -1;
    }
    return 0;
}
