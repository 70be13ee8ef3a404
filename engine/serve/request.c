#include "engine/serve/request.h"

#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/base/clock.h"
#include "engine/grammar/grammar.h"
#include "engine/text/xtml_out.h"

struct k3_request *k3_request_new(const int32_t *prompt, int n, const struct k3_gen_params *p)
{
    struct k3_request *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    r->prompt = malloc(sizeof(int32_t) * (size_t)(n > 0 ? n : 1));
    r->hash = XXH3_createState();
    struct k3_logit_bias *bias = p->n_bias ? malloc(sizeof *bias * (size_t)p->n_bias) : NULL;
    if (!r->prompt || !r->hash || (p->n_bias && !bias)) {
        free(bias);
        free(r->prompt);
        XXH3_freeState(r->hash);
        free(r);
        return NULL;
    }
    memcpy(r->prompt, prompt, sizeof(int32_t) * (size_t)n);
    r->n_prompt = n;
    r->p = *p;
    if (bias)
        memcpy(bias, p->bias, sizeof *bias * (size_t)p->n_bias);
    r->p.bias = bias;
    r->submitted = k3_now();
    r->refs = 1;
    XXH3_64bits_reset(r->hash);
    pthread_mutex_init(&r->lock, NULL);
    pthread_cond_init(&r->changed, NULL);
    return r;
}

int k3_request_split_chat(struct k3_request *r, const struct k3_tokenizer *tok, bool thinking,
                          bool keep_calls, struct k3_err *err)
{
    r->keep_calls = keep_calls;
    return k3_xtml_out_new(tok, thinking, &r->xtml, err);
}

int k3_request_constrain(struct k3_request *r, struct k3_grammar *g,
                         const struct k3_tokenizer *tok, struct k3_err *err)
{
    r->grammar = g;
    return k3_matcher_new(g, tok, &r->matcher, err);
}

void k3_request_retain(struct k3_request *r)
{
    pthread_mutex_lock(&r->lock);
    r->refs++;
    pthread_mutex_unlock(&r->lock);
}

void k3_request_release(struct k3_request *r)
{
    pthread_mutex_lock(&r->lock);
    int left = --r->refs;
    pthread_mutex_unlock(&r->lock);
    if (left)
        return;
    for (int i = 0; i < K3_MAX_STOPS; i++)
        free(r->p.stop[i]);
    free(r->prompt);
    free(r->p.bias);
    free(r->text);
    free(r->reasoning);
    k3_tool_calls_free(r->calls, r->n_calls);
    k3_xtml_out_free(r->xtml);
    k3_matcher_free(r->matcher);
    k3_grammar_free(r->grammar);
    XXH3_freeState(r->hash);
    pthread_mutex_destroy(&r->lock);
    pthread_cond_destroy(&r->changed);
    free(r);
}

/* ---- the handler's side ---------------------------------------------------------- */

static void deadline_in(struct timespec *ts, int ms)
{
    clock_gettime(CLOCK_REALTIME, ts);
    ts->tv_sec += ms / 1000;
    ts->tv_nsec += (long)(ms % 1000) * 1000000;
    if (ts->tv_nsec >= 1000000000) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000;
    }
}

static bool unread(const struct k3_request *r)
{
    return r->read != r->shown || r->reasoning_read != r->reasoning_len ||
           r->calls_read != r->n_calls;
}

static void take_reasoning(struct k3_request *r, struct k3_req_update *u)
{
    size_t n = r->reasoning_len - r->reasoning_read;
    if (n && (u->reasoning = malloc(n + 1))) {
        memcpy(u->reasoning, r->reasoning + r->reasoning_read, n);
        u->reasoning[n] = 0;
        u->reasoning_len = n;
        r->reasoning_read = r->reasoning_len;
    }
}

static char *copy(const char *s)
{
    return s ? strdup(s) : NULL;
}

static void take_calls(struct k3_request *r, struct k3_req_update *u)
{
    int n = r->n_calls - r->calls_read;
    if (!n || !(u->calls = calloc((size_t)n, sizeof *u->calls)))
        return;
    u->first_call = r->calls_read;
    for (int i = 0; i < n; i++) {
        const struct k3_tool_call *c = &r->calls[r->calls_read + i];
        u->calls[i] = (struct k3_tool_call){copy(c->name), copy(c->arguments)};
    }
    u->n_calls = n;
    r->calls_read = r->n_calls;
}

void k3_tool_calls_free(struct k3_tool_call *calls, int n)
{
    for (int i = 0; i < n; i++) {
        free(calls[i].name);
        free(calls[i].arguments);
    }
    free(calls);
}

void k3_req_update_free(struct k3_req_update *u)
{
    free(u->text);
    free(u->reasoning);
    k3_tool_calls_free(u->calls, u->n_calls);
    u->text = u->reasoning = NULL;
    u->calls = NULL;
    u->len = u->reasoning_len = 0;
    u->n_calls = 0;
}

int k3_request_wait(struct k3_request *r, int timeout_ms, struct k3_req_update *u)
{
    memset(u, 0, sizeof *u);
    struct timespec until;
    deadline_in(&until, timeout_ms);
    pthread_mutex_lock(&r->lock);
    int rc = 0;
    while (!unread(r) && r->finish == K3_FINISH_NONE && rc != ETIMEDOUT)
        rc = pthread_cond_timedwait(&r->changed, &r->lock, &until);
    size_t n = r->shown - r->read;
    if ((u->text = malloc(n + 1))) {
        if (n) /* no text yet: r->text is NULL */
            memcpy(u->text, r->text + r->read, n);
        u->text[n] = 0;
        u->len = n;
        r->read = r->shown;
    }
    take_reasoning(r, u);
    take_calls(r, u);
    u->call_dropped = r->call_dropped;
    u->finish = r->finish;
    u->prompt_tokens = r->n_prompt;
    u->completion_tokens = r->completion_tokens;
    u->cached_tokens = r->cached_tokens;
    u->logits_hash = r->finish ? XXH3_64bits_digest(r->hash) : 0;
    u->first_token_at = r->first_token_at;
    memcpy(u->error, r->error, sizeof u->error);
    pthread_mutex_unlock(&r->lock);
    return n || u->reasoning_len || u->n_calls || u->finish ? 0 : 1;
}

void k3_request_cancel(struct k3_request *r)
{
    pthread_mutex_lock(&r->lock);
    r->cancelled = true;
    pthread_mutex_unlock(&r->lock);
}

/* ---- the scheduler's side -------------------------------------------------------- */

bool k3_request_cancelled(struct k3_request *r)
{
    pthread_mutex_lock(&r->lock);
    bool c = r->cancelled;
    pthread_mutex_unlock(&r->lock);
    return c;
}

static bool reserve(struct k3_request *r, size_t more)
{
    if (r->len + more + 1 <= r->cap)
        return true;
    size_t cap = r->cap ? r->cap : 256;
    while (cap < r->len + more + 1)
        cap *= 2;
    char *t = realloc(r->text, cap);
    if (!t)
        return false;
    r->text = t;
    r->cap = cap;
    return true;
}

/* The first stop string in the text that may have changed since from; its offset or -1. */
static long find_stop(const struct k3_request *r, size_t from)
{
    long best = -1;
    for (int i = 0; i < K3_MAX_STOPS && r->p.stop[i]; i++) {
        size_t n = strlen(r->p.stop[i]);
        size_t start = from > n ? from - n : 0;
        const char *at = memmem(r->text + start, r->len - start, r->p.stop[i], n);
        if (at && (best < 0 || at - r->text < best))
            best = at - r->text;
    }
    return best;
}

/* The text that can no longer become part of a stop string: all but the longest tail
 * that is a proper prefix of one. */
static size_t showable(const struct k3_request *r)
{
    size_t hold = 0;
    for (int i = 0; i < K3_MAX_STOPS && r->p.stop[i]; i++) {
        size_t n = strlen(r->p.stop[i]);
        for (size_t k = n ? n - 1 : 0; k > hold; k--)
            if (k <= r->len && !memcmp(r->text + r->len - k, r->p.stop[i], k)) {
                hold = k;
                break;
            }
    }
    return r->len - hold;
}

void k3_request_set_cached(struct k3_request *r, int n)
{
    pthread_mutex_lock(&r->lock);
    r->cached_tokens = n;
    pthread_mutex_unlock(&r->lock);
}

/* Text for the handler: stop strings cut it, and what may still become one is held back. */
static bool add_text(struct k3_request *r, const char *bytes, size_t len)
{
    if (!len || !reserve(r, K3_UTF8_OUT_MAX(len)))
        return false;
    size_t from = r->len;
    r->len += k3_utf8_push(&r->utf8, (const uint8_t *)bytes, len, r->text + r->len);
    long at = find_stop(r, from);
    bool stopped = at >= 0;
    if (stopped) {
        r->len = (size_t)at;
        r->utf8.n_pending = 0; /* bytes after the stop string: dropped with it */
    }
    r->shown = stopped ? r->len : showable(r);
    r->text[r->len] = 0;
    return stopped;
}

static void add_reasoning(struct k3_request *r, const char *text, size_t len)
{
    if (r->reasoning_len + len + 1 > r->reasoning_cap) {
        size_t cap = r->reasoning_cap ? r->reasoning_cap : 256;
        while (cap < r->reasoning_len + len + 1)
            cap *= 2;
        char *grown = realloc(r->reasoning, cap);
        if (!grown)
            return;
        r->reasoning = grown;
        r->reasoning_cap = cap;
    }
    memcpy(r->reasoning + r->reasoning_len, text, len);
    r->reasoning_len += len;
    r->reasoning[r->reasoning_len] = 0;
}

static void add_call(struct k3_request *r, const char *name, const char *arguments)
{
    if (!r->keep_calls)
        return;
    if (r->n_calls == r->calls_cap) {
        int cap = r->calls_cap ? 2 * r->calls_cap : 4;
        struct k3_tool_call *grown = realloc(r->calls, (size_t)cap * sizeof *grown);
        if (!grown)
            return;
        r->calls = grown;
        r->calls_cap = cap;
    }
    struct k3_tool_call c = {copy(name), copy(arguments)};
    if (!c.name || !c.arguments) {
        free(c.name);
        free(c.arguments);
        return;
    }
    r->calls[r->n_calls++] = c;
}

struct channel_sink {
    struct k3_request *r;
    bool stopped;
};

static void on_channel(const struct k3_xtml_event *ev, void *ctx)
{
    struct channel_sink *sink = ctx;
    switch (ev->kind) {
    case K3_XTML_REASONING:
        add_reasoning(sink->r, ev->text, ev->len);
        break;
    case K3_XTML_CONTENT:
        sink->stopped |= add_text(sink->r, ev->text, ev->len);
        break;
    case K3_XTML_TOOL_CALL:
        add_call(sink->r, ev->name, ev->arguments);
        break;
    }
}

bool k3_request_add_token(struct k3_request *r, int32_t id, const uint8_t *bytes, size_t len,
                          const float *logits, int vocab)
{
    pthread_mutex_lock(&r->lock);
    assert(r->finish == K3_FINISH_NONE); /* no token after the end */
    XXH3_64bits_update(r->hash, logits, sizeof(float) * (size_t)vocab);
    if (!r->completion_tokens++)
        r->first_token_at = k3_now() - r->submitted;
    struct channel_sink sink = {r, false};
    if (r->xtml)
        k3_xtml_out_feed(r->xtml, id, on_channel, &sink);
    else
        sink.stopped = add_text(r, (const char *)bytes, len);
    pthread_cond_broadcast(&r->changed);
    pthread_mutex_unlock(&r->lock);
    return sink.stopped;
}

void k3_request_finish(struct k3_request *r, enum k3_finish f, const char *error)
{
    pthread_mutex_lock(&r->lock);
    /* A request finishes once, with a reason: only the scheduler ends requests, so a
     * second end is its bug (a debug invariant, docs/design.md), never a client's doing. */
    assert(f != K3_FINISH_NONE && r->finish == K3_FINISH_NONE);
    if (r->xtml && f != K3_FINISH_ERROR) {
        struct channel_sink sink = {r, false};
        struct k3_xtml_end end;
        k3_xtml_out_finish(r->xtml, on_channel, &sink, &end);
        r->call_dropped = end.call_dropped;
    }
    if (f != K3_FINISH_ERROR && reserve(r, 8)) { /* a character cut off at the end */
        r->len += k3_utf8_flush(&r->utf8, r->text + r->len);
        r->text[r->len] = 0;
    }
    r->shown = r->len;
    r->finish = f;
    if (error)
        snprintf(r->error, sizeof r->error, "%s", error);
    pthread_cond_broadcast(&r->changed);
    pthread_mutex_unlock(&r->lock);
}
