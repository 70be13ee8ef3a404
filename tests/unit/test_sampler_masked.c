/* The masked sampler (engine/forward/sampler.h): with every id allowed it draws exactly
 * what the unmasked one draws; with some allowed it draws what the unmasked one draws
 * over those ids alone (greedy, temperature, top-k, top-p, seeds); greedy takes the largest
 * allowed logit and the lower id at a tie; nothing allowed gives -1; logits are never
 * changed; bits past the vocabulary are ignored. */
#include <string.h>

#include "engine/forward/sampler.h"
#include "tests/check.h"

enum { V = 70, WORDS = (V + 31) / 32, DRAWS = 300 };

static const struct {
    float temp, top_p;
    int top_k;
} settings[] = {{0, 1, 0}, {1, 1, 0}, {0.7f, 1, 5}, {1.3f, 0.8f, 0}, {0.9f, 0.9f, 12},
                {1, 1, 40}, {1, 0.5f, 200}};

static void random_logits(struct k3_rng *r, float *logits, int n)
{
    for (int i = 0; i < n; i++) /* a coarse grid: many equal logits */
        logits[i] = (float)(k3_rng_next(r) % 24) * 0.25f - 3;
}

static void init(struct k3_sampler *s, int vocab, int k, uint64_t seed)
{
    struct k3_err err;
    REQUIRE(!k3_sampler_init(s, vocab, settings[k].temp, settings[k].top_k, settings[k].top_p,
                             seed, &err), "%s", err.msg);
}

/* Allowed ids a (ascending): the masked draw of the whole vocabulary is the unmasked draw
 * over the logits of a alone, mapped back. */
static void test_restricted(const float *logits, const uint32_t *bits, int rep)
{
    int a[V], n = 0;
    float sub[V];
    for (int i = 0; i < V; i++)
        if (bits[i / 32] >> (i % 32) & 1) {
            a[n] = i;
            sub[n++] = logits[i];
        }
    float copy[V];
    memcpy(copy, logits, sizeof copy);
    for (size_t k = 0; k < sizeof settings / sizeof *settings; k++) {
        struct k3_sampler masked, alone;
        init(&masked, V, (int)k, 1000 + (uint64_t)rep);
        init(&alone, n, (int)k, 1000 + (uint64_t)rep);
        int differ = 0;
        for (int d = 0; d < DRAWS; d++) {
            int x = k3_sample_masked(&masked, logits, bits), y = a[k3_sample(&alone, sub)];
            differ += x != y;
        }
        CHECK(!differ, "mask %d, setting %zu: %d of %d draws differ from sampling the %d "
              "allowed ids alone", rep, k, differ, DRAWS, n);
        k3_sampler_free(&masked);
        k3_sampler_free(&alone);
    }
    CHECK(!memcmp(copy, logits, sizeof copy), "mask %d: the logits changed", rep);
}

static void test_all_allowed(const float *logits)
{
    uint32_t all[WORDS];
    memset(all, 0xff, sizeof all); /* bits past V set too: ignored */
    for (size_t k = 0; k < sizeof settings / sizeof *settings; k++) {
        struct k3_sampler a, b;
        init(&a, V, (int)k, 7);
        init(&b, V, (int)k, 7);
        int differ = 0;
        for (int d = 0; d < DRAWS; d++)
            differ += k3_sample_masked(&a, logits, all) != k3_sample(&b, logits);
        CHECK(!differ, "setting %zu: all allowed, %d draws differ from unmasked", k, differ);
        k3_sampler_free(&a);
        k3_sampler_free(&b);
    }
}

static void test_greedy_and_none(void)
{
    const float logits[8] = {5, 1, 3, 3, 2, 3, 0, 4};
    uint32_t bits = 1u << 1 | 1u << 3 | 1u << 5 | 1u << 6; /* best allowed: 3 and 5 tie */
    CHECK(k3_argmax_masked(logits, &bits, 8) == 3, "masked argmax %d, want 3",
          k3_argmax_masked(logits, &bits, 8));
    struct k3_sampler s;
    struct k3_err err;
    REQUIRE(!k3_sampler_init(&s, 8, 0, 0, 1, 1, &err), "%s", err.msg);
    CHECK(k3_sample_masked(&s, logits, &bits) == 3, "greedy masked draw is not 3");
    bits = 0;
    CHECK(k3_sample_masked(&s, logits, &bits) == -1, "greedy with nothing allowed is not -1");
    k3_sampler_set(&s, 1, 3, 0.9f, 1);
    CHECK(k3_sample_masked(&s, logits, &bits) == -1, "sampling with nothing allowed is not -1");
    k3_sampler_free(&s);
}

int main(void)
{
    struct k3_rng r;
    k3_rng_seed(&r, 5);
    float logits[V];
    for (int rep = 0; rep < 6; rep++) {
        random_logits(&r, logits, V);
        uint32_t bits[WORDS] = {0};
        for (int i = 0; i < V; i++)
            if (k3_rng_next(&r) % 3 == 0 || i == rep)
                bits[i / 32] |= 1u << (i % 32);
        test_restricted(logits, bits, rep);
    }
    test_all_allowed(logits);
    test_greedy_and_none();
    return check_result();
}
