/* Loading tiktoken.model and tokenizer_config.json: what is accepted, and that every
 * malformed input is refused with a message naming the file, line and value. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "engine/text/tokenizer.h"
#include "tests/check.h"
#include "tests/util.h"

static const char *root; /* this run's folder */
static int n_dirs;

/* A new directory holding tiktoken.model = the 256 single bytes + `extra` lines
 * (appended verbatim) and, when config is non-NULL, tokenizer_config.json. */
static const char *make_vocab(const char *extra, const char *config)
{
    static char dir[600];
    snprintf(dir, sizeof dir, "%s/load%d", root, n_dirs++);
    mkdir(dir, 0755);
    char path[700];
    snprintf(path, sizeof path, "%s/tiktoken.model", dir);
    FILE *f = fopen(path, "wb");
    REQUIRE(f, "cannot write %s", path);
    for (int b = 0; b < 256; b++) {
        uint8_t c = (uint8_t)b;
        char e[8];
        test_b64(&c, 1, e);
        fprintf(f, "%s %d\n", e, b);
    }
    fputs(extra, f);
    fclose(f);
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    remove(path);
    if (config) {
        f = fopen(path, "wb");
        REQUIRE(f, "cannot write %s", path);
        fputs(config, f);
        fclose(f);
    }
    return dir;
}

/* Loads and expects failure with every needle in the message. */
static void expect_error(const char *what, const char *dir, int vocab, bool no_specials, ...)
{
    struct k3_tokenizer *tok = NULL;
    struct k3_err err = {{0}};
    int rc = k3_tok_load(&tok, dir, vocab, NULL, no_specials, &err);
    CHECK(rc == -1 && tok == NULL, "%s: loaded, expected an error", what);
    va_list ap;
    va_start(ap, no_specials);
    for (const char *needle; (needle = va_arg(ap, const char *));)
        CHECK(strstr(err.msg, needle), "%s: message \"%s\" lacks \"%s\"", what, err.msg, needle);
    va_end(ap);
    k3_tok_free(tok);
}

static const char *CONFIG =
    "{\"added_tokens_decoder\": {\"300\": {\"content\": \"[BOS]\"}, "
    "\"301\": {\"content\": \"<|open|>\", \"special\": true}}}";

static void test_valid_file_loads(void)
{
    /* "Hello" = SGVsbG8=, " world" = IHdvcmxk; a blank line, then a CRLF line with
     * extra blanks (tiktoken splits lines on whitespace). */
    const char *dir = make_vocab("SGVsbG8= 256\n\n IHdvcmxk\t 257 \r\n", CONFIG);
    struct k3_tokenizer *tok;
    struct k3_err err = {{0}};
    REQUIRE(!k3_tok_load(&tok, dir, 302, NULL, false, &err), "load: %s", err.msg);
    size_t n;
    const uint8_t *b = k3_tok_bytes(tok, 256, &n);
    CHECK(b && n == 5 && !memcmp(b, "Hello", 5), "rank 256 is not \"Hello\"");
    b = k3_tok_bytes(tok, 257, &n);
    CHECK(b && n == 6 && !memcmp(b, " world", 6), "rank 257 is not \" world\"");
    b = k3_tok_bytes(tok, 65, &n);
    CHECK(b && n == 1 && b[0] == 'A', "rank 65 is not \"A\"");
    CHECK(k3_tok_bytes(tok, 258, &n) == NULL, "id 258 (a gap) has bytes");
    CHECK(k3_tok_special(tok, "<|open|>") == 301, "<|open|> is not 301");
    CHECK(k3_tok_is_special(tok, 300) && !k3_tok_is_special(tok, 256), "is_special wrong");
    CHECK(k3_tok_vocab_size(tok) == 302, "vocab size %d", k3_tok_vocab_size(tok));
    int32_t *ids;
    size_t n_ids;
    REQUIRE(!k3_tok_encode(tok, "Hello world", 11, false, &ids, &n_ids, &err), "%s", err.msg);
    CHECK(n_ids == 2 && ids[0] == 256 && ids[1] == 257, "\"Hello world\" did not give 256,257");
    free(ids);
    k3_tok_free(tok);
}

static void test_vocab_size_derived(void)
{
    const char *dir = make_vocab("SGVsbG8= 256\n", CONFIG);
    struct k3_tokenizer *tok;
    struct k3_err err = {{0}};
    REQUIRE(!k3_tok_load(&tok, dir, 0, NULL, false, &err), "load: %s", err.msg);
    CHECK(k3_tok_vocab_size(tok) == 302, "derived vocab %d, want 302 (largest special + 1)",
          k3_tok_vocab_size(tok));
    k3_tok_free(tok);
    REQUIRE(!k3_tok_load(&tok, dir, 0, NULL, true, &err), "load: %s", err.msg);
    CHECK(k3_tok_vocab_size(tok) == 257, "derived vocab %d without specials, want 257",
          k3_tok_vocab_size(tok));
    k3_tok_free(tok);
}

/* The vocabularies here are written with test_b64 (tests/util.h): RFC 4648's vectors. */
static void test_b64_vectors(void)
{
    const char *in[] = {"f", "fo", "foo", "foob", "fooba", "foobar"};
    const char *want[] = {"Zg==", "Zm8=", "Zm9v", "Zm9vYg==", "Zm9vYmE=", "Zm9vYmFy"};
    char out[16];
    for (int i = 0; i < 6; i++)
        CHECK(!strcmp(test_b64(in[i], strlen(in[i]), out), want[i]), "base64 \"%s\": %s, want %s",
              in[i], out, want[i]);
    uint8_t high[] = {0xfb, 0xff};
    CHECK(!strcmp(test_b64(high, 2, out), "+/8="), "base64 fb ff: %s", out);
}

static void test_bad_base64(void)
{
    expect_error("bad base64 char", make_vocab("SGVs*G8= 256\n", NULL), 300, true,
                 "tiktoken.model:257:", "bad base64", "SGVs*G8=", NULL);
    expect_error("base64 length", make_vocab("SGVsbG8 256\n", NULL), 300, true,
                 "tiktoken.model:257:", "bad base64", NULL);
    expect_error("padding inside", make_vocab("SG=sbG8= 256\n", NULL), 300, true,
                 "tiktoken.model:257:", "bad base64", NULL);
    expect_error("non-canonical padding bits", make_vocab("SGVsbG9= 256\n", NULL), 300, true,
                 "tiktoken.model:257:", "bad base64", NULL);
}

static void test_bad_line(void)
{
    expect_error("no rank", make_vocab("\nSGVsbG8=\n", NULL), 300, true, "tiktoken.model:258:",
                 "expected \"<base64> <rank>\"", NULL);
    expect_error("rank not a number", make_vocab("SGVsbG8= 25x\n", NULL), 300, true,
                 "tiktoken.model:257:", "bad rank \"25x\"", NULL);
    expect_error("negative rank", make_vocab("SGVsbG8= -1\n", NULL), 300, true,
                 "tiktoken.model:257:", "bad rank", NULL);
}

static void test_duplicate_rank(void)
{
    expect_error("duplicate rank", make_vocab("SGVsbG8= 256\nIHdvcmxk 256\n", NULL), 300, true,
                 "tiktoken.model:258:", "duplicate rank 256", "line 257", NULL);
}

static void test_duplicate_bytes(void)
{
    expect_error("duplicate bytes", make_vocab("SGVsbG8= 256\nSGVsbG8= 257\n", NULL), 300, true,
                 "tiktoken.model:258:", "same bytes as rank 256", NULL);
}

static void test_rank_beyond_vocab(void)
{
    expect_error("rank >= vocab_size", make_vocab("SGVsbG8= 300\n", NULL), 300, true,
                 "tiktoken.model:257:", "rank 300 >= vocab_size 300", NULL);
}

static void test_missing_single_byte(void)
{
    /* Rank 65 ("A") given the bytes "Hello" instead: byte 0x41 has no rank. */
    const char *dir = make_vocab("", NULL);
    char path[700];
    snprintf(path, sizeof path, "%s/tiktoken.model", dir);
    FILE *f = fopen(path, "wb");
    for (int b = 0; b < 256; b++) {
        uint8_t c = (uint8_t)b;
        char e[8];
        test_b64(&c, 1, e);
        fprintf(f, "%s %d\n", b == 'A' ? "SGVsbG8=" : e, b);
    }
    fclose(f);
    expect_error("missing byte", dir, 300, true, "single byte 0x41 has no rank", NULL);
}

static void test_missing_files(void)
{
    expect_error("no tiktoken.model", root, 300, true, "tiktoken.model", NULL);
    expect_error("no tokenizer_config.json", make_vocab("", NULL), 300, false,
                 "tokenizer_config.json", NULL);
}

static void test_bad_specials(void)
{
    expect_error("special id is a rank", make_vocab("", "{\"added_tokens_decoder\": "
                 "{\"65\": {\"content\": \"[BOS]\"}}}"), 300, false,
                 "tokenizer_config.json", "id 65 is already a rank", NULL);
    expect_error("special id >= vocab", make_vocab("", "{\"added_tokens_decoder\": "
                 "{\"400\": {\"content\": \"[BOS]\"}}}"), 300, false,
                 "tokenizer_config.json", "id \"400\"", NULL);
    expect_error("special id not a number", make_vocab("", "{\"added_tokens_decoder\": "
                 "{\"x1\": {\"content\": \"[BOS]\"}}}"), 300, false, "id \"x1\"", NULL);
    expect_error("special without content", make_vocab("", "{\"added_tokens_decoder\": "
                 "{\"290\": {\"special\": true}}}"), 300, false,
                 "added_tokens_decoder.290.content", NULL);
    expect_error("same content twice", make_vocab("", "{\"added_tokens_decoder\": "
                 "{\"290\": {\"content\": \"[BOS]\"}, \"291\": {\"content\": \"[BOS]\"}}}"), 300,
                 false, "\"[BOS]\" is both id 290 and id 291", NULL);
    expect_error("no added_tokens_decoder", make_vocab("", "{}"), 300, false,
                 "added_tokens_decoder: missing", NULL);
    expect_error("bad JSON", make_vocab("", "{\"added_tokens_decoder\": "), 300, false,
                 "tokenizer_config.json:1:", NULL);
}

static void test_bad_pattern(void)
{
    const char *dir = make_vocab("", NULL);
    struct k3_tokenizer *tok = NULL;
    struct k3_err err = {{0}};
    CHECK(k3_tok_load(&tok, dir, 300, "(unclosed", true, &err) == -1 && !tok,
          "a broken pattern loaded");
    CHECK(strstr(err.msg, "pattern:") && strstr(err.msg, "(unclosed"),
          "message \"%s\" does not name the pattern", err.msg);
}

int main(void)
{
    root = test_tmp_dir("test_tokenizer_load");
    test_b64_vectors();
    test_valid_file_loads();
    test_vocab_size_derived();
    test_bad_base64();
    test_bad_line();
    test_duplicate_rank();
    test_duplicate_bytes();
    test_rank_beyond_vocab();
    test_missing_single_byte();
    test_missing_files();
    test_bad_specials();
    test_bad_pattern();
    return check_result();
}
