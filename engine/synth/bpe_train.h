/* BPE training for synthetic vocabularies (vocab.h writes the files).
 *
 * Owns: the embedded training corpus, learning merges from it, filling the ranks the
 * corpus cannot supply.  Does not own: the tokenizer that reads the result (engine/text/),
 * the files and the special slots (vocab.c).  The learned vocabulary is part of the
 * synthetic model format: every rule in bpe_train.c and every corpus byte is frozen.
 */
#ifndef K3_BPE_TRAIN_H
#define K3_BPE_TRAIN_H

#include <stddef.h>
#include <stdint.h>

#include "engine/base/err.h"

/* The corpus (engine/synth/corpus.S): k3_corpus[0 .. k3_corpus_end - k3_corpus). */
extern const char k3_corpus[];
extern const char k3_corpus_end[];

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
