/* The prompt store (prompt_store.h): a list of entries, looked up by longest prefix,
 * evicted least recently used first.  A server holds tens of conversations, so a scan of
 * the list per request costs nothing beside a prompt's prefill. */
#include "engine/serve/prompt_store.h"

#include <assert.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

struct entry {
    int32_t *ids;     /* [n] */
    int n;
    struct k3_seq state; /* at position n, holding n positions */
    uint64_t bytes;
    uint64_t last_use;
};

struct k3_prompt_store {
    const struct k3_config *c;
    struct entry *e;  /* [cap] */
    int n, cap;
    uint64_t clock;
    struct k3_prompt_store_stats st;
};

static bool same_ids(const struct entry *a, const struct entry *b)
{
    return a->n == b->n && !memcmp(a->ids, b->ids, sizeof(int32_t) * (size_t)a->n);
}

/* The header's invariants and the bookkeeping behind them, after every change (debug
 * invariants, docs/design.md: only this file writes the store).  Quadratic in the entries:
 * tens of conversations, beside a prompt's prefill. */
static void check(const struct k3_prompt_store *ps)
{
    uint64_t bytes = 0;
    assert(ps->n >= 0 && ps->n <= ps->cap && ps->st.entries == ps->n);
    for (int i = 0; i < ps->n; i++) {
        const struct entry *en = &ps->e[i];
        assert(en->n >= 1 && en->state.pos == en->n);
        assert(en->bytes == k3_prompt_store_entry_bytes(ps->c, en->n));
        assert(en->last_use >= 1 && en->last_use <= ps->clock);
        for (int j = 0; j < i; j++)
            assert(!same_ids(&ps->e[j], en)); /* no two entries hold the same ids */
        bytes += en->bytes;
    }
    assert(bytes == ps->st.bytes && bytes <= ps->st.max_bytes);
    (void)bytes;
}

int k3_prompt_store_create(struct k3_prompt_store **out, const struct k3_config *c,
                           uint64_t max_bytes, struct k3_err *err)
{
    struct k3_prompt_store *ps = calloc(1, sizeof *ps);
    if (!ps)
        return k3_errf(err, "out of memory for the prompt store");
    ps->c = c;
    ps->st.max_bytes = max_bytes;
    *out = ps;
    return 0;
}

static void drop(struct k3_prompt_store *ps, int i)
{
    struct entry *en = &ps->e[i];
    ps->st.bytes -= en->bytes;
    free(en->ids);
    k3_seq_free(&en->state);
    ps->e[i] = ps->e[--ps->n];
    ps->st.entries = ps->n;
}

void k3_prompt_store_destroy(struct k3_prompt_store *ps)
{
    if (!ps)
        return;
    while (ps->n)
        drop(ps, ps->n - 1);
    free(ps->e);
    free(ps);
}

uint64_t k3_prompt_store_entry_bytes(const struct k3_config *c, int n)
{
    return k3_seq_state_bytes(c, n) + (uint64_t)n * sizeof(int32_t) + sizeof(struct entry);
}

static bool is_prefix(const struct entry *en, const int32_t *ids, int n)
{
    return en->n <= n && !memcmp(en->ids, ids, sizeof(int32_t) * (size_t)en->n);
}

int k3_prompt_store_resume(struct k3_prompt_store *ps, const int32_t *ids, int n,
                           struct k3_seq *into)
{
    int best = -1;
    for (int i = 0; i < ps->n; i++)
        if (ps->e[i].n < n && is_prefix(&ps->e[i], ids, n) && (best < 0 || ps->e[i].n > ps->e[best].n))
            best = i;
    if (best < 0 || k3_seq_copy(into, &ps->e[best].state, ps->c))
        return 0;
    ps->e[best].last_use = ++ps->clock;
    ps->st.hits++;
    ps->st.tokens_reused += (uint64_t)ps->e[best].n;
    check(ps);
    return ps->e[best].n;
}

static int least_recent(const struct k3_prompt_store *ps)
{
    int lru = 0;
    for (int i = 1; i < ps->n; i++)
        if (ps->e[i].last_use < ps->e[lru].last_use)
            lru = i;
    return lru;
}

/* Makes room for bytes more by evicting the least recently used entries; then makes
 * room in the array for one more entry.  -1 only out of memory. */
static int make_room(struct k3_prompt_store *ps, uint64_t bytes)
{
    while (ps->st.bytes + bytes > ps->st.max_bytes) {
        drop(ps, least_recent(ps));
        ps->st.evicted++;
    }
    if (ps->n < ps->cap)
        return 0;
    int cap = ps->cap ? 2 * ps->cap : 8;
    struct entry *e = realloc(ps->e, sizeof *e * (size_t)cap);
    if (!e)
        return -1;
    ps->e = e;
    ps->cap = cap;
    return 0;
}

/* A new entry of q's state under ids[0..n) (bytes its size), or -1 out of memory. */
static int new_entry(struct k3_prompt_store *ps, const int32_t *ids, int n,
                     const struct k3_seq *q, uint64_t bytes, struct entry *en)
{
    *en = (struct entry){.ids = malloc(sizeof(int32_t) * (size_t)n), .n = n, .bytes = bytes};
    struct k3_err err;
    if (!en->ids || k3_seq_init(&en->state, ps->c, n, &err)) {
        free(en->ids);
        return -1;
    }
    memcpy(en->ids, ids, sizeof(int32_t) * (size_t)n);
    if (k3_seq_copy(&en->state, q, ps->c)) {
        free(en->ids);
        k3_seq_free(&en->state);
        return -1;
    }
    return 0;
}

int k3_prompt_store_put(struct k3_prompt_store *ps, const int32_t *ids, int n,
                        const struct k3_seq *q)
{
    assert(q->pos == n);
    uint64_t bytes = k3_prompt_store_entry_bytes(ps->c, n);
    if (n < 1 || bytes > ps->st.max_bytes)
        return 0;
    for (int i = 0; i < ps->n; i++)
        if (ps->e[i].n == n && is_prefix(&ps->e[i], ids, n)) {
            ps->e[i].last_use = ++ps->clock; /* the same state again */
            check(ps);
            return 0;
        }
    struct entry en;
    int rc = make_room(ps, bytes) || new_entry(ps, ids, n, q, bytes, &en) ? -1 : 0;
    if (!rc) {
        en.last_use = ++ps->clock;
        ps->e[ps->n++] = en;
        ps->st.entries = ps->n;
        ps->st.bytes += bytes;
        ps->st.stored++;
    }
    check(ps);
    return rc;
}

struct k3_prompt_store_stats k3_prompt_store_stats(const struct k3_prompt_store *ps)
{
    return ps->st;
}
