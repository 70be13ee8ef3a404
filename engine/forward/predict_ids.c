/* Prediction from ids alone (predict_ids.h). */
#include <stdlib.h>
#include <string.h>

#include "engine/forward/predict_ids.h"

/* Pairs of consecutive MoE layers the counts cover (one, unused, when there is one layer). */
static size_t layer_pairs(int moe_layers)
{
    return moe_layers > 1 ? (size_t)(moe_layers - 1) : 1;
}

uint64_t k3_id_predictor_bytes(int moe_layers, int experts, int top_k, int rows)
{
    uint64_t E = (uint64_t)experts, pairs = layer_pairs(moe_layers);
    return pairs * E * E * sizeof(float) + pairs * E * sizeof(float) +
           (uint64_t)rows * (uint64_t)top_k * sizeof(int) + E * sizeof(float);
}

int k3_id_predictor_init(struct k3_id_predictor *p, int moe_layers, int experts, int top_k,
                         int rows, struct k3_err *err)
{
    memset(p, 0, sizeof *p);
    size_t pairs = layer_pairs(moe_layers);
    *p = (struct k3_id_predictor){.layers = moe_layers, .experts = experts, .top_k = top_k,
                                  .rows = rows, .prev_layer = -1};
    p->count = calloc(pairs * (size_t)experts * (size_t)experts, sizeof *p->count);
    p->total = calloc(pairs * (size_t)experts, sizeof *p->total);
    p->prev = calloc((size_t)rows * (size_t)top_k, sizeof *p->prev);
    p->score = calloc((size_t)experts, sizeof *p->score);
    if (!p->count || !p->total || !p->prev || !p->score) {
        k3_id_predictor_free(p);
        return k3_errf(err, "--predict-from ids: out of memory for %zu co-occurrence counts",
                       pairs * (size_t)experts * (size_t)experts);
    }
    return 0;
}

void k3_id_predictor_free(struct k3_id_predictor *p)
{
    free(p->count);
    free(p->total);
    free(p->prev);
    free(p->score);
    memset(p, 0, sizeof *p);
}

void k3_id_predictor_learn(struct k3_id_predictor *p, int m, const int *sel, int T)
{
    int E = p->experts, K = p->top_k;
    if (m > 0 && p->prev_layer == m - 1)
        for (int t = 0; t < T; t++)
            for (int i = 0; i < K; i++) {
                int a = p->prev[t * K + i];
                float *row = p->count + ((size_t)(m - 1) * E + a) * E;
                for (int j = 0; j < K; j++)
                    row[sel[t * K + j]] += 1;
                p->total[(size_t)(m - 1) * E + a] += (float)K;
            }
    memcpy(p->prev, sel, sizeof(int) * (size_t)T * (size_t)K);
    p->prev_layer = m;
}

int k3_id_predictor_guess(struct k3_id_predictor *p, int m, int t, int n, int *out)
{
    int E = p->experts, K = p->top_k;
    if (m != p->prev_layer || m + 1 >= p->layers)
        return 0;
    memset(p->score, 0, sizeof(float) * (size_t)E);
    for (int i = 0; i < K; i++) { /* each chosen expert's share of what followed it */
        int a = p->prev[t * K + i];
        float total = p->total[(size_t)m * E + a];
        const float *row = p->count + ((size_t)m * E + a) * E;
        for (int e = 0; total > 0 && e < E; e++)
            p->score[e] += row[e] / total;
    }
    int got = 0;
    for (; got < n; got++) { /* the best left, the lower id on ties */
        int best = -1;
        for (int e = 0; e < E; e++)
            if (p->score[e] > 0 && (best < 0 || p->score[e] > p->score[best]))
                best = e;
        if (best < 0)
            break;
        out[got] = best;
        p->score[best] = 0;
    }
    return got;
}
