/* The forward pass: steps of tokens through the model.
 *
 * Owns: a sequence's state (struct k3_seq: KDA recurrent state and conv rings, the MLA
 * latent cache, the position), the compute context a step runs in (struct k3_forward:
 * scratch allocated once, never per token, the compute teams, and the hooks through which
 * the read path streams weights, prefetches experts and traces), and the layer loop with
 * K3's Attention Residuals bookkeeping (§3.2).
 * A step is up to the context's rows (a pass); each row is one token extending one
 * sequence, and the rows of a sequence are adjacent and in order.  A prompt runs as
 * passes of one sequence (prefill): every layer takes all of a pass's rows before the
 * next starts, so each MoE layer reads the union of the pass's experts once; decoding
 * several sequences together runs one row of each per step, so each layer's weights and
 * experts are read once for all of them.  Every value a row gets is
 * computed in the same order whatever the other rows are, so prefill and decode, and a
 * sequence alone or beside others, agree bytewise.
 * Does not own: weights (model.h), expert I/O (stream/, behind expert_store.h), sampling.
 */
#ifndef K3_FORWARD_H
#define K3_FORWARD_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/base/err.h"
#include "engine/base/trace.h"
#include "engine/model/model.h"
#include "engine/model/share.h"
#include "engine/forward/expert_store.h"

/* Rows of a step that serve's scheduler and mpirun's step messages hold (serve's
 * --parallel, its prompt rows per step); a prompt of `run` runs in passes of up to the
 * context's rows. */
#define K3_CHUNK 32

/* The state one conversation carries from token to token. */
struct k3_seq {
    int pos;           /* tokens processed so far */
    int max_ctx;       /* positions the MLA cache holds */
    int n_layers;
    float **kda_state; /* [L] → [kda_heads][d][d], NULL on MLA layers */
    float **conv_ring; /* [L] → [3][P][W-1] raw inputs of q, k, v */
    float **mla_cache; /* [L] → [max_ctx][kv_lora + rope], NULL on KDA layers */
};

int k3_seq_init(struct k3_seq *q, const struct k3_config *c, int max_ctx, struct k3_err *err);
/* Back to position 0 with zeroed state, ready for another conversation. */
void k3_seq_reset(struct k3_seq *q, const struct k3_config *c);
void k3_seq_free(struct k3_seq *q);
/* dst takes src's state at src's position (the MLA cache's rows before it): a
 * conversation resumed there computes the bytes src would.  -1 when dst holds fewer
 * positions than src has used. */
int k3_seq_copy(struct k3_seq *dst, const struct k3_seq *src, const struct k3_config *c);
/* Bytes of state a sequence of max_ctx positions keeps (KDA + conv + MLA cache). */
uint64_t k3_seq_state_bytes(const struct k3_config *c, int max_ctx);

/* One step's rows.  logits receives a [vocab] row for each row whose want_logits is
 * set, in row order (none when want_logits is NULL). */
struct k3_step {
    int n;                      /* rows, 1..k3_forward.rows */
    const int32_t *tokens;      /* [n] */
    struct k3_seq *const *seq;  /* [n] the sequence each row extends */
    const bool *want_logits;    /* [n] or NULL */
    float *logits;              /* [rows wanting logits][vocab] */
};

/* Where the trunk comes from when it is not all resident (stream/stream.h): segment()
 * makes a segment's matrices available and bound before it is used; ahead() binds a later
 * segment's too, while the current one is in use (1: it cannot yet; nothing bound);
 * embed() writes the f32 embedding rows of T tokens. */
struct k3_trunk_source {
    int (*segment)(void *ctx, int seg, struct k3_err *err);
    int (*ahead)(void *ctx, int seg, struct k3_err *err);
    int (*embed)(void *ctx, const int32_t *tokens, int T, float *out, struct k3_err *err);
    void *ctx;
};

/* Router prediction (decode steps): while layer l computes, layer l+1's router is applied
 * to a hidden state of layer l and the top-k' experts of every row are prefetched. */
enum k3_predict_from {
    K3_PREDICT_OFF,
    K3_PREDICT_MOE_INPUT,      /* layer l's MoE input, normalized with its own gain */
    K3_PREDICT_MOE_INPUT_NEXT, /* layer l's mixed MoE input, normalized with l+1's gain */
    K3_PREDICT_LAYER_OUTPUT,   /* layer l's output, normalized with l+1's gain (later) */
    K3_PREDICT_IDS,            /* no router: the experts layer l chose, by co-occurrence
                                * counts learned online (predict_ids.h) */
};

/* Called with x after each layer (layer = 0..L-1) and the final mixed h (layer = L),
 * for every row; pos is the row's position in its sequence. */
typedef void (*k3_layer_hook)(void *ctx, int pos, int layer, const float *x, int H);

/* The experts a step's rows chose, each once and ascending, with the (row · k + slot)
 * pairs that use it: users[user_off[e] .. user_off[e + 1]) for expert e; and the process
 * (rank) that reads and computes each (0 when one process computes all). */
struct k3_expert_groups {
    int n;                /* chosen experts */
    int *expert;          /* [min(E, C * k)] ascending */
    int *user_off;        /* [E + 1] */
    int *users;           /* [C * k] */
    int *rank_of;         /* [min(E, C * k)] */
};

/* When other processes compute the experts outside share (engine/cluster): step() tells
 * them a step's rows before it runs (the leader's; NULL on followers); exchange() is
 * called once per MoE layer with y [rows · k][H_l] holding this process's experts'
 * outputs and returns with every (row, slot) filled in; step_done() follows every step
 * with its result, so that a step that failed part-way still answers the exchanges the
 * others wait for. */
struct k3_peer_hooks {
    struct k3_share share; /* the experts this process reads and computes */
    int (*step)(void *ctx, const struct k3_step *st, struct k3_err *err);
    int (*exchange)(void *ctx, int layer, const struct k3_expert_groups *g, float *y,
                    struct k3_err *err);
    void (*step_done)(void *ctx, bool failed, struct k3_err *err);
    void *ctx;
};

/* Replayed routing (engine/routes): the k experts row `pos` of sequence q takes at MoE
 * layer l, in selection order, in place of the router's choice.  The router's own
 * scores for those experts still weigh them in the combine, normalized as it normalizes
 * its own choices, so the hidden states keep the model's scale; the output is no longer
 * the model's. */
struct k3_route_source {
    int (*choose)(void *ctx, const struct k3_seq *q, int pos, int l, int *sel,
                  struct k3_err *err);
    void *ctx;
};

/* What runs beside the math; every member may be left zero. */
struct k3_forward_hooks {
    const struct k3_trunk_source *trunk; /* NULL: every segment resident */
    enum k3_predict_from predict;
    int predict_k;                       /* experts prefetched per row and layer */
    struct k3_trace *trace;              /* NULL: none */
    k3_layer_hook on_layer;
    void *on_layer_ctx;
    struct k3_peer_hooks peers;          /* zero: this process computes every expert */
    const struct k3_route_source *routes; /* NULL: the router chooses */
};

struct k3_forward_scratch;
struct k3_id_predictor;
struct k3numa_plan;
struct k3numa_teams;

/* Counters since the context began. */
struct k3_forward_stats {
    uint64_t steps, rows;
    uint64_t decode_steps, decode_rows; /* steps whose every row is its sequence's only one */
    uint64_t *decode_experts;           /* [n_layers] experts a layer read in decode steps:
                                         * the union of its rows' choices */
};

/* The compute context steps run in. */
struct k3_forward {
    const struct k3_model *m;
    struct k3_expert_store *experts;
    struct k3_forward_hooks hooks;
    int max_ctx;                 /* the longest sequence it serves */
    int rows;                    /* the most rows a step holds: a prompt pass's size */
    struct k3_forward_scratch *s;
    struct k3numa_teams *teams;  /* who computes routed experts (numa/teams.h) */
    struct k3_forward_stats stats;
    struct k3_id_predictor *id_pred; /* --predict-from ids (k3_forward_predict_ids), or NULL */
};

/* A compute team per team of plan (numa/plan.h; NULL: one team of every OpenMP thread).
 * Each routed expert is computed by the team that k3_landed.team names, all teams at
 * once; the output bytes do not depend on the plan. */
int k3_forward_init(struct k3_forward *f, const struct k3_model *m,
                    struct k3_expert_store *experts, int max_ctx, int rows,
                    const struct k3numa_plan *plan, struct k3_err *err);
void k3_forward_free(struct k3_forward *f);

/* Prediction from ids (hooks.predict K3_PREDICT_IDS): its counts, allocated once. */
int k3_forward_predict_ids(struct k3_forward *f, struct k3_err *err);

/* Runs one step; each sequence's position advances by its rows. */
int k3_forward_step(struct k3_forward *f, const struct k3_step *step, struct k3_err *err);

/* n tokens of one sequence, in passes of up to f->rows.  logits: NULL, or [n][vocab]
 * when all_logits, or [vocab] for the last token only. */
int k3_forward_tokens(struct k3_forward *f, struct k3_seq *q, const int32_t *tokens, int n,
                      float *logits, bool all_logits, struct k3_err *err);

/* Routed experts team `team` has computed since the context began (0 for no such team). */
uint64_t k3_forward_team_experts(const struct k3_forward *f, int team);
/* Of the routed experts all teams computed, those one thread computed whole (small ones,
 * and a prompt pass's that fit a member's buffers), not split over its team. */
uint64_t k3_forward_experts_whole(const struct k3_forward *f);

/* Bytes of scratch a context of `rows` rows allocates (activations, AttnRes blocks,
 * router outputs and per-row expert outputs of a pass, attention rows, each team's
 * expert buffers). */
uint64_t k3_forward_scratch_bytes(const struct k3_config *c, int max_ctx, int rows, int threads,
                                  int teams);

#endif
