/* The tokenizer object: loading (the ranks through tiktoken.c, the specials through
 * specials.c, the pattern through pretok.c), freeing, lookups by id and by content,
 * and decoding.  Encoding is encode.c.  See tokenizer.h. */
#include "engine/text/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/base/files.h"
#include "engine/text/tokenizer_internal.h"

int k3_tok_load_mem(struct k3_tokenizer **out, const char *name, const uint8_t *tiktoken,
                    size_t tiktoken_len, const char *tokconfig, size_t tokconfig_len,
                    int vocab_size, const char *pattern, struct k3_err *err)
{
    *out = NULL;
    char cfg_name[4096], ranks_name[4096];
    snprintf(cfg_name, sizeof cfg_name, "%s/tokenizer_config.json", name);
    snprintf(ranks_name, sizeof ranks_name, "%s/tiktoken.model", name);
    json_t *cfg = NULL;
    int min_ids = 0;
    if (tokconfig &&
        !(cfg = k3_tok_read_config(cfg_name, tokconfig, tokconfig_len, &min_ids, err)))
        return -1;
    struct k3_tokenizer *tok = calloc(1, sizeof *tok);
    if (!tok) {
        json_decref(cfg);
        return k3_errf(err, "tokenizer: out of memory");
    }
    if (k3_tok_load_ranks(tok, ranks_name, tiktoken, tiktoken_len, vocab_size, min_ids, err))
        goto fail;
    tok->is_special = calloc((size_t)tok->vocab_size, 1);
    if (!tok->is_special) {
        k3_errf(err, "tokenizer: out of memory");
        goto fail;
    }
    if (cfg && k3_tok_load_specials(tok, cfg_name, cfg, err))
        goto fail;
    if (k3_pretok_init(&tok->pretok, pattern ? pattern : K3_PRETOKENIZE_PATTERN_PCRE2, err))
        goto fail;
    json_decref(cfg);
    *out = tok;
    return 0;
fail:
    json_decref(cfg);
    k3_tok_free(tok);
    return -1;
}

int k3_tok_load(struct k3_tokenizer **out, const char *dir, int vocab_size,
                const char *pattern, bool no_specials, struct k3_err *err)
{
    *out = NULL;
    char path[4096];
    char *ranks = NULL, *cfg = NULL;
    size_t ranks_len = 0, cfg_len = 0;
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    int rc = no_specials ? 0 : k3_read_small_file(path, &cfg, &cfg_len, err);
    snprintf(path, sizeof path, "%s/tiktoken.model", dir);
    if (!rc)
        rc = k3_read_small_file(path, &ranks, &ranks_len, err);
    if (!rc)
        rc = k3_tok_load_mem(out, dir, (const uint8_t *)ranks, ranks_len, cfg, cfg_len,
                             vocab_size, pattern, err);
    free(ranks);
    free(cfg);
    return rc;
}

void k3_tok_free(struct k3_tokenizer *tok)
{
    if (!tok)
        return;
    k3_bm_free(&tok->map);
    k3_pretok_free(&tok->pretok);
    free(tok->specials);
    free(tok->is_special);
    free(tok);
}

const struct k3_bytemap *k3_tok_map(const struct k3_tokenizer *tok)
{
    return &tok->map;
}

const uint8_t *k3_tok_bytes(const struct k3_tokenizer *tok, int32_t id, size_t *len)
{
    return k3_bm_bytes(&tok->map, id, len);
}

int32_t k3_tok_special(const struct k3_tokenizer *tok, const char *content)
{
    size_t n = strlen(content);
    for (int i = 0; i < tok->n_specials; i++)
        if (tok->specials[i].len == n && !memcmp(tok->specials[i].bytes, content, n))
            return tok->specials[i].id;
    return -1;
}

bool k3_tok_is_special(const struct k3_tokenizer *tok, int32_t id)
{
    return id >= 0 && id < tok->vocab_size && tok->is_special[id];
}

int k3_tok_vocab_size(const struct k3_tokenizer *tok)
{
    return tok->vocab_size;
}

int k3_tok_decode(const struct k3_tokenizer *tok, const int32_t *ids, size_t n_ids,
                  char **text, size_t *len, struct k3_err *err)
{
    *text = NULL;
    *len = 0;
    size_t total = 0, l;
    for (size_t i = 0; i < n_ids; i++) {
        if (!k3_bm_bytes(&tok->map, ids[i], &l))
            return k3_errf(err, "decode: id %d (position %zu) is not a token of this vocabulary "
                           "(size %d)", ids[i], i, tok->vocab_size);
        total += l;
    }
    char *out = malloc(total + 1);
    if (!out)
        return k3_errf(err, "decode: out of memory");
    size_t o = 0;
    for (size_t i = 0; i < n_ids; i++) {
        const uint8_t *b = k3_bm_bytes(&tok->map, ids[i], &l);
        memcpy(out + o, b, l);
        o += l;
    }
    out[o] = 0;
    *text = out;
    *len = o;
    return 0;
}
