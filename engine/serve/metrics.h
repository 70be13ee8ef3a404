/* /metrics: the scheduler's statistics as Prometheus text (exposition format 0.0.4).
 *
 * Owns: the metric names, their help and types, and the derived values: the union of
 * experts a MoE layer read per decode step, per layer and their mean.
 * Does not own: counting (sched.h keeps the counters, the forward pass and the read path
 * feed them; conns.h the connections'), HTTP (http.c).
 */
#ifndef K3_SERVE_METRICS_H
#define K3_SERVE_METRICS_H

#include "engine/serve/conns.h"
#include "engine/serve/sched.h"

/* The text for st and layer_experts [n_layers] (k3_sched_stats').  malloc'd, NULL when
 * out of memory. */
char *k3_metrics_text(const struct k3_sched_stats *st, const uint64_t *layer_experts,
                      int n_layers);
/* text (taken; NULL stays NULL) with the connection table's counts after it. */
char *k3_metrics_append_conns(char *text, const struct k3_conn_stats *cs);

#endif
