/* The XTML output parser, fed ids of a synthetic tokenizer: reasoning and content by
 * channel, each argument type, calls in order, markup typed as text staying text, a
 * truncated or malformed call dropped and counted, attribute unescaping, a character
 * split across tokens. */
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "engine/synth/vocab.h"
#include "engine/text/xtml_out.h"
#include "tests/util.h"

static struct k3_tokenizer *tok;

#define MAX_IDS 4096

/* The ids of markup: {O} {C} {S} {E} are <|open|>, <|close|>, <|sep|>, <|end_of_msg|>
 * as special ids; everything else is text, encoded with specials off (so "<|sep|>"
 * typed out is ordinary text, as the encoder makes it on the prompt side). */
static const char *special_at(const char *s)
{
    static const char *const codes[] = {"{O}", "{C}", "{S}", "{E}"};
    static const char *const names[] = {"<|open|>", "<|close|>", "<|sep|>", "<|end_of_msg|>"};
    for (int k = 0; k < 4; k++)
        if (!strncmp(s, codes[k], 3))
            return names[k];
    return NULL;
}

static size_t ids_of(const char *markup, int32_t *ids)
{
    size_t n = 0;
    const char *s = markup;
    while (*s) {
        if (special_at(s)) {
            ids[n++] = k3_tok_special(tok, special_at(s));
            s += 3;
            continue;
        }
        size_t len = 0;
        while (s[len] && !special_at(s + len))
            len++;
        int32_t *piece;
        size_t np;
        struct k3_err err;
        REQUIRE(!k3_tok_encode(tok, s, len, false, &piece, &np, &err), "%s", err.msg);
        REQUIRE(n + np <= MAX_IDS, "markup too long");
        memcpy(ids + n, piece, np * sizeof *piece);
        n += np;
        free(piece);
        s += len;
    }
    return n;
}

struct parsed {
    struct k3_xtml_result r;
    struct k3_xtml_end end;
};

/* markup through a parser whose prompt left thinking open (or the response), then
 * finish. */
static struct parsed parse(bool thinking, const char *markup)
{
    int32_t ids[MAX_IDS];
    size_t n = ids_of(markup, ids);
    struct k3_xtml_out *p;
    struct k3_err err;
    REQUIRE(!k3_xtml_out_new(tok, thinking, &p, &err), "%s", err.msg);
    struct parsed out = {0};
    for (size_t i = 0; i < n; i++)
        REQUIRE(!k3_xtml_out_feed(p, ids[i], k3_xtml_collect, &out.r), "feed");
    k3_xtml_out_finish(p, k3_xtml_collect, &out.r, &out.end);
    k3_xtml_out_free(p);
    REQUIRE(!out.r.oom, "collect ran out of memory");
    for (int i = 0; i < out.r.n_calls; i++) {
        json_error_t je;
        json_t *v = json_loads(out.r.calls[i].arguments,
                               JSON_ALLOW_NUL | JSON_DECODE_INT_AS_REAL, &je);
        CHECK(json_is_object(v), "arguments are a JSON object: %s", out.r.calls[i].arguments);
        json_decref(v);
    }
    return out;
}

static bool str_is(const char *got, const char *want)
{
    return got && !strcmp(got, want);
}

#define OR_NULL(s) ((s) ? (s) : "(null)")

static void test_channels(void)
{
    struct parsed a = parse(true, "Let me think.{C}think{S}{O}response{S}Hello!{C}response{S}"
                                  "{C}message{S}{E}");
    CHECK(str_is(a.r.reasoning, "Let me think."), "reasoning: %s", OR_NULL(a.r.reasoning));
    CHECK(str_is(a.r.content, "Hello!"), "content: %s", OR_NULL(a.r.content));
    CHECK(a.r.n_calls == 0 && a.end.calls == 0, "no calls: %d", a.r.n_calls);
    CHECK(a.end.message_closed && !a.end.call_dropped && !a.end.calls_malformed,
          "a well-formed message closes cleanly");
    k3_xtml_result_free(&a.r);

    struct parsed b = parse(true, "Still thinking, cut off");
    CHECK(str_is(b.r.reasoning, "Still thinking, cut off") && !b.r.content,
          "no close: all reasoning, content none (%s)", OR_NULL(b.r.content));
    CHECK(!b.end.message_closed, "a message cut off is reported unclosed");
    k3_xtml_result_free(&b.r);

    struct parsed c = parse(false, "Hi there{C}response{S}{C}message{S}{E}");
    CHECK(str_is(c.r.content, "Hi there") && !c.r.reasoning,
          "thinking off: content %s, reasoning %s", OR_NULL(c.r.content), OR_NULL(c.r.reasoning));
    k3_xtml_result_free(&c.r);

    struct parsed t = parse(false, "a{O}think{S}b{C}think{S}c{C}response{S}{C}message{S}");
    CHECK(str_is(t.r.content, "abc") && !t.r.reasoning,
          "thinking off: a think element is content too: %s, reasoning %s",
          OR_NULL(t.r.content), OR_NULL(t.r.reasoning));
    k3_xtml_result_free(&t.r);

    struct parsed d = parse(false, "x <|close|>response<|sep|> y{C}response{S}{C}message{S}");
    CHECK(str_is(d.r.content, "x <|close|>response<|sep|> y"),
          "markup typed as text stays content: %s", OR_NULL(d.r.content));
    k3_xtml_result_free(&d.r);

    struct parsed e = parse(true, "r{C}think{S}{O}response{S}{C}response{S}{C}message{S}");
    CHECK(!e.r.content, "an empty response channel gives content none: %s", OR_NULL(e.r.content));
    k3_xtml_result_free(&e.r);

    /* Text outside any channel is content ([WARP]); after the message ends it is ignored. */
    struct parsed f = parse(true, "r{C}think{S}loose{C}message{S}after{E}more");
    CHECK(str_is(f.r.content, "loose"), "text outside a channel: content %s", OR_NULL(f.r.content));
    k3_xtml_result_free(&f.r);

    /* A stray <|sep|> and an unknown tag carry no text and change nothing. */
    struct parsed g = parse(false, "a{S}b{O}bogus x=\"1\"{S}c{C}bogus{S}d{C}response{S}");
    CHECK(str_is(g.r.content, "abcd"), "stray sep and unknown tags: %s", OR_NULL(g.r.content));
    k3_xtml_result_free(&g.r);

    /* Opening response while thinking ends the reasoning (the close was left out). */
    struct parsed h = parse(true, "r{O}response{S}t{C}response{S}");
    CHECK(str_is(h.r.reasoning, "r") && str_is(h.r.content, "t"), "implicit think close: %s / %s",
          OR_NULL(h.r.reasoning), OR_NULL(h.r.content));
    k3_xtml_result_free(&h.r);
}

/* The arguments of one call with one argument (key "v") of the given type. */
static char *one_argument(const char *type_attr, const char *value)
{
    char markup[1024];
    snprintf(markup, sizeof markup,
             "{O}response{S}{C}response{S}{O}tools{S}{O}call tool=\"f\" index=\"1\"{S}"
             "{O}argument key=\"v\"%s{S}%s{C}argument{S}{C}call{S}{C}tools{S}{C}message{S}{E}",
             type_attr, value);
    struct parsed a = parse(false, markup);
    char *args = a.r.n_calls == 1 ? strdup(a.r.calls[0].arguments) : NULL;
    k3_xtml_result_free(&a.r);
    return args;
}

static void test_argument_types(void)
{
    static const struct {
        const char *type, *value, *want;
    } cases[] = {
        {" type=\"string\"", "Paris, FR", "{\"v\":\"Paris, FR\"}"},
        {" type=\"string\"", "say \"hi\"\n\\ {\"x\": 1}", "{\"v\":\"say \\\"hi\\\"\\n\\\\ {\\\"x\\\": 1}\"}"},
        {" type=\"string\"", "42", "{\"v\":\"42\"}"},
        {"", "no type given", "{\"v\":\"no type given\"}"},
        {" type=\"number\"", "42", "{\"v\":42}"},
        {" type=\"number\"", " -1.5e3\n", "{\"v\":-1.5e3}"},
        {" type=\"number\"", "0.1", "{\"v\":0.1}"},
        {" type=\"number\"", "123456789012345678901234567890", "{\"v\":123456789012345678901234567890}"},
        {" type=\"number\"", "12 apples", "{\"v\":\"12 apples\"}"},
        {" type=\"number\"", "", "{\"v\":\"\"}"},
        {" type=\"boolean\"", "true", "{\"v\":true}"},
        {" type=\"boolean\"", "yes", "{\"v\":\"yes\"}"},
        {" type=\"null\"", "null", "{\"v\":null}"},
        {" type=\"object\"", "{\"k\": \"a b\", \"n\": [1, 2]}", "{\"v\":{\"k\":\"a b\",\"n\":[1,2]}}"},
        {" type=\"object\"", "{\"k\": ", "{\"v\":\"{\\\"k\\\": \"}"},
        {" type=\"array\"", "[1, \"two\", null]", "{\"v\":[1,\"two\",null]}"},
        {" type=\"integer\"", "7", "{\"v\":7}"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *got = one_argument(cases[i].type, cases[i].value);
        CHECK(str_is(got, cases[i].want), "type%s value [%s]: got %s, want %s", cases[i].type,
              cases[i].value, OR_NULL(got), cases[i].want);
        free(got);
    }
}

static void test_calls_in_order(void)
{
    struct parsed a = parse(
        true, "plan{C}think{S}{O}response{S}Checking.{C}response{S}{O}tools{S}"
              "{O}call tool=\"get_weather\" index=\"1\"{S}"
              "{O}argument key=\"city\" type=\"string\"{S}Paris{C}argument{S}"
              "{O}argument key=\"days\" type=\"number\"{S}3{C}argument{S}{C}call{S}"
              "{O}call tool=\"get_time\" index=\"2\"{S}"
              "{O}argument key=\"tz\" type=\"string\"{S}CET{C}argument{S}{C}call{S}"
              "{C}tools{S}{C}message{S}{E}");
    REQUIRE(a.r.n_calls == 2 && a.end.calls == 2, "%d calls, want 2", a.r.n_calls);
    CHECK(str_is(a.r.calls[0].name, "get_weather") && str_is(a.r.calls[1].name, "get_time"),
          "names in order: %s, %s", a.r.calls[0].name, a.r.calls[1].name);
    CHECK(str_is(a.r.calls[0].arguments, "{\"city\":\"Paris\",\"days\":3}"),
          "first call's arguments in the order written: %s", a.r.calls[0].arguments);
    CHECK(str_is(a.r.calls[1].arguments, "{\"tz\":\"CET\"}"), "second: %s", a.r.calls[1].arguments);
    CHECK(str_is(a.r.content, "Checking."), "content beside calls: %s", OR_NULL(a.r.content));
    k3_xtml_result_free(&a.r);

    struct parsed b = parse(false, "{O}tools{S}{O}call tool=\"noargs\" index=\"1\"{S}{C}call{S}"
                                   "{C}tools{S}{C}message{S}");
    CHECK(b.r.n_calls == 1 && str_is(b.r.calls[0].arguments, "{}"), "a call without arguments: {}");
    k3_xtml_result_free(&b.r);
}

/* Call indexes as emitted, streamed. */
static void record_index(const struct k3_xtml_event *ev, void *ctx)
{
    int *seen = ctx;
    if (ev->kind == K3_XTML_TOOL_CALL)
        seen[seen[0]++ + 1] = ev->call_index;
}

static void test_call_index_streams(void)
{
    int32_t ids[MAX_IDS];
    size_t n = ids_of("{O}tools{S}{O}call tool=\"a\"{S}{C}call{S}{O}call tool=\"b\"{S}{C}call{S}"
                      "{C}tools{S}", ids);
    struct k3_xtml_out *p;
    struct k3_err err;
    REQUIRE(!k3_xtml_out_new(tok, false, &p, &err), "%s", err.msg);
    int seen[8] = {0};
    size_t first_at = 0;
    for (size_t i = 0; i < n; i++) {
        k3_xtml_out_feed(p, ids[i], record_index, seen);
        if (seen[0] == 1 && !first_at)
            first_at = i;
    }
    struct k3_xtml_end end;
    k3_xtml_out_finish(p, record_index, seen, &end);
    k3_xtml_out_free(p);
    CHECK(seen[0] == 2 && seen[1] == 0 && seen[2] == 1, "indexes 0, 1: got %d calls", seen[0]);
    /* The first call comes out at its own <|close|>call<|sep|>, before the second opens. */
    CHECK(first_at > 0 && ids[first_at] == k3_tok_special(tok, "<|sep|>") &&
              ids[first_at + 1] == k3_tok_special(tok, "<|open|>"),
          "first call emitted at its close (id %zu)", first_at);
}

/* Assistant turns as the reference encoder renders them (shared/chat/golden.json, cases
 * assistant_with_reasoning, tool_call_all_types, tool_calls_parallel,
 * tool_call_broken_json), read back as the model would write them after the
 * generation prompt's <|open|>think<|sep|>. */
static void test_encoder_goldens(void)
{
    struct parsed a = parse(true, "Two plus two is four.{C}think{S}{O}response{S}4{C}response{S}"
                                  "{C}message{S}{E}");
    CHECK(str_is(a.r.reasoning, "Two plus two is four.") && str_is(a.r.content, "4"),
          "assistant_with_reasoning: %s / %s", OR_NULL(a.r.reasoning), OR_NULL(a.r.content));
    k3_xtml_result_free(&a.r);

    struct parsed b = parse(
        true, "{C}think{S}{O}response{S}{C}response{S}{O}tools{S}"
              "{O}call tool=\"everything\" index=\"1\"{S}"
              "{O}argument key=\"s\" type=\"string\"{S}text{C}argument{S}"
              "{O}argument key=\"n\" type=\"number\"{S}42{C}argument{S}"
              "{O}argument key=\"f\" type=\"number\"{S}1.5{C}argument{S}"
              "{O}argument key=\"b\" type=\"boolean\"{S}true{C}argument{S}"
              "{O}argument key=\"b2\" type=\"boolean\"{S}false{C}argument{S}"
              "{O}argument key=\"nul\" type=\"null\"{S}null{C}argument{S}"
              "{O}argument key=\"obj\" type=\"object\"{S}{\"k\": \"v\"}{C}argument{S}"
              "{O}argument key=\"arr\" type=\"array\"{S}[1, \"two\", null]{C}argument{S}"
              "{C}call{S}{C}tools{S}{C}message{S}{E}");
    CHECK(b.r.n_calls == 1 && str_is(b.r.calls[0].name, "everything") &&
              str_is(b.r.calls[0].arguments,
                     "{\"s\":\"text\",\"n\":42,\"f\":1.5,\"b\":true,\"b2\":false,"
                     "\"nul\":null,\"obj\":{\"k\":\"v\"},\"arr\":[1,\"two\",null]}"),
          "tool_call_all_types: the client's arguments, compacted: %s",
          b.r.n_calls ? b.r.calls[0].arguments : "(no call)");
    CHECK(!b.r.content && !b.r.reasoning && b.end.message_closed,
          "empty think and response channels give none");
    k3_xtml_result_free(&b.r);

    struct parsed c = parse(
        true, "{C}think{S}{O}response{S}{C}response{S}{O}tools{S}"
              "{O}call tool=\"get_weather\" index=\"1\"{S}{O}argument key=\"city\" "
              "type=\"string\"{S}Paris{C}argument{S}{C}call{S}"
              "{O}call tool=\"get_weather\" index=\"2\"{S}{O}argument key=\"city\" "
              "type=\"string\"{S}Rome{C}argument{S}{C}call{S}{C}tools{S}{C}message{S}{E}");
    CHECK(c.r.n_calls == 2 && str_is(c.r.calls[0].arguments, "{\"city\":\"Paris\"}") &&
              str_is(c.r.calls[1].arguments, "{\"city\":\"Rome\"}"),
          "tool_calls_parallel: Paris then Rome");
    k3_xtml_result_free(&c.r);

    /* The encoder's form for arguments that were not JSON: no object to give, dropped. */
    struct parsed d = parse(
        true, "{C}think{S}{O}response{S}{C}response{S}{O}tools{S}"
              "{O}call tool=\"f\" index=\"1\"{S}{O}json type=\"object\"{S}{\"city\": Paris"
              "{C}json{S}{C}call{S}{C}tools{S}{C}message{S}{E}");
    CHECK(d.r.n_calls == 0 && d.end.calls_malformed == 1, "tool_call_broken_json: dropped");
    k3_xtml_result_free(&d.r);
}

static void test_markup_inside_values(void)
{
    struct parsed a = parse(false, "{O}tools{S}{O}call tool=\"echo\"{S}"
                                   "{O}argument key=\"s\" type=\"string\"{S}"
                                   "a<|close|>argument<|sep|>b<|close|>call<|sep|>c"
                                   "{C}argument{S}{C}call{S}{C}tools{S}{C}message{S}");
    REQUIRE(a.r.n_calls == 1, "%d calls, want 1", a.r.n_calls);
    CHECK(str_is(a.r.calls[0].arguments,
                 "{\"s\":\"a<|close|>argument<|sep|>b<|close|>call<|sep|>c\"}"),
          "markup typed in a string stays in it: %s", a.r.calls[0].arguments);
    k3_xtml_result_free(&a.r);
}

static void test_dropped_calls(void)
{
    struct parsed a = parse(false, "ok{C}response{S}{O}tools{S}{O}call tool=\"f\"{S}"
                                   "{O}argument key=\"x\" type=\"string\"{S}partial");
    CHECK(a.r.n_calls == 0 && a.end.calls == 0, "a truncated call is not emitted");
    CHECK(a.end.call_dropped && !a.end.message_closed, "finish reports it dropped");
    CHECK(str_is(a.r.content, "ok") && !a.end.calls_malformed, "content kept, nothing malformed");
    k3_xtml_result_free(&a.r);

    struct parsed b = parse(false, "{O}tools{S}{O}call tool=\"f\"{S}{C}message{S}{E}");
    CHECK(b.r.n_calls == 0 && b.end.call_dropped && b.end.message_closed,
          "a call open at the message's close is dropped");
    k3_xtml_result_free(&b.r);

    struct parsed t = parse(false, "{O}tools{S}{O}call tool=\"f\"{S}{C}tools{S}after{C}message{S}");
    CHECK(t.r.n_calls == 0 && t.end.calls_malformed == 1 && !t.end.call_dropped,
          "a call open at the tools block's close is malformed");
    CHECK(str_is(t.r.content, "after"), "the tools block is closed: %s", OR_NULL(t.r.content));
    k3_xtml_result_free(&t.r);

    /* Each malformed call is dropped and counted; the well-formed one after still comes
     * out, numbered 0. */
    struct parsed c = parse(false, "{O}tools{S}"
                                   /* no tool */
                                   "{O}call index=\"1\"{S}{C}call{S}"
                                   /* no key */
                                   "{O}call tool=\"g\"{S}{O}argument type=\"string\"{S}v"
                                   "{C}argument{S}{C}call{S}"
                                   /* an argument left open */
                                   "{O}call tool=\"g\"{S}{O}argument key=\"k\"{S}v{C}call{S}"
                                   /* superseded by the next opener */
                                   "{O}call tool=\"g\"{S}"
                                   /* a json body that is not an object */
                                   "{O}call tool=\"g\"{S}{O}json type=\"object\"{S}[1]{C}json{S}"
                                   "{C}call{S}"
                                   "{O}call tool=\"good\"{S}{O}argument key=\"k\"{S}v"
                                   "{C}argument{S}{C}call{S}{C}tools{S}{C}message{S}{E}");
    CHECK(c.end.calls_malformed == 5, "%d malformed calls, want 5", c.end.calls_malformed);
    CHECK(c.r.n_calls == 1 && str_is(c.r.calls[0].name, "good") && c.end.calls == 1,
          "the well-formed call survives");
    CHECK(!c.end.call_dropped, "no call was cut off");
    k3_xtml_result_free(&c.r);
}

static void test_json_element(void)
{
    struct parsed a = parse(false, "{O}tools{S}{O}call tool=\"f\"{S}{O}json type=\"object\"{S}"
                                   "{\"a\": 1, \"b\": [true, \"x y\"]}{C}json{S}{C}call{S}"
                                   "{C}tools{S}");
    CHECK(a.r.n_calls == 1 && str_is(a.r.calls[0].arguments, "{\"a\":1,\"b\":[true,\"x y\"]}"),
          "a json body that is an object is the arguments: %s",
          a.r.n_calls ? a.r.calls[0].arguments : "(no call)");
    k3_xtml_result_free(&a.r);

    struct parsed b = parse(false, "{O}tools{S}{O}call tool=\"f\"{S}{O}json type=\"object\"{S}"
                                   "{broken{C}json{S}{C}call{S}{C}tools{S}");
    CHECK(b.r.n_calls == 0 && b.end.calls_malformed == 1, "broken json: the call is dropped");
    k3_xtml_result_free(&b.r);
}

static void test_attribute_unescaping(void)
{
    struct parsed a = parse(false, "{O}tools{S}{O}call tool=\"say&quot;hi&amp;quot;\"{S}"
                                   "{O}argument key=\"a&amp;b&quot;\" type=\"string\"{S}v"
                                   "{C}argument{S}{C}call{S}{C}tools{S}");
    REQUIRE(a.r.n_calls == 1, "%d calls", a.r.n_calls);
    CHECK(str_is(a.r.calls[0].name, "say\"hi&quot;"), "&quot; then &amp;: %s", a.r.calls[0].name);
    CHECK(str_is(a.r.calls[0].arguments, "{\"a&b\\\"\":\"v\"}"), "key unescaped, then quoted: %s",
          a.r.calls[0].arguments);
    k3_xtml_result_free(&a.r);
}

/* The id of the single-byte token b. */
static int32_t byte_id(uint8_t b)
{
    for (int32_t id = 0; id < k3_tok_vocab_size(tok); id++) {
        size_t len;
        const uint8_t *bytes = k3_tok_bytes(tok, id, &len);
        if (bytes && len == 1 && bytes[0] == b && !k3_tok_is_special(tok, id))
            return id;
    }
    REQUIRE(0, "no token for byte 0x%02x", b);
    return -1;
}

struct pieces {
    int n;
    char text[8][16];
    enum k3_xtml_event_kind kind[8];
};

static void record_piece(const struct k3_xtml_event *ev, void *ctx)
{
    struct pieces *p = ctx;
    if (ev->kind != K3_XTML_TOOL_CALL && p->n < 8 && ev->len < 16) {
        memcpy(p->text[p->n], ev->text, ev->len);
        p->text[p->n][ev->len] = 0;
        p->kind[p->n++] = ev->kind;
    }
}

static void test_utf8_split(void)
{
    struct k3_xtml_out *p;
    struct k3_err err;
    REQUIRE(!k3_xtml_out_new(tok, false, &p, &err), "%s", err.msg);
    struct pieces got = {0};
    k3_xtml_out_feed(p, byte_id(0xC3), record_piece, &got);
    CHECK(got.n == 0, "the lead byte of é is held back (%d pieces)", got.n);
    k3_xtml_out_feed(p, byte_id(0xA9), record_piece, &got);
    CHECK(got.n == 1 && !strcmp(got.text[0], "\xC3\xA9") && got.kind[0] == K3_XTML_CONTENT,
          "é comes out whole when its second byte arrives");
    /* A character cut by markup comes out as U+FFFD in the channel it began in. */
    k3_xtml_out_feed(p, byte_id(0xE4), record_piece, &got);
    k3_xtml_out_feed(p, byte_id(0xB8), record_piece, &got);
    k3_xtml_out_feed(p, k3_tok_special(tok, "<|close|>"), record_piece, &got);
    CHECK(got.n == 2 && !strcmp(got.text[1], "\xEF\xBF\xBD"), "a cut character is U+FFFD");
    struct k3_xtml_end end;
    k3_xtml_out_finish(p, record_piece, &got, &end);
    k3_xtml_out_free(p);

    /* Bytes that never form a character are replaced, not passed on. */
    REQUIRE(!k3_xtml_out_new(tok, true, &p, &err), "%s", err.msg);
    struct pieces bad = {0};
    k3_xtml_out_feed(p, byte_id(0xFF), record_piece, &bad);
    CHECK(bad.n == 1 && !strcmp(bad.text[0], "\xEF\xBF\xBD") && bad.kind[0] == K3_XTML_REASONING,
          "0xFF in reasoning is U+FFFD");
    k3_xtml_out_finish(p, record_piece, &bad, &end);
    k3_xtml_out_free(p);
}

static void test_any_id(void)
{
    struct k3_xtml_out *p;
    struct k3_err err;
    REQUIRE(!k3_xtml_out_new(tok, false, &p, &err), "%s", err.msg);
    struct k3_xtml_result r = {0};
    int32_t odd[] = {-1, k3_tok_vocab_size(tok), INT32_MAX, byte_id('x')};
    for (size_t i = 0; i < 4; i++)
        CHECK(!k3_xtml_out_feed(p, odd[i], k3_xtml_collect, &r), "id %d is accepted", odd[i]);
    struct k3_xtml_end end;
    k3_xtml_out_finish(p, k3_xtml_collect, &r, &end);
    CHECK(str_is(r.content, "x"), "ids that are no token are skipped: %s", OR_NULL(r.content));
    k3_xtml_result_free(&r);
    k3_xtml_out_free(p);
}

static void test_needs_specials(const char *root)
{
    /* A vocabulary without K3's specials: the error names the missing one. */
    char dir[4200], path[4300];
    snprintf(dir, sizeof dir, "%s/nospecials", root);
    struct k3_err err = {{0}};
    REQUIRE(!k3_tok_synthesize(dir, 2048, 2032, &err), "%s", err.msg);
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    FILE *f = fopen(path, "wb");
    REQUIRE(f, "%s", path);
    fputs("{\"added_tokens_decoder\": {\"2040\": {\"content\": \"<|open|>\"}}}", f);
    fclose(f);
    struct k3_tokenizer *t;
    REQUIRE(!k3_tok_load(&t, dir, 2048, NULL, false, &err), "%s", err.msg);
    struct k3_xtml_out *p;
    CHECK(k3_xtml_out_new(t, true, &p, &err) == -1 && strstr(err.msg, "<|close|>"),
          "missing special named: %s", err.msg);
    k3_tok_free(t);
}

int main(void)
{
    const char *root = test_tmp_dir("test_xtml_out");
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/tiny", root);
    struct k3_err err = {{0}};
    REQUIRE(!k3_tok_synthesize(dir, 2048, 2032, &err), "%s", err.msg);
    REQUIRE(!k3_tok_load(&tok, dir, 2048, NULL, false, &err), "%s", err.msg);
    test_channels();
    test_argument_types();
    test_calls_in_order();
    test_call_index_streams();
    test_encoder_goldens();
    test_markup_inside_values();
    test_dropped_calls();
    test_json_element();
    test_attribute_unescaping();
    test_utf8_split();
    test_any_id();
    k3_tok_free(tok);
    test_needs_specials(root);
    return check_result();
}
