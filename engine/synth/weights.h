/* The values of a synthetic checkpoint: seeded random tensors by K3's init rules.
 *
 * Owns: one random stream per (seed, tensor name, chunk of 65536 elements), so chunks
 * fill in parallel and a tensor's bytes depend on nothing but the seed and its name;
 * the init rule of each trunk tensor (tensors.h's K3_INIT_*); routed experts as uniform
 * MXFP4 nibbles under E8M0 scales near 1/sqrt(fan_in).
 * Does not own: which tensors exist and where they are written (synth.c).
 * Part of the synthetic model format: the same seed gives the same bytes on every libc
 * (no libm function but sqrt, which IEEE 754 rounds correctly; see fixed_math.h).
 */
#ifndef K3_SYNTH_WEIGHTS_H
#define K3_SYNTH_WEIGHTS_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/model/config.h"
#include "engine/model/safetensors.h"
#include "engine/model/tensors.h"

/* One tensor, as the generator sees it. */
struct k3_synth_tensor {
    const char *name;                  /* seeds its streams */
    enum k3_dtype dtype;               /* F32 or BF16 for trunk tensors, U8 for experts */
    const struct k3_tensor_spec *spec; /* a trunk tensor's init rule; NULL: expert part */
    bool is_scale;                     /* expert part: E8M0 scales (else packed nibbles) */
    int expert_fan_in;                 /* expert scales: the inputs they cover */
};

/* Elements [first, first + count) of t into out (count × the dtype's size bytes). */
void k3_synth_fill(const struct k3_synth_tensor *t, const struct k3_config *c, uint64_t seed,
                   int64_t first, int64_t count, uint8_t *out);

/* The E8M0 exponent that puts MXFP4 weights of uniform nibbles (rms about 2.93) near
 * std 1/sqrt(fan_in): 127 + round(log2(1 / (2.93 sqrt(fan_in)))). */
int k3_e8m0_center(int fan_in);

#endif
