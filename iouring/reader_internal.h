/* Inside the reader: the bookkeeping shared by both backends (reader.c) and the ops
 * table each backend fills (uring.c, pool.c).
 *
 * A request is cut into chunks of at most max_io_bytes, never crossing a 1 GiB boundary
 * of the area (a registered buffer is at most 1 GiB).  At most queue_depth chunks are in
 * flight; requests that do not fit wait in a FIFO and are carved as chunks finish.  The
 * backend only moves chunks: it starts them and hands back each one's raw result to
 * k3io__chunk_done, which decides between resubmitting, finishing the chunk and finishing
 * the request.  Only the thread that owns the reader touches anything here except where
 * pool.c says otherwise.
 */
#ifndef K3IO_READER_INTERNAL_H
#define K3IO_READER_INTERNAL_H

#include <liburing.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "iouring/reader.h"

/* A registered buffer may not exceed 1 GiB (io_uring_register(2)); chunks never cross
 * a boundary of these pieces of the area, so each lies in one registered buffer. */
#define K3IO_AREA_PIECE (1ull << 30)
_Static_assert(K3IO_MAX_IO <= K3IO_AREA_PIECE, "a chunk fits in one registered buffer");
/* The area is cut into pieces of K3IO_PIECE_MIN, doubled until at most K3IO_PIECES_MAX
 * cover it (the kernel takes 16384 registered buffers; 4096 pieces of 32 MiB cover
 * 128 GiB): each is registered, so pinned and faulted in, when a read first reaches it
 * (uring_buffers.c), so the smaller, the less is taken ahead of use. */
#define K3IO_PIECE_MIN (32ull << 20)
#define K3IO_PIECES_MAX 4096u
size_t k3io__area_piece_bytes(size_t area_bytes);
/* -EAGAIN and -EINTR are resubmitted this many times per chunk before the error stands. */
#define K3IO_MAX_RETRIES 32

struct k3io_request {             /* one caller request, from k3io_submit to k3io_wait */
    struct k3io_req req;
    uint64_t carve_at;            /* file offset of the first byte not yet carved */
    uint64_t carve_end;           /* carve up to here: offset + len, lowered at end of file */
    uint32_t inflight;            /* chunks started and not finished */
    int32_t error;                /* the first chunk's -errno, 0 if none */
    double started, landed, release; /* as k3io_done's: the first chunk's start, the
                                  * last landing and release */
    bool carved;                  /* left the pending FIFO: no more chunks will be cut */
    bool background;              /* k3io_submit_background's: waits for the foreground */
    struct k3io_request *next;    /* pending, done or free list */
};

struct k3io_chunk {               /* one read, at most max_io_bytes; a slot of queue_depth */
    struct k3io_request *rq;
    uint32_t file;                /* index into fds */
    uint32_t len;
    uint64_t offset;
    char *buf;
    uint32_t retries;             /* -EAGAIN/-EINTR resubmissions so far */
    int32_t res;                  /* the thread backends: the worker's result; model.c: a
                                   * held chunk's */
    double started;               /* CLOCK_MONOTONIC seconds: handed to the backend */
    double landed;                /* its result came back (set by the backend) */
    double release;               /* drive model: not handed on before (0: no model) */
    unsigned heap_at;             /* model.c: its place in the heap of timed chunks */
    bool held;                    /* model.c: landed early, waiting for its release */
    bool late;                    /* model.c: due while the caller waited, not landed */
    struct k3io_chunk *next;      /* free list or a backend's queue */
};

struct k3io_reader;

/* A backend, as fio's engines are: a map of what it does at a glance. */
struct k3io_ops {
    const char *name;
    /* Sets up the backend; on failure returns -errno and names the failing call in
     * *failed_call.  May append a sentence to note (a lesser fallback it took). */
    int (*init)(struct k3io_reader *r, const char **failed_call, char *note, size_t note_len);
    /* Frees the backend; nothing is in flight by then. */
    void (*exit)(struct k3io_reader *r);
    /* Stages a chunk (its slot is already counted in flight); cannot fail. */
    void (*queue)(struct k3io_reader *r, struct k3io_chunk *c);
    /* Starts what is staged, in as few system calls as the backend can. */
    int (*flush)(struct k3io_reader *r);
    /* Starts what is staged and hands every finished chunk, its landed time set, to
     * k3io__chunk_done; blocks until at least one has finished (some must be in flight)
     * or CLOCK_MONOTONIC reads until (seconds; 0: never blocks, INFINITY: no limit). */
    int (*reap)(struct k3io_reader *r, double until);
};

extern const struct k3io_ops k3io_uring_ops;
extern const struct k3io_ops k3io_uring_threads_ops;
extern const struct k3io_ops k3io_pool_ops;

struct k3io_block;                /* requests are allocated in blocks, never freed early */

struct k3io_reader {
    const struct k3io_ops *ops;
    void *backend;                /* the ops' private state */

    int *fds;                     /* [n_files] */
    bool *direct;                 /* [n_files] O_DIRECT in effect: short reads resubmit only aligned */
    int n_files;
    char *area;                   /* [area_bytes] or NULL */
    size_t area_bytes;
    size_t piece_bytes;           /* k3io__area_piece_bytes(area_bytes): chunks never
                                   * cross a boundary of these pieces of the area */
    bool area_by_piece;           /* the area's pieces registered as reads first reach
                                   * them (sparse tables): its memory is taken lazily */
    struct k3io_ahead *ahead;     /* area_ahead.c, or NULL */
    /* Pieces registered on first use (uring_buffers.c), by whichever thread submits:
     * their bytes, and the seconds spent (mostly faulting fresh memory in). */
    _Atomic uint64_t area_taken_bytes;
    _Atomic uint64_t area_take_ns;
    unsigned queue_depth;
    uint32_t max_io_bytes;
    unsigned plugged;             /* k3io_plug's depth: submit queues, flush waits */
    _Atomic uint64_t syscalls;    /* k3io_stats' syscalls, counted by every thread */
    int pread_threads;
    int io_threads;               /* > 1: k3io_uring_threads_ops */
    int *file_thread;             /* [n_files] */
    void (*thread_start)(void *ctx, int thread);
    void *thread_ctx;

    struct k3io_chunk *chunks;    /* [queue_depth] */
    struct k3io_chunk *free_chunks;
    unsigned inflight;            /* chunks started and not finished */

    struct k3io_request *pending, *pending_tail; /* waiting to be carved, FIFO */
    struct k3io_request *background, *background_tail; /* carved when pending is empty */
    unsigned background_depth;    /* background chunks in flight at most */
    unsigned background_inflight;
    struct k3io_request *done, *done_tail;       /* finished, not yet returned, FIFO */
    int n_done;
    struct k3io_request *free_requests;
    struct k3io_block *blocks;
    int outstanding;              /* submitted and not yet returned */
    bool closing;                 /* destroy drains: results are no longer acted on */

    k3io_fault_fn fault;
    void *fault_ctx;
    k3io_refuse_fn refuse;
    void *refuse_ctx;
    struct k3io_model *model;     /* the drive model's state, NULL without one */
    struct k3io_stats stats;
};

/* A FIFO of chunks through their next pointers (the thread-pool backends' queues). */
struct k3io_fifo {
    struct k3io_chunk *head, *tail;
};

static inline void k3io__fifo_push(struct k3io_fifo *f, struct k3io_chunk *c)
{
    c->next = NULL;
    if (f->tail)
        f->tail->next = c;
    else
        f->head = c;
    f->tail = c;
}

static inline struct k3io_chunk *k3io__fifo_pop(struct k3io_fifo *f)
{
    struct k3io_chunk *c = f->head;
    if (c) {
        f->head = c->next;
        if (!f->head)
            f->tail = NULL;
    }
    return c;
}

/* Moves all of from to the end of to. */
static inline void k3io__fifo_splice(struct k3io_fifo *to, struct k3io_fifo *from)
{
    if (!from->head)
        return;
    if (to->tail)
        to->tail->next = from->head;
    else
        to->head = from->head;
    to->tail = from->tail;
    from->head = from->tail = NULL;
}

/* CLOCK_MONOTONIC in seconds: every time the reader keeps. */
double k3io__now(void);

/* Called by a backend with a chunk's raw result (bytes or -errno), c->landed set.  With a
 * drive model a chunk that landed before its release is held (model.c) and handed on by
 * k3io__model_reap; otherwise acted on at once. */
void k3io__chunk_done(struct k3io_reader *r, struct k3io_chunk *c, int32_t res);
/* Acts on a chunk's result: finish, resubmit or fail (reader.c). */
void k3io__chunk_result(struct k3io_reader *r, struct k3io_chunk *c, int32_t res);

/* The thread backends' reap: worker threads put finished chunks (res and landed set) on
 * done under lock and signal ready (a condition on CLOCK_MONOTONIC: k3io__cond_init);
 * this hands them all to k3io__chunk_done, first waiting for one until `until` (as the
 * reap op's).  failed (NULL: none) is the backend's -errno under lock, 0 while it works:
 * once set, the wait ends and it is returned (after what had finished is handed on). */
int k3io__reap_handoff(struct k3io_reader *r, pthread_mutex_t *lock, pthread_cond_t *ready,
                       struct k3io_fifo *done, const int *failed, double until);
/* A condition variable whose timed waits read CLOCK_MONOTONIC. */
int k3io__cond_init(pthread_cond_t *c);

/* ---- the drive model (model.c) ---- */

struct k3io_model;
/* The model's state for r (r->n_files drives, r->queue_depth chunks); -ENOMEM. */
int k3io__model_create(struct k3io_reader *r, const struct k3io_drive_model *m);
void k3io__model_destroy(struct k3io_reader *r);
/* c goes to its drive now: sets started and release, and times it. */
void k3io__model_start(struct k3io_reader *r, struct k3io_chunk *c);
/* c's result came back: true when it is held until its release. */
bool k3io__model_hold(struct k3io_reader *r, struct k3io_chunk *c, int32_t res);
/* The reap op through the model: hands on every held chunk whose release has come and
 * every chunk that lands past its release; with until > 0, blocks until at least one
 * chunk is handed on or the clock reads until. */
int k3io__model_reap(struct k3io_reader *r, double until);
/* Hands on every held chunk now, whatever its release (destroy drains). */
void k3io__model_let_go(struct k3io_reader *r);

/* A ring as uring.c sets one up (shared with uring_threads.c): fio's setup-flag ladder,
 * READ and READ_FIXED probed, files and area registered where allowed. */
struct k3io_ring {
    struct io_uring ring;
    bool fixed_files;  /* fds registered: sqe->fd is the index, IOSQE_FIXED_FILE */
    bool fixed_bufs;   /* area registered (sparse, or whole): READ_FIXED where a piece is */
    uint8_t *piece_state; /* [pieces of the area] absent, registered or refused */
};
/* Sets up u with entries SQEs on the calling thread (which alone may then use it); on
 * failure -errno with the call named in *failed_call.  Registrations refused are said in
 * note. */
int k3io__ring_open(struct k3io_reader *r, struct k3io_ring *u, unsigned entries,
                    const char **failed_call, char *note, size_t note_len);
/* Fills sqe to read chunk c (user data: c), registering its piece of the area first if
 * no read reached it before. */
void k3io__ring_prep(struct k3io_reader *r, struct k3io_ring *u,
                     struct io_uring_sqe *sqe, struct k3io_chunk *c);
/* uring_buffers.c: the area's table with the ring (sparse where the kernel allows, else
 * whole, said in *whole; 0 or -errno), a piece's registration on first use (true:
 * READ_FIXED into it), and the ring's end. */
int k3io__ring_register_area(struct k3io_reader *r, struct k3io_ring *u, bool *whole);
bool k3io__ring_piece_ready(struct k3io_reader *r, struct k3io_ring *u, size_t piece);
void k3io__ring_close(struct k3io_ring *u);
/* area_ahead.c: how far past the furthest piece registered the area is kept populated,
 * by a thread keeping the area populated a little past the furthest piece
 * registered (reached: piece is registered now); stop joins it. */
#define K3IO_AHEAD_BYTES (512ull << 20)
struct k3io_ahead;
int k3io__ahead_start(struct k3io_reader *r);
void k3io__ahead_reached(const struct k3io_reader *r, size_t piece);
void k3io__ahead_stats(const struct k3io_reader *r, struct k3io_stats *st);
void k3io__ahead_stop(struct k3io_reader *r);
/* A system call of the read path was made (any thread). */
static inline void k3io__syscall(struct k3io_reader *r)
{
    atomic_fetch_add_explicit(&r->syscalls, 1, memory_order_relaxed);
}
/* io_uring_enter's results that mean "try again" rather than failure. */
bool k3io__enter_transient(int rc);

#endif
