#include "engine/serve/api.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include <jansson.h>

#include "engine/grammar/grammar.h"
#include "engine/serve/api_chat.h"
#include "engine/serve/fields.h"

#define INVALID "invalid_request_error"

int k3_api_errorf(struct k3_api_error *e, int status, const char *type, const char *param,
                  const char *fmt, ...)
{
    e->status = status;
    e->type = type;
    e->code = NULL;
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    return -1;
}

/* ---- invalid UTF-8: which field ------------------------------------------------- */

/* Length of the well-formed UTF-8 sequence at s (n bytes left), or 0 (RFC 3629: no
 * overlongs, no surrogates, nothing past U+10FFFF). */
static size_t utf8_seq(const unsigned char *s, size_t n)
{
    if (s[0] < 0x80)
        return 1;
    size_t len = s[0] >= 0xF0 ? 4 : s[0] >= 0xE0 ? 3 : s[0] >= 0xC2 ? 2 : 0;
    if (!len || s[0] > 0xF4 || len > n)
        return 0;
    for (size_t i = 1; i < len; i++)
        if ((s[i] & 0xC0) != 0x80)
            return 0;
    if ((s[0] == 0xE0 && s[1] < 0xA0) || (s[0] == 0xED && s[1] > 0x9F) ||
        (s[0] == 0xF0 && s[1] < 0x90) || (s[0] == 0xF4 && s[1] > 0x8F))
        return 0;
    return len;
}

/* body with each byte that starts no well-formed sequence replaced by U+FFFD. */
static char *utf8_repaired(const char *body, size_t len, size_t *out_len)
{
    char *out = malloc(3 * len + 1);
    size_t o = 0;
    for (size_t i = 0; out && i < len;) {
        size_t k = utf8_seq((const unsigned char *)body + i, len - i);
        if (k) {
            memcpy(out + o, body + i, k);
            o += k;
            i += k;
        } else {
            memcpy(out + o, "\xEF\xBF\xBD", 3);
            o += 3;
            i++;
        }
    }
    *out_len = o;
    return out;
}

/* The path ("messages[1].content") of the first string in v holding U+FFFD. */
static bool replacement_path(json_t *v, char *path, size_t cap)
{
    size_t at = strlen(path);
    if (json_is_string(v))
        return strstr(json_string_value(v), "\xEF\xBF\xBD") != NULL;
    if (json_is_array(v)) {
        for (size_t i = 0; i < json_array_size(v); i++) {
            snprintf(path + at, cap - at, "[%zu]", i);
            if (replacement_path(json_array_get(v, i), path, cap))
                return true;
        }
    } else if (json_is_object(v)) {
        const char *key;
        json_t *x;
        json_object_foreach(v, key, x) {
            snprintf(path + at, cap - at, "%s%s", at ? "." : "", key);
            if (strstr(key, "\xEF\xBF\xBD") || replacement_path(x, path, cap))
                return true;
        }
    }
    path[at] = 0;
    return false;
}

static int bad_utf8(const char *body, size_t len, const json_error_t *je, struct k3_api_error *e)
{
    char path[96] = "";
    size_t n;
    char *fixed = utf8_repaired(body, len, &n);
    json_t *root = fixed ? json_loadb(fixed, n, 0, NULL) : NULL;
    bool found = root && replacement_path(root, path, sizeof path);
    json_decref(root);
    free(fixed);
    if (found)
        return k3_api_errorf(e, 400, INVALID, path, "%s is not valid UTF-8", path);
    return k3_api_errorf(e, 400, INVALID, NULL, "the body is not valid UTF-8 (byte %d)",
                         je->position);
}

/* ---- fields ---------------------------------------------------------------------- */

/* Absent and null both mean "the default". */
static json_t *field(json_t *obj, const char *name)
{
    json_t *v = json_object_get(obj, name);
    return json_is_null(v) ? NULL : v;
}

static int get_bool(json_t *obj, const char *name, bool *out, struct k3_api_error *e)
{
    json_t *v = field(obj, name);
    if (!v)
        return 0;
    if (!json_is_boolean(v))
        return k3_api_errorf(e, 400, INVALID, name, "%s must be a boolean", name);
    *out = json_is_true(v);
    return 0;
}

/* A number within [lo, hi] (lo excluded when open_lo). */
static int get_number(json_t *obj, const char *name, double lo, bool open_lo, double hi,
                      float *out, struct k3_api_error *e)
{
    json_t *v = field(obj, name);
    if (!v)
        return 0;
    if (!json_is_number(v))
        return k3_api_errorf(e, 400, INVALID, name, "%s must be a number", name);
    double x = json_number_value(v);
    if (!(open_lo ? x > lo : x >= lo) || !(x <= hi))
        return k3_api_errorf(e, 400, INVALID, name, "%s is %g; it must be %s %g and at most %g",
                             name, x, open_lo ? "above" : "at least", lo, hi);
    *out = (float)x;
    return 0;
}

/* An integer >= lo; values past INT_MAX are taken as INT_MAX (a limit nothing reaches). */
static int get_int(json_t *obj, const char *name, long long lo, int *out, struct k3_api_error *e)
{
    json_t *v = field(obj, name);
    if (!v)
        return 0;
    if (!json_is_integer(v))
        return k3_api_errorf(e, 400, INVALID, name, "%s must be an integer", name);
    long long x = json_integer_value(v);
    if (x < lo)
        return k3_api_errorf(e, 400, INVALID, name, "%s is %lld; it must be at least %lld", name,
                             x, lo);
    *out = x > INT_MAX ? INT_MAX : (int)x;
    return 0;
}

static int get_stops(json_t *obj, struct k3_gen_params *p, struct k3_api_error *e)
{
    json_t *v = field(obj, "stop");
    if (!v)
        return 0;
    bool one = json_is_string(v);
    if (!one && !json_is_array(v))
        return k3_api_errorf(e, 400, INVALID, "stop", "stop must be a string or an array of strings");
    size_t n = one ? 1 : json_array_size(v);
    if (n > K3_MAX_STOPS)
        return k3_api_errorf(e, 400, INVALID, "stop", "stop has %zu strings; at most %d", n,
                             K3_MAX_STOPS);
    for (size_t i = 0; i < n; i++) {
        json_t *s = one ? v : json_array_get(v, i);
        char param[32];
        snprintf(param, sizeof param, one ? "stop" : "stop[%zu]", i);
        if (!json_is_string(s))
            return k3_api_errorf(e, 400, INVALID, param, "%s must be a string", param);
        size_t len = json_string_length(s);
        if (len == 0 || len > K3_API_MAX_STOP_BYTES)
            return k3_api_errorf(e, 400, INVALID, param, "%s has %zu bytes; 1 to %d", param, len,
                                 K3_API_MAX_STOP_BYTES);
        if (!(p->stop[i] = strdup(json_string_value(s))))
            return k3_api_errorf(e, 500, "server_error", NULL, "out of memory");
    }
    return 0;
}

/* Features this server does not have, refused rather than silently ignored when a
 * request asks for them (their defaults are accepted). */
static int unsupported(json_t *root, struct k3_api_error *e)
{
    static const char *const off[] = {"echo", "logprobs", "suffix"};
    for (size_t i = 0; i < sizeof off / sizeof *off; i++) {
        json_t *v = field(root, off[i]);
        bool set = v && !json_is_false(v) && !(json_is_integer(v) && !json_integer_value(v)) &&
                   !(json_is_array(v) && !json_array_size(v)) &&
                   !(json_is_string(v) && !json_string_length(v));
        if (set)
            return k3_api_errorf(e, 400, INVALID, off[i], "%s is not supported by this server",
                                 off[i]);
    }
    static const char *const one[] = {"n", "best_of"};
    for (size_t i = 0; i < sizeof one / sizeof *one; i++) {
        json_t *v = field(root, one[i]);
        if (v && !(json_is_integer(v) && json_integer_value(v) == 1))
            return k3_api_errorf(e, 400, INVALID, one[i], "%s must be 1 (one choice per request)",
                                 one[i]);
    }
    return 0;
}

static uint64_t random_seed(void)
{
    uint64_t s;
    if (getrandom(&s, sizeof s, 0) != sizeof s) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        s = (uint64_t)ts.tv_sec * 1000000007u ^ (uint64_t)ts.tv_nsec;
    }
    return s;
}

static int parse_params(const struct k3_api_model *m, json_t *root, struct k3_api_request *r,
                        struct k3_api_error *e)
{
    struct k3_gen_params *p = &r->p;
    *p = (struct k3_gen_params){.max_tokens = m->default_max_tokens, .temperature = 1,
                                .top_p = 1, .seed = random_seed(),
                                .cache_prompt = true};
    json_t *model = field(root, "model");
    if (model && !json_is_string(model))
        return k3_api_errorf(e, 400, INVALID, "model", "model must be a string");
    if (model && strcmp(json_string_value(model), m->id)) {
        k3_api_errorf(e, 400, INVALID, "model", "the model \"%.200s\" does not exist; this server "
                      "serves \"%s\"", json_string_value(model), m->id);
        e->code = "model_not_found";
        return -1;
    }
    json_t *opts = field(root, "stream_options"), *seed = field(root, "seed");
    if (opts && !json_is_object(opts))
        return k3_api_errorf(e, 400, INVALID, "stream_options", "stream_options must be an object");
    if (seed && !json_is_integer(seed))
        return k3_api_errorf(e, 400, INVALID, "seed", "seed must be an integer");
    if (seed)
        p->seed = (uint64_t)json_integer_value(seed);
    const char *max_name = field(root, "max_completion_tokens") ? "max_completion_tokens"
                                                                : "max_tokens";
    if (get_bool(root, "stream", &r->stream, e) ||
        (opts && get_bool(opts, "include_usage", &r->include_usage, e)) ||
        get_bool(root, "logits_hash", &r->logits_hash, e) ||
        get_bool(root, "ignore_eos", &p->ignore_eos, e) ||
        get_bool(root, "cache_prompt", &p->cache_prompt, e) ||
        get_int(root, max_name, 1, &p->max_tokens, e) ||
        get_number(root, "temperature", 0, false, 2, &p->temperature, e) ||
        get_number(root, "top_p", 0, true, 1, &p->top_p, e) ||
        get_int(root, "top_k", 0, &p->top_k, e) || get_stops(root, p, e) || unsupported(root, e))
        return -1;
    return 0;
}

/* ---- prompts --------------------------------------------------------------------- */

static int encode_messages(const struct k3_api_model *m, json_t *root, struct k3_api_request *r,
                           struct k3_api_error *e)
{
    struct k3_api_chat c;
    if (k3_api_chat_render(m->tok, root, &c, e))
        return -1;
    r->prompt = c.ids;
    r->n_prompt = c.n_ids;
    r->thinking = c.thinking;
    r->keep_calls = c.keep_calls;
    r->grammar = c.grammar;
    c.ids = NULL;
    c.grammar = NULL;
    k3_api_chat_free(&c);
    return 0;
}

/* prompt: a string, an array of one string, or an array of token ids. */
static int encode_prompt(const struct k3_api_model *m, json_t *root, struct k3_api_request *r,
                         struct k3_api_error *e)
{
    json_t *v = json_object_get(root, "prompt");
    if (json_is_array(v) && json_array_size(v) == 1 && json_is_string(json_array_get(v, 0)))
        v = json_array_get(v, 0);
    if (json_is_string(v)) {
        size_t n = 0;
        struct k3_err err;
        if (k3_tok_encode(m->tok, json_string_value(v), json_string_length(v), false, &r->prompt,
                          &n, &err))
            return k3_api_errorf(e, 400, INVALID, "prompt", "prompt: %s", err.msg);
        r->n_prompt = (int)n;
        return 0;
    }
    if (!json_is_array(v) || !json_array_size(v))
        return k3_api_errorf(e, 400, INVALID, "prompt",
                             v ? "prompt must be a string, an array of one string or an array of "
                                 "token ids" : "prompt is required");
    size_t n = json_array_size(v);
    if (n >= (size_t)m->ctx) { /* refused by the caller, before anything is allocated for it */
        r->n_prompt = n < INT_MAX ? (int)n : INT_MAX;
        return 0;
    }
    if (!(r->prompt = malloc(n * sizeof *r->prompt)))
        return k3_api_errorf(e, 500, "server_error", NULL, "out of memory");
    for (size_t i = 0; i < n; i++) {
        json_t *id = json_array_get(v, i);
        if (!json_is_integer(id) || json_integer_value(id) < 0 || json_integer_value(id) >= m->vocab)
            return k3_api_errorf(e, 400, INVALID, "prompt", "prompt[%zu] must be a token id in [0, %d) "
                                 "(one string, or token ids)", i, m->vocab);
        r->prompt[i] = (int32_t)json_integer_value(id);
    }
    r->n_prompt = (int)n;
    return 0;
}

/* ---- the request ----------------------------------------------------------------- */

void k3_api_request_free(struct k3_api_request *r)
{
    free(r->prompt);
    k3_grammar_free(r->grammar);
    for (int i = 0; i < K3_MAX_STOPS; i++)
        free(r->p.stop[i]);
    free(r->p.bias);
    memset(r, 0, sizeof *r);
}

static json_t *load_object(const char *body, size_t len, struct k3_api_error *e)
{
    json_error_t je;
    json_t *root = json_loadb(body, len, 0, &je);
    if (!root && json_error_code(&je) == json_error_invalid_utf8) {
        bad_utf8(body, len, &je, e);
        return NULL;
    }
    if (!root && json_error_code(&je) == json_error_out_of_memory)
        k3_api_errorf(e, 500, "server_error", NULL, "out of memory parsing the body");
    else if (!root)
        k3_api_errorf(e, 400, INVALID, NULL, "the body is not valid JSON: %s (byte %d)", je.text,
                      je.position);
    else if (!json_is_object(root))
        k3_api_errorf(e, 400, INVALID, NULL, "the body must be a JSON object");
    if (root && !json_is_object(root)) {
        json_decref(root);
        return NULL;
    }
    return root;
}

char *k3_api_apply_template(const struct k3_api_model *m, const char *body, size_t len,
                            struct k3_api_error *e)
{
    json_t *root = load_object(body, len, e);
    struct k3_api_chat c;
    if (!root || k3_api_chat_render(NULL, root, &c, e)) {
        json_decref(root);
        return NULL;
    }
    size_t n;
    char *text = k3_chat_segs_join(&c.segs, &n);
    json_t *v = text ? json_pack("{s:s%}", "prompt", text, n) : NULL;
    char *out = v ? json_dumps(v, JSON_COMPACT) : NULL;
    if (!out)
        k3_api_errorf(e, 500, "server_error", NULL, "out of memory");
    json_decref(v);
    free(text);
    k3_api_chat_free(&c);
    json_decref(root);
    return out;
}

int k3_api_parse(const struct k3_api_model *m, enum k3_api_kind kind, const char *body,
                 size_t len, struct k3_api_request *out, struct k3_api_error *e)
{
    memset(out, 0, sizeof *out);
    out->kind = kind;
    json_t *root = load_object(body, len, e);
    if (!root)
        return -1;
    int rc = k3_api_fields_check(kind, root, e) || parse_params(m, root, out, e) ||
             k3_api_parse_adjust(m, root, &out->p, e);
    if (!rc)
        rc = kind == K3_API_CHAT ? encode_messages(m, root, out, e) : encode_prompt(m, root, out, e);
    const char *what = kind == K3_API_CHAT ? "messages" : "prompt";
    if (!rc && out->n_prompt == 0)
        rc = k3_api_errorf(e, 400, INVALID, what, "the prompt is empty");
    if (!rc && out->n_prompt >= m->ctx) {
        rc = k3_api_errorf(e, 400, INVALID, what, "the prompt is %d tokens; this server's context "
                           "holds %d, and at least one more is needed to generate", out->n_prompt,
                           m->ctx);
        e->code = "context_length_exceeded";
    }
    json_decref(root);
    if (rc)
        k3_api_request_free(out);
    return rc;
}

/* ---- bodies out ------------------------------------------------------------------ */

const char *k3_api_finish_reason(enum k3_finish f)
{
    return f == K3_FINISH_STOP ? "stop" : f == K3_FINISH_LENGTH ? "length" : NULL;
}

static char *dump(json_t *v)
{
    char *s = v ? json_dumps(v, JSON_COMPACT) : NULL;
    json_decref(v);
    return s;
}

/* s with every byte that starts no well-formed UTF-8 sequence made '?': a message that
 * quotes a client's text may have cut a character in two. */
static void utf8_mend(char *s)
{
    for (size_t n = strlen(s), i = 0; i < n;) {
        size_t k = utf8_seq((const unsigned char *)s + i, n - i);
        if (!k)
            s[i] = '?';
        i += k ? k : 1;
    }
}

char *k3_api_error_json(const struct k3_api_error *e)
{
    struct k3_api_error m = *e;
    utf8_mend(m.message);
    utf8_mend(m.param);
    return dump(json_pack("{s:{s:s, s:s, s:s?, s:s?}}", "error", "message", m.message, "type",
                          m.type, "param", m.param[0] ? m.param : NULL, "code", m.code));
}

char *k3_api_models_json(const char *model, time_t created)
{
    return dump(json_pack("{s:s, s:[{s:s, s:s, s:I, s:s}]}", "object", "list", "data", "id",
                          model, "object", "model", "created", (json_int_t)created, "owned_by",
                          "k3-uring"));
}

static json_t *usage(const struct k3_api_answer *a)
{
    return json_pack("{s:i, s:i, s:i, s:{s:i}}", "prompt_tokens", a->prompt_tokens,
                     "completion_tokens", a->completion_tokens, "total_tokens",
                     a->prompt_tokens + a->completion_tokens, "prompt_tokens_details",
                     "cached_tokens", a->cached_tokens);
}

static json_t *envelope(const struct k3_api_answer *a, const char *object, json_t *choice)
{
    return json_pack("{s:s, s:s, s:I, s:s, s:[o]}", "id", a->id, "object", object, "created",
                     (json_int_t)a->created, "model", a->model, "choices", choice);
}

static void add_hash(json_t *v, const struct k3_api_answer *a)
{
    char hex[17];
    snprintf(hex, sizeof hex, "%016llx", (unsigned long long)a->logits_hash);
    if (v && a->with_hash)
        json_object_set_new(v, "logits_hash", json_string(hex));
}

/* "tool_calls" when the answer ended by itself after making calls. */
static const char *finish_reason(const struct k3_api_answer *a)
{
    if (a->finish == K3_FINISH_STOP && a->calls_total)
        return "tool_calls";
    return k3_api_finish_reason(a->finish);
}

/* calls[i] as OpenAI writes it; streamed, with its index among the answer's calls.  Its
 * id is the answer's with the call's number: unique, and the same in both forms. */
static json_t *tool_call(const struct k3_api_answer *a, int i, bool streamed)
{
    const char *dash = strchr(a->id, '-');
    char id[80];
    snprintf(id, sizeof id, "call_%s_%d", dash ? dash + 1 : a->id, a->first_call + i);
    json_t *c = json_pack("{s:s, s:s, s:{s:s, s:s}}", "id", id, "type", "function", "function",
                          "name", a->calls[i].name, "arguments", a->calls[i].arguments);
    if (c && streamed)
        json_object_set_new(c, "index", json_integer(a->first_call + i));
    return c;
}

/* A chat's message (whole) or delta (streamed): reasoning_content, content and
 * tool_calls; content is null when the answer is calls alone. */
static json_t *chat_message(const struct k3_api_answer *a, bool streamed, bool first)
{
    json_t *m = json_object();
    if (!streamed || first)
        json_object_set_new(m, "role", json_string("assistant"));
    if (a->reasoning_len || (!streamed && a->reasoning))
        json_object_set_new(m, "reasoning_content", json_stringn(a->reasoning, a->reasoning_len));
    if (a->text_len || (!streamed && !a->calls_total) || first)
        json_object_set_new(m, "content", json_stringn(a->text, a->text_len));
    else if (!streamed)
        json_object_set_new(m, "content", json_null());
    if (a->n_calls) {
        json_t *calls = json_array();
        for (int i = 0; i < a->n_calls; i++)
            json_array_append_new(calls, tool_call(a, i, streamed));
        json_object_set_new(m, "tool_calls", calls);
    }
    return m;
}

char *k3_api_response_json(const struct k3_api_answer *a)
{
    const char *reason = finish_reason(a);
    json_t *choice = a->kind == K3_API_CHAT
        ? json_pack("{s:i, s:o, s:s?, s:n}", "index", 0, "message", chat_message(a, false, false),
                    "finish_reason", reason, "logprobs")
        : json_pack("{s:i, s:s%, s:s?, s:n}", "index", 0, "text", a->text, a->text_len,
                    "finish_reason", reason, "logprobs");
    json_t *v = envelope(a, a->kind == K3_API_CHAT ? "chat.completion" : "text_completion", choice);
    if (v)
        json_object_set_new(v, "usage", usage(a));
    add_hash(v, a);
    return dump(v);
}

char *k3_api_chunk_json(const struct k3_api_answer *a, bool first)
{
    const char *reason = finish_reason(a);
    json_t *choice =
        a->kind == K3_API_CHAT
            ? json_pack("{s:i, s:o, s:s?, s:n}", "index", 0, "delta", chat_message(a, true, first),
                        "finish_reason", reason, "logprobs")
            : json_pack("{s:i, s:s%, s:s?, s:n}", "index", 0, "text", a->text, a->text_len,
                        "finish_reason", reason, "logprobs");
    json_t *v = envelope(a, a->kind == K3_API_CHAT ? "chat.completion.chunk" : "text_completion",
                         choice);
    if (a->finish != K3_FINISH_NONE)
        add_hash(v, a);
    return dump(v);
}

char *k3_api_usage_chunk_json(const struct k3_api_answer *a)
{
    return dump(json_pack("{s:s, s:s, s:I, s:s, s:[], s:o}", "id", a->id, "object",
                          a->kind == K3_API_CHAT ? "chat.completion.chunk" : "text_completion",
                          "created", (json_int_t)a->created, "model", a->model, "choices", "usage",
                          usage(a)));
}
