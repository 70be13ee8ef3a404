/* A generation request as the scheduler and an HTTP handler share it.
 *
 * Owns: what the request asks (prompt ids, sampling, limits, stop strings), the text it
 * has produced so far with the part that may still turn into a stop string held back,
 * its end (finish reason, counts, error), cancellation, and the hand-off between the
 * scheduler's thread (which appends) and the handler's (which waits and reads).  A
 * request lives until both sides have released it.
 * Invariants: a request finishes once, with a reason (STOP, LENGTH or ERROR), and takes
 * no token after it; both are asserted.
 * Does not own: decoding steps (sched.h), HTTP (serve/http.c).
 */
#ifndef K3_SERVE_REQUEST_H
#define K3_SERVE_REQUEST_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <xxhash.h>

#include "engine/base/err.h"
#include "engine/forward/sampler.h"
#include "engine/text/tokenizer.h"

#define K3_MAX_STOPS 4

struct k3_xtml_out;
struct k3_grammar;
struct k3_matcher;

struct k3_gen_params {
    int max_tokens;           /* 0: until the context is full */
    float temperature;        /* 0: greedy */
    float top_p;              /* 1: off */
    int top_k;                /* 0: off */
    uint64_t seed;
    char *stop[K3_MAX_STOPS]; /* owned; NULL-terminated when fewer */
    bool ignore_eos;          /* llama-server's extension: end of message does not end it */
    bool cache_prompt;        /* llama-server's: resume from a stored prompt state, and store
                               * this one's (serve/prompt_store.h) */
    struct k3_logit_bias *bias; /* [n_bias] OpenAI's logit_bias (k3_request_new copies it) */
    int n_bias;
    float presence_penalty, frequency_penalty; /* OpenAI's, over the tokens sampled */
};

enum k3_finish { K3_FINISH_NONE, K3_FINISH_STOP, K3_FINISH_LENGTH, K3_FINISH_ERROR };

/* A complete tool call of a chat's answer, as OpenAI's message carries it. */
struct k3_tool_call {
    char *name;
    char *arguments;          /* a JSON object, as text */
};

/* Frees calls[0..n) and their strings. */
void k3_tool_calls_free(struct k3_tool_call *calls, int n);

/* What a handler reads: new text since its last read, and the end once it came.  A
 * chat's answer comes split into K3's channels: reasoning, content (text) and calls. */
struct k3_req_update {
    char *text;               /* malloc'd, may be empty; NUL-terminated */
    size_t len;
    char *reasoning;          /* malloc'd new reasoning, NUL-terminated, or NULL */
    size_t reasoning_len;
    struct k3_tool_call *calls; /* malloc'd copies of the calls completed since the last read */
    int n_calls, first_call;  /* calls[0] is the answer's call number first_call */
    bool call_dropped;        /* at the end: a call was cut off (never closed) and dropped */
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
    /* a chat's answer in K3's channels (k3_request_split_chat), or NULL: all text */
    struct k3_xtml_out *xtml;
    bool keep_calls;                  /* tool_choice none: calls are parsed and dropped */
    char *reasoning;                  /* [reasoning_cap] */
    size_t reasoning_len, reasoning_cap, reasoning_read;
    struct k3_tool_call *calls;       /* [calls_cap] */
    int n_calls, calls_cap, calls_read;
    bool call_dropped;
    /* constrained decoding (k3_request_constrain), or NULL: every token allowed */
    struct k3_grammar *grammar;
    struct k3_matcher *matcher;
};

/* A request of n prompt ids (copied), with one reference (the caller's); params' stop
 * strings are taken over, its logit biases copied. */
struct k3_request *k3_request_new(const int32_t *prompt, int n, const struct k3_gen_params *p);
/* The answer is a chat's, after a generation prompt that opened a think channel
 * (thinking) or a response one: split it into reasoning, content and tool calls
 * (keep_calls false: calls are parsed and dropped, as tool_choice "none" asks). */
int k3_request_split_chat(struct k3_request *r, const struct k3_tokenizer *tok, bool thinking,
                          bool keep_calls, struct k3_err *err);
/* The answer must stay inside grammar g (taken over, freed with the request). */
int k3_request_constrain(struct k3_request *r, struct k3_grammar *g,
                         const struct k3_tokenizer *tok, struct k3_err *err);
void k3_request_retain(struct k3_request *r);
void k3_request_release(struct k3_request *r);

/* Handler side. */
/* Waits up to timeout_ms for new text or the end; fills u (u->text to be freed).  0: got
 * something (maybe only the end), 1: timed out with nothing new. */
int k3_request_wait(struct k3_request *r, int timeout_ms, struct k3_req_update *u);
void k3_request_cancel(struct k3_request *r);
/* Frees what an update holds. */
void k3_req_update_free(struct k3_req_update *u);

/* Scheduler side. */
/* A generated token: its id, its bytes (none for a special token) and the logit row it
 * was drawn from.  Returns true when a stop string ended the text (the text is cut
 * before it). */
bool k3_request_add_token(struct k3_request *r, int32_t id, const uint8_t *bytes, size_t len,
                          const float *logits, int vocab);
/* The end, once: f is not K3_FINISH_NONE, and the request had not finished. */
void k3_request_finish(struct k3_request *r, enum k3_finish f, const char *error);
/* n prompt tokens were resumed from a stored state, not computed. */
void k3_request_set_cached(struct k3_request *r, int n);
bool k3_request_cancelled(struct k3_request *r);

#endif
