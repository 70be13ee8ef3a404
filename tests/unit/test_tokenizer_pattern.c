/* K3's pre-tokenizer pattern rewritten for PCRE2 (tokenizer.h): each rewritten class
 * matches exactly the code points the shipped class means (checked over every code
 * point), and the whole pattern splits sample texts as tiktoken's Rust regex does
 * (expected pieces computed with a JavaScript `v`-flag regex, an independent engine
 * with `&&` and Script=Han; tests/tokenizer/parity.mjs runs that comparison at scale). */
#include <stdio.h>
#include <string.h>

#include "engine/text/tokenizer.h"
#include "engine/text/pretok.h"
#include "tests/check.h"

static pcre2_code *compile(const char *pattern)
{
    int ec;
    PCRE2_SIZE eo;
    pcre2_code *c = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED,
                                  PCRE2_UTF | PCRE2_UCP | PCRE2_ANCHORED, &ec, &eo, NULL);
    REQUIRE(c, "pattern %s does not compile (error %d at %zu)", pattern, ec, (size_t)eo);
    pcre2_jit_compile(c, PCRE2_JIT_COMPLETE);
    return c;
}

static size_t utf8(uint32_t cp, uint8_t *b)
{
    if (cp < 0x80) {
        b[0] = (uint8_t)cp;
        return 1;
    }
    if (cp < 0x800) {
        b[0] = (uint8_t)(0xC0 | cp >> 6);
        b[1] = (uint8_t)(0x80 | (cp & 63));
        return 2;
    }
    if (cp < 0x10000) {
        b[0] = (uint8_t)(0xE0 | cp >> 12);
        b[1] = (uint8_t)(0x80 | ((cp >> 6) & 63));
        b[2] = (uint8_t)(0x80 | (cp & 63));
        return 3;
    }
    b[0] = (uint8_t)(0xF0 | cp >> 18);
    b[1] = (uint8_t)(0x80 | ((cp >> 12) & 63));
    b[2] = (uint8_t)(0x80 | ((cp >> 6) & 63));
    b[3] = (uint8_t)(0x80 | (cp & 63));
    return 4;
}

static bool matches(pcre2_code *c, pcre2_match_data *md, uint32_t cp)
{
    uint8_t b[4];
    size_t n = utf8(cp, b);
    return pcre2_match(c, b, n, 0, 0, md, NULL) > 0;
}

/* Over all code points: the rewritten class == (class without && ) minus Script=Han. */
static void check_class_rewrite(const char *name, const char *rewritten, const char *plain)
{
    pcre2_code *rw = compile(rewritten), *a = compile(plain), *han = compile("\\p{sc:Han}");
    pcre2_match_data *md = pcre2_match_data_create(1, NULL);
    long bad = 0, in = 0;
    for (uint32_t cp = 0; cp <= 0x10FFFF; cp++) {
        if (cp >= 0xD800 && cp <= 0xDFFF)
            continue;
        bool want = matches(a, md, cp) && !matches(han, md, cp);
        bool got = matches(rw, md, cp);
        in += want;
        if (got != want && bad++ < 5)
            CHECK(0, "%s: U+%04X is %s by the rewrite but should be %s", name, cp,
                  got ? "matched" : "not matched", want ? "matched" : "not matched");
    }
    CHECK(bad == 0, "%s: %ld code points differ", name, bad);
    CHECK(in > 30000, "%s: only %ld code points in the class: the check is vacuous", name, in);
    pcre2_match_data_free(md);
    pcre2_code_free(rw);
    pcre2_code_free(a);
    pcre2_code_free(han);
}

static void test_upper_class(void)
{
    check_class_rewrite("[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}&&[^\\p{Han}]]", K3_CLASS_UPPER_NOHAN,
                        "[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]");
    /* The lookahead spelling the tokenizer does not use (slower) means the same. */
    check_class_rewrite("lookahead form", "(?:(?!\\p{sc:Han})[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}])",
                        "[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]");
}

static void test_lower_class(void)
{
    check_class_rewrite("[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}&&[^\\p{Han}]]", K3_CLASS_LOWER_NOHAN,
                        "[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]");
}

/* \s in tiktoken's Rust regex is Unicode White_Space; PCRE2's \s adds U+180E. */
static void test_whitespace_class(void)
{
    static const uint32_t white_space[] = {0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x20, 0x85, 0xA0,
                                           0x1680, 0x2000, 0x2001, 0x2002, 0x2003, 0x2004,
                                           0x2005, 0x2006, 0x2007, 0x2008, 0x2009, 0x200A,
                                           0x2028, 0x2029, 0x202F, 0x205F, 0x3000};
    pcre2_code *ws = compile("[" K3_WS_CHARS "]"), *s = compile("\\s");
    pcre2_match_data *md = pcre2_match_data_create(1, NULL);
    long bad = 0;
    for (uint32_t cp = 0; cp <= 0x10FFFF; cp++) {
        if (cp >= 0xD800 && cp <= 0xDFFF)
            continue;
        bool want = false;
        for (size_t i = 0; i < sizeof white_space / sizeof *white_space; i++)
            want |= white_space[i] == cp;
        if (matches(ws, md, cp) != want && bad++ < 5)
            CHECK(0, "U+%04X: White_Space class says %d", cp, !want);
        if (matches(s, md, cp) != (want || cp == 0x180E))
            CHECK(0, "U+%04X: PCRE2's \\s changed; the rewrite's comment is out of date", cp);
    }
    CHECK(bad == 0, "%ld code points differ from White_Space", bad);
    pcre2_match_data_free(md);
    pcre2_code_free(ws);
    pcre2_code_free(s);
}

/* Script (Rust's bare \p{Han}) versus Script_Extensions (PCRE2's bare \p{Han}). */
static void test_han_is_script_not_extensions(void)
{
    static const struct {
        uint32_t cp;
        bool han;
    } t[] = {{0x4E2D, true},  /* 中 */ {0x3005, true}, /* 々 */ {0x3007, true}, /* 〇 */
             {0x20000, true}, /* 𠀀 */ {0x3001, false}, /* 、 */ {0x3002, false}, /* 。 */
             {0x30FB, false}, /* ・ */ {0x3006, false}, /* 〆 */ {0x30FC, false} /* ー */};
    pcre2_code *sc = compile("\\p{sc:Han}"), *scx = compile("\\p{Han}");
    pcre2_match_data *md = pcre2_match_data_create(1, NULL);
    for (size_t i = 0; i < sizeof t / sizeof *t; i++)
        CHECK(matches(sc, md, t[i].cp) == t[i].han, "U+%04X: Script=Han should be %d", t[i].cp,
              t[i].han);
    CHECK(matches(scx, md, 0x3001), "PCRE2's \\p{Han} no longer includes U+3001 (extensions); "
          "the rewrite's comment is out of date");
    pcre2_match_data_free(md);
    pcre2_code_free(sc);
    pcre2_code_free(scx);
}

/* Pieces joined by '|' (texts below contain none). */
static void split(const char *pattern, const char *text, char *out, size_t size)
{
    struct k3_pretok p;
    struct k3_pretok_iter it;
    struct k3_err err = {{0}};
    REQUIRE(!k3_pretok_init(&p, pattern, &err), "%s", err.msg);
    REQUIRE(!k3_pretok_iter_init(&it, &p, (const uint8_t *)text, strlen(text), &err), "%s",
            err.msg);
    size_t a, b, o = 0;
    out[0] = 0;
    while (k3_pretok_next(&it, &a, &b, &err) == 1)
        o += (size_t)snprintf(out + o, size - o, "%s%.*s", o ? "|" : "", (int)(b - a), text + a);
    k3_pretok_iter_free(&it);
    k3_pretok_free(&p);
}

static void test_k3_splits(void)
{
    static const char *t[][2] = {
        {"Hello world", "Hello| world"},
        {"I'LL don't WE'RE it'\u017f", "I'LL| don't| WE'RE| it'\u017f"},
        {"中文、日本。ー々", "中文|、|日本|。ー|々"},
        {"HTTPServer iPhone", "HTTPServer| i|Phone"},
        {"abc123456 7", "abc|123|456| |7"},
        {"  \n\n  x  ", "  \n\n| | x|  "},
        {"日本語のテキスト", "日本語|のテキスト"},
        {"x\u180ey", "x|\u180ey"},
        {"a\u3000\u3000b", "a|\u3000|\u3000b"},
        {"Zoe\u0308 \u01c5emal", "Zoe\u0308| \u01c5emal"},
        {"$$$ ...\r\n\r\nend", "$$$| ...\r\n\r\n|end"},
    };
    char got[512];
    for (size_t i = 0; i < sizeof t / sizeof *t; i++) {
        split(K3_PRETOKENIZE_PATTERN_PCRE2, t[i][0], got, sizeof got);
        CHECK(!strcmp(got, t[i][1]), "\"%s\" splits as \"%s\", want \"%s\"", t[i][0], got, t[i][1]);
    }
}

static void test_named_patterns(void)
{
    CHECK(k3_tok_named_pattern("k3") == K3_PRETOKENIZE_PATTERN_PCRE2, "k3");
    CHECK(k3_tok_named_pattern("cl100k") == K3_CL100K_PATTERN_PCRE2, "cl100k");
    CHECK(k3_tok_named_pattern("o200k") == K3_O200K_PATTERN_PCRE2, "o200k");
    CHECK(k3_tok_named_pattern("gpt2") == NULL, "gpt2 is not offered");
    CHECK(!strstr(K3_PRETOKENIZE_PATTERN_PCRE2, "&&"), "the PCRE2 pattern still has &&");
    CHECK(strstr(K3_PRETOKENIZE_PATTERN, "&&[^\\p{Han}]"), "the shipped pattern lost its &&");
    char got[256];
    split(K3_CL100K_PATTERN_PCRE2, "I'LL don't 12345", got, sizeof got);
    CHECK(!strcmp(got, "I|'LL| don|'t| |123|45"), "cl100k split \"%s\"", got);
    split(K3_O200K_PATTERN_PCRE2, "I'LL a/b//\n", got, sizeof got);
    CHECK(!strcmp(got, "I'LL| a|/b|//\n"), "o200k split \"%s\"", got);
}

int main(void)
{
    test_upper_class();
    test_lower_class();
    test_whitespace_class();
    test_han_is_script_not_extensions();
    test_k3_splits();
    test_named_patterns();
    return check_result();
}
