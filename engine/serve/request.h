/* A generation request as the scheduler and an HTTP handler share it.
 *
 * Owns: what the request asks (prompt ids, sampling, limits, stop strings), the text it
 * has produced so far with the part that may still turn into a stop string held back,
 * its end (finish reason, counts, error), cancellation, and the hand-off between the
 * scheduler's thread (which appends) and the handler's (which waits and reads).  A
 * request lives until both sides have released it.
 * Does not own: decoding steps (sched.h), HTTP (serve/http.c).
 */
#ifndef K3_SERVE_REQUEST_H
#define K3_SERVE_REQUEST_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <xxhash.h>

#include "engine/forward/sampler.h"
#include "engine/text/tokenizer.h"

#define K3_MAX_STOPS 4

struct k3_gen_params {
    int max_tokens;           /* 0: until the context is full */
    float temperature;        /* 0: greedy */
    float top_p;              /* 1: off */
    int top_k;                /* 0: off */
    uint64_t seed;
    char *stop[K3_MAX_STOPS]; /* owned; NULL-terminated when fewer */
    bool stop_at_close;       /* <|close|> ends the text (a chat response element) */
    bool ignore_eos;          /* llama-server's extension: neither end of message nor the
                               * close of a chat's response ends it */
    bool cache_prompt;        /* llama-server's: resume from a stored prompt state, and store
                               * this one's (serve/prompt_store.h) */
    struct k3_logit_bias *bias; /* [n_bias] OpenAI's logit_bias (k3_request_new copies it) */
    int n_bias;
    float presence_penalty, frequency_penalty; /* OpenAI's, over the tokens sampled */
};

enum k3_finish { K3_FINISH_NONE, K3_FINISH_STOP, K3_FINISH_LENGTH, K3_FINISH_ERROR };

/* What a handler reads: new text since its last read, and the end once it came. */
struct k3_req_update {
    char *text;               /* malloc'd, may be empty; NUL-terminated */
    size_t len;
    enum k3_finish finish;    /* NONE while running */
    int prompt_tokens, completion_tokens;
    int cached_tokens;        /* prompt tokens resumed from the prompt store, not computed */
    uint64_t logits_hash;     /* XXH3-64 over every logit row a token was drawn from */
    double first_token_at;    /* seconds from submission to the first token, or 0 */
    char error[256];
};

struct k3_request {
    /* set at creation, read-only after */
    int32_t *prompt;
    int n_prompt;
    struct k3_gen_params p;
    double submitted;                 /* monotonic seconds */

    pthread_mutex_t lock;
    pthread_cond_t changed;
    int refs;                         /* the handler's, and the scheduler's once queued */
    bool cancelled;                   /* the client went away */
    /* written by the scheduler under lock */
    char *text;                       /* [cap] generated text, stop strings cut */
    size_t len, cap, shown;           /* shown: what may be read (not a stop's prefix) */
    size_t read;                      /* what the handler has taken */
    struct k3_utf8_stream utf8;
    int completion_tokens;
    int cached_tokens;
    enum k3_finish finish;
    char error[256];
    XXH3_state_t *hash;               /* over every logit row drawn from */
    double first_token_at;
};

/* A request of n prompt ids (copied), with one reference (the caller's); params' stop
 * strings are taken over, its logit biases copied. */
struct k3_request *k3_request_new(const int32_t *prompt, int n, const struct k3_gen_params *p);
void k3_request_retain(struct k3_request *r);
void k3_request_release(struct k3_request *r);

/* Handler side. */
/* Waits up to timeout_ms for new text or the end; fills u (u->text to be freed).  0: got
 * something (maybe only the end), 1: timed out with nothing new. */
int k3_request_wait(struct k3_request *r, int timeout_ms, struct k3_req_update *u);
void k3_request_cancel(struct k3_request *r);

/* Scheduler side. */
/* A generated token: its bytes (none for a special token) and the logit row it was drawn
 * from.  Returns true when a stop string ended the text (the text is cut before it). */
bool k3_request_add_token(struct k3_request *r, const uint8_t *bytes, size_t len,
                          const float *logits, int vocab);
void k3_request_finish(struct k3_request *r, enum k3_finish f, const char *error);
/* n prompt tokens were resumed from a stored state, not computed. */
void k3_request_set_cached(struct k3_request *r, int n);
bool k3_request_cancelled(struct k3_request *r);

#endif
