/* An Anthropic Messages request as the OpenAI chat body serve reads, in the shape
 * llama-server's convert_anthropic_to_oai gives; stricter where that one guesses (an
 * image, a tool_result naming no call, a prefilled assistant turn are refused, each
 * naming its field). */
#include "engine/serve/anthropic.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/serve/json_fields.h"

#define INVALID "invalid_request_error"

static bool nonempty_string(json_t *v)
{
    return json_is_string(v) && json_string_length(v) > 0;
}

/* A 400 for the field fmt names: "FIELD what". */
__attribute__((format(printf, 3, 4))) static int refuse(struct k3_api_error *e, const char *what,
                                                        const char *fmt, ...)
{
    char param[96];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(param, sizeof param, fmt, ap);
    va_end(ap);
    return k3_api_errorf(e, 400, INVALID, param, "%s %s", param, what);
}

static int out_of_memory(struct k3_api_error *e)
{
    return k3_api_errorf(e, 500, "server_error", NULL, "out of memory");
}

/* ---- text ------------------------------------------------------------------------- */

/* A text block's {"type": "text", "text": ...} as an OpenAI content part (cache_control
 * and citations dropped); where names the block. */
static json_t *text_part(json_t *block, const char *where, struct k3_api_error *e)
{
    json_t *text = json_object_get(block, "text");
    if (!json_is_string(text)) {
        refuse(e, "must be a string", "%s.text", where);
        return NULL;
    }
    json_t *part = json_pack("{s:s, s:O}", "type", "text", "text", text);
    if (!part)
        out_of_memory(e);
    return part;
}

/* system: a string, or text blocks (as content parts). */
static int system_message(json_t *body, json_t *out, struct k3_api_error *e)
{
    json_t *sys = k3_json_given(body, "system");
    if (!sys)
        return 0;
    if (json_is_string(sys))
        return json_array_append_new(out, json_pack("{s:s, s:O}", "role", "system", "content", sys))
                   ? out_of_memory(e) : 0;
    if (!json_is_array(sys))
        return refuse(e, "must be a string or an array of text blocks", "system");
    json_t *parts = json_array();
    size_t i;
    json_t *block;
    json_array_foreach(sys, i, block) {
        char where[32];
        snprintf(where, sizeof where, "system[%zu]", i);
        if (!k3_json_is(json_object_get(block, "type"), "text")) {
            json_decref(parts);
            return refuse(e, "must be a text block (type \"text\")", "%s.type", where);
        }
        json_t *part = text_part(block, where, e);
        if (!part || json_array_append_new(parts, part)) {
            json_decref(parts);
            return -1;
        }
    }
    return json_array_append_new(out, json_pack("{s:s, s:o}", "role", "system", "content", parts))
               ? out_of_memory(e) : 0;
}

/* ---- tools ------------------------------------------------------------------------ */

/* tools: custom tools ({name, description, input_schema}) as OpenAI function tools. */
static int convert_tools(json_t *body, json_t *oai, struct k3_api_error *e)
{
    json_t *tools = k3_json_given(body, "tools");
    if (!tools)
        return 0;
    if (!json_is_array(tools))
        return refuse(e, "must be an array", "tools");
    json_t *out = json_array();
    json_object_set_new(oai, "tools", out);
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        json_t *type = k3_json_given(t, "type"), *name = json_object_get(t, "name"),
               *description = k3_json_given(t, "description"), *schema = json_object_get(t, "input_schema");
        if (!json_is_object(t))
            return refuse(e, "must be an object", "tools[%zu]", i);
        if (type && !k3_json_is(type, "custom"))
            return refuse(e, "is not supported: only custom tools (a name and an input_schema), "
                          "which the client runs", "tools[%zu].type", i);
        if (!nonempty_string(name))
            return refuse(e, "must be a non-empty string", "tools[%zu].name", i);
        if (description && !json_is_string(description))
            return refuse(e, "must be a string", "tools[%zu].description", i);
        if (!json_is_object(schema))
            return refuse(e, "must be an object (a JSON schema)", "tools[%zu].input_schema", i);
        json_t *fn = json_pack("{s:O, s:O}", "name", name, "parameters", schema);
        if (fn && description && json_object_set(fn, "description", description)) {
            json_decref(fn);
            fn = NULL;
        }
        if (!fn || json_array_append_new(out, json_pack("{s:s, s:o}", "type", "function",
                                                        "function", fn)))
            return out_of_memory(e);
    }
    return 0;
}

static bool tool_declared(json_t *tools, const char *name)
{
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        if (k3_json_is(json_object_get(t, "name"), name))
            return true;
    }
    return false;
}

/* tool_choice {type: auto | any | tool (name) | none, disable_parallel_tool_use} as
 * OpenAI's auto / required / {type: function, function: {name}} / none, and
 * parallel_tool_calls. */
static int convert_tool_choice(json_t *body, json_t *oai, struct k3_api_error *e)
{
    json_t *tc = k3_json_given(body, "tool_choice"), *tools = k3_json_given(body, "tools");
    if (!tc)
        return 0;
    json_t *type = json_object_get(tc, "type"), *name = json_object_get(tc, "name");
    json_t *no_parallel = k3_json_given(tc, "disable_parallel_tool_use");
    json_t *choice;
    if (!json_is_object(tc))
        return refuse(e, "must be an object with a type", "tool_choice");
    if (no_parallel && !json_is_boolean(no_parallel))
        return refuse(e, "must be a boolean", "tool_choice.disable_parallel_tool_use");
    if (k3_json_is(type, "auto") || k3_json_is(type, "none")) {
        choice = json_incref(type);
    } else if (k3_json_is(type, "any") || k3_json_is(type, "tool")) {
        if (!json_array_size(tools))
            return refuse(e, "asks for a tool call, but there are no tools", "tool_choice.type");
        if (k3_json_is(type, "any")) {
            choice = json_string("required");
        } else if (!json_is_string(name)) {
            return refuse(e, "must be the name of one of the tools", "tool_choice.name");
        } else if (!tool_declared(tools, json_string_value(name))) {
            return refuse(e, "names no tool", "tool_choice.name");
        } else {
            choice = json_pack("{s:s, s:{s:O}}", "type", "function", "function", "name", name);
        }
    } else {
        return refuse(e, "must be \"auto\", \"any\", \"tool\" or \"none\"", "tool_choice.type");
    }
    if (json_object_set_new(oai, "tool_choice", choice) ||
        (no_parallel && json_object_set_new(oai, "parallel_tool_calls",
                                            json_boolean(!json_is_true(no_parallel)))))
        return out_of_memory(e);
    return 0;
}

/* ---- messages --------------------------------------------------------------------- */

/* One message's conversion: where it goes, what it may refer to. */
struct turn {
    json_t *out;       /* the OpenAI messages so far */
    json_t *tools;     /* the request's tools, or NULL */
    json_t *call_ids;  /* the previous assistant turn's tool_use ids, or NULL */
    size_t i;          /* the message's index */
};

static bool among(json_t *ids, json_t *id)
{
    size_t k;
    json_t *x;
    json_array_foreach(ids, k, x) {
        if (json_equal(x, id))
            return true;
    }
    return false;
}

/* A tool_result's content (a string, text blocks or none) as one string; the encoder
 * joins text parts with nothing between, as this does. */
static json_t *result_text(json_t *content, const char *where, struct k3_api_error *e)
{
    if (!content)
        return json_string("");
    if (json_is_string(content))
        return json_incref(content);
    if (!json_is_array(content)) {
        refuse(e, "must be a string or an array of text blocks", "%s.content", where);
        return NULL;
    }
    char *text = strdup("");
    size_t len = 0, k;
    json_t *block;
    json_array_foreach(content, k, block) {
        json_t *t = json_object_get(block, "text");
        if (!k3_json_is(json_object_get(block, "type"), "text")) {
            refuse(e, "is not supported in a tool_result: only text blocks", "%s.content[%zu].type",
                   where, k);
            free(text);
            return NULL;
        }
        if (!json_is_string(t)) {
            refuse(e, "must be a string", "%s.content[%zu].text", where, k);
            free(text);
            return NULL;
        }
        char *grown = text ? realloc(text, len + json_string_length(t) + 1) : NULL;
        if (!grown) {
            free(text);
            out_of_memory(e);
            return NULL;
        }
        memcpy(grown + len, json_string_value(t), json_string_length(t) + 1);
        len += json_string_length(t);
        text = grown;
    }
    json_t *v = text ? json_stringn(text, len) : NULL;
    free(text);
    if (!v)
        out_of_memory(e);
    return v;
}

/* A tool_result block as a tool message: its tool_use_id must name a tool_use block of
 * the assistant turn just before (as Anthropic requires). */
static int tool_message(const struct turn *t, json_t *block, const char *where,
                        struct k3_api_error *e)
{
    json_t *id = json_object_get(block, "tool_use_id"), *is_error = k3_json_given(block, "is_error");
    if (!nonempty_string(id))
        return refuse(e, "must be a non-empty string", "%s.tool_use_id", where);
    if (!among(t->call_ids, id))
        return refuse(e, "names no tool_use block of the assistant message just before",
                      "%s.tool_use_id", where);
    /* The rendered tool message has no error mark; the result's text says what failed. */
    if (is_error && !json_is_boolean(is_error))
        return refuse(e, "must be a boolean", "%s.is_error", where);
    json_t *text = result_text(k3_json_given(block, "content"), where, e);
    if (!text)
        return -1;
    return json_array_append_new(t->out, json_pack("{s:s, s:O, s:o}", "role", "tool",
                                                   "tool_call_id", id, "content", text))
               ? out_of_memory(e) : 0;
}

/* A tool_use block as an OpenAI tool call, its input dumped as the arguments. */
static int tool_call(const struct turn *t, json_t *block, const char *where, json_t *calls,
                     json_t *ids, struct k3_api_error *e)
{
    json_t *id = json_object_get(block, "id"), *name = json_object_get(block, "name"),
           *input = json_object_get(block, "input");
    if (!nonempty_string(id))
        return refuse(e, "must be a non-empty string", "%s.id", where);
    if (!nonempty_string(name))
        return refuse(e, "must be a non-empty string", "%s.name", where);
    /* The renderer's rule: once tools are declared, a past call names one of them. */
    if (t->tools && json_array_size(t->tools) && !tool_declared(t->tools, json_string_value(name)))
        return refuse(e, "names no tool of the request's tools", "%s.name", where);
    if (!json_is_object(input))
        return refuse(e, "must be an object", "%s.input", where);
    char *args = json_dumps(input, JSON_COMPACT);
    json_t *call = args ? json_pack("{s:O, s:s, s:{s:O, s:s}}", "id", id, "type", "function",
                                    "function", "name", name, "arguments", args) : NULL;
    free(args);
    if (json_array_append_new(calls, call) || json_array_append(ids, id))
        return out_of_memory(e);
    return 0;
}

/* A block of the other role's kind: role is the one that may hold it. */
static int only_on(const char *type, const char *role, const char *where, struct k3_api_error *e)
{
    char what[96];
    snprintf(what, sizeof what, "is \"%s\", which only a%s %s message may hold", type,
             role[0] == 'a' ? "n" : "", role);
    return refuse(e, what, "%s.type", where);
}

static int unsupported_block(json_t *type, const char *where, struct k3_api_error *e)
{
    if (!json_is_string(type))
        return refuse(e, "must be a string", "%s.type", where);
    char what[160];
    if (k3_json_is(type, "image") || k3_json_is(type, "document"))
        snprintf(what, sizeof what, "is \"%s\": this server reads text only",
                 json_string_value(type));
    else
        snprintf(what, sizeof what, "is \"%.60s\", which is not supported (text, thinking, "
                 "redacted_thinking, tool_use and tool_result are)", json_string_value(type));
    return refuse(e, what, "%s.type", where);
}

/* A user turn: tool_result blocks as tool messages, then the text blocks as one user
 * message (none when there are no text blocks). */
static int user_blocks(const struct turn *t, json_t *content, struct k3_api_error *e)
{
    json_t *parts = json_array();
    size_t j;
    json_t *block;
    json_array_foreach(content, j, block) {
        char where[64];
        snprintf(where, sizeof where, "messages[%zu].content[%zu]", t->i, j);
        json_t *type = json_object_get(block, "type"), *part = NULL;
        int rc = 0;
        if (k3_json_is(type, "text"))
            rc = (part = text_part(block, where, e)) ? json_array_append_new(parts, part) : -1;
        else if (k3_json_is(type, "tool_result"))
            rc = tool_message(t, block, where, e);
        else if (k3_json_is(type, "thinking") || k3_json_is(type, "redacted_thinking") || k3_json_is(type, "tool_use"))
            rc = only_on(json_string_value(type), "assistant", where, e);
        else
            rc = unsupported_block(type, where, e);
        if (rc) {
            json_decref(parts);
            return -1;
        }
    }
    if (!json_array_size(parts)) {
        json_decref(parts);
        return 0;
    }
    return json_array_append_new(t->out, json_pack("{s:s, s:o}", "role", "user", "content", parts))
               ? out_of_memory(e) : 0;
}

/* What an assistant turn's blocks gather. */
struct assistant {
    json_t *parts;     /* text blocks, as content parts */
    json_t *calls;     /* tool_use blocks, as tool calls */
    char *reasoning;   /* thinking blocks' text, joined */
    size_t reasoning_len;
};

static int add_thinking(struct assistant *a, json_t *block, const char *where,
                        struct k3_api_error *e)
{
    json_t *text = json_object_get(block, "thinking");
    if (!json_is_string(text))
        return refuse(e, "must be a string", "%s.thinking", where);
    size_t n = json_string_length(text);
    char *grown = realloc(a->reasoning, a->reasoning_len + n + 1);
    if (!grown)
        return out_of_memory(e);
    memcpy(grown + a->reasoning_len, json_string_value(text), n + 1);
    a->reasoning = grown;
    a->reasoning_len += n;
    return 0;
}

/* An assistant turn: text blocks as content, thinking blocks as reasoning_content (a
 * redacted_thinking block holds only Anthropic's ciphertext: nothing K3 can read, so it
 * adds nothing), tool_use blocks as tool_calls; ids collects the calls' ids. */
static int assistant_blocks(const struct turn *t, json_t *content, json_t *ids,
                            struct k3_api_error *e)
{
    struct assistant a = {json_array(), json_array(), NULL, 0};
    size_t j;
    json_t *block;
    int rc = 0;
    json_array_foreach(content, j, block) {
        char where[64];
        snprintf(where, sizeof where, "messages[%zu].content[%zu]", t->i, j);
        json_t *type = json_object_get(block, "type"), *part;
        if (k3_json_is(type, "text"))
            rc = (part = text_part(block, where, e)) ? json_array_append_new(a.parts, part) : -1;
        else if (k3_json_is(type, "thinking"))
            rc = add_thinking(&a, block, where, e);
        else if (k3_json_is(type, "redacted_thinking"))
            rc = 0;
        else if (k3_json_is(type, "tool_use"))
            rc = tool_call(t, block, where, a.calls, ids, e);
        else if (k3_json_is(type, "tool_result"))
            rc = only_on("tool_result", "user", where, e);
        else
            rc = unsupported_block(type, where, e);
        if (rc)
            break;
    }
    json_t *m = rc ? NULL : json_pack("{s:s, s:o}", "role", "assistant", "content",
                                       json_array_size(a.parts) ? json_incref(a.parts)
                                                                : json_string(""));
    if (m && json_array_size(a.calls))
        json_object_set(m, "tool_calls", a.calls);
    if (m && a.reasoning_len)
        json_object_set_new(m, "reasoning_content", json_stringn(a.reasoning, a.reasoning_len));
    if (!rc && json_array_append_new(t->out, m))
        rc = out_of_memory(e);
    json_decref(a.parts);
    json_decref(a.calls);
    free(a.reasoning);
    return rc;
}

/* messages[i]: a user or assistant turn whose content is a string or blocks; ids
 * collects an assistant turn's tool_use ids, for the next turn's tool_result blocks. */
static int convert_message(struct turn *t, json_t *m, json_t *ids, struct k3_api_error *e)
{
    size_t i = t->i;
    json_t *role = json_object_get(m, "role"), *content = json_object_get(m, "content");
    if (!json_is_object(m))
        return refuse(e, "must be an object", "messages[%zu]", i);
    if (!k3_json_is(role, "user") && !k3_json_is(role, "assistant"))
        return refuse(e, "must be \"user\" or \"assistant\" (system goes in the top-level system "
                      "field)", "messages[%zu].role", i);
    bool user = k3_json_is(role, "user");
    if (json_is_string(content))
        return json_array_append_new(t->out, json_pack("{s:O, s:O}", "role", role, "content",
                                                       content)) ? out_of_memory(e) : 0;
    if (!json_is_array(content) || !json_array_size(content))
        return refuse(e, "must be a string or a non-empty array of content blocks",
                      "messages[%zu].content", i);
    return user ? user_blocks(t, content, e) : assistant_blocks(t, content, ids, e);
}

static int convert_messages(json_t *body, json_t *oai, struct k3_api_error *e)
{
    json_t *messages = json_object_get(body, "messages");
    if (!json_is_array(messages) || !json_array_size(messages))
        return refuse(e, messages ? "must be a non-empty array" : "is required", "messages");
    size_t n = json_array_size(messages);
    /* A last assistant turn asks Anthropic to continue it (a prefill); K3's prompt ends
     * in a new turn instead, so it would be silently ignored. */
    if (k3_json_is(json_object_get(json_array_get(messages, n - 1), "role"), "assistant"))
        return refuse(e, "is \"assistant\": continuing a prefilled assistant turn is not "
                      "supported (the last message must be the user's)", "messages[%zu].role",
                      n - 1);
    json_t *out = json_object_get(oai, "messages");
    struct turn t = {.out = out, .tools = k3_json_given(body, "tools")};
    for (size_t i = 0; i < n; i++) {
        json_t *ids = json_array();
        t.i = i;
        int rc = convert_message(&t, json_array_get(messages, i), ids, e);
        json_decref(t.call_ids);
        t.call_ids = ids;
        if (rc) {
            json_decref(t.call_ids);
            return -1;
        }
    }
    json_decref(t.call_ids);
    return 0;
}

/* ---- the rest of the body ---------------------------------------------------------- */

/* thinking {type: enabled (budget_tokens) | adaptive | disabled} as
 * chat_template_kwargs.thinking.  K3 has no thinking budget: it is checked, not used. */
static int convert_thinking(json_t *body, json_t *oai, struct k3_api_error *e)
{
    json_t *th = k3_json_given(body, "thinking");
    if (!th)
        return 0;
    json_t *type = json_object_get(th, "type"), *budget = json_object_get(th, "budget_tokens");
    if (!json_is_object(th))
        return refuse(e, "must be an object with a type", "thinking");
    bool on = k3_json_is(type, "enabled") || k3_json_is(type, "adaptive");
    if (!on && !k3_json_is(type, "disabled"))
        return refuse(e, "must be \"enabled\", \"adaptive\" or \"disabled\"", "thinking.type");
    if (k3_json_is(type, "enabled") && !(json_is_integer(budget) && json_integer_value(budget) > 0))
        return refuse(e, "must be a positive integer when thinking is enabled",
                      "thinking.budget_tokens");
    /* A copy: the body's own chat_template_kwargs (passed through) stays as sent. */
    json_t *sent = k3_json_given(oai, "chat_template_kwargs");
    if (sent && !json_is_object(sent))
        return refuse(e, "must be an object", "chat_template_kwargs");
    json_t *kwargs = json_is_object(sent) ? json_copy(sent) : json_object();
    if (!kwargs || json_object_set_new(oai, "chat_template_kwargs", kwargs) ||
        json_object_set_new(kwargs, "thinking", json_boolean(on)))
        return out_of_memory(e);
    return 0;
}

static int convert_stops(json_t *body, json_t *oai, struct k3_api_error *e)
{
    json_t *stops = k3_json_given(body, "stop_sequences");
    if (!stops)
        return 0;
    if (!json_is_array(stops))
        return refuse(e, "must be an array of strings", "stop_sequences");
    if (json_array_size(stops) > K3_MAX_STOPS)
        return k3_api_errorf(e, 400, INVALID, "stop_sequences",
                             "stop_sequences has %zu strings; this server takes at most %d",
                             json_array_size(stops), K3_MAX_STOPS);
    size_t i;
    json_t *s;
    json_array_foreach(stops, i, s) {
        if (!json_is_string(s) || !json_string_length(s) ||
            json_string_length(s) > K3_API_MAX_STOP_BYTES)
            return k3_api_errorf(e, 400, INVALID, "stop_sequences", "stop_sequences[%zu] must be "
                                 "a string of 1 to %d bytes", i, K3_API_MAX_STOP_BYTES);
    }
    return json_object_set(oai, "stop", stops) ? out_of_memory(e) : 0;
}

static int convert(json_t *body, json_t *oai, struct k3_api_error *e)
{
    json_t *max = k3_json_given(body, "max_tokens");
    if (!max)
        return refuse(e, "is required", "max_tokens");
    if (!json_is_integer(max) || json_integer_value(max) < 1)
        return refuse(e, "must be an integer of at least 1", "max_tokens");
    /* Passed as they are: the OpenAI parser checks them under the same names. */
    static const char *const same[] = {"model", "max_tokens", "temperature", "top_p", "top_k",
                                       "stream", "seed", "cache_prompt", "chat_template_kwargs"};
    for (size_t i = 0; i < sizeof same / sizeof *same; i++) {
        json_t *v = json_object_get(body, same[i]);
        if (v && json_object_set(oai, same[i], v))
            return out_of_memory(e);
    }
    if (system_message(body, json_object_get(oai, "messages"), e) ||
        convert_tools(body, oai, e) || convert_messages(body, oai, e) ||
        convert_tool_choice(body, oai, e) || convert_thinking(body, oai, e) ||
        convert_stops(body, oai, e))
        return -1;
    return 0;
}

json_t *k3_anthropic_request(json_t *body, struct k3_api_error *e)
{
    if (!json_is_object(body)) {
        k3_api_errorf(e, 400, INVALID, NULL, "the body must be a JSON object");
        return NULL;
    }
    json_t *oai = json_pack("{s:[]}", "messages");
    if (!oai) {
        out_of_memory(e);
        return NULL;
    }
    if (convert(body, oai, e)) {
        json_decref(oai);
        return NULL;
    }
    return oai;
}

/* ---- errors of the converted body ----------------------------------------------- */

/* s (cap bytes) with each OpenAI path of a tool or of tool_choice ("tools[3].function.
 * parameters.properties.x") written as the Anthropic request's ("tools[3].input_schema.
 * properties.x"); never longer. */
static void anthropic_paths(char *s, size_t cap)
{
    static const struct {
        const char *from, *to;
    } tails[] = {{".function.parameters", ".input_schema"}, {".function.name", ".name"},
                 {".function", ""}};
    char out[512]; /* at least e->message's length */
    size_t o = 0;
    for (const char *p = s; *p && o < sizeof out - 1;) {
        size_t head = 0;
        if (!strncmp(p, "tools[", 6)) {
            for (head = 6; isdigit((unsigned char)p[head]); head++)
                ;
            head = p[head] == ']' && head > 6 ? head + 1 : 0;
        } else if (!strncmp(p, "tool_choice", 11)) {
            head = 11;
        }
        if (!head) {
            out[o++] = *p++;
            continue;
        }
        o += (size_t)snprintf(out + o, sizeof out - o, "%.*s", (int)head, p);
        p += head;
        for (size_t k = 0; k < sizeof tails / sizeof *tails; k++) {
            size_t n = strlen(tails[k].from);
            if (!strncmp(p, tails[k].from, n)) {
                o += (size_t)snprintf(out + o, sizeof out - o, "%s", tails[k].to);
                p += n;
                break;
            }
        }
        o = o < sizeof out - 1 ? o : sizeof out - 1;
    }
    out[o] = 0;
    snprintf(s, cap, "%s", out);
}

void k3_anthropic_error_fields(struct k3_api_error *e)
{
    anthropic_paths(e->param, sizeof e->param);
    anthropic_paths(e->message, sizeof e->message);
}
