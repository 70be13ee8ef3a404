/* Tokenizer internals shared by tokenizer.c (loading, encoding) and bpe_train.c
 * (k3_tok_synthesize).  Not part of the public interface: tests may use it.
 *
 * Owns: the token table (bytes <-> id, open addressing keyed by XXH3), the PCRE2
 * pre-tokenizer iterator, tiktoken's byte-pair merge, strict UTF-8 validation.
 * Invariants: every id in a k3_bytemap has exactly one byte string and every byte
 * string in its hash index has exactly one id; specials have bytes (for decoding)
 * but are not in the hash index, so BPE can never produce them.
 */
#ifndef K3_TOKENIZER_INTERNAL_H
#define K3_TOKENIZER_INTERNAL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/base/err.h"

#define K3_NO_RANK UINT32_MAX
/* Pieces at least this long are merged with a heap (O(n log n)) instead of
 * tiktoken's min-scan (O(n^2)); both give the same tokens.  Measured on o200k ranks:
 * equal up to ~32 bytes, heap 1.3x faster at 64, 7x at 1024. */
#define K3_BPE_HEAP_MIN 64

/* ---- token table ---------------------------------------------------------- */

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

int k3_bm_init(struct k3_bytemap *m, int32_t id_cap, size_t expect);
void k3_bm_free(struct k3_bytemap *m);
/* Id of the byte string, or -1. */
int32_t k3_bm_find(const struct k3_bytemap *m, const uint8_t *p, size_t n);
/* Gives id the bytes p[0..n); indexed = false stores them for decoding only (specials).
 * The caller guarantees id < id_cap, id unused and (if indexed) the bytes absent.
 * Returns -1 when out of memory. */
int k3_bm_add(struct k3_bytemap *m, const uint8_t *p, size_t n, int32_t id, bool indexed);
static inline const uint8_t *k3_bm_bytes(const struct k3_bytemap *m, int32_t id, size_t *n)
{
    if (id < 0 || id >= m->id_cap || m->len[id] == UINT32_MAX) {
        *n = 0;
        return NULL;
    }
    *n = m->len[id];
    return m->arena + m->off[id];
}

/* ---- byte-pair merge ------------------------------------------------------ */

struct k3_bpe_scratch {
    uint32_t *bound; /* [cap + 1] part start offsets */
    uint32_t *rank;  /* [cap + 1] rank of part i merged with part i+1 */
    uint32_t *next, *prev;
    uint64_t *heap;  /* [cap] (rank << 32 | start) */
    size_t cap;
};
void k3_bpe_scratch_free(struct k3_bpe_scratch *s);
/* Splits piece[0..len) into tokens the way tiktoken does: start from single bytes and
 * repeatedly merge the adjacent pair whose concatenation has the lowest rank (the
 * leftmost on ties) until no concatenation is a token.  Writes the ids to out
 * (capacity >= len) and returns their count; -1: out of memory, -2: a single byte
 * has no rank.  Does not try the whole piece first (the caller does). */
long k3_bpe_merge(const struct k3_bytemap *m, const uint8_t *piece, size_t len,
                  struct k3_bpe_scratch *s, int32_t *out);
/* The two algorithms behind k3_bpe_merge, exposed so tests can compare them. */
long k3_bpe_merge_scan(const struct k3_bytemap *m, const uint8_t *piece, size_t len,
                       struct k3_bpe_scratch *s, int32_t *out);
long k3_bpe_merge_heap(const struct k3_bytemap *m, const uint8_t *piece, size_t len,
                       struct k3_bpe_scratch *s, int32_t *out);

/* ---- pre-tokenizer -------------------------------------------------------- */

/* Pieces of the PCRE2 patterns (tokenizer.h explains why each differs from the text
 * of the shipped pattern; test_tokenizer_pattern checks them over all code points).
 * K3_WS_CHARS: Unicode White_Space, the 25 code points of Rust regex's \s, for use
 * inside a class. */
#define K3_WS_CHARS "\\t-\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}" \
                    "\\x{2029}\\x{202F}\\x{205F}\\x{3000}"
/* [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]: the general categories partition the
 * code points into L (Lu Ll Lt Lm Lo), M, N, P, S, Z and C (Cc Cf Cs Co Cn), so "in
 * {Lu,Lt,Lm,Lo,M} and not Han" is "in none of Ll, N, P, S, Z, C, Han".  One negated
 * class pre-tokenizes ~1.4x faster under JIT than (?:(?!\p{sc:Han})[...]). */
#define K3_CLASS_UPPER_NOHAN "[^\\p{Ll}\\p{N}\\p{P}\\p{S}\\p{Z}\\p{C}\\p{sc:Han}]"
/* [\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]] likewise. */
#define K3_CLASS_LOWER_NOHAN "[^\\p{Lu}\\p{Lt}\\p{N}\\p{P}\\p{S}\\p{Z}\\p{C}\\p{sc:Han}]"

struct k3_pretok {
    pcre2_code *code;
    bool jit;
};
/* Compiles a PCRE2 pattern with PCRE2_UTF | PCRE2_UCP and JIT (when available). */
int k3_pretok_init(struct k3_pretok *p, const char *pattern, struct k3_err *err);
void k3_pretok_free(struct k3_pretok *p);

struct k3_pretok_iter {
    const struct k3_pretok *p;
    const uint8_t *s;  /* [len] valid UTF-8 */
    size_t len, pos;
    pcre2_match_data *md;
    pcre2_match_context *mc;
    pcre2_jit_stack *stack;
    size_t stack_size;
};
int k3_pretok_iter_init(struct k3_pretok_iter *it, const struct k3_pretok *p,
                        const uint8_t *s, size_t len, struct k3_err *err);
/* Next piece [*start, *end) of the text (text no match covers is skipped, as tiktoken
 * skips it).  Returns 1 for a piece, 0 at the end, -1 on a matcher error. */
int k3_pretok_next(struct k3_pretok_iter *it, size_t *start, size_t *end, struct k3_err *err);
void k3_pretok_iter_free(struct k3_pretok_iter *it);

struct k3_tokenizer;
/* The token table of a loaded tokenizer (base ranks indexed, specials decode-only). */
const struct k3_bytemap *k3_tok_map(const struct k3_tokenizer *tok);

/* ---- UTF-8 ---------------------------------------------------------------- */

/* Offset of the first byte that does not begin a well-formed UTF-8 sequence (no
 * overlongs, surrogates or code points above U+10FFFF), or n if all is well formed. */
size_t k3_utf8_invalid_at(const uint8_t *s, size_t n);

#endif
