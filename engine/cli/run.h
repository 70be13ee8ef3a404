/* Inside `k3-uring run`: the options, what one run holds, and the helpers its files share.
 * cmd_run.c parses and generates; run_output.c writes what a run produces (text or ids
 * on stdout, --logits-out, --dump-layers); run_stats.c prints the statistics; run_cache.c
 * keeps the state after the prompt (--prompt-cache).
 * Owns: run's options (struct run_opts), what one run holds (struct runner) and the
 * interfaces between those four files.  Does not own: the model's opening and its steps
 * (engine/runtime/, engine/forward/), the options shared with other commands
 * (model_args.h, routes_args.h). */
#ifndef K3_CLI_RUN_H
#define K3_CLI_RUN_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "engine/base/files.h"
#include "engine/cli/model_args.h"
#include "engine/cli/routes_args.h"
#include "engine/forward/forward.h"
#include "engine/forward/seq_file.h"
#include "engine/forward/sampler.h"
#include "engine/runtime/runtime.h"
#include "engine/text/tokenizer.h"

struct run_opts {
    struct model_args model; /* the model and its read path */
    const char *ids_text, *prompt, *logits_out, *dump_layers;
    const char *trace_path, *prompt_file, *system;
    const char *prompt_cache; /* --prompt-cache FILE */
    struct routes_args routes; /* --routes, --routes-requests (as parsed) */
    int32_t *ids; /* --ids, parsed while validating options */
    int n_ids;
    int n_predict, top_k, ctx;
    int think; /* --think: on 1, off 0 */
    float temp, top_p;
    uint64_t seed;
    bool print_ids, ignore_eos, quiet, stats, verbose, chat, special;
};

/* ---- run_output.c ---- */

/* Generated tokens out: text through the UTF-8 stream, or ids. */
struct emitter {
    const struct k3_tokenizer *tok;
    struct k3_utf8_stream utf8;
    bool ids;
    bool special; /* print special tokens' text too */
    int count;
};
void run_emit(struct emitter *e, int32_t id);
void run_emit_end(struct emitter *e);

/* --logits-out: rows go to PATH.partial, renamed to PATH once the run is complete, so a
 * failed run leaves no file that looks whole. */
struct logits_file {
    const char *path;
    FILE *f;
    char tmp[K3_PATH_MAX];
};
int run_logits_open(struct logits_file *lf, const char *path, struct k3_err *err);
int run_logits_write(struct logits_file *lf, const float *rows, int n, int vocab,
                     struct k3_err *err);
int run_logits_commit(struct logits_file *lf, struct k3_err *err);
/* Closes; keep: leave the partial file for the user (interrupted runs). */
void run_logits_close(struct logits_file *lf, bool keep);

/* --dump-layers: per-layer summaries of the hidden state, [positions][layers + 1][rms,
 * mean, max_abs], compared with the reference's to find the first layer that diverges. */
struct layer_dump {
    int layers, positions;
    float *stats;
};
void run_dump_hook(void *ctx, int pos, int layer, const float *x, int H);
int run_dump_write(const struct layer_dump *d, int positions, const char *path,
                   struct k3_err *err);

/* ---- run_stats.c ---- */

/* Everything one run holds, set up in order and torn down in reverse. */
struct runner {
    const struct run_opts *o;
    struct k3_runtime *rt;
    const struct k3_tokenizer *tok;    /* NULL when ids go in and out */
    struct k3_seq seq;
    struct k3_sampler sampler;
    struct layer_dump dump;
    struct logits_file lf;
    struct routes_args routes;         /* --routes: the trace loaded, replayed */
    int32_t *prompt;
    int n_prompt, ctx;
    float *logits;                     /* [a pass's rows, or 1][vocab] */
    struct k3_layer_stats *layers_at_prompt_end; /* [n_layers + 1] */
    /* --prompt-cache */
    struct k3_seq_writer cache;
    struct k3_seq_file_model cache_model;
    enum k3_seq_file_found cache_found;
    int n_cached;                      /* prompt tokens the file's state covered */
};

/* ---- run_cache.c: --prompt-cache ---- */

/* Before the model opens: the file's folder takes a temporary file, or the run fails. */
int run_cache_begin(struct runner *r, struct k3_err *err);
/* After setup: the saved state when its prompt is a prefix of this one (r->n_cached), its
 * last logits row into r->logits and the logits file; another model's or a damaged file
 * fails the run. */
int run_cache_load(struct runner *r, struct k3_err *err);
/* After the prompt: the state saved over the file (nothing when the whole prompt came
 * from it, or the prompt was cut short). */
int run_cache_save(struct runner *r, bool interrupted, struct k3_err *err);
/* The temporary file removed if still there (teardown). */
void run_cache_end(struct runner *r);
/* " (N from the cache)" for the statistics, or "" without --prompt-cache. */
void run_cache_note(const struct runner *r, char *buf, size_t len);

/* --stats: one line for a step between two snapshots. */
void run_print_step(const struct runner *r, const char *what, int index,
                    const struct k3_runtime_snapshot *a, const struct k3_runtime_snapshot *b);
/* --stats: per layer over the generated tokens. */
void run_print_layers(const struct runner *r);
/* The closing lines: speed, bytes, stall, hits, RSS; faults; teams; reserved scales. */
void run_print_summary(const struct runner *r, int generated,
                       const struct k3_runtime_snapshot *start,
                       const struct k3_runtime_snapshot *prompt_end,
                       const struct k3_runtime_snapshot *end);

#endif
