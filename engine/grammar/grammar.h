/* Constrained decoding: which tokens keep K3's output inside a grammar.
 *
 * Owns: compiling a request's tools (tool_choice "required" or a named function) or its
 * response_format (json_object, json_schema) into a grammar over K3's output (XTML
 * around the calls, or a compact JSON value in the response channel; README.md gives
 * the shapes and the JSON Schema subset), one generation's position in that grammar,
 * and the mask of the tokens allowed next, found by walking the vocabulary as a byte
 * trie.
 * Does not own: reading the request (serve/), sampling under the mask
 * (forward/sampler.h), the chat markup of the prompt (text/chat.h).
 * A grammar is immutable once compiled (share it); a matcher belongs to one generation.
 */
#ifndef K3_GRAMMAR_H
#define K3_GRAMMAR_H

#include <stdbool.h>
#include <stdint.h>

#include <jansson.h>

#include "engine/base/err.h"
#include "engine/text/tokenizer.h"

/* At most this many calls when parallel tool calls are allowed. */
#define K3_GRAMMAR_MAX_CALLS 8

/* The vocabulary's text tokens as a byte trie, built once per tokenizer. */
struct k3_vocab_trie;
int k3_vocab_trie_build(const struct k3_tokenizer *tok, struct k3_vocab_trie **out,
                        struct k3_err *err);
void k3_vocab_trie_free(struct k3_vocab_trie *t);

/* Why a request's tools or schema cannot be compiled: param is the request field at
 * fault ("tools[0].function.parameters.properties.city.pattern"), message says why. */
struct k3_grammar_fault {
    char param[128];
    char message[256];
};

struct k3_grammar;

/* tools: the request's "tools" array.  only_name: the one function tool_choice names, or
 * NULL for any declared one.  parallel: 1 to K3_GRAMMAR_MAX_CALLS calls, else exactly 1.
 * thinking: the generation prompt opened the think channel (reasoning comes first). */
int k3_grammar_tools(const json_t *tools, const char *only_name, bool parallel, bool thinking,
                     struct k3_grammar **out, struct k3_grammar_fault *f);
/* schema: response_format.json_schema.schema, or NULL for json_object (any object). */
int k3_grammar_json(const json_t *schema, bool thinking, struct k3_grammar **out,
                    struct k3_grammar_fault *f);
void k3_grammar_free(struct k3_grammar *g);

/* One generation's position, from the start of the output (just after the generation
 * prompt).  tok must be the tokenizer the vocabulary trie was built from. */
struct k3_matcher;
int k3_matcher_new(const struct k3_grammar *g, const struct k3_tokenizer *tok,
                   struct k3_matcher **out, struct k3_err *err);
/* Sets bit id%32 of allowed_bits[id/32] for each token the grammar allows next and
 * clears every other bit ([ceil(vocab/32)] words). */
void k3_matcher_mask(struct k3_matcher *m, const struct k3_vocab_trie *t, uint32_t *allowed_bits);
/* Moves past token id: 0, or -1 (nothing changed) when the grammar does not allow it. */
int k3_matcher_accept(struct k3_matcher *m, int32_t id);
/* Whether accept would take id (without moving): one token's check, where the mask
 * checks them all. */
bool k3_matcher_allows(struct k3_matcher *m, int32_t id);
/* True once <|end_of_msg|> was accepted: the output is complete. */
bool k3_matcher_done(const struct k3_matcher *m);
void k3_matcher_free(struct k3_matcher *m);

#endif
