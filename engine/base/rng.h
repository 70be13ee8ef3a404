/* The project's own seeded generator (xoshiro256**, seeded through splitmix64), so that
 * synthetic weights and sampling are the same bytes on every libc and machine: the
 * integers and uniforms are exact; the normal draws use only fixed_math.h's log and cos
 * and IEEE sqrt, so they carry the promise fixed_math.h states (IEEE doubles evaluated
 * as doubles, no fused multiply-add).
 * Owns: struct k3_rng, its seeding and its integer, uniform, normal and distinct draws.
 * Does not own: sampling tokens from logits (engine/forward/sampler.h). */
#ifndef K3_RNG_H
#define K3_RNG_H

#include <math.h>
#include <stdint.h>

#include "engine/base/fixed_math.h"

struct k3_rng {
    uint64_t s[4];
};

static inline uint64_t k3_splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static inline void k3_rng_seed(struct k3_rng *r, uint64_t seed)
{
    for (int i = 0; i < 4; i++)
        r->s[i] = k3_splitmix64(&seed);
}

static inline uint64_t k3_rng_next(struct k3_rng *r)
{
    uint64_t *s = r->s;
    uint64_t x = s[1] * 5;
    uint64_t out = ((x << 7) | (x >> 57)) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = (s[3] << 45) | (s[3] >> 19);
    return out;
}

/* Uniform in [0, 1) with 53 random bits. */
static inline double k3_rng_uniform(struct k3_rng *r)
{
    return (double)(k3_rng_next(r) >> 11) * 0x1.0p-53;
}

/* Standard normal (Box-Muller; one value per call keeps streams simple). */
static inline double k3_rng_normal(struct k3_rng *r)
{
    double u1 = 1.0 - k3_rng_uniform(r), u2 = k3_rng_uniform(r); /* u1 in (0, 1] */
    return sqrt(-2.0 * k3_log(u1)) * k3_cos_2pi(u2);
}

/* k distinct values of [0, n), in the order drawn (k <= n; a random routing). */
static inline void k3_rng_distinct(struct k3_rng *r, int n, int k, int *out)
{
    for (int i = 0; i < k; i++) {
        int v, dup;
        do {
            v = (int)(k3_rng_next(r) % (uint64_t)n);
            dup = 0;
            for (int j = 0; j < i; j++)
                dup |= out[j] == v;
        } while (dup);
        out[i] = v;
    }
}

#endif
