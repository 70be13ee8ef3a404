/* The vocabulary as the mask needs it: text tokens in a byte trie laid out in depth-first
 * order, and precomputed masks for the positions where almost every token is allowed.
 *
 * Owns: building both from a tokenizer once (the trie of every text token, a smaller
 * trie of the tokens a JSON string cannot take whole, the masks by UTF-8 state, each
 * token's character count), freeing them.
 * Does not own: the grammar's state or the walk (matcher.c).
 * A trie node's subtree is the nodes after it up to next[]: a walk that refuses a
 * prefix jumps to next[] and so skips every token under it.
 */
#ifndef K3_GRAMMAR_VOCAB_TRIE_H
#define K3_GRAMMAR_VOCAB_TRIE_H

#include <stdint.h>

#include "engine/grammar/grammar.h"
#include "engine/grammar/step.h"

/* Strings near their maxLength take the tokens short enough: by mask below this many
 * characters, one by one above (few tokens are that long). */
#define SHORT_CHARS 32

struct flat_trie {
    uint32_t n;
    uint8_t *byte;   /* [n] the node's byte (the last of its prefix) */
    uint16_t *depth; /* [n] its prefix's length, 1 under the root */
    int32_t *token;  /* [n] the token whose bytes are the prefix, or -1 */
    uint32_t *next;  /* [n] the first node after its subtree */
    uint32_t max_depth;
};

struct k3_vocab_trie {
    int vocab, words;           /* words = ceil(vocab / 32) */
    int32_t special[4];         /* ids of <|open|>, <|close|>, <|sep|>, <|end_of_msg|> */
    struct flat_trie all;       /* every text token */
    struct flat_trie stops;     /* text tokens with a byte json_string_stop() refuses */
    uint32_t *text;             /* [words] every text token */
    uint32_t *raw[UTF8_STATES]; /* [words] tokens that continue valid UTF-8 from state s */
    uint32_t *json[UTF8_STATES]; /* [words] those of raw[s] with no JSON string stop */
    uint16_t *chars;            /* [vocab] characters a token starts */
    uint32_t max_chars;         /* the most of any text token */
    uint32_t *short_of[SHORT_CHARS]; /* [words] text tokens of at most k characters */
    int32_t *long_ids;          /* [n_long] text tokens of SHORT_CHARS characters or more */
    uint32_t n_long;
};

#endif
