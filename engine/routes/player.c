/* Replaying a trace through the forward pass (routes.h): the route source that hands a
 * row's selections from the request its sequence is bound to. */
#include <stdlib.h>

#include "engine/routes/routes.h"

static int choose(void *ctx, const struct k3_seq *q, int pos, int layer, int *sel,
                  struct k3_err *err)
{
    struct k3_routes_player *p = ctx;
    const struct k3_routes *r = p->r;
    int b = 0;
    while (b < p->n_bound && p->seq[b] != q)
        b++;
    if (b == p->n_bound)
        return k3_errf(err, "--routes: a sequence with no request of the trace bound to it");
    int m = p->moe_index[layer];
    if (m < 0)
        return k3_errf(err, "--routes: layer %d is not a MoE layer", layer);
    int64_t t = r->start[p->req[b]] + pos;
    if (t >= k3_routes_tokens(r))
        return k3_errf(err, "--routes: position %d of request %d runs past the trace's last "
                            "token (requests %d-%d hold %lld)", pos, r->first + p->req[b],
                       r->first, r->first + r->n_requests - 1, (long long)k3_routes_tokens(r));
    const uint16_t *ids = k3_routes_at(r, t, m);
    for (int j = 0; j < r->top_k; j++)
        sel[j] = ids[j];
    return 0;
}

int k3_routes_player_init(struct k3_routes_player *p, const struct k3_routes *r,
                          const struct k3_config *c, struct k3_err *err)
{
    *p = (struct k3_routes_player){.r = r, .c = c};
    if (k3_routes_fit(r, c, err))
        return -1;
    if (!(p->moe_index = malloc(sizeof(int) * (size_t)c->n_layers)))
        return k3_errf(err, "out of memory");
    for (int l = 0, m = 0; l < c->n_layers; l++)
        p->moe_index[l] = k3_layer_is_moe(c, l) ? m++ : -1;
    p->source = (struct k3_route_source){.choose = choose, .ctx = p};
    return 0;
}

void k3_routes_player_free(struct k3_routes_player *p)
{
    free(p->moe_index);
    p->moe_index = NULL;
}

int k3_routes_bind(struct k3_routes_player *p, const struct k3_seq *q, int req,
                   struct k3_err *err)
{
    if (req < 0 || req >= p->r->n_requests)
        return k3_errf(err, "--routes: request %d is not among those kept", req);
    int b = 0;
    while (b < p->n_bound && p->seq[b] != q)
        b++;
    if (b == K3_ROUTES_MAX_BOUND)
        return k3_errf(err, "--routes: more than %d sequences at once", K3_ROUTES_MAX_BOUND);
    p->seq[b] = q;
    p->req[b] = req;
    p->n_bound += b == p->n_bound;
    return 0;
}
