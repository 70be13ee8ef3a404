/* Encoding: text to ids (k3_tok_encode, tokenizer.h).  Template text is first cut at
 * special tokens; each stretch between them is pre-tokenized and every piece becomes
 * one id (a whole token) or the ids of its byte-pair merge. */
#include <stdlib.h>
#include <string.h>

#include "engine/text/bpe.h"
#include "engine/text/tokenizer.h"
#include "engine/text/tokenizer_internal.h"
#include "engine/text/utf8.h"

struct id_vec {
    int32_t *v; /* [cap], n used */
    size_t n, cap;
};

static int vec_reserve(struct id_vec *v, size_t extra)
{
    if (v->n + extra <= v->cap)
        return 0;
    size_t cap = v->cap ? v->cap : 64;
    while (cap < v->n + extra)
        cap *= 2;
    int32_t *nv = realloc(v->v, cap * sizeof *nv);
    if (!nv)
        return -1;
    v->v = nv;
    v->cap = cap;
    return 0;
}

/* Pre-tokenizes text[0..len) (no specials) and appends the BPE ids of every piece;
 * base is text's offset in the caller's text, for messages. */
static int encode_ordinary(const struct k3_tokenizer *tok, const uint8_t *text, size_t len,
                           size_t base, struct id_vec *ids, struct k3_bpe_scratch *s,
                           struct k3_err *err)
{
    struct k3_pretok_iter it;
    if (k3_pretok_iter_init(&it, &tok->pretok, text, len, err))
        return -1;
    int rc = 0;
    size_t a, b;
    while ((rc = k3_pretok_next(&it, &a, &b, err)) == 1) {
        if (vec_reserve(ids, b - a)) {
            rc = k3_errf(err, "encode: out of memory");
            break;
        }
        int32_t whole = k3_bm_find(&tok->map, text + a, b - a);
        if (whole >= 0) {
            ids->v[ids->n++] = whole;
            continue;
        }
        long k = k3_bpe_merge(&tok->map, text + a, b - a, s, ids->v + ids->n);
        if (k < 0) {
            rc = k3_errf(err, "encode: %s at byte %zu", k == -1 ? "out of memory"
                         : "a byte has no rank", base + a);
            break;
        }
        ids->n += (size_t)k;
    }
    k3_pretok_iter_free(&it);
    return rc < 0 ? -1 : 0;
}

/* The special token that starts at t[0..len), or NULL: the longest, as the specials
 * are sorted longest first. */
static const struct k3_special *special_at(const struct k3_tokenizer *tok, const uint8_t *t,
                                           size_t len)
{
    if (!tok->special_first[t[0]])
        return NULL;
    for (int k = 0; k < tok->n_specials; k++) {
        const struct k3_special *sp = &tok->specials[k];
        if (sp->len <= len && sp->bytes[0] == t[0] && !memcmp(sp->bytes, t, sp->len))
            return sp;
    }
    return NULL;
}

/* Template text: the stretches between specials encoded as ordinary text, each special
 * as its id.  Returns the offset where the last stretch (still to encode) begins. */
static long encode_specials(const struct k3_tokenizer *tok, const uint8_t *t, size_t len,
                            struct id_vec *ids, struct k3_bpe_scratch *s, struct k3_err *err)
{
    size_t seg = 0;
    for (size_t i = 0; i < len; i++) {
        const struct k3_special *hit = special_at(tok, t + i, len - i);
        if (!hit)
            continue;
        if (encode_ordinary(tok, t + seg, i - seg, seg, ids, s, err))
            return -1;
        if (vec_reserve(ids, 1))
            return k3_errf(err, "encode: out of memory");
        ids->v[ids->n++] = hit->id;
        i += hit->len - 1;
        seg = i + 1;
    }
    return (long)seg;
}

int k3_tok_encode(const struct k3_tokenizer *tok, const char *text, size_t len,
                  bool allow_special, int32_t **ids_out, size_t *n_out, struct k3_err *err)
{
    *ids_out = NULL;
    *n_out = 0;
    const uint8_t *t = (const uint8_t *)text;
    size_t bad = k3_utf8_invalid_at(t, len);
    if (bad != len)
        return k3_errf(err, "encode: invalid UTF-8 at byte offset %zu (0x%02x)", bad, t[bad]);
    struct id_vec ids = {0};
    struct k3_bpe_scratch s = {0};
    long seg = 0;
    if (vec_reserve(&ids, len / 4 + 16))
        seg = k3_errf(err, "encode: out of memory");
    else if (allow_special && tok->n_specials)
        seg = encode_specials(tok, t, len, &ids, &s, err);
    int rc = seg < 0 ? -1 : encode_ordinary(tok, t + seg, len - (size_t)seg, (size_t)seg, &ids,
                                            &s, err);
    k3_bpe_scratch_free(&s);
    if (rc) {
        free(ids.v);
        return -1;
    }
    *ids_out = ids.v;
    *n_out = ids.n;
    return 0;
}
