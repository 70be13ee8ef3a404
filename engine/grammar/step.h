/* The grammar's machine: where a generation stands, and what one symbol does to that.
 *
 * Owns: frames (a node and its local state, on a stack that shares its tail with the
 * stacks it came from), the arena they live in, sets of stacks (the alternatives still
 * open), stepping a set by one symbol, the UTF-8 automaton that strings and the
 * vocabulary's masks share.
 * Does not own: the nodes (nodes.h), tokens and masks (matcher.c, vocab_trie.h).
 * Frames are never changed once made, so a set is a few pointers and a walk over the
 * vocabulary backtracks by resetting the arena to a mark.
 */
#ifndef K3_GRAMMAR_STEP_H
#define K3_GRAMMAR_STEP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/grammar/nodes.h"

#define MAX_STACKS 64 /* alternatives open at once; a symbol that would need more is refused */
#define MAX_DEPTH 128 /* frames on one stack; deeper nesting is refused */

struct frame {
    const struct frame *up; /* the frame this one returns to; NULL: the bottom */
    uint32_t node;
    uint32_t depth; /* frames from the bottom, this one included */
    uint32_t a;     /* node state: phase and small fields (see step.c) */
    uint64_t b;     /* node state: a count, a magnitude or a key's match */
};

/* Chunks of memory handed out in order and taken back to a mark. */
struct arena {
    char **chunk;
    size_t n_chunks, cur, used;
    bool oom;
};
struct arena_mark {
    size_t cur, used;
};

static inline struct arena_mark arena_mark(const struct arena *a)
{
    return (struct arena_mark){a->cur, a->used};
}
static inline void arena_reset(struct arena *a, struct arena_mark m)
{
    a->cur = m.cur;
    a->used = m.used;
}
void arena_free(struct arena *a);

/* The stacks a generation may be on; a NULL top is a finished stack. */
struct stackset {
    int n;
    const struct frame *top[MAX_STACKS];
};

/* The set at the start of g's output. */
int step_start(const struct k3_grammar *g, struct arena *ar, struct stackset *out);
/* out = in after symbol sym (out->n == 0: sym is not allowed).  -1 when the arena ran
 * out of memory. */
int step_set(const struct k3_grammar *g, struct arena *ar, const struct stackset *in,
             uint16_t sym, struct stackset *out);
/* A copy of in whose frames live in ar (so the arena in lived in can be reset). */
int step_copy(struct arena *ar, const struct stackset *in, struct stackset *out);

/* A string's state (a frame's a and b) after one symbol: stay in the string, pop (the
 * closing quote), hand the symbol down (raw text's end), or refuse.  step_set does this
 * for a string frame; the mask's walk does it inline through a string's tokens. */
enum { S_OPEN, S_BODY, S_ESC, S_HEX };
enum string_move { STR_REFUSE, STR_STAY, STR_POP, STR_HAND_DOWN };
enum string_move string_step(const struct node *n, uint32_t *a, uint64_t *chars, uint16_t sym);

/* What a string's top frame says, for the mask's shortcuts: 1 when f is an N_STRING in
 * its body (not in an escape), with its UTF-8 state, characters so far and limit. */
int step_string_body(const struct k3_grammar *g, const struct frame *f, bool *raw,
                     uint8_t *utf8, uint64_t *chars, int64_t *max_chars);

/* ================================================ UTF-8 as an automaton ==== */

/* States: 0 between characters, 1..3 that many continuation bytes (80..BF) to go, and
 * four states whose next byte has a narrower range (after E0, ED, F0, F4), so that
 * overlong forms and surrogates are refused.  UTF8_BAD: the byte cannot come here. */
enum { UTF8_STATES = 8, UTF8_BAD = 255 };

static inline uint8_t utf8_next(uint8_t state, uint8_t byte)
{
    switch (state) {
    case 0:
        if (byte < 0x80)
            return 0;
        if (byte >= 0xC2 && byte <= 0xDF)
            return 1;
        if (byte == 0xE0)
            return 4;
        if (byte == 0xED)
            return 5;
        if (byte >= 0xE1 && byte <= 0xEF)
            return 2;
        if (byte == 0xF0)
            return 6;
        if (byte >= 0xF1 && byte <= 0xF3)
            return 3;
        if (byte == 0xF4)
            return 7;
        return UTF8_BAD;
    case 1:
    case 2:
    case 3:
        return byte >= 0x80 && byte <= 0xBF ? state - 1 : UTF8_BAD;
    case 4:
        return byte >= 0xA0 && byte <= 0xBF ? 1 : UTF8_BAD;
    case 5:
        return byte >= 0x80 && byte <= 0x9F ? 1 : UTF8_BAD;
    case 6:
        return byte >= 0x90 && byte <= 0xBF ? 2 : UTF8_BAD;
    default:
        return byte >= 0x80 && byte <= 0x8F ? 2 : UTF8_BAD;
    }
}

/* A byte that starts a character (so counts one towards a string's length). */
static inline bool utf8_starts_char(uint8_t byte)
{
    return (byte & 0xC0) != 0x80;
}

/* Bytes a JSON string cannot hold as they are: the quote ends it, the backslash starts
 * an escape, control characters must be escaped. */
static inline bool json_string_stop(uint8_t byte)
{
    return byte == '"' || byte == '\\' || byte < 0x20;
}

#endif
