/* The renderer's strict mode (serve's checks on top of encoding_k3.py) and the errors
 * both modes share: each refusal names its field in fault.param and in the message, and
 * where the bare encoder accepts the same request, the non-strict render does (developer
 * and unknown roles dropped, undeclared tools rendered).  Also k3_chat_request_opts:
 * reasoning_effort's default and "none", chat_template_kwargs.thinking. */
#include <stdlib.h>
#include <string.h>

#include "engine/text/chat.h"
#include "tests/check.h"

static const char DECLARED[] =
    "\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", "
    "\"parameters\": {\"type\": \"object\"}}}]";
static const char CALL_LOOKUP[] =
    "{\"role\": \"assistant\", \"content\": \"\", \"tool_calls\": [{\"id\": \"c1\", "
    "\"type\": \"function\", \"function\": {\"name\": \"lookup\", \"arguments\": \"{}\"}}]}";

/* Renders the request body req (a JSON object) with its own options, strict or not;
 * returns the prompt (malloc'd) or NULL with *f filled. */
static char *render(const char *req, bool strict, struct k3_chat_fault *f)
{
    json_error_t je;
    json_t *root = json_loads(req, 0, &je);
    REQUIRE(root, "test request %s: %s", req, je.text);
    struct k3_chat_opts o;
    char *text = NULL;
    if (!k3_chat_request_opts(root, &o, f)) {
        o.strict = strict;
        struct k3_chat_segs segs = {0};
        size_t len;
        if (!k3_chat_render(json_object_get(root, "messages"), json_object_get(root, "tools"),
                            &o, &segs, f))
            REQUIRE((text = k3_chat_segs_join(&segs, &len)), "out of memory");
        k3_chat_segs_free(&segs);
    }
    json_decref(root);
    return text;
}

/* req is refused (strict or not) with fault.param == param, named in the message too. */
static void refused(const char *req, bool strict, const char *param)
{
    struct k3_chat_fault f;
    char *text = render(req, strict, &f);
    CHECK(!text && !strcmp(f.param, param) && strstr(f.message, param),
          "%s (%s): got param \"%s\", message \"%s\", want %s", req,
          strict ? "strict" : "encoder", text ? "(rendered)" : f.param, f.message, param);
    free(text);
}

/* req renders (strict or not), and the prompt contains want (NULL: anything). */
static void renders(const char *req, bool strict, const char *want)
{
    struct k3_chat_fault f;
    char *text = render(req, strict, &f);
    CHECK(text && (!want || strstr(text, want)), "%s (%s): %s; want \"%s\" in it", req,
          strict ? "strict" : "encoder", text ? text : f.message, want ? want : "");
    free(text);
}

static void test_roles(void)
{
    const char *robot = "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}, "
                        "{\"role\": \"robot\", \"content\": \"beep\"}]}";
    refused(robot, true, "messages[1].role");
    renders(robot, false, "Hi<|close|>message<|sep|><|end_of_msg|><|open|>message role=\"assistant\"");
    const char *dev = "{\"messages\": [{\"role\": \"developer\", \"content\": \"Be brief.\"}]}";
    renders(dev, true, "<|open|>message role=\"system\"<|sep|>Be brief.<|close|>");
    struct k3_chat_fault f;
    char *text = render(dev, false, &f);
    CHECK(text && !strstr(text, "Be brief."), "the bare encoder drops developer: %s", text);
    free(text);
    const char *dev_tools = "{\"messages\": [{\"role\": \"developer\", \"content\": \"x\", "
                            "\"tools\": [{\"function\": {\"name\": \"f\"}}]}]}";
    renders(dev_tools, true, "type=\"tool-declare\"<|sep|>## New Tools Available");
    refused("{\"messages\": [7]}", true, "messages[0]");
    renders("{\"messages\": [7, {\"role\": \"user\", \"content\": \"Hi\"}]}", false, "Hi");
    refused("{\"messages\": [{\"content\": \"Hi\"}]}", false, "messages[0].role");
}

static void test_tool_results(void)
{
    const char *orphan = "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}, "
                         "{\"role\": \"tool\", \"name\": \"lookup\", \"content\": \"42\"}]}";
    refused(orphan, true, "messages[1]");
    renders(orphan, false, "<|open|>message role=\"tool\" tool=\"lookup\" index=\"1\"<|sep|>42");
    char req[1024];
    snprintf(req, sizeof req, "{\"messages\": [%s, {\"role\": \"assistant\", \"content\": \"ok\"}, "
             "{\"role\": \"tool\", \"tool_call_id\": \"c1\", \"content\": \"42\"}]}", CALL_LOOKUP);
    refused(req, true, "messages[2]");
    snprintf(req, sizeof req, "{\"messages\": [%s, {\"role\": \"tool\", \"tool_call_id\": \"c1\", "
             "\"content\": \"42\"}]}", CALL_LOOKUP);
    renders(req, true, "tool=\"lookup\" index=\"1\"<|sep|>42");
    /* Nothing names the tool: the encoder's own error. */
    refused("{\"messages\": [{\"role\": \"tool\", \"content\": \"42\"}]}", false,
            "messages[0].tool_call_id");
}

static void test_declared_tools(void)
{
    char req[2048];
    snprintf(req, sizeof req, "{%s, \"messages\": [%s]}", DECLARED, CALL_LOOKUP);
    refused(req, true, "messages[0].tool_calls[0].function.name");
    renders(req, false, "<|open|>call tool=\"lookup\" index=\"1\"<|sep|>");
    snprintf(req, sizeof req, "{\"messages\": [%s]}", CALL_LOOKUP);
    renders(req, true, "<|open|>call tool=\"lookup\"");
    snprintf(req, sizeof req, "{%s, \"messages\": [{\"role\": \"system\", \"tools\": [{\"type\": "
             "\"function\", \"function\": {\"name\": \"lookup\"}}]}, %s]}", DECLARED, CALL_LOOKUP);
    renders(req, true, "<|open|>call tool=\"lookup\"");
    snprintf(req, sizeof req, "{\"messages\": [{\"role\": \"assistant\", \"tool_calls\": "
             "[{\"function\": {\"name\": \"\"}}]}]}");
    refused(req, true, "messages[0].tool_calls[0].function.name");
    renders(req, false, "<|open|>call tool=\"\" index=\"1\"");
    refused("{\"messages\": [{\"role\": \"assistant\", \"tool_calls\": [{\"function\": "
            "{\"arguments\": \"{}\"}}]}]}", false, "messages[0].tool_calls[0].function.name");
}

static void test_tool_lists(void)
{
    const char *user = "\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}]";
    char req[1024];
    snprintf(req, sizeof req, "{\"tools\": {\"name\": \"f\"}, %s}", user);
    refused(req, true, "tools");
    renders(req, false, "```json\n{\"name\":\"f\"}\n```");
    snprintf(req, sizeof req, "{\"tools\": [{\"type\": \"function\", \"function\": {\"description\": "
             "\"d\"}}], %s}", user);
    refused(req, true, "tools[0].function.name");
    renders(req, false, "[{\"function\":{\"description\":\"d\"},\"type\":\"function\"}]");
    snprintf(req, sizeof req, "{\"tools\": [{\"type\": \"function\"}], %s}", user);
    refused(req, true, "tools[0].function");
    snprintf(req, sizeof req, "{\"tools\": [{\"function\": {\"name\": \"f\", \"parameters\": "
             "[1]}}], %s}", user);
    refused(req, true, "tools[0].function.parameters");
    refused("{\"messages\": [{\"role\": \"system\", \"tools\": \"f\"}]}", true, "messages[0].tools");
    refused("{\"messages\": [{\"role\": \"system\", \"tools\": [{\"function\": {\"name\": 3}}]}]}",
            true, "messages[0].tools[0].function.name");
}

static void test_effort(void)
{
    const char *user = "\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}]";
    char req[512];
    snprintf(req, sizeof req, "{\"reasoning_effort\": \"medium\", %s}", user);
    refused(req, true, "reasoning_effort");
    refused(req, false, "reasoning_effort");
    snprintf(req, sizeof req, "{\"reasoning_effort\": \"medium\", \"chat_template_kwargs\": "
             "{\"thinking\": false}, %s}", user);
    refused(req, true, "reasoning_effort");
    renders(req, false, "<|open|>response<|sep|>");
    snprintf(req, sizeof req, "{%s}", user);
    renders(req, true, "Now the system is invoked with `thinking_effort=max`.");
    snprintf(req, sizeof req, "{\"reasoning_effort\": \"none\", %s}", user);
    struct k3_chat_fault f;
    char *text = render(req, true, &f);
    CHECK(text && !strstr(text, "thinking_effort") && strstr(text, "<|open|>response<|sep|>") &&
              !strstr(text, "think<|sep|>"),
          "reasoning_effort none: thinking off, no note: %s", text ? text : f.message);
    free(text);
    snprintf(req, sizeof req, "{\"chat_template_kwargs\": {\"thinking\": \"yes\"}, %s}", user);
    refused(req, true, "chat_template_kwargs.thinking");
    snprintf(req, sizeof req, "{\"reasoning_effort\": 3, %s}", user);
    refused(req, true, "reasoning_effort");
}

/* Errors the encoder raises itself, in both modes. */
static void test_encoder_errors(void)
{
    refused("{\"messages\": [{\"role\": \"assistant\", \"tool_calls\": [{\"function\": {\"name\": "
            "\"f\", \"arguments\": \"[1, 2]\"}}]}]}", false,
            "messages[0].tool_calls[0].function.arguments");
    refused("{\"messages\": [{\"role\": \"assistant\", \"tool_calls\": [{\"function\": {\"name\": "
            "\"f\", \"arguments\": 5}}]}]}", false, "messages[0].tool_calls[0].function.arguments");
    refused("{\"messages\": [{\"role\": \"assistant\", \"tool_calls\": [{\"function\": {\"name\": "
            "\"f\", \"arguments\": \"{\\\"n\\\": 123456789012345678901234567890}\"}}]}]}", true,
            "messages[0].tool_calls[0].function.arguments");
    refused("{\"messages\": [{\"role\": \"user\", \"content\": 7}]}", true, "messages[0].content");
    refused("{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"text\"}]}]}", true,
            "messages[0].content[0].text");
    refused("{\"messages\": [{\"role\": \"user\", \"content\": [{\"text\": \"x\"}]}]}", false,
            "messages[0].content[0].type");
    refused("{\"messages\": [{\"role\": \"user\", \"content\": \"x\", \"name\": [1]}]}", false,
            "messages[0].name");
    refused("{\"messages\": {\"role\": \"user\"}}", false, "messages");
    /* Whitespace Python strips (U+3000) is an empty arguments string, not a json block. */
    renders("{\"messages\": [{\"role\": \"assistant\", \"tool_calls\": [{\"function\": {\"name\": "
            "\"f\", \"arguments\": \"\\u3000\"}}]}]}", true,
            "index=\"1\"<|sep|><|close|>call<|sep|>");
}

int main(void)
{
    test_roles();
    test_tool_results();
    test_declared_tools();
    test_tool_lists();
    test_effort();
    test_encoder_errors();
    return check_result();
}
