/* Prediction from ids alone (--predict-from ids): the next MoE layer's experts guessed
 * from the experts this layer chose, by how often each pair of consecutive MoE layers'
 * experts were chosen together so far (counts learned online from every step, prompt
 * passes too).  Needs no hidden state, so it works as well on a replayed trace as on the
 * router; on DeepSeek-V2-Lite's prompts it finds about two thirds of the next layer's
 * experts with 2 top_k guesses (bench/replay.sh).
 *
 * Owns: the counts ([moe layers - 1][E][E], 4 bytes each: 426 KB for k3-dsv2, 295 MB
 * for K3; counted in the --ram floor, k3_id_predictor_bytes) and the previous MoE layer's
 * choices of the step.
 * Does not own: what is prefetched (stages.c), the store.
 * Invariants: learning and guessing depend only on the ids seen, in order: the same run
 * guesses the same experts; guesses never change the output, only what is read early.
 */
#ifndef K3_PREDICT_IDS_H
#define K3_PREDICT_IDS_H

#include <stdint.h>

#include "engine/base/err.h"

struct k3_id_predictor {
    int layers, experts, top_k, rows; /* MoE layers, E, k, the most rows of a step */
    float *count;   /* [layers - 1][E][E] expert a at MoE layer m with b at m + 1 */
    float *total;   /* [layers - 1][E] the row sums of count */
    int *prev;      /* [rows][k] the previous MoE layer's choices in this step */
    int prev_layer; /* the MoE layer prev holds, or -1 */
    float *score;   /* [E] */
};

/* What a predictor of these sizes allocates: counts, their row sums, the previous layer's
 * choices of `rows` rows and the score row.  The one definition, for init and the budget. */
uint64_t k3_id_predictor_bytes(int moe_layers, int experts, int top_k, int rows);

int k3_id_predictor_init(struct k3_id_predictor *p, int moe_layers, int experts, int top_k,
                         int rows, struct k3_err *err);
void k3_id_predictor_free(struct k3_id_predictor *p);
/* MoE layer m's choices sel [T][k] for this step: counted against MoE layer m - 1's of
 * the same rows when the step had them, then kept for m + 1. */
void k3_id_predictor_learn(struct k3_id_predictor *p, int m, const int *sel, int T);
/* Row t's n best guesses for MoE layer m + 1 from its choices at m (the last learned),
 * best first, into out (fewer when fewer experts ever followed); their count. */
int k3_id_predictor_guess(struct k3_id_predictor *p, int m, int t, int n, int *out);

#endif
