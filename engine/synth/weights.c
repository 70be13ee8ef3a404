/* Seeded values of a synthetic checkpoint.  See weights.h. */
#include "engine/synth/weights.h"

#include <math.h>
#include <string.h>
#include <xxhash.h>

#include "engine/base/fixed_math.h"
#include "engine/base/rng.h"
#include "engine/kernels/kernels.h"

/* Elements per random stream (part of the format: it sets where each stream starts). */
#define STREAM_ELEMS (1 << 16)

static uint64_t stream_seed(uint64_t seed, const char *name, uint64_t chunk)
{
    uint64_t h = XXH3_64bits_withSeed(name, strlen(name), seed);
    return h ^ (chunk * 0x9e3779b97f4a7c15ull);
}

/* One trunk value by its init rule; i is the element index within the tensor. */
static float init_value(const struct k3_tensor_spec *s, const struct k3_config *c,
                        struct k3_rng *r, int64_t i)
{
    switch (s->init) {
    case K3_INIT_LINEAR: return (float)(k3_rng_normal(r) / sqrt((double)s->fan_in));
    case K3_INIT_EMBED: return (float)k3_rng_normal(r);
    case K3_INIT_LM_HEAD: return (float)(4.0 * k3_rng_normal(r) / sqrt((double)c->hidden));
    case K3_INIT_GAIN: return (float)(0.8 + 0.4 * k3_rng_uniform(r));
    case K3_INIT_RES_PROJ: return (float)(k3_rng_normal(r) / sqrt((double)c->hidden));
    case K3_INIT_A_LOG: {
        double u = 1.0 + 15.0 * k3_rng_uniform(r); /* drawn for every slot: stream stays aligned */
        return i < s->live ? (float)k3_log(u) : 0.0f;
    }
    case K3_INIT_DT_BIAS: return (float)(0.5 * k3_rng_normal(r));
    case K3_INIT_CONV: return (float)(0.25 * k3_rng_normal(r));
    case K3_INIT_BIAS: return (float)(0.05 * k3_rng_normal(r));
    }
    return 0;
}

/* round(log2 v) from v's binary exponent, exactly: v = m 2^e with m in [1/2, 1), so
 * log2 v = e + log2 m with log2 m in [-1, 0), nearer e when m > 1/sqrt(2). */
int k3_e8m0_center(int fan_in)
{
    int e;
    double m = frexp(1.0 / (2.93 * sqrt((double)fan_in)), &e);
    return 127 + (m > 0.70710678118654752440 ? e : e - 1);
}

void k3_synth_fill(const struct k3_synth_tensor *t, const struct k3_config *c, uint64_t seed,
                   int64_t first, int64_t count, uint8_t *out)
{
    int64_t n_streams = (count + STREAM_ELEMS - 1) / STREAM_ELEMS;
#pragma omp parallel for schedule(static)
    for (int64_t k = 0; k < n_streams; k++) {
        int64_t begin = first + k * STREAM_ELEMS;
        int64_t end = begin + STREAM_ELEMS < first + count ? begin + STREAM_ELEMS : first + count;
        struct k3_rng r;
        k3_rng_seed(&r, stream_seed(seed, t->name, (uint64_t)(begin / STREAM_ELEMS)));
        for (int64_t i = begin; i < end; i++) {
            int64_t o = i - first;
            if (!t->spec && t->is_scale) {
                int jitter = (int)(k3_rng_next(&r) % 3) - 1;
                out[o] = (uint8_t)(k3_e8m0_center(t->expert_fan_in) + jitter);
            } else if (!t->spec) {
                out[o] = (uint8_t)k3_rng_next(&r);
            } else {
                float v = init_value(t->spec, c, &r, i);
                if (t->dtype == K3_DT_F32)
                    memcpy(out + 4 * o, &v, 4);
                else {
                    uint16_t b = k3_f32_to_bf16(v);
                    memcpy(out + 2 * o, &b, 2);
                }
            }
        }
    }
}
