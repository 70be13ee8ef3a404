/* Tool calls and their results (spec §6.3-§7.3): an assistant's tools channel, its
 * arguments normalised as encoding_k3.py's normalize_tool_arguments does (typed argument
 * elements in the mapping's order, or the raw json element for a string that does not
 * parse), and runs of tool results re-ordered to their calls by tool_call_id. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/text/chat_internal.h"

const json_t *k3_chat_call_function(const json_t *call)
{
    const json_t *fn = json_object_get(call, "function");
    if (!json_object_iter_at((json_t *)call, "function"))
        fn = call;
    return json_is_object(fn) ? fn : NULL;
}

/* A call's arguments after normalisation: an object (borrowed, or parsed into owned),
 * the raw string of a json element, or neither (no children). */
struct call_args {
    const json_t *args;
    json_t *owned;
    const json_t *raw;
};

static int normalise_arguments(struct k3_chat_render *r, const json_t *v, const char *param,
                               struct call_args *a)
{
    *a = (struct call_args){0};
    if (!v || json_is_null(v))
        return 0;
    if (json_is_object(v)) {
        a->args = v;
        return 0;
    }
    if (!json_is_string(v))
        return k3_chat_fail(r, param, "%s must be an object or a JSON object string", param);
    const char *s = json_string_value(v);
    size_t len = json_string_length(v);
    if (k3_py_blank(s, len))
        return 0;
    json_error_t je;
    json_t *parsed = json_loadb(s, len, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
    if (!parsed) {
        enum json_error_code code = json_error_code(&je);
        if (code == json_error_numeric_overflow || code == json_error_null_byte_in_key)
            return k3_chat_fail(r, param, "%s: %s (not supported)", param, je.text);
        a->raw = v; /* the model's broken JSON, shown back as it wrote it */
        return 0;
    }
    if (!json_is_object(parsed)) {
        json_decref(parsed);
        return k3_chat_fail(r, param, "%s must be a JSON object", param);
    }
    a->args = a->owned = parsed;
    return 0;
}

/* The arguments of call (a tool_calls entry) and the param naming them. */
static const json_t *arguments_of(const json_t *call, size_t at, size_t k, char param[96])
{
    const json_t *fn = json_object_get(call, "function");
    bool wrapped = json_is_object(fn);
    snprintf(param, 96, "messages[%zu].tool_calls[%zu].%sarguments", at, k,
             wrapped ? "function." : "");
    return json_object_get(wrapped ? fn : call, "arguments");
}

int k3_chat_check_arguments(struct k3_chat_render *r)
{
    for (size_t i = 0; i < json_array_size(r->messages); i++) {
        const json_t *calls = json_object_get(json_array_get(r->messages, i), "tool_calls");
        for (size_t k = 0; k < json_array_size(calls); k++) {
            const json_t *call = json_array_get(calls, k);
            if (!json_is_object(call))
                continue;
            char param[96];
            struct call_args a;
            if (normalise_arguments(r, arguments_of(call, i, k, param), param, &a))
                return -1;
            json_decref(a.owned);
        }
    }
    return 0;
}

/* Strict: whether some tools list of the request declares a function called name. */
static bool in_list(const json_t *tools, const char *name)
{
    for (size_t i = 0; i < json_array_size(tools); i++) {
        const json_t *fn = json_object_get(json_array_get(tools, i), "function");
        const char *declared = json_string_value(json_object_get(fn, "name"));
        if (declared && !strcmp(declared, name))
            return true;
    }
    return false;
}

static bool is_system(const struct k3_chat_render *r, const json_t *m)
{
    const char *role = json_string_value(json_object_get(m, "role"));
    return role && (!strcmp(role, "system") || (r->o->strict && !strcmp(role, "developer")));
}

/* 0 when no tools are declared or name is one of them, 1 when it is not. */
static int undeclared(const struct k3_chat_render *r, const char *name)
{
    bool any = json_array_size(r->tools) > 0;
    if (in_list(r->tools, name))
        return 0;
    for (size_t i = 0; i < json_array_size(r->messages); i++) {
        const json_t *m = json_array_get(r->messages, i), *tools = json_object_get(m, "tools");
        if (!is_system(r, m) || !json_array_size(tools))
            continue;
        any = true;
        if (in_list(tools, name))
            return 0;
    }
    return any;
}

/* The call's name as an attribute value (buf holds it); -1 with the fault filled. */
static int call_name(struct k3_chat_render *r, const json_t *fn, const char *param,
                     struct k3_chat_buf *buf)
{
    const json_t *name = json_object_get(fn, "name");
    if (!name)
        return k3_chat_fail(r, param, "%s is missing", param);
    if (r->o->strict) {
        if (!json_is_string(name) || !json_string_length(name))
            return k3_chat_fail(r, param, "%s must be a non-empty string", param);
        if (undeclared(r, json_string_value(name)))
            return k3_chat_fail(r, param, "%s: \"%.64s\" is not a declared tool", param,
                                json_string_value(name));
    }
    if (k3_py_str(buf, name))
        return k3_chat_fail(r, param, "%s must be a string", param);
    return 0;
}

static const char *xtml_type(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_TRUE:
    case JSON_FALSE:
        return "boolean";
    case JSON_NULL:
        return "null";
    case JSON_INTEGER:
    case JSON_REAL:
        return "number";
    case JSON_STRING:
        return "string";
    case JSON_OBJECT:
        return "object";
    default:
        return "array";
    }
}

/* One argument element: a string raw, anything else as json.dumps writes it. */
static void argument(struct k3_chat_render *r, const char *key, const json_t *v)
{
    const char *type = xtml_type(v);
    struct k3_chat_attr attrs[] = {{"key", key, strlen(key)}, {"type", type, strlen(type)}};
    k3_chat_open(r, "argument", attrs, 2);
    if (json_is_string(v)) {
        k3_chat_text(r, json_string_value(v), json_string_length(v));
    } else {
        struct k3_chat_buf value = {0};
        k3_py_json(&value, v, false);
        k3_chat_text(r, value.p, value.len);
        r->oom |= value.oom;
        k3_chat_buf_free(&value);
    }
    k3_chat_close(r, "argument");
}

static int call(struct k3_chat_render *r, const json_t *c, size_t at, size_t k)
{
    char param[96];
    snprintf(param, sizeof param, "messages[%zu].tool_calls[%zu]", at, k);
    const json_t *fn = k3_chat_call_function(c);
    if (!json_is_object(c) || !fn)
        return k3_chat_fail(r, param, "%s must be an object with a function object", param);
    snprintf(param, sizeof param, "messages[%zu].tool_calls[%zu].%sname", at, k,
             fn == c ? "" : "function.");
    struct k3_chat_buf name = {0};
    struct call_args a;
    if (call_name(r, fn, param, &name) ||
        normalise_arguments(r, arguments_of(c, at, k, param), param, &a)) {
        k3_chat_buf_free(&name);
        return -1;
    }
    char index[24];
    snprintf(index, sizeof index, "%zu", k + 1);
    struct k3_chat_attr attrs[] = {{"tool", name.p, name.len}, {"index", index, strlen(index)}};
    k3_chat_open(r, "call", attrs, 2);
    r->oom |= name.oom;
    k3_chat_buf_free(&name);
    if (a.raw) {
        k3_chat_open(r, "json", (struct k3_chat_attr[]){{"type", "object", 6}}, 1);
        k3_chat_text(r, json_string_value(a.raw), json_string_length(a.raw));
        k3_chat_close(r, "json");
    }
    const char *key;
    const json_t *v;
    json_object_foreach((json_t *)a.args, key, v)
        argument(r, key, v);
    json_decref(a.owned);
    k3_chat_close(r, "call");
    return 0;
}

int k3_chat_render_calls(struct k3_chat_render *r, const json_t *calls, size_t at)
{
    if (!json_is_array(calls)) {
        char param[96];
        snprintf(param, sizeof param, "messages[%zu].tool_calls", at);
        return k3_chat_fail(r, param, "%s must be an array", param);
    }
    k3_chat_open(r, "tools", NULL, 0);
    for (size_t k = 0; k < json_array_size(calls); k++)
        if (call(r, json_array_get(calls, k), at, k))
            return -1;
    k3_chat_close(r, "tools");
    return 0;
}

/* ---- tool results in the order of their calls (§7.3) -------------------------------- */

static bool has_role(const json_t *m, const char *role)
{
    const char *v = json_string_value(json_object_get(m, "role"));
    return v && !strcmp(v, role);
}

/* The 1-based position of the first call of calls whose str(id) is key (a tool message's
 * tool_call_id), and that call's function name (or NULL); 0 when none matches. */
static size_t match_call(const json_t *calls, const struct k3_chat_buf *key, const json_t **name)
{
    for (size_t k = 0; k < json_array_size(calls); k++) {
        const json_t *c = json_array_get(calls, k), *id = json_object_get(c, "id");
        if (!json_is_object(c) || !id || json_is_null(id))
            continue;
        struct k3_chat_buf s = {0};
        bool same = !k3_py_str(&s, id) && !s.oom && s.len == key->len &&
                    !memcmp(s.p, key->p ? key->p : "", s.len);
        k3_chat_buf_free(&s);
        if (!same)
            continue;
        const json_t *fn = json_object_get(c, "function");
        *name = json_object_get(json_is_object(fn) ? fn : c, "name");
        if (json_is_null(*name))
            *name = NULL;
        return k + 1;
    }
    return 0;
}

/* A tool message's tool_call_id (else id) matched against calls: its position, or 0. */
static size_t match_result(const json_t *m, const json_t *calls, const json_t **name)
{
    const json_t *id = json_object_iter_at((json_t *)m, "tool_call_id")
                           ? json_object_get(m, "tool_call_id") : json_object_get(m, "id");
    if (!id || json_is_null(id))
        return 0;
    struct k3_chat_buf key = {0};
    size_t at = k3_py_str(&key, id) || key.oom ? 0 : match_call(calls, &key, name);
    k3_chat_buf_free(&key);
    return at;
}

/* Sorts the run views[0..n) by position (stable: insertion). */
static void sort_run(struct k3_chat_view *views, size_t *pos, size_t n)
{
    for (size_t i = 1; i < n; i++)
        for (size_t j = i; j > 0 && pos[j - 1] > pos[j]; j--) {
            struct k3_chat_view v = views[j];
            views[j] = views[j - 1];
            views[j - 1] = v;
            size_t p = pos[j];
            pos[j] = pos[j - 1];
            pos[j - 1] = p;
        }
}

/* The run of tool messages from index i (views filled in order, ending at *end): sorted
 * and named by their calls when every one matches, else left as sent.  -1: no memory. */
static int order_run(const json_t *msgs, const json_t *calls, size_t i, size_t *end,
                     struct k3_chat_view *views)
{
    size_t j = i;
    while (j < json_array_size(msgs) && has_role(json_array_get(msgs, j), "tool"))
        j++;
    size_t *pos = malloc((j - i) * sizeof *pos);
    if (!pos)
        return -1;
    bool all = true;
    for (size_t k = i; k < j; k++) {
        const json_t *name = NULL;
        pos[k - i] = match_result(json_array_get(msgs, k), json_is_array(calls) ? calls : NULL,
                                  &name);
        views[k] = (struct k3_chat_view){json_array_get(msgs, k), k, name};
        all &= pos[k - i] > 0;
    }
    if (all)
        sort_run(views + i, pos, j - i);
    else
        for (size_t k = i; k < j; k++)
            views[k].tool = NULL;
    free(pos);
    *end = j;
    return 0;
}

int k3_chat_order_results(struct k3_chat_render *r, struct k3_chat_view **out)
{
    const json_t *msgs = r->messages, *calls = NULL;
    size_t n = json_array_size(msgs);
    struct k3_chat_view *views = malloc((n ? n : 1) * sizeof *views);
    if (!views) {
        r->oom = true;
        return -1;
    }
    for (size_t i = 0; i < n;) {
        const json_t *m = json_array_get(msgs, i);
        if (has_role(m, "tool")) {
            if (order_run(msgs, calls, i, &i, views)) {
                free(views);
                r->oom = true;
                return -1;
            }
            continue;
        }
        if (has_role(m, "assistant"))
            calls = json_object_get(m, "tool_calls");
        views[i] = (struct k3_chat_view){m, i, NULL};
        i++;
    }
    *out = views;
    return 0;
}
