/* Sampling: greedy or seeded temperature / top-k / top-p, with the project's own
 * generator, so a seed gives the same tokens on every machine and thread count; the
 * masked variants draw only among the ids a grammar allows (engine/grammar/).
 * Ties (equal logits) always go to the lower token id.
 * Owns: struct k3_sampler, argmax and sampling (masked or not), and a request's logit
 * adjustments (bias and penalties).  Does not own: the generator (engine/base/rng.h), the
 * grammar's mask of allowed ids (engine/grammar/). */
#ifndef K3_SAMPLER_H
#define K3_SAMPLER_H

#include <stdint.h>

#include "engine/base/err.h"
#include "engine/base/rng.h"

struct k3_sampler {
    int vocab;
    float temp;     /* 0: greedy */
    int top_k;      /* 0: off */
    float top_p;    /* 1: off */
    struct k3_rng rng;
    int *order;     /* [vocab] candidate ids, best first */
    float *prob;    /* [vocab] */
};

int k3_sampler_init(struct k3_sampler *s, int vocab, float temp, int top_k, float top_p,
                    uint64_t seed, struct k3_err *err);
void k3_sampler_free(struct k3_sampler *s);
/* New settings and seed for the same buffers (a server reuses a sampler per slot). */
void k3_sampler_set(struct k3_sampler *s, float temp, int top_k, float top_p, uint64_t seed);

/* The index of the largest logit; the lower id wins ties. */
int k3_argmax(const float *logits, int n);

int k3_sample(struct k3_sampler *s, const float *logits);

/* The same, among the ids whose bit is set in allowed ([ceil(vocab/32)] words, bit i%32
 * of word i/32; a grammar's mask): the largest allowed logit when greedy, else the
 * unmasked procedure over the allowed candidates alone (top-k counts allowed ids only).
 * logits are not changed.  -1 when no id is allowed. */
int k3_argmax_masked(const float *logits, const uint32_t *allowed, int n);
int k3_sample_masked(struct k3_sampler *s, const float *logits, const uint32_t *allowed);

/* A request's changes to a logit row before it is sampled (OpenAI's logit_bias,
 * presence_penalty and frequency_penalty): out[i] = logits[i] + bias[i] - count[i] *
 * frequency - (count[i] > 0) * presence, count[i] being how often i was sampled so far; a
 * bias of -100 (or below) bans the token (-inf). */
struct k3_logit_bias {
    int32_t id;
    float bias;
};
struct k3_logit_adjust {
    const struct k3_logit_bias *bias; /* [n_bias] */
    int n_bias;
    float presence, frequency;
    const int32_t *seen;              /* [n_seen] the tokens sampled so far */
    int n_seen;
};
/* The row to sample from: logits itself when a asks nothing, else out [vocab] filled. */
const float *k3_logits_adjust(const struct k3_logit_adjust *a, const float *logits, int vocab,
                              float *out);

/* Bytes a sampler of vocab ids keeps (its order and probability buffers). */
static inline uint64_t k3_sampler_bytes(int vocab)
{
    return (uint64_t)vocab * (sizeof(int) + sizeof(float));
}

#endif
