/* The io_uring backend: one ring per reader, set up as fio does (the newest task-run
 * flags first, dropped on EINVAL), files and the buffer area registered, reads as
 * READ_FIXED on fixed files (the area's pieces registered as reads first reach them:
 * uring_buffers.c).  Where registration is refused it reads without it and says
 * so in the note; where the ring itself is refused, reader.c falls back to pread. */
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "iouring/reader_internal.h"


/* fio's ladder (fio_ioring_queue_init): each rung needs a newer kernel than the next. */
static const unsigned setup_ladder[] = {
    IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN | IORING_SETUP_COOP_TASKRUN, /* 6.1 */
    IORING_SETUP_COOP_TASKRUN,                                                           /* 5.19 */
    0,
};

static void note_add(char *note, size_t note_len, const char *fmt, ...)
{
    size_t used = strlen(note);
    if (used && used + 2 < note_len) {
        strcpy(note + used, "; ");
        used += 2;
    }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(note + used, note_len - used, fmt, ap);
    va_end(ap);
}

static int setup_ring(struct io_uring *ring, unsigned entries)
{
    int rc = -EINVAL;
    for (size_t i = 0; i < sizeof setup_ladder / sizeof setup_ladder[0] && rc == -EINVAL; i++) {
        struct io_uring_params p = {.flags = setup_ladder[i]};
        rc = io_uring_queue_init_params(entries, ring, &p);
    }
    return rc;
}

static bool reads_supported(struct io_uring *ring)
{
    struct io_uring_probe *probe = io_uring_get_probe_ring(ring);
    bool ok = probe && io_uring_opcode_supported(probe, IORING_OP_READ) &&
              io_uring_opcode_supported(probe, IORING_OP_READ_FIXED);
    io_uring_free_probe(probe);
    return ok;
}

/* A descriptor that is not open becomes an empty slot (-1), whose reads fail with EBADF
 * just as they would through the bad descriptor itself. */
static int register_files(struct k3io_reader *r, struct k3io_ring *u)
{
    if (!r->n_files)
        return 0;
    int *table = malloc((size_t)r->n_files * sizeof *table);
    if (!table)
        return -ENOMEM;
    for (int i = 0; i < r->n_files; i++)
        table[i] = fcntl(r->fds[i], F_GETFD) >= 0 ? r->fds[i] : -1;
    int rc = io_uring_register_files(&u->ring, table, (unsigned)r->n_files);
    free(table);
    u->fixed_files = rc == 0;
    return rc;
}

int k3io__ring_open(struct k3io_reader *r, struct k3io_ring *u, unsigned entries,
                    const char **failed_call, char *note, size_t note_len)
{
    *u = (struct k3io_ring){0};
    int rc = setup_ring(&u->ring, entries);
    if (rc) {
        *failed_call = "io_uring_queue_init_params";
        return rc;
    }
    if (!reads_supported(&u->ring)) {
        *failed_call = "io_uring_get_probe_ring: no READ or READ_FIXED";
        io_uring_queue_exit(&u->ring);
        return -EOPNOTSUPP;
    }
    rc = register_files(r, u);
    if (rc)
        note_add(note, note_len, "io_uring: registered files unavailable "
                 "(io_uring_register_files: %s); plain fds", strerror(-rc));
    if (r->area) {
        bool whole;
        rc = k3io__ring_register_area(r, u, &whole);
        if (rc)
            note_add(note, note_len, "io_uring: registered buffers unavailable "
                     "(io_uring_register_buffers: %s); plain reads", strerror(-rc));
        else if (whole)
            note_add(note, note_len, "io_uring: the read area registered whole at start-up, "
                     "all of it faulted in (io_uring_register_buffers_sparse needs Linux 5.19)");
    }
    return 0;
}

static int uring_init(struct k3io_reader *r, const char **failed_call, char *note, size_t note_len)
{
    struct k3io_ring *u = calloc(1, sizeof *u);
    if (!u) {
        *failed_call = "calloc";
        return -ENOMEM;
    }
    int rc = k3io__ring_open(r, u, r->queue_depth, failed_call, note, note_len);
    if (rc) {
        free(u);
        return rc;
    }
    r->backend = u;
    return 0;
}

static void uring_exit(struct k3io_reader *r)
{
    struct k3io_ring *u = r->backend;
    k3io__ring_close(u);
    free(u);
}

void k3io__ring_prep(struct k3io_reader *r, struct k3io_ring *u,
                     struct io_uring_sqe *sqe, struct k3io_chunk *c)
{
    int fd = u->fixed_files ? (int)c->file : r->fds[c->file];
    size_t piece = r->area ? (size_t)(c->buf - r->area) / r->piece_bytes : 0;
    if (r->area && k3io__ring_piece_ready(r, u, piece))
        io_uring_prep_read_fixed(sqe, fd, c->buf, c->len, c->offset, (int)piece);
    else
        io_uring_prep_read(sqe, fd, c->buf, c->len, c->offset);
    if (u->fixed_files)
        sqe->flags |= IOSQE_FIXED_FILE;
    io_uring_sqe_set_data(sqe, c);
}

static void uring_queue(struct k3io_reader *r, struct k3io_chunk *c)
{
    struct k3io_ring *u = r->backend;
    struct io_uring_sqe *sqe = io_uring_get_sqe(&u->ring);
    /* Never NULL: unsubmitted SQEs <= chunks in flight <= queue_depth <= SQ entries. */
    assert(sqe);
    k3io__ring_prep(r, u, sqe, c);
}

/* -EAGAIN and -EBUSY from io_uring_enter mean the kernel took nothing until completions
 * are reaped; the SQEs stay in the ring and the next enter (in reap) submits them. */
bool k3io__enter_transient(int rc)
{
    return rc == -EINTR || rc == -EAGAIN || rc == -EBUSY;
}

static int uring_flush(struct k3io_reader *r)
{
    struct k3io_ring *u = r->backend;
    int rc = 0;
    /* liburing enters the kernel only when something is staged */
    while (io_uring_sq_ready(&u->ring) && (k3io__syscall(r), rc = io_uring_submit(&u->ring)) == -EINTR)
        ;
    return rc < 0 && !k3io__enter_transient(rc) ? rc : 0;
}

static unsigned drain(struct k3io_reader *r, struct k3io_ring *u)
{
    struct io_uring_cqe *cqes[64];
    unsigned total = 0, n;
    while ((n = io_uring_peek_batch_cqe(&u->ring, cqes, 64)) > 0) {
        double landed = k3io__now();
        for (unsigned i = 0; i < n; i++) {
            struct k3io_chunk *c = io_uring_cqe_get_data(cqes[i]);
            c->landed = landed;
            k3io__chunk_done(r, c, cqes[i]->res);
        }
        io_uring_cq_advance(&u->ring, n);
        total += n;
    }
    return total;
}

/* Submits what is staged and waits for one completion, at most until (a deadline on
 * CLOCK_MONOTONIC; 0: does not wait, INFINITY: no limit); -ETIME is not an error. */
static int submit_and_wait_until(struct io_uring *ring, double until)
{
    double left = isinf(until) ? INFINITY : until - k3io__now();
    if (left <= 0)
        return io_uring_submit_and_get_events(ring);
    if (isinf(left))
        return io_uring_submit_and_wait(ring, 1);
    double whole = floor(left);
    struct __kernel_timespec ts = {.tv_sec = (long long)whole,
                                   .tv_nsec = (long long)((left - whole) * 1e9)};
    struct io_uring_cqe *cqe;
    int rc = io_uring_submit_and_wait_timeout(ring, &cqe, 1, &ts, NULL);
    return rc == -ETIME ? 0 : rc;
}

/* With DEFER_TASKRUN, completions are only posted inside io_uring_enter(GETEVENTS), and
 * liburing 2.3's peek enters the kernel only for the TASKRUN or overflow flags; so every
 * reap enters with GETEVENTS (submit_and_get_events, submit_and_wait) before peeking. */
static int uring_reap(struct k3io_reader *r, double until)
{
    struct k3io_ring *u = r->backend;
    for (;;) {
        k3io__syscall(r);
        int rc = submit_and_wait_until(&u->ring, until);
        if (rc < 0 && !k3io__enter_transient(rc))
            return rc;
        if (drain(r, u) || until <= 0 || k3io__now() >= until)
            return 0;
        if (rc == -EINTR || rc >= 0)
            continue;
        /* Refused with nothing reaped: wait for a completion without submitting, or, with
         * nothing of ours in the kernel (liburing#281), give it a moment. */
        if (r->inflight > io_uring_sq_ready(&u->ring)) {
            struct io_uring_cqe *cqe;
            k3io__syscall(r);
            io_uring_wait_cqe(&u->ring, &cqe);
        } else {
            nanosleep(&(struct timespec){.tv_nsec = 1000000}, NULL);
        }
    }
}

const struct k3io_ops k3io_uring_ops = {
    .name = "io_uring",
    .init = uring_init,
    .exit = uring_exit,
    .queue = uring_queue,
    .flush = uring_flush,
    .reap = uring_reap,
};
