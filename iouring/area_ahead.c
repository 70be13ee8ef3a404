/* Faulting in the area a little ahead of the reads, off the critical path.
 *
 * The area is taken as reads first reach its pieces (uring_buffers.c), and registering a
 * piece pins it, which faults it in on the thread that submits: during a prompt pass the
 * expert cache grows by hundreds of MB at once, and that faulting would sit between the
 * forward pass and its reads.  A thread at low priority keeps the next K3IO_AHEAD_BYTES
 * past the furthest piece registered (no more than the pieces below it) populated
 * (MADV_POPULATE_WRITE, Linux 5.14: it faults in missing pages and never changes a
 * present one, so it may run beside reads landing), so
 * registering finds them present.  It never goes further: the budget stays a ceiling,
 * taken as the cache fills, not at start-up.  Where the kernel lacks the advice the
 * thread stops and registering faults the pieces in as before. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "iouring/reader_internal.h"

struct k3io_ahead {
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    char *area;
    size_t area_bytes, piece_bytes;
    size_t reached;   /* pieces below this one are registered (so present) */
    size_t next;      /* the next piece to populate */
    atomic_bool stop;
};

static size_t n_pieces(const struct k3io_ahead *a)
{
    return (a->area_bytes + a->piece_bytes - 1) / a->piece_bytes;
}

/* The next piece to populate, or n_pieces when none is wanted yet; under the lock. */
static size_t wanted(struct k3io_ahead *a)
{
    /* No further ahead than the area in use: a small model's runs stay small. */
    size_t ahead = (K3IO_AHEAD_BYTES + a->piece_bytes - 1) / a->piece_bytes;
    if (ahead > a->reached)
        ahead = a->reached;
    size_t end = a->reached + ahead < n_pieces(a) ? a->reached + ahead : n_pieces(a);
    if (a->next < a->reached)
        a->next = a->reached;
    return a->next < end ? a->next : n_pieces(a);
}

/* Populates one piece a huge page at a time, so that stopping waits for one step at
 * most (this thread may be starved of CPU for long on a busy machine): 0, or -errno. */
static int populate(struct k3io_ahead *a, size_t piece)
{
    const size_t step = 2u << 20;
    size_t at = piece * a->piece_bytes, end = at + a->piece_bytes;
    if (end > a->area_bytes)
        end = a->area_bytes;
    for (; at < end && !atomic_load(&a->stop); at += step)
        if (madvise(a->area + at, end - at < step ? end - at : step, MADV_POPULATE_WRITE) &&
            errno != EINTR && errno != EAGAIN)
            return -errno;
    return 0;
}

static void *ahead_main(void *arg)
{
    struct k3io_ahead *a = arg;
    /* Only the CPU time the compute and I/O threads leave. */
    setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), 19);
    pthread_mutex_lock(&a->lock);
    for (;;) {
        size_t piece = 0;
        while (!atomic_load(&a->stop) && (piece = wanted(a)) == n_pieces(a))
            pthread_cond_wait(&a->wake, &a->lock);
        if (atomic_load(&a->stop))
            break;
        a->next = piece + 1;
        pthread_mutex_unlock(&a->lock);
        int rc = populate(a, piece);
        pthread_mutex_lock(&a->lock);
        if (rc)
            break; /* an older kernel (EINVAL), or no memory left: registering will say */
    }
    pthread_mutex_unlock(&a->lock);
    return NULL;
}

int k3io__ahead_start(struct k3io_reader *r)
{
    struct k3io_ahead *a = calloc(1, sizeof *a);
    if (!a)
        return -ENOMEM;
    *a = (struct k3io_ahead){.area = r->area, .area_bytes = r->area_bytes,
                             .piece_bytes = r->piece_bytes};
    pthread_mutex_init(&a->lock, NULL);
    pthread_cond_init(&a->wake, NULL);
    int rc = pthread_create(&a->thread, NULL, ahead_main, a);
    if (rc) {
        pthread_cond_destroy(&a->wake);
        pthread_mutex_destroy(&a->lock);
        free(a);
        return -rc;
    }
    r->ahead = a;
    return 0;
}

void k3io__ahead_reached(const struct k3io_reader *r, size_t piece)
{
    struct k3io_ahead *a = r->ahead;
    if (!a)
        return;
    pthread_mutex_lock(&a->lock);
    if (piece + 1 > a->reached) {
        a->reached = piece + 1;
        pthread_cond_signal(&a->wake);
    }
    pthread_mutex_unlock(&a->lock);
}

void k3io__ahead_stop(struct k3io_reader *r)
{
    struct k3io_ahead *a = r->ahead;
    if (!a)
        return;
    pthread_mutex_lock(&a->lock);
    atomic_store(&a->stop, true);
    pthread_cond_signal(&a->wake);
    pthread_mutex_unlock(&a->lock);
    pthread_join(a->thread, NULL);
    pthread_cond_destroy(&a->wake);
    pthread_mutex_destroy(&a->lock);
    free(a);
    r->ahead = NULL;
}
