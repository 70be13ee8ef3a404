/* The token table.  See bytemap.h. */
#include "engine/text/bytemap.h"

#include <stdlib.h>

int k3_bm_init(struct k3_bytemap *m, int32_t id_cap, size_t expect)
{
    memset(m, 0, sizeof *m);
    size_t cap = 64;
    while (cap < 2 * expect + 2)
        cap *= 2;
    size_t ids = (size_t)(id_cap > 0 ? id_cap : 1);
    m->slots = malloc(cap * sizeof *m->slots);
    m->off = malloc(ids * sizeof *m->off);
    m->len = malloc(ids * sizeof *m->len);
    m->arena_cap = expect * 8 + 64;
    m->arena = malloc(m->arena_cap);
    if (!m->slots || !m->off || !m->len || !m->arena) {
        k3_bm_free(m);
        return -1;
    }
    for (size_t i = 0; i < cap; i++)
        m->slots[i].id = -1;
    memset(m->len, 0xFF, ids * sizeof *m->len);
    m->mask = cap - 1;
    m->id_cap = id_cap;
    return 0;
}

void k3_bm_free(struct k3_bytemap *m)
{
    free(m->arena);
    free(m->off);
    free(m->len);
    free(m->slots);
    memset(m, 0, sizeof *m);
}

static void insert_slot(struct k3_bm_slot *slots, size_t mask, uint64_t h, int32_t id)
{
    size_t i = (size_t)h & mask;
    while (slots[i].id >= 0)
        i = (i + 1) & mask;
    slots[i].tag = (uint32_t)(h >> 32);
    slots[i].id = id;
}

static int grow_arena(struct k3_bytemap *m, size_t n)
{
    if (m->arena_len + n <= m->arena_cap)
        return 0;
    size_t cap = m->arena_cap * 2;
    while (cap < m->arena_len + n)
        cap *= 2;
    uint8_t *a = realloc(m->arena, cap);
    if (!a)
        return -1;
    m->arena = a;
    m->arena_cap = cap;
    return 0;
}

/* Keeps the index at most half full: doubles it and re-inserts every indexed id. */
static int grow_index(struct k3_bytemap *m)
{
    if (2 * (m->n_indexed + 1) <= m->mask + 1)
        return 0;
    size_t cap = 2 * (m->mask + 1);
    struct k3_bm_slot *slots = malloc(cap * sizeof *slots);
    if (!slots)
        return -1;
    for (size_t i = 0; i < cap; i++)
        slots[i].id = -1;
    for (size_t i = 0; i <= m->mask; i++) {
        int32_t old = m->slots[i].id;
        if (old >= 0)
            insert_slot(slots, cap - 1, XXH3_64bits(m->arena + m->off[old], m->len[old]), old);
    }
    free(m->slots);
    m->slots = slots;
    m->mask = cap - 1;
    return 0;
}

int k3_bm_add(struct k3_bytemap *m, const uint8_t *p, size_t n, int32_t id, bool indexed)
{
    if (grow_arena(m, n) || (indexed && grow_index(m)))
        return -1;
    memcpy(m->arena + m->arena_len, p, n);
    m->off[id] = (uint32_t)m->arena_len;
    m->len[id] = (uint32_t)n;
    m->arena_len += n;
    if (indexed) {
        insert_slot(m->slots, m->mask, XXH3_64bits(p, n), id);
        m->n_indexed++;
    }
    return 0;
}
