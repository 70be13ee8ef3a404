/* The tokenizer object, shared by the files that build and use it: tokenizer.c (load,
 * free, lookups, decode), tiktoken.c (the ranks), specials.c (the added tokens) and
 * encode.c.  Not part of the public interface; tests may use it.
 *
 * Owns: struct k3_tokenizer's fields and the loaders those files share.  Does not own:
 * the byte map (bytemap.h), the pre-tokenizer (pretok.h), the public calls
 * (tokenizer.h).
 *
 * Invariants: vocab_size bounds every id in map; ids in [0, vocab_size) are a rank
 * (indexed in map), a special (in map unindexed, is_special set) or nothing; specials
 * are sorted longest first, then by bytes, so the first that matches is the longest.
 */
#ifndef K3_TOKENIZER_INTERNAL_H
#define K3_TOKENIZER_INTERNAL_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/base/err.h"
#include "engine/text/bytemap.h"
#include "engine/text/pretok.h"

/* The most tokens a vocabulary sized from its own files may have (as config.json bounds
 * vocab_size). */
#define K3_TOK_MAX_VOCAB (1 << 24)

struct k3_special {
    const uint8_t *bytes; /* content, in the token table's arena */
    size_t len;
    int32_t id;
};

struct k3_tokenizer {
    int vocab_size;
    struct k3_bytemap map; /* base ranks (indexed) and specials (decode only) */
    struct k3_pretok pretok;
    struct k3_special *specials; /* [n_specials] longest first, then by bytes */
    int n_specials;
    uint8_t special_first[256]; /* 1: some special starts with this byte */
    uint8_t *is_special;        /* [vocab_size] */
};

/* Parses tiktoken.model text into tok->map and sets tok->vocab_size: vocab_size when
 * > 0, else max(largest rank + 1, min_ids).  path names the file in messages. */
int k3_tok_load_ranks(struct k3_tokenizer *tok, const char *path, const uint8_t *data,
                      size_t n, int vocab_size, int min_ids, struct k3_err *err);

/* Parses tokenizer_config.json text; *min_ids is one past the largest id it names (so
 * a vocabulary sized from the files covers its specials).  NULL on error. */
json_t *k3_tok_read_config(const char *path, const char *text, size_t len, int *min_ids,
                           struct k3_err *err);
/* Adds the config's added_tokens_decoder to tok (after the ranks are loaded). */
int k3_tok_load_specials(struct k3_tokenizer *tok, const char *path, json_t *root,
                         struct k3_err *err);

/* The token table of a loaded tokenizer (base ranks indexed, specials decode-only). */
const struct k3_bytemap *k3_tok_map(const struct k3_tokenizer *tok);

#endif
