/* The pread backend: a fixed pool of worker threads behind a mutex, a work FIFO and a
 * completion FIFO.  Used where io_uring is unavailable (ENOSYS, EPERM from the sysctl or
 * a seccomp profile) or not wanted.  Workers only read; what a result means is decided
 * by the shared layer on the reader's thread when it reaps. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#include "iouring/reader_internal.h"

struct pool {
    pthread_mutex_t lock;
    pthread_cond_t work_ready;  /* workers wait here */
    pthread_cond_t done_ready;  /* the reader's thread waits here */
    struct k3io_fifo work, done; /* under lock */
    bool stopping;              /* under lock */
    struct k3io_fifo staged;    /* the reader's thread only: queued, not yet flushed */
    unsigned n_staged;
    const int *fds;             /* [n_files], read-only while workers run */
    struct k3io_reader *r;      /* workers touch only its syscall counter (atomic) */
    int n_threads;
    pthread_t threads[];
};

/* Workers leave only when told to stop and the work FIFO is empty, so destroy never
 * abandons a read that could still land in the caller's memory. */
static void *worker(void *arg)
{
    struct pool *p = arg;
    pthread_mutex_lock(&p->lock);
    for (;;) {
        while (!p->work.head && !p->stopping)
            pthread_cond_wait(&p->work_ready, &p->lock);
        struct k3io_chunk *c = k3io__fifo_pop(&p->work);
        if (!c)
            break;
        pthread_mutex_unlock(&p->lock);
        k3io__syscall(p->r);
        ssize_t n = pread(p->fds[c->file], c->buf, c->len, (off_t)c->offset);
        c->res = n < 0 ? -errno : (int32_t)n;
        c->landed = k3io__now();
        pthread_mutex_lock(&p->lock);
        k3io__fifo_push(&p->done, c);
        pthread_cond_signal(&p->done_ready);
    }
    pthread_mutex_unlock(&p->lock);
    return NULL;
}

static void stop_workers(struct pool *p, int started)
{
    pthread_mutex_lock(&p->lock);
    p->stopping = true;
    pthread_cond_broadcast(&p->work_ready);
    pthread_mutex_unlock(&p->lock);
    for (int i = 0; i < started; i++)
        pthread_join(p->threads[i], NULL);
}

static void free_pool(struct pool *p)
{
    pthread_cond_destroy(&p->done_ready);
    pthread_cond_destroy(&p->work_ready);
    pthread_mutex_destroy(&p->lock);
    free(p);
}

static int pool_init(struct k3io_reader *r, const char **failed_call, char *note, size_t note_len)
{
    struct pool *p = calloc(1, sizeof *p + (size_t)r->pread_threads * sizeof(pthread_t));
    if (!p) {
        *failed_call = "calloc";
        return -ENOMEM;
    }
    p->fds = r->fds;
    p->r = r;
    p->n_threads = r->pread_threads;
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->work_ready, NULL);
    int rc = k3io__cond_init(&p->done_ready);
    if (rc) {
        pthread_cond_destroy(&p->work_ready);
        pthread_mutex_destroy(&p->lock);
        free(p);
        *failed_call = "pthread_cond_init";
        return rc;
    }
    for (int i = 0; i < p->n_threads; i++) {
        rc = pthread_create(&p->threads[i], NULL, worker, p);
        if (rc) {
            stop_workers(p, i);
            free_pool(p);
            *failed_call = "pthread_create";
            return -rc;
        }
    }
    r->backend = p;
    return 0;
}

static void pool_exit(struct k3io_reader *r)
{
    struct pool *p = r->backend;
    stop_workers(p, p->n_threads);
    free_pool(p);
}

static void pool_queue(struct k3io_reader *r, struct k3io_chunk *c)
{
    struct pool *p = r->backend;
    k3io__fifo_push(&p->staged, c);
    p->n_staged++;
}

/* One lock for the whole batch; a wake-up per chunk, or all workers for a big one. */
static int pool_flush(struct k3io_reader *r)
{
    struct pool *p = r->backend;
    if (!p->n_staged)
        return 0;
    pthread_mutex_lock(&p->lock);
    k3io__fifo_splice(&p->work, &p->staged);
    if (p->n_staged >= (unsigned)p->n_threads)
        pthread_cond_broadcast(&p->work_ready);
    else
        for (unsigned i = 0; i < p->n_staged; i++)
            pthread_cond_signal(&p->work_ready);
    pthread_mutex_unlock(&p->lock);
    p->n_staged = 0;
    return 0;
}

static int pool_reap(struct k3io_reader *r, double until)
{
    struct pool *p = r->backend;
    pool_flush(r);
    return k3io__reap_handoff(r, &p->lock, &p->done_ready, &p->done, NULL, until);
}

const struct k3io_ops k3io_pool_ops = {
    .name = "pread",
    .init = pool_init,
    .exit = pool_exit,
    .queue = pool_queue,
    .flush = pool_flush,
    .reap = pool_reap,
};
