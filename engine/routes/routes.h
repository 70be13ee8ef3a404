/* Routing traces: which experts a trained MoE model chose, token by token ("routes v1",
 * gzip'd or plain text; ../shared/routing/README.md), and replaying them in place of the
 * router.
 *
 * Owns: reading a trace (its header, one line per token: request, position, phase, then
 * layers x top_k expert ids), keeping the requests asked for, refusing what does not fit
 * (a malformed line by number, an id outside [0, E), a repeated id within a layer, a
 * shape other than the model's, naming both); the route source the forward pass takes
 * (forward.h, k3_route_source) that hands a row's selections for a MoE layer from the
 * trace, by the request its sequence is bound to and its position.
 * Does not own: the combine weights (the forward pass weighs the trace's ids with its own
 * router's scores), which sequences run together (the caller).
 * Invariants: requests are kept in file order, each one's positions 0, 1, 2, .. with no
 * gap; every id is in [0, experts) and distinct within its layer.
 */
#ifndef K3_ROUTES_H
#define K3_ROUTES_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/base/err.h"
#include "engine/forward/forward.h"
#include "engine/model/config.h"

/* A trace's header, and the requests kept from it. */
struct k3_routes {
    char model[128];   /* "# model NAME", or "" */
    int experts;       /* E */
    int top_k;         /* K */
    int layers;        /* MoE layers L */
    int first;         /* the file's request number of kept request 0 */
    int n_requests;    /* kept */
    int64_t *start;    /* [n_requests + 1] each request's first token; start[n] = tokens */
    char *phase;       /* [tokens] 'p' (a prompt token) or 'd' (a generated one) */
    uint16_t *ids;     /* [tokens][L][K] expert ids, in the order recorded */
};

/* Requests first..last of the file (inclusive; last < 0: to the end).  A line outside
 * the format fails with "PATH:LINE: ..."; a range the file does not reach fails too. */
int k3_routes_load(struct k3_routes *r, const char *path, int first, int last,
                   struct k3_err *err);
void k3_routes_free(struct k3_routes *r);
/* "A-B", "A-" or "A" into first, last (-1: to the end). */
int k3_routes_parse_range(const char *text, int *first, int *last, struct k3_err *err);

static inline int64_t k3_routes_tokens(const struct k3_routes *r)
{
    return r->start[r->n_requests];
}
static inline int k3_routes_length(const struct k3_routes *r, int req)
{
    return (int)(r->start[req + 1] - r->start[req]);
}
/* The K ids of MoE layer m (0-based among the MoE layers) at token t (0-based overall). */
static inline const uint16_t *k3_routes_at(const struct k3_routes *r, int64_t t, int m)
{
    return r->ids + ((size_t)t * (size_t)r->layers + (size_t)m) * (size_t)r->top_k;
}

/* 0 when the trace's shape (experts, top_k, MoE layers) is c's; else -1 naming both. */
int k3_routes_fit(const struct k3_routes *r, const struct k3_config *c, struct k3_err *err);

/* Replay through the forward pass: each bound sequence takes its request's selections by
 * position; a position past the request's tokens runs on into the next kept requests
 * (`run` walks A..B as one stream), past the last kept token it is an error. */
#define K3_ROUTES_MAX_BOUND 256
struct k3_routes_player {
    const struct k3_routes *r;
    const struct k3_config *c;
    int *moe_index;                 /* [n_layers] a layer's index among MoE layers, or -1 */
    int n_bound;
    const struct k3_seq *seq[K3_ROUTES_MAX_BOUND];
    int req[K3_ROUTES_MAX_BOUND];   /* kept request index */
    struct k3_route_source source;  /* what forward's hooks.routes points at */
};

int k3_routes_player_init(struct k3_routes_player *p, const struct k3_routes *r,
                          const struct k3_config *c, struct k3_err *err);
void k3_routes_player_free(struct k3_routes_player *p);
/* Sequence q takes request req's selections from its position 0 (rebinding q replaces
 * its request). */
int k3_routes_bind(struct k3_routes_player *p, const struct k3_seq *q, int req,
                   struct k3_err *err);

#endif
