/* `k3-uring run`: a prompt through the model, then generation.  The interface tests
 * and tools rely on: generated text (or ids with --print-ids) on stdout, statistics on
 * stderr, and with --logits-out the raw little-endian f32 logits, one row of vocab_size
 * values per position whose next token was predicted (every prompt position, then every
 * generated token but the last). */
#include <errno.h>
#include <signal.h>
#include <jansson.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/resource.h>
#include <unistd.h>

#include "engine/text/chat.h"
#include "engine/cli/cli.h"
#include "engine/stream/experts.h"
#include "engine/stream/faults.h"
#include "engine/base/files.h"
#include "engine/forward/forward.h"
#include "engine/model/model.h"
#include "engine/cli/options.h"
#include "engine/pack/packed.h"
#include "engine/stream/placement.h"
#include "engine/forward/sampler.h"
#include "engine/stream/stream.h"
#include "engine/base/trace.h"
#include "engine/text/tokenizer.h"
#include "numa/teams.h"

struct run_opts {
    const char *model, *drives, *ids_text, *prompt, *logits_out, *dump_layers;
    const char *ram_text, *io_text, *predict_text, *predict_from_text, *trace_path;
    const char *prompt_file, *system, *think_text, *numa_text;
    int32_t *ids; /* --ids, parsed while validating options */
    int n_ids;
    int n_predict, threads, top_k, ctx, prefetch_k, prefetch_depth;
    float temp, top_p;
    uint64_t seed, ram;
    enum k3io_backend io;
    enum k3_predict_from predict;
    bool print_ids, ignore_eos, quiet, stats, verbose, no_cache, sync, chat, special;
};

/* Per-layer summaries of the hidden state, [positions][layers + 1][rms, mean, max_abs]:
 * compared with the reference's to find the first layer that diverges. */
struct layer_dump {
    int layers, positions;
    float *stats;
};

static void dump_hook(void *ctx, int pos, int layer, const float *x, int H)
{
    struct layer_dump *d = ctx;
    if (pos >= d->positions)
        return;
    double ss = 0, sum = 0, mx = 0;
    for (int i = 0; i < H; i++) {
        ss += (double)x[i] * x[i];
        sum += x[i];
        mx = fabs(x[i]) > mx ? fabs(x[i]) : mx;
    }
    float *s = d->stats + ((size_t)pos * (d->layers + 1) + layer) * 3;
    s[0] = (float)sqrt(ss / H);
    s[1] = (float)(sum / H);
    s[2] = (float)mx;
}

static int write_layer_dump(const struct layer_dump *d, int positions, const char *path,
                            struct k3_err *err)
{
    json_t *rows = json_array();
    for (int p = 0; p < positions; p++) {
        json_t *layers = json_array();
        for (int l = 0; l <= d->layers; l++) {
            const float *s = d->stats + ((size_t)p * (d->layers + 1) + l) * 3;
            json_array_append_new(layers, json_pack("[f, f, f]", s[0], s[1], s[2]));
        }
        json_array_append_new(rows, layers);
    }
    json_t *root = json_pack("{s:s, s:o}", "fields", "rms, mean, max_abs", "layer_stats", rows);
    int rc = json_dump_file(root, path, JSON_COMPACT) ? k3_errf(err, "%s: write failed", path) : 0;
    json_decref(root);
    return rc;
}

/* Ctrl-C: generation stops after the token in progress and the statistics so far are
 * printed; a second Ctrl-C kills as usual. */
static volatile sig_atomic_t interrupted;

static void on_interrupt(int sig)
{
    interrupted = 1;
    signal(sig, SIG_DFL);
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Output of generated tokens: text through the UTF-8 stream, or ids. */
struct emitter {
    const struct k3_tokenizer *tok;
    struct k3_utf8_stream utf8;
    bool ids;
    bool special; /* print special tokens' text too */
    int count;
};

static void emit(struct emitter *e, int32_t id)
{
    if (e->ids) {
        printf(e->count ? ",%d" : "%d", id);
    } else if (e->special || !k3_tok_is_special(e->tok, id)) {
        size_t len;
        const uint8_t *bytes = k3_tok_bytes(e->tok, id, &len);
        char buf[1024];
        const size_t max_in = (sizeof buf - 9) / 3; /* K3_UTF8_OUT_MAX(max_in) fits buf */
        while (bytes && len) { /* a token's bytes, in pieces the buffer holds */
            size_t take = len < max_in ? len : max_in;
            fwrite(buf, 1, k3_utf8_push(&e->utf8, bytes, take, buf), stdout);
            bytes += take;
            len -= take;
        }
    }
    e->count++;
    fflush(stdout);
}

static void emit_end(struct emitter *e)
{
    char buf[16];
    if (!e->ids)
        fwrite(buf, 1, k3_utf8_flush(&e->utf8, buf), stdout);
    putchar('\n');
    fflush(stdout);
}

static int write_rows(FILE *f, const float *rows, int n, int vocab, const char *path,
                      struct k3_err *err)
{
    if (fwrite(rows, sizeof(float) * (size_t)vocab, (size_t)n, f) != (size_t)n)
        return k3_errf(err, "%s: write failed: %s", path, strerror(errno));
    return 0;
}

/* Splits "a,b,c" in place into at most cap paths. */
static int split_list(char *text, const char **items, int cap)
{
    int n = 0;
    for (char *tok = strtok(text, ","); tok && n < cap; tok = strtok(NULL, ","))
        items[n++] = tok;
    return n;
}

/* Everything one run holds, set up in order and torn down in reverse. */
struct runner {
    const struct run_opts *o;
    struct k3_placement place;
    struct k3_model m;
    struct k3_stream *stream;          /* packed models: the read path */
    struct k3_expert_store *ckpt_store;/* checkpoint models */
    struct k3_expert_store *store;     /* whichever serves the experts */
    struct k3_tokenizer *tok;
    struct k3_session ss;
    struct k3_sampler sampler;
    struct layer_dump dump;
    int32_t *prompt;
    int n_prompt, ctx;
    float *logits;                     /* [K3_CHUNK][vocab] */
    struct k3_trace *trace;
    FILE *lf;
    char logits_tmp[K3_PATH_MAX];
};

/* Threads pinned per NUMA node (before anything allocates), then the model. */
static int open_model(struct runner *r, struct k3_err *err)
{
    const struct run_opts *o = r->o;
    char *list = o->drives ? strdup(o->drives) : NULL;
    const char *drives[256];
    int n = list ? split_list(list, drives, 256) : 0;
    int rc = k3_placement_init(&r->place, drives, n, o->threads, !strcmp(o->numa_text, "off"), err);
    if (!rc && o->model)
        rc = k3_model_open_checkpoint(&r->m, o->model, err);
    else if (!rc)
        rc = n ? k3_model_open_packed(&r->m, drives, n, err) : k3_errf(err, "--drives: no drives");
    free(list);
    return rc;
}

static int prepare_prompt(struct runner *r, struct k3_err *err)
{
    const struct run_opts *o = r->o;
    if ((!o->ids || !o->print_ids) && k3_model_tokenizer(&r->m, &r->tok, err))
        return -1;
    if (o->ids) {
        r->prompt = o->ids;
        r->n_prompt = o->n_ids;
    } else {
        char *file_text = NULL;
        size_t len = 0, n = 0;
        if (o->prompt_file && k3_read_small_file(o->prompt_file, &file_text, &len, err))
            return k3_err_prefix(err, "--file");
        const char *text = file_text ? file_text : o->prompt;
        int rc = o->chat ? k3_chat_prompt(r->tok, o->system, text, strcmp(o->think_text, "off"),
                                          &r->prompt, &n, err)
                         : k3_tok_encode(r->tok, text, strlen(text), false, &r->prompt, &n, err);
        free(file_text);
        if (rc)
            return file_text || o->prompt_file ? k3_err_prefix(err, "-f %s", o->prompt_file)
                                               : k3_err_prefix(err, "-p");
        r->n_prompt = (int)n;
    }
    if (r->n_prompt == 0)
        return k3_errf(err, "the prompt is empty");
    r->ctx = o->ctx ? o->ctx : r->n_prompt + o->n_predict;
    if (r->ctx < r->n_prompt + o->n_predict)
        return k3_errf(err, "--ctx-size %d holds fewer than the prompt (%d tokens) + -n %d", r->ctx,
                       r->n_prompt, o->n_predict);
    if (r->ctx > r->m.cfg.max_positions)
        return k3_errf(err, "context %d exceeds max_position_embeddings %d", r->ctx,
                       r->m.cfg.max_positions);
    return 0;
}

/* What the read path says while running (a drive taken as lost). */
static void read_path_note(void *ctx, const char *line)
{
    (void)ctx;
    fprintf(stderr, "k3-uring: note: %s\n", line);
}

static int open_read_path(struct runner *r, struct k3_err *err)
{
    const struct run_opts *o = r->o;
    const struct k3_config *c = &r->m.cfg;
    if (!r->m.packed) {
        if (k3_expert_store_checkpoint(&r->ckpt_store, &r->m, c->top_k, err))
            return -1;
        r->store = r->ckpt_store;
        if (r->store->fallback[0])
            fprintf(stderr, "k3-uring: note: %s\n", r->store->fallback);
        return 0;
    }
    uint64_t fault_seed;
    if (k3_faults_seed_env(&fault_seed, err))
        return -1;
    struct k3_stream_opts so = {
        .backend = o->io,
        .ram = o->ram,
        .ctx = r->ctx,
        .threads = omp_get_max_threads(),
        .cache = !o->no_cache,
        .sync = o->sync,
        .prefetch_k = o->predict != K3_PREDICT_OFF ? o->prefetch_k : 0,
        .prefetch_depth = o->prefetch_depth,
        .trace = r->trace,
        .place = &r->place,
        .faults = getenv("K3_FAULTS"),
        .fault_seed = fault_seed,
        .logits_bytes = sizeof(float) * (size_t)K3_CHUNK * (size_t)c->vocab,
        .note = read_path_note,
    };
    char note[256] = "";
    if (k3_stream_open(&r->stream, &r->m, &so, note, sizeof note, err))
        return -1;
    if (note[0])
        fprintf(stderr, "k3-uring: note: %s\n", note);
    for (int d = 0; d < r->m.packed->n_drives; d++)
        if (!r->m.packed->drives[d].data.direct) {
            fprintf(stderr, "k3-uring: note: drive %s refuses O_DIRECT; reading it through the "
                            "page cache\n", r->m.packed->drives[d].path);
            break;
        }
    if (o->verbose) {
        const struct k3_budget_input *in;
        const struct k3_budget *b = k3_stream_budget(r->stream, &in);
        fprintf(stderr, "k3-uring: reads through %s; ", k3_stream_backend(r->stream));
        k3_budget_print(stderr, b, in);
        k3_placement_print(stderr, &r->place, b->expert_inflight + b->cache_bytes);
    }
    r->store = k3_stream_experts(r->stream);
    return 0;
}

static int setup(struct runner *r, struct k3_err *err)
{
    const struct run_opts *o = r->o;
    /* Logits go to a temporary name and are renamed at the end: a failed run leaves no
     * file that looks complete.  Opened first, so a bad path fails before a model loads. */
    if (o->logits_out) {
        int n = snprintf(r->logits_tmp, sizeof r->logits_tmp, "%s.partial", o->logits_out);
        if (n < 0 || (size_t)n >= sizeof r->logits_tmp)
            return k3_errf(err, "--logits-out %s: path too long", o->logits_out);
        if (!(r->lf = fopen(r->logits_tmp, "wb")))
            return k3_errf(err, "--logits-out %s: %s", r->logits_tmp, strerror(errno));
    }
    if (open_model(r, err))
        return -1;
    const struct k3_config *c = &r->m.cfg;
    if (o->trace_path &&
        k3_trace_open(&r->trace, o->trace_path, r->m.packed ? r->m.packed->n_drives : 0, err))
        return -1;
    if (prepare_prompt(r, err) || open_read_path(r, err) ||
        k3_session_init_placed(&r->ss, &r->m, r->store, r->ctx, r->place.plan, err) ||
        k3_sampler_init(&r->sampler, c->vocab, o->temp, o->top_k, o->top_p, o->seed, err))
        return -1;
    if (r->stream)
        r->ss.trunk = k3_stream_trunk(r->stream);
    r->ss.predict = r->stream && !o->sync ? o->predict : K3_PREDICT_OFF;
    r->ss.predict_k = o->prefetch_k;
    r->ss.trace = r->trace;
    if (!(r->logits = malloc(sizeof(float) * (size_t)K3_CHUNK * c->vocab)))
        return k3_errf(err, "out of memory for logits");
    if (o->dump_layers) {
        r->dump.layers = c->n_layers;
        r->dump.positions = r->ctx;
        r->dump.stats = calloc((size_t)r->ctx * (c->n_layers + 1) * 3, sizeof(float));
        if (!r->dump.stats)
            return k3_errf(err, "out of memory for --dump-layers");
        r->ss.hook = dump_hook;
        r->ss.hook_ctx = &r->dump;
    }
    return 0;
}

static void teardown(struct runner *r)
{
    if (r->lf) {
        fclose(r->lf);
        if (!interrupted)
            unlink(r->logits_tmp);
    }
    free(r->dump.stats);
    free(r->logits);
    if (r->prompt != r->o->ids)
        free(r->prompt);
    k3_sampler_free(&r->sampler);
    k3_session_free(&r->ss);
    k3_expert_store_close(r->ckpt_store);
    k3_stream_close(r->stream);
    k3_trace_close(r->trace, NULL);
    k3_tok_free(r->tok);
    k3_model_close(&r->m);
    k3_placement_free(&r->place);
}

/* What one step read and waited for (--stats), from two snapshots. */
struct snapshot {
    double t;
    struct k3_stream_stats io;
};

static struct snapshot snap(const struct runner *r)
{
    struct snapshot s = {.t = now()};
    if (r->stream) {
        s.io = k3_stream_stats(r->stream);
    } else if (r->store) { /* checkpoint reads: experts only, no cache */
        s.io.bytes = r->store->stats.bytes;
        s.io.records_read = r->store->stats.records;
        s.io.stall_seconds = r->store->stats.read_seconds;
    }
    return s;
}

static void print_step(const struct runner *r, const char *what, int index,
                       const struct snapshot *a, const struct snapshot *b)
{
    double dt = b->t - a->t;
    if (!r->stream) {
        fprintf(stderr, "k3-uring: %s %d: %.4f s\n", what, index, dt);
        return;
    }
    const struct k3_stream_stats *x = &a->io, *y = &b->io;
    uint64_t bytes = y->bytes - x->bytes;
    fprintf(stderr,
            "k3-uring: %s %d: %.4f s, %.1f MB in %llu reads (%.1f MB trunk, %.2f GB/s), "
            "stall %.4f s, %llu records read, %llu cache hits, verify %.4f s\n",
            what, index, dt, bytes / 1e6, (unsigned long long)(y->reads - x->reads),
            (y->trunk_bytes - x->trunk_bytes) / 1e6,
            dt > 0 ? bytes / dt / 1e9 : 0, y->stall_seconds - x->stall_seconds,
            (unsigned long long)(y->records_read - x->records_read),
            (unsigned long long)(y->records_hit - x->records_hit),
            y->verify_seconds - x->verify_seconds);
}

/* Per layer over the generated tokens (base: the counters when the prompt was done):
 * prediction hits, wasted bytes, stall and overlap (the share of the time reads were in
 * flight that compute did not wait). */
static void print_layers(const struct runner *r, const struct k3_layer_stats *base)
{
    const struct k3_layer_stats *ls = k3_stream_layer_stats(r->stream);
    fprintf(stderr, "k3-uring: decode, per layer:\n"
                    "k3-uring: layer  records  predicted  used  hit%%  wasted MB  stall s  busy s  overlap\n");
    for (int l = 0; l <= r->m.cfg.n_layers; l++) {
        const struct k3_layer_stats *a = &base[l], *b = &ls[l];
        struct k3_layer_stats d = {
            .records = b->records - a->records,
            .predicted = b->predicted - a->predicted,
            .predicted_used = b->predicted_used - a->predicted_used,
            .wasted_bytes = b->wasted_bytes - a->wasted_bytes,
            .stall_seconds = b->stall_seconds - a->stall_seconds,
            .busy_seconds = b->busy_seconds - a->busy_seconds,
        };
        const struct k3_layer_stats *x = &d;
        if (!x->records && !x->busy_seconds && !x->stall_seconds)
            continue;
        char name[16];
        snprintf(name, sizeof name, l < r->m.cfg.n_layers ? "%d" : "output", l);
        fprintf(stderr, "k3-uring: %5s %8llu %10llu %5llu %5.1f %10.1f %8.4f %7.4f %7.1f%%\n", name,
                (unsigned long long)x->records, (unsigned long long)x->predicted,
                (unsigned long long)x->predicted_used,
                x->records ? 100.0 * (double)x->predicted_used / (double)x->records : 0.0,
                x->wasted_bytes / 1e6, x->stall_seconds, x->busy_seconds,
                x->busy_seconds > 0 ? 100.0 * (1 - x->stall_seconds / x->busy_seconds) : 100.0);
    }
}

/* Records the generated tokens asked for, and how many of them a prediction had
 * already read. */
static uint64_t decode_records(const struct runner *r, const struct k3_layer_stats *base)
{
    const struct k3_layer_stats *ls = k3_stream_layer_stats(r->stream);
    uint64_t n = 0;
    for (int l = 0; base && l <= r->m.cfg.n_layers; l++)
        n += ls[l].records - base[l].records;
    return n;
}

static uint64_t decode_predicted(const struct runner *r, const struct k3_layer_stats *base)
{
    const struct k3_layer_stats *ls = k3_stream_layer_stats(r->stream);
    uint64_t n = 0;
    for (int l = 0; base && l <= r->m.cfg.n_layers; l++)
        n += ls[l].predicted_used - base[l].predicted_used;
    return n;
}

static int generate(const struct run_opts *o, struct k3_err *err)
{
    struct runner r = {.o = o};
    /* before setup, so that Ctrl-C while the model opens still ends with a closed trace
       and the statistics (of no tokens) rather than a killed process */
    signal(SIGINT, on_interrupt);
    int rc = setup(&r, err);
    const struct k3_config *c = &r.m.cfg;
    struct snapshot start = snap(&r), a = start, b;
    for (int done = 0; !rc && !interrupted && done < r.n_prompt; done += K3_CHUNK) {
        int T = r.n_prompt - done < K3_CHUNK ? r.n_prompt - done : K3_CHUNK;
        k3_trace_begin(r.trace, "prompt chunk", NULL);
        rc = k3_forward(&r.ss, r.prompt + done, T, r.logits, r.lf != NULL, err);
        k3_trace_end(r.trace);
        if (!rc && r.lf) {
            rc = write_rows(r.lf, r.logits, T, c->vocab, r.logits_tmp, err);
            /* keep the last row first: the first token is sampled from it */
            memmove(r.logits, r.logits + (size_t)(T - 1) * c->vocab,
                    sizeof(float) * (size_t)c->vocab);
        }
    }
    struct snapshot prompt_end = snap(&r);
    struct k3_layer_stats *layers_at_prompt_end = NULL;
    if (!rc && r.stream) {
        size_t n = (size_t)c->n_layers + 1;
        layers_at_prompt_end = malloc(n * sizeof *layers_at_prompt_end);
        if (layers_at_prompt_end)
            memcpy(layers_at_prompt_end, k3_stream_layer_stats(r.stream), n * sizeof *layers_at_prompt_end);
    }
    if (!rc && o->stats)
        print_step(&r, "prompt", r.n_prompt, &start, &prompt_end);
    struct emitter em = {.tok = r.tok, .ids = o->print_ids, .special = o->special};
    int generated = 0;
    a = prompt_end;
    while (!rc && !interrupted && generated < o->n_predict) {
        int32_t next = k3_sample(&r.sampler, r.logits);
        emit(&em, next);
        generated++;
        if ((next == c->eos_id && !o->ignore_eos) || generated == o->n_predict)
            break;
        if (r.trace) {
            char args[32];
            snprintf(args, sizeof args, "\"token\": %d", generated);
            k3_trace_begin(r.trace, "token", args);
        }
        rc = k3_forward(&r.ss, &next, 1, r.logits, false, err);
        k3_trace_end(r.trace);
        if (!rc && r.lf)
            rc = write_rows(r.lf, r.logits, 1, c->vocab, r.logits_tmp, err);
        b = snap(&r);
        if (!rc && o->stats)
            print_step(&r, "token", generated, &a, &b);
        a = b;
    }
    struct snapshot end = snap(&r);
    if (generated || !rc)
        emit_end(&em);
    if (interrupted && r.lf)
        fprintf(stderr, "k3-uring: interrupted; the logits so far stay in %s\n", r.logits_tmp);
    if (!rc && r.lf && !interrupted) {
        FILE *f = r.lf;
        r.lf = NULL;
        if (fclose(f))
            rc = k3_errf(err, "%s: write failed: %s", r.logits_tmp, strerror(errno));
        else if (rename(r.logits_tmp, o->logits_out))
            rc = k3_errf(err, "--logits-out %s: %s", o->logits_out, strerror(errno));
        if (rc)
            unlink(r.logits_tmp);
    }
    if (!rc && o->dump_layers)
        rc = write_layer_dump(&r.dump, r.ss.pos, o->dump_layers, err);
    if (r.trace) {
        struct k3_trace *t = r.trace;
        r.trace = NULL;
        if (k3_trace_close(t, rc ? NULL : err))
            rc = -1;
    }
    if (!rc && o->stats && layers_at_prompt_end)
        print_layers(&r, layers_at_prompt_end);
    if (!rc && !o->quiet) {
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        double t_gen = end.t - prompt_end.t;
        uint64_t bytes = end.io.bytes - prompt_end.io.bytes;
        int steps = generated > 1 ? generated - 1 : 1;
        uint64_t asked = r.stream ? decode_records(&r, layers_at_prompt_end) : 0;
        uint64_t hits = end.io.records_hit - prompt_end.io.records_hit +
                        (r.stream ? decode_predicted(&r, layers_at_prompt_end) : 0);
        fprintf(stderr,
                "k3-uring: prompt %d tokens in %.3f s; generated %d tokens, %.4f s/token; "
                "%.1f MB read per token (%.2f GB/s), stall %.4f s/token, %.1f%% of records "
                "ready when asked (prefetched or cached); peak RSS %ld MB\n",
                r.n_prompt, prompt_end.t - start.t, generated, generated > 1 ? t_gen / steps : 0.0,
                generated > 1 ? bytes / 1e6 / steps : 0.0, t_gen > 0 ? bytes / t_gen / 1e9 : 0.0,
                generated > 1 ? (end.io.stall_seconds - prompt_end.io.stall_seconds) / steps : 0.0,
                asked ? 100.0 * (double)hits / (double)asked : 0.0, ru.ru_maxrss / 1024);
        struct k3_fault_counts fc;
        if (r.stream && k3_stream_faults(r.stream, &fc)) {
            struct k3_stream_stats st = k3_stream_stats(r.stream);
            fprintf(stderr,
                    "k3-uring: faults injected: %llu eio, %llu short, %llu eagain, %llu delays, "
                    "%llu corrupt, %llu on a lost drive; %llu reads retried, %llu from replicas\n",
                    (unsigned long long)fc.eio, (unsigned long long)fc.shorts,
                    (unsigned long long)fc.eagain, (unsigned long long)fc.delays,
                    (unsigned long long)fc.corrupt, (unsigned long long)fc.lost,
                    (unsigned long long)st.retries, (unsigned long long)st.replica_reads);
        }
        int n_teams = k3numa_teams_count(r.ss.teams);
        if (o->verbose && n_teams > 1) {
            char line[1024];
            int at = snprintf(line, sizeof line, "k3-uring: routed experts computed by");
            for (int i = 0; i < n_teams && at < (int)sizeof line; i++)
                at += snprintf(line + at, sizeof line - (size_t)at, "%s team %d (node %d) %llu",
                               i ? "," : "", i, k3numa_teams_node(r.ss.teams, i),
                               (unsigned long long)k3_session_team_experts(&r.ss, i));
            fprintf(stderr, "%s\n", line);
        }
        if (r.store->stats.nan_scale_groups)
            fprintf(stderr, "k3-uring: %llu MXFP4 groups had the reserved scale 255 (zeroed)\n",
                    (unsigned long long)r.store->stats.nan_scale_groups);
    }
    free(layers_at_prompt_end);
    teardown(&r);
    return rc;
}

int cmd_run(int argc, char **argv)
{
    struct run_opts o = {.n_predict = 16, .top_p = 1.0f, .seed = 1, .prefetch_k = K3_PREFETCH_K_DEFAULT,
                         .prefetch_depth = 2, .predict_text = "on", .predict_from_text = "moe-input-next",
                         .think_text = "on", .numa_text = "auto"};
    const struct k3_opt opts[] = {
        {"model", 'm', K3_OPT_STRING, &o.model, "DIR", "checkpoint folder as shipped", 0, 0},
        {"drives", 'd', K3_OPT_STRING, &o.drives, "D0,D1,..", "packed drive folders, any order (k3-uring pack)", 0, 0},
        {"prompt", 'p', K3_OPT_STRING, &o.prompt, "TEXT", "prompt text (specials are plain text)", 0, 0},
        {"file", 'f', K3_OPT_STRING, &o.prompt_file, "FILE", "prompt text from a file", 0, 0},
        {"ids", 0, K3_OPT_STRING, &o.ids_text, "LIST", "prompt as token ids, e.g. 1,2,3", 0, 0},
        {"chat", 0, K3_OPT_FLAG, &o.chat, NULL, "wrap the prompt in K3's chat markup (a user turn)", 0, 0},
        {"system", 0, K3_OPT_STRING, &o.system, "TEXT", "--chat: a system message first", 0, 0},
        {"think", 0, K3_OPT_STRING, &o.think_text, "on|off", "--chat: open the thinking block", 0, 0},
        {"special", 0, K3_OPT_FLAG, &o.special, NULL, "print special tokens' text too", 0, 0},
        {"n-predict", 'n', K3_OPT_INT, &o.n_predict, "N", "tokens to generate", 0, 1 << 24},
        {"temp", 0, K3_OPT_FLOAT, &o.temp, "T", "sampling temperature; 0 = greedy", 0, 100},
        {"top-k", 0, K3_OPT_INT, &o.top_k, "K", "sample from the K best tokens; 0 = all", 0, 1 << 24},
        {"top-p", 0, K3_OPT_FLOAT, &o.top_p, "P", "nucleus sampling mass", 1e-6, 1},
        {"seed", 's', K3_OPT_U64, &o.seed, "N", "sampling seed", 0, 0},
        {"threads", 't', K3_OPT_INT, &o.threads, "N", "compute threads; 0 = one per core", 0, 4096},
        {"numa", 0, K3_OPT_STRING, &o.numa_text, "auto|off",
         "auto: a pinned team per NUMA node, buffers on the drives' nodes; off: unpinned", 0, 0},
        {"ctx-size", 'c', K3_OPT_INT, &o.ctx, "N", "context positions; 0 = prompt + -n", 0, 1 << 30},
        {"ram", 0, K3_OPT_STRING, &o.ram_text, "SIZE|floor|trunk",
         "RAM budget (packed drives; default trunk: the whole trunk resident)", 0, 0},
        {"io", 0, K3_OPT_STRING, &o.io_text, "auto|uring|pread", "read backend (packed drives; default auto)", 0, 0},
        {"no-cache", 0, K3_OPT_FLAG, &o.no_cache, NULL, "no expert cache in the spare budget", 0, 0},
        {"sync", 0, K3_OPT_FLAG, &o.sync, NULL, "read one record at a time, no overlap (baseline)", 0, 0},
        {"predict", 0, K3_OPT_STRING, &o.predict_text, "on|off",
         "prefetch the next layer's likely experts (packed drives; default on)", 0, 0},
        {"prefetch-k", 0, K3_OPT_INT, &o.prefetch_k, "K", "experts prefetched per layer", 1, 4096},
        {"prefetch-depth", 0, K3_OPT_INT, &o.prefetch_depth, "N",
         "prefetch reads in flight per drive, started only while no demand read waits", 1, 1024},
        {"predict-from", 0, K3_OPT_STRING, &o.predict_from_text, "moe-input|moe-input-next|layer-output",
         "the hidden state the next layer's router is applied to", 0, 0},
        {"trace", 0, K3_OPT_STRING, &o.trace_path, "FILE", "write a Chrome/Perfetto trace of reads and compute", 0, 0},
        {"stats", 0, K3_OPT_FLAG, &o.stats, NULL, "per token: time, bytes read, GB/s, stall, hits", 0, 0},
        {"verbose", 'v', K3_OPT_FLAG, &o.verbose, NULL, "print the read backend and the budget", 0, 0},
        {"logits-out", 0, K3_OPT_STRING, &o.logits_out, "FILE", "write raw f32 logits, one row per predicted position", 0, 0},
        {"dump-layers", 0, K3_OPT_STRING, &o.dump_layers, "FILE", "write per-layer hidden-state summaries (JSON)", 0, 0},
        {"print-ids", 0, K3_OPT_FLAG, &o.print_ids, NULL, "print generated token ids instead of text", 0, 0},
        {"ignore-eos", 0, K3_OPT_FLAG, &o.ignore_eos, NULL, "do not stop at the end-of-message token", 0, 0},
        {"quiet", 'q', K3_OPT_FLAG, &o.quiet, NULL, "no statistics on stderr", 0, 0},
    };
    const char *usage =
        "usage: k3-uring [run] (-m DIR | --drives D0,D1,..) (-p TEXT | -f FILE | --ids LIST) "
        "[-n N] [options]\n\n"
        "Generates from a prompt: text streams to stdout as it decodes, statistics to stderr.\n"
        "-m DIR reads a checkpoint folder as shipped; --drives reads a pack (k3-uring pack).\n"
        "Stops after -n tokens or at <|end_of_msg|>; Ctrl-C stops early with the statistics.\n"
        "Exit codes: 0 done, 1 a runtime error (files, prompt, I/O), 2 a command-line error,\n"
        "130 interrupted.";
    struct k3_err err = {{0}};
    int rc = k3_opts_parse(opts, (int)(sizeof opts / sizeof opts[0]), argc, argv, usage, &err);
    if (rc > 0)
        return 0;
    if (!rc && !!o.model == !!o.drives)
        rc = k3_errf(&err, "give the model as exactly one of -m DIR or --drives D0,D1,...");
    if (!rc && !!o.prompt + !!o.ids_text + !!o.prompt_file != 1)
        rc = k3_errf(&err, "give the prompt as exactly one of -p TEXT, -f FILE or --ids LIST");
    if (!rc && o.chat && o.ids_text)
        rc = k3_errf(&err, "--chat wraps text: give the prompt with -p or -f, not --ids");
    if (!rc && (o.system || strcmp(o.think_text, "on")) && !o.chat)
        rc = k3_errf(&err, "--system and --think go with --chat");
    if (!rc && strcmp(o.think_text, "on") && strcmp(o.think_text, "off"))
        rc = k3_errf(&err, "--think: \"%s\" is not on or off", o.think_text);
    if (!rc && o.ids_text)
        rc = k3_parse_id_list("--ids", o.ids_text, &o.ids, &o.n_ids, &err);
    if (!rc && o.model && (o.ram_text || o.io_text || o.no_cache || o.sync))
        rc = k3_errf(&err, "--ram, --io, --no-cache and --sync need --drives (a packed model); "
                           "-m DIR loads the checkpoint whole");
    if (!rc && (!o.ram_text || !strcmp(o.ram_text, "trunk")))
        o.ram = K3_RAM_TRUNK;
    else if (!rc && !strcmp(o.ram_text, "floor"))
        o.ram = K3_RAM_FLOOR;
    else if (!rc && (k3_parse_size(o.ram_text, &o.ram) || o.ram == 0))
        rc = k3_errf(&err, "--ram: \"%s\" is not a size (e.g. 8G), floor or trunk", o.ram_text);
    if (!rc && strcmp(o.numa_text, "auto") && strcmp(o.numa_text, "off"))
        rc = k3_errf(&err, "--numa: \"%s\" is not auto or off", o.numa_text);
    if (!rc && strcmp(o.predict_text, "on") && strcmp(o.predict_text, "off"))
        rc = k3_errf(&err, "--predict: \"%s\" is not on or off", o.predict_text);
    if (!rc && !strcmp(o.predict_text, "off"))
        o.predict = K3_PREDICT_OFF;
    else if (!rc && !strcmp(o.predict_from_text, "moe-input"))
        o.predict = K3_PREDICT_MOE_INPUT;
    else if (!rc && !strcmp(o.predict_from_text, "moe-input-next"))
        o.predict = K3_PREDICT_MOE_INPUT_NEXT;
    else if (!rc && !strcmp(o.predict_from_text, "layer-output"))
        o.predict = K3_PREDICT_LAYER_OUTPUT;
    else if (!rc)
        rc = k3_errf(&err, "--predict-from: \"%s\" is not moe-input, moe-input-next or "
                           "layer-output", o.predict_from_text);
    if (!rc && (!o.io_text || !strcmp(o.io_text, "auto")))
        o.io = K3IO_AUTO;
    else if (!rc && !strcmp(o.io_text, "uring"))
        o.io = K3IO_URING;
    else if (!rc && !strcmp(o.io_text, "pread"))
        o.io = K3IO_PREAD;
    else if (!rc)
        rc = k3_errf(&err, "--io: \"%s\" is not auto, uring or pread", o.io_text);
    if (rc) {
        free(o.ids);
        fprintf(stderr, "k3-uring: %s\n", err.msg);
        return 2;
    }
    rc = generate(&o, &err);
    free(o.ids);
    if (!rc && interrupted)
        return 130;
    if (rc) {
        fflush(stdout);
        fprintf(stderr, "k3-uring: %s\n", err.msg);
        return 1;
    }
    return 0;
}
