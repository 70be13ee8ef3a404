/* The shared layer of the reader: requests, chunks, retries, the pending FIFO, counters
 * and the choice of backend.  The backends (uring.c, pool.c) only start chunks and hand
 * back their raw results; every decision about a result is taken here, so both behave
 * alike. */
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "iouring/file.h"
#include "iouring/reader_internal.h"

#define DEFAULT_PREAD_THREADS 8
/* Each background chunk in flight is one a foreground read may find ahead of it; 2
 * leaves a fast drive more than one read to stream at little cost over 1
 * (bench/prefetch-depth.sh; bench/results/engine-choices.md). */
#define DEFAULT_BACKGROUND_PER_FILE 2
#define REQUESTS_PER_BLOCK 64

struct k3io_block {
    struct k3io_block *next;
    struct k3io_request rq[REQUESTS_PER_BLOCK];
};

double k3io__now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ---- requests: allocated in blocks that live as long as the reader ---- */

static struct k3io_request *request_get(struct k3io_reader *r)
{
    if (!r->free_requests) {
        struct k3io_block *b = calloc(1, sizeof *b);
        if (!b)
            return NULL;
        b->next = r->blocks;
        r->blocks = b;
        for (int i = REQUESTS_PER_BLOCK - 1; i >= 0; i--) {
            b->rq[i].next = r->free_requests;
            r->free_requests = &b->rq[i];
        }
    }
    struct k3io_request *rq = r->free_requests;
    r->free_requests = rq->next;
    return rq;
}

static void request_put(struct k3io_reader *r, struct k3io_request *rq)
{
    rq->next = r->free_requests;
    r->free_requests = rq;
}

static void push(struct k3io_request **head, struct k3io_request **tail, struct k3io_request *rq)
{
    rq->next = NULL;
    if (*tail)
        (*tail)->next = rq;
    else
        *head = rq;
    *tail = rq;
}

static struct k3io_request *pop(struct k3io_request **head, struct k3io_request **tail)
{
    struct k3io_request *rq = *head;
    if (rq) {
        *head = rq->next;
        if (!*head)
            *tail = NULL;
    }
    return rq;
}

/* A request finishes when no more chunks will be cut from it and none is in flight, so
 * no read can still land in the caller's buffer after k3io_wait returns it. */
static void request_maybe_done(struct k3io_reader *r, struct k3io_request *rq)
{
    if (rq->carved && rq->inflight == 0 && !r->closing) {
        push(&r->done, &r->done_tail, rq);
        r->n_done++;
    }
}

static bool carving_over(const struct k3io_request *rq)
{
    return rq->error || rq->carve_at >= rq->carve_end;
}

/* ---- chunks ---- */

static void chunk_finish(struct k3io_reader *r, struct k3io_chunk *c)
{
    struct k3io_request *rq = c->rq;
    if (c->landed > rq->landed)
        rq->landed = c->landed;
    if (c->release > rq->release)
        rq->release = c->release;
    c->next = r->free_chunks;
    r->free_chunks = c;
    r->inflight--;
    r->background_inflight -= rq->background;
    rq->inflight--;
    request_maybe_done(r, rq);
}

/* The data ends at file offset end: nothing at or past it belongs to the request. */
static void chunk_hit_eof(struct k3io_reader *r, struct k3io_chunk *c, uint64_t end)
{
    if (end < c->rq->carve_end)
        c->rq->carve_end = end;
    chunk_finish(r, c);
}

/* c goes to the backend now (first time or again), timed by the drive model if any. */
static void chunk_start(struct k3io_reader *r, struct k3io_chunk *c)
{
    if (r->model)
        k3io__model_start(r, c);
    else
        c->started = k3io__now();
    if (!c->rq->started)
        c->rq->started = c->started;
    r->ops->queue(r, c);
}

static void chunk_retry(struct k3io_reader *r, struct k3io_chunk *c, int32_t res)
{
    if (res == -EAGAIN)
        r->stats.resubmit_eagain++;
    else
        r->stats.resubmit_eintr++;
    c->retries++;
    chunk_start(r, c);
}

void k3io__chunk_done(struct k3io_reader *r, struct k3io_chunk *c, int32_t res)
{
    if (r->model && k3io__model_hold(r, c, res))
        return;
    k3io__chunk_result(r, c, res);
}

void k3io__chunk_result(struct k3io_reader *r, struct k3io_chunk *c, int32_t res)
{
    if (r->fault) {
        struct k3io_fault_at at = {.tag = c->rq->req.tag, .file = c->file, .len = c->len,
                                   .offset = c->offset};
        res = r->fault(r->fault_ctx, &at, res);
    }
    if (res > 0)
        r->stats.bytes += (uint64_t)res;
    if (r->closing) { /* destroy is draining: only the slot matters */
        chunk_finish(r, c);
        return;
    }
    struct k3io_request *rq = c->rq;
    if (res < 0) {
        if ((res == -EAGAIN || res == -EINTR) && c->retries < K3IO_MAX_RETRIES) {
            chunk_retry(r, c, res);
            return;
        }
        if (!rq->error)
            rq->error = res;
        chunk_finish(r, c);
        return;
    }
    uint32_t got = (uint32_t)res < c->len ? (uint32_t)res : c->len;
    if (got == c->len) {
        chunk_finish(r, c);
        return;
    }
    if (got == 0) {
        chunk_hit_eof(r, c, c->offset);
        return;
    }
    /* Short.  On a direct file an unaligned count only happens at end of file (and the
     * remainder could not be read with O_DIRECT anyway); otherwise read the rest. */
    if (r->direct[c->file] && got % K3IO_ALIGN) {
        chunk_hit_eof(r, c, c->offset + got);
        return;
    }
    r->stats.resubmit_short++;
    c->offset += got;
    c->buf += got;
    c->len -= got;
    chunk_start(r, c);
}

/* Cuts chunks from one FIFO into free slots and stages them, with at most limit of them
 * in flight when limited is given (it counts them); returns false when the FIFO still
 * holds requests. */
static bool carve_from(struct k3io_reader *r, struct k3io_request **head, struct k3io_request **tail,
                       unsigned *limited, unsigned limit)
{
    while (*head) {
        struct k3io_request *rq = *head;
        if (carving_over(rq)) {
            pop(head, tail);
            rq->carved = true;
            request_maybe_done(r, rq);
            continue;
        }
        struct k3io_chunk *c = r->free_chunks;
        if (!c || (limited && *limited >= limit))
            return false;
        r->free_chunks = c->next;
        char *buf = (char *)rq->req.buf + (rq->carve_at - rq->req.offset);
        uint64_t len = rq->carve_end - rq->carve_at;
        if (len > r->max_io_bytes)
            len = r->max_io_bytes;
        if (r->area) {
            uint64_t piece_left = r->piece_bytes - (uint64_t)(buf - r->area) % r->piece_bytes;
            if (len > piece_left)
                len = piece_left;
        }
        *c = (struct k3io_chunk){.rq = rq, .file = rq->req.file, .len = (uint32_t)len,
                                 .offset = rq->carve_at, .buf = buf};
        rq->carve_at += len;
        rq->inflight++;
        r->inflight++;
        if (limited)
            (*limited)++;
        r->stats.chunks++;
        chunk_start(r, c);
    }
    return true;
}

/* The foreground first; background chunks only once no foreground request waits. */
static void carve(struct k3io_reader *r)
{
    if (carve_from(r, &r->pending, &r->pending_tail, NULL, 0))
        carve_from(r, &r->background, &r->background_tail, &r->background_inflight,
                   r->background_depth);
}

int k3io__cond_init(pthread_cond_t *c)
{
    pthread_condattr_t attr;
    int rc = pthread_condattr_init(&attr);
    if (!rc)
        rc = pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    if (!rc)
        rc = pthread_cond_init(c, &attr);
    pthread_condattr_destroy(&attr);
    return -rc;
}

int k3io__reap_handoff(struct k3io_reader *r, pthread_mutex_t *lock, pthread_cond_t *ready,
                       struct k3io_fifo *done, const int *failed, double until)
{
    struct k3io_fifo mine = {0};
    pthread_mutex_lock(lock);
    if (isinf(until)) {
        while (!done->head && !(failed && *failed))
            pthread_cond_wait(ready, lock);
    } else if (until > 0) {
        double whole = floor(until);
        struct timespec ts = {.tv_sec = (time_t)whole, .tv_nsec = (long)((until - whole) * 1e9)};
        while (!done->head && !(failed && *failed) &&
               pthread_cond_timedwait(ready, lock, &ts) != ETIMEDOUT)
            ;
    }
    k3io__fifo_splice(&mine, done);
    int rc = failed ? *failed : 0;
    pthread_mutex_unlock(lock);
    /* chunk_done may stage the same chunk again (a retry), so pop before handing over */
    struct k3io_chunk *c;
    while ((c = k3io__fifo_pop(&mine)))
        k3io__chunk_done(r, c, c->res);
    return rc;
}

/* ---- the public interface ---- */

static int check_config(const struct k3io_config *cfg)
{
    if (cfg->n_files < 0 || (cfg->n_files > 0 && !cfg->fds))
        return -EINVAL;
    if (cfg->area_bytes && !cfg->area)
        return -EINVAL;
    if (cfg->queue_depth > K3IO_MAX_QUEUE_DEPTH)
        return -EINVAL;
    if (cfg->max_io_bytes % K3IO_ALIGN || cfg->max_io_bytes > K3IO_MAX_IO)
        return -EINVAL;
    if (cfg->pread_threads < 0)
        return -EINVAL;
    if (cfg->backend != K3IO_AUTO && cfg->backend != K3IO_URING && cfg->backend != K3IO_PREAD)
        return -EINVAL;
    if (cfg->io_threads < 0 || (cfg->io_threads > 1 && !cfg->file_thread && cfg->n_files))
        return -EINVAL;
    if (!(cfg->model.rate >= 0) || !(cfg->model.latency >= 0) || isinf(cfg->model.rate) ||
        isinf(cfg->model.latency))
        return -EINVAL;
    for (int i = 0; cfg->io_threads > 1 && i < cfg->n_files; i++)
        if (cfg->file_thread[i] < 0 || cfg->file_thread[i] >= cfg->io_threads)
            return -EINVAL;
    return 0;
}

static int copy_config(struct k3io_reader *r, const struct k3io_config *cfg)
{
    r->n_files = cfg->n_files;
    r->area = cfg->area_bytes ? cfg->area : NULL;
    r->area_bytes = cfg->area_bytes;
    r->piece_bytes = k3io__area_piece_bytes(r->area_bytes);
    r->queue_depth = cfg->queue_depth ? cfg->queue_depth : K3IO_DEFAULT_QUEUE_DEPTH;
    r->max_io_bytes = cfg->max_io_bytes ? cfg->max_io_bytes : K3IO_DEFAULT_MAX_IO;
    r->pread_threads = cfg->pread_threads ? cfg->pread_threads : DEFAULT_PREAD_THREADS;
    r->background_depth = cfg->background_depth ? cfg->background_depth
                                                : DEFAULT_BACKGROUND_PER_FILE * (unsigned)cfg->n_files;
    if (r->background_depth > r->queue_depth || !r->background_depth)
        r->background_depth = r->queue_depth;
    r->io_threads = cfg->io_threads;
    r->thread_start = cfg->thread_start;
    r->thread_ctx = cfg->thread_ctx;
    r->fds = calloc((size_t)r->n_files + 1, sizeof *r->fds);
    r->direct = calloc((size_t)r->n_files + 1, sizeof *r->direct);
    r->file_thread = calloc((size_t)r->n_files + 1, sizeof *r->file_thread);
    r->chunks = calloc(r->queue_depth, sizeof *r->chunks);
    if (!r->fds || !r->direct || !r->file_thread || !r->chunks)
        return -ENOMEM;
    for (int i = 0; i < r->n_files; i++) {
        r->fds[i] = cfg->fds[i];
        r->file_thread[i] = r->io_threads > 1 ? cfg->file_thread[i] : 0;
        int fl = fcntl(cfg->fds[i], F_GETFL);
        r->direct[i] = fl >= 0 && (fl & O_DIRECT); /* a bad fd fails at read time */
    }
    for (unsigned i = r->queue_depth; i-- > 0;) {
        r->chunks[i].next = r->free_chunks;
        r->free_chunks = &r->chunks[i];
    }
    return 0;
}

static void free_reader(struct k3io_reader *r)
{
    k3io__model_destroy(r);
    while (r->blocks) {
        struct k3io_block *b = r->blocks;
        r->blocks = b->next;
        free(b);
    }
    free(r->chunks);
    free(r->direct);
    free(r->file_thread);
    free(r->fds);
    free(r);
}

int k3io_reader_create(struct k3io_reader **out, const struct k3io_config *cfg, char *note,
                       size_t note_len)
{
    char scratch[1];
    if (!note || !note_len) {
        note = scratch;
        note_len = sizeof scratch;
    }
    note[0] = 0;
    *out = NULL;
    int rc = check_config(cfg);
    if (rc)
        return rc;
    struct k3io_reader *r = calloc(1, sizeof *r);
    if (!r)
        return -ENOMEM;
    rc = copy_config(r, cfg);
    if (!rc && cfg->model.rate > 0)
        rc = k3io__model_create(r, &cfg->model);
    if (rc) {
        free_reader(r);
        return rc;
    }
    const char *failed_call = "";
    int why = 0; /* io_uring's refusal, when falling back */
    if (cfg->backend != K3IO_PREAD) {
        r->ops = r->io_threads > 1 ? &k3io_uring_threads_ops : &k3io_uring_ops;
        why = r->ops->init(r, &failed_call, note, note_len);
        if (!why) {
            if (r->area_by_piece)
                k3io__ahead_start(r); /* without it, registering faults pieces in */
            *out = r;
            return 0;
        }
        snprintf(note, note_len, "io_uring unavailable (%s: %s)", failed_call, strerror(-why));
        if (cfg->backend == K3IO_URING) {
            free_reader(r);
            return why;
        }
    }
    r->ops = &k3io_pool_ops;
    rc = r->ops->init(r, &failed_call, note, note_len);
    if (rc) {
        size_t used = strlen(note);
        snprintf(note + used, note_len - used, "%spread threads unavailable (%s: %s)",
                 used ? "; " : "", failed_call, strerror(-rc));
        free_reader(r);
        return rc;
    }
    if (why) {
        size_t used = strlen(note);
        snprintf(note + used, note_len - used, "; %d pread threads", r->pread_threads);
    }
    *out = r;
    return 0;
}

void k3io_reader_destroy(struct k3io_reader *r)
{
    if (!r)
        return;
    /* Reads still in flight target the caller's memory: wait for every one of them. */
    r->closing = true;
    if (r->model)
        k3io__model_let_go(r);
    while (r->inflight && r->ops->reap(r, INFINITY) == 0)
        ;
    r->ops->exit(r);
    k3io__ahead_stop(r);
    free_reader(r);
}

static bool request_valid(const struct k3io_reader *r, const struct k3io_req *q)
{
    if (q->file >= (uint32_t)r->n_files || q->len == 0 || q->len > INT32_MAX || !q->buf)
        return false;
    if (!r->area)
        return true;
    const char *b = q->buf;
    return b >= r->area && (size_t)(b - r->area) <= r->area_bytes &&
           q->len <= r->area_bytes - (size_t)(b - r->area);
}

static int submit(struct k3io_reader *r, const struct k3io_req *reqs, int n, bool background)
{
    if (n < 0)
        return -EINVAL;
    for (int i = 0; i < n; i++)
        if (!request_valid(r, &reqs[i]))
            return -EINVAL;
    int refused = r->refuse && n > 0 ? r->refuse(r->refuse_ctx, n) : 0;
    if (refused)
        return refused;
    struct k3io_request *head = NULL, *tail = NULL, *rq;
    for (int i = 0; i < n; i++) {
        if (!(rq = request_get(r))) { /* all or nothing */
            while ((rq = pop(&head, &tail)))
                request_put(r, rq);
            return -ENOMEM;
        }
        *rq = (struct k3io_request){.req = reqs[i], .carve_at = reqs[i].offset,
                                    .carve_end = reqs[i].offset + reqs[i].len,
                                    .background = background};
        push(&head, &tail, rq);
    }
    struct k3io_request **fifo = background ? &r->background : &r->pending,
                        **fifo_tail = background ? &r->background_tail : &r->pending_tail;
    if (head) {
        if (*fifo_tail)
            (*fifo_tail)->next = head;
        else
            *fifo = head;
        *fifo_tail = tail;
    }
    r->outstanding += n;
    r->stats.requests += (uint64_t)n;
    carve(r);
    /* Queued, so the caller counts them in flight: a backend that cannot start them
     * fails every later flush and reap, and k3io_wait says so. */
    if (!r->plugged)
        r->ops->flush(r);
    return 0;
}

void k3io_plug(struct k3io_reader *r)
{
    r->plugged++;
}

int k3io_unplug(struct k3io_reader *r)
{
    assert(r->plugged > 0);
    return --r->plugged ? 0 : r->ops->flush(r);
}

int k3io_submit(struct k3io_reader *r, const struct k3io_req *reqs, int n)
{
    return submit(r, reqs, n, false);
}

int k3io_submit_background(struct k3io_reader *r, const struct k3io_req *reqs, int n)
{
    return submit(r, reqs, n, true);
}

int k3io_drop(struct k3io_reader *r, bool (*drop)(void *ctx, uint64_t tag), void *ctx)
{
    int dropped = 0;
    struct k3io_request *keep = NULL, *keep_tail = NULL, *rq;
    while ((rq = pop(&r->background, &r->background_tail))) {
        if (rq->carve_at == rq->req.offset && !rq->error && drop(ctx, rq->req.tag)) {
            request_put(r, rq);
            dropped++;
        } else {
            push(&keep, &keep_tail, rq);
        }
    }
    r->background = keep;
    r->background_tail = keep_tail;
    r->outstanding -= dropped;
    return dropped;
}

/* Hands finished chunks to chunk_done (blocking for one when wait), then cuts chunks for
 * the freed slots; they start with the next reap or flush.  Through the drive model,
 * "finished" means released. */
static int reap(struct k3io_reader *r, bool wait)
{
    double t0 = wait ? k3io__now() : 0, until = wait ? INFINITY : 0;
    int rc = r->model ? k3io__model_reap(r, until) : r->ops->reap(r, until);
    if (wait)
        r->stats.wait_seconds += k3io__now() - t0;
    carve(r);
    return rc;
}

int k3io_wait(struct k3io_reader *r, struct k3io_done *out, int max, int min)
{
    if (max < 0 || min < 0 || (max && !out))
        return -EINVAL;
    if (min > max)
        min = max;
    if (min > r->outstanding)
        min = r->outstanding;
    int rc = 0;
    if (min == 0)
        rc = reap(r, false); /* only what has landed */
    while (!rc && r->n_done < min) {
        /* Something is in flight whenever a request is neither done nor returned: carve
         * fills every free slot and finishes requests that need no more reads.  Each
         * blocking reap also starts what the last one staged, in the same system call. */
        assert(r->inflight > 0);
        rc = reap(r, true);
    }
    if (!rc)
        rc = r->ops->flush(r); /* refills and retries staged by the last reap */
    if (rc)
        return rc;
    int n = 0;
    struct k3io_request *rq;
    while (n < max && (rq = pop(&r->done, &r->done_tail))) {
        out[n] = (struct k3io_done){
            .tag = rq->req.tag,
            .res = rq->error ? rq->error : (int32_t)(rq->carve_end - rq->req.offset),
            .started = rq->started,
            .landed = rq->landed,
            .release = rq->release,
        };
        request_put(r, rq);
        n++;
    }
    r->n_done -= n;
    r->outstanding -= n;
    return n;
}

int k3io_pending(const struct k3io_reader *r)
{
    return r->outstanding;
}

const char *k3io_backend_name(const struct k3io_reader *r)
{
    return r->ops->name;
}

struct k3io_stats k3io_stats(const struct k3io_reader *r)
{
    struct k3io_stats st = r->stats;
    st.syscalls = atomic_load(&r->syscalls);
    st.area_taken_bytes = atomic_load(&r->area_taken_bytes);
    st.area_take_seconds = atomic_load(&r->area_take_ns) / 1e9;
    k3io__ahead_stats(r, &st);
    return st;
}

void k3io_set_fault(struct k3io_reader *r, k3io_fault_fn fn, void *ctx)
{
    r->fault = fn;
    r->fault_ctx = ctx;
}

void k3io_set_refusal(struct k3io_reader *r, k3io_refuse_fn fn, void *ctx)
{
    r->refuse = fn;
    r->refuse_ctx = ctx;
}
