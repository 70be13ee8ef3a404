/* The render options of an OpenAI chat request, as vLLM reads them for K3:
 * reasoning_effort (default max, as K3's apply_chat_template sets it; "none" turns
 * thinking off), chat_template_kwargs thinking / enable_thinking and thinking_effort
 * (which wins over reasoning_effort; null: no note), tool_choice, response_format and
 * add_generation_prompt (default true). */
#include <stdio.h>
#include <string.h>

#include "engine/text/chat_internal.h"

static int fail(struct k3_chat_fault *f, const char *param, const char *message)
{
    snprintf(f->param, sizeof f->param, "%s", param);
    snprintf(f->message, sizeof f->message, "%s", message);
    return -1;
}

/* The boolean at obj.key into *dst when present; -1 when it is not a boolean. */
static int boolean(const json_t *obj, const char *key, bool *dst)
{
    const json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_boolean(v))
        return -1;
    *dst = json_is_true(v);
    return 0;
}

/* An effort as sent: a string (the renderer refuses those K3 does not know), or null for
 * none when null_means_none. */
static int effort(const json_t *v, const char *param, bool null_means_none, const char **out,
                  struct k3_chat_fault *fault)
{
    if (json_is_null(v) && null_means_none) {
        *out = NULL;
        return 0;
    }
    if (!json_is_string(v))
        return fail(fault, param, null_means_none ? "thinking_effort must be a string or null"
                                                  : "reasoning_effort must be a string");
    *out = json_string_value(v);
    return 0;
}

static int thinking(const json_t *req, struct k3_chat_opts *o, struct k3_chat_fault *fault)
{
    const json_t *kwargs = json_object_get(req, "chat_template_kwargs");
    if (kwargs && !json_is_null(kwargs) && !json_is_object(kwargs))
        return fail(fault, "chat_template_kwargs", "chat_template_kwargs must be an object");
    if (boolean(kwargs, "enable_thinking", &o->thinking))
        return fail(fault, "chat_template_kwargs.enable_thinking",
                    "chat_template_kwargs.enable_thinking must be true or false");
    if (boolean(kwargs, "thinking", &o->thinking))
        return fail(fault, "chat_template_kwargs.thinking",
                    "chat_template_kwargs.thinking must be true or false");
    const json_t *kw = json_object_get(kwargs, "thinking_effort");
    if (kw)
        return effort(kw, "chat_template_kwargs.thinking_effort", true, &o->effort, fault);
    const json_t *re = json_object_get(req, "reasoning_effort");
    if (!re || json_is_null(re))
        return 0;
    if (effort(re, "reasoning_effort", false, &o->effort, fault))
        return -1;
    if (!strcmp(o->effort, "none")) {
        o->thinking = false;
        o->effort = NULL;
    }
    return 0;
}

int k3_chat_request_opts(const json_t *req, struct k3_chat_opts *o, struct k3_chat_fault *fault)
{
    memset(fault, 0, sizeof *fault);
    *o = (struct k3_chat_opts){.thinking = true, .effort = "max", .add_generation_prompt = true,
                               .strict = true};
    if (!json_is_object(req))
        return fail(fault, "", "the request must be a JSON object");
    if (thinking(req, o, fault))
        return -1;
    if (boolean(req, "add_generation_prompt", &o->add_generation_prompt))
        return fail(fault, "add_generation_prompt", "add_generation_prompt must be true or false");
    o->tool_choice = json_object_get(req, "tool_choice");
    o->response_format = json_object_get(req, "response_format");
    if (json_is_null(o->tool_choice))
        o->tool_choice = NULL;
    if (json_is_null(o->response_format))
        o->response_format = NULL;
    return 0;
}
