/* `run --prompt-cache FILE`: llama.cpp's prompt cache.  The sequence's state after the
 * prompt goes to FILE; a later run whose prompt extends FILE's (its ids a prefix, equal
 * counts too) starts from it and runs only the new tokens.  A state is good only at its
 * own position (KDA cannot be rewound), so a prompt that is not an extension runs whole
 * and the file is saved anew.  The format and its checks: engine/forward/seq_file.h. */
#include <string.h>

#include "engine/base/clock.h"
#include "engine/cli/run.h"

int run_cache_begin(struct runner *r, struct k3_err *err)
{
    return r->o->prompt_cache ? k3_seq_writer_begin(&r->cache, r->o->prompt_cache, err) : 0;
}

int run_cache_load(struct runner *r, struct k3_err *err)
{
    const struct run_opts *o = r->o;
    if (!o->prompt_cache)
        return 0;
    const struct k3_config *c = k3_runtime_config(r->rt);
    int saved;
    if (k3_seq_file_model_of(k3_runtime_model(r->rt), &r->cache_model, err) ||
        k3_seq_file_load(o->prompt_cache, c, &r->cache_model, &r->seq, r->prompt, r->n_prompt,
                         r->logits, &r->cache_found, &saved, err))
        return -1;
    r->n_cached = r->cache_found == K3_SEQ_FILE_RESUMED ? saved : 0;
    if (o->verbose && r->cache_found == K3_SEQ_FILE_OTHER_PROMPT)
        fprintf(stderr, "k3-uring: --prompt-cache %s holds another prompt (%d tokens, not a "
                        "prefix of this one): running the prompt whole and saving over it\n",
                o->prompt_cache, saved);
    /* The logits file starts at the last position the cache holds: its row came with the
     * state, and the first token is sampled from it when the prompt is no longer. */
    return r->n_cached ? run_logits_write(&r->lf, r->logits, 1, c->vocab, err) : 0;
}

int run_cache_save(struct runner *r, bool interrupted, struct k3_err *err)
{
    const struct run_opts *o = r->o;
    if (!o->prompt_cache)
        return 0;
    /* Nothing new to keep (the whole prompt came from the file), or a prompt cut short. */
    if (r->n_cached == r->n_prompt || interrupted || r->seq.pos != r->n_prompt)
        return k3_seq_writer_end(&r->cache, true, err);
    double t0 = k3_now();
    const struct k3_config *c = k3_runtime_config(r->rt);
    if (k3_seq_writer_save(&r->cache, c, &r->cache_model, &r->seq, r->prompt, r->logits, err) ||
        k3_seq_writer_end(&r->cache, false, err))
        return -1;
    if (o->verbose)
        fprintf(stderr, "k3-uring: --prompt-cache %s: saved the state after %d tokens (%.1f MB, "
                        "%.3f s)\n", o->prompt_cache, r->n_prompt,
                k3_seq_file_bytes(c, r->n_prompt) / 1e6,
                k3_now() - t0);
    return 0;
}

void run_cache_end(struct runner *r)
{
    k3_seq_writer_end(&r->cache, true, NULL);
}

void run_cache_note(const struct runner *r, char *buf, size_t len)
{
    if (!r->o->prompt_cache)
        snprintf(buf, len, "%s", "");
    else if (r->cache_found == K3_SEQ_FILE_OTHER_PROMPT)
        snprintf(buf, len, " (0 from the cache, which held another prompt)");
    else
        snprintf(buf, len, " (%d from the cache)", r->n_cached);
}
