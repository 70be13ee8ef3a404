/* Tokenizer: K3's tiktoken-format byte-level BPE.
 *
 * Owns: loading `tiktoken.model` (one "<base64 bytes> <rank>" line per token) and the
 * special tokens of `tokenizer_config.json` (added_tokens_decoder); pre-tokenizing with
 * K3's regex through PCRE2 (JIT), the `&&` class intersections rewritten for PCRE2;
 * byte-level BPE encoding (lowest-rank merge first); decoding ids to bytes; a UTF-8
 * stream that holds back a character split across tokens.
 * Does not own: chat markup (chat.h), sampling, the model, synthetic vocabularies
 * (engine/synth/vocab.h, outside the inference library).
 */
#ifndef K3_TOKENIZER_H
#define K3_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/base/err.h"

struct k3_tokenizer;

/* K3's pre-tokenizer pattern as shipped (with `&&`), and its PCRE2 rewrite.  The
 * rewrite keeps the meaning the shipped pattern has in tiktoken (Rust `regex` via
 * fancy-regex), which differs from PCRE2's reading of the same text in three places:
 *  - `[A&&[^\p{Han}]]` (class intersection; PCRE2 has none) becomes one negated class
 *    of the complementary general categories plus Han (see pretok.h);
 *  - `\p{Han}` becomes `\p{sc:Han}`: Rust's bare script name is the Script property,
 *    PCRE2's (10.40 on) is Script_Extensions, which would also take 、。・〆 into Han runs;
 *  - `\s` / `\S` become the explicit Unicode White_Space set: PCRE2's \s also matches
 *    U+180E (MONGOLIAN VOWEL SEPARATOR), which is not White_Space.
 * Property tables are PCRE2's (Unicode 14.0 in 10.42): a character assigned in a later
 * Unicode version counts as unassigned (Cn) here and may split differently. */
extern const char K3_PRETOKENIZE_PATTERN[];
extern const char K3_PRETOKENIZE_PATTERN_PCRE2[];

/* tiktoken's own pre-tokenizer patterns of cl100k_base and o200k_base, rewritten for
 * PCRE2 in the same way (only the \s change applies). */
extern const char K3_CL100K_PATTERN_PCRE2[];
extern const char K3_O200K_PATTERN_PCRE2[];

/* The PCRE2 pattern named "k3", "cl100k" or "o200k", or NULL. */
const char *k3_tok_named_pattern(const char *name);

/* Loads dir/tiktoken.model and dir/tokenizer_config.json.  vocab_size bounds every id
 * (ids >= vocab_size in either file are an error); vocab_size <= 0 takes the largest
 * id in the files + 1.  Every single byte must have a rank (byte-level BPE).  pattern: a PCRE2 pattern, or NULL
 * for K3's.  tokenizer_config.json may be absent only when no_specials is true (used
 * for foreign vocabularies such as cl100k in the parity tests). */
int k3_tok_load(struct k3_tokenizer **out, const char *dir, int vocab_size,
                const char *pattern, bool no_specials, struct k3_err *err);
/* The same from bytes in memory (a pack carries both files in its manifest); name
 * stands for the folder in messages.  tokconfig NULL: no specials. */
int k3_tok_load_mem(struct k3_tokenizer **out, const char *name, const uint8_t *tiktoken,
                    size_t tiktoken_len, const char *tokconfig, size_t tokconfig_len,
                    int vocab_size, const char *pattern, struct k3_err *err);
void k3_tok_free(struct k3_tokenizer *tok);

/* Encodes len bytes of UTF-8.  allow_special: template text, where special tokens are
 * matched whole (longest first, anywhere); otherwise they are plain text.  Invalid
 * UTF-8 is an error naming the byte offset.  *ids is malloc'd; the caller frees it. */
int k3_tok_encode(const struct k3_tokenizer *tok, const char *text, size_t len,
                  bool allow_special, int32_t **ids, size_t *n_ids, struct k3_err *err);

/* The bytes of token id (not NUL-terminated), or NULL when id is not a token.
 * A special's bytes are its content. */
const uint8_t *k3_tok_bytes(const struct k3_tokenizer *tok, int32_t id, size_t *len);

/* Concatenates the bytes of ids (decode); *text is malloc'd and NUL-terminated (the
 * NUL is not counted in *len).  An id that is not a token is an error naming it. */
int k3_tok_decode(const struct k3_tokenizer *tok, const int32_t *ids, size_t n_ids,
                  char **text, size_t *len, struct k3_err *err);

/* True when id is one of tokenizer_config.json's added tokens. */
bool k3_tok_is_special(const struct k3_tokenizer *tok, int32_t id);

/* Id of a special token by its content ("<|end_of_msg|>"), or -1. */
int32_t k3_tok_special(const struct k3_tokenizer *tok, const char *content);

int k3_tok_vocab_size(const struct k3_tokenizer *tok);

/* Streams decoded tokens as text that is always valid UTF-8: bytes of a character
 * split across tokens are held back until it completes; each maximal ill-formed
 * subsequence comes out as one U+FFFD (as Unicode recommends, and as Python's
 * errors="replace" does).  push() returns the number of bytes written to out;
 * flush() emits what is held back (one U+FFFD for an unfinished character) and resets
 * the stream.  Start from a zeroed struct.
 * out needs K3_UTF8_OUT_MAX(len) bytes: len + 3 is enough for valid UTF-8, but every
 * invalid byte can become a 3-byte U+FFFD. */
#define K3_UTF8_OUT_MAX(len) (3 * (size_t)(len) + 9)
struct k3_utf8_stream {
    uint8_t pending[4]; /* a well-formed prefix of one character */
    int n_pending;
};
size_t k3_utf8_push(struct k3_utf8_stream *s, const uint8_t *bytes, size_t len, char *out);
size_t k3_utf8_flush(struct k3_utf8_stream *s, char *out);

#endif
