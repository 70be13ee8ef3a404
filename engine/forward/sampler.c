#include "engine/forward/sampler.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

int k3_sampler_init(struct k3_sampler *s, int vocab, float temp, int top_k, float top_p,
                    uint64_t seed, struct k3_err *err)
{
    s->vocab = vocab;
    k3_sampler_set(s, temp, top_k, top_p, seed);
    s->order = malloc(sizeof(int) * (size_t)vocab);
    s->prob = malloc(sizeof(float) * (size_t)vocab);
    if (!s->order || !s->prob) {
        k3_sampler_free(s);
        return k3_errf(err, "out of memory for the sampler");
    }
    return 0;
}

void k3_sampler_set(struct k3_sampler *s, float temp, int top_k, float top_p, uint64_t seed)
{
    s->temp = temp;
    s->top_k = top_k > 0 && top_k < s->vocab ? top_k : 0;
    s->top_p = top_p;
    k3_rng_seed(&s->rng, seed);
}

void k3_sampler_free(struct k3_sampler *s)
{
    free(s->order);
    free(s->prob);
    s->order = NULL;
    s->prob = NULL;
}

int k3_argmax(const float *logits, int n)
{
    int best = 0;
    for (int i = 1; i < n; i++)
        if (logits[i] > logits[best])
            best = i;
    return best;
}

/* Larger logit first; the lower id first among equals (a total order: qsort is not
 * stable, so the order must not depend on it). */
static int by_logit_desc(const void *a, const void *b, void *ctx)
{
    const float *logits = ctx;
    int x = *(const int *)a, y = *(const int *)b;
    if (logits[x] != logits[y])
        return logits[x] > logits[y] ? -1 : 1;
    return x - y;
}

/* Draws among the candidates s->order[0..n) (ids ascending), whose largest logit is
 * max: top-k, then top-p over the best first, then one uniform draw. */
static int draw(struct k3_sampler *s, const float *logits, int n, float max)
{
    bool cut = s->top_k && s->top_k < n; /* as k3_sampler_set turns off a k >= vocab */
    if (cut || s->top_p < 1) {
        qsort_r(s->order, (size_t)n, sizeof(int), by_logit_desc, (void *)logits);
        if (cut)
            n = s->top_k;
    }
    double sum = 0;
    for (int i = 0; i < n; i++) {
        s->prob[i] = expf((logits[s->order[i]] - max) / s->temp);
        sum += s->prob[i];
    }
    if (s->top_p < 1) { /* the shortest best-first prefix holding top_p of the mass */
        double kept = 0;
        int i = 0;
        while (i < n && kept < s->top_p * sum)
            kept += s->prob[i++];
        n = i > 0 ? i : 1;
        sum = kept > 0 ? kept : s->prob[0];
    }
    double u = k3_rng_uniform(&s->rng) * sum, acc = 0;
    for (int i = 0; i < n; i++) {
        acc += s->prob[i];
        if (u < acc)
            return s->order[i];
    }
    return s->order[n - 1];
}

int k3_sample(struct k3_sampler *s, const float *logits)
{
    if (s->temp <= 0)
        return k3_argmax(logits, s->vocab);
    for (int i = 0; i < s->vocab; i++)
        s->order[i] = i;
    return draw(s, logits, s->vocab, logits[k3_argmax(logits, s->vocab)]);
}

int k3_argmax_masked(const float *logits, const uint32_t *allowed, int n)
{
    int best = -1;
    for (int w = 0; w < (n + 31) / 32; w++)
        for (uint32_t bits = allowed[w]; bits; bits &= bits - 1) {
            int i = w * 32 + __builtin_ctz(bits);
            if (i < n && (best < 0 || logits[i] > logits[best]))
                best = i;
        }
    return best;
}

int k3_sample_masked(struct k3_sampler *s, const float *logits, const uint32_t *allowed)
{
    int best = k3_argmax_masked(logits, allowed, s->vocab);
    if (best < 0 || s->temp <= 0)
        return best;
    int n = 0;
    for (int w = 0; w < (s->vocab + 31) / 32; w++)
        for (uint32_t bits = allowed[w]; bits; bits &= bits - 1) {
            int i = w * 32 + __builtin_ctz(bits);
            if (i < s->vocab)
                s->order[n++] = i;
        }
    return draw(s, logits, n, logits[best]);
}

const float *k3_logits_adjust(const struct k3_logit_adjust *a, const float *logits, int vocab,
                              float *out)
{
    bool penalties = a->presence != 0 || a->frequency != 0;
    if (!penalties && !a->n_bias)
        return logits;
    memset(out, 0, sizeof(float) * (size_t)vocab); /* first each token's count */
    for (int i = 0; penalties && i < a->n_seen; i++)
        out[a->seen[i]] += 1;
    for (int i = 0; i < vocab; i++)
        out[i] = logits[i] - out[i] * a->frequency - (out[i] > 0 ? a->presence : 0);
    for (int i = 0; i < a->n_bias; i++) {
        const struct k3_logit_bias *b = &a->bias[i];
        out[b->id] = b->bias <= -100 ? -INFINITY : out[b->id] + b->bias;
    }
    return out;
}
