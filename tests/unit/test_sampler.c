/* The sampler (engine/forward/sampler.h): temperature 0 and top-k 1 are greedy; top-k draws
 * only among the k best and top-p only among the smallest best-first set whose mass
 * reaches p, equal logits ordered by id (the lower first); the kept tokens come out in
 * proportion to their renormalized probabilities; a seed gives the same draws. */
#include <math.h>
#include <string.h>

#include "engine/forward/sampler.h"
#include "tests/check.h"

enum { SEEDS = 4000, MAX_VOCAB = 64 };

/* How often each token comes out of the first draw of seeds 1 .. SEEDS. */
static void draw_per_seed(const float *logits, int vocab, float temp, int top_k, float top_p,
                          int *count)
{
    memset(count, 0, sizeof *count * (size_t)vocab);
    for (uint64_t seed = 1; seed <= SEEDS; seed++) {
        struct k3_sampler s;
        struct k3_err err;
        REQUIRE(k3_sampler_init(&s, vocab, temp, top_k, top_p, seed, &err) == 0, "%s", err.msg);
        int id = k3_sample(&s, logits);
        REQUIRE(id >= 0 && id < vocab, "seed %llu drew %d", (unsigned long long)seed, id);
        count[id]++;
        k3_sampler_free(&s);
    }
}

/* The tokens drawn at all, as a bit mask (vocab <= 64). */
static uint64_t drawn(const int *count, int vocab)
{
    uint64_t mask = 0;
    for (int i = 0; i < vocab; i++)
        mask |= count[i] ? 1ull << i : 0;
    return mask;
}

static uint64_t ids(const int *list, int n)
{
    uint64_t mask = 0;
    for (int i = 0; i < n; i++)
        mask |= 1ull << list[i];
    return mask;
}

/* The k best tokens, found the slow way: the larger logit first, the lower id among equals. */
static uint64_t best_k(const float *logits, int vocab, int k)
{
    uint64_t taken = 0;
    for (int j = 0; j < k; j++) {
        int best = -1;
        for (int i = 0; i < vocab; i++)
            if (!(taken >> i & 1) && (best < 0 || logits[i] > logits[best]))
                best = i;
        taken |= 1ull << best;
    }
    return taken;
}

static void test_greedy(void)
{
    enum { V = 12 };
    const float logits[V] = {0.5f, 2.0f, -1.0f, 3.5f, 3.5f, 0.0f, 1.0f, 3.4f, -4.0f, 2.2f, 0.1f, 3.0f};
    int count[V];
    CHECK(k3_argmax(logits, V) == 3, "argmax of two equal best (3, 4) is the lower, got %d",
          k3_argmax(logits, V));
    draw_per_seed(logits, V, 0.0f, 0, 1.0f, count);
    CHECK(count[3] == SEEDS, "temperature 0 is greedy: token 3 in %d of %d draws", count[3], SEEDS);
    draw_per_seed(logits, V, 0.0f, 5, 0.5f, count);
    CHECK(count[3] == SEEDS, "temperature 0 is greedy whatever top-k and top-p: %d", count[3]);
    draw_per_seed(logits, V, 1.5f, 1, 1.0f, count);
    CHECK(count[3] == SEEDS, "top-k 1 is greedy: token 3 in %d of %d draws", count[3], SEEDS);
}

/* Over random logits and several k, only the k best are ever drawn, and each of them is
 * (a flat temperature makes every kept token likely enough to show up). */
static void test_top_k(void)
{
    struct k3_rng r;
    k3_rng_seed(&r, 17);
    float logits[MAX_VOCAB];
    int count[MAX_VOCAB];
    const int ks[] = {2, 5, 17};
    for (int rep = 0; rep < 3; rep++) {
        for (int i = 0; i < MAX_VOCAB; i++)
            logits[i] = (float)(k3_rng_next(&r) % 16) * 0.25f; /* many equal logits */
        for (size_t j = 0; j < sizeof ks / sizeof ks[0]; j++) {
            int k = ks[j];
            draw_per_seed(logits, MAX_VOCAB, 8.0f, k, 1.0f, count);
            uint64_t want = best_k(logits, MAX_VOCAB, k), got = drawn(count, MAX_VOCAB);
            CHECK(!(got & ~want), "top-k %d, logits %d: drew tokens outside the k best (0x%llx)",
                  k, rep, (unsigned long long)(got & ~want));
            CHECK(got == want, "top-k %d, logits %d: drew 0x%llx of the k best 0x%llx", k, rep,
                  (unsigned long long)got, (unsigned long long)want);
        }
    }
    /* A tie at the k-th place: of 2 and 3 (equal), the lower id is kept. */
    const float tie[6] = {0.0f, 2.0f, 1.0f, 1.0f, 1.5f, -1.0f};
    draw_per_seed(tie, 6, 1.0f, 3, 1.0f, count);
    CHECK(drawn(count, 6) == ids((const int[]){1, 4, 2}, 3), "top-k 3 at a tie: drew 0x%llx",
          (unsigned long long)drawn(count, 6));
}

/* Logits log(prob): the mass of each token is known. */
static void log_probs(float *logits, const double *prob, int n)
{
    for (int i = 0; i < n; i++)
        logits[i] = (float)log(prob[i]);
}

/* Draws only from the smallest best-first set holding p of the mass, in proportion to the
 * renormalized probabilities. */
static void test_top_p(void)
{
    /* Best first: 1 (.4), 2 (.3), 3 (.2), 0 (.1). */
    const double prob[4] = {0.1, 0.4, 0.3, 0.2};
    float logits[4];
    int count[4];
    log_probs(logits, prob, 4);
    struct {
        float p;
        uint64_t keep;
    } cases[] = {
        {0.35f, 1u << 1},                   /* .4 alone reaches .35 */
        {0.65f, 1u << 1 | 1u << 2},         /* .4 < .65 <= .7 */
        {0.75f, 1u << 1 | 1u << 2 | 1u << 3}, /* .7 < .75 <= .9 */
        {0.95f, 0xf},                       /* all four */
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        draw_per_seed(logits, 4, 1.0f, 0, cases[c].p, count);
        CHECK(drawn(count, 4) == cases[c].keep, "top-p %.2f: drew 0x%llx, want 0x%llx",
              cases[c].p, (unsigned long long)drawn(count, 4), (unsigned long long)cases[c].keep);
    }
    /* The kept set {1, 2} is drawn .4 : .3, i.e. 4/7 and 3/7 (standard error ~0.008). */
    draw_per_seed(logits, 4, 1.0f, 0, 0.65f, count);
    double f1 = (double)count[1] / SEEDS;
    CHECK(fabs(f1 - 4.0 / 7) < 0.03, "top-p .65 draws token 1 at %.3f, want %.3f", f1, 4.0 / 7);

    /* Ties: equal masses are ordered by id.  0 and 1 (.3 each), then 2 and 3 (.2 each):
     * p = .65 needs three, so 2 is kept and 3 is not; p = .25 needs one, token 0. */
    const double tied[4] = {0.3, 0.3, 0.2, 0.2};
    log_probs(logits, tied, 4);
    draw_per_seed(logits, 4, 1.0f, 0, 0.65f, count);
    CHECK(drawn(count, 4) == 0x7, "top-p .65 at a tie: drew 0x%llx, want 0x7",
          (unsigned long long)drawn(count, 4));
    draw_per_seed(logits, 4, 1.0f, 0, 0.25f, count);
    CHECK(drawn(count, 4) == 0x1, "top-p .25 at a tie: drew 0x%llx, want 0x1",
          (unsigned long long)drawn(count, 4));

    /* Mass exactly p: four equal logits (each exactly 1/4) and p = .5 keep two, 0 and 1. */
    const float equal[4] = {0.5f, 0.5f, 0.5f, 0.5f};
    draw_per_seed(equal, 4, 1.0f, 0, 0.5f, count);
    CHECK(drawn(count, 4) == 0x3, "top-p .5 of four equal: drew 0x%llx, want 0x3 (reached at two)",
          (unsigned long long)drawn(count, 4));

    /* With top-k too, p is of the k kept: k = 2 leaves {1, 2} (mass .7); .6 of that (.42)
     * is reached by 1 and 2 together, not by 1 alone (.4). */
    log_probs(logits, prob, 4);
    draw_per_seed(logits, 4, 1.0f, 2, 0.6f, count);
    CHECK(drawn(count, 4) == (1u << 1 | 1u << 2), "top-k 2 then top-p .6: drew 0x%llx",
          (unsigned long long)drawn(count, 4));
}

/* The same seed gives the same sequence of draws; another seed another sequence. */
static void test_seed(void)
{
    enum { V = 50, DRAWS = 500 };
    struct k3_rng r;
    k3_rng_seed(&r, 23);
    float logits[V];
    for (int i = 0; i < V; i++)
        logits[i] = (float)k3_rng_normal(&r);
    int seq[3][DRAWS];
    const uint64_t seeds[3] = {42, 42, 43};
    for (int s = 0; s < 3; s++) {
        struct k3_sampler smp;
        struct k3_err err;
        REQUIRE(k3_sampler_init(&smp, V, 0.9f, 20, 0.9f, seeds[s], &err) == 0, "%s", err.msg);
        for (int d = 0; d < DRAWS; d++)
            seq[s][d] = k3_sample(&smp, logits);
        k3_sampler_free(&smp);
    }
    CHECK(!memcmp(seq[0], seq[1], sizeof seq[0]), "seed 42 twice gives the same draws");
    CHECK(memcmp(seq[0], seq[2], sizeof seq[0]), "seeds 42 and 43 give different draws");
}

int main(void)
{
    test_greedy();
    test_top_k();
    test_top_p();
    test_seed();
    return check_result();
}
