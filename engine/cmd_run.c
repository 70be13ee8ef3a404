/* `k3-uring run`: a prompt through the model, then generation.  The interface tests
 * and tools rely on: generated text (or ids with --print-ids) on stdout, statistics on
 * stderr, and with --logits-out the raw little-endian f32 logits, one row of vocab_size
 * values per position whose next token was predicted (every prompt position, then every
 * generated token but the last). */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "engine/cli.h"
#include "engine/experts.h"
#include "engine/files.h"
#include "engine/forward.h"
#include "engine/model.h"
#include "engine/options.h"
#include "engine/sampler.h"
#include "engine/tokenizer.h"

struct run_opts {
    const char *model, *drives, *ids_text, *prompt, *logits_out, *dump_layers;
    int32_t *ids; /* --ids, parsed while validating options */
    int n_ids;
    int n_predict, threads, top_k;
    float temp, top_p;
    uint64_t seed;
    bool print_ids, ignore_eos, quiet;
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
    int count;
};

static void emit(struct emitter *e, int32_t id)
{
    if (e->ids) {
        printf(e->count ? ",%d" : "%d", id);
    } else {
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

static int open_model(struct k3_model *m, const struct run_opts *o, struct k3_err *err)
{
    if (o->model)
        return k3_model_open_checkpoint(m, o->model, err);
    char *list = strdup(o->drives);
    const char *drives[256];
    int n = list ? split_list(list, drives, 256) : 0;
    int rc = n ? k3_model_open_packed(m, drives, n, err) : k3_errf(err, "--drives: no drives");
    free(list);
    return rc;
}

static int generate(const struct run_opts *o, struct k3_err *err)
{
    struct k3_model m;
    if (open_model(&m, o, err))
        return -1;
    const struct k3_config *c = &m.cfg;
    struct k3_tokenizer *tok = NULL;
    struct k3_expert_store *store = NULL;
    struct k3_session ss = {0};
    struct k3_sampler sampler = {0};
    struct layer_dump dump = {0};
    int32_t *prompt = NULL;
    int n_prompt = 0;
    float *logits = NULL;
    FILE *lf = NULL;
    char logits_tmp[K3_PATH_MAX] = "";
    int rc = 0;

    if (o->prompt || !o->print_ids)
        rc = k3_model_tokenizer(&m, &tok, err);
    if (!rc && o->ids) {
        prompt = o->ids;
        n_prompt = o->n_ids;
    } else if (!rc) {
        size_t n = 0;
        rc = k3_tok_encode(tok, o->prompt, strlen(o->prompt), false, &prompt, &n, err);
        n_prompt = (int)n;
    }
    if (!rc && n_prompt == 0)
        rc = k3_errf(err, "the prompt is empty");
    int ctx = n_prompt + o->n_predict;
    if (!rc && ctx > c->max_positions)
        rc = k3_errf(err, "prompt (%d tokens) + -n %d exceeds max_position_embeddings %d",
                     n_prompt, o->n_predict, c->max_positions);
    if (!rc)
        rc = k3_expert_store_open(&store, &m, c->top_k, err);
    if (!rc && store->fallback[0])
        fprintf(stderr, "k3-uring: note: %s\n", store->fallback);
    if (!rc)
        rc = k3_session_init(&ss, &m, store, ctx, err);
    if (!rc)
        rc = k3_sampler_init(&sampler, c->vocab, o->temp, o->top_k, o->top_p, o->seed, err);
    if (!rc && !(logits = malloc(sizeof(float) * (size_t)K3_CHUNK * c->vocab)))
        rc = k3_errf(err, "out of memory for logits");
    if (!rc && o->dump_layers) {
        dump.layers = c->n_layers;
        dump.positions = ctx;
        dump.stats = calloc((size_t)ctx * (c->n_layers + 1) * 3, sizeof(float));
        if (!dump.stats)
            rc = k3_errf(err, "out of memory for --dump-layers");
        ss.hook = dump_hook;
        ss.hook_ctx = &dump;
    }
    /* Logits go to a temporary name and are renamed at the end: a failed run leaves no
     * file that looks complete. */
    if (!rc && o->logits_out) {
        int n = snprintf(logits_tmp, sizeof logits_tmp, "%s.partial", o->logits_out);
        if (n < 0 || (size_t)n >= sizeof logits_tmp)
            rc = k3_errf(err, "--logits-out %s: path too long", o->logits_out);
        else if (!(lf = fopen(logits_tmp, "wb")))
            rc = k3_errf(err, "--logits-out %s: %s", logits_tmp, strerror(errno));
    }

    double t0 = now();
    for (int done = 0; !rc && done < n_prompt; done += K3_CHUNK) {
        int T = n_prompt - done < K3_CHUNK ? n_prompt - done : K3_CHUNK;
        rc = k3_forward(&ss, prompt + done, T, logits, lf != NULL, err);
        if (!rc && lf) {
            rc = write_rows(lf, logits, T, c->vocab, logits_tmp, err);
            /* keep the last row first: the first token is sampled from it */
            memmove(logits, logits + (size_t)(T - 1) * c->vocab, sizeof(float) * (size_t)c->vocab);
        }
    }
    double t_prompt = now() - t0, t1 = now();
    struct emitter em = {.tok = tok, .ids = o->print_ids};
    int generated = 0;
    while (!rc && generated < o->n_predict) {
        int32_t next = k3_sample(&sampler, logits);
        emit(&em, next);
        generated++;
        if ((next == c->eos_id && !o->ignore_eos) || generated == o->n_predict)
            break;
        rc = k3_forward(&ss, &next, 1, logits, false, err);
        if (!rc && lf)
            rc = write_rows(lf, logits, 1, c->vocab, logits_tmp, err);
    }
    double t_gen = now() - t1;
    if (generated || !rc)
        emit_end(&em);
    if (lf && fclose(lf) && !rc)
        rc = k3_errf(err, "%s: write failed: %s", logits_tmp, strerror(errno));
    if (lf && !rc && rename(logits_tmp, o->logits_out))
        rc = k3_errf(err, "--logits-out %s: %s", o->logits_out, strerror(errno));
    if (lf && rc)
        unlink(logits_tmp);
    if (!rc && o->dump_layers)
        rc = write_layer_dump(&dump, ss.pos, o->dump_layers, err);
    if (!rc && !o->quiet) {
        const struct k3_expert_stats *st = &store->stats;
        fprintf(stderr,
                "k3-uring: prompt %d tokens in %.3f s; generated %d tokens, %.4f s/token; "
                "experts %llu records, %.1f MB read (%.3f s waiting)\n",
                n_prompt, t_prompt, generated, generated > 1 ? t_gen / (generated - 1) : 0.0,
                (unsigned long long)st->records, st->bytes / 1e6, st->read_seconds);
        if (st->nan_scale_groups)
            fprintf(stderr, "k3-uring: %llu MXFP4 groups had the reserved scale 255 (zeroed)\n",
                    (unsigned long long)st->nan_scale_groups);
    }
    free(dump.stats);
    free(logits);
    if (prompt != o->ids)
        free(prompt);
    k3_sampler_free(&sampler);
    k3_session_free(&ss);
    k3_expert_store_close(store);
    k3_tok_free(tok);
    k3_model_close(&m);
    return rc;
}

int cmd_run(int argc, char **argv)
{
    struct run_opts o = {.n_predict = 16, .top_p = 1.0f, .seed = 1};
    const struct k3_opt opts[] = {
        {"model", 'm', K3_OPT_STRING, &o.model, "DIR", "checkpoint folder as shipped", 0, 0},
        {"drives", 'd', K3_OPT_STRING, &o.drives, "D0,D1,..", "packed drive folders, any order (k3-uring pack)", 0, 0},
        {"prompt", 'p', K3_OPT_STRING, &o.prompt, "TEXT", "prompt text (specials are plain text)", 0, 0},
        {"ids", 0, K3_OPT_STRING, &o.ids_text, "LIST", "prompt as token ids, e.g. 1,2,3", 0, 0},
        {"n-predict", 'n', K3_OPT_INT, &o.n_predict, "N", "tokens to generate", 0, 1 << 24},
        {"temp", 0, K3_OPT_FLOAT, &o.temp, "T", "sampling temperature; 0 = greedy", 0, 100},
        {"top-k", 0, K3_OPT_INT, &o.top_k, "K", "sample from the K best tokens; 0 = all", 0, 1 << 24},
        {"top-p", 0, K3_OPT_FLOAT, &o.top_p, "P", "nucleus sampling mass", 1e-6, 1},
        {"seed", 's', K3_OPT_U64, &o.seed, "N", "sampling seed", 0, 0},
        {"threads", 't', K3_OPT_INT, &o.threads, "N", "compute threads; 0 = one per core", 0, 4096},
        {"logits-out", 0, K3_OPT_STRING, &o.logits_out, "FILE", "write raw f32 logits, one row per predicted position", 0, 0},
        {"dump-layers", 0, K3_OPT_STRING, &o.dump_layers, "FILE", "write per-layer hidden-state summaries (JSON)", 0, 0},
        {"print-ids", 0, K3_OPT_FLAG, &o.print_ids, NULL, "print generated token ids instead of text", 0, 0},
        {"ignore-eos", 0, K3_OPT_FLAG, &o.ignore_eos, NULL, "do not stop at the end-of-message token", 0, 0},
        {"quiet", 'q', K3_OPT_FLAG, &o.quiet, NULL, "no statistics on stderr", 0, 0},
    };
    const char *usage = "usage: k3-uring run (-m DIR | --drives D0,D1,..) (-p TEXT | --ids LIST) "
                        "[-n N] [options]";
    struct k3_err err = {{0}};
    int rc = k3_opts_parse(opts, (int)(sizeof opts / sizeof opts[0]), argc, argv, usage, &err);
    if (rc > 0)
        return 0;
    if (!rc && !!o.model == !!o.drives)
        rc = k3_errf(&err, "give the model as exactly one of -m DIR or --drives D0,D1,...");
    if (!rc && !!o.prompt == !!o.ids_text)
        rc = k3_errf(&err, "give the prompt as exactly one of -p TEXT or --ids LIST");
    if (!rc && o.ids_text)
        rc = k3_parse_id_list("--ids", o.ids_text, &o.ids, &o.n_ids, &err);
    if (rc) {
        fprintf(stderr, "k3-uring: %s\n", err.msg);
        return 2;
    }
    if (o.threads)
        omp_set_num_threads(o.threads);
    rc = generate(&o, &err);
    free(o.ids);
    if (rc) {
        fflush(stdout);
        fprintf(stderr, "k3-uring: %s\n", err.msg);
        return 1;
    }
    return 0;
}
