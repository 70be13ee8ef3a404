/* The prompt store: the states of finished prompts and requests, so that a request whose
 * prompt extends one of them resumes there and prefills only its new tokens
 * (llama-server's cache_prompt).
 *
 * Owns: entries of (token ids, the sequence's state after them), their memory within a
 * byte bound, least recently used evicted first, and the longest-prefix look-up.  A
 * state is good only at the position it was taken (KDA's state cannot be rewound), so an
 * entry is used whole or not at all: its ids must be a prefix of the new prompt, and
 * shorter than it (the last prompt token is always computed, for its logits).
 * Invariants: bytes <= max_bytes; every entry's state is at its ids' length; no two
 * entries hold the same ids.
 * Does not own: when to store (sched.c: the end of each prompt and of each request),
 * the sequences themselves (forward.h).
 */
#ifndef K3_SERVE_PROMPT_STORE_H
#define K3_SERVE_PROMPT_STORE_H

#include <stdint.h>

#include "engine/base/err.h"
#include "engine/forward/forward.h"

struct k3_prompt_store;

struct k3_prompt_store_stats {
    int entries;
    uint64_t bytes, max_bytes;
    uint64_t hits, tokens_reused, stored, evicted;
};

/* A store of at most max_bytes of states of c's sequences (0: stores nothing). */
int k3_prompt_store_create(struct k3_prompt_store **out, const struct k3_config *c,
                           uint64_t max_bytes, struct k3_err *err);
void k3_prompt_store_destroy(struct k3_prompt_store *ps);

/* Bytes an entry of n ids takes (its state, ids and bookkeeping). */
uint64_t k3_prompt_store_entry_bytes(const struct k3_config *c, int n);

/* The longest entry whose ids are a prefix of ids[0..n), shorter than n: its state into
 * into (which must hold n positions), and its length; 0 when none. */
int k3_prompt_store_resume(struct k3_prompt_store *ps, const int32_t *ids, int n,
                           struct k3_seq *into);

/* Keeps q's state (at q->pos == n) under ids[0..n), evicting the least recently used
 * entries to make room; an entry larger than the whole store is not kept.  -1 only when
 * out of memory: the state is not kept, and the entries evicted to make room for it are
 * gone (evicting first keeps the store's memory under its bound). */
int k3_prompt_store_put(struct k3_prompt_store *ps, const int32_t *ids, int n,
                        const struct k3_seq *q);

struct k3_prompt_store_stats k3_prompt_store_stats(const struct k3_prompt_store *ps);

#endif
