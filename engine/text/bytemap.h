/* The token table: token bytes <-> id, for the tokenizer and the BPE trainer.
 *
 * Owns: the bytes of every id (back to back in one arena) and a hash index from bytes
 * to id (open addressing, keyed by XXH3).
 * Does not own: what an id means (rank, special), how bytes are split into tokens.
 * Invariants: every id has at most one byte string and every byte string in the index
 * exactly one id; bytes added unindexed (specials) decode but are never found, so BPE
 * can never produce them.
 */
#ifndef K3_TEXT_BYTEMAP_H
#define K3_TEXT_BYTEMAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <xxhash.h>

struct k3_bm_slot {
    uint32_t tag; /* high 32 bits of the XXH3 hash */
    int32_t id;   /* -1: empty */
};

struct k3_bytemap {
    uint8_t *arena;          /* [arena_len] token bytes back to back */
    size_t arena_len, arena_cap;
    uint32_t *off, *len;     /* [id_cap] bytes of id at arena+off; len UINT32_MAX: no token */
    int32_t id_cap;
    struct k3_bm_slot *slots; /* [mask + 1] */
    size_t mask, n_indexed;
};

/* Room for ids [0, id_cap) and about `expect` byte strings.  -1: out of memory. */
int k3_bm_init(struct k3_bytemap *m, int32_t id_cap, size_t expect);
void k3_bm_free(struct k3_bytemap *m);

/* Gives id the bytes p[0..n); indexed = false stores them for decoding only (specials).
 * The caller guarantees id < id_cap, id unused and (if indexed) the bytes absent.
 * Returns -1 when out of memory. */
int k3_bm_add(struct k3_bytemap *m, const uint8_t *p, size_t n, int32_t id, bool indexed);

/* Id of the byte string, or -1.  Inline: BPE asks this for every pair it considers. */
static inline int32_t k3_bm_find(const struct k3_bytemap *m, const uint8_t *p, size_t n)
{
    uint64_t h = XXH3_64bits(p, n);
    uint32_t tag = (uint32_t)(h >> 32);
    for (size_t i = (size_t)h & m->mask;; i = (i + 1) & m->mask) {
        const struct k3_bm_slot *sl = &m->slots[i];
        if (sl->id < 0)
            return -1;
        if (sl->tag == tag && m->len[sl->id] == n && !memcmp(m->arena + m->off[sl->id], p, n))
            return sl->id;
    }
}

/* The bytes of id (*n of them), or NULL when id has none. */
static inline const uint8_t *k3_bm_bytes(const struct k3_bytemap *m, int32_t id, size_t *n)
{
    if (id < 0 || id >= m->id_cap || m->len[id] == UINT32_MAX) {
        *n = 0;
        return NULL;
    }
    *n = m->len[id];
    return m->arena + m->off[id];
}

#endif
