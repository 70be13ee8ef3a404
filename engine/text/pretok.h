/* The pre-tokenizer: text cut into pieces by a PCRE2 pattern before BPE.
 *
 * Owns: compiling a pattern (UTF, UCP, JIT when available), iterating over its matches
 * (growing the JIT stack when a match needs more, stepping over empty matches), and
 * the pieces of the PCRE2 rewrites of the shipped patterns (patterns.c; tokenizer.h
 * explains why each differs from the shipped text; test_tokenizer_pattern checks them
 * over all code points).
 * Does not own: what a piece becomes (bpe.h), specials (split off before this runs).
 */
#ifndef K3_TEXT_PRETOK_H
#define K3_TEXT_PRETOK_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/base/err.h"

/* Unicode White_Space, the 25 code points of Rust regex's \s, for use inside a class. */
#define K3_WS_CHARS "\\t-\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}" \
                    "\\x{2029}\\x{202F}\\x{205F}\\x{3000}"
/* [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]: the general categories partition the
 * code points into L (Lu Ll Lt Lm Lo), M, N, P, S, Z and C (Cc Cf Cs Co Cn), so "in
 * {Lu,Lt,Lm,Lo,M} and not Han" is "in none of Ll, N, P, S, Z, C, Han".  One negated
 * class runs faster under JIT than a lookahead per character
 * (bench/results/engine-choices.md). */
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

/* One pass over one text; owns its match data and (once grown) its JIT stack. */
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

#endif
