/* Faulting in the area a little ahead of the reads, off the critical path.
 *
 * The area is taken as reads first reach its pieces (uring_buffers.c), and registering a
 * piece pins it, which faults it in on the thread that submits: during a prompt pass the
 * expert cache grows by hundreds of MB at once, and that faulting would sit between the
 * forward pass and its reads.  A thread at low priority keeps the next K3IO_AHEAD_BYTES
 * past the furthest piece registered (no more than the pieces below it) populated
 * (MADV_POPULATE_WRITE, Linux 5.14: it faults in missing pages and never changes a
 * present one, so it may run beside reads landing), and says which pieces are present
 * (k3io_area_present), so that a cache can put its records there and reads never wait on
 * fresh memory.  It never goes further: the budget stays a ceiling, taken as the cache
 * fills, not at start-up.  Where the kernel lacks the advice the thread stops, every
 * piece counts as present, and registering faults the pieces in as before. */
#include <assert.h>
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
    atomic_bool failed;         /* populating failed: the reads fault pieces in */
    _Atomic uint8_t *present;   /* [pieces]: registered or populated */
    _Atomic uint64_t populated_bytes, populate_ns;
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
        double t0 = k3io__now();
        int rc = populate(a, piece);
        pthread_mutex_lock(&a->lock);
        if (rc) { /* an older kernel (EINVAL), or no memory left: registering will say */
            atomic_store(&a->failed, true);
            break;
        }
        if (atomic_load(&a->stop))
            break; /* populate() may have stopped partway */
        size_t len = (piece + 1) * a->piece_bytes > a->area_bytes
                         ? a->area_bytes - piece * a->piece_bytes : a->piece_bytes;
        atomic_fetch_add(&a->populated_bytes, len);
        atomic_fetch_add(&a->populate_ns, (uint64_t)((k3io__now() - t0) * 1e9));
        atomic_store(&a->present[piece], 1);
    }
    pthread_mutex_unlock(&a->lock);
    return NULL;
}

int k3io__ahead_start(struct k3io_reader *r)
{
    struct k3io_ahead *a = calloc(1, sizeof *a);
    if (!a)
        return -ENOMEM;
    /* Registering the area by pieces put the first in its slot already (uring_buffers.c). */
    *a = (struct k3io_ahead){.area = r->area, .area_bytes = r->area_bytes,
                             .piece_bytes = r->piece_bytes, .reached = 1};
    a->present = calloc(n_pieces(a), sizeof *a->present);
    if (!a->present) {
        free(a);
        return -ENOMEM;
    }
    a->present[0] = 1;
    pthread_mutex_init(&a->lock, NULL);
    pthread_cond_init(&a->wake, NULL);
    int rc = pthread_create(&a->thread, NULL, ahead_main, a);
    if (rc) {
        pthread_cond_destroy(&a->wake);
        pthread_mutex_destroy(&a->lock);
        free(a->present);
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
    atomic_store(&a->present[piece], 1);
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
    free(a->present);
    free(a);
    r->ahead = NULL;
}

bool k3io_area_present(const struct k3io_reader *r, const void *p, size_t len)
{
    const struct k3io_ahead *a = r->ahead;
    if (!a || atomic_load(&a->failed) || !len)
        return true;
    size_t at = (size_t)((const char *)p - a->area);
    assert(at + len <= a->area_bytes);
    for (size_t i = at / a->piece_bytes; i <= (at + len - 1) / a->piece_bytes; i++)
        if (!atomic_load(&a->present[i]))
            return false;
    return true;
}

void k3io__ahead_stats(const struct k3io_reader *r, struct k3io_stats *st)
{
    const struct k3io_ahead *a = r->ahead;
    if (!a)
        return;
    st->area_ahead_bytes = atomic_load(&a->populated_bytes);
    st->area_ahead_seconds = atomic_load(&a->populate_ns) / 1e9;
}
