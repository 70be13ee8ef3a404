/* A model opened for generation: what `run` and `serve` share.
 *
 * Owns: opening in order and closing in reverse: NUMA placement (threads pinned before
 * anything allocates), the model (a checkpoint folder or packed drives), the trace file,
 * the read path (the stream over the drives, or over a checkpoint's shards seen as a
 * pack, with its RAM budget), the compute context with its hooks, and the tokenizer on
 * demand; the notes a run should show (fallbacks taken), and I/O counters as one
 * snapshot.
 * Does not own: sequences and sampling (the caller's), printing (the CLI's), the math.
 */
#ifndef K3_RUNTIME_H
#define K3_RUNTIME_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/base/err.h"
#include "engine/base/trace.h"
#include "engine/cluster/cluster.h"
#include "engine/forward/forward.h"
#include "engine/forward/sampler.h"
#include "engine/model/model.h"
#include "engine/model/share.h"
#include "engine/stream/placement.h"
#include "engine/stream/ram_auto.h"
#include "engine/stream/stream.h"
#include "iouring/reader.h"

struct k3_runtime_opts {
    const char *model_dir;    /* a checkpoint folder as shipped, or */
    const char *drives;       /* "D0,D1,..": packed drive folders, any order */
    struct k3_cluster *cluster; /* mpirun's ranks (engine/cluster), or NULL: one process */
    struct k3_share share;    /* the routed experts this process computes */
    int threads;              /* 0: one per core */
    bool numa_off;
    uint64_t ram;             /* bytes, K3_RAM_AUTO, K3_RAM_TRUNK or K3_RAM_FLOOR */
    const char *trunk_type;   /* "bf16" or "q8_0" (trunk_type.h); NULL: as the model holds it */
    int batch;                /* -b: the most rows of a prompt pass (the budget may allow
                               * fewer; under mpirun at most K3_CHUNK) */
    struct k3_read_opts read;  /* --io, --read-size, --queue-depth, --prefetch-depth,
                              * --drive-model: to the reader as they are */
    bool no_cache, sync;
    enum k3_cache_policy_kind cache_policy; /* --cache-policy */
    enum k3_cache_fill cache_fill;          /* --cache-fill */
    int prefetch_k;
    bool check_cache;         /* tests (K3_CHECK_CACHE): the cache's picks checked by a scan */
    enum k3_predict_from predict;
    const char *trace_path;   /* NULL: no trace */
    struct k3_topology_source topology; /* zero: this machine's */
    const char *faults;       /* injected read faults (engine/stream/faults.h), NULL: none */
    uint64_t fault_seed;      /* their generator's seed */
    /* What the read path says while running (a drive taken as lost), on the caller's
     * thread; NULL: not said. */
    void (*note)(void *ctx, const char *line);
    void *note_ctx;
};

/* Opaque: commands reach the runtime through the calls below, never its fields. */
struct k3_runtime;

/* What a command hooks into the forward pass, given at start. */
struct k3_runtime_hooks {
    const struct k3_route_source *routes; /* replayed routing (engine/routes); NULL: the
                                           * router chooses */
    k3_layer_hook on_layer;               /* each layer's hidden state (--dump-layers) */
    void *on_layer_ctx;
};

/* Placement and the model; nothing is read beyond the config, the tensor table and the
 * small tensors yet.  *rt is set even when this fails (then only close it). */
int k3_runtime_open(struct k3_runtime **rt, const struct k3_runtime_opts *o, struct k3_err *err);
/* What the caller keeps beside the runtime, counted in the budget: `fixed` bytes, and
 * `per_row` for each row of a prompt pass (logits rows that go to a file). */
struct k3_caller_bytes {
    uint64_t fixed, per_row;
};

/* The trace, the read path planned for seqs sequences of ctx positions and prompt passes
 * of up to rows rows (the budget may allow fewer: k3_runtime_rows says), and the compute
 * context with the caller's hooks (NULL: none). */
int k3_runtime_start(struct k3_runtime *rt, int ctx, int seqs, int rows,
                     struct k3_caller_bytes caller, const struct k3_runtime_hooks *hooks,
                     struct k3_err *err);
/* Closes everything and frees rt (NULL: nothing); -1 with err (when not NULL) if the
 * trace could not be completed. */
int k3_runtime_close(struct k3_runtime *rt, struct k3_err *err);

/* What a generator keeps beside the runtime: logits rows (a step's K3_CHUNK, and one per
 * pass row when every row's logits are kept) and a sampler per sequence (run: 1; serve:
 * --parallel). */
static inline struct k3_caller_bytes k3_runtime_caller_bytes(int vocab, int seqs, bool row_logits)
{
    uint64_t row = sizeof(float) * (uint64_t)vocab;
    return (struct k3_caller_bytes){
        .fixed = K3_CHUNK * row + (uint64_t)seqs * k3_sampler_bytes(vocab),
        .per_row = row_logits ? row : 0};
}

/* Under mpirun, after every rank's open and start (failed: this one's did not): 0 when
 * all started, else -1 on every rank with err naming the first that failed (cluster.h).
 * One process: -1 when failed.  rt may be NULL (its open failed). */
int k3_runtime_agree(struct k3_runtime *rt, bool failed, struct k3_err *err);

/* A follower rank (mpirun): runs the leader's steps until the leader stops. */
void k3_runtime_follow(struct k3_runtime *rt);

/* ---- steps (forward.h's, in the runtime's compute context) ---- */

/* One step of rows from several sequences. */
int k3_runtime_step(struct k3_runtime *rt, const struct k3_step *step, struct k3_err *err);
/* n tokens of one sequence, in passes of up to k3_runtime_rows; logits as
 * k3_forward_tokens's. */
int k3_runtime_tokens(struct k3_runtime *rt, struct k3_seq *q, const int32_t *tokens, int n,
                      float *logits, bool all_logits, struct k3_err *err);

/* After a step failed on a read: the read path forgets the failure and empties what it
 * held half-read, so the next step starts clean (stream.h, k3_stream_recover). */
void k3_runtime_recover(struct k3_runtime *rt);

/* ---- what commands read ---- */

const struct k3_model *k3_runtime_model(const struct k3_runtime *rt);
const struct k3_config *k3_runtime_config(const struct k3_runtime *rt);
const struct k3_runtime_opts *k3_runtime_opts(const struct k3_runtime *rt);
/* The most rows a step holds (after start): -b's, or fewer when the budget says so. */
int k3_runtime_rows(const struct k3_runtime *rt);
struct k3_trace *k3_runtime_trace(const struct k3_runtime *rt); /* NULL: none */
/* The read path (after start; NULL for a checkpoint held whole): its budget, layer
 * counters and backend for the commands' reports. */
const struct k3_stream *k3_runtime_stream(const struct k3_runtime *rt);
const struct k3_placement *k3_runtime_placement(const struct k3_runtime *rt);
const struct k3_forward *k3_runtime_forward(const struct k3_runtime *rt);
/* The routed experts this process computes (all but under mpirun). */
struct k3_share k3_runtime_share(const struct k3_runtime *rt);
/* Fallbacks taken while opening, a line each, or "". */
const char *k3_runtime_notes(const struct k3_runtime *rt);

struct k3_tokenizer;
/* The model's tokenizer, loaded on first use. */
int k3_runtime_tokenizer(struct k3_runtime *rt, const struct k3_tokenizer **tok,
                         struct k3_err *err);

/* Counters since the read path opened; difference two for one step. */
struct k3_runtime_snapshot {
    double t;                  /* seconds, monotonic */
    struct k3_stream_stats io;
    struct k3_cluster_stats ranks; /* zero for one process */
    uint64_t nan_scale_groups; /* MXFP4 groups with the reserved scale 255, zeroed */
};
struct k3_runtime_snapshot k3_runtime_snap(const struct k3_runtime *rt);

#endif
