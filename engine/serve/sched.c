#include "engine/serve/sched.h"

#include <assert.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/base/clock.h"
#include "engine/forward/sampler.h"
#include "engine/grammar/grammar.h"

enum slot_state { SLOT_FREE, SLOT_PREFILL, SLOT_DECODE };

struct slot {
    enum slot_state state;
    struct k3_request *req;
    struct k3_seq seq;
    struct k3_sampler sampler;
    float *adjusted;     /* [vocab] the logit row after the request's bias and penalties */
    int32_t *ids;        /* [ctx] the prompt, then each sampled token; seq.pos of them fed */
    int prompt_done;     /* prompt rows run so far */
    int32_t next;        /* DECODE: the sampled token to feed */
    uint64_t admitted;   /* admission order: prompts are read first come, first served */
    double last_token;   /* when its last token was taken (monotonic seconds) */
};

struct k3_sched {
    struct k3_runtime *rt;
    const struct k3_tokenizer *tok;  /* the runtime's, loaded at create */
    struct k3_sched_opts o;
    struct slot *slots;  /* [parallel] */
    struct k3_prompt_store *store;
    int32_t eos;         /* <|end_of_msg|> */
    struct k3_vocab_trie *trie; /* the vocabulary's text tokens, for constrained requests */
    uint32_t *allowed;   /* [vocab/32 rounded up] a constrained request's mask */
    uint64_t admissions;
    /* one step: up to the forward context's rows (a pass) */
    int rows;
    int32_t *tokens;     /* [rows] */
    struct k3_seq **seq; /* [rows] */
    bool *want;          /* [rows] */
    int *owner;          /* [parallel] the slot of each logit row */
    float *logits;       /* [parallel][vocab] */

    pthread_mutex_t lock;   /* the queue, the stop flag, the statistics */
    pthread_cond_t arrived;
    struct k3_request **queue; /* [queue_max] ring */
    int q_head, q_len;
    bool stopping;
    struct k3_sched_stats stats;
    uint64_t *layer_experts; /* [n_layers] the forward pass's decode_experts, as of stats */
};

const double K3_LATENCY_BOUNDS[K3_LATENCY_BUCKETS] = {0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1,
                                                      2.5, 5, 10, 25, 50, 100, 300};

static void observe(struct k3_latency *h, double seconds)
{
    for (int i = 0; i < K3_LATENCY_BUCKETS; i++)
        h->le[i] += seconds <= K3_LATENCY_BOUNDS[i];
    h->count++;
    h->sum += seconds;
}

/* ---- a slot's states: the legal changes and the invariants, asserted at every change
 * (as engine/stream/buffer.c does for buffers).  Every write of a slot's state goes
 * through slot_set. */

static bool slot_legal(enum slot_state from, enum slot_state to)
{
    switch (from) {
    case SLOT_FREE: return to == SLOT_PREFILL; /* admitted */
    /* its prompt's last row drawn from; ended (cancelled, stopping, a failed step) */
    case SLOT_PREFILL: return to == SLOT_DECODE || to == SLOT_FREE;
    /* the next token drawn; ended (end of message, a stop string, a limit, cancelled,
     * stopping, a failed step) */
    case SLOT_DECODE: return to == SLOT_DECODE || to == SLOT_FREE;
    }
    return false;
}

static void check_slot(const struct slot *sl)
{
    assert((sl->state == SLOT_FREE) == (sl->req == NULL));
    assert(sl->state != SLOT_PREFILL || sl->prompt_done < sl->req->n_prompt);
    assert(sl->state != SLOT_DECODE || sl->prompt_done == sl->req->n_prompt);
    (void)sl;
}

/* The slot's new state: legal from its current one, and the invariants of the new one
 * hold (its request, and its prompt rows, set first). */
static void slot_set(struct slot *sl, enum slot_state to)
{
    assert(slot_legal(sl->state, to));
    (void)slot_legal; /* under NDEBUG */
    sl->state = to;
    check_slot(sl);
}

int k3_sched_create(struct k3_sched **out, struct k3_runtime *rt, const struct k3_sched_opts *o,
                    struct k3_err *err)
{
    const struct k3_config *c = k3_runtime_config(rt);
    if (o->parallel < 1 || o->parallel > K3_CHUNK)
        return k3_errf(err, "--parallel %d: 1 to %d sequences", o->parallel, K3_CHUNK);
    if (k3_runtime_rows(rt) < o->parallel)
        return k3_errf(err, "--parallel %d: the runtime holds %d rows a step, fewer than "
                            "one a sequence", o->parallel, k3_runtime_rows(rt));
    struct k3_sched *s = calloc(1, sizeof *s);
    if (!s)
        return k3_errf(err, "out of memory");
    s->rt = rt;
    s->o = *o;
    s->slots = calloc((size_t)o->parallel, sizeof *s->slots);
    s->queue = calloc((size_t)(o->queue_max > 0 ? o->queue_max : 1), sizeof *s->queue);
    s->rows = k3_runtime_rows(rt);
    s->tokens = calloc((size_t)s->rows, sizeof *s->tokens);
    s->seq = calloc((size_t)s->rows, sizeof *s->seq);
    s->want = calloc((size_t)s->rows, sizeof *s->want);
    s->owner = calloc((size_t)o->parallel, sizeof *s->owner);
    s->logits = malloc(sizeof(float) * (size_t)o->parallel * (size_t)c->vocab);
    s->layer_experts = calloc((size_t)c->n_layers, sizeof(uint64_t));
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->arrived, NULL);
    int rc = s->slots && s->queue && s->tokens && s->seq && s->want && s->owner && s->logits &&
                     s->layer_experts
                 ? 0
                 : k3_errf(err, "out of memory");
    for (int i = 0; !rc && i < o->parallel; i++)
        rc = k3_seq_init(&s->slots[i].seq, c, o->ctx, err) ||
             k3_sampler_init(&s->slots[i].sampler, c->vocab, 0, 0, 1, 0, err) ||
             (!(s->slots[i].ids = malloc(sizeof(int32_t) * (size_t)o->ctx)) &&
              k3_errf(err, "out of memory")) ||
             (!(s->slots[i].adjusted = malloc(sizeof(float) * (size_t)c->vocab)) &&
              k3_errf(err, "out of memory"));
    if (!rc)
        rc = k3_prompt_store_create(&s->store, c, o->cache_ram, err);
    if (!rc && (k3_runtime_tokenizer(rt, &s->tok, err) ||
                k3_vocab_trie_build(s->tok, &s->trie, err)))
        rc = -1;
    if (!rc && !(s->allowed = calloc(((size_t)c->vocab + 31) / 32, sizeof *s->allowed)))
        rc = k3_errf(err, "out of memory");
    s->eos = c->eos_id;
    if (rc) {
        k3_sched_destroy(s);
        return -1;
    }
    *out = s;
    return 0;
}

void k3_sched_destroy(struct k3_sched *s)
{
    if (!s)
        return;
    for (int i = 0; s->slots && i < s->o.parallel; i++) {
        if (s->slots[i].req)
            k3_request_release(s->slots[i].req);
        k3_seq_free(&s->slots[i].seq);
        k3_sampler_free(&s->slots[i].sampler);
        free(s->slots[i].ids);
        free(s->slots[i].adjusted);
    }
    k3_prompt_store_destroy(s->store);
    k3_vocab_trie_free(s->trie);
    free(s->allowed);
    for (int i = 0; i < s->q_len; i++)
        k3_request_release(s->queue[(s->q_head + i) % s->o.queue_max]);
    pthread_mutex_destroy(&s->lock);
    pthread_cond_destroy(&s->arrived);
    free(s->slots);
    free(s->queue);
    free(s->tokens);
    free(s->seq);
    free(s->want);
    free(s->owner);
    free(s->logits);
    free(s->layer_experts);
    free(s);
}

int k3_sched_submit(struct k3_sched *s, struct k3_request *r)
{
    if (r->n_prompt < 1 || r->n_prompt >= s->o.ctx)
        return -E2BIG;
    pthread_mutex_lock(&s->lock);
    int rc = s->stopping ? -ESHUTDOWN : s->q_len >= s->o.queue_max ? -EBUSY : 0;
    if (!rc) {
        k3_request_retain(r);
        s->queue[(s->q_head + s->q_len++) % s->o.queue_max] = r;
        s->stats.queued = s->q_len;
        pthread_cond_signal(&s->arrived);
    }
    pthread_mutex_unlock(&s->lock);
    return rc;
}

void k3_sched_stop(struct k3_sched *s)
{
    pthread_mutex_lock(&s->lock);
    s->stopping = true;
    pthread_cond_signal(&s->arrived);
    pthread_mutex_unlock(&s->lock);
}

struct k3_sched_stats k3_sched_stats(struct k3_sched *s, uint64_t *layer_experts)
{
    pthread_mutex_lock(&s->lock);
    struct k3_sched_stats st = s->stats;
    if (layer_experts)
        memcpy(layer_experts, s->layer_experts, sizeof(uint64_t) * (size_t)k3_runtime_config(s->rt)->n_layers);
    pthread_mutex_unlock(&s->lock);
    return st;
}

/* ---- slots ---------------------------------------------------------------------- */

/* The slot's state under the ids fed so far, for a later request that extends them. */
static void store_state(struct k3_sched *s, struct slot *sl)
{
    if (sl->req->p.cache_prompt)
        k3_prompt_store_put(s->store, sl->ids, sl->seq.pos, &sl->seq);
}

static void end_slot(struct k3_sched *s, struct slot *sl, enum k3_finish f, const char *error)
{
    if (f == K3_FINISH_STOP || f == K3_FINISH_LENGTH)
        store_state(s, sl);
    k3_request_finish(sl->req, f, error);
    k3_request_release(sl->req);
    sl->req = NULL;
    slot_set(sl, SLOT_FREE);
    pthread_mutex_lock(&s->lock);
    s->stats.requests_done++;
    pthread_mutex_unlock(&s->lock);
}

static void admit(struct k3_sched *s, struct slot *sl, struct k3_request *r)
{
    const struct k3_gen_params *p = &r->p;
    k3_seq_reset(&sl->seq, k3_runtime_config(s->rt));
    k3_sampler_set(&sl->sampler, p->temperature, p->top_k, p->top_p, p->seed);
    sl->req = r;
    memcpy(sl->ids, r->prompt, sizeof(int32_t) * (size_t)r->n_prompt);
    sl->prompt_done = p->cache_prompt ? k3_prompt_store_resume(s->store, r->prompt, r->n_prompt,
                                                               &sl->seq)
                                      : 0;
    if (sl->prompt_done)
        k3_request_set_cached(r, sl->prompt_done);
    sl->admitted = s->admissions++;
    slot_set(sl, SLOT_PREFILL);
    pthread_mutex_lock(&s->lock);
    s->stats.prompt_tokens += (uint64_t)r->n_prompt;
    pthread_mutex_unlock(&s->lock);
}

/* Queued requests into free slots; with stop, every queued one ends instead. */
static void admit_queued(struct k3_sched *s, bool stop)
{
    for (int i = 0; i < s->o.parallel; i++) {
        struct slot *sl = &s->slots[i];
        pthread_mutex_lock(&s->lock);
        struct k3_request *r = NULL;
        if ((sl->state == SLOT_FREE || stop) && s->q_len) {
            r = s->queue[s->q_head];
            s->q_head = (s->q_head + 1) % s->o.queue_max;
            s->stats.queued = --s->q_len;
        }
        pthread_mutex_unlock(&s->lock);
        if (r && (stop || k3_request_cancelled(r))) {
            k3_request_finish(r, K3_FINISH_ERROR,
                              stop ? "the server is shutting down" : "the client went away");
            k3_request_release(r);
            i--; /* the same slot may take the next */
        } else if (r) {
            admit(s, sl, r);
        }
    }
}

/* Running requests whose client left, or every one when stopping. */
static void drop_ended(struct k3_sched *s, bool stop)
{
    for (int i = 0; i < s->o.parallel; i++) {
        struct slot *sl = &s->slots[i];
        if (sl->state == SLOT_FREE)
            continue;
        if (k3_request_cancelled(sl->req))
            end_slot(s, sl, K3_FINISH_ERROR, "the client went away");
        else if (stop)
            end_slot(s, sl, K3_FINISH_LENGTH, NULL);
    }
}

/* ---- one step -------------------------------------------------------------------- */

static void add_row(struct k3_sched *s, int *n, int32_t token, struct slot *sl, bool want)
{
    assert(*n < s->rows);
    s->tokens[*n] = token;
    s->seq[*n] = &sl->seq;
    s->want[*n] = want;
    (*n)++;
}

/* The next prefilling slot in admission order, or NULL. */
static struct slot *oldest_prefill(struct k3_sched *s, const struct slot *after)
{
    struct slot *best = NULL;
    for (int i = 0; i < s->o.parallel; i++) {
        struct slot *sl = &s->slots[i];
        if (sl->state == SLOT_PREFILL && (!after || sl->admitted > after->admitted) &&
            (!best || sl->admitted < best->admitted))
            best = sl;
    }
    return best;
}

/* One row per decoding slot, then prompt rows, oldest request first: a whole pass when
 * no stream decodes, else up to prefill_chunk of them (each prompt row a stream waits
 * through lengthens its time between tokens); the logit rows' owners in s->owner. */
static int build_step(struct k3_sched *s, int *n_logits)
{
    int n = 0;
    *n_logits = 0;
    for (int i = 0; i < s->o.parallel; i++)
        if (s->slots[i].state == SLOT_DECODE) {
            s->owner[(*n_logits)++] = i;
            add_row(s, &n, s->slots[i].next, &s->slots[i], true);
        }
    int budget = n ? s->o.prefill_chunk : s->rows;
    for (struct slot *sl = oldest_prefill(s, NULL); sl && budget > 0 && n < s->rows;
         sl = oldest_prefill(s, sl)) {
        const struct k3_request *r = sl->req;
        int take = r->n_prompt - sl->prompt_done;
        take = take < budget ? take : budget;
        take = take < s->rows - n ? take : s->rows - n;
        for (int t = 0; t < take; t++) {
            bool last = sl->prompt_done + t + 1 == r->n_prompt;
            if (last)
                s->owner[(*n_logits)++] = (int)(sl - s->slots);
            add_row(s, &n, r->prompt[sl->prompt_done + t], sl, last);
        }
        sl->prompt_done += take;
        budget -= take;
    }
    return n;
}

/* The token a request draws from a logit row: any, or, when a grammar constrains it, only
 * one the grammar allows (the logits stay as they are: the mask changes the choice).
 * -1 when the grammar allows none. */
static int32_t choose(struct k3_sched *s, struct slot *sl, const float *logits)
{
    struct k3_matcher *m = sl->req->matcher;
    if (!m)
        return k3_sample(&sl->sampler, logits);
    k3_matcher_mask(m, s->trie, s->allowed);
    int32_t id = k3_sample_masked(&sl->sampler, logits, s->allowed);
    return id >= 0 && !k3_matcher_accept(m, id) ? id : -1;
}

/* A logit row drawn from: the token goes to the request; the slot decodes on, or ends at
 * end of message, a stop string, max_tokens or a full context. */
static void take_token(struct k3_sched *s, struct slot *sl, const float *logits)
{
    const struct k3_tokenizer *tok = s->tok;
    int vocab = k3_runtime_config(s->rt)->vocab;
    const struct k3_gen_params *p = &sl->req->p;
    struct k3_logit_adjust adjust = {
        .bias = p->bias, .n_bias = p->n_bias, .presence = p->presence_penalty,
        .frequency = p->frequency_penalty, .seen = sl->ids + sl->req->n_prompt,
        .n_seen = sl->seq.pos - sl->req->n_prompt};
    int32_t id = choose(s, sl, k3_logits_adjust(&adjust, logits, vocab, sl->adjusted));
    if (id < 0) {
        end_slot(s, sl, K3_FINISH_ERROR, "the response's grammar allows no token here");
        return;
    }
    /* ignore_eos, as llama-server's: end of message does not end the text (benchmarks ask
     * for exactly max_tokens) */
    bool ends = !sl->req->p.ignore_eos && id == s->eos;
    size_t len = 0;
    const uint8_t *bytes = k3_tok_is_special(tok, id) ? NULL : k3_tok_bytes(tok, id, &len);
    bool stopped = k3_request_add_token(sl->req, id, bytes, len, logits, vocab);
    int made = sl->req->completion_tokens;
    if (sl->state == SLOT_PREFILL) /* its prompt just ended: the next turn starts here */
        store_state(s, sl);
    sl->next = id;
    if (sl->seq.pos < s->o.ctx)
        sl->ids[sl->seq.pos] = id;
    slot_set(sl, SLOT_DECODE);
    double t = k3_now();
    pthread_mutex_lock(&s->lock);
    s->stats.tokens_generated++;
    if (made == 1)
        observe(&s->stats.first_token, t - sl->req->submitted);
    else
        observe(&s->stats.between_tokens, t - sl->last_token);
    pthread_mutex_unlock(&s->lock);
    sl->last_token = t;
    if (ends || stopped)
        end_slot(s, sl, K3_FINISH_STOP, NULL);
    else if ((sl->req->p.max_tokens && made >= sl->req->p.max_tokens) || sl->seq.pos >= s->o.ctx)
        end_slot(s, sl, K3_FINISH_LENGTH, NULL);
}

static int step(struct k3_sched *s, struct k3_err *err)
{
    int n_logits, n = build_step(s, &n_logits);
    if (!n)
        return 0;
    const struct k3_forward_stats *fs = &k3_runtime_forward(s->rt)->stats;
    uint64_t decode_steps = fs->decode_steps;
    double t0 = k3_now();
    struct k3_step st = {.n = n, .tokens = s->tokens, .seq = s->seq, .want_logits = s->want,
                         .logits = s->logits};
    if (k3_runtime_step(s->rt, &st, err))
        return -1;
    for (int j = 0; j < n_logits; j++)
        take_token(s, &s->slots[s->owner[j]], s->logits + (size_t)j * k3_runtime_config(s->rt)->vocab);
    /* Copied here, on the thread that steps, so that a reader of the statistics (a
     * /metrics handler) never reads counters while a step writes them. */
    uint64_t experts = 0;
    for (int l = 0; l < k3_runtime_config(s->rt)->n_layers; l++)
        experts += fs->decode_experts[l];
    struct k3_runtime_snapshot snap = k3_runtime_snap(s->rt);
    double seconds = k3_now() - t0;
    pthread_mutex_lock(&s->lock);
    s->stats.steps++;
    s->stats.busy_seconds += seconds;
    if (fs->decode_steps > decode_steps) {
        s->stats.decode_seconds += seconds;
        s->stats.decode_read_bytes += snap.io.bytes - s->stats.io.bytes;
        s->stats.decode_stall_seconds += snap.io.stall_seconds - s->stats.io.stall_seconds;
    }
    memcpy(s->layer_experts, fs->decode_experts, sizeof(uint64_t) * (size_t)k3_runtime_config(s->rt)->n_layers);
    s->stats.decode_steps = fs->decode_steps;
    s->stats.decode_rows = fs->decode_rows;
    s->stats.decode_experts = experts;
    s->stats.io = snap.io;
    s->stats.store = k3_prompt_store_stats(s->store);
    s->stats.ranks = snap.ranks;
    pthread_mutex_unlock(&s->lock);
    return 0;
}

/* Nothing to run: sleep until a request arrives or a stop (checked every 100 ms, for the
 * signal flag). */
static void idle(struct k3_sched *s)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_nsec += 100000000;
    if (until.tv_nsec >= 1000000000) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000;
    }
    pthread_mutex_lock(&s->lock);
    if (!s->q_len && !s->stopping)
        pthread_cond_timedwait(&s->arrived, &s->lock, &until);
    pthread_mutex_unlock(&s->lock);
}

static int running(const struct k3_sched *s)
{
    int n = 0;
    for (int i = 0; i < s->o.parallel; i++)
        n += s->slots[i].state != SLOT_FREE;
    return n;
}

void k3_sched_run(struct k3_sched *s)
{
    struct k3_err e = {{0}}, *err = &e;
    for (;;) {
        if (s->o.stop_signal && *s->o.stop_signal)
            k3_sched_stop(s);
        pthread_mutex_lock(&s->lock);
        bool stop = s->stopping;
        pthread_mutex_unlock(&s->lock);
        drop_ended(s, stop);
        admit_queued(s, stop);
        int n = running(s);
        pthread_mutex_lock(&s->lock);
        s->stats.running = n;
        pthread_mutex_unlock(&s->lock);
        if (!n && stop)
            return;
        if (!n) {
            idle(s);
            continue;
        }
        /* A failed step (a read that failed on every copy) ends every running request with
         * its error: those in it, whose state it left half-updated, and those with no row
         * in it alike; the read path forgets the failure (it would fail every later step)
         * and the server serves on. */
        if (step(s, err)) {
            for (int i = 0; i < s->o.parallel; i++)
                if (s->slots[i].state != SLOT_FREE)
                    end_slot(s, &s->slots[i], K3_FINISH_ERROR, err->msg);
            k3_runtime_recover(s->rt);
        }
    }
}
