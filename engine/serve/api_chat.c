/* A chat request's K3 options: thinking and its effort, tools and tool_choice,
 * response_format; the prompt rendered from them (text/chat.h) and the grammar that
 * constrains the answer (grammar/grammar.h).  Each refusal names its field. */
#include "engine/serve/api_chat.h"

#include <stdlib.h>
#include <string.h>

#include "engine/grammar/grammar.h"
#include "engine/serve/json_fields.h"
#include "engine/text/chat.h"

#define INVALID "invalid_request_error"

/* OpenAI's older `functions` and `function_call`, as the tools they stand for. */
static int legacy_functions(json_t *root, struct k3_api_error *e)
{
    json_t *fns = k3_json_given(root, "functions"), *call = k3_json_given(root, "function_call");
    if (!fns && !call)
        return 0;
    if (k3_json_given(root, "tools"))
        return k3_api_errorf(e, 400, INVALID, "functions", "send tools or functions, not both");
    if (fns && !json_is_array(fns))
        return k3_api_errorf(e, 400, INVALID, "functions", "functions must be an array");
    json_t *tools = json_array();
    size_t i;
    json_t *f;
    json_array_foreach(fns, i, f)
        json_array_append_new(tools, json_pack("{s:s, s:O}", "type", "function", "function", f));
    json_object_set_new(root, "tools", tools);
    if (json_is_object(call))
        call = json_pack("{s:s, s:{s:O?}}", "type", "function", "function", "name",
                         json_object_get(call, "name"));
    else
        json_incref(call);
    if (call)
        json_object_set_new(root, "tool_choice", call);
    return 0;
}

/* The function tool_choice names, NULL for a mode; checked against the tools. */
static int tool_choice(json_t *root, json_t *tools, const char **named, struct k3_api_error *e)
{
    *named = NULL;
    json_t *v = k3_json_given(root, "tool_choice");
    if (!v || k3_json_is(v, "auto") || k3_json_is(v, "none"))
        return 0;
    if (k3_json_is(v, "required")) {
        if (!json_array_size(tools))
            return k3_api_errorf(e, 400, INVALID, "tool_choice",
                                 "tool_choice \"required\" needs tools");
        return 0;
    }
    json_t *name = json_object_get(json_object_get(v, "function"), "name");
    if (!json_is_object(v) || !k3_json_is(json_object_get(v, "type"), "function") || !json_is_string(name))
        return k3_api_errorf(e, 400, INVALID, "tool_choice",
                             "tool_choice must be \"auto\", \"none\", \"required\" or {\"type\": "
                             "\"function\", \"function\": {\"name\": NAME}}");
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        if (k3_json_is(json_object_get(json_object_get(t, "function"), "name"), json_string_value(name))) {
            *named = json_string_value(name);
            return 0;
        }
    }
    return k3_api_errorf(e, 400, INVALID, "tool_choice.function.name",
                         "tool_choice names \"%.100s\", which is not among the tools",
                         json_string_value(name));
}

/* response_format: text, json_object or json_schema (its schema in json_schema.schema). */
static int response_format(json_t *root, json_t **schema, bool *json, struct k3_api_error *e)
{
    *schema = NULL;
    *json = false;
    json_t *v = k3_json_given(root, "response_format");
    if (!v)
        return 0;
    json_t *type = json_object_get(v, "type");
    if (!json_is_object(v) || !json_is_string(type))
        return k3_api_errorf(e, 400, INVALID, "response_format",
                             "response_format must be an object with a type");
    if (k3_json_is(type, "text"))
        return 0;
    *json = true;
    if (k3_json_is(type, "json_object"))
        return 0;
    if (!k3_json_is(type, "json_schema"))
        return k3_api_errorf(e, 400, INVALID, "response_format.type",
                             "response_format.type must be \"text\", \"json_object\" or "
                             "\"json_schema\"");
    /* as the encoder takes it: json_schema.schema, else json_schema.json_schema, else
     * json_schema itself */
    json_t *js = json_object_get(v, "json_schema");
    if (!json_is_object(js))
        return k3_api_errorf(e, 400, INVALID, "response_format.json_schema",
                             "response_format.json_schema must be an object");
    *schema = json_object_get(js, "schema");
    if (!*schema)
        *schema = json_object_get(js, "json_schema");
    if (!*schema)
        *schema = js;
    if (!json_is_object(*schema))
        return k3_api_errorf(e, 400, INVALID, "response_format.json_schema.schema",
                             "response_format.json_schema.schema must be an object");
    return 0;
}

static int grammar_fault(struct k3_api_error *e, const struct k3_grammar_fault *f)
{
    return k3_api_errorf(e, 400, INVALID, f->param, "%s", f->message);
}

/* The grammar that keeps the answer a call (tool_choice required or named) or JSON
 * (response_format json_object or json_schema); none otherwise. */
static int answer_grammar(json_t *root, json_t *tools, struct k3_api_chat *c,
                          struct k3_api_error *e)
{
    const char *named;
    json_t *schema;
    bool json;
    bool parallel = true;
    json_t *pv = k3_json_given(root, "parallel_tool_calls");
    if (pv && !json_is_boolean(pv))
        return k3_api_errorf(e, 400, INVALID, "parallel_tool_calls",
                             "parallel_tool_calls must be a boolean");
    if (pv)
        parallel = json_is_true(pv);
    if (tool_choice(root, tools, &named, e) || response_format(root, &schema, &json, e))
        return -1;
    struct k3_grammar_fault f = {{0}, {0}};
    if (named || k3_json_is(k3_json_given(root, "tool_choice"), "required")) {
        if (k3_grammar_tools(tools, named, parallel, c->thinking, &c->grammar, &f))
            return grammar_fault(e, &f);
    } else if (json && k3_grammar_json(schema, c->thinking, &c->grammar, &f)) {
        return grammar_fault(e, &f);
    }
    return 0;
}

static int render(const struct k3_tokenizer *tok, json_t *root, struct k3_api_chat *c,
                  struct k3_api_error *e)
{
    if (legacy_functions(root, e))
        return -1;
    json_t *messages = json_object_get(root, "messages"), *tools = k3_json_given(root, "tools");
    if (!json_is_array(messages) || !json_array_size(messages))
        return k3_api_errorf(e, 400, INVALID, "messages",
                             messages ? "messages must be a non-empty array" : "messages is required");
    if (tools && !json_is_array(tools))
        return k3_api_errorf(e, 400, INVALID, "tools", "tools must be an array");
    struct k3_chat_opts o;
    struct k3_chat_fault fault = {{0}, {0}};
    if (k3_chat_request_opts(root, &o, &fault) ||
        k3_chat_render(messages, tools, &o, &c->segs, &fault))
        return k3_api_errorf(e, fault.param[0] ? 400 : 500, fault.param[0] ? INVALID : "server_error",
                             fault.param[0] ? fault.param : NULL, "%s", fault.message);
    c->thinking = o.thinking;
    c->keep_calls = !k3_json_is(k3_json_given(root, "tool_choice"), "none");
    if (answer_grammar(root, tools, c, e))
        return -1;
    struct k3_err err;
    size_t n = 0;
    if (tok && k3_chat_segs_encode(tok, &c->segs, &c->ids, &n, &err))
        return k3_api_errorf(e, 400, INVALID, "messages", "messages: %s", err.msg);
    c->n_ids = (int)n;
    return 0;
}

int k3_api_chat_render(const struct k3_tokenizer *tok, json_t *root, struct k3_api_chat *c,
                       struct k3_api_error *e)
{
    memset(c, 0, sizeof *c);
    if (!render(tok, root, c, e))
        return 0;
    k3_api_chat_free(c);
    return -1;
}

void k3_api_chat_free(struct k3_api_chat *c)
{
    k3_chat_segs_free(&c->segs);
    k3_grammar_free(c->grammar);
    free(c->ids);
    memset(c, 0, sizeof *c);
}
