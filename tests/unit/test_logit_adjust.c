/* A request's changes to a logit row (engine/forward/sampler.h k3_logits_adjust):
 * nothing asked, the row itself; logit_bias added, -100 a ban (-inf, never drawn even at
 * a high temperature); presence_penalty once per token sampled so far, frequency_penalty
 * once per time; the input row untouched. */
#include <math.h>
#include <string.h>

#include "engine/forward/sampler.h"
#include "tests/check.h"

enum { VOCAB = 8 };

int main(void)
{
    const float logits[VOCAB] = {1, 2, 3, 4, 5, 6, 7, 8};
    float out[VOCAB], copy[VOCAB];
    memcpy(copy, logits, sizeof copy);

    struct k3_logit_adjust none = {0};
    CHECK(k3_logits_adjust(&none, logits, VOCAB, out) == logits, "nothing asked: not the row itself");

    const struct k3_logit_bias bias[] = {{7, -100}, {0, 2.5f}, {3, -1}};
    struct k3_logit_adjust b = {.bias = bias, .n_bias = 3};
    const float *row = k3_logits_adjust(&b, logits, VOCAB, out);
    CHECK(row == out, "a bias: not the scratch row");
    CHECK(isinf(out[7]) && out[7] < 0, "bias -100: %g, want -inf", out[7]);
    CHECK(out[0] == 3.5f && out[3] == 3 && out[5] == 6, "biases: %g %g %g", out[0], out[3], out[5]);
    CHECK(!memcmp(copy, logits, sizeof copy), "the model's row changed");
    CHECK(k3_argmax(out, VOCAB) == 6, "the greedy token with 7 banned: %d", k3_argmax(out, VOCAB));
    for (uint64_t seed = 1; seed <= 500; seed++) {
        struct k3_sampler s;
        struct k3_err err;
        REQUIRE(k3_sampler_init(&s, VOCAB, 2.0f, 0, 1, seed, &err) == 0, "%s", err.msg);
        int id = k3_sample(&s, out);
        k3_sampler_free(&s);
        CHECK(id != 7, "seed %llu drew the banned token", (unsigned long long)seed);
    }

    const int32_t seen[] = {2, 5, 2, 2, 6};
    struct k3_logit_adjust p = {.presence = 0.5f, .frequency = 0.25f, .seen = seen, .n_seen = 5,
                                .bias = bias + 1, .n_bias = 1};
    k3_logits_adjust(&p, logits, VOCAB, out);
    CHECK(out[2] == 3 - 3 * 0.25f - 0.5f, "token 2, sampled 3 times: %g", out[2]);
    CHECK(out[5] == 6 - 0.25f - 0.5f && out[6] == 7 - 0.25f - 0.5f, "once: %g %g", out[5], out[6]);
    CHECK(out[1] == 2 && out[7] == 8, "never sampled: %g %g", out[1], out[7]);
    CHECK(out[0] == 3.5f, "the bias beside the penalties: %g", out[0]);
    return check_result();
}
