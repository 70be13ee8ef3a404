/* Fault injection for the read path (K3_FAULTS), off unless asked for.
 *
 * Owns: the spec ("eio:0.01,short:0.05,eagain:0.02,delay:0.02,corrupt:0.001,
 * drive-loss:2@500"), a seeded generator, and the decision for each chunk a read
 * completes: report -EIO, a short count, -EAGAIN, wait a few milliseconds, flip a byte of
 * what landed, or, for a lost drive, fail every read on it after its first N.
 * Does not own: what happens next (the reader retries -EAGAIN and short reads; the
 * stream retries -EIO, reads replicas, verifies checksums).
 */
#ifndef K3_FAULTS_H
#define K3_FAULTS_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/base/err.h"

struct k3_fault_counts {
    uint64_t eio, shorts, eagain, delays, corrupt, lost;
};

struct k3_faults;

/* Parses a spec, a comma list of KIND:VALUE: eio, short, eagain, delay or corrupt with a
 * probability in [0, 1] (digits and a point), or drive-loss:DRIVE[@READS] (decimal
 * numbers).  An empty value, an unknown kind or a malformed number: -1 with err naming
 * the item. */
int k3_faults_parse(struct k3_faults **out, const char *spec, uint64_t seed, struct k3_err *err);
void k3_faults_free(struct k3_faults *f);
/* Whether f flips bytes (only a checksum catches those). */
bool k3_faults_corrupt(const struct k3_faults *f);

/* The result to report for a chunk of len bytes on drive `file` that returned res;
 * *flip is set when one byte of what landed should be flipped. */
int32_t k3_faults_apply(struct k3_faults *f, uint32_t file, uint32_t len, int32_t res, bool *flip);

struct k3_fault_counts k3_faults_counts(const struct k3_faults *f);

#endif
