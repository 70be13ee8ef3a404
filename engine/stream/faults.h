/* Fault injection for the read path (K3_FAULTS), off unless asked for.
 *
 * Owns: the spec ("eio:0.01,short:0.05,eagain:0.02,delay:0.02,corrupt:0.001,
 * drive-loss:2@500,refuse:0.01", or one fault at a known place: "eio-at:7",
 * "refuse-at:3"), a seeded generator, and two decisions: for each chunk a read
 * completes, report -EIO, a short count, -EAGAIN, wait a few milliseconds, flip a byte of
 * what landed, or, for a lost drive, fail every read on it after its first N; for each
 * submission, refuse it (-ENOMEM, none of its reads queued).  Counts what it saw, so a
 * test can place a fault at each read or submission of a fault-free run in turn.
 * Does not own: what happens next (the reader retries -EAGAIN and short reads; the
 * stream retries -EIO, reads replicas, verifies checksums, fails a refused step).
 */
#ifndef K3_FAULTS_H
#define K3_FAULTS_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/base/err.h"

struct k3_fault_counts {
    uint64_t eio, shorts, eagain, delays, corrupt, lost, refused; /* injected */
    uint64_t reads, submits; /* seen: chunk results, submissions */
};

struct k3_faults;

/* Parses a spec, a comma list of KIND:VALUE: eio, short, eagain, delay, corrupt or refuse
 * with a probability in [0, 1] (digits and a point); drive-loss:DRIVE[@READS]; eio-at:N
 * (the N-th chunk result, from 1, is -EIO) or refuse-at:N (the N-th submission is
 * refused), decimal numbers.  An empty value, an unknown kind or a malformed number: -1
 * with err naming the item. */
int k3_faults_parse(struct k3_faults **out, const char *spec, uint64_t seed, struct k3_err *err);
void k3_faults_free(struct k3_faults *f);
/* Whether f flips bytes (only a checksum catches those). */
bool k3_faults_corrupt(const struct k3_faults *f);

/* The result to report for a chunk of len bytes on drive `file` that returned res;
 * *flip is set when one byte of what landed should be flipped. */
int32_t k3_faults_apply(struct k3_faults *f, uint32_t file, uint32_t len, int32_t res, bool *flip);
/* 0 to let a submission of reads through, or the -errno to refuse it with. */
int k3_faults_refuse(struct k3_faults *f);

struct k3_fault_counts k3_faults_counts(const struct k3_faults *f);

#endif
