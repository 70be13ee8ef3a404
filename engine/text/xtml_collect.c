/* The parsed answer gathered whole, for a non-streaming reply (k3_xtml_collect,
 * xtml_out.h): reasoning and content concatenated, calls kept in order. */
#include <stdlib.h>
#include <string.h>

#include "engine/text/xtml_out.h"

/* The size a string of len bytes (and its NUL) is allocated at: powers of two, so
 * appending a piece per token copies the whole string only log(len) times. */
static size_t room(size_t len)
{
    size_t size = 64;
    while (size < len + 1)
        size *= 2;
    return size;
}

static void append(struct k3_xtml_result *r, char **s, size_t *len, const char *piece, size_t n)
{
    if (!*s || room(*len + n) != room(*len)) {
        char *grown = realloc(*s, room(*len + n));
        if (!grown) {
            r->oom = true;
            return;
        }
        *s = grown;
    }
    memcpy(*s + *len, piece, n);
    *len += n;
    (*s)[*len] = 0;
}

static void add_call(struct k3_xtml_result *r, const char *name, const char *arguments)
{
    struct k3_xtml_call *calls = realloc(r->calls, (size_t)(r->n_calls + 1) * sizeof *calls);
    if (!calls) {
        r->oom = true;
        return;
    }
    r->calls = calls;
    struct k3_xtml_call c = {strdup(name), strdup(arguments)};
    if (!c.name || !c.arguments) {
        free(c.name);
        free(c.arguments);
        r->oom = true;
        return;
    }
    r->calls[r->n_calls++] = c;
}

void k3_xtml_collect(const struct k3_xtml_event *ev, void *ctx)
{
    struct k3_xtml_result *r = ctx;
    switch (ev->kind) {
    case K3_XTML_REASONING:
        append(r, &r->reasoning, &r->reasoning_len, ev->text, ev->len);
        break;
    case K3_XTML_CONTENT:
        append(r, &r->content, &r->content_len, ev->text, ev->len);
        break;
    case K3_XTML_TOOL_CALL:
        add_call(r, ev->name, ev->arguments);
        break;
    }
}

void k3_xtml_result_free(struct k3_xtml_result *r)
{
    for (int i = 0; i < r->n_calls; i++) {
        free(r->calls[i].name);
        free(r->calls[i].arguments);
    }
    free(r->calls);
    free(r->reasoning);
    free(r->content);
    *r = (struct k3_xtml_result){0};
}
