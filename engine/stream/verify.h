/* Checking landed pieces against their checksums (the pack's XXH3-64 per piece).
 *
 * Owns: the check, run over the compute threads in batches of K3_VERIFY_BATCH pieces,
 * and its scratch: one batch table per stream, allocated at open and counted in the
 * budget's floor (budget.c), so checking allocates nothing.  A checkpoint seen as a
 * pack has no checksums (engine/pack/ckpt_view.h): its landed records are assembled
 * into the record layout here instead, in parallel over the records.
 * Does not own: re-reading a bad piece (pieces.c), what a mismatch means for the run.
 */
#ifndef K3_VERIFY_H
#define K3_VERIFY_H

#include <stdint.h>

#define K3_VERIFY_BATCH 256

/* Bytes of the scratch a stream allocates for checking. */
uint64_t k3_verify_scratch_bytes(void);

#endif
