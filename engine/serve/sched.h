/* Continuous batching: many requests decoding in shared steps.
 *
 * Owns: the slots (a sequence and a sampler each, allocated once), the queue of requests
 * waiting for one, and the decode loop: every step takes one row from each decoding slot
 * and rows of joining prompts (a whole pass of the forward context's rows when nothing
 * decodes; up to prefill_chunk while streams decode, so they keep flowing while a long
 * prompt is read), so each MoE layer reads the union of the rows' experts once.
 * Requests join and leave between steps.  With cache_prompt, a request resumes from the
 * longest stored state its prompt extends, and the states at the end of its prompt and
 * of its generation are stored for the next turn.  A request's tokens and logits are the same
 * bytes whatever shares its steps (the forward pass computes every row alone, in a fixed
 * order; each request has its own seeded sampler).
 * Invariants: a slot is FREE, PREFILL (prompt rows left, but for the length of the step
 * that runs its last ones: it turns DECODE when that step's token is taken) or DECODE (a
 * sampled token to feed); only a FREE slot has no request; the queue never exceeds
 * queue_max.
 * Does not own: HTTP and JSON (serve/http.c, serve/api.c), the model (runtime/).
 */
#ifndef K3_SERVE_SCHED_H
#define K3_SERVE_SCHED_H

#include <signal.h>
#include <stdint.h>

#include "engine/base/err.h"
#include "engine/runtime/runtime.h"
#include "engine/serve/prompt_store.h"
#include "engine/serve/request.h"

struct k3_sched_opts {
    int parallel;      /* sequences decoding at once, 1..K3_CHUNK */
    int ctx;           /* positions each sequence holds */
    int prefill_chunk; /* prompt rows a step takes while streams decode, at most */
    int queue_max;     /* requests waiting for a slot; beyond, submit refuses */
    uint64_t cache_ram;/* the prompt store's bytes (serve/prompt_store.h; 0: none) */
    volatile sig_atomic_t *stop_signal; /* set (by a signal handler): as k3_sched_stop */
};

/* A latency histogram: counts at or below each of K3_LATENCY_BOUNDS seconds (cumulative,
 * as Prometheus's buckets are), their sum and count. */
#define K3_LATENCY_BUCKETS 14
extern const double K3_LATENCY_BOUNDS[K3_LATENCY_BUCKETS];
struct k3_latency {
    uint64_t le[K3_LATENCY_BUCKETS];
    uint64_t count;
    double sum;
};

struct k3_sched_stats {
    int running, queued;
    uint64_t requests_done, tokens_generated, prompt_tokens;
    uint64_t steps, decode_steps, decode_rows;
    struct k3_prompt_store_stats store;  /* the prompt store's */
    struct k3_latency first_token;       /* submission to a request's first token */
    struct k3_latency between_tokens;    /* a request's token to its next */
    uint64_t decode_experts;             /* experts read in decode steps, summed over the
                                          * layers (forward.h: the union of the rows') */
    double busy_seconds;                 /* in steps */
    double decode_seconds;               /* in decode steps */
    uint64_t decode_read_bytes;          /* read in decode steps */
    double decode_stall_seconds;         /* decode steps' compute waiting for data */
    struct k3_stream_stats io;           /* the read path's counters after the last step */
    struct k3_cluster_stats ranks;       /* mpirun's ranks' exchanges, likewise */
};

struct k3_sched;

/* Bytes the slots keep beside their samplers: a logit row each, adjusted by a request's
 * logit_bias and penalties (counted in the RAM budget by serve and plan alike). */
static inline uint64_t k3_sched_adjust_bytes(int vocab, int parallel)
{
    return (uint64_t)parallel * sizeof(float) * (uint64_t)vocab;
}

/* The rows a step asks of the runtime: -b's, and never fewer than one a decoding slot
 * (a step holds every decoding slot's next token; the budget never goes below what
 * this asks, up to K3_CHUNK, which --parallel cannot pass).  serve and plan alike. */
static inline int k3_sched_rows(int batch, int parallel)
{
    return batch > parallel ? batch : parallel;
}

/* Refuses a runtime started with fewer rows than o->parallel (see k3_sched_rows). */
int k3_sched_create(struct k3_sched **out, struct k3_runtime *rt, const struct k3_sched_opts *o,
                    struct k3_err *err);
void k3_sched_destroy(struct k3_sched *s);

/* Queues r (the scheduler takes a reference of its own until it is done).  0, -EBUSY when
 * the queue is full, -ESHUTDOWN once stopping, -E2BIG when the prompt leaves no room in
 * the context. */
int k3_sched_submit(struct k3_sched *s, struct k3_request *r);
/* Runs steps until stopped and every running request has ended.  A step that fails
 * ends every running request with the error, those with no row in the step too; the loop
 * goes on. */
void k3_sched_run(struct k3_sched *s);
/* Stops taking requests; queued ones end with an error, running ones at the next step
 * (finish "length": as if their limit were reached).  Safe from any thread. */
void k3_sched_stop(struct k3_sched *s);

/* The statistics as of the last step; layer_experts (NULL, or [the model's layers]) gets
 * the experts each layer read in decode steps, from the same step. */
struct k3_sched_stats k3_sched_stats(struct k3_sched *s, uint64_t *layer_experts);

#endif
