/* The prompt store: the longest stored prefix shorter than the prompt is resumed, with
 * its state's bytes (the KDA state and the MLA cache rows before its position); the byte
 * bound holds, the least recently used entry goes first; an entry larger than the store,
 * or the same ids again, adds nothing; puts and resumes in any order keep the store's
 * invariants. */
#include <string.h>

#include "engine/serve/prompt_store.h"
#include "tests/check.h"

static struct k3_config cfg;

/* A sequence at position n whose state is marked with `mark`. */
static void fill(struct k3_seq *q, int n, float mark)
{
    for (int l = 0; l < q->n_layers; l++) {
        if (q->kda_state[l])
            q->kda_state[l][0] = mark;
        else
            q->mla_cache[l][(size_t)(n - 1) * (cfg.kv_lora + cfg.qk_rope)] = mark;
    }
    q->pos = n;
}

/* The mark of q's state, or -1 when its layers disagree. */
static float mark_of(const struct k3_seq *q)
{
    float m = -2;
    for (int l = 0; l < q->n_layers; l++) {
        float v = q->kda_state[l] ? q->kda_state[l][0]
                                  : q->mla_cache[l][(size_t)(q->pos - 1) * (cfg.kv_lora + cfg.qk_rope)];
        if (m != -2 && v != m)
            return -1;
        m = v;
    }
    return m;
}

/* Seeded puts and resumes of prefixes of three conversations, the same ids often again,
 * through a store of three entries: the store checks its invariants after every change
 * (an assert ends the test), and the counts agree with what was done. */
static void test_churn(struct k3_seq *q, struct k3_seq *into)
{
    struct k3_err e;
    struct k3_prompt_store *ps;
    uint64_t entry = k3_prompt_store_entry_bytes(&cfg, 30);
    REQUIRE(k3_prompt_store_create(&ps, &cfg, 3 * entry, &e) == 0, "%s", e.msg);
    int32_t conv[3][30];
    for (int c = 0; c < 3; c++)
        for (int i = 0; i < 30; i++)
            conv[c][i] = i < 5 ? 7 : 1000 * (c + 1) + i; /* a shared start, then apart */
    uint64_t x = 12345, hits = 0;
    for (int step = 0; step < 400; step++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        int c = (int)(x >> 33) % 3, n = 1 + (int)(x >> 40) % 29;
        if (step & 1) {
            fill(q, n, (float)(c * 100 + n));
            REQUIRE(k3_prompt_store_put(ps, conv[c], n, q) == 0, "put %d of %d ids", c, n);
        } else {
            int got = k3_prompt_store_resume(ps, conv[c], n + 1, into);
            hits += got > 0;
            /* the state stored under those ids: this conversation's, or within the shared
             * start any conversation's */
            int mark = (int)mark_of(into);
            CHECK(!got || (into->pos == got && mark % 100 == got && (mark / 100 == c || got <= 5)),
                  "conversation %d resumed at %d with mark %d", c, got, mark);
        }
    }
    struct k3_prompt_store_stats st = k3_prompt_store_stats(ps);
    CHECK(st.entries >= 1 && st.entries <= 3 && st.bytes <= st.max_bytes && st.hits == hits,
          "%d entries, %llu of %llu bytes, %llu hits of %llu", st.entries,
          (unsigned long long)st.bytes, (unsigned long long)st.max_bytes,
          (unsigned long long)st.hits, (unsigned long long)hits);
    k3_prompt_store_destroy(ps);
}

int main(void)
{
    struct k3_err e;
    REQUIRE(k3_config_named(&cfg, "k3-tiny", &e) == 0, "%s", e.msg);
    int32_t ids[30];
    for (int i = 0; i < 30; i++)
        ids[i] = 100 + i;
    struct k3_seq q, into;
    REQUIRE(k3_seq_init(&q, &cfg, 30, &e) == 0 && k3_seq_init(&into, &cfg, 30, &e) == 0, "%s", e.msg);
    /* Room for two entries of 20 ids, not three. */
    uint64_t entry = k3_prompt_store_entry_bytes(&cfg, 20);
    struct k3_prompt_store *ps;
    REQUIRE(k3_prompt_store_create(&ps, &cfg, 2 * entry + entry / 2, &e) == 0, "%s", e.msg);

    CHECK(k3_prompt_store_resume(ps, ids, 30, &into) == 0, "an empty store resumed");
    fill(&q, 10, 1.0f);
    k3_prompt_store_put(ps, ids, 10, &q);
    fill(&q, 20, 2.0f);
    k3_prompt_store_put(ps, ids, 20, &q);
    CHECK(k3_prompt_store_resume(ps, ids, 30, &into) == 20 && into.pos == 20 && mark_of(&into) == 2.0f,
          "the longest prefix: resumed at %d, mark %g", into.pos, mark_of(&into));
    CHECK(k3_prompt_store_resume(ps, ids, 20, &into) == 10 && mark_of(&into) == 1.0f,
          "a prompt equal to an entry resumes the shorter one (its last token is computed)");
    int32_t other[30];
    memcpy(other, ids, sizeof other);
    other[15] = 7;
    CHECK(k3_prompt_store_resume(ps, other, 30, &into) == 10, "a prompt that leaves at 15 resumes at 10");

    /* The 20 was used last: a third entry evicts the 10. */
    k3_prompt_store_resume(ps, ids, 30, &into);
    int32_t third[20];
    for (int i = 0; i < 20; i++)
        third[i] = 900 + i;
    fill(&q, 20, 3.0f);
    k3_prompt_store_put(ps, third, 20, &q);
    struct k3_prompt_store_stats st = k3_prompt_store_stats(ps);
    CHECK(st.entries == 2 && st.evicted == 1 && st.bytes <= st.max_bytes,
          "%d entries, %llu evicted, %llu of %llu bytes", st.entries,
          (unsigned long long)st.evicted, (unsigned long long)st.bytes,
          (unsigned long long)st.max_bytes);
    CHECK(k3_prompt_store_resume(ps, ids, 15, &into) == 0, "the least recently used went first");
    CHECK(k3_prompt_store_resume(ps, ids, 30, &into) == 20, "the recently used one stays");
    int32_t third_more[25];
    memcpy(third_more, third, sizeof third);
    CHECK(k3_prompt_store_resume(ps, third_more, 25, &into) == 20 && mark_of(&into) == 3.0f,
          "the third entry resumes");

    k3_prompt_store_put(ps, third, 20, &q);
    st = k3_prompt_store_stats(ps);
    CHECK(st.entries == 2 && st.stored == 3, "the same ids again added something: %d entries, "
          "%llu stored", st.entries, (unsigned long long)st.stored);
    CHECK(st.hits == 6 && st.tokens_reused == 20 + 10 + 10 + 20 + 20 + 20,
          "%llu hits, %llu tokens reused", (unsigned long long)st.hits,
          (unsigned long long)st.tokens_reused);
    k3_prompt_store_destroy(ps);

    REQUIRE(k3_prompt_store_create(&ps, &cfg, entry - 1, &e) == 0, "%s", e.msg);
    k3_prompt_store_put(ps, third, 20, &q);
    CHECK(k3_prompt_store_stats(ps).entries == 0, "a state larger than the store was kept");
    k3_prompt_store_destroy(ps);
    test_churn(&q, &into);
    k3_seq_free(&q);
    k3_seq_free(&into);
    k3_config_free(&cfg);
    return check_result();
}
