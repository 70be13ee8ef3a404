/* Byte-pair merge: one pre-tokenized piece into token ids, the way tiktoken does it.
 *
 * Owns: the merge order (lowest rank first, leftmost on ties), its two algorithms
 * (tiktoken's min-scan for short pieces, a heap for long ones) and their scratch.
 * Does not own: the token table (bytemap.h), pre-tokenizing, specials.
 */
#ifndef K3_TEXT_BPE_H
#define K3_TEXT_BPE_H

#include <stddef.h>
#include <stdint.h>

#include "engine/text/bytemap.h"

#define K3_NO_RANK UINT32_MAX
/* Pieces at least this long are merged with a heap (O(n log n)) instead of
 * tiktoken's min-scan (O(n^2)); both give the same tokens.  Where the two cross:
 * bench/results/engine-choices.md. */
#define K3_BPE_HEAP_MIN 64

/* Grow-only buffers one encoder reuses across pieces; start zeroed. */
struct k3_bpe_scratch {
    uint32_t *bound; /* [cap + 1] part start offsets */
    uint32_t *rank;  /* [cap + 1] rank of part i merged with part i+1 */
    uint32_t *next, *prev; /* [cap + 1] heap merge: neighbouring parts by start offset */
    uint64_t *heap;  /* [2 cap + 1] (rank << 32 | start) */
    size_t cap;
};
void k3_bpe_scratch_free(struct k3_bpe_scratch *s);

/* Splits piece[0..len) into tokens the way tiktoken does: start from single bytes and
 * repeatedly merge the adjacent pair whose concatenation has the lowest rank (the
 * leftmost on ties) until no concatenation is a token.  A rank is a token's id.
 * Writes the ids to out (capacity >= len) and returns their count; -1: out of memory,
 * -2: a single byte has no rank.  Does not try the whole piece first (the caller does). */
long k3_bpe_merge(const struct k3_bytemap *m, const uint8_t *piece, size_t len,
                  struct k3_bpe_scratch *s, int32_t *out);
/* The two algorithms behind k3_bpe_merge, exposed so tests can compare them. */
long k3_bpe_merge_scan(const struct k3_bytemap *m, const uint8_t *piece, size_t len,
                       struct k3_bpe_scratch *s, int32_t *out);
long k3_bpe_merge_heap(const struct k3_bytemap *m, const uint8_t *piece, size_t len,
                       struct k3_bpe_scratch *s, int32_t *out);

#endif
