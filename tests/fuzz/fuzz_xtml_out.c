/* libFuzzer: arbitrary generated ids through the XTML output parser (xtml_out.h).
 * Byte 0 picks thinking on or off; every later byte is one id of a small vocabulary
 * (the 256 bytes, K3's tag and attribute words, a few multi-byte characters, the four
 * specials): 192..255 are the specials (a quarter of the ids), 0..N_WORDS-1 the words,
 * the rest bytes (ASCII and a spread of high bytes).  Whatever comes in, every text
 * piece must be non-empty valid UTF-8, every call numbered in order with a non-empty
 * name and arguments that parse as a JSON object, and the end count what was emitted. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "engine/text/base64.h"
#include "engine/text/tokenizer.h"
#include "engine/text/utf8.h"
#include "engine/text/xtml_out.h"

static const char *const words[] = {
    "think", "response", "tools", "call", "argument", "json", "message", " tool=\"",
    " key=\"", " type=\"", " index=\"", "string", "number", "boolean", "null", "object",
    "array", "true", "false", "&quot;", "&amp;", "{\"", "\":", "\"}", "[1,", "0.1", "-2e5",
    "\xc3\xa9", "\xe4\xb8\xad", "\xf0\x9f\x98\x80", "<|sep|>", "<|close|>",
    "12345678901234567890123",
};
#define N_WORDS ((int)(sizeof words / sizeof words[0]))
static const char *const specials[4] = {"<|open|>", "<|close|>", "<|sep|>", "<|end_of_msg|>"};

/* The vocabulary: rank b is byte b, then the words, then the specials. */
static const struct k3_tokenizer *vocab(void)
{
    static struct k3_tokenizer *tok;
    if (tok)
        return tok;
    static char ranks[64 * (256 + N_WORDS)], config[512];
    size_t n = 0;
    for (int r = 0; r < 256 + N_WORDS; r++) {
        uint8_t byte = (uint8_t)r;
        const uint8_t *s = r < 256 ? &byte : (const uint8_t *)words[r - 256];
        n += k3_b64_encode(s, r < 256 ? 1 : strlen(words[r - 256]), ranks + n);
        n += (size_t)sprintf(ranks + n, " %d\n", r);
    }
    int c = sprintf(config, "{\"added_tokens_decoder\": {");
    for (int i = 0; i < 4; i++)
        c += sprintf(config + c, "%s\"%d\": {\"content\": \"%s\"}", i ? ", " : "",
                     256 + N_WORDS + i, specials[i]);
    c += sprintf(config + c, "}}");
    struct k3_err err;
    if (k3_tok_load_mem(&tok, "fuzz_xtml_out", (const uint8_t *)ranks, n, config, (size_t)c, 0,
                        NULL, &err)) {
        fprintf(stderr, "fuzz_xtml_out: vocabulary: %s\n", err.msg);
        abort();
    }
    return tok;
}

static int32_t id_of(uint8_t b)
{
    if (b >= 192)
        return 256 + N_WORDS + (b & 3);
    if (b < N_WORDS)
        return 256 + b;
    int raw = b - N_WORDS; /* 0..191-N_WORDS */
    return raw < 128 ? raw : 0x80 + (raw - 128) * 4;
}

struct seen {
    int calls;
    struct k3_xtml_result collected;
};

static void check(const struct k3_xtml_event *ev, void *ctx)
{
    struct seen *s = ctx;
    if (ev->kind == K3_XTML_TOOL_CALL) {
        size_t name_len = strlen(ev->name);
        if (ev->call_index != s->calls++ || !name_len ||
            k3_utf8_invalid_at((const uint8_t *)ev->name, name_len) != name_len)
            abort();
        json_error_t je;
        json_t *args = json_loads(ev->arguments, JSON_ALLOW_NUL | JSON_DECODE_INT_AS_REAL, &je);
        if (!json_is_object(args)) {
            fprintf(stderr, "arguments not a JSON object: %s\n", ev->arguments);
            abort();
        }
        json_decref(args);
    } else if (!ev->len || k3_utf8_invalid_at((const uint8_t *)ev->text, ev->len) != ev->len) {
        abort();
    }
    k3_xtml_collect(ev, &s->collected);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!size)
        return 0;
    struct k3_xtml_out *p;
    struct k3_err err;
    if (k3_xtml_out_new(vocab(), data[0] & 1, &p, &err))
        abort();
    struct seen s = {0};
    for (size_t i = 1; i < size; i++)
        if (k3_xtml_out_feed(p, id_of(data[i]), check, &s))
            abort();
    struct k3_xtml_end end;
    k3_xtml_out_finish(p, check, &s, &end);
    if (end.calls != s.calls || s.collected.n_calls != s.calls || s.collected.oom)
        abort();
    k3_xtml_result_free(&s.collected);
    k3_xtml_out_free(p);
    return 0;
}
