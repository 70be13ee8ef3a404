/* tool_choice "required" or a named function under a grammar: random logits through the
 * masked sampler give, for every seed, an empty response channel, then 1 to
 * K3_GRAMMAR_MAX_CALLS calls (exactly 1 without parallel calls) numbered from 1, each
 * to a declared function (only the named one when one is named), whose arguments (typed
 * as the XTML type attribute says) the function's parameters accept, in their order; then
 * the tools, message and end markers.  Thinking on puts reasoning first.  The mask equals
 * each token tried alone. */
#include "tests/unit/test_grammar.h"

static const char tools_json[] =
    "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"description\":\"d\","
    "\"parameters\":{\"type\":\"object\",\"properties\":{"
    "\"city\":{\"type\":\"string\",\"maxLength\":10,\"description\":\"x\"},"
    "\"unit\":{\"type\":\"string\",\"enum\":[\"c\",\"f\",\"kelvin\"]},"
    "\"days\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":14}},"
    "\"required\":[\"city\"],\"additionalProperties\":false},\"strict\":true}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"search\",\"parameters\":{"
    "\"type\":\"object\",\"$defs\":{\"lang\":{\"enum\":[\"en\",\"fr\"]}},\"properties\":{"
    "\"query\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":8},"
    "\"filters\":{\"type\":\"object\",\"properties\":{\"lang\":{\"$ref\":\"#/$defs/lang\"},"
    "\"safe\":{\"type\":\"boolean\"}},\"required\":[\"safe\"]},"
    "\"limit\":{\"type\":[\"integer\",\"null\"],\"minimum\":1,\"maximum\":50},"
    "\"ids\":{\"type\":\"array\",\"items\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":99},"
    "\"maxItems\":3},\"extra\":{}},\"required\":[\"query\",\"filters\"]}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"now\"}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"say \\\"hi\\\" & go\",\"parameters\":{"
    "\"type\":\"object\",\"properties\":{\"to\\\"x\":{\"anyOf\":[{\"type\":\"string\","
    "\"maxLength\":5},{\"type\":\"null\"},{\"type\":\"integer\",\"minimum\":3,\"maximum\":3}]}},"
    "\"required\":[\"to\\\"x\"]}}}]";

static const json_t *parameters_of(const json_t *tools, const char *name)
{
    for (size_t i = 0; i < json_array_size(tools); i++) {
        json_t *fn = json_object_get(json_array_get(tools, i), "function");
        if (!strcmp(json_string_value(json_object_get(fn, "name")), name)) {
            json_t *p = json_object_get(fn, "parameters");
            return p ? p : json_true();
        }
    }
    return NULL;
}

static void check_calls(const json_t *tools, const json_t *calls, const char *only, bool parallel,
                        const char *what)
{
    size_t n = json_array_size(calls);
    CHECK(n >= 1 && n <= (parallel ? K3_GRAMMAR_MAX_CALLS : 1), "%s: %zu calls", what, n);
    for (size_t i = 0; i < n; i++) {
        json_t *call = json_array_get(calls, i);
        const char *name = json_string_value(json_object_get(call, "name"));
        const json_t *params = parameters_of(tools, name);
        CHECK(params, "%s: call %zu to undeclared %s", what, i, name);
        CHECK(!only || !strcmp(name, only), "%s: call to %s, not the named %s", what, name, only);
        char why[200] = "";
        json_t *args = json_object_get(call, "arguments");
        if (params)
            CHECK(validate(args, params, params, why, sizeof why), "%s: %s(%s): %s", what, name,
                  json_dumps(args, JSON_COMPACT), why);
    }
}

static void test_tools(struct vocab *v, const json_t *tools, const char *only, bool parallel,
                       bool thinking, int *finished, int *runs, int *most_calls)
{
    struct k3_grammar *g;
    struct k3_grammar_fault f;
    REQUIRE(!k3_grammar_tools(tools, only, parallel, thinking, &g, &f), "%s: %s", f.param,
            f.message);
    static struct gen gen;
    for (int seed = 1; seed <= 16; seed++) {
        char what[96];
        snprintf(what, sizeof what, "tools only %s parallel %d thinking %d seed %d",
                 only ? only : "-", parallel, thinking, seed);
        generate(v, g, (uint64_t)seed, 1.0f, seed <= 2 ? 3 : 0, &gen, what);
        ++*runs;
        if (!gen.done)
            continue;
        ++*finished;
        char why[200] = "";
        json_t *calls = read_calls(&gen, thinking, why, sizeof why);
        CHECK(calls, "%s: %s", what, why);
        if (calls) {
            check_calls(tools, calls, only, parallel, what);
            int n = (int)json_array_size(calls);
            *most_calls = n > *most_calls ? n : *most_calls;
        }
        json_decref(calls);
    }
    free(gen.sym);
    gen.sym = NULL;
    k3_grammar_free(g);
}

int main(void)
{
    struct vocab v;
    vocab_open(&v);
    json_t *tools = json_of(tools_json);
    int finished = 0, runs = 0, calls = 0, serial_calls = 0; /* the most in one message */
    for (int thinking = 0; thinking < 2; thinking++) {
        test_tools(&v, tools, NULL, true, thinking, &finished, &runs, &calls);
        test_tools(&v, tools, NULL, false, thinking, &finished, &runs, &serial_calls);
        test_tools(&v, tools, "search", true, thinking, &finished, &runs, &calls);
        test_tools(&v, tools, "say \"hi\" & go", false, thinking, &finished, &runs, &serial_calls);
    }
    printf("%d of %d generations finished, up to %d parallel calls\n", finished, runs, calls);
    CHECK(finished >= runs * 9 / 10, "only %d of %d generations finished", finished, runs);
    CHECK(calls >= 2, "parallel calls never went past one");
    CHECK(serial_calls == 1, "without parallel calls, up to %d calls", serial_calls);
    json_decref(tools);
    vocab_close(&v);
    return check_result();
}
