/* Anthropic's Messages API: a request becomes the OpenAI chat body field by field and
 * block by block, each refusal naming its Anthropic field; an answer becomes a message
 * whose blocks, ids, stop_reason and usage are what a client folding the streamed
 * events together gets; the events come in Anthropic's order, and the stream's state
 * machine refuses (aborts on) an event after message_stop. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "engine/serve/anthropic.h"
#include "tests/check.h"

/* JSON written with ' for " (no test string holds a quote). */
static json_t *j(const char *text)
{
    char *s = strdup(text);
    for (char *p = s; *p; p++)
        if (*p == '\'')
            *p = '"';
    json_error_t je;
    json_t *v = json_loads(s, 0, &je);
    if (!v)
        fprintf(stderr, "bad test JSON (%s): %s\n", je.text, s);
    free(s);
    return v;
}

static char *show(json_t *v)
{
    static char buf[4096];
    char *s = v ? json_dumps(v, JSON_COMPACT) : NULL;
    snprintf(buf, sizeof buf, "%s", s ? s : "(null)");
    free(s);
    return buf;
}

/* body converted: the OpenAI body, or NULL with e filled. */
static json_t *convert(const char *body, struct k3_api_error *e)
{
    json_t *b = j(body);
    json_t *before = json_deep_copy(b);
    json_t *oai = k3_anthropic_request(b, e);
    CHECK(json_equal(b, before), "the body was changed: %s", show(b));
    json_decref(b);
    json_decref(before);
    return oai;
}

/* body converts to exactly want. */
static void expect(const char *what, const char *body, const char *want)
{
    struct k3_api_error e = {0};
    json_t *oai = convert(body, &e), *w = j(want);
    CHECK(oai && json_equal(oai, w), "%s: got %s (error: %s)", what, show(oai), oai ? "" : e.message);
    json_decref(oai);
    json_decref(w);
}

#define BASE "'model': 'k3', 'max_tokens': 16"
#define HI "{'role': 'user', 'content': 'hi'}"

static void fields(void)
{
    expect("the least request", "{" BASE ", 'messages': [" HI "]}",
           "{'model': 'k3', 'max_tokens': 16, 'messages': [" HI "]}");
    expect("sampling, stream, stop_sequences, seed; metadata dropped",
           "{" BASE ", 'messages': [" HI "], 'temperature': 0.5, 'top_p': 0.75, 'top_k': 40, "
           "'stream': true, 'stop_sequences': ['END', 'STOP'], 'seed': 7, "
           "'metadata': {'user_id': 'u1'}}",
           "{'model': 'k3', 'max_tokens': 16, 'messages': [" HI "], 'temperature': 0.5, "
           "'top_p': 0.75, 'top_k': 40, 'stream': true, 'stop': ['END', 'STOP'], 'seed': 7}");
    expect("system as a string is the first message",
           "{" BASE ", 'system': 'Be brief.', 'messages': [" HI "]}",
           "{'model': 'k3', 'max_tokens': 16, 'messages': [{'role': 'system', 'content': "
           "'Be brief.'}, " HI "]}");
    expect("system as text blocks: content parts, cache_control dropped",
           "{" BASE ", 'system': [{'type': 'text', 'text': 'A. '}, {'type': 'text', 'text': 'B.', "
           "'cache_control': {'type': 'ephemeral'}}], 'messages': [" HI "]}",
           "{'model': 'k3', 'max_tokens': 16, 'messages': [{'role': 'system', 'content': "
           "[{'type': 'text', 'text': 'A. '}, {'type': 'text', 'text': 'B.'}]}, " HI "]}");
    expect("thinking disabled: chat_template_kwargs.thinking false",
           "{" BASE ", 'messages': [" HI "], 'thinking': {'type': 'disabled'}}",
           "{'model': 'k3', 'max_tokens': 16, 'messages': [" HI "], "
           "'chat_template_kwargs': {'thinking': false}}");
    expect("thinking enabled (its budget checked, not passed) beside other kwargs",
           "{" BASE ", 'messages': [" HI "], 'thinking': {'type': 'enabled', 'budget_tokens': 2048}, "
           "'chat_template_kwargs': {'x': 1, 'thinking': false}}",
           "{'model': 'k3', 'max_tokens': 16, 'messages': [" HI "], "
           "'chat_template_kwargs': {'x': 1, 'thinking': true}}");
}

#define WEATHER "{'name': 'get_weather', 'description': 'Weather now', 'input_schema': " \
                "{'type': 'object', 'properties': {'city': {'type': 'string'}}}}"
#define WEATHER_OAI "{'type': 'function', 'function': {'name': 'get_weather', 'description': " \
                    "'Weather now', 'parameters': {'type': 'object', 'properties': {'city': " \
                    "{'type': 'string'}}}}}"

static void tools(void)
{
    expect("tools as function tools (no description: none)",
           "{" BASE ", 'messages': [" HI "], 'tools': [" WEATHER ", {'name': 'now', 'type': "
           "'custom', 'input_schema': {'type': 'object'}}]}",
           "{'model': 'k3', 'max_tokens': 16, 'messages': [" HI "], 'tools': [" WEATHER_OAI ", "
           "{'type': 'function', 'function': {'name': 'now', 'parameters': {'type': 'object'}}}]}");
    static const struct {
        const char *anthropic, *openai;
    } choices[] = {
        {"{'type': 'auto'}", "'tool_choice': 'auto'"},
        {"{'type': 'any'}", "'tool_choice': 'required'"},
        {"{'type': 'none'}", "'tool_choice': 'none'"},
        {"{'type': 'tool', 'name': 'get_weather'}",
         "'tool_choice': {'type': 'function', 'function': {'name': 'get_weather'}}"},
        {"{'type': 'any', 'disable_parallel_tool_use': true}",
         "'tool_choice': 'required', 'parallel_tool_calls': false"},
        {"{'type': 'auto', 'disable_parallel_tool_use': false}",
         "'tool_choice': 'auto', 'parallel_tool_calls': true"},
    };
    for (size_t i = 0; i < sizeof choices / sizeof *choices; i++) {
        char body[512], want[512];
        snprintf(body, sizeof body, "{" BASE ", 'messages': [" HI "], 'tools': [" WEATHER "], "
                 "'tool_choice': %s}", choices[i].anthropic);
        snprintf(want, sizeof want, "{'model': 'k3', 'max_tokens': 16, 'messages': [" HI "], "
                 "'tools': [" WEATHER_OAI "], %s}", choices[i].openai);
        expect(choices[i].anthropic, body, want);
    }
}

static void blocks(void)
{
    expect("user text blocks: content parts",
           "{" BASE ", 'messages': [{'role': 'user', 'content': [{'type': 'text', 'text': 'a'}, "
           "{'type': 'text', 'text': 'b', 'cache_control': {'type': 'ephemeral'}}]}]}",
           "{'model': 'k3', 'max_tokens': 16, 'messages': [{'role': 'user', 'content': "
           "[{'type': 'text', 'text': 'a'}, {'type': 'text', 'text': 'b'}]}]}");
    /* An agent's round: the assistant thought, spoke and called twice; the user turn
     * answers both calls (the second's error as text blocks) and asks more. */
    expect("thinking, redacted_thinking, text, tool_use, then tool_result and text",
           "{" BASE ", 'tools': [" WEATHER "], 'messages': [" HI ", {'role': 'assistant', 'content': ["
           "{'type': 'thinking', 'thinking': 'Two cities.', 'signature': 'sig'}, "
           "{'type': 'redacted_thinking', 'data': 'c2VjcmV0'}, "
           "{'type': 'text', 'text': 'Looking.'}, "
           "{'type': 'tool_use', 'id': 'toolu_1', 'name': 'get_weather', 'input': {'city': 'Paris'}}, "
           "{'type': 'thinking', 'thinking': ' And Rome.', 'signature': 'sig'}, "
           "{'type': 'tool_use', 'id': 'toolu_2', 'name': 'get_weather', 'input': {'city': 'Rome', "
           "'days': 2}}]}, "
           "{'role': 'user', 'content': [{'type': 'text', 'text': 'Thanks.'}, "
           "{'type': 'tool_result', 'tool_use_id': 'toolu_1', 'content': 'sunny'}, "
           "{'type': 'tool_result', 'tool_use_id': 'toolu_2', 'is_error': true, 'content': "
           "[{'type': 'text', 'text': 'no '}, {'type': 'text', 'text': 'data'}]}, "
           "{'type': 'tool_result', 'tool_use_id': 'toolu_1'}]}]}",
           "{'model': 'k3', 'max_tokens': 16, 'tools': [" WEATHER_OAI "], 'messages': [" HI ", "
           "{'role': 'assistant', 'content': [{'type': 'text', 'text': 'Looking.'}], "
           "'reasoning_content': 'Two cities. And Rome.', 'tool_calls': ["
           "{'id': 'toolu_1', 'type': 'function', 'function': {'name': 'get_weather', "
           "'arguments': '{\\'city\\':\\'Paris\\'}'}}, "
           "{'id': 'toolu_2', 'type': 'function', 'function': {'name': 'get_weather', "
           "'arguments': '{\\'city\\':\\'Rome\\',\\'days\\':2}'}}]}, "
           "{'role': 'tool', 'tool_call_id': 'toolu_1', 'content': 'sunny'}, "
           "{'role': 'tool', 'tool_call_id': 'toolu_2', 'content': 'no data'}, "
           "{'role': 'tool', 'tool_call_id': 'toolu_1', 'content': ''}, "
           "{'role': 'user', 'content': [{'type': 'text', 'text': 'Thanks.'}]}]}");
    expect("an assistant turn of calls alone: empty content; a user turn of results alone: no "
           "user message",
           "{" BASE ", 'messages': [" HI ", {'role': 'assistant', 'content': [{'type': 'tool_use', "
           "'id': 't1', 'name': 'f', 'input': {}}]}, {'role': 'user', 'content': [{'type': "
           "'tool_result', 'tool_use_id': 't1', 'content': 'ok'}]}]}",
           "{'model': 'k3', 'max_tokens': 16, 'messages': [" HI ", {'role': 'assistant', 'content': "
           "'', 'tool_calls': [{'id': 't1', 'type': 'function', 'function': {'name': 'f', "
           "'arguments': '{}'}}]}, {'role': 'tool', 'tool_call_id': 't1', 'content': 'ok'}]}");
    expect("string content on both roles as sent",
           "{" BASE ", 'messages': [" HI ", {'role': 'assistant', 'content': 'hello'}, " HI "]}",
           "{'model': 'k3', 'max_tokens': 16, 'messages': [" HI ", {'role': 'assistant', "
           "'content': 'hello'}, " HI "]}");
}

/* body is refused with a 400 whose param is want and whose message names it. */
static void refused(const char *body, const char *want)
{
    struct k3_api_error e = {0};
    json_t *oai = convert(body, &e);
    CHECK(!oai && e.status == 400 && !strcmp(e.param, want) && strstr(e.message, want) &&
              !strcmp(e.type, "invalid_request_error"),
          "want a 400 naming %s: got %s, status %d, param \"%s\", message \"%s\"", want, show(oai),
          e.status, e.param, e.message);
    json_decref(oai);
}

#define ASSISTANT_CALL "{'role': 'assistant', 'content': [{'type': 'tool_use', 'id': 't1', " \
                       "'name': 'get_weather', 'input': {}}]}"

static void refusals(void)
{
    refused("{'model': 'k3', 'messages': [" HI "]}", "max_tokens");
    refused("{'model': 'k3', 'max_tokens': 0, 'messages': [" HI "]}", "max_tokens");
    refused("{'model': 'k3', 'max_tokens': '9', 'messages': [" HI "]}", "max_tokens");
    refused("{" BASE "}", "messages");
    refused("{" BASE ", 'messages': []}", "messages");
    refused("{" BASE ", 'messages': [7]}", "messages[0]");
    refused("{" BASE ", 'messages': [{'role': 'system', 'content': 'x'}, " HI "]}", "messages[0].role");
    refused("{" BASE ", 'messages': [{'role': 'user', 'content': []}]}", "messages[0].content");
    refused("{" BASE ", 'messages': [{'role': 'user', 'content': 5}]}", "messages[0].content");
    refused("{" BASE ", 'messages': [" HI ", {'role': 'assistant', 'content': 'Sure: '}]}",
            "messages[1].role");
    refused("{" BASE ", 'messages': [{'role': 'user', 'content': [{'type': 'text', 'text': 'x'}, "
            "{'type': 'image', 'source': {'type': 'url', 'url': 'http://x/y.png'}}]}]}",
            "messages[0].content[1].type");
    refused("{" BASE ", 'messages': [{'role': 'user', 'content': [{'type': 'document', 'source': "
            "{}}]}]}", "messages[0].content[0].type");
    refused("{" BASE ", 'messages': [{'role': 'user', 'content': [{'type': 'search_result'}]}]}",
            "messages[0].content[0].type");
    refused("{" BASE ", 'messages': [{'role': 'user', 'content': [{'text': 'no type'}]}]}",
            "messages[0].content[0].type");
    refused("{" BASE ", 'messages': [{'role': 'user', 'content': [{'type': 'text', 'text': 3}]}]}",
            "messages[0].content[0].text");
    refused("{" BASE ", 'messages': [{'role': 'user', 'content': [{'type': 'thinking', "
            "'thinking': 'x'}]}]}", "messages[0].content[0].type");
    refused("{" BASE ", 'messages': [{'role': 'user', 'content': [{'type': 'tool_use', 'id': 't', "
            "'name': 'f', 'input': {}}]}]}", "messages[0].content[0].type");
    refused("{" BASE ", 'messages': [" HI ", {'role': 'assistant', 'content': [{'type': "
            "'tool_result', 'tool_use_id': 't1'}]}, " HI "]}", "messages[1].content[0].type");
    refused("{" BASE ", 'messages': [" HI ", {'role': 'assistant', 'content': [{'type': "
            "'thinking', 'thinking': null}]}, " HI "]}", "messages[1].content[0].thinking");
    refused("{" BASE ", 'messages': [" HI ", {'role': 'assistant', 'content': [{'type': "
            "'tool_use', 'name': 'f', 'input': {}}]}, " HI "]}", "messages[1].content[0].id");
    refused("{" BASE ", 'messages': [" HI ", {'role': 'assistant', 'content': [{'type': "
            "'tool_use', 'id': 't1', 'name': '', 'input': {}}]}, " HI "]}",
            "messages[1].content[0].name");
    refused("{" BASE ", 'messages': [" HI ", {'role': 'assistant', 'content': [{'type': "
            "'tool_use', 'id': 't1', 'name': 'f', 'input': '{}'}]}, " HI "]}",
            "messages[1].content[0].input");
    refused("{" BASE ", 'tools': [" WEATHER "], 'messages': [" HI ", {'role': 'assistant', "
            "'content': [{'type': 'tool_use', 'id': 't1', 'name': 'get_time', 'input': {}}]}, " HI "]}",
            "messages[1].content[0].name");
    refused("{" BASE ", 'messages': [" HI ", " ASSISTANT_CALL ", {'role': 'user', 'content': "
            "[{'type': 'tool_result', 'tool_use_id': 't2', 'content': 'x'}]}]}",
            "messages[2].content[0].tool_use_id");
    refused("{" BASE ", 'messages': [" HI ", " ASSISTANT_CALL ", " HI ", {'role': 'user', "
            "'content': [{'type': 'tool_result', 'tool_use_id': 't1'}]}]}",
            "messages[3].content[0].tool_use_id");
    refused("{" BASE ", 'messages': [" HI ", " ASSISTANT_CALL ", {'role': 'user', 'content': "
            "[{'type': 'tool_result', 'tool_use_id': 't1', 'content': [{'type': 'image', "
            "'source': {}}]}]}]}", "messages[2].content[0].content[0].type");
    refused("{" BASE ", 'messages': [" HI ", " ASSISTANT_CALL ", {'role': 'user', 'content': "
            "[{'type': 'tool_result', 'tool_use_id': 't1', 'content': 4}]}]}",
            "messages[2].content[0].content");
    refused("{" BASE ", 'messages': [" HI ", " ASSISTANT_CALL ", {'role': 'user', 'content': "
            "[{'type': 'tool_result', 'tool_use_id': 't1', 'is_error': 'yes'}]}]}",
            "messages[2].content[0].is_error");
    refused("{" BASE ", 'system': 3, 'messages': [" HI "]}", "system");
    refused("{" BASE ", 'system': [{'type': 'image'}], 'messages': [" HI "]}", "system[0].type");
    refused("{" BASE ", 'system': [{'type': 'text'}], 'messages': [" HI "]}", "system[0].text");
    refused("{" BASE ", 'tools': {}, 'messages': [" HI "]}", "tools");
    refused("{" BASE ", 'tools': [{'type': 'web_search_20250305', 'name': 'web_search'}], "
            "'messages': [" HI "]}", "tools[0].type");
    refused("{" BASE ", 'tools': [{'input_schema': {}}], 'messages': [" HI "]}", "tools[0].name");
    refused("{" BASE ", 'tools': [{'name': 'f'}], 'messages': [" HI "]}", "tools[0].input_schema");
    refused("{" BASE ", 'tools': [{'name': 'f', 'description': 1, 'input_schema': {}}], "
            "'messages': [" HI "]}", "tools[0].description");
    refused("{" BASE ", 'tools': [" WEATHER "], 'tool_choice': 'auto', 'messages': [" HI "]}",
            "tool_choice");
    refused("{" BASE ", 'tools': [" WEATHER "], 'tool_choice': {'type': 'required'}, "
            "'messages': [" HI "]}", "tool_choice.type");
    refused("{" BASE ", 'tool_choice': {'type': 'any'}, 'messages': [" HI "]}", "tool_choice.type");
    refused("{" BASE ", 'tools': [" WEATHER "], 'tool_choice': {'type': 'tool', 'name': 'f'}, "
            "'messages': [" HI "]}", "tool_choice.name");
    refused("{" BASE ", 'tools': [" WEATHER "], 'tool_choice': {'type': 'tool'}, "
            "'messages': [" HI "]}", "tool_choice.name");
    refused("{" BASE ", 'tools': [" WEATHER "], 'tool_choice': {'type': 'auto', "
            "'disable_parallel_tool_use': 1}, 'messages': [" HI "]}",
            "tool_choice.disable_parallel_tool_use");
    refused("{" BASE ", 'thinking': {'type': 'on'}, 'messages': [" HI "]}", "thinking.type");
    refused("{" BASE ", 'thinking': true, 'messages': [" HI "]}", "thinking");
    refused("{" BASE ", 'thinking': {'type': 'enabled'}, 'messages': [" HI "]}",
            "thinking.budget_tokens");
    refused("{" BASE ", 'thinking': {'type': 'disabled'}, 'chat_template_kwargs': [], "
            "'messages': [" HI "]}", "chat_template_kwargs");
    refused("{" BASE ", 'stop_sequences': 'END', 'messages': [" HI "]}", "stop_sequences");
    refused("{" BASE ", 'stop_sequences': ['a', 'b', 'c', 'd', 'e'], 'messages': [" HI "]}",
            "stop_sequences");
    refused("{" BASE ", 'stop_sequences': ['a', ''], 'messages': [" HI "]}", "stop_sequences");

    struct k3_api_error e = {0};
    json_t *array = json_array();
    CHECK(!k3_anthropic_request(array, &e) && e.status == 400 && !e.param[0],
          "a body that is not an object: status %d, param %s", e.status, e.param);
    json_decref(array);
}

/* The OpenAI parser's errors for a converted body name the Anthropic request's fields. */
static void error_fields(void)
{
    static const struct {
        const char *param, *message, *want_param, *want_message;
    } cases[] = {
        {"tools[12].function.parameters.properties.city.pattern",
         "tools[12].function.parameters.properties.city.pattern is not supported",
         "tools[12].input_schema.properties.city.pattern",
         "tools[12].input_schema.properties.city.pattern is not supported"},
        {"tool_choice.function.name", "tool_choice names \"f\", which is not among the tools",
         "tool_choice.name", "tool_choice names \"f\", which is not among the tools"},
        {"tools[0].function", "tools[0].function must be an object", "tools[0]",
         "tools[0] must be an object"},
        {"temperature", "temperature is 3; it must be at least 0 and at most 2", "temperature",
         "temperature is 3; it must be at least 0 and at most 2"},
        {"tools[x].function.name", "tools[].function.name", "tools[x].function.name",
         "tools[].function.name"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        struct k3_api_error e;
        k3_api_errorf(&e, 400, "invalid_request_error", cases[i].param, "%s", cases[i].message);
        k3_anthropic_error_fields(&e);
        CHECK(!strcmp(e.param, cases[i].want_param) && !strcmp(e.message, cases[i].want_message),
              "%s: got param \"%s\", message \"%s\"", cases[i].param, e.param, e.message);
    }
}

/* ---- answers --------------------------------------------------------------------- */

static const struct k3_tool_call two_calls[] = {
    {"get_weather", "{\"city\":\"Paris\"}"},
    {"get_weather", "{\"city\":\"Rome\",\"days\":2,\"hourly\":[1,2]}"},
};

/* The whole answer of reasoning, text and two calls. */
static struct k3_api_answer whole_answer(void)
{
    return (struct k3_api_answer){.kind = K3_API_CHAT, .id = "chatcmpl-0a1b", .model = "k3",
                                  .text = "Checking.", .text_len = 9,
                                  .reasoning = "Two cities.", .reasoning_len = 11,
                                  .calls = two_calls, .n_calls = 2, .calls_total = 2,
                                  .finish = K3_FINISH_STOP, .prompt_tokens = 20,
                                  .completion_tokens = 30, .cached_tokens = 5};
}

static json_t *message_of(const struct k3_api_answer *a)
{
    char *s = k3_anthropic_message_json(a);
    json_t *v = s ? json_loads(s, JSON_ALLOW_NUL, NULL) : NULL;
    free(s);
    return v;
}

static void message(void)
{
    struct k3_api_answer a = whole_answer();
    json_t *m = message_of(&a);
    json_t *want = j("{'id': 'msg_0a1b', 'type': 'message', 'role': 'assistant', 'model': 'k3', "
                     "'content': [{'type': 'thinking', 'thinking': 'Two cities.', 'signature': ''}, "
                     "{'type': 'text', 'text': 'Checking.'}, "
                     "{'type': 'tool_use', 'id': 'toolu_0a1b_0', 'name': 'get_weather', 'input': "
                     "{'city': 'Paris'}}, "
                     "{'type': 'tool_use', 'id': 'toolu_0a1b_1', 'name': 'get_weather', 'input': "
                     "{'city': 'Rome', 'days': 2, 'hourly': [1, 2]}}], "
                     "'stop_reason': 'tool_use', 'stop_sequence': null, 'usage': {'input_tokens': "
                     "15, 'output_tokens': 30, 'cache_read_input_tokens': 5}}");
    CHECK(json_equal(m, want), "reasoning, text, two calls: %s", show(m));
    json_decref(m);
    json_decref(want);

    a = (struct k3_api_answer){.id = "msg_x", .model = "k3", .text = "A\0B", .text_len = 3,
                               .reasoning = "", .finish = K3_FINISH_STOP, .prompt_tokens = 3};
    m = message_of(&a);
    json_t *content = json_object_get(m, "content"), *text = json_object_get(json_array_get(content, 0), "text");
    CHECK(json_array_size(content) == 1 && json_string_length(text) == 3 &&
              !memcmp(json_string_value(text), "A\0B", 3),
          "empty reasoning gives no thinking block; a NUL stays in the text: %s", show(m));
    CHECK(!strcmp(json_string_value(json_object_get(m, "id")), "msg_x") &&
              !strcmp(json_string_value(json_object_get(m, "stop_reason")), "end_turn"),
          "an id already msg_ stays; no calls: end_turn: %s", show(m));
    json_decref(m);

    a.text_len = 0;
    a.finish = K3_FINISH_LENGTH;
    m = message_of(&a);
    CHECK(json_array_size(json_object_get(m, "content")) == 0 &&
              !strcmp(json_string_value(json_object_get(m, "stop_reason")), "max_tokens"),
          "nothing said, cut at the limit: no blocks, max_tokens: %s", show(m));
    json_decref(m);

    struct k3_tool_call bad = {"f", "[1]"};
    a = whole_answer();
    a.calls = &bad;
    a.n_calls = a.calls_total = 1;
    char *s = k3_anthropic_message_json(&a);
    CHECK(!s, "arguments that are not an object: no message, got %s", s);
    free(s);
}

static void errors(void)
{
    static const struct {
        int status;
        const char *type;
    } types[] = {{400, "invalid_request_error"}, {401, "authentication_error"},
                 {404, "not_found_error"}, {413, "request_too_large"}, {500, "api_error"},
                 {503, "overloaded_error"}};
    for (size_t i = 0; i < sizeof types / sizeof *types; i++) {
        struct k3_api_error e;
        k3_api_errorf(&e, types[i].status, "server_error", "x", "went wrong");
        char *s = k3_anthropic_error_json(&e);
        char want[160];
        snprintf(want, sizeof want, "{\"type\":\"error\",\"error\":{\"type\":\"%s\",\"message\":"
                 "\"went wrong\"}}", types[i].type);
        CHECK(s && !strcmp(s, want), "status %d: %s", types[i].status, s);
        free(s);
    }
    struct k3_api_error e;
    k3_api_errorf(&e, 400, "invalid_request_error", NULL, "cut \xC3");
    char *s = k3_anthropic_error_json(&e);
    CHECK(s && strstr(s, "cut ?"), "a character cut in two is mended, not lost: %s", s);
    free(s);
}

/* ---- the stream ------------------------------------------------------------------ */

struct collected {
    json_t *events; /* [{"event": NAME, "data": DATA}] */
    int bad;        /* events not framed as "event: NAME\ndata: JSON\n\n" with data.type NAME */
};

static void collect(struct collected *c, char *sse)
{
    REQUIRE(sse, "out of memory making events");
    for (char *p = sse; *p;) {
        char name[64];
        int at = 0;
        char *nl = strstr(p, "\n\n");
        if (!nl || sscanf(p, "event: %63[^\n]\ndata: %n", name, &at) != 1 || !at) {
            c->bad++;
            break;
        }
        *nl = 0;
        json_t *data = json_loads(p + at, 0, NULL);
        const char *type = json_string_value(json_object_get(data, "type"));
        if (!type || strcmp(type, name))
            c->bad++;
        json_array_append_new(c->events, json_pack("{s:s, s:o?}", "event", name, "data", data));
        p = nl + 2;
    }
    free(sse);
}

/* The events' names and indexes: "message_start content_block_start:0 ...". */
static void sequence(const json_t *events, char *out, size_t cap)
{
    size_t at = 0, i;
    json_t *ev;
    out[0] = 0;
    json_array_foreach(events, i, ev) {
        json_t *data = json_object_get(ev, "data"), *index = json_object_get(data, "index");
        json_t *delta = json_object_get(data, "delta");
        const char *dtype = json_string_value(json_object_get(delta, "type"));
        at += (size_t)snprintf(out + at, cap - at, "%s%s", at ? " " : "",
                               json_string_value(json_object_get(ev, "event")));
        if (index)
            at += (size_t)snprintf(out + at, cap - at, ":%d", (int)json_integer_value(index));
        if (dtype && index)
            at += (size_t)snprintf(out + at, cap - at, ":%s", dtype);
    }
}

/* obj[key] (a string, "" when absent) with piece after it. */
static void append(json_t *obj, const char *key, json_t *piece)
{
    json_t *had = json_object_get(obj, key);
    char *joined = NULL;
    if (asprintf(&joined, "%s%s", had ? json_string_value(had) : "", json_string_value(piece)) < 0)
        joined = NULL;
    json_object_set_new(obj, key, json_string(joined));
    free(joined);
}

/* The message a client builds from the events, as the SDK's stream helper does. */
static json_t *fold(const json_t *events)
{
    json_t *m = NULL, *ev;
    size_t i;
    json_array_foreach(events, i, ev) {
        json_t *d = json_object_get(ev, "data");
        const char *name = json_string_value(json_object_get(ev, "event"));
        json_t *block = m ? json_array_get(json_object_get(m, "content"),
                                           json_integer_value(json_object_get(d, "index"))) : NULL;
        json_t *delta = json_object_get(d, "delta");
        if (!strcmp(name, "message_start")) {
            m = json_deep_copy(json_object_get(d, "message"));
        } else if (!strcmp(name, "content_block_start")) {
            json_array_append(json_object_get(m, "content"), json_object_get(d, "content_block"));
        } else if (!strcmp(name, "content_block_delta")) {
            const char *type = json_string_value(json_object_get(delta, "type"));
            if (!strcmp(type, "text_delta"))
                append(block, "text", json_object_get(delta, "text"));
            else if (!strcmp(type, "thinking_delta"))
                append(block, "thinking", json_object_get(delta, "thinking"));
            else if (!strcmp(type, "input_json_delta"))
                append(block, "partial_json", json_object_get(delta, "partial_json"));
            else if (!strcmp(type, "signature_delta"))
                json_object_set(block, "signature", json_object_get(delta, "signature"));
        } else if (!strcmp(name, "content_block_stop") && json_object_get(block, "partial_json")) {
            json_object_set_new(block, "input",
                                json_loads(json_string_value(json_object_get(block, "partial_json")),
                                           0, NULL));
            json_object_del(block, "partial_json");
        } else if (!strcmp(name, "message_delta")) {
            json_object_update(m, delta);
            json_object_update(json_object_get(m, "usage"), json_object_get(d, "usage"));
        }
    }
    return m;
}

/* The whole answer streamed: the first update carries reasoning, the next more of it,
 * then the text, then both calls, then the end alone. */
static void stream(void)
{
    struct k3_api_answer whole = whole_answer();
    struct k3_api_answer a = whole;
    struct k3_anthropic_stream s = {0};
    struct collected c = {json_array(), 0};
    a.prompt_tokens = 20; /* as known before the prompt ran: nothing resumed yet */
    a.cached_tokens = 0;
    a.completion_tokens = 0;
    collect(&c, k3_anthropic_stream_start(&s, &a));
    a = (struct k3_api_answer){.id = whole.id, .model = "k3", .text = "", .reasoning = "Two ",
                               .reasoning_len = 4};
    collect(&c, k3_anthropic_stream_update(&s, &a));
    a.reasoning = "cities.";
    a.reasoning_len = 7;
    collect(&c, k3_anthropic_stream_update(&s, &a));
    a = (struct k3_api_answer){.id = whole.id, .model = "k3", .text = "Checking.", .text_len = 9};
    collect(&c, k3_anthropic_stream_update(&s, &a));
    a = (struct k3_api_answer){.id = whole.id, .model = "k3", .text = "", .calls = two_calls,
                               .n_calls = 2, .calls_total = 2};
    collect(&c, k3_anthropic_stream_update(&s, &a));
    a = whole;
    a.text_len = a.reasoning_len = 0;
    a.n_calls = 0;
    collect(&c, k3_anthropic_stream_update(&s, &a));

    char seq[2048];
    sequence(c.events, seq, sizeof seq);
    const char *want =
        "message_start content_block_start:0 content_block_delta:0:thinking_delta "
        "content_block_delta:0:thinking_delta content_block_delta:0:signature_delta "
        "content_block_stop:0 content_block_start:1 content_block_delta:1:text_delta "
        "content_block_stop:1 content_block_start:2 content_block_delta:2:input_json_delta "
        "content_block_stop:2 content_block_start:3 content_block_delta:3:input_json_delta "
        "content_block_stop:3 message_delta message_stop";
    CHECK(!strcmp(seq, want), "the events:\n got %s\nwant %s", seq, want);
    CHECK(c.bad == 0, "%d events not framed as event/data with data.type the event's name", c.bad);
    CHECK(s.state == K3_ANTHROPIC_ENDED && s.blocks == 4 && s.calls == 2,
          "at the end: state %d, %d blocks, %d calls", s.state, s.blocks, s.calls);

    json_t *start = json_object_get(json_object_get(json_array_get(c.events, 0), "data"), "message");
    CHECK(json_is_null(json_object_get(start, "stop_reason")) &&
              json_array_size(json_object_get(start, "content")) == 0,
          "message_start: no stop_reason, no content: %s", show(start));
    json_t *folded = fold(c.events), *m = message_of(&whole);
    CHECK(json_equal(folded, m), "the events folded as a client does differ from the whole "
          "message:\n%s", show(folded));
    if (!json_equal(folded, m))
        fprintf(stderr, "%s\n", show(m));
    json_decref(folded);
    json_decref(m);
    json_decref(c.events);
}

/* An error ends the stream at any point, a block still open. */
static void stream_error(void)
{
    struct k3_api_answer a = {.id = "chatcmpl-e", .model = "k3", .text = "Hal", .text_len = 3};
    struct k3_anthropic_stream s = {0};
    struct collected c = {json_array(), 0};
    collect(&c, k3_anthropic_stream_start(&s, &a));
    collect(&c, k3_anthropic_stream_update(&s, &a));
    struct k3_api_error e;
    k3_api_errorf(&e, 500, "server_error", NULL, "the read path failed");
    collect(&c, k3_anthropic_stream_error(&s, &e));
    char seq[512];
    sequence(c.events, seq, sizeof seq);
    CHECK(!strcmp(seq, "message_start content_block_start:0 content_block_delta:0:text_delta error"),
          "an error mid-block: %s", seq);
    json_t *err = json_object_get(json_object_get(json_array_get(c.events, 3), "data"), "error");
    CHECK(!strcmp(json_string_value(json_object_get(err, "type")), "api_error") &&
              !strcmp(json_string_value(json_object_get(err, "message")), "the read path failed"),
          "the error event's body: %s", show(err));
    CHECK(s.state == K3_ANTHROPIC_ENDED, "state %d after the error", s.state);
    json_decref(c.events);
}

/* An update after message_stop breaks the stream's invariant: the process aborts. */
static void after_the_end_aborts(void)
{
    pid_t pid = fork();
    REQUIRE(pid >= 0, "fork");
    if (pid == 0) {
        freopen("/dev/null", "w", stderr);
        struct k3_api_answer a = {.id = "chatcmpl-z", .model = "k3", .text = "",
                                  .finish = K3_FINISH_STOP};
        struct k3_anthropic_stream s = {0};
        free(k3_anthropic_stream_start(&s, &a));
        free(k3_anthropic_stream_update(&s, &a));
        a.finish = K3_FINISH_NONE;
        a.text = "late";
        a.text_len = 4;
        free(k3_anthropic_stream_update(&s, &a));
        _exit(0);
    }
    int status;
    waitpid(pid, &status, 0);
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT,
          "text after message_stop: want SIGABRT, got status %#x", status);
}

int main(void)
{
    fields();
    tools();
    blocks();
    refusals();
    error_fields();
    message();
    errors();
    stream();
    stream_error();
    after_the_end_aborts();
    return check_result();
}
