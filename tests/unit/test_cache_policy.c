/* engine/stream/policy and engine/routes/hit_curve: the replacement policies on a
 * simulated per-layer cache (the code the engine's cache and bench/routesim share):
 * LRU evicts the record asked least recently; LFRU keeps a record asked often over one
 * asked once more recently, and forgets old asks (a half-life later they weigh half);
 * with every expert cached only first asks miss; routes ranges parse as A-B, A-, A. */
#include <string.h>

#include "engine/routes/hit_curve.h"
#include "engine/routes/routes.h"
#include "engine/stream/policy.h"
#include "tests/check.h"

/* Asks one record of layer 0 in its own batch; whether it hit. */
static int ask(struct k3_sim_cache *c, struct k3_cache_policy *p, int32_t key, uint64_t *clock)
{
    return k3_sim_cache_batch(c, p, 0, &key, 1, clock);
}

/* A 2-slot cache asked a, a, a, b, then c (which evicts one of a, b), then asked which is
 * still held: returns the surviving key. */
static int32_t survivor(enum k3_cache_policy_kind kind)
{
    struct k3_cache_policy p;
    struct k3_sim_cache c;
    struct k3_err err;
    REQUIRE(!k3_cache_policy_init(&p, kind, 1, 8, 0, &err) && !k3_sim_cache_init(&c, 2), "init");
    uint64_t clock = 0;
    int32_t seq[] = {1, 1, 1, 2, 3};
    for (int i = 0; i < 5; i++)
        ask(&c, &p, seq[i], &clock);
    int32_t kept = c.key[0] == 3 ? c.key[1] : c.key[0];
    k3_sim_cache_free(&c);
    k3_cache_policy_free(&p);
    return kept;
}

static void decay(void)
{
    struct k3_cache_policy p;
    struct k3_err err;
    REQUIRE(!k3_cache_policy_init(&p, K3_POLICY_LFRU, 2, 4, 10, &err), "init");
    p.ops->batch(&p, 1);
    p.ops->asked(&p, 4 + 2); /* layer 1, expert 2 */
    double now = p.ops->keep(&p, 6, 0);
    for (int i = 0; i < 10; i++)
        p.ops->batch(&p, 1);
    double later = p.ops->keep(&p, 6, 0);
    CHECK(now > -1e-9 && now < 1e-9, "one ask scores log 1 = 0, got %g", now);
    CHECK(later < -0.6931 && later > -0.6932, "a half-life later: log 0.5, got %g", later);
    CHECK(p.ops->keep(&p, 5, 0) < -1e300, "never asked: lowest, got %g", p.ops->keep(&p, 5, 0));
    k3_cache_policy_free(&p);
}

static void whole_layer(void)
{
    struct k3_batches b = {.layers = 2, .experts = 4};
    struct k3_err err;
    int32_t s0[] = {0, 1}, s1[] = {4 + 3}, s2[] = {1, 2}, s3[] = {4 + 3};
    REQUIRE(!k3_batches_add(&b, 0, s0, 2, &err) && !k3_batches_add(&b, 1, s1, 1, &err) &&
            !k3_batches_add(&b, 0, s2, 2, &err) && !k3_batches_add(&b, 1, s3, 1, &err), "add");
    double rate[5];
    REQUIRE(!k3_hit_curve(&b, K3_POLICY_LRU, rate, &err), "%s", err.msg);
    /* 6 asks of 4 records: with every expert cached only the first asks miss (2 hits);
     * with one slot a layer, layer 0's slot holds 0 (1 is read while 0 is pinned, and
     * not kept), then 1 (2 likewise): only layer 1's second ask of 3 hits */
    CHECK(rate[4] == 2.0 / 6, "4 records a layer: %g, want 1/3", rate[4]);
    CHECK(rate[1] == 1.0 / 6, "1 record a layer: %g, want 1/6", rate[1]);
    k3_batches_free(&b);
}

static void ranges(void)
{
    struct k3_err err;
    int a, b;
    CHECK(!k3_routes_parse_range("3-7", &a, &b, &err) && a == 3 && b == 7, "3-7: %d %d", a, b);
    CHECK(!k3_routes_parse_range("5-", &a, &b, &err) && a == 5 && b == -1, "5-: %d %d", a, b);
    CHECK(!k3_routes_parse_range("9", &a, &b, &err) && a == 9 && b == 9, "9: %d %d", a, b);
    const char *bad[] = {"", "-3", "7-3", "x", "1-2-3", "1-x", "1 - 2"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECK(k3_routes_parse_range(bad[i], &a, &b, &err) && strstr(err.msg, "is not A-B"),
              "\"%s\" accepted (%d %d)", bad[i], a, b);
}

int main(void)
{
    CHECK(survivor(K3_POLICY_LRU) == 2, "lru kept %d, want 2 (the more recent)", survivor(K3_POLICY_LRU));
    CHECK(survivor(K3_POLICY_LFRU) == 1, "lfru kept %d, want 1 (asked thrice)", survivor(K3_POLICY_LFRU));
    decay();
    whole_layer();
    ranges();
    return check_result();
}
