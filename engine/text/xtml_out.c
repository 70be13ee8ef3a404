/* K3's XTML output parsed by token id (xtml_out.h): the four special ids move a small
 * state machine (where in the message the text goes); every other id's bytes go,
 * through one UTF-8 stream, to the reasoning, the content, a tag header, an argument
 * value or a json body. */
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "engine/text/xtml_out.h"

/* A growable byte string, kept NUL-terminated. */
struct buf {
    char *p;
    size_t len, cap;
};

/* Where in the message the next text belongs. */
enum where {
    W_TOP,      /* in the message, outside any channel: content */
    W_THINK,    /* reasoning */
    W_RESPONSE, /* content */
    W_TOOLS,    /* between calls: dropped */
    W_CALL,     /* in a call, between its elements: dropped */
    W_ARG,      /* an argument's value */
    W_JSON,     /* a json element's body */
    W_DONE,     /* after <|close|>message<|sep|> or <|end_of_msg|>: ignored */
};

enum tag_kind {
    TAG_OTHER, TAG_MESSAGE, TAG_THINK, TAG_RESPONSE, TAG_TOOLS, TAG_CALL, TAG_ARGUMENT, TAG_JSON
};

enum header { H_NONE, H_OPEN, H_CLOSE }; /* no tag header, or the one that began it */

struct k3_xtml_out {
    const struct k3_tokenizer *tok;
    int32_t open, close, sep, eom; /* the special ids */
    bool thinking;                 /* reasoning is on: think elements are reasoning */
    enum where where;
    enum header header;            /* reading a tag header up to <|sep|> */
    struct k3_utf8_stream utf8;    /* the current destination's text, held-back bytes */
    struct buf scratch;            /* one token's bytes after the UTF-8 stream */
    struct buf tag;                /* the tag header being read */
    struct buf attr_value;         /* an attribute's value, unescaped */

    /* The call being read. */
    struct buf name;               /* its tool attribute */
    struct buf args;               /* "{" then "key":value,... for the arguments read so far */
    int n_args;
    bool value_is_string;          /* the current argument's type */
    struct buf value;              /* the current argument's text */
    bool has_json;                 /* a json element came */
    struct buf json;               /* its text */
    bool call_bad;                 /* malformed: dropped at its close */

    int calls, calls_malformed;
    bool call_dropped, message_closed;
    bool oom;
};

/* ---- byte strings ---- */

/* Room for size bytes in b; false (and p->oom) when there is none. */
static bool reserve(struct k3_xtml_out *p, struct buf *b, size_t size)
{
    if (size <= b->cap)
        return true;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < size)
        cap *= 2;
    char *q = realloc(b->p, cap);
    if (!q) {
        p->oom = true;
        return false;
    }
    b->p = q;
    b->cap = cap;
    return true;
}

static void add(struct k3_xtml_out *p, struct buf *b, const void *s, size_t n)
{
    if (!reserve(p, b, b->len + n + 1))
        return;
    if (n)
        memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
}

static void add_str(struct k3_xtml_out *p, struct buf *b, const char *s)
{
    add(p, b, s, strlen(s));
}

static void clear(struct k3_xtml_out *p, struct buf *b)
{
    b->len = 0;
    add(p, b, "", 0);
}

static bool equals(const struct buf *b, const char *s)
{
    return b->len == strlen(s) && !memcmp(b->p, s, b->len);
}

/* s[0..n) (valid UTF-8) as a JSON string. */
static void add_quoted(struct k3_xtml_out *p, struct buf *b, const char *s, size_t n)
{
    add(p, b, "\"", 1);
    size_t run = 0; /* start of the bytes not yet copied */
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c != '"' && c != '\\')
            continue;
        add(p, b, s + run, i - run);
        run = i + 1;
        char esc[8];
        const char *short_esc = c == '"' ? "\\\"" : c == '\\' ? "\\\\" : c == '\n' ? "\\n"
                              : c == '\t' ? "\\t" : c == '\r' ? "\\r" : NULL;
        if (!short_esc)
            snprintf(esc, sizeof esc, "\\u%04x", c);
        add_str(p, b, short_esc ? short_esc : esc);
    }
    add(p, b, s + run, n - run);
    add(p, b, "\"", 1);
}

/* s[0..n), valid JSON, without the whitespace outside its strings: numbers and strings
 * stay as written (re-serializing would round 0.1 to 0.10000000000000001). */
static void add_compact(struct k3_xtml_out *p, struct buf *b, const char *s, size_t n)
{
    bool in_string = false;
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (in_string) {
            if (c == '\\')
                i++;
            else if (c == '"')
                in_string = false;
        } else if (c == '"') {
            in_string = true;
        } else if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
            add(p, b, s + run, i - run);
            run = i + 1;
        }
    }
    add(p, b, s + run, n - run);
}

/* Whether s[0..n) is JSON: an object (object_only) or any value.  Integers too large
 * for jansson's json_int_t are read as reals, so they count (Python's json does too). */
static bool parses(const char *s, size_t n, bool object_only)
{
    json_error_t e;
    size_t flags = JSON_ALLOW_NUL | JSON_DECODE_INT_AS_REAL | (object_only ? 0 : JSON_DECODE_ANY);
    json_t *v = json_loadb(s, n, flags, &e);
    bool ok = v && (!object_only || json_is_object(v));
    json_decref(v);
    return ok;
}

/* ---- tag headers: `name key="value" ...` ---- */

static bool is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

static bool is_word(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

static enum tag_kind tag_kind(const char *s, size_t n)
{
    static const struct {
        const char *name;
        enum tag_kind kind;
    } kinds[] = {{"message", TAG_MESSAGE}, {"think", TAG_THINK},       {"response", TAG_RESPONSE},
                 {"tools", TAG_TOOLS},     {"call", TAG_CALL},         {"argument", TAG_ARGUMENT},
                 {"json", TAG_JSON}};
    size_t i = 0;
    while (i < n && is_space(s[i]))
        i++;
    size_t start = i;
    while (i < n && !is_space(s[i]))
        i++;
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++)
        if (strlen(kinds[k].name) == i - start && !memcmp(kinds[k].name, s + start, i - start))
            return kinds[k].kind;
    return TAG_OTHER;
}

/* The value of attribute key in the tag header, unescaped (&quot; then &amp;, which one
 * left-to-right pass does alike), into out; false when absent (or out of memory).
 * Pairs are found as vLLM's findall of (\w+)="([^"]*)" finds them; the last of a
 * repeated key wins, as in the dict vLLM builds from them. */
static bool attr(struct k3_xtml_out *p, const char *key, struct buf *out)
{
    const char *s = p->tag.p;
    size_t n = p->tag.len, i = 0, klen = strlen(key);
    const char *val = NULL;
    size_t vlen = 0;
    while (i < n) {
        size_t k = i;
        while (k < n && is_word(s[k]))
            k++;
        const char *q = k > i && k + 1 < n && s[k] == '=' && s[k + 1] == '"'
                            ? memchr(s + k + 2, '"', n - k - 2) : NULL;
        if (!q) {
            i = k > i ? k : i + 1; /* every later start inside this word ends at k too */
            continue;
        }
        if (k - i == klen && !memcmp(s + i, key, klen)) {
            val = s + k + 2;
            vlen = (size_t)(q - val);
        }
        i = (size_t)(q - s) + 1;
    }
    if (!val)
        return false;
    clear(p, out);
    for (size_t j = 0; j < vlen; j++) {
        if (vlen - j >= 6 && !memcmp(val + j, "&quot;", 6)) {
            add(p, out, "\"", 1);
            j += 5;
        } else if (vlen - j >= 5 && !memcmp(val + j, "&amp;", 5)) {
            add(p, out, "&", 1);
            j += 4;
        } else {
            add(p, out, val + j, 1);
        }
    }
    return !p->oom;
}

/* ---- calls ---- */

static bool in_call(const struct k3_xtml_out *p)
{
    return p->where == W_CALL || p->where == W_ARG || p->where == W_JSON;
}

/* The open call ends without being emitted: cut off by the end of the message, or
 * malformed (another opener came before its close). */
static void drop_call(struct k3_xtml_out *p, bool cut_off)
{
    if (cut_off)
        p->call_dropped = true;
    else
        p->calls_malformed++;
}

static void open_call(struct k3_xtml_out *p)
{
    if (in_call(p))
        drop_call(p, false);
    p->where = W_CALL;
    p->n_args = 0;
    p->has_json = false;
    clear(p, &p->args);
    add(p, &p->args, "{", 1);
    p->call_bad = !attr(p, "tool", &p->name) || !p->name.len || memchr(p->name.p, 0, p->name.len);
}

static void open_argument(struct k3_xtml_out *p)
{
    if (!in_call(p))
        return;
    if (p->where != W_CALL || p->has_json)
        p->call_bad = true;
    p->where = W_ARG;
    clear(p, &p->value);
    /* The key goes straight into the arguments; one with NUL is refused (jansson takes
     * no NUL in an object key). */
    struct buf *v = &p->attr_value;
    if (!attr(p, "key", v) || memchr(v->p, 0, v->len)) {
        p->call_bad = true;
        return;
    }
    if (p->n_args++)
        add(p, &p->args, ",", 1);
    add_quoted(p, &p->args, v->p, v->len);
    add(p, &p->args, ":", 1);
    p->value_is_string = !attr(p, "type", v) || equals(v, "string");
}

static void close_argument(struct k3_xtml_out *p)
{
    if (p->where != W_ARG) {
        p->call_bad |= in_call(p);
        return;
    }
    p->where = W_CALL;
    if (p->call_bad)
        return;
    if (!p->value_is_string && parses(p->value.p, p->value.len, false))
        add_compact(p, &p->args, p->value.p, p->value.len);
    else
        add_quoted(p, &p->args, p->value.p, p->value.len);
}

static void open_json(struct k3_xtml_out *p)
{
    if (!in_call(p))
        return;
    if (p->where != W_CALL || p->n_args || p->has_json)
        p->call_bad = true;
    p->where = W_JSON;
    p->has_json = true;
    clear(p, &p->json);
}

static void close_json(struct k3_xtml_out *p)
{
    if (p->where != W_JSON) {
        p->call_bad |= in_call(p);
        return;
    }
    p->where = W_CALL;
}

/* <|close|>call<|sep|>: the call is emitted whole, or dropped as malformed. */
static void close_call(struct k3_xtml_out *p, k3_xtml_emit_fn *emit, void *ctx)
{
    if (!in_call(p))
        return;
    bool ok = p->where == W_CALL && !p->call_bad;
    p->where = W_TOOLS;
    if (ok && p->has_json) {
        ok = parses(p->json.p, p->json.len, true);
        clear(p, &p->args);
        add_compact(p, &p->args, p->json.p, p->json.len);
    } else {
        add(p, &p->args, "}", 1);
    }
    if (p->oom)
        return;
    if (!ok) {
        p->calls_malformed++;
        return;
    }
    struct k3_xtml_event ev = {.kind = K3_XTML_TOOL_CALL, .call_index = p->calls++,
                               .name = p->name.p, .arguments = p->args.p};
    emit(&ev, ctx);
}

/* ---- channels and the message ---- */

static void open_channel(struct k3_xtml_out *p, enum where channel)
{
    if (in_call(p))
        drop_call(p, false);
    p->where = channel;
}

static void close_channel(struct k3_xtml_out *p, enum where channel)
{
    if (channel == W_TOOLS && in_call(p)) {
        drop_call(p, false);
        p->where = W_TOOLS;
    }
    if (p->where == channel)
        p->where = W_TOP;
}

static void end_message(struct k3_xtml_out *p, bool closed)
{
    if (in_call(p))
        drop_call(p, true);
    p->where = W_DONE;
    p->message_closed |= closed;
}

/* A tag header is complete (at its <|sep|>): act on it. */
static void tag(struct k3_xtml_out *p, bool opening, k3_xtml_emit_fn *emit, void *ctx)
{
    switch (tag_kind(p->tag.p, p->tag.len)) {
    case TAG_THINK: /* with thinking off, all text is content (as in vLLM) */
        opening ? open_channel(p, p->thinking ? W_THINK : W_RESPONSE) : close_channel(p, W_THINK);
        break;
    case TAG_RESPONSE:
        opening ? open_channel(p, W_RESPONSE) : close_channel(p, W_RESPONSE);
        break;
    case TAG_TOOLS:
        opening ? open_channel(p, W_TOOLS) : close_channel(p, W_TOOLS);
        break;
    case TAG_CALL:
        opening ? open_call(p) : close_call(p, emit, ctx);
        break;
    case TAG_ARGUMENT:
        opening ? open_argument(p) : close_argument(p);
        break;
    case TAG_JSON:
        opening ? open_json(p) : close_json(p);
        break;
    case TAG_MESSAGE:
        if (!opening)
            end_message(p, true);
        break;
    case TAG_OTHER:
        break;
    }
}

/* ---- text ---- */

/* Text s[0..n) (valid UTF-8) to wherever the parser stands. */
static void deliver(struct k3_xtml_out *p, const char *s, size_t n, k3_xtml_emit_fn *emit,
                    void *ctx)
{
    if (!n)
        return;
    if (p->header != H_NONE) {
        add(p, &p->tag, s, n);
        return;
    }
    switch (p->where) {
    case W_THINK:
    case W_TOP:
    case W_RESPONSE: {
        struct k3_xtml_event ev = {.text = s, .len = n, .call_index = -1,
                                   .kind = p->where == W_THINK ? K3_XTML_REASONING
                                                               : K3_XTML_CONTENT};
        emit(&ev, ctx);
        break;
    }
    case W_ARG:
        add(p, &p->value, s, n);
        break;
    case W_JSON:
        add(p, &p->json, s, n);
        break;
    case W_TOOLS:
    case W_CALL:
    case W_DONE:
        break;
    }
}

static void text(struct k3_xtml_out *p, const uint8_t *bytes, size_t n, k3_xtml_emit_fn *emit,
                 void *ctx)
{
    if (!reserve(p, &p->scratch, K3_UTF8_OUT_MAX(n)))
        return;
    deliver(p, p->scratch.p, k3_utf8_push(&p->utf8, bytes, n, p->scratch.p), emit, ctx);
}

/* The held-back bytes of a character cut by a special id or the end (one U+FFFD). */
static void flush_text(struct k3_xtml_out *p, k3_xtml_emit_fn *emit, void *ctx)
{
    char out[4];
    deliver(p, out, k3_utf8_flush(&p->utf8, out), emit, ctx);
}

static void special(struct k3_xtml_out *p, int32_t id, k3_xtml_emit_fn *emit, void *ctx)
{
    if (id == p->eom) {
        p->header = H_NONE;
        end_message(p, false);
    } else if (id == p->sep) {
        if (p->header != H_NONE) { /* a stray <|sep|> is nothing */
            bool opening = p->header == H_OPEN;
            p->header = H_NONE;
            tag(p, opening, emit, ctx);
        }
    } else { /* <|open|> or <|close|>: a header still being read was no tag */
        p->header = id == p->open ? H_OPEN : H_CLOSE;
        clear(p, &p->tag);
    }
}

/* ---- the interface ---- */

int k3_xtml_out_new(const struct k3_tokenizer *tok, bool thinking, struct k3_xtml_out **out,
                    struct k3_err *err)
{
    static const char *const names[4] = {"<|open|>", "<|close|>", "<|sep|>", "<|end_of_msg|>"};
    int32_t ids[4];
    for (int i = 0; i < 4; i++)
        if ((ids[i] = k3_tok_special(tok, names[i])) < 0)
            return k3_errf(err, "XTML output parser: the tokenizer has no special token %s",
                           names[i]);
    struct k3_xtml_out *p = calloc(1, sizeof *p);
    if (!p)
        return k3_errf(err, "XTML output parser: out of memory");
    *p = (struct k3_xtml_out){.tok = tok, .open = ids[0], .close = ids[1], .sep = ids[2],
                              .eom = ids[3], .thinking = thinking,
                              .where = thinking ? W_THINK : W_RESPONSE};
    *out = p;
    return 0;
}

int k3_xtml_out_feed(struct k3_xtml_out *p, int32_t id, k3_xtml_emit_fn *emit, void *ctx)
{
    if (p->oom)
        return -1;
    if (p->where == W_DONE)
        return 0;
    if (id == p->open || id == p->close || id == p->sep || id == p->eom) {
        flush_text(p, emit, ctx);
        special(p, id, emit, ctx);
    } else {
        size_t n;
        const uint8_t *bytes = k3_tok_bytes(p->tok, id, &n);
        if (bytes && n)
            text(p, bytes, n, emit, ctx);
    }
    return p->oom ? -1 : 0;
}

void k3_xtml_out_finish(struct k3_xtml_out *p, k3_xtml_emit_fn *emit, void *ctx,
                        struct k3_xtml_end *end)
{
    if (!p->oom && p->where != W_DONE) {
        flush_text(p, emit, ctx);
        p->header = H_NONE;
        end_message(p, false);
    }
    *end = (struct k3_xtml_end){.call_dropped = p->call_dropped,
                                .message_closed = p->message_closed,
                                .calls = p->calls,
                                .calls_malformed = p->calls_malformed};
}

void k3_xtml_out_free(struct k3_xtml_out *p)
{
    if (!p)
        return;
    struct buf *bufs[] = {&p->scratch, &p->tag, &p->attr_value, &p->name,
                          &p->args,    &p->value, &p->json};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        free(bufs[i]->p);
    free(p);
}
