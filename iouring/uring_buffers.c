/* The area's registration with a ring, piece by piece as reads first reach each piece.
 *
 * Registering a buffer pins it, and pinning faults in every page: registered whole at
 * start-up, an area planned from a large RAM budget would be faulted in before the first
 * read (about a second per GB on a VM), though the expert cache inside it fills only as
 * tokens are generated.  So the ring gets a sparse table of the area's pieces
 * (io_uring_register_buffers_sparse, Linux 5.19) and each piece is put in its slot
 * (io_uring_register_buffers_update_tag) just before the first read into it: memory is
 * taken as the cache grows, one piece ahead at most.  Where the kernel has no sparse
 * tables, the whole area is registered at once as before; a piece the kernel refuses
 * (RLIMIT_MEMLOCK) is read into without registration. */
#include <errno.h>
#include <liburing.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "iouring/reader_internal.h"

enum piece_state { PIECE_ABSENT, PIECE_REGISTERED, PIECE_REFUSED };

size_t k3io__area_piece_bytes(size_t area_bytes)
{
    size_t piece = K3IO_PIECE_MIN;
    while (piece < K3IO_AREA_PIECE && area_bytes > piece * (size_t)K3IO_PIECES_MAX)
        piece *= 2;
    return piece;
}

static size_t pieces(const struct k3io_reader *r)
{
    return (r->area_bytes + r->piece_bytes - 1) / r->piece_bytes;
}

static struct iovec piece_iov(const struct k3io_reader *r, size_t i)
{
    size_t at = i * r->piece_bytes, left = r->area_bytes - at;
    return (struct iovec){r->area + at, left < r->piece_bytes ? left : r->piece_bytes};
}

/* Pinned pages are charged to RLIMIT_MEMLOCK without CAP_IPC_LOCK, so raise it first as
 * fio's t/io_uring.c does: to infinity where allowed, else the soft limit to the hard one.
 * Failure is fine: registration then fails with ENOMEM and the reads go unregistered. */
static void raise_memlock(void)
{
    struct rlimit rl = {RLIM_INFINITY, RLIM_INFINITY};
    if (setrlimit(RLIMIT_MEMLOCK, &rl) == 0 || getrlimit(RLIMIT_MEMLOCK, &rl))
        return;
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_MEMLOCK, &rl);
}

static int register_whole(struct k3io_reader *r, struct k3io_ring *u)
{
    size_t n = pieces(r);
    struct iovec *iov = malloc(n * sizeof *iov);
    if (!iov)
        return -ENOMEM;
    for (size_t i = 0; i < n; i++)
        iov[i] = piece_iov(r, i);
    int rc = io_uring_register_buffers(&u->ring, iov, (unsigned)n);
    free(iov);
    return rc;
}

/* Puts piece i in its slot: 0, or -errno (the piece is then read without it). */
static int register_piece(struct k3io_reader *r, struct k3io_ring *u, size_t i)
{
    struct iovec iov = piece_iov(r, i);
    double t0 = k3io__now();
    int rc = io_uring_register_buffers_update_tag(&u->ring, (unsigned)i, &iov, NULL, 1);
    atomic_fetch_add(&r->area_taken_bytes, iov.iov_len);
    atomic_fetch_add(&r->area_take_ns, (uint64_t)((k3io__now() - t0) * 1e9));
    u->piece_state[i] = rc == 1 ? PIECE_REGISTERED : PIECE_REFUSED;
    k3io__ahead_reached(r, i);
    return rc == 1 ? 0 : rc < 0 ? rc : -EIO;
}

/* The first piece is registered at once (the resident trunk lands there first), so a
 * registration refused outright (RLIMIT_MEMLOCK) is said at start-up as before; one
 * refused later, when the limit allows some pieces but not all, reads that piece
 * unregistered. */
int k3io__ring_register_area(struct k3io_reader *r, struct k3io_ring *u, bool *whole)
{
    *whole = false;
    raise_memlock();
    size_t n = pieces(r);
    u->piece_state = calloc(n, sizeof *u->piece_state);
    if (!u->piece_state)
        return -ENOMEM;
    int rc = io_uring_register_buffers_sparse(&u->ring, (unsigned)n);
    if (rc == 0) {
        rc = register_piece(r, u, 0);
        if (rc)
            io_uring_unregister_buffers(&u->ring);
        u->fixed_bufs = rc == 0;
        r->area_by_piece = rc == 0;
        return rc;
    }
    rc = register_whole(r, u);
    u->fixed_bufs = rc == 0;
    *whole = rc == 0;
    memset(u->piece_state, rc == 0 ? PIECE_REGISTERED : PIECE_REFUSED, n);
    return rc;
}

bool k3io__ring_piece_ready(struct k3io_reader *r, struct k3io_ring *u, size_t piece)
{
    if (!u->fixed_bufs)
        return false;
    if (u->piece_state[piece] == PIECE_ABSENT)
        register_piece(r, u, piece);
    return u->piece_state[piece] == PIECE_REGISTERED;
}

void k3io__ring_close(struct k3io_ring *u)
{
    io_uring_queue_exit(&u->ring);
    free(u->piece_state);
    u->piece_state = NULL;
}
