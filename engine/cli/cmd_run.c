/* `k3-uring run`: a prompt through the model, then generation.  The interface tests
 * and tools rely on: generated text (or ids with --print-ids) on stdout, statistics on
 * stderr, and with --logits-out the raw little-endian f32 logits, one row of vocab_size
 * values per position whose next token was predicted (every prompt position, then every
 * generated token but the last; with a state from --prompt-cache, the prompt's rows start
 * at the last position the cache held). */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/cli/cli.h"
#include "engine/base/options.h"
#include "engine/cli/run.h"
#include "engine/text/chat.h"

/* Ctrl-C: generation stops after the token in progress and the statistics so far are
 * printed; a second Ctrl-C kills as usual. */
static volatile sig_atomic_t interrupted;

static void on_interrupt(int sig)
{
    interrupted = 1;
    signal(sig, SIG_DFL);
}

static int encode_prompt(struct runner *r, const struct k3_tokenizer *tok, struct k3_err *err)
{
    const struct run_opts *o = r->o;
    char *file_text = NULL;
    size_t len = 0, n = 0;
    if (o->prompt_file && k3_read_small_file(o->prompt_file, &file_text, &len, err))
        return k3_err_prefix(err, "--file");
    const char *text = file_text ? file_text : o->prompt;
    int rc = o->chat ? k3_chat_prompt(tok, o->system, text, o->think,
                                      &r->prompt, &n, err)
                     : k3_tok_encode(tok, text, strlen(text), false, &r->prompt, &n, err);
    free(file_text);
    if (rc)
        return o->prompt_file ? k3_err_prefix(err, "-f %s", o->prompt_file) : k3_err_prefix(err, "-p");
    r->n_prompt = (int)n;
    return 0;
}

/* The prompt's ids, and the context that holds it and -n more. */
static int prepare_prompt(struct runner *r, struct k3_err *err)
{
    const struct run_opts *o = r->o;
    if ((!o->ids || !o->print_ids) && k3_runtime_tokenizer(r->rt, &r->tok, err))
        return -1;
    if (o->ids) {
        r->prompt = o->ids;
        r->n_prompt = o->n_ids;
    } else if (encode_prompt(r, r->tok, err)) {
        return -1;
    }
    if (r->n_prompt == 0)
        return k3_errf(err, "the prompt is empty");
    r->ctx = o->ctx ? o->ctx : r->n_prompt + o->n_predict;
    if (r->ctx < r->n_prompt + o->n_predict)
        return k3_errf(err, "--ctx-size %d holds fewer than the prompt (%d tokens) + -n %d", r->ctx,
                       r->n_prompt, o->n_predict);
    int max_pos = k3_runtime_config(r->rt)->max_positions;
    if (r->ctx > max_pos)
        return k3_errf(err, "context %d exceeds max_position_embeddings %d", r->ctx, max_pos);
    return 0;
}

/* --routes: the sequence walks requests A..B of the trace as one stream of positions,
 * which must hold every position the run computes. */
static int replay_routes(struct runner *r, struct k3_runtime_hooks *hooks, struct k3_err *err)
{
    const struct run_opts *o = r->o;
    r->routes = o->routes;
    if (!o->routes.path)
        return 0;
    if (routes_args_load(&r->routes, k3_runtime_config(r->rt), err))
        return -1;
    int64_t need = r->n_prompt + (o->n_predict > 0 ? o->n_predict - 1 : 0);
    int64_t have = k3_routes_tokens(&r->routes.trace);
    if (need > have)
        return k3_errf(err, "--routes: the run computes %lld positions; the trace's requests "
                            "%d-%d hold %lld tokens", (long long)need, r->routes.trace.first,
                       r->routes.trace.first + r->routes.trace.n_requests - 1, (long long)have);
    if (k3_routes_bind(&r->routes.player, &r->seq, 0, err))
        return -1;
    hooks->routes = &r->routes.player.source;
    if (!o->quiet)
        routes_args_say(&r->routes, stderr, "k3-uring");
    return 0;
}

/* --dump-layers: each layer's hidden state summarized into r->dump. */
static int dump_layers(struct runner *r, struct k3_runtime_hooks *hooks, struct k3_err *err)
{
    if (!r->o->dump_layers)
        return 0;
    int layers = k3_runtime_config(r->rt)->n_layers;
    r->dump = (struct layer_dump){.layers = layers, .positions = r->ctx};
    r->dump.stats = calloc((size_t)r->ctx * (layers + 1) * 3, sizeof(float));
    if (!r->dump.stats)
        return k3_errf(err, "out of memory for --dump-layers");
    hooks->on_layer = run_dump_hook;
    hooks->on_layer_ctx = &r->dump;
    return 0;
}

/* Under mpirun every rank opens the model and plans the same context; only the leader
 * writes files, samples, hooks into the forward pass and prints. */
static int setup(struct runner *r, struct k3_err *err)
{
    const struct run_opts *o = r->o;
    bool leader = model_args_leader(&o->model);
    /* Opened first, so a bad path fails before a model loads. */
    if (leader && ((o->logits_out && run_logits_open(&r->lf, o->logits_out, err)) ||
                   run_cache_begin(r, err)))
        return -1;
    struct k3_runtime_opts ro = o->model.runtime;
    ro.trace_path = o->trace_path;
    if (k3_runtime_open(&r->rt, &ro, err) || prepare_prompt(r, err))
        return -1;
    const struct k3_config *c = k3_runtime_config(r->rt);
    struct k3_runtime_hooks hooks = {0};
    if (leader && (k3_seq_init(&r->seq, c, r->ctx, err) ||
                   k3_sampler_init(&r->sampler, c->vocab, o->temp, o->top_k, o->top_p, o->seed,
                                   err) ||
                   replay_routes(r, &hooks, err) || dump_layers(r, &hooks, err)))
        return -1;
    if (k3_runtime_start(r->rt, r->ctx, 1, o->model.runtime.batch,
                         k3_runtime_caller_bytes(c->vocab, 1, o->logits_out), &hooks, err))
        return -1;
    if (!leader)
        return 0;
    model_args_print_opened(r->rt, o->verbose);
    size_t rows = o->logits_out ? (size_t)k3_runtime_rows(r->rt) : 1;
    if (!(r->logits = malloc(sizeof(float) * rows * (size_t)c->vocab)))
        return k3_errf(err, "out of memory for logits");
    return 0;
}

/* The runtime closes last but for the prompt, so that its trace is complete when the
 * statistics print; a trace that cannot be finished fails the run. */
static int teardown(struct runner *r, int rc, struct k3_err *err)
{
    run_logits_close(&r->lf, interrupted);
    run_cache_end(r);
    routes_args_free(&r->routes);
    free(r->dump.stats);
    free(r->logits);
    free(r->layers_at_prompt_end);
    k3_sampler_free(&r->sampler);
    k3_seq_free(&r->seq);
    if (k3_runtime_close(r->rt, rc ? NULL : err))
        rc = -1;
    if (r->prompt != r->o->ids)
        free(r->prompt);
    return rc;
}

/* The prompt in passes of the context's rows; logits of every position when they go to
 * a file, of the last otherwise (kept first in r->logits: the first token is sampled
 * from it). */
static int prefill(struct runner *r, struct k3_err *err)
{
    int V = k3_runtime_config(r->rt)->vocab, P = k3_runtime_rows(r->rt);
    struct k3_trace *trace = k3_runtime_trace(r->rt);
    bool all = r->lf.f != NULL;
    for (int done = r->n_cached; !interrupted && done < r->n_prompt; done += P) {
        int T = r->n_prompt - done < P ? r->n_prompt - done : P;
        k3_trace_begin(trace, "prompt pass", NULL);
        int rc = k3_runtime_tokens(r->rt, &r->seq, r->prompt + done, T, r->logits, all, err);
        k3_trace_end(trace);
        if (rc || run_logits_write(&r->lf, r->logits, all ? T : 0, V, err))
            return -1;
        if (all)
            memmove(r->logits, r->logits + (size_t)(T - 1) * V, sizeof(float) * (size_t)V);
    }
    return 0;
}

/* Samples, emits and feeds back tokens until -n, end of message or Ctrl-C. */
static int decode(struct runner *r, struct emitter *em, int *generated, struct k3_err *err)
{
    const struct run_opts *o = r->o;
    const struct k3_config *c = k3_runtime_config(r->rt);
    struct k3_trace *trace = k3_runtime_trace(r->rt);
    struct k3_runtime_snapshot a = k3_runtime_snap(r->rt), b;
    while (!interrupted && *generated < o->n_predict) {
        int32_t next = k3_sample(&r->sampler, r->logits);
        run_emit(em, next);
        ++*generated;
        if ((next == c->eos_id && !o->ignore_eos) || *generated == o->n_predict)
            break;
        char args[32];
        snprintf(args, sizeof args, "\"token\": %d", *generated);
        k3_trace_begin(trace, "token", args);
        int rc = k3_runtime_tokens(r->rt, &r->seq, &next, 1, r->logits, false, err);
        k3_trace_end(trace);
        if (rc || run_logits_write(&r->lf, r->logits, 1, c->vocab, err))
            return -1;
        b = k3_runtime_snap(r->rt);
        if (o->stats)
            run_print_step(r, "token", *generated, &a, &b);
        a = b;
    }
    return 0;
}

/* The per-layer counters when the prompt is done: --stats and the summary report decode
 * alone. */
static void mark_prompt_end(struct runner *r)
{
    const struct k3_stream *stream = k3_runtime_stream(r->rt);
    if (!stream)
        return;
    size_t n = (size_t)k3_runtime_config(r->rt)->n_layers + 1;
    if ((r->layers_at_prompt_end = malloc(n * sizeof *r->layers_at_prompt_end)))
        memcpy(r->layers_at_prompt_end, k3_stream_layer_stats(stream),
               n * sizeof *r->layers_at_prompt_end);
}

/* The logits file and the layer dump complete, then the statistics. */
static int finish(struct runner *r, int generated, const struct k3_runtime_snapshot *start,
                  const struct k3_runtime_snapshot *prompt_end, struct k3_err *err)
{
    const struct run_opts *o = r->o;
    struct k3_runtime_snapshot end = k3_runtime_snap(r->rt);
    if (interrupted && r->lf.f)
        fprintf(stderr, "k3-uring: interrupted; the logits so far stay in %s\n", r->lf.tmp);
    if (r->lf.f && !interrupted && run_logits_commit(&r->lf, err))
        return -1;
    if (o->dump_layers && run_dump_write(&r->dump, r->seq.pos, o->dump_layers, err))
        return -1;
    if (o->stats && r->layers_at_prompt_end)
        run_print_layers(r);
    if (o->stats && k3_runtime_stream(r->rt))
        fprintf(stderr, "k3-uring: %s\n", k3_stream_budget(k3_runtime_stream(r->rt), NULL)->origin);
    if (!o->quiet)
        run_print_summary(r, generated, start, prompt_end, &end);
    return 0;
}

static int generate(const struct run_opts *o, struct k3_err *err)
{
    struct runner r = {.o = o};
    /* before setup, so that Ctrl-C while the model opens still ends with a closed trace
       and the statistics (of no tokens) rather than a killed process */
    signal(SIGINT, on_interrupt);
    bool failed = setup(&r, err) != 0;
    int rc = k3_runtime_agree(r.rt, failed, err);
    if (!model_args_leader(&o->model)) {
        if (!rc)
            k3_runtime_follow(r.rt);
        return teardown(&r, rc, err);
    }
    if (rc)
        return teardown(&r, rc, err);
    struct k3_runtime_snapshot start = k3_runtime_snap(r.rt), prompt_end = start;
    rc = run_cache_load(&r, err);
    if (!rc)
        rc = prefill(&r, err);
    if (!rc)
        rc = run_cache_save(&r, interrupted, err);
    if (!rc) {
        prompt_end = k3_runtime_snap(r.rt);
        mark_prompt_end(&r);
        if (o->stats)
            run_print_step(&r, "prompt", r.n_prompt, &start, &prompt_end);
    }
    struct emitter em = {.tok = r.tok, .ids = o->print_ids, .special = o->special};
    int generated = 0;
    if (!rc)
        rc = decode(&r, &em, &generated, err);
    if (generated || !rc)
        run_emit_end(&em);
    if (!rc)
        rc = finish(&r, generated, &start, &prompt_end, err);
    return teardown(&r, rc, err);
}

static int check_run_opts(struct run_opts *o, struct k3_err *err)
{
    if (model_args_check(&o->model, err))
        return -1;
    if (!!o->prompt + !!o->ids_text + !!o->prompt_file != 1)
        return k3_errf(err, "give the prompt as exactly one of -p TEXT, -f FILE or --ids LIST");
    if (o->chat && o->ids_text)
        return k3_errf(err, "--chat wraps text: give the prompt with -p or -f, not --ids");
    if ((o->system || !o->think) && !o->chat)
        return k3_errf(err, "--system and --think go with --chat");
    if (o->ids_text && k3_parse_id_list("--ids", o->ids_text, &o->ids, &o->n_ids, err))
        return -1;
    if (o->ids_text && !o->n_ids)
        return k3_errf(err, "--ids: \"%s\" holds no token ids", o->ids_text);
    if (o->prompt_cache && o->dump_layers)
        return k3_errf(err, "--dump-layers needs every position computed: not with --prompt-cache");
    if (routes_args_check(&o->routes, err))
        return -1;
    if (o->routes.path && (o->prompt_cache || o->model.runtime.share.ranks > 1))
        return k3_errf(err, "--routes: not with --prompt-cache (its state would not be the "
                            "model's) nor under mpirun");
    if (o->prompt_cache && o->model.runtime.share.ranks > 1)
        return k3_errf(err, "--prompt-cache: not under mpirun (every rank holds a copy of the "
                            "sequence, and only the leader would load it)");
    return 0;
}

int cmd_run(int argc, char **argv)
{
    struct run_opts o = {.n_predict = 16, .top_p = 1.0f, .seed = 1, .think = 1};
    model_args_init(&o.model);
    const struct k3_opt own[] = {
        {.name = "prompt", .short_name = 'p', .type = K3_OPT_STRING, .dst = &o.prompt,
         .arg = "TEXT", .help = "prompt text (specials are plain text)"},
        {.name = "file", .short_name = 'f', .type = K3_OPT_STRING, .dst = &o.prompt_file,
         .arg = "FILE", .help = "prompt text from a file"},
        {.name = "ids", .type = K3_OPT_STRING, .dst = &o.ids_text, .arg = "LIST",
         .help = "prompt as token ids, e.g. 1,2,3"},
        {.name = "chat", .type = K3_OPT_FLAG, .dst = &o.chat,
         .help = "wrap the prompt in K3's chat markup (a user turn)"},
        {.name = "system", .type = K3_OPT_STRING, .dst = &o.system, .arg = "TEXT",
         .help = "--chat: a system message first"},
        {.name = "think", .type = K3_OPT_ENUM, .dst = &o.think, .choices = k3_opt_on_off,
         .help = "--chat: open the thinking block"},
        {.name = "special", .type = K3_OPT_FLAG, .dst = &o.special,
         .help = "print special tokens' text too"},
        {.name = "n-predict", .short_name = 'n', .type = K3_OPT_INT, .dst = &o.n_predict,
         .arg = "N", .help = "tokens to generate", .min = 0, .max = 1 << 24},
        {.name = "temp", .type = K3_OPT_FLOAT, .dst = &o.temp, .arg = "T",
         .help = "sampling temperature; 0 = greedy", .min = 0, .max = 100},
        {.name = "top-k", .type = K3_OPT_INT, .dst = &o.top_k, .arg = "K",
         .help = "sample from the K best tokens; 0 = all", .min = 0, .max = 1 << 24},
        {.name = "top-p", .type = K3_OPT_FLOAT, .dst = &o.top_p, .arg = "P",
         .help = "nucleus sampling mass", .min = 1e-6, .max = 1},
        {.name = "seed", .short_name = 's', .type = K3_OPT_U64, .dst = &o.seed, .arg = "N",
         .help = "sampling seed"},
        {.name = "ctx-size", .short_name = 'c', .type = K3_OPT_INT, .dst = &o.ctx, .arg = "N",
         .help = "context positions; 0 = prompt + -n", .min = 0, .max = 1 << 30},
        {.name = "trace", .type = K3_OPT_STRING, .dst = &o.trace_path, .arg = "FILE",
         .help = "write a Chrome/Perfetto trace of reads and compute"},
        {.name = "stats", .type = K3_OPT_FLAG, .dst = &o.stats,
         .help = "per token: time, bytes read, GB/s, stall, hits"},
        {.name = "verbose", .short_name = 'v', .type = K3_OPT_FLAG, .dst = &o.verbose,
         .help = "print the read backend and the budget"},
        {.name = "logits-out", .type = K3_OPT_STRING, .dst = &o.logits_out, .arg = "FILE",
         .help = "write raw f32 logits, one row per predicted position"},
        {.name = "prompt-cache", .type = K3_OPT_STRING, .dst = &o.prompt_cache, .arg = "FILE",
         .help = "save the state after the prompt to FILE; resume from it when the prompt "
                 "extends FILE's"},
        {.name = "dump-layers", .type = K3_OPT_STRING, .dst = &o.dump_layers, .arg = "FILE",
         .help = "write per-layer hidden-state summaries (JSON)"},
        {.name = "print-ids", .type = K3_OPT_FLAG, .dst = &o.print_ids,
         .help = "print generated token ids instead of text"},
        {.name = "ignore-eos", .type = K3_OPT_FLAG, .dst = &o.ignore_eos,
         .help = "do not stop at the end-of-message token"},
        {.name = "quiet", .short_name = 'q', .type = K3_OPT_FLAG, .dst = &o.quiet,
         .help = "no statistics on stderr"},
        CLI_ROUTES_OPTS(&o.routes),
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
    int rc = model_args_parse(&o.model, own, K3_OPTS_COUNT(own), argc, argv, usage, &err);
    if (rc > 0)
        return 0;
    if (rc || check_run_opts(&o, &err)) {
        free(o.ids);
        model_args_print_error(&o.model, &err);
        return model_args_exit(&o.model, 2);
    }
    rc = generate(&o, &err);
    free(o.ids);
    if (rc)
        model_args_print_error(&o.model, &err);
    return model_args_exit(&o.model, rc ? 1 : interrupted ? 130 : 0);
}
