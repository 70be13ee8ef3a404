#include "engine/serve/metrics.h"

#include <stdio.h>
#include <stdlib.h>

static void metric(FILE *f, const char *name, const char *type, const char *help, double v)
{
    fprintf(f, "# HELP k3_%s %s\n# TYPE k3_%s %s\nk3_%s %.17g\n", name, help, name, type, name, v);
}

static void histogram(FILE *f, const char *name, const char *help, const struct k3_latency *h)
{
    fprintf(f, "# HELP k3_%s %s\n# TYPE k3_%s histogram\n", name, help, name);
    for (int i = 0; i < K3_LATENCY_BUCKETS; i++)
        fprintf(f, "k3_%s_bucket{le=\"%g\"} %llu\n", name, K3_LATENCY_BOUNDS[i],
                (unsigned long long)h->le[i]);
    fprintf(f, "k3_%s_bucket{le=\"+Inf\"} %llu\nk3_%s_sum %.17g\nk3_%s_count %llu\n", name,
            (unsigned long long)h->count, name, h->sum, name, (unsigned long long)h->count);
}

/* Mean experts each MoE layer read per decode step, a series per layer.  A MoE layer
 * reads at least one expert in every decode step, so once there was one the layers
 * with none are the dense ones. */
static int union_per_layer(FILE *f, const struct k3_sched_stats *st, const uint64_t *layer_experts,
                           int n_layers)
{
    fprintf(f, "# HELP k3_decode_layer_union_experts Mean union of routed experts the layer "
               "read per decode step.\n# TYPE k3_decode_layer_union_experts gauge\n");
    int moe_layers = 0;
    for (int l = 0; l < n_layers; l++) {
        if (!layer_experts[l])
            continue;
        moe_layers++;
        fprintf(f, "k3_decode_layer_union_experts{layer=\"%d\"} %.17g\n", l,
                (double)layer_experts[l] / (double)st->decode_steps);
    }
    return moe_layers;
}

char *k3_metrics_text(const struct k3_sched_stats *st, const uint64_t *layer_experts,
                      int n_layers)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f)
        return NULL;
    double steps = (double)st->decode_steps;
    metric(f, "requests_running", "gauge", "Requests holding a sequence (prefilling or decoding).",
           st->running);
    metric(f, "requests_queued", "gauge", "Requests waiting for a sequence.", st->queued);
    metric(f, "requests_total", "counter", "Requests that ended (any finish).",
           (double)st->requests_done);
    metric(f, "prompt_tokens_total", "counter", "Prompt tokens of the requests admitted.",
           (double)st->prompt_tokens);
    metric(f, "tokens_generated_total", "counter", "Tokens generated.",
           (double)st->tokens_generated);
    metric(f, "steps_total", "counter", "Forward steps run.", (double)st->steps);
    metric(f, "busy_seconds_total", "counter", "Seconds spent in forward steps.", st->busy_seconds);
    metric(f, "decode_steps_total", "counter",
           "Decode steps (every row its sequence's only one).", steps);
    metric(f, "decode_rows_total", "counter", "Rows of the decode steps.", (double)st->decode_rows);
    metric(f, "decode_rows_per_step", "gauge", "Mean rows per decode step.",
           steps ? (double)st->decode_rows / steps : 0);
    metric(f, "decode_experts_total", "counter",
           "Routed experts read in decode steps, summed over the MoE layers.",
           (double)st->decode_experts);
    metric(f, "decode_seconds_total", "counter", "Seconds spent in decode steps.",
           st->decode_seconds);
    metric(f, "decode_read_bytes_total", "counter", "Bytes read in decode steps.",
           (double)st->decode_read_bytes);
    metric(f, "decode_stall_seconds_total", "counter",
           "Seconds decode steps' compute waited for data.", st->decode_stall_seconds);
    int moe_layers = union_per_layer(f, st, layer_experts, n_layers);
    metric(f, "decode_union_experts", "gauge",
           "Mean union of routed experts one MoE layer read per decode step.",
           steps && moe_layers ? (double)st->decode_experts / steps / moe_layers : 0);
    metric(f, "read_bytes_total", "counter", "Bytes read from the drives.", (double)st->io.bytes);
    metric(f, "records_read_total", "counter", "Expert records read.",
           (double)st->io.records_read);
    metric(f, "cache_hits_total", "counter", "Expert records found in the cache.",
           (double)st->io.records_hit);
    metric(f, "stall_seconds_total", "counter", "Seconds compute waited for data.",
           st->io.stall_seconds);
    metric(f, "read_retries_total", "counter", "Failed reads tried again.", (double)st->io.retries);
    metric(f, "read_area_bytes", "gauge",
           "Bytes of the read area in memory: taken as reads reached it or faulted in ahead of "
           "them (the expert cache grows into it, up to the budget).",
           (double)(st->io.area_taken_bytes + st->io.area_ahead_bytes));
    metric(f, "rank_exchange_bytes_total", "counter",
           "Bytes of expert outputs sent between mpirun's ranks, all ranks (0: one process).",
           (double)st->ranks.bytes_sent);
    metric(f, "rank_exchange_wait_seconds_total", "counter",
           "Seconds rank 0 waited in exchanges for the other ranks' experts.",
           st->ranks.wait_seconds);
    metric(f, "prompt_cache_tokens_total", "counter",
           "Prompt tokens resumed from the prompt store instead of computed.",
           (double)st->store.tokens_reused);
    metric(f, "prompt_cache_hits_total", "counter", "Requests that resumed from a stored state.",
           (double)st->store.hits);
    metric(f, "prompt_cache_bytes", "gauge", "Bytes of states the prompt store holds.",
           (double)st->store.bytes);
    histogram(f, "time_to_first_token_seconds",
              "Seconds from a request's arrival to its first token.", &st->first_token);
    histogram(f, "time_between_tokens_seconds",
              "Seconds between a request's consecutive tokens.", &st->between_tokens);
    if (fclose(f)) {
        free(text);
        return NULL;
    }
    return text;
}

static void labelled(FILE *f, const char *name, const char *help, const char *label,
                     const char *const values[2], const uint64_t counts[2])
{
    fprintf(f, "# HELP k3_%s %s\n# TYPE k3_%s counter\n", name, help, name);
    for (int i = 0; i < 2; i++)
        fprintf(f, "k3_%s{%s=\"%s\"} %llu\n", name, label, values[i],
                (unsigned long long)counts[i]);
}

char *k3_metrics_append_conns(char *text, const struct k3_conn_stats *cs)
{
    char *out = NULL;
    size_t len = 0;
    FILE *f = text ? open_memstream(&out, &len) : NULL;
    if (!f) {
        free(text);
        return NULL;
    }
    fputs(text, f);
    free(text);
    metric(f, "connections_open", "gauge", "HTTP connections held.", cs->open);
    metric(f, "connections_total", "counter", "HTTP connections accepted.",
           (double)cs->accepted);
    labelled(f, "connections_refused_total",
             "Connections refused: answered 503 over a full table (full), or closed at accept "
             "over the address's limit or the table's reserve (limit).",
             "reason", (const char *const[]){"full", "limit"},
             (const uint64_t[]){cs->refused_full, cs->refused_limit});
    labelled(f, "connections_timed_out_total",
             "Connections closed for time: a request's headers and body not in by "
             "--read-timeout (read), or idle between requests for --timeout (idle).",
             "phase", (const char *const[]){"read", "idle"},
             (const uint64_t[]){cs->timed_out_read, cs->timed_out_idle});
    metric(f, "connections_closed_idle_total", "counter",
           "Idle kept-alive connections closed to make room for a new client.",
           (double)cs->closed_for_room);
    if (fclose(f)) {
        free(out);
        return NULL;
    }
    return out;
}
