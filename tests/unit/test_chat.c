/* k3_chat_prompt / k3_chat_messages (plain text through the strict renderer): the
 * specials are real special tokens, the markup text between them is plain text, and a
 * user's "<|open|>" stays ordinary text; an assistant turn sits in a response element,
 * after an (empty) think channel when thinking is on; developer renders as system; an
 * unknown role, and a tool result with no call before it, are refused by field. */
#include <stdlib.h>
#include <string.h>

#include "engine/text/chat.h"
#include "tests/util.h"

static int count(const int32_t *ids, size_t n, int32_t id)
{
    int c = 0;
    for (size_t i = 0; i < n; i++)
        c += ids[i] == id;
    return c;
}

static char *decode(const struct k3_tokenizer *tok, const int32_t *ids, size_t n)
{
    char *text;
    size_t len;
    struct k3_err e;
    REQUIRE(k3_tok_decode(tok, ids, n, &text, &len, &e) == 0, "%s", e.msg);
    return text;
}

int main(void)
{
    struct k3_tokenizer *tok;
    struct k3_err e = {{0}};
    REQUIRE(k3_tok_load(&tok, tiny_model(), 2048, NULL, false, &e) == 0, "%s", e.msg);
    int32_t open = k3_tok_special(tok, "<|open|>"), sep = k3_tok_special(tok, "<|sep|>"),
            close = k3_tok_special(tok, "<|close|>"), eom = k3_tok_special(tok, "<|end_of_msg|>");
    REQUIRE(open >= 0 && sep >= 0 && close >= 0 && eom >= 0, "specials missing");

    int32_t *ids;
    size_t n;
    REQUIRE(k3_chat_prompt(tok, "Be brief.", "Say <|open|> twice", true, &ids, &n, &e) == 0, "%s",
            e.msg);
    char *text = decode(tok, ids, n);
    const char *want = "<|open|>message role=\"system\"<|sep|>Be brief.<|close|>message<|sep|>"
                       "<|end_of_msg|><|open|>message role=\"user\"<|sep|>Say <|open|> twice"
                       "<|close|>message<|sep|><|end_of_msg|><|open|>message role=\"assistant\""
                       "<|sep|><|open|>think<|sep|>";
    CHECK(!strcmp(text, want), "decoded:\n%s\nwant:\n%s", text, want);
    /* Four markup <|open|>s are special tokens; the user's one is ordinary text. */
    CHECK(count(ids, n, open) == 4, "%d special <|open|> ids, want 4", count(ids, n, open));
    CHECK(count(ids, n, eom) == 2 && count(ids, n, close) == 2, "end_of_msg / close counts");
    CHECK(ids[0] == open && ids[n - 1] == sep, "starts with <|open|>, ends with <|sep|>");
    free(text);
    free(ids);

    REQUIRE(k3_chat_prompt(tok, NULL, "Hi", false, &ids, &n, &e) == 0, "%s", e.msg);
    text = decode(tok, ids, n);
    CHECK(!strcmp(text, "<|open|>message role=\"user\"<|sep|>Hi<|close|>message<|sep|>"
                        "<|end_of_msg|><|open|>message role=\"assistant\"<|sep|><|open|>response"
                        "<|sep|>"),
          "no system, no thinking: %s", text);
    free(text);
    free(ids);

    struct k3_chat_msg conv[] = {{"user", "Hi"}, {"assistant", "Hello."}, {"user", "Again"}};
    REQUIRE(k3_chat_messages(tok, conv, 3, false, &ids, &n, &e) == 0, "%s", e.msg);
    text = decode(tok, ids, n);
    want = "<|open|>message role=\"user\"<|sep|>Hi<|close|>message<|sep|><|end_of_msg|>"
           "<|open|>message role=\"assistant\"<|sep|><|open|>response<|sep|>Hello.<|close|>"
           "response<|sep|><|close|>message<|sep|><|end_of_msg|>"
           "<|open|>message role=\"user\"<|sep|>Again<|close|>message<|sep|><|end_of_msg|>"
           "<|open|>message role=\"assistant\"<|sep|><|open|>response<|sep|>";
    CHECK(!strcmp(text, want), "conversation:\n%s\nwant:\n%s", text, want);
    CHECK(count(ids, n, close) == 4, "%d special <|close|> ids, want 4", count(ids, n, close));
    free(text);
    free(ids);

    REQUIRE(k3_chat_messages(tok, conv, 3, true, &ids, &n, &e) == 0, "%s", e.msg);
    text = decode(tok, ids, n);
    CHECK(strstr(text, "<|open|>message role=\"assistant\"<|sep|><|open|>think<|sep|><|close|>"
                       "think<|sep|><|open|>response<|sep|>Hello.<|close|>response<|sep|>"),
          "with thinking, a past assistant turn carries an empty think channel: %s", text);
    free(text);
    free(ids);

    struct k3_chat_msg dev[] = {{"developer", "Be brief."}, {"user", "Hi"}};
    REQUIRE(k3_chat_messages(tok, dev, 2, false, &ids, &n, &e) == 0, "%s", e.msg);
    text = decode(tok, ids, n);
    CHECK(!strncmp(text, "<|open|>message role=\"system\"<|sep|>Be brief.<|close|>", 50),
          "developer renders as system: %s", text);
    free(text);
    free(ids);

    struct k3_chat_msg robot[] = {{"user", "Hi"}, {"robot", "beep"}};
    CHECK(k3_chat_messages(tok, robot, 2, false, &ids, &n, &e) == -1 &&
              strstr(e.msg, "messages[1].role"),
          "an unknown role is refused by field: %s", e.msg);
    struct k3_chat_msg tool[] = {{"tool", "42"}};
    CHECK(k3_chat_messages(tok, tool, 1, false, &ids, &n, &e) == -1 && strstr(e.msg, "messages[0]") &&
              strstr(e.msg, "tool_calls"),
          "a tool result with no assistant call before it is refused: %s", e.msg);
    CHECK(k3_chat_prompt(tok, NULL, "caf\xe9", false, &ids, &n, &e) == -1 &&
              strstr(e.msg, "--chat: message 0: invalid UTF-8 at byte offset 3"),
          "invalid UTF-8 is refused with its offset: %s", e.msg);
    k3_tok_free(tok);
    return check_result();
}
