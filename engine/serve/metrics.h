/* /metrics: the scheduler's statistics as Prometheus text (exposition format 0.0.4).
 *
 * Owns: the metric names, their help and types, and the one derived value, the mean
 * union of experts a MoE layer read per decode step.
 * Does not own: counting (sched.h keeps the counters, the forward pass and the read path
 * feed them), HTTP (http.c).
 */
#ifndef K3_SERVE_METRICS_H
#define K3_SERVE_METRICS_H

#include "engine/serve/sched.h"

/* The text for st; moe_layers: the model's MoE layers.  malloc'd, NULL when out of
 * memory. */
char *k3_metrics_text(const struct k3_sched_stats *st, int moe_layers);

#endif
