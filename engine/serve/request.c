#include "engine/serve/request.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

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
    r->submitted = now();
    r->refs = 1;
    XXH3_64bits_reset(r->hash);
    pthread_mutex_init(&r->lock, NULL);
    pthread_cond_init(&r->changed, NULL);
    return r;
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

int k3_request_wait(struct k3_request *r, int timeout_ms, struct k3_req_update *u)
{
    memset(u, 0, sizeof *u);
    struct timespec until;
    deadline_in(&until, timeout_ms);
    pthread_mutex_lock(&r->lock);
    int rc = 0;
    while (r->read == r->shown && r->finish == K3_FINISH_NONE && rc != ETIMEDOUT)
        rc = pthread_cond_timedwait(&r->changed, &r->lock, &until);
    size_t n = r->shown - r->read;
    if ((u->text = malloc(n + 1))) {
        if (n) /* no text yet: r->text is NULL */
            memcpy(u->text, r->text + r->read, n);
        u->text[n] = 0;
        u->len = n;
        r->read = r->shown;
    }
    u->finish = r->finish;
    u->prompt_tokens = r->n_prompt;
    u->completion_tokens = r->completion_tokens;
    u->cached_tokens = r->cached_tokens;
    u->logits_hash = r->finish ? XXH3_64bits_digest(r->hash) : 0;
    u->first_token_at = r->first_token_at;
    memcpy(u->error, r->error, sizeof u->error);
    pthread_mutex_unlock(&r->lock);
    return n || u->finish ? 0 : 1;
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

bool k3_request_add_token(struct k3_request *r, const uint8_t *bytes, size_t len,
                          const float *logits, int vocab)
{
    pthread_mutex_lock(&r->lock);
    XXH3_64bits_update(r->hash, logits, sizeof(float) * (size_t)vocab);
    if (!r->completion_tokens++)
        r->first_token_at = now() - r->submitted;
    bool stopped = false;
    if (len && reserve(r, K3_UTF8_OUT_MAX(len))) {
        size_t from = r->len;
        r->len += k3_utf8_push(&r->utf8, bytes, len, r->text + r->len);
        long at = find_stop(r, from);
        if (at >= 0) {
            r->len = (size_t)at;
            r->utf8.n_pending = 0; /* bytes after the stop string: dropped with it */
            stopped = true;
        }
        r->shown = stopped ? r->len : showable(r);
        r->text[r->len] = 0;
    }
    pthread_cond_broadcast(&r->changed);
    pthread_mutex_unlock(&r->lock);
    return stopped;
}

void k3_request_finish(struct k3_request *r, enum k3_finish f, const char *error)
{
    pthread_mutex_lock(&r->lock);
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
