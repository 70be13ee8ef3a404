/* Special tokens: matched whole, longest first, anywhere in template text
 * (allow_special); plain text otherwise, so "<|open|>" in user text is ordinary tokens. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "engine/synth/vocab.h"
#include "engine/text/tokenizer.h"
#include "tests/check.h"
#include "tests/util.h"

static const char *root; /* this run's folder */

static int32_t *enc(const struct k3_tokenizer *tok, const char *text, bool special, size_t *n)
{
    int32_t *ids;
    struct k3_err err = {{0}};
    REQUIRE(!k3_tok_encode(tok, text, strlen(text), special, &ids, n, &err), "%s", err.msg);
    return ids;
}

static bool has_special(const struct k3_tokenizer *tok, const int32_t *ids, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (k3_tok_is_special(tok, ids[i]))
            return true;
    return false;
}

static bool round_trips(const struct k3_tokenizer *tok, const int32_t *ids, size_t n,
                        const char *text)
{
    char *back;
    size_t len;
    struct k3_err err = {{0}};
    REQUIRE(!k3_tok_decode(tok, ids, n, &back, &len, &err), "%s", err.msg);
    bool ok = len == strlen(text) && !memcmp(back, text, len);
    free(back);
    return ok;
}

static const char *CHAT = "<|open|>message role=\"user\"<|sep|>Hi there<|close|>message<|sep|>"
                          "<|end_of_msg|>";

static void test_allowed_specials_are_single_ids(const struct k3_tokenizer *tok)
{
    size_t n;
    int32_t *ids = enc(tok, CHAT, true, &n);
    int32_t open = k3_tok_special(tok, "<|open|>"), sep = k3_tok_special(tok, "<|sep|>");
    int32_t close = k3_tok_special(tok, "<|close|>"), eom = k3_tok_special(tok, "<|end_of_msg|>");
    REQUIRE(open == 2035 && sep == 2037 && close == 2036 && eom == 2034,
            "k3-tiny special ids: open %d sep %d close %d end_of_msg %d", open, sep, close, eom);
    int count[4] = {0};
    for (size_t i = 0; i < n; i++) {
        count[0] += ids[i] == open;
        count[1] += ids[i] == sep;
        count[2] += ids[i] == close;
        count[3] += ids[i] == eom;
    }
    CHECK(ids[0] == open && ids[n - 1] == eom, "chat markup does not start with <|open|> and "
          "end with <|end_of_msg|>");
    CHECK(count[0] == 1 && count[1] == 2 && count[2] == 1 && count[3] == 1,
          "special counts open %d sep %d close %d eom %d", count[0], count[1], count[2], count[3]);
    CHECK(round_trips(tok, ids, n, CHAT), "chat markup does not decode back");
    free(ids);
}

static void test_disallowed_specials_are_text(const struct k3_tokenizer *tok)
{
    size_t n;
    int32_t *ids = enc(tok, CHAT, false, &n);
    CHECK(!has_special(tok, ids, n), "user text produced a special id");
    CHECK(round_trips(tok, ids, n, CHAT), "user text does not decode back");
    free(ids);
    ids = enc(tok, "<|open|>", false, &n);
    CHECK(n > 1 && !has_special(tok, ids, n), "\"<|open|>\" as user text: %zu ids, special %d",
          n, has_special(tok, ids, n));
    free(ids);
}

/* "x<|sep|>y": the special is found inside what would be one pre-token piece, and the
 * text on each side is encoded as it would be alone. */
static void test_specials_match_anywhere(const struct k3_tokenizer *tok)
{
    size_t n, na, nb;
    int32_t *ids = enc(tok, "hello<|sep|> world", true, &n);
    int32_t *a = enc(tok, "hello", false, &na), *b = enc(tok, " world", false, &nb);
    int32_t sep = k3_tok_special(tok, "<|sep|>");
    CHECK(n == na + 1 + nb && !memcmp(ids, a, na * 4) && ids[na] == sep &&
              !memcmp(ids + na + 1, b, nb * 4),
          "\"hello<|sep|> world\" is not enc(\"hello\") + <|sep|> + enc(\" world\")");
    free(ids);
    free(a);
    free(b);
    ids = enc(tok, "abc<|sep|>def[EOS]", true, &n);
    CHECK(n >= 3 && ids[n - 1] == k3_tok_special(tok, "[EOS]"), "[EOS] after a word not matched");
    free(ids);
}

/* Specials that are prefixes of one another: the longest wins wherever they start. */
static void test_longest_first(void)
{
    char dir[600], path[700];
    snprintf(dir, sizeof dir, "%s/longest", root);
    struct k3_err err = {{0}};
    REQUIRE(!k3_tok_synthesize(dir, 2048, 2032, &err), "%s", err.msg);
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    FILE *f = fopen(path, "wb");
    /* Shorter ones listed first: the order in the file must not matter. */
    fputs("{\"added_tokens_decoder\": {\"2040\": {\"content\": \"<|im|>\"}, "
          "\"2041\": {\"content\": \"<|im|>x\"}, \"2042\": {\"content\": \"<|im|>xy\"}, "
          "\"2043\": {\"content\": \"m|>\"}}}", f);
    fclose(f);
    struct k3_tokenizer *tok;
    REQUIRE(!k3_tok_load(&tok, dir, 2048, NULL, false, &err), "%s", err.msg);
    size_t n, nz;
    int32_t *ids = enc(tok, "<|im|>xy<|im|>x<|im|>z", true, &n);
    int32_t *z = enc(tok, "z", false, &nz);
    CHECK(n == 3 + nz && ids[0] == 2042 && ids[1] == 2041 && ids[2] == 2040 && ids[3] == z[0],
          "<|im|>xy<|im|>x<|im|>z: got %d,%d,%d", ids[0], n > 1 ? ids[1] : -1, n > 2 ? ids[2] : -1);
    free(ids);
    free(z);
    k3_tok_free(tok);
}

int main(void)
{
    root = test_tmp_dir("test_tokenizer_specials");
    char dir[K3_PATH_MAX + 16];
    snprintf(dir, sizeof dir, "%s/tiny", root);
    struct k3_err err = {{0}};
    REQUIRE(!k3_tok_synthesize(dir, 2048, 2032, &err), "%s", err.msg);
    struct k3_tokenizer *tok;
    REQUIRE(!k3_tok_load(&tok, dir, 2048, NULL, false, &err), "%s", err.msg);
    test_allowed_specials_are_single_ids(tok);
    test_disallowed_specials_are_text(tok);
    test_specials_match_anywhere(tok);
    k3_tok_free(tok);
    test_longest_first();
    return check_result();
}
