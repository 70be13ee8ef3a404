/* --trace FILE: a Chrome/Perfetto trace-event JSON of one run, so overlap can be seen.
 *
 * Owns: the file and its tracks: one track per drive holding every piece read (async
 * spans from submission to landing, overlapping freely; under a drive model a second track
 * per drive with the storage's own times), one compute track holding nested
 * spans (token > layer > attention / moe), one track per compute team holding the routed
 * experts it computed (each inside its layer's moe span in time), and a counter of the
 * bytes in flight.  Events are written as they happen (bounded memory); timestamps are
 * microseconds since the trace opened.  Under mpirun each rank is a process of its own
 * with the same tracks, and the followers' events join the leader's file at the end.
 * Names (of spans, reads, counters) may hold any text: they are written as JSON strings,
 * escaped, and cut past about 250 bytes; args are JSON object bodies, written as given.
 * Does not own: deciding what to trace, moving parts between ranks (engine/cluster).
 * A NULL trace is valid everywhere and records nothing.
 */
#ifndef K3_TRACE_H
#define K3_TRACE_H

#include <stddef.h>
#include <stdint.h>

#include "engine/base/err.h"

struct k3_trace;

/* rank < 0: one process, named "k3-uring"; otherwise "k3-uring rank R" (mpirun), whose
 * tracks are its own.  path NULL: a part (a follower rank's events) kept in an unnamed
 * temporary file, to be read back with k3_trace_part_read and appended to the leader's
 * trace with k3_trace_append. */
int k3_trace_open(struct k3_trace **out, const char *path, int n_drives, int rank,
                  struct k3_err *err);
/* Finishes the JSON; returns -1 (err filled) if any write failed. */
int k3_trace_close(struct k3_trace *t, struct k3_err *err);

/* A part's event text, up to cap bytes a call from its start (the first call ends the
 * open spans); 0 at the end.  Nothing more may be written to it. */
size_t k3_trace_part_read(struct k3_trace *t, char *buf, size_t cap);
/* Event text of a part, as read, into t. */
void k3_trace_append(struct k3_trace *t, const char *text, size_t n);

double k3_trace_now(const struct k3_trace *t); /* microseconds */

/* Compute spans: begin/end pairs on the compute track, properly nested.  args is a
 * JSON object body ("\"layer\": 3") or NULL. */
void k3_trace_begin(struct k3_trace *t, const char *name, const char *args);
void k3_trace_end(struct k3_trace *t);

/* A finished span on a compute team's own track (named "team 1 (node 1)", or "team 0"
 * when node < 0), written by the caller once the team's work is done: the teams compute
 * in parallel, and only the caller writes the file. */
void k3_trace_team_span(struct k3_trace *t, int team, int node, const char *name,
                        const char *args, double begin, double end);

/* One read on a drive's track, from its submission to its landing. */
void k3_trace_read(struct k3_trace *t, int drive, double submitted, double landed,
                   uint32_t bytes, const char *what);
/* Under a drive model (--drive-model), the same read as the storage underneath served it,
 * on the drive's own "storage" track: from when it went to the backend to when its data
 * came back, in CLOCK_MONOTONIC seconds (the reader's clock), while k3_trace_read's span
 * ends when the model let it go. */
void k3_trace_storage_read(struct k3_trace *t, int drive, double begin_s, double end_s,
                           uint32_t bytes, const char *what);

void k3_trace_counter(struct k3_trace *t, const char *name, double value);

#endif
