/* The vocabulary's byte trie and masks, built once per tokenizer.  See vocab_trie.h. */
#include "engine/grammar/vocab_trie.h"

#include <stdlib.h>
#include <string.h>

struct tok_bytes {
    const uint8_t *p;
    size_t len;
    int32_t id;
};

static int by_bytes(const void *a, const void *b)
{
    const struct tok_bytes *x = a, *y = b;
    size_t n = x->len < y->len ? x->len : y->len;
    int c = memcmp(x->p, y->p, n);
    if (c)
        return c;
    return x->len < y->len ? -1 : x->len > y->len;
}

static void trie_free(struct flat_trie *t)
{
    free(t->byte);
    free(t->depth);
    free(t->token);
    free(t->next);
}

/* The trie of toks[0..n) (sorted by bytes, distinct): a node for each new byte past the
 * prefix shared with the previous token, in order, which is depth-first order. */
static int trie_build(struct flat_trie *t, const struct tok_bytes *toks, size_t n,
                      struct k3_err *err)
{
    size_t cap = 0, max_len = 0;
    for (size_t i = 0; i < n; i++) {
        cap += toks[i].len;
        max_len = toks[i].len > max_len ? toks[i].len : max_len;
    }
    if (max_len > UINT16_MAX)
        return k3_errf(err, "vocabulary trie: token %d is %zu bytes long", toks[0].id, max_len);
    t->byte = malloc(cap + 1);
    t->depth = malloc((cap + 1) * sizeof *t->depth);
    t->token = malloc((cap + 1) * sizeof *t->token);
    t->next = malloc((cap + 1) * sizeof *t->next);
    uint32_t *open = malloc((max_len + 1) * sizeof *open); /* open[d]: node at depth d */
    if (!t->byte || !t->depth || !t->token || !t->next || !open) {
        free(open);
        return k3_errf(err, "out of memory for the vocabulary trie (%zu nodes)", cap);
    }
    uint32_t nodes = 0;
    size_t depth = 0;
    for (size_t i = 0; i < n; i++) {
        const struct tok_bytes *k = &toks[i];
        size_t l = 0;
        if (i > 0)
            while (l < k->len && l < toks[i - 1].len && k->p[l] == toks[i - 1].p[l])
                l++;
        for (; depth > l; depth--)
            t->next[open[depth]] = nodes;
        for (size_t d = l + 1; d <= k->len; d++) {
            t->byte[nodes] = k->p[d - 1];
            t->depth[nodes] = (uint16_t)d;
            t->token[nodes] = -1;
            open[d] = nodes++;
        }
        depth = k->len;
        t->token[open[depth]] = k->id;
    }
    for (; depth > 0; depth--)
        t->next[open[depth]] = nodes;
    free(open);
    t->n = nodes;
    t->max_depth = (uint32_t)max_len;
    return 0;
}

static void set_bit(uint32_t *bits, int32_t id)
{
    bits[id >> 5] |= 1u << (id & 31);
}

/* Each token into the masks: valid UTF-8 from each state, free of JSON string stops,
 * its character count. */
static void classify(struct k3_vocab_trie *t, const struct tok_bytes *k)
{
    bool stop = false;
    uint32_t chars = 0;
    for (size_t i = 0; i < k->len; i++) {
        stop |= json_string_stop(k->p[i]);
        chars += utf8_starts_char(k->p[i]);
    }
    for (uint8_t s = 0; s < UTF8_STATES; s++) {
        uint8_t u = s;
        for (size_t i = 0; i < k->len && u != UTF8_BAD; i++)
            u = utf8_next(u, k->p[i]);
        if (u == UTF8_BAD)
            continue;
        set_bit(t->raw[s], k->id);
        if (!stop)
            set_bit(t->json[s], k->id);
    }
    set_bit(t->text, k->id);
    t->chars[k->id] = (uint16_t)chars; /* a token has at most UINT16_MAX bytes */
    t->max_chars = chars > t->max_chars ? chars : t->max_chars;
    for (uint32_t c = chars; c < SHORT_CHARS; c++)
        set_bit(t->short_of[c], k->id);
    if (chars >= SHORT_CHARS)
        t->long_ids[t->n_long++] = k->id;
}

static int find_specials(struct k3_vocab_trie *t, const struct k3_tokenizer *tok,
                         struct k3_err *err)
{
    static const char *const names[4] = {"<|open|>", "<|close|>", "<|sep|>", "<|end_of_msg|>"};
    for (int i = 0; i < 4; i++) {
        t->special[i] = k3_tok_special(tok, names[i]);
        if (t->special[i] < 0)
            return k3_errf(err, "vocabulary trie: the tokenizer has no %s token", names[i]);
    }
    return 0;
}

static int alloc_masks(struct k3_vocab_trie *t, struct k3_err *err)
{
    size_t bytes = (size_t)t->words * sizeof(uint32_t);
    bool ok = (t->text = calloc(1, bytes)) &&
              (t->chars = calloc((size_t)t->vocab, sizeof *t->chars)) &&
              (t->long_ids = malloc((size_t)t->vocab * sizeof *t->long_ids));
    for (int s = 0; s < UTF8_STATES && ok; s++)
        ok = (t->raw[s] = calloc(1, bytes)) && (t->json[s] = calloc(1, bytes));
    for (int c = 0; c < SHORT_CHARS && ok; c++)
        ok = (t->short_of[c] = calloc(1, bytes)) != NULL;
    return ok ? 0 : k3_errf(err, "out of memory for the vocabulary masks");
}

/* The text tokens (not special, not empty), sorted by bytes; duplicates are an error. */
static int text_tokens(const struct k3_tokenizer *tok, struct tok_bytes **out, size_t *n,
                       struct k3_err *err)
{
    int vocab = k3_tok_vocab_size(tok);
    struct tok_bytes *toks = malloc((size_t)vocab * sizeof *toks);
    if (!toks)
        return k3_errf(err, "out of memory for the vocabulary trie");
    size_t k = 0;
    for (int32_t id = 0; id < vocab; id++) {
        size_t len;
        const uint8_t *p = k3_tok_bytes(tok, id, &len);
        if (p && len > 0 && !k3_tok_is_special(tok, id))
            toks[k++] = (struct tok_bytes){p, len, id};
    }
    qsort(toks, k, sizeof *toks, by_bytes);
    for (size_t i = 1; i < k; i++)
        if (!by_bytes(&toks[i - 1], &toks[i])) {
            int32_t a = toks[i - 1].id, b = toks[i].id;
            free(toks);
            return k3_errf(err, "vocabulary trie: tokens %d and %d have the same bytes", a, b);
        }
    *out = toks;
    *n = k;
    return 0;
}

int k3_vocab_trie_build(const struct k3_tokenizer *tok, struct k3_vocab_trie **out,
                        struct k3_err *err)
{
    struct k3_vocab_trie *t = calloc(1, sizeof *t);
    struct tok_bytes *toks = NULL;
    size_t n = 0;
    if (!t)
        return k3_errf(err, "out of memory for the vocabulary trie");
    t->vocab = k3_tok_vocab_size(tok);
    t->words = (t->vocab + 31) / 32;
    if (find_specials(t, tok, err) || alloc_masks(t, err) || text_tokens(tok, &toks, &n, err) ||
        trie_build(&t->all, toks, n, err))
        goto fail;
    for (size_t i = 0; i < n; i++)
        classify(t, &toks[i]);
    size_t n_stops = 0; /* the tokens with a stop byte, still in byte order */
    for (size_t i = 0; i < n; i++) {
        bool stop = false;
        for (size_t j = 0; j < toks[i].len; j++)
            stop |= json_string_stop(toks[i].p[j]);
        if (stop)
            toks[n_stops++] = toks[i];
    }
    if (trie_build(&t->stops, toks, n_stops, err))
        goto fail;
    free(toks);
    *out = t;
    return 0;
fail:
    free(toks);
    k3_vocab_trie_free(t);
    return -1;
}

void k3_vocab_trie_free(struct k3_vocab_trie *t)
{
    if (!t)
        return;
    trie_free(&t->all);
    trie_free(&t->stops);
    free(t->text);
    free(t->chars);
    free(t->long_ids);
    for (int c = 0; c < SHORT_CHARS; c++)
        free(t->short_of[c]);
    for (int s = 0; s < UTF8_STATES; s++) {
        free(t->raw[s]);
        free(t->json[s]);
    }
    free(t);
}
