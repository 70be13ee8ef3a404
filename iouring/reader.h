/* Batched reads from drive files into registered memory: the read path's engine room.
 *
 * Owns: the io_uring ring (registered buffers and files, setup-flag fallbacks as fio
 * does them) or, where io_uring is unavailable or not wanted, a pool of pread threads
 * behind the same interface; splitting requests into chunks of at most max_io_bytes;
 * resubmitting short reads, -EAGAIN and -EINTR (bounded); completing a request only when
 * every one of its chunks has; two priorities (foreground, and background reads that wait
 * for it and may be dropped before they start); counters; with a drive model (model.h),
 * holding each read until the modelled drive would have delivered it.
 * Does not own: what is read or why (the caller's offsets and tags), checksums, memory
 * budgets, NUMA placement.  Knows nothing of the neural models whose bytes it reads.
 *
 * One thread creates, submits, reaps and destroys (io_uring's SINGLE_ISSUER and
 * DEFER_TASKRUN tie the ring to the thread that set it up; with io_threads > 1 each I/O
 * thread owns its ring and the caller's thread hands chunks to them); completions come
 * back in the order they land, never promised in submission order.
 * Functions return 0 (or a count) and -errno on failure; none prints.
 */
#ifndef K3IO_READER_H
#define K3IO_READER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "iouring/model.h"

/* io_uring_setup refuses more entries (EINVAL at 65536); the pool is held to the same
 * bound so that a depth that works on one backend works on the other. */
#define K3IO_MAX_QUEUE_DEPTH 32768u
/* The defaults of queue_depth and max_io_bytes when a caller gives none (the CLI gives
 * its own: engine/cli/model_args.h). */
#define K3IO_DEFAULT_QUEUE_DEPTH 64u
#define K3IO_DEFAULT_MAX_IO (1u << 20)
/* A registered buffer holds 1 GiB at most, and a chunk lies in one. */
#define K3IO_MAX_IO (1u << 30)

enum k3io_backend {
    K3IO_AUTO,  /* io_uring, else pread threads */
    K3IO_URING, /* io_uring or fail */
    K3IO_PREAD, /* pread threads */
};

struct k3io_config {
    enum k3io_backend backend;
    const int *fds;          /* files requests name by index (registered with the ring) */
    int n_files;
    void *area;              /* every destination lies inside [area, area + area_bytes); */
    size_t area_bytes;       /*   registered as fixed buffers in pieces (32 MiB, more for a
                              *   larger area, 1 GiB at most), each when a read first reaches
                              *   it, so untouched memory stays untouched (uring_buffers.c);
                              *   NULL/0: destinations anywhere, nothing registered */
    unsigned queue_depth;    /* chunks in flight at most (0: K3IO_DEFAULT_QUEUE_DEPTH; at
                              * most K3IO_MAX_QUEUE_DEPTH) */
    uint32_t max_io_bytes;   /* chunk size cap, a multiple of 4096 (0: K3IO_DEFAULT_MAX_IO;
                              * at most K3IO_MAX_IO); chunks also never cross a piece
                              * boundary of area */
    int pread_threads;       /* workers of the pread backend (default 8) */
    unsigned background_depth; /* background chunks in flight at most (default 2 per file,
                              * at most queue_depth): what a foreground request can find
                              * ahead of it on the drives */
    int io_threads;          /* io_uring: > 1 runs that many I/O threads, each with its own
                              * ring, reading the files file_thread gives it (one thread per
                              * NUMA node: a read submitted from a CPU of its drive's node
                              * uses that node's NVMe queue and interrupt); 0 or 1: one ring,
                              * driven by the calling thread */
    const int *file_thread;  /* [n_files] the I/O thread (0 .. io_threads-1) of each file */
    void (*thread_start)(void *ctx, int thread); /* run first in each I/O thread, e.g. to
                              * pin it to its node; may be NULL */
    void *thread_ctx;
    struct k3io_drive_model model; /* rate 0: none; else each file is timed as a drive of
                              * this rate and latency (model.h) and its reads are handed
                              * back no earlier than the model says */
};

struct k3io_req {
    uint32_t file;           /* index into fds */
    uint32_t len;            /* bytes, 1..INT32_MAX (res must hold it); on O_DIRECT files
                              * offset, len and buf are 4 KiB-aligned */
    uint64_t offset;
    void *buf;
    uint64_t tag;            /* the caller's, returned on completion */
};

struct k3io_done {
    uint64_t tag;
    int32_t res;             /* bytes read (< len only at end of file), or -errno; a short
                              * read is retried for the rest, except an unaligned one on an
                              * O_DIRECT file, which only happens at the end of file */
    /* Seconds on CLOCK_MONOTONIC: when its first read went to the backend; when its last
     * read's data came back (as the reader saw it: the single-ring io_uring backend sees
     * a completion only when the caller waits or polls); with a drive model, when the
     * model let its last read go (0 without one). */
    double started, landed, release;
};

struct k3io_stats {
    uint64_t requests;       /* accepted by k3io_submit */
    uint64_t chunks;         /* reads cut from requests, resubmissions not counted */
    uint64_t bytes;          /* read into buffers by every read, resubmissions included */
    uint64_t resubmit_short, resubmit_eagain, resubmit_eintr;
    double wait_seconds;     /* time blocked in k3io_wait */
    uint64_t syscalls;       /* system calls that started or reaped reads: io_uring_enter
                              * (every ring's), the eventfd writes that hand I/O threads
                              * their work, or one pread per chunk */
    /* With a drive model (zero without): each chunk is a read the model times. */
    uint64_t model_reads;    /* chunks timed */
    double model_read_seconds;   /* summed over chunks: started to the model's release */
    double storage_read_seconds; /* summed over chunks: started to landed (the backend's) */
    double model_busy_seconds;   /* time some modelled read was outstanding (the union) */
    uint64_t late_reads;     /* chunks still not landed at their release while the caller
                              * waited: the storage, not the model, set their time */
    double late_seconds;     /* the caller's wait past those releases: what the storage
                              * added over the model */
    /* The area taken as reads first reached it: bytes, and seconds spent taking them
     * (registering, which faults fresh memory in; on the reads' way, not the ahead
     * thread's) */
    uint64_t area_taken_bytes;
    double area_take_seconds;
    /* The area faulted in ahead of the reads by the thread that does it when the cores
     * have time (k3io_area_present): bytes, and its seconds */
    uint64_t area_ahead_bytes;
    double area_ahead_seconds;
};

struct k3io_reader;

/* Creates a reader.  note (may be NULL) receives one line naming any fallback taken, e.g.
 * "io_uring unavailable (io_uring_queue_init_params: Operation not permitted); 8 pread
 * threads" or "io_uring: registered buffers unavailable (io_uring_register_buffers:
 * Cannot allocate memory); plain reads", or "" when none. */
int k3io_reader_create(struct k3io_reader **out, const struct k3io_config *cfg, char *note,
                       size_t note_len);
/* Waits for the reads in flight (they target the caller's memory), drops the requests not
 * yet started, and frees the reader. */
void k3io_reader_destroy(struct k3io_reader *r);

/* Queues n requests and submits them in as few system calls as the queue allows; what
 * does not fit in flight is submitted as completions make room (during k3io_wait).
 * All or nothing: 0 when all n are queued, each of them then returned once by k3io_wait;
 * -errno when none is: -EINVAL (a file index out of range, len 0 or over INT32_MAX, a
 * buffer outside area), -ENOMEM, or a refusal injected by k3io_set_refusal's hook.  A
 * backend that cannot start the queued reads (e.g. -EEXIST: io_uring used from a thread
 * other than the creator's) does not make the submit fail: k3io_wait returns its -errno.
 * So the caller counts in flight exactly the requests of a submit that returned 0. */
int k3io_submit(struct k3io_reader *r, const struct k3io_req *reqs, int n);

/* Between k3io_plug and k3io_unplug, k3io_submit and k3io_submit_background only queue
 * (nothing starts); k3io_unplug starts everything queued in as few system calls as the
 * queue allows.  It queues nothing itself: its -errno is the backend's, the requests
 * staying queued (k3io_wait returns the error too).  So requests made one at a time (a
 * layer's records, as routing names them) go to the drives in one submission.  Plugs
 * nest; a wait starts what is queued anyway. */
void k3io_plug(struct k3io_reader *r);
int k3io_unplug(struct k3io_reader *r);

/* As k3io_submit, for reads that may turn out unneeded (a prefetch): they start only when
 * no foreground request waits, at most background_depth chunks of them at a time, and
 * until they start k3io_drop can take them back. */
int k3io_submit_background(struct k3io_reader *r, const struct k3io_req *reqs, int n);

/* Takes back the background requests not yet started for which drop(ctx, tag) is true:
 * they will not be read and k3io_wait never returns them.  Returns how many. */
int k3io_drop(struct k3io_reader *r, bool (*drop)(void *ctx, uint64_t tag), void *ctx);

/* Waits until at least min requests have completed (0: only what has), then returns up
 * to max of them in out; returns how many.  min is capped at max and at the requests
 * outstanding, so it never waits for what was not submitted.  A request is returned only
 * once every read of it has finished: no I/O lands in its buffer afterwards. */
int k3io_wait(struct k3io_reader *r, struct k3io_done *out, int max, int min);

/* Requests submitted and not yet returned by k3io_wait. */
int k3io_pending(const struct k3io_reader *r);

/* "io_uring", "io_uring threads" (io_threads > 1) or "pread" */
const char *k3io_backend_name(const struct k3io_reader *r);
struct k3io_stats k3io_stats(const struct k3io_reader *r);

/* Whether [p, p + len) of the area is in memory already: faulted in ahead of the reads by
 * a thread at the lowest priority, or by a read.  A read into memory that is not faults
 * it in on its way, a second or more a GB on a VM whose host backs memory lazily; a
 * cache that may choose where a record lands can prefer present memory and grow only as
 * fast as the idle thread makes room.  True everywhere when the area's memory is not
 * taken piece by piece (the pread backend, registration whole or refused) or when
 * faulting ahead has stopped: there the reads take it, as they always did. */
bool k3io_area_present(const struct k3io_reader *r, const void *p, size_t len);

/* Fault injection (tests, chaos runs): fn sees each chunk's result before the reader acts
 * on it and returns the result to act on, e.g. -EIO, -EAGAIN, or a short count.  What the
 * real read put in the buffer stays there.  fn == NULL turns it off. */
struct k3io_fault_at {
    uint64_t tag;            /* of the request the chunk belongs to */
    uint32_t file, len;
    uint64_t offset;
};
typedef int32_t (*k3io_fault_fn)(void *ctx, const struct k3io_fault_at *at, int32_t res);
void k3io_set_fault(struct k3io_reader *r, k3io_fault_fn fn, void *ctx);

/* Refusal injection (tests, chaos runs): fn sees each k3io_submit and
 * k3io_submit_background of n > 0 valid requests before any is queued, and returns 0 to
 * let it through or the -errno that submit then returns with none of them queued (as it
 * would when memory for them runs out).  fn == NULL turns it off. */
typedef int (*k3io_refuse_fn)(void *ctx, int n);
void k3io_set_refusal(struct k3io_reader *r, k3io_refuse_fn fn, void *ctx);

#endif
