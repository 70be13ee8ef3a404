/* The performance model: seconds a token (and a prompt) on a described box, from a
 * budget's plan and a calibration's rates.
 *
 * Owns: the arithmetic of a decode step (bytes read against the drives' bandwidth,
 * weights against the cores' rates capped by memory bandwidth, the read path's CPU; with
 * and without prediction; pipelined and synchronous), of a prompt in passes, and of R
 * boxes sharing the routed experts (the busiest box's experts, the exchange of outputs).
 * Every figure it projects is returned, never printed.
 * Does not own: the budget (engine/stream/budget.h), the rates (rates.h), the pack's sizes
 * (pack_sizes.h), printing (engine/cli/cmd_plan.c).
 */
#ifndef K3_PLAN_PROJECT_H
#define K3_PLAN_PROJECT_H

#include <stdbool.h>

#include "engine/model/config.h"
#include "engine/model/trunk_type.h"
#include "engine/plan/rates.h"
#include "engine/stream/budget.h"

struct k3_box {
    int drives;
    double drive_gbps;        /* per drive */
    int cores, nodes;
    double mem_gbps;          /* per NUMA node */
    struct k3_rates rates;
};

/* A measured hit curve (replay --hit-curve: hit rate against cache records per layer),
 * or none (n 0): routing uniform over a layer's experts, as synthetic weights route. */
struct k3_hit_rates {
    const double *rate;       /* [n + 1] */
    int n;
};

/* What is planned: the config, its budget and what the budget was planned from. */
struct k3_planned {
    const struct k3_config *c;
    const struct k3_budget_input *in;
    const struct k3_budget *b;
    double overlapping;       /* trunk bytes computed while a layer's reads are in flight */
    double q8;                /* the trunk's Q8_0 bytes (0 for bf16) */
    enum k3_trunk_type tt;
    struct k3_hit_rates curve;
};

/* Bytes of weights a decode step computes and reads on one box. */
struct k3_step_bytes {
    double expert_bytes;      /* routed experts computed (MXFP4) */
    double trunk_compute;     /* trunk weights computed, the embedding aside */
    double trunk_q8;          /* of which Q8_0 (the rest bf16) */
    double trunk_read;        /* trunk segments streamed */
    double read;              /* bytes read off the drives */
    double hit;               /* fraction of records found in the cache */
};

/* Seconds a token, each way the engine may run. */
struct k3_projection {
    struct k3_step_bytes st;
    double io;                /* the step's reads over the drives: the I/O floor */
    double compute;           /* weights at the per-core rates, and the read path's CPU */
    double read_cpu;          /* of which the read path's CPU */
    double exchange;          /* between boxes (0 on one) */
    double pipelined;         /* reads overlap compute (and the exchange): the larger */
    double before_routing;    /* compute before each layer's routing is known */
    double without_prediction;/* the drives idle through before_routing and the exchange */
    double synchronous;       /* reads, then compute, then the exchange */
};

/* One decode step of the planned box. */
struct k3_projection k3_project_decode(const struct k3_planned *p, const struct k3_box *box);

/* A prompt of n tokens in passes of `rows` (routing uniform), seconds; *reads its bytes. */
double k3_project_prompt(const struct k3_planned *p, const struct k3_box *box, int n, int rows,
                         double *reads);

/* The link between boxes: bandwidth (Gb/s, bits) and the latency of one exchange. */
struct k3_net {
    double gbps, us;
};

/* R boxes like `box`, each holding the trunk and its share of the experts, expert e on box
 * e mod R (or, dealt, every expert: a layer's choices dealt out by position, share.h),
 * exchanging the routed experts' outputs after every MoE layer. */
struct k3_ranks_projection {
    struct k3_projection one;  /* the busiest box's step, the exchange in it */
    double busiest;            /* experts per layer on the busiest box */
    double owned;              /* experts a layer the busiest box holds */
    double output_bytes;       /* one expert's output (latent f32) */
    double total_bytes;        /* between all boxes a token */
    double link_bytes;         /* over the busiest box's link per layer */
};
struct k3_ranks_projection k3_project_ranks(const struct k3_planned *p, const struct k3_box *box,
                                            int R, bool dealt, const struct k3_net *net);

/* Expected experts per MoE layer on the busiest of R ranks: a token's k distinct experts
 * drawn uniformly from E, rank r owning k3_share_experts of them (e mod R). */
double k3_busiest_experts(int E, int k, int R);

#endif
