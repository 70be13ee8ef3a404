/* --routes FILE [--routes-requests A-B], shared by run, iobench and replay: the table
 * entries, loading the trace's requests for a model (its shape checked against the
 * model's), and the line that says once that the output is not the model's.
 * Owns: struct routes_args, those entries, the checks, the load and the line.  Does not
 * own: the trace and its replay (engine/routes/). */
#ifndef K3_CLI_ROUTES_ARGS_H
#define K3_CLI_ROUTES_ARGS_H

#include <stdio.h>

#include "engine/base/err.h"
#include "engine/base/options.h"
#include "engine/routes/routes.h"

struct routes_args {
    const char *path;        /* --routes, or NULL */
    const char *range;       /* --routes-requests, or NULL: every request */
    struct k3_routes trace;  /* loaded by routes_args_load */
    struct k3_routes_player player;
};

#define CLI_ROUTES_OPTS(a)                                                                   \
    {.name = "routes", .type = K3_OPT_STRING, .dst = &(a)->path, .arg = "FILE",               \
     .help = "MoE selections replayed from a routing trace (routes v1, gzip'd or not) "       \
             "instead of the router's; the output is then not the model's"},                  \
    {.name = "routes-requests", .type = K3_OPT_STRING, .dst = &(a)->range, .arg = "A-B",      \
     .help = "--routes: the trace's requests A to B (from 0; A- to the end)", .def = "all"}

/* Usage checks before the model opens (--routes-requests needs --routes; the range). */
int routes_args_check(const struct routes_args *a, struct k3_err *err);
/* The trace's requests for model c (nothing without --routes); -1 with err naming the
 * file's line, or both shapes. */
int routes_args_load(struct routes_args *a, const struct k3_config *c, struct k3_err *err);
void routes_args_free(struct routes_args *a);
/* "PREFIX: note: MoE selections replayed from ..." once on f (nothing without --routes). */
void routes_args_say(const struct routes_args *a, FILE *f, const char *prefix);

#endif
