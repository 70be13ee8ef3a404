#include "engine/serve/sse.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Appends fmt (one %s) with json in it; -1 when json is NULL or out of memory. */
static int emit(struct k3_sse *s, const char *fmt, const char *json)
{
    if (!json)
        return -1;
    size_t n = strlen(fmt) - 2 + strlen(json);
    if (s->len + n + 1 > s->cap) {
        size_t cap = s->cap ? s->cap : 1024;
        while (cap < s->len + n + 1)
            cap *= 2;
        char *out = realloc(s->out, cap);
        if (!out)
            return -1;
        s->out = out;
        s->cap = cap;
    }
    s->len += (size_t)sprintf(s->out + s->len, fmt, json);
    return 0;
}

static int emit_chunk(struct k3_sse *s, bool first)
{
    char *json = k3_api_chunk_json(&s->a, first);
    int rc = emit(s, "data: %s\n\n", json);
    free(json);
    return rc;
}

/* The answer's new pieces from an update. */
static void take_update(struct k3_api_answer *a, const struct k3_req_update *u)
{
    a->text = u->text;
    a->text_len = u->len;
    a->reasoning = u->reasoning;
    a->reasoning_len = u->reasoning_len;
    a->calls = u->calls;
    a->n_calls = u->n_calls;
    a->first_call = u->first_call;
    a->calls_total += u->n_calls;
    a->prompt_tokens = u->prompt_tokens;
    a->completion_tokens = u->completion_tokens;
    a->cached_tokens = u->cached_tokens;
    a->finish = K3_FINISH_NONE;
}

static int emit_error(struct k3_sse *s, const char *message)
{
    snprintf(s->error, sizeof s->error, "%s", message);
    struct k3_api_error e;
    k3_api_errorf(&e, 500, "server_error", NULL, "%s", message);
    char *text = s->anthropic ? k3_anthropic_stream_error(s->anthropic, &e) : NULL;
    if (s->anthropic) {
        int rc = emit(s, "%s", text);
        free(text);
        return rc;
    }
    char *json = k3_api_error_json(&e);
    int rc = emit(s, "data: %s\n\n", json);
    free(json);
    return rc;
}

/* OpenAI's chunks for one update: the new pieces, then at the end the final chunk (with
 * the logits hash), the usage chunk when asked, and [DONE]. */
static int openai_events(struct k3_sse *s, const struct k3_req_update *u)
{
    int rc = 0;
    if (u->len || u->reasoning_len || u->n_calls)
        rc = emit_chunk(s, false);
    if (rc || !u->finish)
        return rc;
    s->a.text = "";
    s->a.text_len = 0;
    s->a.reasoning_len = 0;
    s->a.n_calls = 0;
    s->a.finish = u->finish;
    s->a.logits_hash = u->logits_hash;
    rc = emit_chunk(s, false);
    if (!rc && s->include_usage) {
        char *json = k3_api_usage_chunk_json(&s->a);
        rc = emit(s, "data: %s\n\n", json);
        free(json);
    }
    return rc ? rc : emit(s, "%s", "data: [DONE]\n\n");
}

/* Anthropic's events for one update: blocks for the new pieces; at the end message_delta
 * and message_stop. */
static int anthropic_events(struct k3_sse *s, const struct k3_req_update *u)
{
    s->a.finish = u->finish;
    s->a.logits_hash = u->logits_hash;
    char *text = k3_anthropic_stream_update(s->anthropic, &s->a);
    int rc = emit(s, "%s", text);
    free(text);
    return rc;
}

int k3_sse_init(struct k3_sse *s, struct k3_api_answer a, bool include_usage, bool anthropic)
{
    *s = (struct k3_sse){.a = a, .include_usage = include_usage};
    if (anthropic && !(s->anthropic = calloc(1, sizeof *s->anthropic)))
        return -1;
    return 0;
}

int k3_sse_first(struct k3_sse *s)
{
    s->len = 0;
    if (!s->anthropic)
        return emit_chunk(s, true);
    char *text = k3_anthropic_stream_start(s->anthropic, &s->a);
    int rc = emit(s, "%s", text);
    free(text);
    return rc;
}

int k3_sse_update(struct k3_sse *s, const struct k3_req_update *u)
{
    s->len = 0;
    take_update(&s->a, u);
    s->ended = u->finish != K3_FINISH_NONE;
    if (u->finish != K3_FINISH_ERROR)
        return s->anthropic ? anthropic_events(s, u) : openai_events(s, u);
    struct k3_req_update pieces = *u;
    pieces.finish = K3_FINISH_NONE;
    int rc = s->anthropic ? anthropic_events(s, &pieces) : openai_events(s, &pieces);
    return rc ? rc : emit_error(s, u->error);
}

void k3_sse_free(struct k3_sse *s)
{
    free(s->anthropic);
    free(s->out);
}
