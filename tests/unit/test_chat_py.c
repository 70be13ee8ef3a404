/* Request values written as encoding_k3.py's Python writes them: float's repr (shortest
 * round-trip digits, positional only for points in (-4, 16]), json.dumps with the default
 * separators in key order and compact with sorted keys (non-ASCII raw, C0 controls as
 * \u00XX), str() of scalars, truthiness and str.strip()'s whitespace.  Expected strings
 * are CPython 3's output for the same values. */
#include <stdlib.h>
#include <string.h>

#include "engine/text/chat_internal.h"
#include "tests/check.h"

static void test_float_repr(void)
{
    static const char *const cases[][2] = {
        {"1.0", "1.0"}, {"1e-07", "1e-07"}, {"1e16", "1e+16"}, {"1e15", "1000000000000000.0"},
        {"0.1", "0.1"}, {"-0.0", "-0.0"}, {"0.0", "0.0"}, {"1.5", "1.5"},
        {"123456.789", "123456.789"}, {"1e-05", "1e-05"}, {"0.0001", "0.0001"},
        {"0.001", "0.001"}, {"5e-324", "5e-324"},
        {"1.7976931348623157e308", "1.7976931348623157e+308"}, {"2.5e-300", "2.5e-300"},
        {"1234567890123456.0", "1234567890123456.0"},
        {"12345678901234567.0", "1.2345678901234568e+16"}, {"-3.14159", "-3.14159"},
        {"100.0", "100.0"}, {"0.30000000000000004", "0.30000000000000004"}, {"1e22", "1e+22"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char out[32];
        size_t n = k3_py_float_repr(strtod(cases[i][0], NULL), out);
        CHECK(!strcmp(out, cases[i][1]) && n == strlen(out), "repr(%s) = %s, want %s",
              cases[i][0], out, cases[i][1]);
    }
}

static void expect_json(const char *in, bool sorted_compact, const char *want)
{
    json_error_t je;
    json_t *v = json_loads(in, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
    REQUIRE(v, "%s: %s", in, je.text);
    struct k3_chat_buf b = {0};
    k3_py_json(&b, v, sorted_compact);
    CHECK(b.len == strlen(want) && !memcmp(b.p, want, b.len), "json.dumps(%s) = %s, want %s", in,
          b.p, want);
    k3_chat_buf_free(&b);
    json_decref(v);
}

static void test_dumps(void)
{
    expect_json("{\"a\": [1, 2.5, null, true], \"\xc3\xa9\": \"x\\u0001\\\"\\\\\\n\x7f\xe2\x80\xa8\"}",
                false,
                "{\"a\": [1, 2.5, null, true], \"\xc3\xa9\": \"x\\u0001\\\"\\\\\\n\x7f\xe2\x80\xa8\"}");
    expect_json("{\"b\":{\"z\":1,\"a\":[{\"y\":2,\"x\":1}]},\"a\":\"\\t\"}", true,
                "{\"a\":\"\\t\",\"b\":{\"a\":[{\"x\":1,\"y\":2}],\"z\":1}}");
    expect_json("{\"z\": 1, \"a\": {}}", false, "{\"z\": 1, \"a\": {}}");
    expect_json("[1e5, -0, 1E-7, 9007199254740993]", false, "[100000.0, 0, 1e-07, 9007199254740993]");
    expect_json("\"a\\u0000b\\u001f\\b\\f\\r\"", false, "\"a\\u0000b\\u001f\\b\\f\\r\"");
    /* Sorted by code point: "B" < "a" < "é". */
    expect_json("{\"\xc3\xa9\":1,\"a\":2,\"B\":3}", true, "{\"B\":3,\"a\":2,\"\xc3\xa9\":1}");
}

static void expect_str(const char *in, const char *want)
{
    json_t *v = json_loads(in, JSON_DECODE_ANY, NULL);
    struct k3_chat_buf b = {0};
    int rc = k3_py_str(&b, v);
    if (want)
        CHECK(!rc && b.len == strlen(want) && !memcmp(b.p, want, b.len), "str(%s) = %s, want %s",
              in, b.p ? b.p : "", want);
    else
        CHECK(rc == -1 && !b.len, "str(%s) is refused (repr is not reproduced)", in);
    k3_chat_buf_free(&b);
    json_decref(v);
}

static void test_str_truthy_blank(void)
{
    expect_str("true", "True");
    expect_str("false", "False");
    expect_str("null", "None");
    expect_str("7", "7");
    expect_str("7.0", "7.0");
    expect_str("\"x\"", "x");
    expect_str("[1]", NULL);
    expect_str("{}", NULL);
    const char *falsy[] = {"null", "false", "0", "0.0", "\"\"", "[]", "{}"};
    const char *truthy[] = {"true", "1", "-0.5", "\" \"", "[0]", "{\"a\":null}"};
    for (size_t i = 0; i < 7; i++) {
        json_t *v = json_loads(falsy[i], JSON_DECODE_ANY, NULL);
        CHECK(!k3_py_truthy(v), "%s is falsy", falsy[i]);
        json_decref(v);
    }
    for (size_t i = 0; i < 6; i++) {
        json_t *v = json_loads(truthy[i], JSON_DECODE_ANY, NULL);
        CHECK(k3_py_truthy(v), "%s is truthy", truthy[i]);
        json_decref(v);
    }
    CHECK(!k3_py_truthy(NULL), "an absent value is falsy");
    /* str.strip(): ASCII and Unicode White_Space and the separators 1C-1F; not U+200B. */
    const char *blank = " \t\n\v\f\r\x1c\x1f\xc2\x85\xc2\xa0\xe2\x80\x80\xe2\x80\xa8\xe3\x80\x80";
    CHECK(k3_py_blank(blank, strlen(blank)), "whitespace alone is blank");
    CHECK(k3_py_blank("", 0), "the empty string is blank");
    CHECK(!k3_py_blank(" \xe2\x80\x8b ", 5), "U+200B is not whitespace to Python");
    CHECK(!k3_py_blank(" x ", 3), "text is not blank");
}

int main(void)
{
    test_float_repr();
    test_dumps();
    test_str_truthy_blank();
    return check_result();
}
