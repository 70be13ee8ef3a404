/* --routes and --routes-requests (routes_args.h). */
#include "engine/cli/routes_args.h"

static int range(const struct routes_args *a, int *first, int *last, struct k3_err *err)
{
    *first = 0;
    *last = -1;
    return a->range ? k3_routes_parse_range(a->range, first, last, err) : 0;
}

int routes_args_check(const struct routes_args *a, struct k3_err *err)
{
    int first, last;
    if (a->range && !a->path)
        return k3_errf(err, "--routes-requests goes with --routes");
    return range(a, &first, &last, err);
}

int routes_args_load(struct routes_args *a, const struct k3_config *c, struct k3_err *err)
{
    int first, last;
    if (!a->path)
        return 0;
    if (range(a, &first, &last, err) || k3_routes_load(&a->trace, a->path, first, last, err))
        return k3_err_prefix(err, "--routes");
    if (k3_routes_player_init(&a->player, &a->trace, c, err))
        return k3_err_prefix(err, "--routes %s", a->path);
    return 0;
}

void routes_args_free(struct routes_args *a)
{
    k3_routes_player_free(&a->player);
    k3_routes_free(&a->trace);
}

void routes_args_say(const struct routes_args *a, FILE *f, const char *prefix)
{
    const struct k3_routes *r = &a->trace;
    if (!a->path)
        return;
    fprintf(f, "%s: note: MoE selections replayed from %s (requests %d-%d, %lld tokens; the "
               "router's scores weigh them): the output is not the model's\n",
            prefix, a->path, r->first, r->first + r->n_requests - 1,
            (long long)k3_routes_tokens(r));
}
