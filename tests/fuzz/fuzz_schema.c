/* libFuzzer: a JSON Schema from a request into the grammar compiler (the first byte picks
 * response_format or tools, thinking, parallel calls; the rest is the schema), then a few
 * masked steps on a small vocabulary, each token taken checked against the mask. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "engine/grammar/grammar.h"
#include "engine/text/base64.h"
#include "engine/text/tokenizer.h"

/* 256 bytes, a few merges of JSON and XTML text, the four structural tokens. */
static struct k3_tokenizer *tok;
static struct k3_vocab_trie *trie;

static void open_vocab(void)
{
    static const char *const merges[] = {
        "{\"", "\":", "\",", "\"}", "true", "false", "null", "12", "0.", "e-", "abc", "ing",
        " the", "\\n", "\\u00", "argument", "call", "response", "think", "tools", "message",
        " key=\"", "\" type=\"", "string", "number", "\xc3\xa9", "\xe4\xb8\xad", "\"]", "[{", "},"};
    size_t n = 256 + sizeof merges / sizeof *merges, len = 0;
    char *ranks = malloc(n * 40), b64[64];
    for (size_t r = 0; r < n; r++) {
        uint8_t byte = (uint8_t)r;
        const char *p = r < 256 ? (const char *)&byte : merges[r - 256];
        size_t k = r < 256 ? 1 : strlen(p);
        b64[k3_b64_encode((const uint8_t *)p, k, b64)] = 0;
        len += (size_t)sprintf(ranks + len, "%s %zu\n", b64, r);
    }
    char config[400];
    snprintf(config, sizeof config, "{\"added_tokens_decoder\":{\"%zu\":{\"content\":\"<|open|>\"},"
             "\"%zu\":{\"content\":\"<|close|>\"},\"%zu\":{\"content\":\"<|sep|>\"},"
             "\"%zu\":{\"content\":\"<|end_of_msg|>\"},\"%zu\":{\"content\":\"[EOS]\"}}}",
             n, n + 1, n + 2, n + 3, n + 4);
    struct k3_err err;
    if (k3_tok_load_mem(&tok, "fuzz", (const uint8_t *)ranks, len, config, strlen(config), 0,
                        NULL, &err) ||
        k3_vocab_trie_build(tok, &trie, &err)) {
        fprintf(stderr, "fuzz_schema: %s\n", err.msg);
        abort();
    }
    free(ranks);
}

static struct k3_grammar *compile(uint8_t flags, json_t *schema)
{
    struct k3_grammar *g = NULL;
    struct k3_grammar_fault f;
    if (!(flags & 2)) {
        k3_grammar_json(schema, flags & 1, &g, &f);
        return g;
    }
    json_t *tools = json_pack("[{s:s,s:{s:s,s:O}}]", "type", "function", "function", "name",
                              "f", "parameters", schema);
    k3_grammar_tools(tools, flags & 8 ? "f" : NULL, flags & 4, flags & 1, &g, &f);
    json_decref(tools);
    return g;
}

/* A few steps, each taking an allowed token picked by the input's bytes. */
static void run(const struct k3_grammar *g, const uint8_t *data, size_t size)
{
    struct k3_matcher *m;
    struct k3_err err;
    if (k3_matcher_new(g, tok, &m, &err))
        abort();
    int vocab = k3_tok_vocab_size(tok);
    uint32_t bits[(512 + 31) / 32];
    for (int step = 0; step < 24 && !k3_matcher_done(m); step++) {
        k3_matcher_mask(m, trie, bits);
        int allowed[512], n = 0;
        for (int id = 0; id < vocab; id++)
            if (bits[id >> 5] >> (id & 31) & 1)
                allowed[n++] = id;
        if (n == 0)
            abort(); /* a compiled grammar always has a way on */
        int probe = (int)((size_t)step * 131 % (size_t)vocab); /* a token the mask decided */
        if (k3_matcher_allows(m, probe) != (bool)(bits[probe >> 5] >> (probe & 31) & 1))
            abort();
        int id = allowed[(size ? data[step % size] * 7 + step : step) % n];
        if (k3_matcher_accept(m, id))
            abort();
    }
    k3_matcher_free(m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!tok)
        open_vocab();
    if (size < 1)
        return 0;
    json_t *schema = json_loadb((const char *)data + 1, size - 1, JSON_DECODE_ANY, NULL);
    if (!schema)
        return 0;
    struct k3_grammar *g = compile(data[0], schema);
    if (g)
        run(g, data, size);
    k3_grammar_free(g);
    json_decref(schema);
    return 0;
}
