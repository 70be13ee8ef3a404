/* UTF-8: encode refuses ill-formed input naming the byte offset; the output stream holds
 * back a character split across tokens and turns ill-formed bytes into U+FFFD. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/synth/vocab.h"
#include "engine/text/tokenizer.h"
#include "engine/text/utf8.h"
#include "tests/check.h"
#include "tests/util.h"

static const char *root; /* this run's folder */

static void test_invalid_utf8_names_offset(const struct k3_tokenizer *tok)
{
    static const struct {
        const char *text;
        size_t len, offset;
        const char *what;
    } t[] = {
        {"ab\xC3(", 4, 2, "lead byte without continuation"},
        {"abc\x80", 4, 3, "stray continuation byte"},
        {"\xC0\x80", 2, 0, "overlong NUL"},
        {"x\xE0\x80\x80", 4, 1, "overlong 3-byte"},
        {"xy\xED\xA0\x80", 5, 2, "surrogate U+D800"},
        {"\xF4\x90\x80\x80", 4, 0, "above U+10FFFF"},
        {"ok \xF0\x9F\x98", 6, 3, "emoji cut at the end"},
        {"\xFF", 1, 0, "0xFF"},
        {"caf\xC3\xA9 \xFE", 7, 6, "0xFE after valid text"},
    };
    for (size_t i = 0; i < sizeof t / sizeof *t; i++) {
        int32_t *ids = (int32_t *)1;
        size_t n = 99;
        struct k3_err err = {{0}};
        int rc = k3_tok_encode(tok, t[i].text, t[i].len, false, &ids, &n, &err);
        char want[64];
        snprintf(want, sizeof want, "invalid UTF-8 at byte offset %zu", t[i].offset);
        CHECK(rc == -1 && ids == NULL && n == 0, "%s: encoded", t[i].what);
        CHECK(strstr(err.msg, want), "%s: message \"%s\" lacks \"%s\"", t[i].what, err.msg, want);
    }
    /* Valid edge cases pass. */
    const char ok[] = "\x7F\xC2\x80\xDF\xBF\xE0\xA0\x80\xED\x9F\xBF\xEE\x80\x80\xF0\x90\x80\x80"
                      "\xF4\x8F\xBF\xBF";
    int32_t *ids;
    size_t n;
    struct k3_err err = {{0}};
    CHECK(!k3_tok_encode(tok, ok, sizeof ok - 1, false, &ids, &n, &err), "valid edges: %s",
          err.msg);
    free(ids);
}

static size_t push(struct k3_utf8_stream *s, const char *bytes, size_t n, char *out)
{
    return k3_utf8_push(s, (const uint8_t *)bytes, n, out);
}

/* U+1F600 = F0 9F 98 80 arriving as three tokens: nothing until the last byte. */
static void test_stream_holds_split_emoji(void)
{
    struct k3_utf8_stream s = {0};
    char out[64];
    size_t n1 = push(&s, "a\xF0", 2, out);
    CHECK(n1 == 1 && out[0] == 'a', "first token: %zu bytes", n1);
    size_t n2 = push(&s, "\x9F\x98", 2, out);
    CHECK(n2 == 0, "second token: %zu bytes out, want 0 (held back)", n2);
    size_t n3 = push(&s, "\x80!", 2, out);
    CHECK(n3 == 5 && !memcmp(out, "\xF0\x9F\x98\x80!", 5), "third token: %zu bytes", n3);
    CHECK(k3_utf8_flush(&s, out) == 0, "flush after a complete character emitted bytes");
}

static void test_stream_replaces_invalid(void)
{
    static const struct {
        const char *in;
        size_t len;
        const char *out;
    } t[] = {
        {"\xFF", 1, "\xEF\xBF\xBD"},
        {"a\x80\x80z", 4, "a\xEF\xBF\xBD\xEF\xBF\xBDz"},      /* each stray byte */
        {"\xE2\x82" "A", 3, "\xEF\xBF\xBD" "A"},             /* cut sequence: one U+FFFD */
        {"\xED\xA0\x80", 3, "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"}, /* surrogate */
        {"\xF0\x9F" "\xE2\x82\xAC", 5, "\xEF\xBF\xBD\xE2\x82\xAC"},  /* then a valid euro */
    };
    for (size_t i = 0; i < sizeof t / sizeof *t; i++) {
        struct k3_utf8_stream s = {0};
        char out[64];
        size_t n = push(&s, t[i].in, t[i].len, out);
        n += k3_utf8_flush(&s, out + n);
        CHECK(n == strlen(t[i].out) && !memcmp(out, t[i].out, n), "case %zu: %zu bytes out", i, n);
    }
    /* A character cut by the end of the stream: flush gives one U+FFFD. */
    struct k3_utf8_stream s = {0};
    char out[16];
    CHECK(push(&s, "\xF0\x9F\x98", 3, out) == 0, "cut emoji emitted bytes before flush");
    CHECK(k3_utf8_flush(&s, out) == 3 && !memcmp(out, "\xEF\xBF\xBD", 3), "flush of a cut emoji");
    CHECK(s.n_pending == 0, "flush did not reset the stream");
}

/* The documented bound holds for the worst input (every byte invalid). */
static void test_stream_out_bound(void)
{
    uint8_t in[100];
    memset(in, 0xFF, sizeof in);
    char out[K3_UTF8_OUT_MAX(100)];
    struct k3_utf8_stream s = {0};
    push(&s, "\xF0\x9F\x98", 3, out); /* 3 bytes held back, then invalidated */
    size_t n = k3_utf8_push(&s, in, sizeof in, out);
    CHECK(n == 3 + 300 && n <= K3_UTF8_OUT_MAX(100), "%zu bytes out for 100 invalid bytes", n);
}

/* Decoding a real encoding token by token through the stream gives back the text, and
 * every chunk written is valid UTF-8 (emoji and CJK split across byte tokens). */
static void test_stream_over_real_tokens(const struct k3_tokenizer *tok)
{
    const char *text = "Emoji 😀👩‍💻🏳️‍🌈, 中文、日本語, Ελληνικά, العربية, e\u0301.";
    int32_t *ids;
    size_t n;
    struct k3_err err = {{0}};
    REQUIRE(!k3_tok_encode(tok, text, strlen(text), false, &ids, &n, &err), "%s", err.msg);
    char all[512];
    size_t o = 0, split = 0;
    struct k3_utf8_stream s = {0};
    for (size_t i = 0; i < n; i++) {
        size_t len;
        const uint8_t *b = k3_tok_bytes(tok, ids[i], &len);
        char chunk[K3_UTF8_OUT_MAX(64)];
        REQUIRE(b && len <= 64, "token %d", ids[i]);
        split += k3_utf8_invalid_at(b, len) != len;
        size_t k = k3_utf8_push(&s, b, len, chunk);
        CHECK(k3_utf8_invalid_at((const uint8_t *)chunk, k) == k, "chunk %zu is not valid UTF-8", i);
        memcpy(all + o, chunk, k);
        o += k;
    }
    o += k3_utf8_flush(&s, all + o);
    CHECK(o == strlen(text) && !memcmp(all, text, o), "streamed text differs");
    CHECK(split > 0, "no token split a character: the test proves nothing");
    free(ids);
}

int main(void)
{
    root = test_tmp_dir("test_tokenizer_utf8");
    char dir[K3_PATH_MAX + 16];
    snprintf(dir, sizeof dir, "%s/tiny", root);
    struct k3_err err = {{0}};
    REQUIRE(!k3_tok_synthesize(dir, 2048, 2032, &err), "%s", err.msg);
    struct k3_tokenizer *tok;
    REQUIRE(!k3_tok_load(&tok, dir, 2048, NULL, false, &err), "%s", err.msg);
    test_invalid_utf8_names_offset(tok);
    test_stream_holds_split_emoji();
    test_stream_replaces_invalid();
    test_stream_out_bound();
    test_stream_over_real_tokens(tok);
    k3_tok_free(tok);
    return check_result();
}
