/* build_chat_segments in C: the prompt's order (spec §3), each role's message (§4-§7),
 * the tool declarations (§8) and the notes the encoder writes for thinking effort,
 * tool_choice and response_format (§9-§11), the generation prompt (§12); and the strict
 * checks a server adds on top. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/text/chat_internal.h"

#define IMAGE_PLACEHOLDER "<|kimi_image_placeholder|>"

static const char EFFORT_NOTE[] =
    "`thinking_effort` guides on how much to think in your thinking channel (not including "
    "the response channel), supported values include `low`, `medium`, `high`, and `max`.\n"
    "Now the system is invoked with `thinking_effort=";
static const char TOOLS_HEAD[] =
    "# Tools\nHere are the available tools, described in JSONSchema.\n\n```json\n";
static const char NEW_TOOLS_HEAD[] =
    "## New Tools Available\n"
    "The system dynamically extends the toolset via lazy-loading.\n"
    "You have access to all existing and extended tools.\n"
    "Here are the specs for the extended tools.\n\n```json\n";
static const char RAW_JSON[] =
    "Your response must be raw JSON data without markdown code blocks (```json) or any "
    "additional formatting.";

int k3_chat_fail(struct k3_chat_render *r, const char *param, const char *fmt, ...)
{
    if (!r->fault)
        return -1;
    snprintf(r->fault->param, sizeof r->fault->param, "%s", param);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->fault->message, sizeof r->fault->message, fmt, ap);
    va_end(ap);
    return -1;
}

static bool is(const json_t *v, const char *s)
{
    return json_is_string(v) && !strcmp(json_string_value(v), s);
}

/* ---- strict checks ------------------------------------------------------------------ */

static int check_tool_list(struct k3_chat_render *r, const json_t *tools, const char *where)
{
    if (!json_is_array(tools))
        return k3_chat_fail(r, where, "%s must be an array of tools", where);
    char param[96];
    for (size_t k = 0; k < json_array_size(tools); k++) {
        const json_t *fn = json_object_get(json_array_get(tools, k), "function");
        const json_t *name = json_object_get(fn, "name"), *params = json_object_get(fn, "parameters");
        snprintf(param, sizeof param, "%s[%zu].function", where, k);
        if (!json_is_object(fn))
            return k3_chat_fail(r, param, "%s must be an object", param);
        snprintf(param, sizeof param, "%s[%zu].function.name", where, k);
        if (!json_is_string(name) || !json_string_length(name))
            return k3_chat_fail(r, param, "%s must be a non-empty string", param);
        snprintf(param, sizeof param, "%s[%zu].function.parameters", where, k);
        if (params && !json_is_null(params) && !json_is_object(params))
            return k3_chat_fail(r, param, "%s must be an object (a JSON Schema)", param);
    }
    return 0;
}

static bool known_role(const json_t *role)
{
    static const char *const roles[] = {"system", "developer", "user", "assistant", "tool"};
    for (size_t k = 0; k < sizeof roles / sizeof *roles; k++)
        if (is(role, roles[k]))
            return true;
    return false;
}

/* Roles the server knows, tool results after calls, and every tools list. */
static int check_messages(struct k3_chat_render *r)
{
    bool calls = false; /* the latest assistant message has tool calls */
    char param[96];
    for (size_t i = 0; i < json_array_size(r->messages); i++) {
        const json_t *m = json_array_get(r->messages, i), *role = json_object_get(m, "role");
        const json_t *tools = json_object_get(m, "tools");
        snprintf(param, sizeof param, "messages[%zu]", i);
        if (!json_is_object(m))
            return k3_chat_fail(r, param, "%s must be an object", param);
        if (is(role, "tool") && !calls)
            return k3_chat_fail(r, param, "%s is a tool result, but the assistant message "
                                "before it has no tool_calls", param);
        snprintf(param, sizeof param, "messages[%zu].role", i);
        if (!known_role(role))
            return k3_chat_fail(r, param, "%s must be \"system\", \"developer\", \"user\", "
                                "\"assistant\" or \"tool\"", param);
        snprintf(param, sizeof param, "messages[%zu].tools", i);
        if ((is(role, "system") || is(role, "developer")) && tools && !json_is_null(tools) &&
            check_tool_list(r, tools, param))
            return -1;
        if (is(role, "assistant"))
            calls = json_array_size(json_object_get(m, "tool_calls")) > 0;
    }
    return 0;
}

static int check_request(struct k3_chat_render *r)
{
    const struct k3_chat_opts *o = r->o;
    if (!json_is_array(r->messages))
        return k3_chat_fail(r, "messages", "messages must be an array");
    if (o->effort && (o->thinking || o->strict) && strcmp(o->effort, "low") &&
        strcmp(o->effort, "high") && strcmp(o->effort, "max"))
        return k3_chat_fail(r, "reasoning_effort", "reasoning_effort \"%.32s\" is not low, "
                            "high or max", o->effort);
    if (!o->strict)
        return 0;
    if (r->tools && !json_is_null(r->tools) && check_tool_list(r, r->tools, "tools"))
        return -1;
    return check_messages(r);
}

/* ---- messages ----------------------------------------------------------------------- */

/* Python's str(v) as one text segment; an object or array is an error naming param. */
static int text_of(struct k3_chat_render *r, const json_t *v, const char *param)
{
    struct k3_chat_buf b = {0};
    if (k3_py_str(&b, v))
        return k3_chat_fail(r, param, "%s must be a string", param);
    k3_chat_text(r, b.p, b.len);
    r->oom |= b.oom;
    k3_chat_buf_free(&b);
    return 0;
}

/* A content: a string, or parts, each a text segment or an image's placeholder. */
static int content(struct k3_chat_render *r, const json_t *c, size_t at)
{
    char param[96];
    snprintf(param, sizeof param, "messages[%zu].content", at);
    if (!c || json_is_null(c) || (json_is_object(c) && !json_object_size(c)))
        return 0; /* an empty object: Python iterates no parts */
    if (json_is_string(c)) {
        k3_chat_text(r, json_string_value(c), json_string_length(c));
        return 0;
    }
    if (!json_is_array(c))
        return k3_chat_fail(r, param, "%s must be a string or an array of parts", param);
    for (size_t j = 0; j < json_array_size(c); j++) {
        const json_t *part = json_array_get(c, j), *type = json_object_get(part, "type");
        snprintf(param, sizeof param, "messages[%zu].content[%zu].%s", at, j,
                 type ? "text" : "type");
        if (!type)
            return k3_chat_fail(r, param, "%s is missing", param);
        if ((is(type, "image") || is(type, "image_url")) && r->o->strict) {
            snprintf(param, sizeof param, "messages[%zu].content", at);
            return k3_chat_fail(r, param, "messages[%zu].content[%zu] is an image: this server "
                                "serves text only", at, j);
        }
        if (is(type, "image") || is(type, "image_url")) {
            if (k3_chat_segs_push(r->out, IMAGE_PLACEHOLDER, strlen(IMAGE_PLACEHOLDER), true))
                r->oom = true;
            continue;
        }
        const json_t *text = json_object_get(part, "text");
        if (!text)
            return k3_chat_fail(r, param, "%s is missing", param);
        if (text_of(r, text, param))
            return -1;
    }
    return 0;
}

/* <|open|>message role="ROLE" name="NAME"<|sep|>, the name only when it is truthy. */
static int open_message(struct k3_chat_render *r, const json_t *m, const char *role, size_t at)
{
    struct k3_chat_attr attrs[2] = {{"role", role, strlen(role)}};
    struct k3_chat_buf name = {0};
    const json_t *v = json_object_get(m, "name");
    if (k3_py_truthy(v) && k3_py_str(&name, v)) {
        char param[96];
        snprintf(param, sizeof param, "messages[%zu].name", at);
        return k3_chat_fail(r, param, "%s must be a string", param);
    }
    if (k3_py_truthy(v))
        attrs[1] = (struct k3_chat_attr){"name", name.p, name.len};
    k3_chat_open(r, "message", attrs, k3_py_truthy(v) ? 2 : 1);
    r->oom |= name.oom;
    k3_chat_buf_free(&name);
    return 0;
}

static int plain(struct k3_chat_render *r, const json_t *m, const char *role, size_t at)
{
    if (open_message(r, m, role, at) || content(r, json_object_get(m, "content"), at))
        return -1;
    k3_chat_close(r, "message");
    k3_chat_end_of_msg(r);
    return 0;
}

/* The think channel: reasoning_content, else reasoning, unless blank. */
static int think(struct k3_chat_render *r, const json_t *m, size_t at)
{
    const json_t *reasoning = json_object_get(m, "reasoning_content");
    bool alias = !k3_py_truthy(reasoning);
    if (alias)
        reasoning = json_object_get(m, "reasoning");
    k3_chat_open(r, "think", NULL, 0);
    if (reasoning && !json_is_null(reasoning)) {
        char param[96];
        snprintf(param, sizeof param, "messages[%zu].%s", at, alias ? "reasoning" : "reasoning_content");
        struct k3_chat_buf b = {0};
        if (k3_py_str(&b, reasoning))
            return k3_chat_fail(r, param, "%s must be a string", param);
        if (!k3_py_blank(b.p, b.len))
            k3_chat_text(r, b.p, b.len);
        r->oom |= b.oom;
        k3_chat_buf_free(&b);
    }
    k3_chat_close(r, "think");
    return 0;
}

static int assistant(struct k3_chat_render *r, const json_t *m, size_t at)
{
    if (open_message(r, m, "assistant", at) || (r->o->thinking && think(r, m, at)))
        return -1;
    k3_chat_open(r, "response", NULL, 0);
    if (content(r, json_object_get(m, "content"), at))
        return -1;
    k3_chat_close(r, "response");
    const json_t *calls = json_object_get(m, "tool_calls");
    if (k3_py_truthy(calls) && k3_chat_render_calls(r, calls, at))
        return -1;
    k3_chat_close(r, "message");
    k3_chat_end_of_msg(r);
    return 0;
}

/* A tool result's tool name: the matched call's, the message's tool (else name), else
 * the name of the prior assistant's call at the result's ordinal. */
static const json_t *result_tool(const struct k3_chat_view *v, const json_t *prior,
                                 size_t index)
{
    const json_t *name = v->tool;
    if (!name)
        name = json_object_get(v->m, json_object_iter_at((json_t *)v->m, "tool") ? "tool" : "name");
    if ((!name || json_is_null(name)) && index <= json_array_size(prior))
        name = json_object_get(k3_chat_call_function(json_array_get(prior, index - 1)), "name");
    return json_is_null(name) ? NULL : name;
}

static int tool_result(struct k3_chat_render *r, const struct k3_chat_view *v,
                       const json_t *prior, size_t index)
{
    char param[96];
    snprintf(param, sizeof param, "messages[%zu].tool_call_id", v->at);
    const json_t *tool = result_tool(v, prior, index);
    struct k3_chat_buf name = {0};
    if (!tool)
        return k3_chat_fail(r, param, "%s matches no call of the assistant before it, and "
                            "the message has no name: the result names no tool", param);
    if (k3_py_str(&name, tool))
        return k3_chat_fail(r, param, "%s: the tool's name must be a string", param);
    char ordinal[24];
    snprintf(ordinal, sizeof ordinal, "%zu", index);
    struct k3_chat_attr attrs[] = {{"role", "tool", 4}, {"tool", name.p, name.len},
                                   {"index", ordinal, strlen(ordinal)}};
    k3_chat_open(r, "message", attrs, 3);
    r->oom |= name.oom;
    k3_chat_buf_free(&name);
    if (content(r, json_object_get(v->m, "content"), v->at))
        return -1;
    k3_chat_close(r, "message");
    k3_chat_end_of_msg(r);
    return 0;
}

/* ---- synthesized system messages ---------------------------------------------------- */

static void note(struct k3_chat_render *r, const char *type, const struct k3_chat_buf *body)
{
    struct k3_chat_attr attrs[] = {{"role", "system", 6}, {"type", type, strlen(type)}};
    k3_chat_open(r, "message", attrs, 2);
    k3_chat_text(r, body->p, body->len);
    r->oom |= body->oom;
    k3_chat_close(r, "message");
    k3_chat_end_of_msg(r);
}

static void note_text(struct k3_chat_render *r, const char *type, const char *a, const char *b,
                      const char *c)
{
    struct k3_chat_buf body = {0};
    k3_chat_buf_put(&body, a, strlen(a));
    k3_chat_buf_put(&body, b, strlen(b));
    k3_chat_buf_put(&body, c, strlen(c));
    note(r, type, &body);
    k3_chat_buf_free(&body);
}

/* head, then value deep-key-sorted compact JSON, then the closing fence. */
static void note_json(struct k3_chat_render *r, const char *type, const char *head,
                      const json_t *value)
{
    struct k3_chat_buf body = {0};
    k3_chat_buf_put(&body, head, strlen(head));
    k3_py_json(&body, value ? value : json_null(), true);
    k3_chat_buf_put(&body, "\n```", 4);
    note(r, type, &body);
    k3_chat_buf_free(&body);
}

static void tool_choice_note(struct k3_chat_render *r)
{
    const json_t *choice = r->o->tool_choice;
    if (is(choice, "required"))
        note_text(r, "tool-choice", "The system is invoked with `tool_choice=required`.\n",
                  "You MUST call tools in the next message.", "");
    else if (is(choice, "none"))
        note_text(r, "tool-choice", "The system is invoked with `tool_choice=none`.\n",
                  "You MUST NOT call any tools in the next message.", "");
}

/* The schema of a json_schema response_format: json_schema.schema, else
 * json_schema.json_schema, else json_schema itself. */
static const json_t *response_schema(const json_t *format)
{
    const json_t *s = json_object_get(format, "json_schema");
    if (!json_is_object(s))
        return s;
    if (json_object_iter_at((json_t *)s, "schema"))
        return json_object_get(s, "schema");
    if (json_object_iter_at((json_t *)s, "json_schema"))
        return json_object_get(s, "json_schema");
    return s;
}

static void response_format_note(struct k3_chat_render *r)
{
    const json_t *f = r->o->response_format, *type = f;
    if (json_is_object(f) && json_object_iter_at((json_t *)f, "type"))
        type = json_object_get(f, "type");
    if (is(type, "json_object"))
        note_text(r, "response-format", "The system is invoked with `response_format=json_object`.\n",
                  RAW_JSON, "");
    else if (is(type, "json_schema"))
        note_json(r, "response-format",
                  "The system is invoked with `response_format=json_schema`.\n"
                  "Your response must be raw JSON data without markdown code blocks (```json) "
                  "or any additional formatting.\nThe JSON data must match the following "
                  "schema:\n```json\n",
                  response_schema(f));
}

/* ---- the prompt --------------------------------------------------------------------- */

static int message(struct k3_chat_render *r, const struct k3_chat_view *v, const json_t **prior,
                   size_t *tool_index)
{
    char param[96];
    snprintf(param, sizeof param, "messages[%zu].role", v->at);
    const json_t *m = v->m, *role = json_object_get(m, "role");
    if (!json_is_object(m))
        return 0; /* the encoder skips what is not a dict (strict refused it) */
    if (!role)
        return k3_chat_fail(r, param, "%s is missing", param);
    bool system = is(role, "system") || (r->o->strict && is(role, "developer"));
    if (is(role, "user"))
        return plain(r, m, "user", v->at);
    if (system && k3_py_truthy(json_object_get(m, "tools"))) {
        note_json(r, "tool-declare", NEW_TOOLS_HEAD, json_object_get(m, "tools"));
        return 0;
    }
    if (system)
        return plain(r, m, "system", v->at);
    if (is(role, "tool"))
        return tool_result(r, v, *prior, ++*tool_index);
    if (is(role, "assistant")) {
        *prior = json_object_get(m, "tool_calls");
        *tool_index = 0;
        return assistant(r, m, v->at);
    }
    return 0; /* another role: the encoder drops it (strict refused it) */
}

static int conversation(struct k3_chat_render *r)
{
    struct k3_chat_view *views;
    if (k3_chat_order_results(r, &views))
        return -1;
    const json_t *prior = NULL;
    size_t tool_index = 0;
    int rc = 0;
    for (size_t i = 0; !rc && i < json_array_size(r->messages); i++)
        rc = message(r, &views[i], &prior, &tool_index);
    free(views);
    return rc;
}

int k3_chat_render(const json_t *messages, const json_t *tools, const struct k3_chat_opts *o,
                   struct k3_chat_segs *out, struct k3_chat_fault *fault)
{
    struct k3_chat_render r = {.o = o, .out = out, .fault = fault, .tools = tools,
                               .messages = messages};
    if (fault)
        memset(fault, 0, sizeof *fault);
    if (check_request(&r) || k3_chat_check_arguments(&r))
        return -1;
    if (k3_py_truthy(tools))
        note_json(&r, "tool-declare", TOOLS_HEAD, tools);
    if (o->thinking && o->effort)
        note_text(&r, "thinking-effort", EFFORT_NOTE, o->effort, "`.");
    if (conversation(&r))
        return r.oom ? k3_chat_fail(&r, "", "out of memory") : -1;
    tool_choice_note(&r);
    response_format_note(&r);
    if (o->add_generation_prompt) {
        struct k3_chat_attr role = {"role", "assistant", 9};
        k3_chat_open(&r, "message", &role, 1);
        k3_chat_open(&r, o->thinking ? "think" : "response", NULL, 0);
    }
    return r.oom ? k3_chat_fail(&r, "", "out of memory") : 0;
}
