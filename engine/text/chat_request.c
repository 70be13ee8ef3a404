/* The render options of an OpenAI chat request, as vLLM reads them for K3:
 * reasoning_effort (default max, "none" turns thinking off), chat_template_kwargs.thinking,
 * tool_choice, response_format and add_generation_prompt. */
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

int k3_chat_request_opts(const json_t *req, struct k3_chat_opts *o, struct k3_chat_fault *fault)
{
    memset(fault, 0, sizeof *fault);
    *o = (struct k3_chat_opts){.thinking = true, .effort = "max", .add_generation_prompt = true,
                               .strict = true};
    if (!json_is_object(req))
        return fail(fault, "", "the request must be a JSON object");
    const json_t *kwargs = json_object_get(req, "chat_template_kwargs");
    if (kwargs && !json_is_null(kwargs) && !json_is_object(kwargs))
        return fail(fault, "chat_template_kwargs", "chat_template_kwargs must be an object");
    if (boolean(kwargs, "thinking", &o->thinking))
        return fail(fault, "chat_template_kwargs.thinking",
                    "chat_template_kwargs.thinking must be true or false");
    if (boolean(req, "add_generation_prompt", &o->add_generation_prompt))
        return fail(fault, "add_generation_prompt", "add_generation_prompt must be true or false");
    const json_t *effort = json_object_get(req, "reasoning_effort");
    if (effort && !json_is_null(effort) && !json_is_string(effort))
        return fail(fault, "reasoning_effort", "reasoning_effort must be a string");
    if (json_is_string(effort))
        o->effort = json_string_value(effort);
    if (!strcmp(o->effort, "none")) {
        o->thinking = false;
        o->effort = NULL;
    }
    o->tool_choice = json_object_get(req, "tool_choice");
    o->response_format = json_object_get(req, "response_format");
    return 0;
}
