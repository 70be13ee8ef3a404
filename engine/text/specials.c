/* tokenizer_config.json: the added tokens (added_tokens_decoder) a tokenizer matches
 * whole in template text and decodes to their content.  See tokenizer_internal.h. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "engine/text/tokenizer_internal.h"
#include "engine/text/utf8.h"

json_t *k3_tok_read_config(const char *path, const char *text, size_t len, int *min_ids,
                           struct k3_err *err)
{
    json_error_t je;
    json_t *root = json_loadb(text, len, 0, &je);
    if (!root) {
        k3_errf(err, "%s:%d: %s", path, je.line, je.text);
        return NULL;
    }
    json_t *dec = json_object_get(root, "added_tokens_decoder");
    if (!json_is_object(dec)) {
        k3_errf(err, "%s: added_tokens_decoder: missing or not an object", path);
        json_decref(root);
        return NULL;
    }
    const char *key;
    json_t *val;
    *min_ids = 0;
    json_object_foreach(dec, key, val) {
        long id = strtol(key, NULL, 10);
        if (id >= *min_ids && id < INT32_MAX)
            *min_ids = (int)id + 1;
    }
    return root;
}

/* The id an added_tokens_decoder key names: a decimal integer in [0, vocab_size). */
static long special_id(const struct k3_tokenizer *tok, const char *path, const char *key,
                       struct k3_err *err)
{
    char *endp;
    errno = 0;
    long id = strtol(key, &endp, 10);
    if (*key < '0' || *key > '9' || *endp || errno || id < 0 || id >= tok->vocab_size)
        return k3_errf(err, "%s: added_tokens_decoder: id \"%s\" is not an integer in [0, %d)",
                       path, key, tok->vocab_size);
    return id;
}

/* The content c[0..n) is new: no other special has the same text. */
static int check_unique_content(const struct k3_tokenizer *tok, const char *path,
                                const uint8_t *c, size_t n, long id, struct k3_err *err)
{
    for (int i = 0; i < tok->n_specials; i++) {
        size_t l;
        const uint8_t *other = k3_bm_bytes(&tok->map, tok->specials[i].id, &l);
        if (l == n && !memcmp(other, c, n))
            return k3_errf(err, "%s: added_tokens_decoder: \"%s\" is both id %d and id %ld",
                           path, (const char *)c, tok->specials[i].id, id);
    }
    return 0;
}

/* Adds entry added_tokens_decoder[key] = val: its content, non-empty UTF-8 text, as a
 * decode-only token of an id no rank or other special has. */
static int add_special(struct k3_tokenizer *tok, const char *path, const char *key,
                       json_t *val, struct k3_err *err)
{
    long id = special_id(tok, path, key, err);
    if (id < 0)
        return -1;
    json_t *content = json_object_get(val, "content");
    if (!json_is_string(content) || json_string_length(content) == 0)
        return k3_errf(err, "%s: added_tokens_decoder.%s.content: missing or not a non-empty "
                       "string", path, key);
    const uint8_t *c = (const uint8_t *)json_string_value(content);
    size_t n = json_string_length(content);
    if (k3_utf8_invalid_at(c, n) != n || memchr(c, 0, n))
        return k3_errf(err, "%s: added_tokens_decoder.%s.content: not valid UTF-8 text", path, key);
    size_t l;
    if (k3_bm_bytes(&tok->map, (int32_t)id, &l))
        return k3_errf(err, "%s: added_tokens_decoder: id %ld is already %s", path, id,
                       tok->is_special[id] ? "another special token" : "a rank in tiktoken.model");
    if (check_unique_content(tok, path, c, n, id, err))
        return -1;
    if (k3_bm_add(&tok->map, c, n, (int32_t)id, false))
        return k3_errf(err, "%s: out of memory", path);
    tok->is_special[id] = 1;
    tok->specials[tok->n_specials++] = (struct k3_special){NULL, n, (int32_t)id};
    return 0;
}

static int longest_first(const void *a, const void *b)
{
    const struct k3_special *x = a, *y = b;
    if (x->len != y->len)
        return x->len > y->len ? -1 : 1;
    return memcmp(x->bytes, y->bytes, x->len);
}

/* Points the specials at their bytes (the arena may have moved while adding: only now
 * are the pointers stable) and sorts them longest first. */
static void finish_specials(struct k3_tokenizer *tok)
{
    for (int i = 0; i < tok->n_specials; i++) {
        size_t l;
        tok->specials[i].bytes = k3_bm_bytes(&tok->map, tok->specials[i].id, &l);
        tok->special_first[tok->specials[i].bytes[0]] = 1;
    }
    qsort(tok->specials, (size_t)tok->n_specials, sizeof *tok->specials, longest_first);
}

int k3_tok_load_specials(struct k3_tokenizer *tok, const char *path, json_t *root,
                         struct k3_err *err)
{
    json_t *dec = json_object_get(root, "added_tokens_decoder");
    size_t n = json_object_size(dec);
    tok->specials = calloc(n ? n : 1, sizeof *tok->specials);
    if (!tok->specials)
        return k3_errf(err, "%s: out of memory", path);
    const char *key;
    json_t *val;
    json_object_foreach(dec, key, val) {
        if (add_special(tok, path, key, val, err))
            return -1;
    }
    finish_specials(tok);
    return 0;
}
