/* BPE training for synthetic vocabularies (k3_tok_synthesize in tokenizer.h).
 *
 * Owns: the embedded training corpus, learning merges from it, filling the ranks the
 * corpus cannot supply, naming the special slots, writing tiktoken.model and
 * tokenizer_config.json.  The learned vocabulary is part of the synthetic model
 * format: every rule in bpe_train.c and every corpus byte is frozen.
 */
#ifndef K3_BPE_TRAIN_H
#define K3_BPE_TRAIN_H

#include <stddef.h>
#include <stdint.h>

#include "engine/base/err.h"

/* The corpus (engine/synth/corpus.S): k3_corpus[0 .. k3_corpus_end - k3_corpus). */
extern const char k3_corpus[];
extern const char k3_corpus_end[];

/* Name of special slot id (n_base <= id < vocab_size) as K3 names it, written to buf. */
const char *k3_special_name(int32_t id, int n_base, int vocab_size, char *buf, size_t size);

struct k3_bpe_stats {
    size_t corpus_bytes, pieces, unique_pieces;
    int learned;        /* ranks learned from corpus pairs */
    int filled;         /* ranks added after the corpus ran out of pairs */
    int skipped_pairs;  /* pairs never merged: their join would not be reachable */
    int reused_merges;  /* pairs merged into an existing token (same bytes) */
};

/* Learns n_base ranks (>= 256) from text[0..len): fills *tokens (malloc'd arena of the
 * token bytes back to back) and *off (malloc'd [n_base + 1] offsets; token r is
 * tokens[off[r] .. off[r+1])).  text must be valid UTF-8. */
int k3_bpe_learn(const uint8_t *text, size_t len, int n_base, uint8_t **tokens,
                 uint32_t **off, struct k3_bpe_stats *stats, struct k3_err *err);

#endif
