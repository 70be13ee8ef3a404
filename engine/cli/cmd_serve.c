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
#include "engine/base/options.h"
#include "engine/cli/model_args.h"
#include "engine/runtime/runtime.h"
#include "engine/serve/http.h"
#include "engine/serve/sched.h"

#define STOP_GRACE_MS 5000 /* for the last chunks to reach their clients */

struct serve_opts {
    struct model_args model; /* the model and its read path */
    const char *alias, *host, *api_key;
    int port, parallel, ctx, n_predict, timeout, queue, prefill_chunk;
    int read_timeout, max_connections, max_per_address;
    uint64_t max_body;
    uint64_t cache_ram;      /* CACHE_RAM_PER_SLOT: a state of ctx positions per --parallel */
    bool quiet, verbose;
};

#define CACHE_RAM_PER_SLOT UINT64_MAX

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
    const struct k3_runtime_opts *ro = &o->model.runtime;
    snprintf(buf, len, "%s", ro->model_dir ? ro->model_dir : ro->drives);
    buf[strcspn(buf, ",")] = 0;
    size_t n = strlen(buf);
    while (n > 1 && buf[n - 1] == '/')
        buf[--n] = 0;
    return basename(buf);
}

/* Listens until stopped, then closes down in reverse. */
static int serve(const struct serve_opts *o, struct k3_err *err)
{
    struct k3_runtime *rt;
    if (k3_runtime_open(&rt, &o->model.runtime, err)) {
        k3_runtime_agree(rt, true, err);
        k3_runtime_close(rt, NULL);
        return -1;
    }
    const struct k3_config *cfg = k3_runtime_config(rt);
    int max_pos = cfg->max_positions, ctx = o->ctx ? o->ctx : (max_pos < 4096 ? max_pos : 4096);
    const struct k3_tokenizer *tok = NULL;
    struct k3_sched *sched = NULL;
    struct k3_http *http = NULL;
    int rc = ctx > max_pos ? k3_errf(err, "--ctx-size %d exceeds the model's "
                                          "max_position_embeddings %d", ctx, max_pos) : 0;
    /* The budget counts --parallel sequences' state, the scheduler's logits, samplers and
     * rows adjusted by a request's logit_bias and penalties, and the prompt store. */
    uint64_t cache_ram = o->cache_ram == CACHE_RAM_PER_SLOT
                             ? (uint64_t)o->parallel * k3_prompt_store_entry_bytes(cfg, ctx)
                             : o->cache_ram;
    struct k3_caller_bytes caller = k3_runtime_caller_bytes(cfg->vocab, o->parallel, false);
    caller.fixed += cache_ram + k3_sched_adjust_bytes(cfg->vocab, o->parallel);
    int rows = k3_sched_rows(o->model.runtime.batch, o->parallel);
    if (!rc)
        rc = k3_runtime_start(rt, ctx, o->parallel, rows, caller, NULL, err) ||
             k3_runtime_tokenizer(rt, &tok, err);
    /* Under mpirun only the leader listens and schedules; the others run its steps. */
    rc = k3_runtime_agree(rt, rc != 0, err);
    if (!rc && !model_args_leader(&o->model))
        k3_runtime_follow(rt);
    if (!model_args_leader(&o->model))
        return k3_runtime_close(rt, rc ? NULL : err) || rc ? -1 : 0;
    struct k3_sched_opts so = {.parallel = o->parallel, .ctx = ctx, .prefill_chunk = o->prefill_chunk,
                               .queue_max = o->queue, .cache_ram = cache_ram,
                               .stop_signal = &stop_requested};
    if (!rc)
        rc = k3_sched_create(&sched, rt, &so, err);
    char name_buf[4096];
    struct k3_http_opts ho = {
        .host = o->host, .port = o->port, .api_key = o->api_key, .timeout = o->timeout,
        .read_timeout = o->read_timeout, .max_body = o->max_body,
        .max_connections = o->max_connections, .max_per_address = o->max_per_address,
        .model = {.id = model_name(o, name_buf, sizeof name_buf), .tok = tok,
                  .vocab = cfg->vocab, .ctx = ctx, .default_max_tokens = o->n_predict},
        .n_layers = cfg->n_layers,
        .log = o->quiet ? NULL : log_request,
    };
    if (!rc) {
        model_args_print_opened(rt, o->verbose);
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
    if (k3_runtime_close(rt, rc ? NULL : err))
        rc = -1;
    return rc;
}

/* Values the table cannot check alone; -1 with err on the first bad one. */
static int check_options(struct serve_opts *o, struct k3_err *err)
{
    if (model_args_check(&o->model, err))
        return -1;
    if (o->ctx == 1)
        return k3_errf(err, "--ctx-size 1: a sequence needs room for a prompt and a token");
    if (o->api_key && !*o->api_key)
        return k3_errf(err, "--api-key: empty");
    return 0;
}

int cmd_serve(int argc, char **argv)
{
    /* The connection defaults are a public server's (nginx: 60 s for a request's headers,
     * a bounded table that closes idle keep-alive connections first). */
    struct serve_opts o = {.host = "127.0.0.1", .port = 8080, .parallel = 4, .timeout = 600,
                           .read_timeout = 30, .max_connections = 256, .max_per_address = 64,
                           .queue = 64, .prefill_chunk = 16, .max_body = 1 << 20,
                           .cache_ram = CACHE_RAM_PER_SLOT};
    model_args_init(&o.model);
    const struct k3_opt own[] = {
        {.name = "alias", .short_name = 'a', .type = K3_OPT_STRING, .dst = &o.alias, .arg = "NAME",
         .help = "the model's name in the API", .def = "its folder's name"},
        {.name = "host", .type = K3_OPT_STRING, .dst = &o.host, .arg = "ADDR",
         .help = "address to listen on"},
        {.name = "port", .type = K3_OPT_INT, .dst = &o.port, .arg = "N",
         .help = "port to listen on; 0 = any free one", .min = 0, .max = 65535},
        {.name = "parallel", .short_name = 'P', .type = K3_OPT_INT, .dst = &o.parallel, .arg = "N",
         .help = "sequences decoding at once", .min = 1, .max = K3_CHUNK},
        {.name = "ctx-size", .short_name = 'c', .type = K3_OPT_INT, .dst = &o.ctx, .arg = "N",
         .help = "positions each sequence holds; 0 = 4096 or the model's maximum", .min = 0,
         .max = 1 << 30},
        {.name = "n-predict", .short_name = 'n', .type = K3_OPT_INT, .dst = &o.n_predict, .arg = "N",
         .help = "tokens a request generates when it sets no max_tokens; 0 = until the context "
                 "is full", .min = 0, .max = 1 << 30},
        {.name = "api-key", .type = K3_OPT_STRING, .dst = &o.api_key, .arg = "KEY",
         .help = "require Authorization: Bearer KEY"},
        {.name = "timeout", .type = K3_OPT_INT, .dst = &o.timeout, .arg = "SECONDS",
         .help = "close a connection idle this long (between requests, or a client not "
                 "reading its answer); 0 = never", .min = 0, .max = 1 << 30},
        {.name = "read-timeout", .type = K3_OPT_INT, .dst = &o.read_timeout, .arg = "SECONDS",
         .help = "a request's headers and body must arrive within this long of its "
                 "connection (or, kept alive, of its request line), else it is closed; "
                 "0 = no limit", .min = 0, .max = 1 << 30},
        {.name = "max-connections", .type = K3_OPT_INT, .dst = &o.max_connections, .arg = "N",
         .help = "connections held at once; past it idle kept-alive ones are closed first, "
                 "then new clients answered 503 with Retry-After (N/4+16 more are held for "
                 "that, past them new ones are closed)", .min = 1, .max = 1 << 16},
        {.name = "max-per-address", .type = K3_OPT_INT, .dst = &o.max_per_address, .arg = "N",
         .help = "connections from one client address; past it new ones are closed at once; "
                 "0 = no limit", .min = 0, .max = 1 << 16},
        {.name = "queue", .type = K3_OPT_INT, .dst = &o.queue, .arg = "N",
         .help = "requests waiting for a sequence; beyond, 503", .min = 1, .max = 1 << 20},
        {.name = "prefill-chunk", .type = K3_OPT_INT, .dst = &o.prefill_chunk, .arg = "N",
         .help = "prompt tokens a step takes while other requests decode (a whole pass of "
                 "-b rows when none does)", .min = 1, .max = 1 << 20},
        {.name = "cache-ram", .type = K3_OPT_SIZE, .dst = &o.cache_ram, .arg = "SIZE",
         .help = "prompt states kept for requests that extend them (llama-server's cache_prompt; "
                 "a request's \"cache_prompt\": false opts out), inside --ram; 0: none",
         .def = "--parallel states of --ctx-size"},
        {.name = "max-body", .type = K3_OPT_SIZE, .dst = &o.max_body, .arg = "BYTES",
         .help = "largest request body; beyond, 413", .min = 1},
        {.name = "verbose", .short_name = 'v', .type = K3_OPT_FLAG, .dst = &o.verbose,
         .help = "print the read backend and the budget"},
        {.name = "quiet", .short_name = 'q', .type = K3_OPT_FLAG, .dst = &o.quiet,
         .help = "no line per request on stderr"},
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
    int rc = model_args_parse(&o.model, own, K3_OPTS_COUNT(own), argc, argv, usage, &err);
    if (rc > 0)
        return 0;
    if (rc || check_options(&o, &err)) {
        model_args_print_error(&o.model, &err);
        return model_args_exit(&o.model, 2);
    }
    signal(SIGINT, on_stop);
    signal(SIGTERM, on_stop);
    signal(SIGPIPE, SIG_IGN);
    rc = serve(&o, &err);
    if (rc)
        model_args_print_error(&o.model, &err);
    return model_args_exit(&o.model, rc ? 1 : 0);
}
