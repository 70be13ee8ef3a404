/* What the grammar compiler refuses, and where it says the fault is: every keyword outside
 * the supported subset by its path, a schema that is not an object by its field, bad
 * keyword values, $ref it cannot resolve, recursion that cannot finish or loops without
 * producing anything, tools that are not functions or repeat a name, a named function
 * that is not declared; and what it accepts (annotations, $ref to the root, boolean
 * schemas, deep but bounded recursion). */
#include "tests/unit/test_grammar.h"

static void expect_json_fault(const char *schema, const char *param, const char *words)
{
    json_t *s = json_of(schema);
    struct k3_grammar *g = NULL;
    struct k3_grammar_fault f;
    int rc = k3_grammar_json(s, false, &g, &f);
    CHECK(rc == -1 && !g, "%s: compiled, want a fault at %s", schema, param);
    if (!rc) {
        k3_grammar_free(g);
    } else {
        CHECK(!strcmp(f.param, param), "%s: fault at %s (%s), want %s", schema, f.param,
              f.message, param);
        CHECK(strstr(f.message, words), "%s: message \"%s\" lacks \"%s\"", schema, f.message, words);
    }
    json_decref(s);
}

static void expect_json_ok(const char *schema)
{
    json_t *s = json_of(schema);
    struct k3_grammar *g;
    struct k3_grammar_fault f;
    CHECK(!k3_grammar_json(s, true, &g, &f), "%s: %s: %s", schema, f.param, f.message);
    k3_grammar_free(g);
    json_decref(s);
}

static void expect_tools_fault(const char *tools, const char *only, const char *param,
                               const char *words)
{
    json_t *t = json_of(tools);
    struct k3_grammar *g = NULL;
    struct k3_grammar_fault f;
    int rc = k3_grammar_tools(t, only, true, false, &g, &f);
    CHECK(rc == -1 && !g, "%s: compiled, want a fault at %s", tools, param);
    if (!rc) {
        k3_grammar_free(g);
    } else {
        CHECK(!strcmp(f.param, param), "%s: fault at %s (%s), want %s", tools, f.param, f.message,
              param);
        CHECK(strstr(f.message, words), "%s: message \"%s\" lacks \"%s\"", tools, f.message, words);
    }
    json_decref(t);
}

#define ROOT "response_format.json_schema.schema"

static void test_unsupported_keywords(void)
{
    static const char *const keywords[] = {
        "\"pattern\":\"^a$\"", "\"format\":\"date\"", "\"oneOf\":[{}]", "\"allOf\":[{}]",
        "\"not\":{}", "\"multipleOf\":2", "\"exclusiveMinimum\":1", "\"exclusiveMaximum\":1",
        "\"uniqueItems\":true", "\"prefixItems\":[]", "\"contains\":{}", "\"minProperties\":1",
        "\"patternProperties\":{}", "\"if\":{}", "\"$id\":\"x\"", "\"nullable\":true"};
    for (size_t i = 0; i < sizeof keywords / sizeof *keywords; i++) {
        char schema[300], param[200], name[40];
        sscanf(keywords[i], "\"%39[^\"]\"", name);
        snprintf(schema, sizeof schema, "{\"type\":\"object\",\"properties\":{\"city\":"
                 "{\"type\":\"string\",%s}}}", keywords[i]);
        snprintf(param, sizeof param, ROOT ".properties.city.%s", name);
        expect_json_fault(schema, param, "unsupported");
    }
    /* Deep inside: items, anyOf, $defs reached by $ref. */
    expect_json_fault("{\"type\":\"array\",\"items\":{\"anyOf\":[{\"type\":\"string\"},"
                      "{\"type\":\"integer\",\"multipleOf\":3}]}}",
                      ROOT ".items.anyOf[1].multipleOf", "unsupported");
    expect_json_fault("{\"$defs\":{\"a\":{\"type\":\"string\",\"format\":\"email\"}},"
                      "\"type\":\"object\",\"properties\":{\"x\":{\"$ref\":\"#/$defs/a\"}}}",
                      ROOT ".$defs.a.format", "unsupported");
    expect_tools_fault("[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":"
                       "{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\","
                       "\"pattern\":\"x\"}}}}}]",
                       NULL, "tools[0].function.parameters.properties.city.pattern", "unsupported");
    expect_tools_fault("[{\"type\":\"function\",\"function\":{\"name\":\"f\"}},{\"type\":"
                       "\"function\",\"function\":{\"name\":\"g\",\"parameters\":{\"type\":"
                       "\"object\",\"oneOf\":[]}}}]",
                       NULL, "tools[1].function.parameters.oneOf", "unsupported");
}

static void test_bad_values(void)
{
    expect_json_fault("{\"type\":\"object\",\"properties\":{\"a\":3}}", ROOT ".properties.a",
                      "must be an object");
    expect_json_fault("[1]", ROOT, "must be an object");
    expect_json_fault("{\"type\":\"strin\"}", ROOT ".type", "not a JSON Schema type");
    expect_json_fault("{\"type\":[]}", ROOT ".type", "non-empty");
    expect_json_fault("{\"type\":\"string\",\"maxLength\":-1}", ROOT ".maxLength", "non-negative");
    expect_json_fault("{\"type\":\"string\",\"minLength\":5,\"maxLength\":2}", ROOT ".minLength",
                      "above");
    expect_json_fault("{\"type\":\"array\",\"minItems\":3,\"maxItems\":2}", ROOT ".minItems",
                      "above");
    expect_json_fault("{\"type\":\"integer\",\"minimum\":5,\"maximum\":4}", ROOT ".minimum",
                      "no integer");
    expect_json_fault("{\"type\":\"integer\",\"minimum\":\"1\"}", ROOT ".minimum", "number");
    expect_json_fault("{\"type\":\"number\",\"minimum\":0}", ROOT ".minimum", "integer only");
    expect_json_fault("{\"type\":\"object\",\"properties\":{\"a\":{}},\"required\":[\"b\"]}",
                      ROOT ".required", "\"b\"");
    expect_json_fault("{\"type\":\"object\",\"required\":[\"b\"]}", ROOT ".required",
                      "needs properties");
    expect_json_fault("{\"enum\":[]}", ROOT ".enum", "non-empty");
    expect_json_fault("{\"type\":\"string\",\"enum\":[1,2]}", ROOT ".enum", "no value");
    expect_json_fault("{\"enum\":[\"a\"],\"maxLength\":3}", ROOT ".maxLength", "unsupported");
    expect_json_fault("{\"anyOf\":[]}", ROOT ".anyOf", "non-empty");
    expect_json_fault("{\"type\":\"object\",\"properties\":{\"a\":false}}", ROOT ".properties.a",
                      "false");
    expect_json_fault("{\"items\":{},\"properties\":{}}", ROOT ".type", "several types");
}

static void test_refs(void)
{
    expect_json_fault("{\"$ref\":\"#/$defs/missing\"}", ROOT ".$ref", "must name");
    expect_json_fault("{\"$ref\":\"other.json#/a\"}", ROOT ".$ref", "must name");
    expect_json_fault("{\"$ref\":\"#/properties/a\"}", ROOT ".$ref", "must name");
    expect_json_fault("{\"$ref\":\"#/$defs/a\",\"type\":\"object\"}", ROOT ".type", "unsupported");
    /* Recursion that can never finish (a required self), or that loops without
     * producing anything, is refused; recursion under optional structure compiles. */
    expect_json_fault("{\"type\":\"object\",\"properties\":{\"a\":{\"$ref\":\"#\"}},"
                      "\"required\":[\"a\"]}", ROOT, "no finite value");
    expect_json_fault("{\"$defs\":{\"a\":{\"$ref\":\"#/$defs/b\"},\"b\":{\"anyOf\":[{\"$ref\":"
                      "\"#/$defs/a\"},{\"type\":\"null\"}]}},\"$ref\":\"#/$defs/a\"}",
                      ROOT, "loops");
    expect_json_fault("{\"$defs\":{\"a\":{\"$ref\":\"#/$defs/a\"}},\"$ref\":\"#/$defs/a\"}",
                      ROOT, "no finite value");
    expect_json_ok("{\"type\":\"object\",\"properties\":{\"next\":{\"$ref\":\"#\"}}}");
    expect_json_ok("{\"$defs\":{\"a~b/c\":{\"type\":\"null\"}},\"$ref\":\"#/$defs/a~0b~1c\"}");
    /* Nesting deeper than the bound is refused, not followed forever. */
    char deep[4000] = "", *p = deep;
    for (int i = 0; i < 40; i++)
        p += sprintf(p, "{\"type\":\"array\",\"items\":");
    p += sprintf(p, "{}");
    for (int i = 0; i < 40; i++)
        *p++ = '}';
    *p = 0;
    json_t *s = json_of(deep);
    struct k3_grammar *g = NULL;
    struct k3_grammar_fault f;
    CHECK(k3_grammar_json(s, false, &g, &f) == -1 && strstr(f.message, "deeper"),
          "40 nested arrays: %s", g ? "compiled" : f.message);
    json_decref(s);
}

static void test_accepted(void)
{
    expect_json_ok("{\"$schema\":\"https://json-schema.org/draft/2020-12/schema\",\"title\":\"t\","
                   "\"description\":\"d\",\"default\":{},\"examples\":[{}],\"strict\":true,"
                   "\"type\":\"object\",\"properties\":{\"a\":true,\"b\":{}},"
                   "\"additionalProperties\":true}");
    expect_json_ok("{\"type\":\"object\",\"additionalProperties\":{\"type\":\"integer\"}}");
    expect_json_ok("{\"type\":\"array\",\"items\":false}");
    expect_json_ok("{\"minimum\":3}");
}

static void test_tools_shape(void)
{
    expect_tools_fault("{}", NULL, "tools", "non-empty array");
    expect_tools_fault("[]", NULL, "tools", "non-empty array");
    expect_tools_fault("[{\"type\":\"web\"}]", NULL, "tools[0].type", "function");
    expect_tools_fault("[{\"type\":\"function\"}]", NULL, "tools[0].function", "object");
    expect_tools_fault("[{\"type\":\"function\",\"function\":{\"name\":\"\"}}]", NULL,
                       "tools[0].function.name", "non-empty");
    expect_tools_fault("[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":7}}]",
                       NULL, "tools[0].function.parameters", "object");
    expect_tools_fault("[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":"
                       "{\"type\":\"array\"}}}]", NULL, "tools[0].function.parameters.type",
                       "\"object\"");
    expect_tools_fault("[{\"type\":\"function\",\"function\":{\"name\":\"f\"}},"
                       "{\"type\":\"function\",\"function\":{\"name\":\"f\"}}]", NULL,
                       "tools[1].function.name", "twice");
    expect_tools_fault("[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}]", "g",
                       "tool_choice.function.name", "\"g\"");
}

int main(void)
{
    test_unsupported_keywords();
    test_bad_values();
    test_refs();
    test_accepted();
    test_tools_shape();
    return check_result();
}
