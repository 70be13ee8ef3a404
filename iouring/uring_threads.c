/* The io_uring backend with I/O threads: io_threads workers, each owning a ring it set up
 * itself (SINGLE_ISSUER and DEFER_TASKRUN tie a ring to its creator) and reading the files
 * file_thread gives it.  Meant as one per NUMA node, pinned there by thread_start, so
 * that a drive's reads are submitted, and complete, on the drive's own node.
 *
 * The reader's thread hands chunks to a worker through its work FIFO and wakes it with an
 * eventfd the worker always has a read posted on in its ring, so one io_uring_enter waits
 * for both new work and completions; results come back through one done FIFO, as in the
 * pread pool (pool.c).  What a result means is decided on the reader's thread
 * (k3io__chunk_done), and a retry comes back through queue() to the same worker.
 *
 * An io_uring_enter that fails for good (not EINTR, EAGAIN or EBUSY) stops its worker:
 * the error is kept and every later flush and reap returns it, as the single-ring
 * backend's do (uring.c), so the caller learns it instead of waiting for completions
 * that will never come.  As there, the reads that ring had in the kernel cannot be
 * reaped; the worker waits to be stopped and the ring is torn down. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "iouring/reader_internal.h"

struct threads;

struct worker {
    struct threads *t;
    int index;
    pthread_t thread;
    int efd;                     /* written by the reader's thread to wake the worker */
    uint64_t efd_count;          /* where the worker's posted eventfd read lands */
    struct k3io_fifo work;       /* under t->lock */
    struct k3io_fifo staged;     /* the reader's thread only: queued, not yet flushed */
};

struct threads {
    struct k3io_reader *r;       /* read-only while workers run */
    pthread_mutex_t lock;
    pthread_cond_t done_ready;   /* the reader's thread waits here */
    pthread_cond_t started;      /* ... and here, for every ring to be set up */
    struct k3io_fifo done;       /* under lock */
    pthread_cond_t stop_wait;    /* a failed worker waits here to be stopped */
    bool stopping;               /* under lock */
    int error;                   /* under lock: a worker's ring failure (-errno), 0 none */
    int n_started;               /* under lock: workers past their ring's set-up */
    int init_rc;                 /* under lock: the first set-up failure */
    const char *failed_call;
    char note[256];              /* worker 0's registration notes */
    int n;
    struct worker w[];
};

static void post_eventfd_read(struct worker *w, struct io_uring *ring)
{
    struct io_uring_sqe *sqe = io_uring_get_sqe(ring);
    io_uring_prep_read(sqe, w->efd, &w->efd_count, sizeof w->efd_count, 0);
    io_uring_sqe_set_data(sqe, NULL);
}

/* The ring refuses io_uring_enter for good: the reader's next flush or reap returns rc,
 * and the worker waits to be stopped. */
static void worker_failed(struct threads *t, int rc)
{
    pthread_mutex_lock(&t->lock);
    if (!t->error)
        t->error = rc;
    pthread_cond_signal(&t->done_ready);
    while (!t->stopping)
        pthread_cond_wait(&t->stop_wait, &t->lock);
    pthread_mutex_unlock(&t->lock);
}

/* Started, a worker runs until told to stop with nothing in flight and its eventfd read
 * completed, so that nothing of its ring lands in memory after it leaves. */
static void *worker_main(void *arg)
{
    struct worker *w = arg;
    struct threads *t = w->t;
    struct k3io_reader *r = t->r;
    if (r->thread_start)
        r->thread_start(r->thread_ctx, w->index);
    struct k3io_ring u;
    const char *failed_call = "";
    char note[256] = "";
    /* queue_depth chunks at most, plus the eventfd read */
    int rc = k3io__ring_open(r, &u, r->queue_depth + 1, &failed_call, note, sizeof note);
    pthread_mutex_lock(&t->lock);
    t->n_started++;
    if (rc && !t->init_rc) {
        t->init_rc = rc;
        t->failed_call = failed_call;
    }
    if (w->index == 0)
        snprintf(t->note, sizeof t->note, "%s", note);
    pthread_cond_signal(&t->started);
    pthread_mutex_unlock(&t->lock);
    if (rc)
        return NULL;

    bool posted = false;
    unsigned inflight = 0;
    for (;;) {
        pthread_mutex_lock(&t->lock);
        struct k3io_fifo work = w->work;
        w->work = (struct k3io_fifo){0};
        bool stop = t->stopping;
        pthread_mutex_unlock(&t->lock);
        for (struct k3io_chunk *c; (c = k3io__fifo_pop(&work)); inflight++)
            k3io__ring_prep(r, &u, io_uring_get_sqe(&u.ring), c); /* never NULL: see above */
        if (stop && !inflight && !posted)
            break;
        if (!stop && !posted) {
            post_eventfd_read(w, &u.ring);
            posted = true;
        }
        k3io__syscall(r);
        rc = io_uring_submit_and_wait(&u.ring, 1);
        if (rc < 0 && !k3io__enter_transient(rc)) {
            worker_failed(t, rc);
            break;
        }
        struct k3io_fifo done = {0};
        struct io_uring_cqe *cqes[64];
        unsigned n;
        while ((n = io_uring_peek_batch_cqe(&u.ring, cqes, 64)) > 0) {
            double landed = k3io__now();
            for (unsigned i = 0; i < n; i++) {
                struct k3io_chunk *c = io_uring_cqe_get_data(cqes[i]);
                if (!c) {
                    posted = false;
                    continue;
                }
                c->res = cqes[i]->res;
                c->landed = landed;
                k3io__fifo_push(&done, c);
                inflight--;
            }
            io_uring_cq_advance(&u.ring, n);
        }
        if (done.head) {
            pthread_mutex_lock(&t->lock);
            k3io__fifo_splice(&t->done, &done);
            pthread_cond_signal(&t->done_ready);
            pthread_mutex_unlock(&t->lock);
        }
    }
    k3io__ring_close(&u);
    return NULL;
}

static void wake(struct worker *w)
{
    uint64_t one = 1;
    while (write(w->efd, &one, sizeof one) < 0 && errno == EINTR)
        ;
}

/* Stops and joins the first `started` workers, then frees everything. */
static void shut_down(struct threads *t, int started)
{
    pthread_mutex_lock(&t->lock);
    t->stopping = true;
    pthread_cond_broadcast(&t->stop_wait);
    pthread_mutex_unlock(&t->lock);
    for (int i = 0; i < started; i++) {
        wake(&t->w[i]);
        pthread_join(t->w[i].thread, NULL);
    }
    for (int i = 0; i < t->n; i++)
        if (t->w[i].efd >= 0)
            close(t->w[i].efd);
    pthread_cond_destroy(&t->stop_wait);
    pthread_cond_destroy(&t->started);
    pthread_cond_destroy(&t->done_ready);
    pthread_mutex_destroy(&t->lock);
    free(t);
}

static int threads_init(struct k3io_reader *r, const char **failed_call, char *note,
                        size_t note_len)
{
    struct threads *t = calloc(1, sizeof *t + (size_t)r->io_threads * sizeof t->w[0]);
    if (!t) {
        *failed_call = "calloc";
        return -ENOMEM;
    }
    t->r = r;
    t->n = r->io_threads;
    pthread_mutex_init(&t->lock, NULL);
    int rc = k3io__cond_init(&t->done_ready);
    if (rc) {
        pthread_mutex_destroy(&t->lock);
        free(t);
        *failed_call = "pthread_cond_init";
        return rc;
    }
    pthread_cond_init(&t->started, NULL);
    pthread_cond_init(&t->stop_wait, NULL);
    for (int i = 0; i < t->n; i++)
        t->w[i] = (struct worker){.t = t, .index = i, .efd = -1};
    int started = 0;
    for (; started < t->n; started++) {
        struct worker *w = &t->w[started];
        w->efd = eventfd(0, EFD_CLOEXEC);
        if (w->efd < 0) {
            rc = -errno;
            *failed_call = "eventfd";
            break;
        }
        rc = -pthread_create(&w->thread, NULL, worker_main, w);
        if (rc) {
            *failed_call = "pthread_create";
            break;
        }
    }
    pthread_mutex_lock(&t->lock);
    while (t->n_started < started)
        pthread_cond_wait(&t->started, &t->lock);
    if (!rc && t->init_rc) {
        rc = t->init_rc;
        *failed_call = t->failed_call;
    }
    pthread_mutex_unlock(&t->lock);
    if (rc) {
        shut_down(t, started);
        return rc;
    }
    snprintf(note, note_len, "%s", t->note);
    r->backend = t;
    return 0;
}

static void threads_exit(struct k3io_reader *r)
{
    struct threads *t = r->backend;
    shut_down(t, t->n);
}

static void threads_queue(struct k3io_reader *r, struct k3io_chunk *c)
{
    struct threads *t = r->backend;
    k3io__fifo_push(&t->w[r->file_thread[c->file]].staged, c);
}

/* One lock for the whole batch, and one wake-up per worker that got work.  Returns a
 * worker's ring failure, if any. */
static int threads_flush(struct k3io_reader *r)
{
    struct threads *t = r->backend;
    pthread_mutex_lock(&t->lock);
    for (int i = 0; i < t->n; i++)
        if (t->w[i].staged.head) {
            k3io__fifo_splice(&t->w[i].work, &t->w[i].staged);
            k3io__syscall(r);
            wake(&t->w[i]);
        }
    int rc = t->error;
    pthread_mutex_unlock(&t->lock);
    return rc;
}

static int threads_reap(struct k3io_reader *r, double until)
{
    struct threads *t = r->backend;
    threads_flush(r);
    return k3io__reap_handoff(r, &t->lock, &t->done_ready, &t->done, &t->error, until);
}

const struct k3io_ops k3io_uring_threads_ops = {
    .name = "io_uring threads",
    .init = threads_init,
    .exit = threads_exit,
    .queue = threads_queue,
    .flush = threads_flush,
    .reap = threads_reap,
};
