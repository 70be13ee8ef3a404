/* The packed model's read path: one io_uring reader (or pread pool) over every drive's
 * data file (or every shard of a checkpoint folder seen as a pack: ckpt_view.h), and the
 * memory it reads into, laid out from the RAM budget.
 *
 * Owns: the registered area (resident trunk segments, two trunk stream slots, the
 * expert record slots, embedding-row buffers); binding segments to the model (resident
 * ones at open, streamed ones when a layer needs them, the next one read meanwhile);
 * embedding rows read on demand; the expert store the forward pass reads records
 * through, with a bounded cache in spare budget (a hit is a read avoided); verifying
 * every piece's checksum as it lands; per-token counters.
 * Does not own: the budget arithmetic (budget.h), the batched reads themselves
 * (iouring/reader.h), the math.
 */
#ifndef K3_STREAM_H
#define K3_STREAM_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/stream/budget.h"
#include "engine/base/err.h"
#include "engine/forward/expert_store.h"
#include "engine/stream/faults.h"
#include "engine/forward/forward.h"
#include "engine/model/model.h"
#include "engine/base/trace.h"
#include "engine/stream/policy.h"
#include "iouring/reader.h"

/* Records a layer prefetches for the next by default (run's --prefetch-k; plan assumes
 * it). */
#define K3_PREFETCH_K_DEFAULT 24
/* Rows a prompt pass may take unless -b says otherwise (llama.cpp's -b); the budget may
 * allow fewer. */
#define K3_BATCH_DEFAULT 2048

/* Budget presets for k3_stream_opts.ram. */
#define K3_RAM_TRUNK 0           /* the whole trunk resident (and the floor's buffers) */
#define K3_RAM_FLOOR UINT64_MAX  /* the floor: every segment streamed */
#define K3_RAM_AUTO (UINT64_MAX - 1) /* what the machine gives this process, less a margin
                                 * (ram_auto.h); the floor when it cannot be read */

struct k3_placement;
struct k3_ram_machine;

/* Where the expert cache grows (--cache-fill). */
enum k3_cache_fill {
    K3_CACHE_FILL_AHEAD, /* records only into memory faulted in ahead of the reads, by a
                          * thread at the lowest priority (k3io_area_present), in prompt
                          * passes and decode: reads never wait on fresh memory.  The hits
                          * then depend on that thread's pace. */
    K3_CACHE_FILL_READS, /* into fresh memory as reads reach it: the hits depend on the
                          * asks alone (replay judges policies so) */
};

/* How the stream reads, as the option table fills it (--io, --read-size, --queue-depth,
 * --prefetch-depth, --drive-model), carried whole through the runtime to the one place
 * the reader is set up (stream.c: open_reader). */
struct k3_read_opts {
    enum k3io_backend backend; /* --io */
    uint64_t read_size;        /* the largest read a piece is cut into (0: the reader's
                                * default), a multiple of 4 KiB */
    int queue_depth;           /* reads in flight at most (0: the reader's default) */
    int prefetch_depth;        /* prefetch reads in flight per drive (0: the reader's default) */
    struct k3io_drive_model drive_model; /* each drive timed as one of this rate and
                                * latency (rate 0: none; iouring/model.h) */
};

struct k3_stream_opts {
    struct k3_read_opts read;
    uint64_t ram;              /* budget in bytes, or a preset above */
    const struct k3_ram_machine *machine; /* what this process may use (ram_auto.h): auto
                                * plans from it, a larger budget is refused; NULL: unknown */
    int ctx;                   /* positions each sequence will hold */
    int seqs;                  /* sequences held at once (0 counts as 1) */
    int threads;
    bool cache;                /* expert cache in the spare budget */
    enum k3_cache_policy_kind cache_policy; /* which cached record gives way (policy.h) */
    enum k3_cache_fill cache_fill;
    bool sync;                 /* one read at a time, waited for: the no-overlap baseline */
    int prefetch_k;            /* records a layer may prefetch for the next (0: none) */
    bool predict_ids;          /* the caller holds --predict-from ids's counts: counted in the
                                * budget (k3_id_predictor_bytes at the pass's rows) */
    bool check_cache;          /* tests: every slot the cache picks is checked against a
                                * scan of every slot (slow), and its counts and indexes
                                * against the slots, at each pick */
    struct k3_trace *trace;    /* NULL: none */
    const struct k3_placement *place; /* NUMA plan for the buffers, or NULL */
    const char *faults;        /* fault injection spec (faults.h), or NULL */
    uint64_t fault_seed;
    uint64_t caller_bytes;     /* what the caller keeps beside (logits rows, samplers),
                                * counted in the budget */
    uint64_t caller_row_bytes; /* and per prompt pass row */
    int rows;                  /* the most rows of a prompt pass (0: K3_CHUNK); the budget
                                * gives the pass its rows (k3_budget.rows) */
    /* A fallback taken while reading, one line (e.g. a drive taken as lost, its pieces
     * read from replicas); called on the caller's thread.  NULL: not said. */
    void (*note)(void *ctx, const char *line);
    void *note_ctx;
};

/* Counters since the stream opened; difference two snapshots for one token. */
struct k3_stream_stats {
    uint64_t bytes;            /* read from the drives */
    uint64_t reads;            /* piece reads the reader queued */
    uint64_t records_read, records_hit;   /* expert records read / found in the cache */
    uint64_t records_asked;    /* records the layers' batches asked for: each layer's union
                                * of a step's (or a pass's) experts */
    uint64_t trunk_bytes;      /* of bytes: trunk segments and embedding rows */
    double stall_seconds;      /* compute waiting for data */
    double verify_seconds;     /* checking piece checksums */
    uint64_t retries;          /* failed reads tried again (same place or replica) */
    uint64_t replica_reads;    /* pieces read from their replica */
    uint64_t syscalls;         /* system calls starting and reaping reads (k3io_stats) */
    /* The read area taken as reads first reach it (the reader's k3io_stats): bytes, and
     * seconds the submitting threads spent taking them, which is faulting fresh memory in
     * (slow on VMs whose host backs guest memory lazily) */
    uint64_t area_taken_bytes;
    double area_take_seconds;
    /* and faulted in ahead of the reads, off their path (--cache-fill ahead grows the
     * cache into it) */
    uint64_t area_ahead_bytes;
    double area_ahead_seconds;
};

/* Per layer (index n_layers: the output), since the stream opened. */
struct k3_layer_stats {
    uint64_t records;          /* records the layer asked for */
    uint64_t read, hit;        /* of those: read when asked / in memory from an earlier
                                * step (the rest were prefetched: predicted_used) */
    uint64_t predicted;        /* records prefetched for it */
    uint64_t predicted_used;   /* of those, asked for */
    uint64_t wasted_bytes;     /* prefetched, not asked for */
    double stall_seconds;      /* its compute waiting for data */
    double busy_seconds;       /* reads in flight while it computed or waited */
};

struct k3_stream;

/* Plans the budget for m (packed drives or a checkpoint folder), allocates and registers
 * the area, loads the resident segments.  note receives one line per fallback taken (or ""). */
int k3_stream_open(struct k3_stream **out, struct k3_model *m, const struct k3_stream_opts *o,
                   char *note, size_t note_len, struct k3_err *err);
void k3_stream_close(struct k3_stream *s);

const struct k3_budget *k3_stream_budget(const struct k3_stream *s,
                                         const struct k3_budget_input **in);
struct k3_expert_store *k3_stream_experts(struct k3_stream *s);
/* The trunk source a session uses for this stream's model. */
const struct k3_trunk_source *k3_stream_trunk(struct k3_stream *s);
struct k3_stream_stats k3_stream_stats(const struct k3_stream *s);
const struct k3_layer_stats *k3_stream_layer_stats(const struct k3_stream *s);
const char *k3_stream_backend(const struct k3_stream *s);
/* After a read that failed on every copy (the step that met it returned its error, and
 * every later one would too): reads still in flight land and are dropped, buffers other
 * than the resident segments are emptied and the failure is forgotten, so the next step
 * reads afresh.  A drive taken as lost stays lost.  (A server serves on.) */
void k3_stream_recover(struct k3_stream *s);
/* The reader's counters (the drive model's among them). */
struct k3io_stats k3_stream_io_stats(const struct k3_stream *s);
/* Replaces the fault injector (NULL spec: none) and forgets which drives failed, so one
 * stream can serve many independent runs (tests). */
int k3_stream_set_faults(struct k3_stream *s, const char *spec, uint64_t seed,
                         struct k3_err *err);
/* Waits until no read is in flight (prefetches included), so that what was asked for
 * is in memory: a settled state for tests and benchmarks. */
int k3_stream_wait_reads(struct k3_stream *s, struct k3_err *err);
/* Faults injected so far; false when injection is off. */
bool k3_stream_faults(const struct k3_stream *s, struct k3_fault_counts *counts);

#endif
