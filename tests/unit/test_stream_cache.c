/* The expert cache's accounting, driven through the store API with known routing on a
 * packed k3-tiny: exact counts of records read, cache hits, records prefetched and
 * prefetched-then-used, wasted bytes, and the bytes read from the drives, so that a
 * record read twice or a hit miscounted shows (byte-equal output cannot see either).
 * Every record handed out holds the pack's bytes for the expert asked.  A full cache
 * keeps each MoE layer's share of the slots: one layer's churn does not evict another's
 * records. */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "engine/base/rng.h"
#include "engine/model/model.h"
#include "engine/pack/model_open.h"
#include "engine/pack/pack.h"
#include "engine/pack/packed.h"
#include "engine/stream/stream.h"
#include "tests/util.h"

#define L1 1 /* k3-tiny's first MoE layer */
#define L2 2

struct fixture {
    struct k3_model m;
    struct k3_stream *s;
    struct k3_expert_store *st;
    struct k3_stream_stats before;
    struct k3_layer_stats l1, l2; /* layer counters at the last mark */
};

/* Bytes the drives deliver for one record: its pieces, each rounded up to 4 KiB. */
static uint64_t record_read_bytes(const struct fixture *f, int layer, int expert)
{
    return k3_packed_buffer_bytes(f->m.packed, k3_model_record_object(&f->m, layer, expert));
}

static uint64_t record_logical_bytes(const struct fixture *f, int layer, int expert)
{
    return f->m.packed->objects[k3_model_record_object(&f->m, layer, expert)].bytes;
}

static void mark(struct fixture *f)
{
    f->before = k3_stream_stats(f->s);
    f->l1 = k3_stream_layer_stats(f->s)[L1];
    f->l2 = k3_stream_layer_stats(f->s)[L2];
}

/* One batch through begin(), next() and done(): every index handed out once, each record
 * the pack's bytes. */
static void batch(struct fixture *f, int layer, const int *experts, int n, const char *what)
{
    struct k3_err e;
    REQUIRE(f->st->ops->begin(f->st, layer, experts, n, &e) == 0, "%s: begin: %s", what, e.msg);
    bool seen[64] = {false};
    /* read back with O_DIRECT: aligned, whole pieces */
    uint64_t cap = k3_pack_round_up(record_read_bytes(f, layer, experts[0]), K3_PACK_ALIGN);
    uint8_t *want = aligned_alloc(K3_PACK_ALIGN, cap);
    for (int i = 0; i < n; i++) {
        struct k3_landed got;
        REQUIRE(f->st->ops->next(f->st, true, &got, &e) == 0, "%s: next: %s", what, e.msg);
        REQUIRE(got.index >= 0 && got.index < n && !seen[got.index], "%s: index %d handed out "
                "twice or out of range", what, got.index);
        seen[got.index] = true;
        uint64_t o = k3_model_record_object(&f->m, layer, experts[got.index]);
        REQUIRE(k3_packed_read_prefix(f->m.packed, o, f->m.record.bytes, want, &e) == 0, "%s",
                e.msg);
        CHECK(!memcmp(got.record, want, f->m.record.bytes), "%s: layer %d expert %d: wrong bytes",
              what, layer, experts[got.index]);
        REQUIRE(f->st->ops->done(f->st, got.index, &e) == 0, "%s: done: %s", what, e.msg);
    }
    free(want);
}

/* The counters since the last mark, against what the routing implies. */
static void expect(struct fixture *f, const char *what, uint64_t read, uint64_t hit,
                   uint64_t bytes)
{
    struct k3_stream_stats now = k3_stream_stats(f->s);
    uint64_t got_read = now.records_read - f->before.records_read;
    uint64_t got_hit = now.records_hit - f->before.records_hit;
    uint64_t got_bytes = now.bytes - f->before.bytes;
    CHECK(got_read == read && got_hit == hit && got_bytes == bytes,
          "%s: %llu records read, %llu hits, %llu bytes; want %llu, %llu, %llu", what,
          (unsigned long long)got_read, (unsigned long long)got_hit,
          (unsigned long long)got_bytes, (unsigned long long)read, (unsigned long long)hit,
          (unsigned long long)bytes);
    CHECK(now.trunk_bytes == f->before.trunk_bytes, "%s: trunk bytes read (all resident)", what);
}

static void expect_layer(const struct k3_layer_stats *now, const struct k3_layer_stats *was,
                         const char *what, uint64_t records, uint64_t predicted,
                         uint64_t used, uint64_t wasted)
{
    CHECK(now->records - was->records == records && now->predicted - was->predicted == predicted &&
              now->predicted_used - was->predicted_used == used &&
              now->wasted_bytes - was->wasted_bytes == wasted,
          "%s: layer asked %llu, predicted %llu, used %llu, wasted %llu B; want %llu, %llu, "
          "%llu, %llu", what, (unsigned long long)(now->records - was->records),
          (unsigned long long)(now->predicted - was->predicted),
          (unsigned long long)(now->predicted_used - was->predicted_used),
          (unsigned long long)(now->wasted_bytes - was->wasted_bytes),
          (unsigned long long)records, (unsigned long long)predicted, (unsigned long long)used,
          (unsigned long long)wasted);
}

static void open_fixture(struct fixture *f, const char *const *drives, bool cache)
{
    struct k3_err e;
    REQUIRE(k3_model_open_packed(&f->m, drives, 2, (struct k3_share){0}, &e) == 0, "%s", e.msg);
    struct k3_stream_opts so = {.ram = K3_RAM_TRUNK, .ctx = 8, .threads = omp_get_max_threads(),
                                .cache = cache, .prefetch_k = 8,
                                .cache_fill = K3_CACHE_FILL_READS};
    /* The trunk resident and room for every record: nothing is evicted here. */
    REQUIRE(k3_stream_open(&f->s, &f->m, &so, NULL, 0, &e) == 0, "%s", e.msg);
    const struct k3_budget_input *in;
    so.ram = k3_stream_budget(f->s, &in)->budget + 800 * in->record_bytes;
    k3_stream_close(f->s);
    REQUIRE(k3_stream_open(&f->s, &f->m, &so, NULL, 0, &e) == 0, "%s", e.msg);
    REQUIRE(!cache || k3_stream_budget(f->s, NULL)->cache_records >= 12 * 64, "cache of %d",
            k3_stream_budget(f->s, NULL)->cache_records);
    f->st = k3_stream_experts(f->s);
    mark(f);
}

static void close_fixture(struct fixture *f)
{
    k3_stream_close(f->s);
    k3_model_close(&f->m);
}

/* With a cache: a record is read once, then found; a prediction used or missed. */
static void with_cache(const char *const *drives)
{
    struct fixture f;
    open_fixture(&f, drives, true);
    struct k3_err e;
    static const int a[] = {0, 1, 2, 3}, a_again[] = {2, 3, 0, 1, 9};
    uint64_t r = record_read_bytes(&f, L1, 0); /* every record of a layer has one size */
    batch(&f, L1, a, 4, "first use");
    expect(&f, "first use", 4, 0, 4 * r);
    expect_layer(&k3_stream_layer_stats(f.s)[L1], &f.l1, "first use", 4, 0, 0, 0);
    mark(&f);
    batch(&f, L1, a_again, 5, "again");
    expect(&f, "again: four cached, one new", 1, 4, r);
    mark(&f);

    /* Prefetch 4, 5, 6 for L2 and let them land; the layer asks for 4, 5, 7. */
    static const int predicted[] = {4, 5, 6}, asked[] = {4, 5, 7}, later[] = {6, 7};
    REQUIRE(f.st->ops->prefetch(f.st, L2, predicted, 3, &e) == 0, "prefetch: %s", e.msg);
    REQUIRE(k3_stream_wait_reads(f.s, &e) == 0, "%s", e.msg);
    expect(&f, "prefetch", 3, 0, 3 * r);
    f.before = k3_stream_stats(f.s); /* the layer's counters still from before the prefetch */
    batch(&f, L2, asked, 3, "predicted layer");
    expect(&f, "predicted layer: two prefetched, one read", 1, 0, r);
    expect_layer(&k3_stream_layer_stats(f.s)[L2], &f.l2, "predicted layer", 3, 3, 2,
                 record_logical_bytes(&f, L2, 6));
    mark(&f);
    /* The missed prediction landed whole: it stays in the cache. */
    batch(&f, L2, later, 2, "the missed prediction later");
    expect(&f, "the missed prediction later", 0, 2, 0);
    expect_layer(&k3_stream_layer_stats(f.s)[L2], &f.l2, "the missed prediction later", 2, 0,
                 0, 0);
    close_fixture(&f);
}

/* Without a cache every batch reads its records, and nothing counts as a hit. */
static void without_cache(const char *const *drives)
{
    struct fixture f;
    open_fixture(&f, drives, false);
    static const int a[] = {10, 11, 12};
    uint64_t r = record_read_bytes(&f, L1, 10);
    batch(&f, L1, a, 3, "no cache");
    batch(&f, L1, a, 3, "no cache, again");
    expect(&f, "no cache, twice", 6, 0, 6 * r);
    close_fixture(&f);
}

/* A layer's whole union (more experts than the store reads at once): at most capacity
 * reads start, each done() starts the next, every record arrives once with its bytes;
 * with a cache the union is found the second time. */
static void whole_union(const char *const *drives, bool cache)
{
    struct fixture f;
    open_fixture(&f, drives, cache);
    int all[64], n = f.m.cfg.n_experts, cap = f.st->capacity;
    REQUIRE(n <= 64 && n > cap, "k3-tiny: %d experts, capacity %d", n, cap);
    for (int i = 0; i < n; i++)
        all[i] = n - 1 - i;
    struct k3_err e;
    REQUIRE(f.st->ops->begin(f.st, L1, all, n, &e) == 0, "begin: %s", e.msg);
    uint64_t started = k3_stream_stats(f.s).records_read - f.before.records_read;
    CHECK(started == (uint64_t)cap, "begin started %llu reads; want the capacity, %d",
          (unsigned long long)started, cap);
    REQUIRE(f.st->ops->begin(f.st, L1, all, 0, &e) == 0, "an empty batch: %s", e.msg);
    REQUIRE(k3_stream_wait_reads(f.s, &e) == 0, "%s", e.msg);
    mark(&f);
    batch(&f, L1, all, n, "whole union");
    uint64_t r = record_read_bytes(&f, L1, 0);
    if (cache) /* the first begin's reads landed into the cache */
        expect(&f, "whole union after its first reads", (uint64_t)(n - cap), (uint64_t)cap,
               (uint64_t)(n - cap) * r);
    else
        expect(&f, "whole union", (uint64_t)n, 0, (uint64_t)n * r);
    if (cache) {
        mark(&f);
        batch(&f, L1, all, n, "whole union again");
        expect(&f, "whole union again: all cached", 0, (uint64_t)n, 0);
    }
    close_fixture(&f);
}

/* A cache of a few records per MoE layer (LRU, no prefetch): L1 fills its share, then L2
 * reads far more records than the free slots hold; L1's, the least recently used, stay,
 * as L2 gives way to itself once it holds its share, and are found again. */
static void layer_shares(const char *const *drives)
{
    struct fixture f;
    struct k3_err e;
    REQUIRE(k3_model_open_packed(&f.m, drives, 2, (struct k3_share){0}, &e) == 0, "%s", e.msg);
    struct k3_stream_opts so = {.ram = K3_RAM_TRUNK, .ctx = 8, .threads = omp_get_max_threads(),
                                .cache = true, .cache_policy = K3_POLICY_LRU,
                                .cache_fill = K3_CACHE_FILL_READS};
    REQUIRE(k3_stream_open(&f.s, &f.m, &so, NULL, 0, &e) == 0, "%s", e.msg);
    const struct k3_budget_input *in;
    int moe = k3_moe_layer_count(&f.m.cfg), inflight = f.m.cfg.top_k;
    so.ram = k3_stream_budget(f.s, &in)->budget + (uint64_t)(4 * moe) * in->record_bytes;
    k3_stream_close(f.s);
    REQUIRE(k3_stream_open(&f.s, &f.m, &so, NULL, 0, &e) == 0, "%s", e.msg);
    const struct k3_budget *b = k3_stream_budget(f.s, &in);
    int slots = b->cache_records + in->inflight_records, share = slots / moe;
    REQUIRE(in->inflight_records == inflight && share >= 4 && share < 8,
            "%d slots for %d MoE layers: a share of %d", slots, moe, share);
    f.st = k3_stream_experts(f.s);
    static const int mine[] = {0, 1, 2, 3};
    batch(&f, L1, mine, 4, "L1 fills part of its share");
    int churn[8], reads = 0;
    for (int round = 0; reads < 2 * slots; round++) {
        for (int i = 0; i < 8; i++)
            churn[i] = (round * 8 + i) % f.m.cfg.n_experts;
        batch(&f, L2, churn, 8, "L2 churns");
        reads += 8;
    }
    mark(&f);
    batch(&f, L1, mine, 4, "L1 again");
    expect(&f, "L1 again: its records stayed", 0, 4, 0);
    close_fixture(&f);
}

/* Tokens of random routing through every MoE layer of a cache of a few records a layer,
 * with guesses prefetched for the next layer (some asked, some not, some still landing
 * when the layer asks), under each policy: with check_cache the stream compares every
 * slot it picks from its indexes with a scan of every slot (an assert), and its counts
 * and free slots with the slots; every record handed out holds its expert's bytes. */
static void churn_checked(const char *const *drives, enum k3_cache_policy_kind policy)
{
    struct fixture f;
    struct k3_err e;
    REQUIRE(k3_model_open_packed(&f.m, drives, 2, (struct k3_share){0}, &e) == 0, "%s", e.msg);
    struct k3_stream_opts so = {.ram = K3_RAM_TRUNK, .ctx = 8, .threads = omp_get_max_threads(),
                                .cache = true, .cache_policy = policy, .prefetch_k = 8,
                                .cache_fill = K3_CACHE_FILL_READS, .check_cache = true};
    REQUIRE(k3_stream_open(&f.s, &f.m, &so, NULL, 0, &e) == 0, "%s", e.msg);
    const struct k3_budget_input *in;
    int moe = k3_moe_layer_count(&f.m.cfg), n_exp = f.m.cfg.n_experts;
    so.ram = k3_stream_budget(f.s, &in)->budget + (uint64_t)(6 * moe) * in->record_bytes;
    k3_stream_close(f.s);
    REQUIRE(k3_stream_open(&f.s, &f.m, &so, NULL, 0, &e) == 0, "%s", e.msg);
    f.st = k3_stream_experts(f.s);
    mark(&f);
    uint64_t rng = 12345 + (uint64_t)policy, asked = 0;
    int layers[64], n_layers = 0;
    for (int l = 0; l < f.m.cfg.n_layers && n_layers < 64; l++)
        if (k3_layer_is_moe(&f.m.cfg, l))
            layers[n_layers++] = l;
    for (int token = 0; token < 16; token++)
        for (int k = 0; k < n_layers; k++) {
            int experts[8], n = 0;
            /* a skewed pick: low experts more often, so some records are worth keeping */
            while (n < 8) {
                int x = (int)(k3_splitmix64(&rng) % (uint64_t)n_exp);
                x = x % 3 == 0 ? x : x / 4;
                bool dup = false;
                for (int j = 0; j < n; j++)
                    dup |= experts[j] == x;
                if (!dup)
                    experts[n++] = x;
            }
            batch(&f, layers[k], experts, n, "churn");
            asked += (uint64_t)n;
            if (k + 1 < n_layers) {
                int guess[6];
                for (int j = 0; j < 6; j++)
                    guess[j] = (int)(k3_splitmix64(&rng) % (uint64_t)n_exp) / 2;
                REQUIRE(f.st->ops->prefetch(f.st, layers[k + 1], guess, 6, &e) == 0,
                        "prefetch: %s", e.msg);
                if (k3_splitmix64(&rng) % 2)
                    REQUIRE(k3_stream_wait_reads(f.s, &e) == 0, "%s", e.msg);
            }
        }
    REQUIRE(k3_stream_wait_reads(f.s, &e) == 0, "%s", e.msg);
    struct k3_stream_stats now = k3_stream_stats(f.s);
    uint64_t read = now.records_read - f.before.records_read;
    uint64_t hit = now.records_hit - f.before.records_hit;
    /* a prefetch dropped before it started reads less than its record */
    CHECK(now.bytes - f.before.bytes <= read * record_read_bytes(&f, layers[0], 0),
          "%s: %llu bytes read for %llu records", policy == K3_POLICY_LRU ? "lru" : "lfru",
          (unsigned long long)(now.bytes - f.before.bytes), (unsigned long long)read);
    CHECK(hit > 0 && read > 0, "churn: %llu hits, %llu reads", (unsigned long long)hit,
          (unsigned long long)read);
    printf("churn (%s): %llu records asked, %llu read (prefetches too), %llu cache hits\n",
           policy == K3_POLICY_LRU ? "lru" : "lfru", (unsigned long long)asked,
           (unsigned long long)read, (unsigned long long)hit);
    close_fixture(&f);
}

/* A caller that never gives records back cannot wait for more than the slots hold. */
static void held_slots(const char *const *drives)
{
    struct fixture f;
    open_fixture(&f, drives, false);
    int all[64], n = f.m.cfg.n_experts, cap = f.st->capacity;
    for (int i = 0; i < n; i++)
        all[i] = i;
    struct k3_err e;
    struct k3_landed got;
    REQUIRE(f.st->ops->begin(f.st, L2, all, n, &e) == 0, "begin: %s", e.msg);
    for (int i = 0; i < cap; i++)
        REQUIRE(f.st->ops->next(f.st, true, &got, &e) == 0, "next %d: %s", i, e.msg);
    CHECK(f.st->ops->next(f.st, true, &got, &e) < 0 && strstr(e.msg, "not yet done"),
          "next() with every slot held: want an error, got '%s'", e.msg);
    close_fixture(&f);
}

int main(void)
{
    char dirs[2][4200];
    const char *drives[2];
    for (int d = 0; d < 2; d++) {
        snprintf(dirs[d], sizeof dirs[d], "%s/stream-cache-%d", test_tmp(), d);
        mkdir(dirs[d], 0755);
        drives[d] = dirs[d];
    }
    struct k3_err e;
    struct k3_pack_opts po = {.checkpoint = tiny_model(), .drives = drives, .n_drives = 2,
                              .replicas = 1};
    REQUIRE(k3_pack(&po, &e) == 0, "pack: %s", e.msg);
    with_cache(drives);
    without_cache(drives);
    whole_union(drives, false);
    whole_union(drives, true);
    held_slots(drives);
    layer_shares(drives);
    churn_checked(drives, K3_POLICY_LRU);
    churn_checked(drives, K3_POLICY_LFRU);
    return check_result();
}
