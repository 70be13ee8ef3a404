/* The RAM budget (--ram): the floor the engine cannot go below, and how it spends the
 * rest.
 *
 * Owns: the arithmetic.  The floor is the runtime itself, the session state for the
 * context (KDA state, conv rings, MLA latent cache), the scratch of one chunk, every
 * segment's small tensors, the manifest, the caller's buffers, the expert buffers one
 * layer keeps in flight, --predict-from ids's co-occurrence counts, the checksum pass's
 * scratch, the buffer embedding rows are read
 * into (on demand), and the trunk at its cheapest: two stream slots (one computing, one
 * being read) of the largest streamed segment, plus whichever largest segments are
 * cheaper resident than streamed through slots of their size.
 * The floor counts a pass of min(-b, K3_CHUNK) rows; above it, a prompt pass takes first
 * what its rows need, up to -b (one pass reads each chosen expert once, so its size
 * decides a prompt's reads), then the trunk is planned for the most resident layer and output bytes
 * (each is a byte not read per token): for each slot size m (every segment size, and 0:
 * nothing streamed) every segment larger than m is resident, then the rest largest
 * first, each that still fits; the plan with the most resident bytes wins (the fewest
 * bytes spent on a tie).  A budget that holds the whole trunk so keeps it all resident,
 * and any plan falls short of the best possible by less than the best plan's slot.  The
 * embedding (one row read per token) is made resident last, if it still fits; what
 * remains holds a cache of expert records.
 * Does not own: allocation (stream.c), measuring RSS.
 */
#ifndef K3_BUDGET_H
#define K3_BUDGET_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "engine/model/config.h"
#include "engine/model/tensors.h"
#include "engine/base/err.h"

/* Code, libraries, thread stacks and allocator slack, measured on the tiny model
 * (k3-uring run at the smallest budget: peak RSS minus everything planned here). */
#define K3_RUNTIME_BYTES (48ull << 20)

struct k3_budget_input {
    const struct k3_config *cfg;
    int ctx;                      /* positions each sequence holds */
    int seqs;                     /* sequences held at once (serve's --parallel; 0 counts as 1) */
    int threads;
    int teams;                    /* compute teams (0 counts as 1) */
    int n_segments;               /* trunk segments (tensors.h: K3_SEG_EMBED, k3_seg_layer...) */
    const uint64_t *segment_bytes;/* [n_segments], as read (rounded to pieces) */
    uint64_t vector_bytes;        /* every segment's small tensors, as f32 */
    uint64_t record_bytes;        /* one expert record's buffer */
    uint64_t embed_buffer_bytes;  /* embedding rows' buffer (k3_budget_embed_buffer_bytes) */
    uint64_t manifest_bytes;      /* the whole manifest (a checkpoint's: the tables of
                                   * ckpt_view.h), held while the model is open */
    uint64_t caller_bytes;        /* the caller's buffers: logits rows, samplers */
    int rows;                     /* the most rows a prompt pass may take (-b; 0 counts as
                                   * K3_CHUNK) */
    uint64_t caller_row_bytes;    /* the caller's buffers per pass row (logits to a file) */
    int inflight_records;         /* expert records one layer keeps in flight */
    bool predict_ids;             /* --predict-from ids: its counts are held (predict_ids.h) */
};

struct k3_budget {
    uint64_t budget;
    uint64_t floor;
    /* fixed part of the floor */
    uint64_t runtime, state, scratch, vectors, manifest, caller;
    uint64_t expert_inflight;     /* inflight_records x record_bytes */
    uint64_t verify;              /* the checksum pass's scratch (k3_verify_scratch_bytes) */
    uint64_t predictor;           /* --predict-from ids: k3_id_predictor_bytes at the pass's
                                   * rows; else 0 */
    uint64_t embed_buffer;        /* in->embed_buffer_bytes */
    int rows;                     /* a prompt pass's rows: the scratch and caller rows
                                   * above are sized for them */
    int floor_rows;               /* the rows the floor counts: min(in->rows, K3_CHUNK) */
    /* spent above the fixed part */
    bool resident[K3_MAX_LAYERS + 2]; /* by segment */
    int n_segments;
    uint64_t resident_bytes;
    uint64_t stream_slot_bytes;   /* each of the two slots; 0 when all is resident */
    int cache_records;
    uint64_t cache_bytes;
    /* How the budget was chosen, a line ("--ram auto: 5.20 GiB = cgroup limit 6.00 GiB
     * (...) less 0.38 GiB margin"), or ""; filled by the stream, not by k3_budget_plan. */
    char origin[512];
    bool origin_unknown;          /* auto fell back: the machine's memory could not be read */
};

/* What the budget sees of a pack, opened (stream.c) or as `pack` would write it for a
 * config (engine/plan/pack_sizes.c). */
struct k3_budget_pack {
    int n_segments;               /* trunk segments */
    const uint64_t *segment_bytes;/* [n_segments], as read (rounded to pieces) */
    uint64_t vector_bytes;        /* every segment's small tensors, as f32
                                   * (k3_budget_vector_bytes) */
    uint64_t record_bytes;        /* one expert record slot's bytes; 0: the pack holds none */
    uint64_t embed_piece_bytes;   /* the embedding segment's piece size */
    uint64_t manifest_bytes;
};

/* What the budget sees of a run: the options and the caller's buffers. */
struct k3_budget_run {
    int ctx, seqs, threads, teams, rows; /* as in struct k3_budget_input */
    int prefetch_k;               /* records prefetched beside a layer's top_k in flight */
    uint64_t caller_bytes, caller_row_bytes;
    bool predict_ids;
};

/* The budget's input for config c, pack p and run r: the one builder of `run`, `serve`
 * and `plan`, so that plan's floor is the runtime's to the byte. */
struct k3_budget_input k3_budget_input_of(const struct k3_config *c, const struct k3_budget_pack *p,
                                          const struct k3_budget_run *r);

/* The small tensors (every spec not a matrix) as the model keeps them: f32. */
uint64_t k3_budget_vector_bytes(const struct k3_tensor_spec *specs, int n);

/* The buffer an embedding row of row_bytes is read into, from a segment cut into pieces
 * of piece_bytes: the pieces a row fills, and one more, as a row may straddle a piece
 * boundary.  The one definition, for the runtime and `plan`. */
static inline uint64_t k3_budget_embed_buffer_bytes(uint64_t row_bytes, uint64_t piece_bytes)
{
    return ((row_bytes + piece_bytes - 1) / piece_bytes + 1) * piece_bytes;
}

/* Plans a budget of `budget` bytes; below the floor it fails with a message naming the
 * floor and its parts. */
int k3_budget_plan(const struct k3_budget_input *in, uint64_t budget, struct k3_budget *out,
                   struct k3_err *err);

/* The smallest budget that holds the whole trunk (no streaming). */
uint64_t k3_budget_trunk_resident(const struct k3_budget_input *in);

/* One line per part: how the budget is spent. */
void k3_budget_print(FILE *f, const struct k3_budget *b, const struct k3_budget_input *in);

#endif
