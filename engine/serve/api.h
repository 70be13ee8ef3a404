/* The OpenAI API's bodies, as `serve` reads and writes them.
 *
 * Owns: parsing and validating a /v1/chat/completions or /v1/completions body into the
 * prompt's token ids and the generation's parameters, every refusal as an OpenAI error
 * (status, type, the param at fault, code); the JSON written back: a completion, a
 * streamed chunk, the model list, an error.  Pure: no sockets, no threads.
 * Does not own: HTTP (http.c), decoding (sched.h), the chat markup (text/chat.h).
 */
#ifndef K3_SERVE_API_H
#define K3_SERVE_API_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "engine/serve/request.h"
#include "engine/text/tokenizer.h"

#define K3_API_MAX_STOP_BYTES 256 /* a stop string's length, at most (each token scans it) */

enum k3_api_kind { K3_API_CHAT, K3_API_COMPLETION };

/* A refusal: the HTTP status and the body's fields. */
struct k3_api_error {
    int status;
    const char *type;  /* "invalid_request_error", "server_error", ... */
    const char *code;  /* "model_not_found", ... or NULL */
    char param[96];    /* the field at fault ("messages[1].content"), or "" */
    char message[512];
};

/* What requests are checked against. */
struct k3_api_model {
    const char *id;                  /* the served model's name */
    const struct k3_tokenizer *tok;
    int vocab;
    int ctx;                         /* positions a sequence holds */
    int default_max_tokens;          /* when a request sets none; 0: until the context is full */
};

struct k3_grammar;

struct k3_api_request {
    enum k3_api_kind kind;
    bool stream, include_usage, logits_hash;
    int32_t *prompt;                 /* [n_prompt] malloc'd */
    int n_prompt;
    struct k3_gen_params p;          /* its stop strings are owned until handed to a request */
    /* a chat's (api_chat.h) */
    bool thinking;                   /* the prompt opened a think channel */
    bool keep_calls;                 /* tool calls are answered (tool_choice is not "none") */
    struct k3_grammar *grammar;      /* owned until handed to a request; NULL: free answer */
};

/* Parses body (len bytes, not NUL-terminated).  0, or -1 with e filled (out then holds
 * nothing to free). */
int k3_api_parse(const struct k3_api_model *m, enum k3_api_kind kind, const char *body,
                 size_t len, struct k3_api_request *out, struct k3_api_error *e);
/* The prompt a chat body renders to (llama-server's /apply-template): {"prompt": TEXT},
 * malloc'd; NULL with e filled. */
char *k3_api_apply_template(const struct k3_api_model *m, const char *body, size_t len,
                            struct k3_api_error *e);
/* Frees what the request still owns (prompt, stop strings, grammar not handed over). */
void k3_api_request_free(struct k3_api_request *r);

/* Fills e; returns -1.  param may be NULL. */
__attribute__((format(printf, 5, 6))) int k3_api_errorf(struct k3_api_error *e, int status,
                                                       const char *type, const char *param,
                                                       const char *fmt, ...);

/* The JSON bodies, malloc'd and NUL-terminated; NULL when out of memory. */
char *k3_api_error_json(const struct k3_api_error *e);
char *k3_api_models_json(const char *model, time_t created);

/* One answer, whole or a streamed piece of it. */
struct k3_api_answer {
    enum k3_api_kind kind;
    const char *id;                  /* "chatcmpl-..." or "cmpl-..." */
    time_t created;
    const char *model;
    const char *text;                /* the text (a piece of it in a chunk); may hold NULs */
    size_t text_len;
    const char *reasoning;           /* a chat's reasoning (a piece of it), or NULL */
    size_t reasoning_len;
    const struct k3_tool_call *calls;/* tool calls (new ones in a chunk) */
    int n_calls, first_call;         /* calls[0] is the answer's call first_call */
    int calls_total;                 /* in the whole answer so far: finish_reason "tool_calls" */
    enum k3_finish finish;           /* NONE: a chunk before the end */
    int prompt_tokens, completion_tokens;
    int cached_tokens;               /* of the prompt, resumed from the prompt store */
    bool with_hash;
    uint64_t logits_hash;
};
/* A non-streaming body: the whole text, finish_reason, usage (and logits_hash). */
char *k3_api_response_json(const struct k3_api_answer *a);
/* A streamed chunk: a delta of a->text (the first chat chunk also carries the role,
 * first), finish_reason null until a->finish, logits_hash on the final one. */
char *k3_api_chunk_json(const struct k3_api_answer *a, bool first);
/* The closing chunk of stream_options.include_usage: no choices, the usage. */
char *k3_api_usage_chunk_json(const struct k3_api_answer *a);

/* "stop" or "length"; NULL for none. */
const char *k3_api_finish_reason(enum k3_finish f);

#endif
