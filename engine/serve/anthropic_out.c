/* An answer as Anthropic's Messages API writes it: the whole message, the server-sent
 * events of a streamed one (a state machine checked at every change, as buffer.c's),
 * and the error body. */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/serve/anthropic.h"
#include "engine/text/utf8.h"

/* ---- shared by both forms ---------------------------------------------------------- */

/* The part of the answer's id after its prefix: "chatcmpl-X" and "msg_X" give "X". */
static const char *id_tail(const char *id)
{
    if (!strncmp(id, "msg_", 4))
        return id + 4;
    const char *dash = strchr(id, '-');
    return dash ? dash + 1 : id;
}

/* The id of the answer's call n: unique, and the same in both forms of one answer. */
static json_t *tool_use_id(const struct k3_api_answer *a, int n)
{
    char id[96];
    snprintf(id, sizeof id, "toolu_%s_%d", id_tail(a->id), n);
    return json_string(id);
}

/* end_turn and tool_use both for an answer that ended by itself (a stop string too:
 * the answer does not say which ended it); max_tokens at the limit. */
static const char *stop_reason(enum k3_finish f, bool calls)
{
    if (f == K3_FINISH_STOP)
        return calls ? "tool_use" : "end_turn";
    return f == K3_FINISH_LENGTH ? "max_tokens" : NULL;
}

/* Anthropic counts the prompt's tokens read from a cache apart from input_tokens (the
 * prompt is their sum). */
static json_t *usage(const struct k3_api_answer *a)
{
    int fresh = a->prompt_tokens > a->cached_tokens ? a->prompt_tokens - a->cached_tokens : 0;
    return json_pack("{s:i, s:i, s:i}", "input_tokens", fresh, "output_tokens",
                     a->completion_tokens, "cache_read_input_tokens", a->cached_tokens);
}

/* The message without content blocks, as message_start carries it and the whole answer
 * fills in. */
static json_t *envelope(const struct k3_api_answer *a, const char *reason)
{
    char id[96];
    snprintf(id, sizeof id, "msg_%s", id_tail(a->id));
    return json_pack("{s:s, s:s, s:s, s:s, s:[], s:s?, s:n, s:o}", "id", id, "type", "message",
                     "role", "assistant", "model", a->model, "content", "stop_reason", reason,
                     "stop_sequence", "usage", usage(a));
}

static char *dump(json_t *v)
{
    char *s = v ? json_dumps(v, JSON_COMPACT) : NULL;
    json_decref(v);
    return s;
}

/* ---- the whole message ------------------------------------------------------------- */

/* calls[i] as a tool_use block; NULL when its arguments are not a JSON object. */
static json_t *tool_use_block(const struct k3_api_answer *a, int i)
{
    json_t *input = json_loads(a->calls[i].arguments, JSON_ALLOW_NUL, NULL);
    if (!json_is_object(input)) {
        json_decref(input);
        return NULL;
    }
    return json_pack("{s:s, s:o, s:s, s:o}", "type", "tool_use", "id",
                     tool_use_id(a, a->first_call + i), "name", a->calls[i].name, "input", input);
}

static json_t *content_blocks(const struct k3_api_answer *a)
{
    json_t *blocks = json_array();
    if (a->reasoning && a->reasoning_len)
        json_array_append_new(blocks, json_pack("{s:s, s:s%, s:s}", "type", "thinking", "thinking",
                                                a->reasoning, a->reasoning_len, "signature", ""));
    if (a->text_len)
        json_array_append_new(blocks, json_pack("{s:s, s:s%}", "type", "text", "text", a->text,
                                                a->text_len));
    for (int i = 0; i < a->n_calls; i++)
        json_array_append_new(blocks, tool_use_block(a, i));
    size_t want = (a->reasoning && a->reasoning_len) + (a->text_len > 0) + (size_t)a->n_calls;
    if (json_array_size(blocks) != want) { /* a block that could not be made */
        json_decref(blocks);
        return NULL;
    }
    return blocks;
}

char *k3_anthropic_message_json(const struct k3_api_answer *a)
{
    json_t *m = envelope(a, stop_reason(a->finish, a->calls_total > 0));
    json_t *blocks = m ? content_blocks(a) : NULL;
    if (!blocks || json_object_set_new(m, "content", blocks)) {
        json_decref(m);
        return NULL;
    }
    return dump(m);
}

/* ---- errors ------------------------------------------------------------------------ */

/* Anthropic's error type for an HTTP status. */
static const char *error_type(int status)
{
    switch (status) {
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 413: return "request_too_large";
    case 429: return "rate_limit_error";
    case 503: case 529: return "overloaded_error";
    case 504: return "timeout_error";
    }
    return status >= 500 ? "api_error" : "invalid_request_error";
}

/* s with each byte that starts no well-formed UTF-8 character made '?': a message that
 * quotes a client's text may have cut a character in two. */
static void utf8_mend(char *s)
{
    for (size_t n = strlen(s), i = 0; i < n;) {
        size_t k = k3_utf8_seq((const uint8_t *)s + i, n - i);
        if (!k)
            s[i] = '?';
        i += k ? k : 1;
    }
}

static json_t *error_body(const struct k3_api_error *e)
{
    char message[sizeof e->message];
    memcpy(message, e->message, sizeof message);
    message[sizeof message - 1] = 0;
    utf8_mend(message);
    return json_pack("{s:s, s:{s:s, s:s}}", "type", "error", "error", "type",
                     error_type(e->status), "message", message);
}

char *k3_anthropic_error_json(const struct k3_api_error *e)
{
    return dump(error_body(e));
}

/* ---- the stream -------------------------------------------------------------------- */

static bool legal(enum k3_anthropic_state from, enum k3_anthropic_state to)
{
    switch (from) {
    case K3_ANTHROPIC_NEW: return to == K3_ANTHROPIC_IDLE || to == K3_ANTHROPIC_ENDED;
    case K3_ANTHROPIC_IDLE:
        return to == K3_ANTHROPIC_THINKING || to == K3_ANTHROPIC_TEXT ||
               to == K3_ANTHROPIC_TOOL_USE || to == K3_ANTHROPIC_ENDED;
    /* closed, or an error with the block open (Anthropic's error event closes nothing) */
    case K3_ANTHROPIC_THINKING:
    case K3_ANTHROPIC_TEXT: return to == K3_ANTHROPIC_IDLE || to == K3_ANTHROPIC_ENDED;
    case K3_ANTHROPIC_TOOL_USE: return to == K3_ANTHROPIC_IDLE;
    case K3_ANTHROPIC_ENDED: return false;
    }
    return false;
}

static void stream_check(const struct k3_anthropic_stream *s)
{
    assert(s->calls >= 0 && s->calls <= s->blocks);
    switch (s->state) {
    case K3_ANTHROPIC_NEW:
        assert(s->blocks == 0);
        break;
    case K3_ANTHROPIC_THINKING:
    case K3_ANTHROPIC_TEXT: /* the open block is blocks - 1 */
        assert(s->blocks >= 1);
        break;
    case K3_ANTHROPIC_TOOL_USE: /* the open block is the last call's */
        assert(s->blocks >= 1 && s->calls >= 1);
        break;
    case K3_ANTHROPIC_IDLE:
    case K3_ANTHROPIC_ENDED:
        break;
    }
}

static void stream_set(struct k3_anthropic_stream *s, enum k3_anthropic_state to)
{
    assert(legal(s->state, to));
    s->state = to;
    stream_check(s);
}

/* Events being written; failed once any could not be. */
struct events {
    char *text; /* [cap] */
    size_t len, cap;
    bool failed;
};

static void event(struct events *ev, const char *name, json_t *data)
{
    char *json = dump(data);
    size_t n = json ? strlen("event: \ndata: \n\n") + strlen(name) + strlen(json) : 0;
    if (json && !ev->failed && ev->len + n + 1 > ev->cap) {
        size_t cap = ev->cap ? 2 * ev->cap : 512;
        while (cap < ev->len + n + 1)
            cap *= 2;
        char *grown = realloc(ev->text, cap);
        if (grown) {
            ev->text = grown;
            ev->cap = cap;
        }
    }
    if (!json || ev->len + n + 1 > ev->cap)
        ev->failed = true;
    else
        ev->len += (size_t)sprintf(ev->text + ev->len, "event: %s\ndata: %s\n\n", name, json);
    free(json);
}

static char *events_done(struct events *ev)
{
    if (!ev->failed && !ev->text)
        ev->text = calloc(1, 1);
    if (ev->failed) {
        free(ev->text);
        return NULL;
    }
    return ev->text;
}

/* content_block_start of a new block (index: the next one), which becomes the open one. */
static void block_start(struct k3_anthropic_stream *s, struct events *ev,
                        enum k3_anthropic_state kind, json_t *block)
{
    assert(s->state == K3_ANTHROPIC_IDLE);
    event(ev, "content_block_start", json_pack("{s:s, s:i, s:o}", "type", "content_block_start",
                                               "index", s->blocks, "content_block", block));
    s->blocks++;
    if (kind == K3_ANTHROPIC_TOOL_USE)
        s->calls++;
    stream_set(s, kind);
}

static void block_delta(struct k3_anthropic_stream *s, struct events *ev, json_t *delta)
{
    assert(s->state == K3_ANTHROPIC_THINKING || s->state == K3_ANTHROPIC_TEXT ||
           s->state == K3_ANTHROPIC_TOOL_USE);
    event(ev, "content_block_delta", json_pack("{s:s, s:i, s:o}", "type", "content_block_delta",
                                               "index", s->blocks - 1, "delta", delta));
}

/* The open block's content_block_stop (a thinking block's empty signature first, as
 * Anthropic signs one before closing it); nothing when none is open. */
static void block_stop(struct k3_anthropic_stream *s, struct events *ev)
{
    if (s->state == K3_ANTHROPIC_IDLE)
        return;
    if (s->state == K3_ANTHROPIC_THINKING)
        block_delta(s, ev, json_pack("{s:s, s:s}", "type", "signature_delta", "signature", ""));
    event(ev, "content_block_stop", json_pack("{s:s, s:i}", "type", "content_block_stop", "index",
                                              s->blocks - 1));
    stream_set(s, K3_ANTHROPIC_IDLE);
}

/* The open block, if it is of this kind; else a new one (the open one closed). */
static void block_of(struct k3_anthropic_stream *s, struct events *ev,
                     enum k3_anthropic_state kind)
{
    if (s->state == kind)
        return;
    block_stop(s, ev);
    json_t *block = kind == K3_ANTHROPIC_THINKING
                        ? json_pack("{s:s, s:s}", "type", "thinking", "thinking", "")
                        : json_pack("{s:s, s:s}", "type", "text", "text", "");
    block_start(s, ev, kind, block);
}

static void tool_use(struct k3_anthropic_stream *s, struct events *ev,
                     const struct k3_api_answer *a, int i)
{
    block_stop(s, ev);
    block_start(s, ev, K3_ANTHROPIC_TOOL_USE,
                json_pack("{s:s, s:o, s:s, s:{}}", "type", "tool_use", "id",
                          tool_use_id(a, a->first_call + i), "name", a->calls[i].name, "input"));
    block_delta(s, ev, json_pack("{s:s, s:s}", "type", "input_json_delta", "partial_json",
                                 a->calls[i].arguments));
    block_stop(s, ev);
}

char *k3_anthropic_stream_start(struct k3_anthropic_stream *s, const struct k3_api_answer *a)
{
    struct events ev = {0};
    event(&ev, "message_start", json_pack("{s:s, s:o}", "type", "message_start", "message",
                                          envelope(a, NULL)));
    stream_set(s, K3_ANTHROPIC_IDLE);
    return events_done(&ev);
}

/* message_delta's usage: the whole answer's counts (cumulative, as Anthropic's are), so
 * the prompt store's share, known only once the prompt ran, arrives too. */
static void message_end(struct k3_anthropic_stream *s, struct events *ev,
                        const struct k3_api_answer *a)
{
    block_stop(s, ev);
    event(ev, "message_delta",
          json_pack("{s:s, s:{s:s?, s:n}, s:o}", "type", "message_delta", "delta", "stop_reason",
                    stop_reason(a->finish, s->calls > 0), "stop_sequence", "usage", usage(a)));
    event(ev, "message_stop", json_pack("{s:s}", "type", "message_stop"));
    stream_set(s, K3_ANTHROPIC_ENDED);
}

char *k3_anthropic_stream_update(struct k3_anthropic_stream *s, const struct k3_api_answer *a)
{
    assert(s->state != K3_ANTHROPIC_NEW && s->state != K3_ANTHROPIC_ENDED);
    assert(a->finish != K3_FINISH_ERROR);
    assert(!a->n_calls || a->first_call == s->calls); /* calls come in order, none twice */
    struct events ev = {0};
    if (a->reasoning && a->reasoning_len) {
        block_of(s, &ev, K3_ANTHROPIC_THINKING);
        block_delta(s, &ev, json_pack("{s:s, s:s%}", "type", "thinking_delta", "thinking",
                                      a->reasoning, a->reasoning_len));
    }
    if (a->text_len) {
        block_of(s, &ev, K3_ANTHROPIC_TEXT);
        block_delta(s, &ev, json_pack("{s:s, s:s%}", "type", "text_delta", "text", a->text,
                                      a->text_len));
    }
    for (int i = 0; i < a->n_calls; i++)
        tool_use(s, &ev, a, i);
    if (a->finish != K3_FINISH_NONE)
        message_end(s, &ev, a);
    return events_done(&ev);
}

char *k3_anthropic_stream_error(struct k3_anthropic_stream *s, const struct k3_api_error *e)
{
    struct events ev = {0};
    event(&ev, "error", error_body(e));
    stream_set(s, K3_ANTHROPIC_ENDED);
    return events_done(&ev);
}
