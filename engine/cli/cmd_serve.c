/* `k3-uring serve`: an OpenAI-compatible HTTP server over one model.  The model opens as
 * for `run`; the scheduler's decode loop runs on this (the main) thread, which owns the
 * compute threads; HTTP handlers run on libmicrohttpd's threads and hand requests over.
 * SIGINT/SIGTERM: no new requests, the running ones end at the next step with their
 * streams closed cleanly, exit 0. */
#include <libgen.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/cli/cli.h"
#include "engine/cli/options.h"
#include "engine/runtime/runtime.h"
#include "engine/serve/http.h"
#include "engine/serve/sched.h"

#define STOP_GRACE_MS 5000 /* for the last chunks to reach their clients */

struct serve_opts {
    const char *model, *drives, *alias, *host, *api_key;
    const char *ram_text, *io_text, *predict_text, *predict_from_text, *numa_text;
    int port, parallel, ctx, n_predict, timeout, queue, prefill_chunk, threads;
    int prefetch_k, prefetch_depth;
    uint64_t max_body, ram;
    enum k3io_backend io;
    enum k3_predict_from predict;
    bool no_cache, sync, quiet, verbose;
};

static volatile sig_atomic_t stop_requested;

static void on_stop(int sig)
{
    stop_requested = 1;
    signal(sig, SIG_DFL); /* a second signal ends the process at once */
}

static void log_request(void *ctx, const char *line)
{
    (void)ctx;
    fprintf(stderr, "k3-uring: %s\n", line);
}

/* The name clients give as "model": --alias, or the model's folder name. */
static const char *model_name(const struct serve_opts *o, char *buf, size_t len)
{
    if (o->alias)
        return o->alias;
    snprintf(buf, len, "%s", o->model ? o->model : o->drives);
    buf[strcspn(buf, ",")] = 0;
    size_t n = strlen(buf);
    while (n > 1 && buf[n - 1] == '/')
        buf[--n] = 0;
    return basename(buf);
}

static void print_notes(const struct k3_runtime *rt, bool verbose)
{
    for (const char *at = rt->notes; *at;) {
        size_t len = strcspn(at, "\n");
        fprintf(stderr, "k3-uring: note: %.*s\n", (int)len, at);
        at += len + (at[len] == '\n');
    }
    if (verbose && rt->stream) {
        const struct k3_budget_input *in;
        const struct k3_budget *b = k3_stream_budget(rt->stream, &in);
        fprintf(stderr, "k3-uring: reads through %s; ", k3_stream_backend(rt->stream));
        k3_budget_print(stderr, b, in);
        k3_placement_print(stderr, &rt->place, b->expert_inflight + b->cache_bytes);
    }
}

static int moe_layers(const struct k3_model *m)
{
    int n = 0;
    for (int l = 0; l < m->cfg.n_layers; l++)
        n += m->moe_index[l] >= 0;
    return n;
}

/* Listens until stopped, then closes down in reverse. */
static int serve(const struct serve_opts *o, struct k3_err *err)
{
    struct k3_runtime rt;
    struct k3_runtime_opts ro = {
        .model_dir = o->model, .drives = o->drives, .threads = o->threads,
        .numa_off = !strcmp(o->numa_text, "off"), .ram = o->ram, .io = o->io,
        .no_cache = o->no_cache, .sync = o->sync, .prefetch_k = o->prefetch_k,
        .prefetch_depth = o->prefetch_depth, .predict = o->predict,
    };
    if (k3_runtime_open(&rt, &ro, err)) {
        k3_runtime_close(&rt, NULL);
        return -1;
    }
    int max_pos = rt.m.cfg.max_positions, ctx = o->ctx ? o->ctx : (max_pos < 4096 ? max_pos : 4096);
    const struct k3_tokenizer *tok = NULL;
    struct k3_sched *sched = NULL;
    struct k3_http *http = NULL;
    int rc = ctx > max_pos ? k3_errf(err, "--ctx-size %d exceeds the model's "
                                          "max_position_embeddings %d", ctx, max_pos) : 0;
    /* The budget counts one sequence's state; the scheduler keeps --parallel of them
     * beside it (the budget's rework in stream/ is to count them all). */
    if (!rc)
        rc = k3_runtime_start(&rt, ctx, K3_CHUNK, err) || k3_runtime_tokenizer(&rt, &tok, err);
    struct k3_sched_opts so = {.parallel = o->parallel, .ctx = ctx, .prefill_chunk = o->prefill_chunk,
                               .queue_max = o->queue, .stop_signal = &stop_requested};
    if (!rc)
        rc = k3_sched_create(&sched, &rt, &so, err);
    char name_buf[4096];
    struct k3_http_opts ho = {
        .host = o->host, .port = o->port, .api_key = o->api_key, .timeout = o->timeout,
        .max_body = o->max_body, .max_connections = o->parallel + o->queue + 64,
        .model = {.id = model_name(o, name_buf, sizeof name_buf), .tok = tok,
                  .vocab = rt.m.cfg.vocab, .ctx = ctx, .default_max_tokens = o->n_predict},
        .moe_layers = rc ? 0 : moe_layers(&rt.m),
        .log = o->quiet ? NULL : log_request,
    };
    if (!rc) {
        print_notes(&rt, o->verbose);
        rc = k3_http_start(&http, &ho, sched, err);
    }
    if (!rc) {
        bool v6 = strchr(o->host, ':') != NULL;
        fprintf(stderr, "k3-uring: listening on http://%s%s%s:%d (model %s, parallel %d, ctx %d)\n",
                v6 ? "[" : "", o->host, v6 ? "]" : "", k3_http_port(http), ho.model.id,
                o->parallel, ctx);
        k3_sched_run(sched);
        k3_http_stop(http, STOP_GRACE_MS);
    }
    k3_sched_destroy(sched);
    if (k3_runtime_close(&rt, rc ? NULL : err))
        rc = -1;
    return rc;
}

/* Values the table cannot check alone; -1 with err on the first bad one. */
static int check_options(struct serve_opts *o, struct k3_err *err)
{
    if (!!o->model == !!o->drives)
        return k3_errf(err, "give the model as exactly one of -m DIR or --drives D0,D1,...");
    if (o->model && (o->ram_text || o->io_text || o->no_cache || o->sync))
        return k3_errf(err, "--ram, --io, --no-cache and --sync need --drives (a packed model); "
                            "-m DIR loads the checkpoint whole");
    if (o->ctx == 1)
        return k3_errf(err, "--ctx-size 1: a sequence needs room for a prompt and a token");
    if (o->api_key && !*o->api_key)
        return k3_errf(err, "--api-key: empty");
    if (!o->ram_text || !strcmp(o->ram_text, "trunk"))
        o->ram = K3_RAM_TRUNK;
    else if (!strcmp(o->ram_text, "floor"))
        o->ram = K3_RAM_FLOOR;
    else if (k3_parse_size(o->ram_text, &o->ram) || o->ram == 0)
        return k3_errf(err, "--ram: \"%s\" is not a size (e.g. 8G), floor or trunk", o->ram_text);
    if (strcmp(o->numa_text, "auto") && strcmp(o->numa_text, "off"))
        return k3_errf(err, "--numa: \"%s\" is not auto or off", o->numa_text);
    if (strcmp(o->predict_text, "on") && strcmp(o->predict_text, "off"))
        return k3_errf(err, "--predict: \"%s\" is not on or off", o->predict_text);
    if (!strcmp(o->predict_text, "off"))
        o->predict = K3_PREDICT_OFF;
    else if (!strcmp(o->predict_from_text, "moe-input"))
        o->predict = K3_PREDICT_MOE_INPUT;
    else if (!strcmp(o->predict_from_text, "moe-input-next"))
        o->predict = K3_PREDICT_MOE_INPUT_NEXT;
    else if (!strcmp(o->predict_from_text, "layer-output"))
        o->predict = K3_PREDICT_LAYER_OUTPUT;
    else
        return k3_errf(err, "--predict-from: \"%s\" is not moe-input, moe-input-next or "
                            "layer-output", o->predict_from_text);
    if (!o->io_text || !strcmp(o->io_text, "auto"))
        o->io = K3IO_AUTO;
    else if (!strcmp(o->io_text, "uring"))
        o->io = K3IO_URING;
    else if (!strcmp(o->io_text, "pread"))
        o->io = K3IO_PREAD;
    else
        return k3_errf(err, "--io: \"%s\" is not auto, uring or pread", o->io_text);
    return 0;
}

int cmd_serve(int argc, char **argv)
{
    struct serve_opts o = {.host = "127.0.0.1", .port = 8080, .parallel = 4, .timeout = 600,
                           .queue = 64, .prefill_chunk = 16, .max_body = 1 << 20,
                           .prefetch_k = 24, .prefetch_depth = 2, .predict_text = "on",
                           .predict_from_text = "moe-input-next", .numa_text = "auto"};
    const struct k3_opt opts[] = {
        {"model", 'm', K3_OPT_STRING, &o.model, "DIR", "checkpoint folder as shipped", 0, 0},
        {"drives", 'd', K3_OPT_STRING, &o.drives, "D0,D1,..", "packed drive folders, any order (k3-uring pack)", 0, 0},
        {"alias", 'a', K3_OPT_STRING, &o.alias, "NAME", "the model's name in the API (default: its folder's name)", 0, 0},
        {"host", 0, K3_OPT_STRING, &o.host, "ADDR", "address to listen on", 0, 0},
        {"port", 0, K3_OPT_INT, &o.port, "N", "port to listen on; 0 = any free one", 0, 65535},
        {"parallel", 'P', K3_OPT_INT, &o.parallel, "N", "sequences decoding at once", 1, K3_CHUNK},
        {"ctx-size", 'c', K3_OPT_INT, &o.ctx, "N", "positions each sequence holds; 0 = 4096 or the model's maximum", 0, 1 << 30},
        {"n-predict", 'n', K3_OPT_INT, &o.n_predict, "N", "tokens a request generates when it sets no max_tokens; 0 = until the context is full", 0, 1 << 30},
        {"api-key", 0, K3_OPT_STRING, &o.api_key, "KEY", "require Authorization: Bearer KEY", 0, 0},
        {"timeout", 0, K3_OPT_INT, &o.timeout, "SECONDS", "close a connection idle this long; 0 = never", 0, 1 << 30},
        {"queue", 0, K3_OPT_INT, &o.queue, "N", "requests waiting for a sequence; beyond, 503", 1, 1 << 20},
        {"prefill-chunk", 0, K3_OPT_INT, &o.prefill_chunk, "N", "prompt tokens one step reads, at most", 1, K3_CHUNK},
        {"max-body", 0, K3_OPT_SIZE, &o.max_body, "BYTES", "largest request body; beyond, 413", 0, 0},
        {"threads", 't', K3_OPT_INT, &o.threads, "N", "compute threads; 0 = one per core", 0, 4096},
        {"numa", 0, K3_OPT_STRING, &o.numa_text, "auto|off",
         "auto: a pinned team per NUMA node, buffers on the drives' nodes; off: unpinned", 0, 0},
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
        {"verbose", 'v', K3_OPT_FLAG, &o.verbose, NULL, "print the read backend and the budget", 0, 0},
        {"quiet", 'q', K3_OPT_FLAG, &o.quiet, NULL, "no line per request on stderr", 0, 0},
    };
    const char *usage =
        "usage: k3-uring serve (-m DIR | --drives D0,D1,..) [--host ADDR] [--port N] "
        "[--parallel N] [options]\n\n"
        "Serves the model over HTTP with the OpenAI API: POST /v1/chat/completions and\n"
        "/v1/completions (streaming with \"stream\": true), GET /v1/models, /health, /metrics.\n"
        "Up to --parallel requests decode together, reading each layer's experts once for all;\n"
        "more wait in a queue of --queue.  SIGINT/SIGTERM: running requests end at the next\n"
        "step (finish \"length\"), then exit 0.\n"
        "Exit codes: 0 stopped, 1 a runtime error (files, listening), 2 a command-line error.";
    struct k3_err err = {{0}};
    int rc = k3_opts_parse(opts, (int)(sizeof opts / sizeof opts[0]), argc, argv, usage, &err);
    if (rc > 0)
        return 0;
    if (rc || check_options(&o, &err)) {
        fprintf(stderr, "k3-uring: %s\n", err.msg);
        return 2;
    }
    signal(SIGINT, on_stop);
    signal(SIGTERM, on_stop);
    signal(SIGPIPE, SIG_IGN);
    if (serve(&o, &err)) {
        fprintf(stderr, "k3-uring: %s\n", err.msg);
        return 1;
    }
    return 0;
}
