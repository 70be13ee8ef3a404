/* `k3-uring run`: a prompt through the model, then generation.  The interface tests
 * and tools rely on: generated text (or ids with --print-ids) on stdout, statistics on
 * stderr, and with --logits-out the raw little-endian f32 logits, one row of vocab_size
 * values per position whose next token was predicted (every prompt position, then every
 * generated token but the last). */
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "engine/cli/cli.h"
#include "engine/cli/options.h"
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

static struct k3_runtime_opts runtime_opts(const struct run_opts *o)
{
    return (struct k3_runtime_opts){
        .model_dir = o->model,
        .drives = o->drives,
        .threads = o->threads,
        .numa_off = !strcmp(o->numa_text, "off"),
        .ram = o->ram,
        .io = o->io,
        .no_cache = o->no_cache,
        .sync = o->sync,
        .prefetch_k = o->prefetch_k,
        .prefetch_depth = o->prefetch_depth,
        .predict = o->predict,
        .trace_path = o->trace_path,
    };
}

static int encode_prompt(struct runner *r, const struct k3_tokenizer *tok, struct k3_err *err)
{
    const struct run_opts *o = r->o;
    char *file_text = NULL;
    size_t len = 0, n = 0;
    if (o->prompt_file && k3_read_small_file(o->prompt_file, &file_text, &len, err))
        return k3_err_prefix(err, "--file");
    const char *text = file_text ? file_text : o->prompt;
    int rc = o->chat ? k3_chat_prompt(tok, o->system, text, strcmp(o->think_text, "off"),
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
    const struct k3_tokenizer *tok = NULL;
    if ((!o->ids || !o->print_ids) && k3_runtime_tokenizer(&r->rt, &tok, err))
        return -1;
    if (o->ids) {
        r->prompt = o->ids;
        r->n_prompt = o->n_ids;
    } else if (encode_prompt(r, tok, err)) {
        return -1;
    }
    if (r->n_prompt == 0)
        return k3_errf(err, "the prompt is empty");
    r->ctx = o->ctx ? o->ctx : r->n_prompt + o->n_predict;
    if (r->ctx < r->n_prompt + o->n_predict)
        return k3_errf(err, "--ctx-size %d holds fewer than the prompt (%d tokens) + -n %d", r->ctx,
                       r->n_prompt, o->n_predict);
    if (r->ctx > r->rt.m.cfg.max_positions)
        return k3_errf(err, "context %d exceeds max_position_embeddings %d", r->ctx,
                       r->rt.m.cfg.max_positions);
    return 0;
}

static void print_notes(const struct runner *r)
{
    const char *at = r->rt.notes;
    while (*at) {
        size_t len = strcspn(at, "\n");
        fprintf(stderr, "k3-uring: note: %.*s\n", (int)len, at);
        at += len + (at[len] == '\n');
    }
    if (r->o->verbose && r->rt.stream) {
        const struct k3_budget_input *in;
        const struct k3_budget *b = k3_stream_budget(r->rt.stream, &in);
        fprintf(stderr, "k3-uring: reads through %s; ", k3_stream_backend(r->rt.stream));
        k3_budget_print(stderr, b, in);
        k3_placement_print(stderr, &r->rt.place, b->expert_inflight + b->cache_bytes);
    }
}

static int setup(struct runner *r, struct k3_err *err)
{
    const struct run_opts *o = r->o;
    /* Opened first, so a bad path fails before a model loads. */
    if (o->logits_out && run_logits_open(&r->lf, o->logits_out, err))
        return -1;
    struct k3_runtime_opts ro = runtime_opts(o);
    if (k3_runtime_open(&r->rt, &ro, err) || prepare_prompt(r, err) ||
        k3_runtime_start(&r->rt, r->ctx, K3_CHUNK, err))
        return -1;
    print_notes(r);
    const struct k3_config *c = &r->rt.m.cfg;
    if (k3_seq_init(&r->seq, c, r->ctx, err) ||
        k3_sampler_init(&r->sampler, c->vocab, o->temp, o->top_k, o->top_p, o->seed, err))
        return -1;
    if (!(r->logits = malloc(sizeof(float) * (size_t)K3_CHUNK * c->vocab)))
        return k3_errf(err, "out of memory for logits");
    if (o->dump_layers) {
        r->dump.layers = c->n_layers;
        r->dump.positions = r->ctx;
        r->dump.stats = calloc((size_t)r->ctx * (c->n_layers + 1) * 3, sizeof(float));
        if (!r->dump.stats)
            return k3_errf(err, "out of memory for --dump-layers");
        r->rt.fwd.hooks.on_layer = run_dump_hook;
        r->rt.fwd.hooks.on_layer_ctx = &r->dump;
    }
    return 0;
}

/* The runtime closes last but for the prompt, so that its trace is complete when the
 * statistics print; a trace that cannot be finished fails the run. */
static int teardown(struct runner *r, int rc, struct k3_err *err)
{
    run_logits_close(&r->lf, interrupted);
    free(r->dump.stats);
    free(r->logits);
    free(r->layers_at_prompt_end);
    k3_sampler_free(&r->sampler);
    k3_seq_free(&r->seq);
    if (k3_runtime_close(&r->rt, rc ? NULL : err))
        rc = -1;
    if (r->prompt != r->o->ids)
        free(r->prompt);
    return rc;
}

/* The prompt in steps of K3_CHUNK; logits of every position when they go to a file, of
 * the last otherwise (kept first in r->logits: the first token is sampled from it). */
static int prefill(struct runner *r, struct k3_err *err)
{
    int V = r->rt.m.cfg.vocab;
    bool all = r->lf.f != NULL;
    for (int done = 0; !interrupted && done < r->n_prompt; done += K3_CHUNK) {
        int T = r->n_prompt - done < K3_CHUNK ? r->n_prompt - done : K3_CHUNK;
        k3_trace_begin(r->rt.trace, "prompt chunk", NULL);
        int rc = k3_forward_tokens(&r->rt.fwd, &r->seq, r->prompt + done, T, r->logits, all, err);
        k3_trace_end(r->rt.trace);
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
    const struct k3_config *c = &r->rt.m.cfg;
    struct k3_runtime_snapshot a = k3_runtime_snap(&r->rt), b;
    while (!interrupted && *generated < o->n_predict) {
        int32_t next = k3_sample(&r->sampler, r->logits);
        run_emit(em, next);
        ++*generated;
        if ((next == c->eos_id && !o->ignore_eos) || *generated == o->n_predict)
            break;
        char args[32];
        snprintf(args, sizeof args, "\"token\": %d", *generated);
        k3_trace_begin(r->rt.trace, "token", args);
        int rc = k3_forward_tokens(&r->rt.fwd, &r->seq, &next, 1, r->logits, false, err);
        k3_trace_end(r->rt.trace);
        if (rc || run_logits_write(&r->lf, r->logits, 1, c->vocab, err))
            return -1;
        b = k3_runtime_snap(&r->rt);
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
    if (!r->rt.stream)
        return;
    size_t n = (size_t)r->rt.m.cfg.n_layers + 1;
    if ((r->layers_at_prompt_end = malloc(n * sizeof *r->layers_at_prompt_end)))
        memcpy(r->layers_at_prompt_end, k3_stream_layer_stats(r->rt.stream),
               n * sizeof *r->layers_at_prompt_end);
}

/* The logits file and the layer dump complete, then the statistics. */
static int finish(struct runner *r, int generated, const struct k3_runtime_snapshot *start,
                  const struct k3_runtime_snapshot *prompt_end, struct k3_err *err)
{
    const struct run_opts *o = r->o;
    struct k3_runtime_snapshot end = k3_runtime_snap(&r->rt);
    if (interrupted && r->lf.f)
        fprintf(stderr, "k3-uring: interrupted; the logits so far stay in %s\n", r->lf.tmp);
    if (r->lf.f && !interrupted && run_logits_commit(&r->lf, err))
        return -1;
    if (o->dump_layers && run_dump_write(&r->dump, r->seq.pos, o->dump_layers, err))
        return -1;
    if (o->stats && r->layers_at_prompt_end)
        run_print_layers(r);
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
    int rc = setup(&r, err);
    struct k3_runtime_snapshot start = k3_runtime_snap(&r.rt), prompt_end = start;
    if (!rc)
        rc = prefill(&r, err);
    if (!rc) {
        prompt_end = k3_runtime_snap(&r.rt);
        mark_prompt_end(&r);
        if (o->stats)
            run_print_step(&r, "prompt", r.n_prompt, &start, &prompt_end);
    }
    struct emitter em = {.tok = r.rt.tok, .ids = o->print_ids, .special = o->special};
    int generated = 0;
    if (!rc)
        rc = decode(&r, &em, &generated, err);
    if (generated || !rc)
        run_emit_end(&em);
    if (!rc)
        rc = finish(&r, generated, &start, &prompt_end, err);
    return teardown(&r, rc, err);
}

int cmd_run(int argc, char **argv)
{
    struct run_opts o = {.n_predict = 16, .top_p = 1.0f, .seed = 1, .prefetch_k = 24,
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
