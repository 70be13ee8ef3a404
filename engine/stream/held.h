/* The expert cache's indexes over its record slots (cache.c), so that finding a slot for
 * a miss costs no scan of every slot: which slots are free (a bitset, searched in slot
 * order with a summary word per 64 words), and per MoE layer and compute team a min-heap
 * of the slots holding records, by the policy's order (policy.h) and then last use.
 *
 * Owns: the bits, the heaps and their memory.  Does not own: what an entry means.  A heap
 * entry names a slot, the record it held and its last use when pushed; cache.c pushes one
 * whenever a slot's record, last use or order changes, and treats an entry that no longer
 * matches its slot as gone (it is dropped when met), so a heap may hold stale entries
 * beside each slot's current one: held_heap_full() says when to rebuild one.
 */
#ifndef K3_STREAM_HELD_H
#define K3_STREAM_HELD_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/base/err.h"

struct held_entry {
    double order;      /* the policy's order of the record when pushed */
    uint64_t last_use; /* the slot's last use when pushed */
    uint32_t key;      /* the record's policy key */
    int32_t slot;
};

struct held_heap {
    struct held_entry *at; /* [cap] a min-heap by (order, last_use) */
    int n, cap;
};

struct held_index {
    int n_slots;
    uint64_t *free_bits;    /* [(n_slots + 63) / 64] bit i: slot i holds nothing */
    uint64_t *free_summary; /* [words / 64 + 1] bit w: free_bits[w] is not 0 */
    struct held_heap *heaps; /* [layers * teams] */
    int n_heaps;
};

/* An index of n_slots slots, all free, and layers * teams empty heaps, each with room for
 * 2 * per_heap + 64 entries before it grows. */
int held_init(struct held_index *x, int n_slots, int layers, int teams, int per_heap,
              struct k3_err *err);
void held_free(struct held_index *x);
/* Every slot free, every heap empty. */
void held_clear(struct held_index *x);

void held_set_free(struct held_index *x, int slot, bool is_free);
bool held_is_free(const struct held_index *x, int slot);
/* The first free slot at or after from, or -1. */
int held_next_free(const struct held_index *x, int from);

/* Adds e; -1 only when the heap must grow and memory is refused. */
int held_push(struct held_heap *h, struct held_entry e);
/* The least entry (NULL when empty), and taking it out. */
const struct held_entry *held_top(const struct held_heap *h);
void held_pop(struct held_heap *h);
/* Whether h holds more than twice `current` entries (the slots it has a current entry
 * for) and 64 more: the caller empties it and pushes the current ones again. */
bool held_heap_full(const struct held_heap *h, int current);

/* a before b: by order, then last use. */
static inline bool held_before(const struct held_entry *a, const struct held_entry *b)
{
    return a->order < b->order || (a->order == b->order && a->last_use < b->last_use);
}

#endif
