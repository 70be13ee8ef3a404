/* The RAM budget planner (engine/stream/budget.c) on trunks whose segments differ in size.
 *
 * Properties: a budget that holds the whole trunk keeps the whole trunk resident (no
 * stream slots); every plan fits its budget; no streamed segment could still be made
 * resident within the budget; the resident layer bytes fall short of the best any plan
 * could hold (found by trying every subset) by less than that plan's stream slot; below
 * the floor the plan is refused.  Sequences held at once (serve --parallel) each add
 * their state to the floor, and a refusal names them.  --predict-from ids adds exactly its
 * counts' bytes to the floor. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "engine/model/config.h"
#include "engine/base/rng.h"
#include "engine/stream/budget.h"
#include "tests/check.h"

#define MiB ((uint64_t)1 << 20)
#define MAX_SEGS 10

struct shape {
    const char *name;
    int n;                    /* segments: 0 the embedding, then layers, then the output */
    uint64_t mib[MAX_SEGS];
};

static struct k3_config cfg;

static struct k3_budget_input input(const uint64_t *bytes, int n)
{
    return (struct k3_budget_input){
        .cfg = &cfg,
        .ctx = 8,
        .threads = 1,
        .teams = 1,
        .n_segments = n,
        .segment_bytes = bytes,
        .vector_bytes = 1 * MiB,
        .record_bytes = 4 * MiB,
        .embed_buffer_bytes = 2 * 64 * 1024,
        .manifest_bytes = 1 * MiB,
        .caller_bytes = 1 * MiB,
        .inflight_records = 4,
    };
}

/* The memory a resident set takes beyond the fixed part: the resident segments and two
 * stream slots of the largest streamed layer or output segment. */
static uint64_t trunk_cost(const struct k3_budget_input *in, const bool *resident)
{
    uint64_t c = 0, slot = 0;
    for (int s = 0; s < in->n_segments; s++)
        if (resident[s])
            c += in->segment_bytes[s];
        else if (s > 0 && in->segment_bytes[s] > slot)
            slot = in->segment_bytes[s];
    return c + 2 * slot;
}

static uint64_t layer_bytes(const struct k3_budget_input *in, const bool *resident)
{
    uint64_t r = 0;
    for (int s = 1; s < in->n_segments; s++)
        r += resident[s] ? in->segment_bytes[s] : 0;
    return r;
}

/* The most layer and output bytes any resident set holds within room (every subset),
 * and the smallest stream slot among the sets that hold that much. */
static uint64_t best_layer_bytes(const struct k3_budget_input *in, uint64_t room, uint64_t *slot)
{
    int n = in->n_segments - 1;
    uint64_t best = 0;
    *slot = UINT64_MAX;
    for (uint32_t mask = 0; mask < (1u << n); mask++) {
        bool resident[MAX_SEGS] = {false};
        uint64_t m = 0;
        for (int i = 0; i < n; i++) {
            resident[1 + i] = mask >> i & 1;
            if (!resident[1 + i] && in->segment_bytes[1 + i] > m)
                m = in->segment_bytes[1 + i];
        }
        uint64_t got = layer_bytes(in, resident);
        if (trunk_cost(in, resident) > room || got < best)
            continue;
        if (got > best || m < *slot)
            *slot = m;
        best = got;
    }
    return best;
}

/* Every property of one plan at `budget`. */
static void check_plan(const struct shape *sh, const struct k3_budget_input *in, uint64_t budget)
{
    struct k3_budget b;
    struct k3_err err;
    uint64_t whole = k3_budget_trunk_resident(in);
    uint64_t fixed = whole;
    for (int s = 0; s < in->n_segments; s++)
        fixed -= in->segment_bytes[s];
    int rc = k3_budget_plan(in, budget, &b, &err);
    if (budget < b.floor) {
        CHECK(rc == -1 && strstr(err.msg, "below the floor"), "%s: %" PRIu64 " MiB under the "
              "floor was accepted", sh->name, budget / MiB);
        return;
    }
    REQUIRE(rc == 0, "%s at %" PRIu64 " B: %s", sh->name, budget, err.msg);
    uint64_t cost = trunk_cost(in, b.resident);
    CHECK(fixed + cost + b.cache_bytes <= budget, "%s at %" PRIu64 " MiB: the plan takes %" PRIu64
          " B", sh->name, budget / MiB, fixed + cost + b.cache_bytes);
    uint64_t slot = 0, resident = 0;
    for (int s = 0; s < in->n_segments; s++) {
        resident += b.resident[s] ? in->segment_bytes[s] : 0;
        if (s && !b.resident[s] && in->segment_bytes[s] > slot)
            slot = in->segment_bytes[s];
    }
    CHECK(b.stream_slot_bytes == slot && b.resident_bytes == resident,
          "%s: slots %" PRIu64 " (want %" PRIu64 "), resident %" PRIu64 " (want %" PRIu64 ")",
          sh->name, b.stream_slot_bytes, slot, b.resident_bytes, resident);
    if (budget >= whole)
        CHECK(resident == whole - fixed && slot == 0,
              "%s at %" PRIu64 " MiB (the whole trunk takes %" PRIu64 " MiB): %" PRIu64
              " MiB resident, stream slots of %" PRIu64 " MiB", sh->name, budget / MiB,
              whole / MiB, resident / MiB, slot / MiB);
    for (int s = 0; s < in->n_segments; s++) {
        if (b.resident[s])
            continue;
        b.resident[s] = true;
        CHECK(fixed + trunk_cost(in, b.resident) > budget,
              "%s at %" PRIu64 " MiB: segment %d (%" PRIu64 " MiB) still fits resident",
              sh->name, budget / MiB, s, in->segment_bytes[s] / MiB);
        b.resident[s] = false;
    }
    uint64_t best_slot, best = best_layer_bytes(in, budget - fixed, &best_slot);
    uint64_t got = layer_bytes(in, b.resident);
    CHECK(got + best_slot >= best, "%s at %" PRIu64 " MiB: %" PRIu64 " MiB of layers resident, a "
          "plan holds %" PRIu64 " MiB", sh->name, budget / MiB, got / MiB, best / MiB);
}

static void check_shape(const struct shape *sh)
{
    uint64_t bytes[MAX_SEGS];
    for (int s = 0; s < sh->n; s++)
        bytes[s] = sh->mib[s] * MiB;
    struct k3_budget_input in = input(bytes, sh->n);
    uint64_t whole = k3_budget_trunk_resident(&in);
    struct k3_budget b;
    k3_budget_plan(&in, UINT64_MAX, &b, NULL);
    /* Every MiB from under the floor to past the whole trunk. */
    int failures = check_failures;
    for (uint64_t budget = b.floor - 2 * MiB; budget <= whole + 8 * MiB; budget += MiB)
        if (check_failures == failures) /* the first budget that fails tells enough */
            check_plan(sh, &in, budget);
    check_plan(sh, &in, whole);
    check_plan(sh, &in, b.floor);
}

static void sequences_enter_the_floor(void)
{
    static const uint64_t mib[] = {8, 40, 40, 8};
    uint64_t bytes[4];
    for (int s = 0; s < 4; s++)
        bytes[s] = mib[s] * MiB;
    struct k3_budget_input one = input(bytes, 4), eight = one;
    eight.seqs = 8;
    struct k3_budget a, b;
    struct k3_err err = {{0}};
    REQUIRE(k3_budget_plan(&one, UINT64_MAX, &a, NULL) == 0 &&
                k3_budget_plan(&eight, UINT64_MAX, &b, NULL) == 0, "plans");
    CHECK(b.state == 8 * a.state && b.floor - a.floor == 7 * a.state,
          "8 sequences: state %" PRIu64 " (one: %" PRIu64 "), floor +%" PRIu64, b.state, a.state,
          b.floor - a.floor);
    CHECK(k3_budget_plan(&eight, a.floor, &b, &err) == -1 && strstr(err.msg, "x 8 sequences"),
          "one sequence's floor is below eight's, and the refusal names them: %s", err.msg);
}

/* --predict-from ids: the floor grows by the counts ([MoE layers - 1][E][E] and their row
 * sums, floats), the previous layer's choices of a pass's rows (ints) and a score row, and
 * a budget at the floor without them is refused. */
static void id_counts_enter_the_floor(void)
{
    static const uint64_t bytes[] = {8 * MiB, 40 * MiB, 40 * MiB, 8 * MiB};
    struct k3_budget_input off = input(bytes, 4), ids = off;
    ids.predict_ids = true;
    struct k3_budget a, b;
    struct k3_err err = {{0}};
    REQUIRE(k3_budget_plan(&off, UINT64_MAX, &a, NULL) == 0 &&
                k3_budget_plan(&ids, UINT64_MAX, &b, NULL) == 0, "plans");
    uint64_t pairs = (uint64_t)k3_moe_layer_count(&cfg) - 1, E = (uint64_t)cfg.n_experts;
    uint64_t want = 4 * (pairs * E * E + pairs * E + (uint64_t)b.rows * (uint64_t)cfg.top_k + E);
    REQUIRE(pairs > 0, "k3-tiny has several MoE layers");
    CHECK(a.predictor == 0 && b.predictor == want && b.floor - a.floor == want,
          "ids: predictor %" PRIu64 " B, floor +%" PRIu64 " B; want %" PRIu64 " (%" PRIu64
          " layer pairs x %" PRIu64 " experts, %d rows)", b.predictor, b.floor - a.floor, want,
          pairs, E, b.rows);
    CHECK(k3_budget_plan(&ids, a.floor, &b, &err) == -1 && strstr(err.msg, "below the floor"),
          "the floor without the counts is refused with them: %s", err.msg);
}

/* The cache takes no more slots than the model has records, however large the budget;
 * below that, what the budget leaves. */
static void cache_never_past_the_model(void)
{
    static const uint64_t bytes[] = {8 * MiB, 40 * MiB, 40 * MiB, 8 * MiB};
    struct k3_budget_input in = input(bytes, 4);
    int records = k3_moe_layer_count(&cfg) * cfg.n_experts;
    struct k3_budget b;
    REQUIRE(k3_budget_plan(&in, UINT64_MAX / 2, &b, NULL) == 0, "plan");
    CHECK(b.cache_records == records && b.cache_bytes == (uint64_t)records * in.record_bytes,
          "a budget past the model: %d cache records, want the model's %d", b.cache_records,
          records);
    REQUIRE(records > 3, "k3-tiny has more than 3 records");
    REQUIRE(k3_budget_plan(&in, b.floor + 3 * in.record_bytes, &b, NULL) == 0, "plan");
    CHECK(b.cache_records <= 3, "a budget 3 records past the floor: %d cache records",
          b.cache_records);
}

int main(void)
{
    struct k3_err err;
    REQUIRE(k3_config_named(&cfg, "k3-tiny", &err) == 0, "%s", err.msg);
    static const struct shape shapes[] = {
        /* K3's widths on 4 layers with a small vocabulary: the dense layer 0 largest, the
         * MoE layers each larger than the embedding and the output together. */
        {"4 layers, small vocabulary", 6, {8, 400, 300, 300, 300, 20}},
        /* Three large and two small: resident large ones shrink the slots. */
        {"three large, two small", 7, {10, 300, 300, 300, 100, 100, 50}},
        {"one huge segment", 5, {16, 2000, 30, 30, 40}},
        {"equal layers", 6, {64, 100, 100, 100, 100, 64}},
        {"large embedding", 5, {500, 60, 80, 60, 500}},
        {"empty segments", 6, {0, 40, 0, 120, 0, 8}},
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        check_shape(&shapes[i]);
    /* Random shapes. */
    struct k3_rng r;
    k3_rng_seed(&r, 18);
    for (int t = 0; t < 40; t++) {
        struct shape sh = {.name = "random", .n = 3 + (int)(k3_rng_next(&r) % 7)};
        for (int s = 0; s < sh.n; s++)
            sh.mib[s] = 1 + k3_rng_next(&r) % 200;
        check_shape(&sh);
    }
    sequences_enter_the_floor();
    id_counts_enter_the_floor();
    cache_never_past_the_model();
    k3_config_free(&cfg);
    return check_result();
}
