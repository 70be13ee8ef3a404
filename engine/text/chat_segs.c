/* The segment list: appending segments and XTML's tags (each attribute as four
 * segments, its value escaped & then "), joining them into the prompt text, and encoding
 * them to ids one segment at a time. */
#include <stdlib.h>
#include <string.h>

#include "engine/text/chat_internal.h"

#define OPEN "<|open|>"
#define CLOSE "<|close|>"
#define SEP "<|sep|>"
#define END_OF_MSG "<|end_of_msg|>"

int k3_chat_segs_push(struct k3_chat_segs *s, const char *text, size_t len, bool special)
{
    if (!len)
        return 0;
    if (s->n == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 64;
        struct k3_chat_seg *v = realloc(s->v, cap * sizeof *v);
        if (!v)
            return -1;
        s->v = v;
        s->cap = cap;
    }
    char *copy = malloc(len + 1);
    if (!copy)
        return -1;
    memcpy(copy, text, len);
    copy[len] = 0;
    s->v[s->n++] = (struct k3_chat_seg){copy, len, special};
    return 0;
}

void k3_chat_segs_free(struct k3_chat_segs *s)
{
    for (size_t i = 0; i < s->n; i++)
        free(s->v[i].text);
    free(s->v);
    *s = (struct k3_chat_segs){0};
}

char *k3_chat_segs_join(const struct k3_chat_segs *s, size_t *len)
{
    size_t total = 0;
    for (size_t i = 0; i < s->n; i++)
        total += s->v[i].len;
    char *out = malloc(total + 1);
    if (!out)
        return NULL;
    size_t at = 0;
    for (size_t i = 0; i < s->n; i++) {
        memcpy(out + at, s->v[i].text, s->v[i].len);
        at += s->v[i].len;
    }
    out[at] = 0;
    *len = total;
    return out;
}

static void push(struct k3_chat_render *r, const char *text, size_t len, bool special)
{
    if (!r->oom && k3_chat_segs_push(r->out, text, len, special))
        r->oom = true;
}

void k3_chat_text(struct k3_chat_render *r, const char *text, size_t len)
{
    push(r, text, len, false);
}

/* An attribute's value with & and " escaped, as one segment. */
static void attr_value(struct k3_chat_render *r, const char *v, size_t len)
{
    size_t extra = 0;
    for (size_t i = 0; i < len; i++)
        extra += v[i] == '&' ? 4 : v[i] == '"' ? 5 : 0;
    if (!extra) {
        push(r, v, len, false);
        return;
    }
    char *esc = malloc(len + extra);
    if (!esc) {
        r->oom = true;
        return;
    }
    size_t at = 0;
    for (size_t i = 0; i < len; i++) {
        const char *rep = v[i] == '&' ? "&amp;" : v[i] == '"' ? "&quot;" : NULL;
        if (rep) {
            memcpy(esc + at, rep, strlen(rep));
            at += strlen(rep);
        } else {
            esc[at++] = v[i];
        }
    }
    push(r, esc, at, false);
    free(esc);
}

void k3_chat_open(struct k3_chat_render *r, const char *tag, const struct k3_chat_attr *attrs,
                  int n_attrs)
{
    push(r, OPEN, strlen(OPEN), true);
    push(r, tag, strlen(tag), false);
    for (int i = 0; i < n_attrs; i++) {
        char key[32] = " ";
        strncat(key, attrs[i].key, sizeof key - 2);
        push(r, key, strlen(key), false);
        push(r, "=\"", 2, false);
        attr_value(r, attrs[i].value, attrs[i].len);
        push(r, "\"", 1, false);
    }
    push(r, SEP, strlen(SEP), true);
}

void k3_chat_close(struct k3_chat_render *r, const char *tag)
{
    push(r, CLOSE, strlen(CLOSE), true);
    push(r, tag, strlen(tag), false);
    push(r, SEP, strlen(SEP), true);
}

void k3_chat_end_of_msg(struct k3_chat_render *r)
{
    push(r, END_OF_MSG, strlen(END_OF_MSG), true);
}

struct ids {
    int32_t *v; /* [n], capacity cap */
    size_t n, cap;
};

static int put_ids(struct ids *out, const int32_t *ids, size_t n, struct k3_err *err)
{
    if (out->n + n > out->cap) {
        size_t cap = out->cap ? out->cap : 256;
        while (cap < out->n + n)
            cap *= 2;
        int32_t *v = realloc(out->v, cap * sizeof *v);
        if (!v)
            return k3_errf(err, "out of memory");
        out->v = v;
        out->cap = cap;
    }
    memcpy(out->v + out->n, ids, n * sizeof *ids);
    out->n += n;
    return 0;
}

static bool is_marker(const char *text)
{
    return !strcmp(text, OPEN) || !strcmp(text, CLOSE) || !strcmp(text, SEP) ||
           !strcmp(text, END_OF_MSG);
}

/* One segment's ids: a marker is its special's id, anything else encoded alone. */
static int encode_segment(const struct k3_tokenizer *tok, const struct k3_chat_seg *seg,
                          struct ids *out, struct k3_err *err)
{
    if (seg->special && is_marker(seg->text)) {
        int32_t id = k3_tok_special(tok, seg->text);
        if (id < 0)
            return k3_errf(err, "the tokenizer has no %s special token", seg->text);
        return put_ids(out, &id, 1, err);
    }
    int32_t *ids;
    size_t n;
    if (k3_tok_encode(tok, seg->text, seg->len, seg->special, &ids, &n, err))
        return -1;
    int rc = put_ids(out, ids, n, err);
    free(ids);
    return rc;
}

int k3_chat_segs_encode(const struct k3_tokenizer *tok, const struct k3_chat_segs *s,
                        int32_t **ids, size_t *n, struct k3_err *err)
{
    struct ids out = {0};
    for (size_t i = 0; i < s->n; i++) {
        if (encode_segment(tok, &s->v[i], &out, err)) {
            free(out.v);
            return -1;
        }
    }
    *ids = out.v;
    *n = out.n;
    return 0;
}
