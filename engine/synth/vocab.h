/* A synthetic model's vocabulary: tiktoken.model and tokenizer_config.json.
 *
 * Owns: writing both files for `synth` (and the tests), naming the special slots.
 * Does not own: learning the ranks (bpe_train.h), reading the files (engine/text/).
 * Part of the synthetic model format: the same arguments give the same bytes forever
 * (test_tokenizer_synth pins them).
 */
#ifndef K3_SYNTH_VOCAB_H
#define K3_SYNTH_VOCAB_H

#include <stddef.h>
#include <stdint.h>

#include "engine/base/err.h"

/* Writes dir/tiktoken.model and dir/tokenizer_config.json for a synthetic model
 * (creating dir if it is missing): n_base BPE ranks learned from the embedded corpus
 * (ranks 0..255 are the single bytes), then vocab_size - n_base >= 2 special slots
 * named as K3 names them.  The same arguments always give the same bytes; the details
 * (tie rules, filling past the corpus) are at the top of bpe_train.c. */
int k3_tok_synthesize(const char *dir, int vocab_size, int n_base, struct k3_err *err);

/* Name of special slot id (n_base <= id < vocab_size) as K3 names it, written to buf. */
const char *k3_special_name(int32_t id, int n_base, int vocab_size, char *buf, size_t size);

#endif
