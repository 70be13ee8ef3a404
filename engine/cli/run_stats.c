/* `run`'s statistics on stderr: per step (--stats), per layer over the generated tokens
 * (--stats), and the closing summary lines. */
#include <stdlib.h>
#include <sys/resource.h>

#include "engine/cli/drive_model.h"
#include "engine/cli/run.h"
#include "numa/teams.h"

void run_print_step(const struct runner *r, const char *what, int index,
                    const struct k3_runtime_snapshot *a, const struct k3_runtime_snapshot *b)
{
    double dt = b->t - a->t;
    if (!k3_runtime_stream(r->rt)) {
        fprintf(stderr, "k3-uring: %s %d: %.4f s\n", what, index, dt);
        return;
    }
    const struct k3_stream_stats *x = &a->io, *y = &b->io;
    double record_bytes = (double)k3_runtime_model(r->rt)->record.bytes;
    uint64_t bytes = y->bytes - x->bytes;
    fprintf(stderr,
            "k3-uring: %s %d: %.4f s, %.1f MB in %llu reads (%.1f MB trunk, %.2f GB/s), "
            "stall %.4f s, %llu records read, %llu cache hits, %llu records asked (%.1f MB), verify "
            "%.4f s, area taken %.1f MB in %.4f s, %llu system calls\n",
            what, index, dt, bytes / 1e6, (unsigned long long)(y->reads - x->reads),
            (y->trunk_bytes - x->trunk_bytes) / 1e6,
            dt > 0 ? bytes / dt / 1e9 : 0, y->stall_seconds - x->stall_seconds,
            (unsigned long long)(y->records_read - x->records_read),
            (unsigned long long)(y->records_hit - x->records_hit),
            (unsigned long long)(y->records_asked - x->records_asked),
            (double)(y->records_asked - x->records_asked) * record_bytes / 1e6,
            y->verify_seconds - x->verify_seconds,
            (y->area_taken_bytes - x->area_taken_bytes) / 1e6,
            y->area_take_seconds - x->area_take_seconds,
            (unsigned long long)(y->syscalls - x->syscalls));
}

/* Layer l's counters since the prompt ended. */
static struct k3_layer_stats decode_layer(const struct runner *r, int l)
{
    const struct k3_layer_stats *a = &r->layers_at_prompt_end[l];
    const struct k3_layer_stats *b = &k3_stream_layer_stats(k3_runtime_stream(r->rt))[l];
    return (struct k3_layer_stats){
        .records = b->records - a->records,
        .predicted = b->predicted - a->predicted,
        .predicted_used = b->predicted_used - a->predicted_used,
        .wasted_bytes = b->wasted_bytes - a->wasted_bytes,
        .stall_seconds = b->stall_seconds - a->stall_seconds,
        .busy_seconds = b->busy_seconds - a->busy_seconds,
    };
}

/* Prediction hits, wasted bytes, stall and overlap (the share of the time reads were in
 * flight that compute did not wait). */
void run_print_layers(const struct runner *r)
{
    fprintf(stderr, "k3-uring: decode, per layer:\n"
                    "k3-uring: layer  records  predicted  used  hit%%  wasted MB  stall s  busy s  overlap\n");
    int n_layers = k3_runtime_config(r->rt)->n_layers;
    for (int l = 0; l <= n_layers; l++) {
        struct k3_layer_stats x = decode_layer(r, l);
        if (!x.records && !x.busy_seconds && !x.stall_seconds)
            continue;
        char name[16];
        snprintf(name, sizeof name, l < n_layers ? "%d" : "output", l);
        fprintf(stderr, "k3-uring: %5s %8llu %10llu %5llu %5.1f %10.1f %8.4f %7.4f %7.1f%%\n", name,
                (unsigned long long)x.records, (unsigned long long)x.predicted,
                (unsigned long long)x.predicted_used,
                x.records ? 100.0 * (double)x.predicted_used / (double)x.records : 0.0,
                x.wasted_bytes / 1e6, x.stall_seconds, x.busy_seconds,
                x.busy_seconds > 0 ? 100.0 * (1 - x.stall_seconds / x.busy_seconds) : 100.0);
    }
}

/* Records the generated tokens asked for, and how many of them a prediction had already
 * read. */
static void decode_records(const struct runner *r, uint64_t *asked, uint64_t *predicted)
{
    *asked = *predicted = 0;
    int n_layers = k3_runtime_config(r->rt)->n_layers;
    for (int l = 0; k3_runtime_stream(r->rt) && r->layers_at_prompt_end && l <= n_layers; l++) {
        struct k3_layer_stats x = decode_layer(r, l);
        *asked += x.records;
        *predicted += x.predicted_used;
    }
}

static void print_speed(const struct runner *r, int generated, const struct k3_runtime_snapshot *start,
                        const struct k3_runtime_snapshot *prompt_end,
                        const struct k3_runtime_snapshot *end)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    double t_gen = end->t - prompt_end->t;
    uint64_t bytes = end->io.bytes - prompt_end->io.bytes, asked, predicted;
    int steps = generated > 1 ? generated - 1 : 1;
    decode_records(r, &asked, &predicted);
    uint64_t hits = end->io.records_hit - prompt_end->io.records_hit + predicted;
    char cached[64];
    run_cache_note(r, cached, sizeof cached);
    fprintf(stderr,
            "k3-uring: prompt %d tokens%s in %.3f s; generated %d tokens, %.4f s/token; "
            "%.1f MB read per token (%.2f GB/s), stall %.4f s/token, %.1f%% of records "
            "ready when asked (prefetched or cached); %.1f system calls a token; peak RSS %ld MB\n",
            r->n_prompt, cached, prompt_end->t - start->t, generated, generated > 1 ? t_gen / steps : 0.0,
            generated > 1 ? bytes / 1e6 / steps : 0.0, t_gen > 0 ? bytes / t_gen / 1e9 : 0.0,
            generated > 1 ? (end->io.stall_seconds - prompt_end->io.stall_seconds) / steps : 0.0,
            asked ? 100.0 * (double)hits / (double)asked : 0.0,
            generated > 1 ? (double)(end->io.syscalls - prompt_end->io.syscalls) / steps : 0.0,
            ru.ru_maxrss / 1024);
}

/* Under mpirun: this rank's reads are its share; what crossed between ranks. */
static void print_ranks(const struct runner *r, int generated,
                        const struct k3_runtime_snapshot *prompt_end,
                        const struct k3_runtime_snapshot *end)
{
    struct k3_share share = k3_runtime_share(r->rt);
    if (k3_share_whole(share))
        return;
    int steps = generated > 1 ? generated - 1 : 1;
    fprintf(stderr, "k3-uring: %d ranks, experts %s; per token: %.1f KB of expert outputs sent "
                    "between ranks (all ranks), rank 0 waited %.4f s in exchanges\n",
            share.ranks, share.dealt ? "dealt out evenly" : "by owner (e mod ranks)", (double)(end->ranks.bytes_sent - prompt_end->ranks.bytes_sent) / 1e3 / steps,
            (end->ranks.wait_seconds - prompt_end->ranks.wait_seconds) / steps);
}

static void print_faults(const struct runner *r)
{
    struct k3_fault_counts fc;
    const struct k3_stream *stream = k3_runtime_stream(r->rt);
    if (!stream || !k3_stream_faults(stream, &fc))
        return;
    struct k3_stream_stats st = k3_stream_stats(stream);
    fprintf(stderr,
            "k3-uring: faults injected: %llu eio, %llu short, %llu eagain, %llu delays, "
            "%llu corrupt, %llu on a lost drive, %llu submissions refused; of %llu read "
            "results and %llu submissions; %llu reads retried, %llu from replicas\n",
            (unsigned long long)fc.eio, (unsigned long long)fc.shorts,
            (unsigned long long)fc.eagain, (unsigned long long)fc.delays,
            (unsigned long long)fc.corrupt, (unsigned long long)fc.lost,
            (unsigned long long)fc.refused, (unsigned long long)fc.reads,
            (unsigned long long)fc.submits, (unsigned long long)st.retries,
            (unsigned long long)st.replica_reads);
}

/* The read area is taken as reads reach it, faulted in on their way unless the idle
 * thread did it first; where a hypervisor backs guest memory lazily that is slow, so this
 * line (-v, --stats) says how much of the run it was, and where. */
static void print_area(const struct runner *r, const struct k3_runtime_snapshot *end)
{
    const struct k3_stream_stats *io = &end->io;
    if ((r->o->verbose || r->o->stats) && io->area_taken_bytes)
        fprintf(stderr, "k3-uring: read area: %.1f MB taken as reads reached it, in %.3f s "
                        "(faulting fresh memory in on their way); %.1f MB faulted in ahead of "
                        "them, in %.3f s off it\n",
                io->area_taken_bytes / 1e6, io->area_take_seconds, io->area_ahead_bytes / 1e6,
                io->area_ahead_seconds);
}

static void print_teams(const struct runner *r)
{
    const struct k3_forward *f = k3_runtime_forward(r->rt);
    int n_teams = k3numa_teams_count(f->teams);
    if (!r->o->verbose)
        return;
    uint64_t all = 0, whole = k3_forward_experts_whole(f);
    for (int i = 0; i < n_teams; i++)
        all += k3_forward_team_experts(f, i);
    fprintf(stderr, "k3-uring: routed experts: %llu computed whole by one thread, %llu split over "
                    "their team\n", (unsigned long long)whole, (unsigned long long)(all - whole));
    if (n_teams < 2)
        return;
    char line[1024];
    int at = snprintf(line, sizeof line, "k3-uring: routed experts computed by");
    for (int i = 0; i < n_teams && at < (int)sizeof line; i++)
        at += snprintf(line + at, sizeof line - (size_t)at, "%s team %d (node %d) %llu",
                       i ? "," : "", i, k3numa_teams_node(f->teams, i),
                       (unsigned long long)k3_forward_team_experts(f, i));
    fprintf(stderr, "%s\n", line);
}

void run_print_summary(const struct runner *r, int generated,
                       const struct k3_runtime_snapshot *start,
                       const struct k3_runtime_snapshot *prompt_end,
                       const struct k3_runtime_snapshot *end)
{
    print_speed(r, generated, start, prompt_end, end);
    print_ranks(r, generated, prompt_end, end);
    if (k3_runtime_stream(r->rt)) {
        struct k3io_stats io = k3_stream_io_stats(k3_runtime_stream(r->rt));
        cli_drive_model_print(stderr, "k3-uring", &k3_runtime_opts(r->rt)->read.drive_model, &io);
    }
    print_area(r, end);
    print_faults(r);
    print_teams(r);
    if (end->nan_scale_groups)
        fprintf(stderr, "k3-uring: %llu MXFP4 groups had the reserved scale 255 (zeroed)\n",
                (unsigned long long)end->nan_scale_groups);
}
