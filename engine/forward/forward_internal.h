/* Inside the forward pass: the scratch of one step and the stages the layer loop calls.
 * Not part of the public interface.
 *
 * Files: forward.c the layer loop and AttnRes; attention.c KDA and MLA; moe.c the latent
 * MoE; stages.c what runs beside the math (streaming, prediction, tracing); scratch.c
 * the buffers and a sequence's state.  C below is the context's rows (k3_forward.rows):
 * the most one step or pass holds; E the experts of a layer.
 *
 * Owns: a step's scratch (struct k3_forward_scratch, the teams' and the experts'
 * buffers), the layer's parts and the stages.  Does not own: the weights
 * (engine/model/), the expert records' reads behind the store (engine/stream/).
 */
#ifndef K3_FORWARD_INTERNAL_H
#define K3_FORWARD_INTERNAL_H

#include <stdatomic.h>

#include "engine/forward/forward.h"

/* A routed expert whose record has landed, for its team to compute. */
struct expert_job {
    int expert;
    const uint8_t *record;
    double began, ended;  /* trace times of its computation */
    _Atomic int claimed;  /* taken by the member computing it whole (moe.c) */
};

/* Below this many multiply-adds (its rows × 3 × moe_inter × H_l), a routed expert is
 * computed whole by one member of its team, the team's small experts dealt out among its
 * members: split over the team, its barriers would cost more than the split gains, and
 * far more when the cores are shared (a member waits for a descheduled teammate).  K3's
 * experts (33M per row) are far above it; k3-tiny's (37K per row) below. */
#define K3_EXPERT_ALONE_MAX_WORK (1L << 20)

/* The buffers one expert's computation uses. */
struct expert_bufs {
    float *zt;            /* [rows][H_l] its gathered inputs */
    float *fg;            /* [rows][moe_inter] SiTU(W1 z, W3 z) */
    float *yt;            /* [rows][H_l] its outputs */
};

/* What one compute team uses for routed experts (numa/teams.h). */
struct team_scratch {
    struct expert_bufs whole; /* C rows: an expert the whole team computes */
    struct expert_bufs *alone; /* [threads] alone_rows each: a member's own experts */
    struct expert_job *jobs; /* [E] this round's experts, in the order they landed */
    int n_jobs;
    uint64_t computed;    /* experts computed since the context began */
    _Atomic uint64_t computed_whole; /* of them, by one member alone */
};

/* Attention Residuals (§3.2): the blocks stored so far and the live partial sum. */
struct attn_res {
    float *p;             /* [C][H] partial sum of the current block */
    float *blocks;        /* [C][max_blocks][H] stored block representations */
    int n_blocks;         /* the same for every row */
    bool p_empty;         /* a block just started: the next add sets p */
};

struct k3_forward_scratch {
    void *block;     /* the one allocation every buffer below lives in */
    int rows;        /* C */
    int threads;
    int n_teams;
    int alone_rows;  /* the most rows of an expert one member computes alone */
    /* the step */
    int *row_pos;    /* [C] each row's position in its sequence */
    struct k3_seq *const *row_seq; /* [C] the step's sequences (k3_step.seq) */
    bool decode;     /* every row is the only row of its sequence */
    struct attn_res res;
    float *a;        /* [C][H] mixed input of the current sublayer */
    float *hn;       /* [C][H] normalized input of the current sublayer */
    float *o;        /* [C][H] output of the current sublayer */
    /* attention */
    float *kq, *kk, *kv, *ku, *kz, *kout; /* [C][P] KDA projections and gated output */
    float *kfa;      /* [C][kda_head_dim] low-rank gate */
    float *kbeta;    /* [C][kda_heads] */
    float *mcq;      /* [C][q_lora] */
    float *mq;       /* [C][mla_heads * (nope + rope)] */
    float *mkv;      /* [C][kv_lora + rope] */
    float *mo, *mg;  /* [C][mla_heads * v_head] attention output and gate */
    float *mla_tmp;  /* [threads][k3_mla_heads_per_walk][max_ctx + 2 * kv_lora] */
    /* feed-forward */
    float *fg;       /* [C][max(dense, shared, expert) width] SiTU(gate, up) of an MLP */
    float *rlogit;   /* [C][E] router logits */
    float *rkey;     /* [E] router selection keys */
    int *sel;        /* [C][k] selected experts, selection order */
    float *selw;     /* [C][k] their weights */
    float *z;        /* [C][H_l] latent inputs */
    float *y;        /* [C][k][H_l] expert output per (row, slot) */
    float *lat;      /* [C][H_l] combined, normalized latent outputs */
    float *routed;   /* [C][H] the routed experts' output, projected up */
    struct k3_expert_groups groups;
    int *owned;      /* [min(E, C * k)] the chosen experts this process computes */
    int *round;      /* [E] the store's indices of the records a round computes */
    struct team_scratch *team; /* [n_teams] */
    /* prediction */
    float *pred_h;   /* [C][H] the hidden states a prediction routes */
    float *pred_logit; /* [C][E] */
    int *pred_idx;   /* [C][E] each row's predicted experts, best first */
    float *pred_w;   /* [C][E] */
    int *pred_list;  /* [E] the union to prefetch */
    int *pred_got;   /* [C] --predict-from ids: the guesses each row has */
    bool *pred_mark; /* [E] */
    int pred_layer;  /* the layer pred_rank is for, or -1 */
    int *pred_rank;  /* [E] dealt experts (share.h): the rank each predicted one went to, or -1 */
    /* output */
    int *out_rows;   /* [C] rows whose output is computed */
    struct k3_seq **pass_seq; /* [C] k3_forward_tokens's step: every row the one sequence */
    bool *pass_want; /* [C] which of its rows want logits */
    void *mxfp4;     /* the expert kernels' scratch: [threads] slots of [C][max(H_l, moe_inter)] */
};

/* ---- attention.c ---- */
void k3_kda_rows(struct k3_forward *f, const struct k3_step *st, int l);
void k3_mla_rows(struct k3_forward *f, const struct k3_step *st, int l);

/* ---- moe.c ---- */
/* out[T][H] = SiTU MLP(in[T][H]) of width I; act [T][I] scratch. */
void k3_mlp_rows(const struct k3_config *c, const struct k3_mlp_weights *w, int I,
                 const float *in, float *out, float *act, int T);
/* The latent MoE of layer l on s->hn (s->a before the norm), output in s->o. */
int k3_moe_rows(struct k3_forward *f, int l, int T, struct k3_err *err);

/* ---- stages.c: what runs beside the math ---- */
enum k3_stage { K3_STAGE_LAYER, K3_STAGE_ATTENTION, K3_STAGE_FFN, K3_STAGE_OUTPUT };
/* Before a stage: its weights streamed in when not resident, its trace span opened. */
int k3_stage_enter(struct k3_forward *f, enum k3_stage stage, int l, struct k3_err *err);
void k3_stage_leave(struct k3_forward *f);
/* Where a prediction of layer l + 1's experts may be made: the FFN input (after layer
 * l's own reads are issued) or the layer's output; --predict-from picks one. */
enum k3_predict_point { K3_AT_FFN_INPUT, K3_AT_LAYER_OUTPUT };
int k3_stage_predict(struct k3_forward *f, int l, enum k3_predict_point at, int T,
                     struct k3_err *err);
/* The embedding rows of the step's tokens into out [T][H]. */
int k3_stage_embed(struct k3_forward *f, const int32_t *tokens, int T, float *out,
                   struct k3_err *err);

#endif
