/* response_format under a grammar: random logits through the masked sampler give, for
 * every seed, a response channel whose text is compact JSON that the schema accepts
 * (types, required, enum, const, nested objects and arrays, item counts, integer bounds,
 * string lengths, $ref, anyOf, type lists with null), closed by the response and message
 * ends; with thinking on, reasoning comes first; and the mask equals each token tried
 * alone all along. */
#include "tests/unit/test_grammar.h"

static const char *const schemas[] = {
    /* json_object: any object */
    NULL,
    "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":12},"
    "\"age\":{\"type\":\"integer\",\"minimum\":18,\"maximum\":120},"
    "\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":4},"
    "\"minItems\":1,\"maxItems\":3},\"ok\":{\"type\":\"boolean\"}},"
    "\"required\":[\"name\",\"age\"],\"additionalProperties\":false}",
    "{\"type\":\"object\",\"properties\":{\"unit\":{\"enum\":[\"celsius\",\"fahrenheit\",1,12,null]},"
    "\"v\":{\"const\":{\"k\":[1,2.5,\"x\"]}},\"note\":{\"type\":[\"string\",\"null\"],\"maxLength\":6},"
    "\"n\":{\"type\":\"number\"},\"neg\":{\"type\":\"integer\",\"minimum\":-250,\"maximum\":-7}},"
    "\"required\":[\"unit\",\"v\",\"neg\"]}",
    "{\"$defs\":{\"point\":{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"integer\","
    "\"minimum\":0,\"maximum\":9},\"y\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":9}},"
    "\"required\":[\"x\",\"y\"]}},\"type\":\"object\",\"properties\":{\"a\":{\"$ref\":\"#/$defs/point\"},"
    "\"path\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/point\"},\"maxItems\":2}},"
    "\"required\":[\"a\"]}",
    "{\"type\":\"object\",\"properties\":{\"pick\":{\"anyOf\":[{\"type\":\"object\",\"properties\":"
    "{\"kind\":{\"const\":\"a\"},\"n\":{\"type\":\"integer\",\"minimum\":100,\"maximum\":100000}},"
    "\"required\":[\"kind\",\"n\"]},{\"type\":\"object\",\"properties\":{\"kind\":{\"const\":\"ab\"},"
    "\"s\":{\"type\":\"string\",\"maxLength\":3}},\"required\":[\"kind\"]},{\"type\":\"null\"}]}},"
    "\"required\":[\"pick\"]}",
    /* recursion through $ref: a tree */
    "{\"definitions\":{\"node\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"integer\","
    "\"minimum\":-3,\"maximum\":3},\"kids\":{\"type\":\"array\",\"items\":{\"$ref\":"
    "\"#/definitions/node\"},\"maxItems\":2}},\"required\":[\"v\"]}},\"$ref\":\"#/definitions/node\"}",
    /* a root that is not an object */
    "{\"type\":\"array\",\"items\":{\"type\":[\"integer\",\"null\"],\"minimum\":1,\"maximum\":5},"
    "\"minItems\":2,\"maxItems\":4}",
};

static void test_schema(struct vocab *v, const char *text, bool thinking, int seeds, int *finished)
{
    json_t *schema = text ? json_of(text) : NULL;
    struct k3_grammar *g;
    struct k3_grammar_fault f;
    REQUIRE(!k3_grammar_json(schema, thinking, &g, &f), "%s: %s: %s", text, f.param, f.message);
    static struct gen gen;
    for (int seed = 1; seed <= seeds; seed++) {
        char what[80];
        snprintf(what, sizeof what, "schema %.30s... thinking %d seed %d", text ? text : "null",
                 thinking, seed);
        generate(v, g, (uint64_t)seed, 1.0f, seed <= 2 ? 3 : 0, &gen, what);
        if (!gen.done)
            continue;
        ++*finished;
        char why[200] = "";
        size_t len;
        char *out = read_response(&gen, thinking, &len, why, sizeof why);
        CHECK(out, "%s: %s", what, why);
        if (!out)
            continue;
        json_error_t je;
        json_t *value = json_loadb(out, len, JSON_DECODE_ANY, &je);
        CHECK(value, "%s: not JSON: %s: %s", what, je.text, out);
        CHECK(compact(out, len), "%s: whitespace outside strings: %s", what, out);
        if (value && !schema)
            CHECK(json_is_object(value), "%s: json_object gave %s", what, out);
        if (value && schema)
            CHECK(validate(value, schema, schema, why, sizeof why), "%s: %s: %s", what, why, out);
        json_decref(value);
        free(out);
    }
    free(gen.sym);
    gen.sym = NULL;
    k3_grammar_free(g);
    json_decref(schema);
}

/* Greedy (temperature 0) picks the largest allowed logit: the same tokens every run. */
static void test_greedy_repeats(struct vocab *v)
{
    struct k3_grammar *g;
    struct k3_grammar_fault f;
    json_t *schema = json_of(schemas[1]);
    REQUIRE(!k3_grammar_json(schema, false, &g, &f), "%s", f.message);
    static struct gen a, b;
    generate(v, g, 5, 0.0f, 0, &a, "greedy");
    generate(v, g, 5, 0.0f, 0, &b, "greedy");
    CHECK(a.n == b.n && !memcmp(a.ids, b.ids, sizeof *a.ids * (size_t)a.n),
          "greedy generations differ");
    free(a.sym);
    free(b.sym);
    k3_grammar_free(g);
    json_decref(schema);
}

int main(void)
{
    struct vocab v;
    vocab_open(&v);
    int finished = 0, runs = 0;
    for (size_t i = 0; i < sizeof schemas / sizeof *schemas; i++)
        for (int thinking = 0; thinking < 2; thinking++) {
            test_schema(&v, schemas[i], thinking, 12, &finished);
            runs += 12;
        }
    printf("%d of %d generations finished within %d tokens\n", finished, runs, GEN_MAX);
    CHECK(finished >= runs * 9 / 10, "only %d of %d generations finished", finished, runs);
    test_greedy_repeats(&v);
    vocab_close(&v);
    return check_result();
}
