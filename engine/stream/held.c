/* The expert cache's slot indexes (held.h). */
#include <stdlib.h>
#include <string.h>

#include "engine/stream/held.h"

static int words_of(int n_slots) { return (n_slots + 63) / 64; }

int held_init(struct held_index *x, int n_slots, int layers, int teams, int per_heap,
              struct k3_err *err)
{
    memset(x, 0, sizeof *x);
    int words = words_of(n_slots);
    x->n_slots = n_slots;
    x->n_heaps = layers * teams;
    x->free_bits = calloc((size_t)words + 1, sizeof *x->free_bits);
    x->free_summary = calloc((size_t)words / 64 + 1, sizeof *x->free_summary);
    x->heaps = calloc((size_t)x->n_heaps + 1, sizeof *x->heaps);
    bool ok = x->free_bits && x->free_summary && x->heaps;
    for (int h = 0; ok && h < x->n_heaps; h++) {
        x->heaps[h].cap = 2 * per_heap + 64;
        x->heaps[h].at = malloc(sizeof *x->heaps[h].at * (size_t)x->heaps[h].cap);
        ok = x->heaps[h].at != NULL;
    }
    if (!ok) {
        held_free(x);
        return k3_errf(err, "out of memory for the cache's index of %d slots", n_slots);
    }
    held_clear(x);
    return 0;
}

void held_free(struct held_index *x)
{
    for (int h = 0; x->heaps && h < x->n_heaps; h++)
        free(x->heaps[h].at);
    free(x->heaps);
    free(x->free_bits);
    free(x->free_summary);
    memset(x, 0, sizeof *x);
}

void held_clear(struct held_index *x)
{
    for (int i = 0; i < x->n_slots; i++)
        held_set_free(x, i, true);
    for (int h = 0; h < x->n_heaps; h++)
        x->heaps[h].n = 0;
}

void held_set_free(struct held_index *x, int slot, bool is_free)
{
    int w = slot / 64;
    uint64_t bit = 1ull << (slot % 64);
    x->free_bits[w] = is_free ? x->free_bits[w] | bit : x->free_bits[w] & ~bit;
    uint64_t sbit = 1ull << (w % 64);
    uint64_t *sum = &x->free_summary[w / 64];
    *sum = x->free_bits[w] ? *sum | sbit : *sum & ~sbit;
}

bool held_is_free(const struct held_index *x, int slot)
{
    return x->free_bits[slot / 64] >> (slot % 64) & 1;
}

int held_next_free(const struct held_index *x, int from)
{
    if (from >= x->n_slots)
        return -1;
    int w = from / 64;
    uint64_t bits = x->free_bits[w] & (~0ull << (from % 64));
    if (bits)
        return w * 64 + __builtin_ctzll(bits);
    int words = words_of(x->n_slots);
    for (int s = (w + 1) / 64; s * 64 < words; s++) {
        uint64_t sum = x->free_summary[s];
        if (s == (w + 1) / 64)
            sum &= ~0ull << ((w + 1) % 64);
        if (sum) {
            int w2 = s * 64 + __builtin_ctzll(sum);
            return w2 * 64 + __builtin_ctzll(x->free_bits[w2]);
        }
    }
    return -1;
}

int held_push(struct held_heap *h, struct held_entry e)
{
    if (h->n == h->cap) {
        struct held_entry *at = realloc(h->at, sizeof *at * (size_t)h->cap * 2);
        if (!at)
            return -1;
        h->at = at;
        h->cap *= 2;
    }
    int i = h->n++;
    while (i > 0 && held_before(&e, &h->at[(i - 1) / 2])) {
        h->at[i] = h->at[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h->at[i] = e;
    return 0;
}

const struct held_entry *held_top(const struct held_heap *h)
{
    return h->n ? &h->at[0] : NULL;
}

void held_pop(struct held_heap *h)
{
    struct held_entry last = h->at[--h->n];
    int i = 0;
    for (;;) {
        int c = 2 * i + 1;
        if (c >= h->n)
            break;
        if (c + 1 < h->n && held_before(&h->at[c + 1], &h->at[c]))
            c++;
        if (!held_before(&h->at[c], &last))
            break;
        h->at[i] = h->at[c];
        i = c;
    }
    if (h->n)
        h->at[i] = last;
}

bool held_heap_full(const struct held_heap *h, int current)
{
    return h->n > 2 * current + 64;
}
