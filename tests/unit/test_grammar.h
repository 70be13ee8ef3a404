/* What the grammar tests share: a synthetic vocabulary (k3-tiny's, 2048 ids), generations
 * driven by random logits through the masked sampler, the mask checked against every
 * token one at a time, a reader of the XTML calls a generation wrote, and a small JSON
 * Schema validator (written apart from the compiler, so that the two can disagree). */
#ifndef K3_TEST_GRAMMAR_H
#define K3_TEST_GRAMMAR_H

#include <stdbool.h>
#include <string.h>

#include <jansson.h>

#include "engine/base/rng.h"
#include "engine/forward/sampler.h"
#include "engine/grammar/grammar.h"
#include "engine/synth/vocab.h"
#include "engine/text/tokenizer.h"
#include "tests/util.h"

enum { SYM_OPEN = 256, SYM_CLOSE, SYM_SEP, SYM_EOM, GEN_MAX = 6000 };

struct vocab {
    struct k3_tokenizer *tok;
    struct k3_vocab_trie *trie;
    int n, words;
    int32_t special[4];
    float *bias; /* [n] added to the random logits: ends strings and channels sooner */
};

static inline json_t *json_of(const char *text)
{
    json_error_t je;
    json_t *j = json_loads(text, JSON_DECODE_ANY, &je);
    REQUIRE(j, "test JSON does not parse: %s: %s", je.text, text);
    return j;
}

static inline bool has_byte(const uint8_t *p, size_t n, const char *set)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] && strchr(set, p[i]))
            return true;
    return false;
}

static inline void vocab_open(struct vocab *v)
{
    const char *dir = test_tmp_dir("grammar");
    struct k3_err e = {{0}};
    REQUIRE(!k3_tok_synthesize(dir, 2048, 2032, &e), "synthesize: %s", e.msg);
    REQUIRE(!k3_tok_load(&v->tok, dir, 0, NULL, false, &e), "load: %s", e.msg);
    REQUIRE(!k3_vocab_trie_build(v->tok, &v->trie, &e), "trie: %s", e.msg);
    v->n = k3_tok_vocab_size(v->tok);
    v->words = (v->n + 31) / 32;
    static const char *const names[4] = {"<|open|>", "<|close|>", "<|sep|>", "<|end_of_msg|>"};
    for (int i = 0; i < 4; i++)
        v->special[i] = k3_tok_special(v->tok, names[i]);
    v->bias = calloc((size_t)v->n, sizeof *v->bias);
    for (int id = 0; id < v->n; id++) {
        size_t len;
        const uint8_t *p = k3_tok_bytes(v->tok, id, &len);
        if (k3_tok_is_special(v->tok, id))
            v->bias[id] = 6;
        else if (p && has_byte(p, len, "\"]},"))
            v->bias[id] = 4;
    }
}

static inline void vocab_close(struct vocab *v)
{
    k3_vocab_trie_free(v->trie);
    k3_tok_free(v->tok);
    free(v->bias);
}

/* A generation: the ids, and the same as symbols (bytes, and the four structural ones). */
struct gen {
    int32_t ids[GEN_MAX];
    int n;
    uint16_t *sym;
    size_t n_sym;
    bool done;
    int mask_checks; /* steps whose mask was compared with every token's allows() */
};

/* The mask against each token tried alone; returns the number of tokens allowed. */
static inline int check_mask(struct vocab *v, struct k3_matcher *m, const uint32_t *bits,
                             const char *what, int step)
{
    int allowed = 0, wrong = 0;
    for (int id = 0; id < v->n; id++) {
        bool in_mask = bits[id >> 5] >> (id & 31) & 1, ok = k3_matcher_allows(m, id);
        allowed += ok;
        if (in_mask != ok && wrong++ < 3)
            CHECK(0, "%s step %d: token %d is %s by the mask but %s alone", what, step, id,
                  in_mask ? "allowed" : "refused", ok ? "allowed" : "refused");
    }
    return allowed;
}

static inline void gen_symbols(struct vocab *v, struct gen *g)
{
    g->n_sym = 0;
    g->sym = realloc(g->sym, sizeof *g->sym * (size_t)(g->n * 64 + 1));
    for (int i = 0; i < g->n; i++) {
        int s = -1;
        for (int k = 0; k < 4; k++)
            if (g->ids[i] == v->special[k])
                s = SYM_OPEN + k;
        if (s >= 0) {
            g->sym[g->n_sym++] = (uint16_t)s;
            continue;
        }
        size_t len;
        const uint8_t *p = k3_tok_bytes(v->tok, g->ids[i], &len);
        REQUIRE(p && len <= 64, "token %d has no bytes", g->ids[i]);
        for (size_t j = 0; j < len; j++)
            g->sym[g->n_sym++] = p[j];
    }
}

/* Samples up to GEN_MAX tokens under g's mask from random logits (seeded); every
 * mask_every-th step (0: never) the mask is checked against allows(). */
static inline void generate(struct vocab *v, const struct k3_grammar *gr, uint64_t seed,
                            float temp, int mask_every, struct gen *out, const char *what)
{
    struct k3_matcher *m;
    struct k3_err e = {{0}};
    REQUIRE(!k3_matcher_new(gr, v->tok, &m, &e), "%s", e.msg);
    struct k3_sampler s;
    REQUIRE(!k3_sampler_init(&s, v->n, temp, 0, 1, seed, &e), "%s", e.msg);
    struct k3_rng r;
    k3_rng_seed(&r, seed * 7919 + 1);
    float *logits = malloc(sizeof *logits * (size_t)v->n);
    uint32_t *bits = malloc(sizeof *bits * (size_t)v->words);
    out->n = 0;
    out->done = false;
    out->mask_checks = 0;
    while (out->n < GEN_MAX && !k3_matcher_done(m)) {
        for (int i = 0; i < v->n; i++)
            logits[i] = (float)(2 * k3_rng_normal(&r)) + v->bias[i];
        k3_matcher_mask(m, v->trie, bits);
        if (mask_every && out->n % mask_every == 0) {
            int allowed = check_mask(v, m, bits, what, out->n);
            CHECK(allowed > 0, "%s seed %llu step %d: no token allowed", what,
                  (unsigned long long)seed, out->n);
            out->mask_checks++;
        }
        int id = k3_sample_masked(&s, logits, bits);
        REQUIRE(id >= 0, "%s seed %llu step %d: the mask allows nothing", what,
                (unsigned long long)seed, out->n);
        REQUIRE(!k3_matcher_accept(m, id), "%s seed %llu step %d: token %d from the mask is "
                "refused", what, (unsigned long long)seed, out->n, id);
        out->ids[out->n++] = id;
    }
    out->done = k3_matcher_done(m);
    if (out->done) { /* nothing may follow the end */
        k3_matcher_mask(m, v->trie, bits);
        int any = 0;
        for (int w = 0; w < v->words; w++)
            any |= bits[w] != 0;
        CHECK(!any, "%s: tokens allowed after <|end_of_msg|>", what);
    }
    gen_symbols(v, out);
    free(logits);
    free(bits);
    k3_sampler_free(&s);
    k3_matcher_free(m);
}

/* ============================================================== reading ==== */

struct reader {
    const uint16_t *s;
    size_t n, at;
    char why[200];
};

static inline bool rd_lit(struct reader *r, const char *text)
{
    for (const char *p = text; *p; p++) {
        uint16_t want = (uint8_t)*p >= 1 && (uint8_t)*p <= 4 ? (uint16_t)(SYM_OPEN + *p - 1)
                                                             : (uint8_t)*p;
        if (r->at >= r->n || r->s[r->at] != want) {
            snprintf(r->why, sizeof r->why, "at symbol %zu: expected the markup \"%s\"", r->at,
                     text);
            return false;
        }
        r->at++;
    }
    return true;
}

/* Bytes up to the next structural symbol (or up to stop, a byte), malloc'd. */
static inline char *rd_text(struct reader *r, int stop, size_t *len)
{
    size_t start = r->at;
    while (r->at < r->n && r->s[r->at] < 256 && r->s[r->at] != stop)
        r->at++;
    *len = r->at - start;
    char *t = malloc(*len + 1);
    for (size_t i = 0; i < *len; i++)
        t[i] = (char)r->s[start + i];
    t[*len] = 0;
    return t;
}

/* An attribute value: &amp; and &quot; undone. */
static inline char *rd_attr(struct reader *r)
{
    size_t len;
    char *t = rd_text(r, '"', &len), *o = t;
    for (char *p = t; *p;) {
        if (!strncmp(p, "&amp;", 5))
            *o++ = '&', p += 5;
        else if (!strncmp(p, "&quot;", 6))
            *o++ = '"', p += 6;
        else
            *o++ = *p++;
    }
    *o = 0;
    return t;
}

static inline bool rd_thinking(struct reader *r, bool thinking)
{
    if (!thinking)
        return true;
    size_t len;
    free(rd_text(r, -1, &len));
    return rd_lit(r, "\2think\3\1response\3");
}

/* One argument's value by its type attribute. */
static inline json_t *arg_value(const char *type, const char *text, size_t len, char *why,
                                size_t why_size)
{
    if (!strcmp(type, "string")) {
        json_t *j = json_stringn(text, len);
        if (!j)
            snprintf(why, why_size, "a string argument is not valid UTF-8");
        return j;
    }
    json_error_t je;
    json_t *j = json_loadb(text, len, JSON_DECODE_ANY, &je);
    if (!j) {
        snprintf(why, why_size, "argument \"%s\" of type %s is not JSON: %s", text, type, je.text);
        return NULL;
    }
    static const struct {
        const char *name;
        int a, b;
    } types[] = {{"number", JSON_INTEGER, JSON_REAL}, {"boolean", JSON_TRUE, JSON_FALSE},
                 {"null", JSON_NULL, JSON_NULL}, {"object", JSON_OBJECT, JSON_OBJECT},
                 {"array", JSON_ARRAY, JSON_ARRAY}};
    for (size_t i = 0; i < sizeof types / sizeof *types; i++)
        if (!strcmp(type, types[i].name) &&
            ((int)json_typeof(j) == types[i].a || (int)json_typeof(j) == types[i].b))
            return j;
    snprintf(why, why_size, "argument %s is not of its type %s", text, type);
    json_decref(j);
    return NULL;
}

/* The calls of a tools generation: [{"name":..., "arguments": {...}}, ...] (NULL and
 * why when it does not read as the XTML tools element). */
static inline json_t *read_calls(const struct gen *g, bool thinking, char *why, size_t why_size)
{
    struct reader r = {.s = g->sym, .n = g->n_sym};
    json_t *calls = json_array();
    if (!rd_thinking(&r, thinking) || !rd_lit(&r, "\2response\3\1tools\3"))
        goto bad;
    for (int index = 1;; index++) {
        if (r.at < r.n && r.s[r.at] == SYM_CLOSE)
            break;
        char head[64];
        if (!rd_lit(&r, "\1call tool=\""))
            goto bad;
        char *name = rd_attr(&r);
        snprintf(head, sizeof head, "\" index=\"%d\"\3", index);
        json_t *args = json_object();
        json_array_append_new(calls, json_pack("{s:s,s:o}", "name", name, "arguments", args));
        free(name);
        if (!rd_lit(&r, head))
            goto bad;
        while (r.at < r.n && r.s[r.at] == SYM_OPEN) {
            if (!rd_lit(&r, "\1argument key=\""))
                goto bad;
            char *key = rd_attr(&r);
            if (!rd_lit(&r, "\" type=\"")) {
                free(key);
                goto bad;
            }
            char *type = rd_attr(&r);
            size_t len;
            char *text = (rd_lit(&r, "\"\3") ? rd_text(&r, -1, &len) : NULL);
            json_t *v = text ? arg_value(type, text, len, r.why, sizeof r.why) : NULL;
            if (v && json_object_get(args, key)) {
                snprintf(r.why, sizeof r.why, "argument %s twice", key);
                json_decref(v);
                v = NULL;
            }
            if (v)
                json_object_set_new(args, key, v);
            free(key);
            free(type);
            free(text);
            if (!v || !rd_lit(&r, "\2argument\3"))
                goto bad;
        }
        if (!rd_lit(&r, "\2call\3"))
            goto bad;
    }
    if (!rd_lit(&r, "\2tools\3\2message\3\4"))
        goto bad;
    if (r.at != r.n) {
        snprintf(r.why, sizeof r.why, "%zu symbols after the end", r.n - r.at);
        goto bad;
    }
    return calls;
bad:
    snprintf(why, why_size, "%s", r.why);
    json_decref(calls);
    return NULL;
}

/* The response channel's text of a response_format generation (NULL: not so shaped). */
static inline char *read_response(const struct gen *g, bool thinking, size_t *len, char *why,
                                  size_t why_size)
{
    struct reader r = {.s = g->sym, .n = g->n_sym};
    char *text = NULL;
    if (rd_thinking(&r, thinking)) {
        text = rd_text(&r, -1, len);
        if (!rd_lit(&r, "\2response\3\2message\3\4") || r.at != r.n) {
            free(text);
            text = NULL;
        }
    }
    if (!text)
        snprintf(why, why_size, "%s", r.why[0] ? r.why : "symbols after the end");
    return text;
}

/* No whitespace outside strings. */
static inline bool compact(const char *t, size_t n)
{
    bool in = false;
    for (size_t i = 0; i < n; i++) {
        if (in && t[i] == '\\')
            i++;
        else if (t[i] == '"')
            in = !in;
        else if (!in && strchr(" \t\r\n", t[i]))
            return false;
    }
    return true;
}

/* ============================================================ validator ==== */

static inline const json_t *resolve_ref(const json_t *root, const char *ref)
{
    if (!strcmp(ref, "#"))
        return root;
    if (!strncmp(ref, "#/$defs/", 8))
        return json_object_get(json_object_get(root, "$defs"), ref + 8);
    if (!strncmp(ref, "#/definitions/", 14))
        return json_object_get(json_object_get(root, "definitions"), ref + 14);
    return NULL;
}

static inline size_t code_points(const char *s, size_t n)
{
    size_t c = 0;
    for (size_t i = 0; i < n; i++)
        c += ((uint8_t)s[i] & 0xC0) != 0x80;
    return c;
}

static inline bool type_matches(const json_t *v, const char *t)
{
    if (!strcmp(t, "string"))
        return json_is_string(v);
    if (!strcmp(t, "integer"))
        return json_is_integer(v);
    if (!strcmp(t, "number"))
        return json_is_number(v);
    if (!strcmp(t, "boolean"))
        return json_is_boolean(v);
    if (!strcmp(t, "null"))
        return json_is_null(v);
    if (!strcmp(t, "object"))
        return json_is_object(v);
    return json_is_array(v);
}

static inline bool validate(const json_t *v, const json_t *s, const json_t *root, char *why,
                            size_t ws);

static inline bool validate_object(const json_t *v, const json_t *s, const json_t *root,
                                   char *why, size_t ws)
{
    json_t *props = json_object_get(s, "properties"), *req = json_object_get(s, "required");
    json_t *extra = json_object_get(s, "additionalProperties");
    for (size_t i = 0; i < json_array_size(req); i++)
        if (!json_object_get(v, json_string_value(json_array_get(req, i)))) {
            snprintf(why, ws, "required property %s missing",
                     json_string_value(json_array_get(req, i)));
            return false;
        }
    const char *key;
    json_t *val;
    int last = -1;
    json_object_foreach((json_t *)v, key, val) {
        json_t *ps = json_object_get(props, key);
        if (props) { /* only declared properties, in the schema's order */
            int index = 0, found = -1;
            const char *k2;
            json_t *v2;
            json_object_foreach(props, k2, v2) {
                if (!strcmp(k2, key))
                    found = index;
                index++;
            }
            if (found < 0 || found <= last) {
                snprintf(why, ws, "property %s undeclared or out of order", key);
                return false;
            }
            last = found;
        }
        const json_t *sub = ps ? ps : extra && !json_is_boolean(extra) ? extra : NULL;
        if (!ps && json_is_false(extra)) {
            snprintf(why, ws, "property %s not allowed", key);
            return false;
        }
        if (sub && !validate(val, sub, root, why, ws))
            return false;
    }
    return true;
}

static inline bool validate(const json_t *v, const json_t *s, const json_t *root, char *why,
                            size_t ws)
{
    if (json_is_true(s))
        return true;
    json_t *ref = json_object_get(s, "$ref"), *any = json_object_get(s, "anyOf");
    if (ref)
        return validate(v, resolve_ref(root, json_string_value(ref)), root, why, ws);
    if (any) {
        for (size_t i = 0; i < json_array_size(any); i++)
            if (validate(v, json_array_get(any, i), root, why, ws))
                return true;
        snprintf(why, ws, "no anyOf alternative matches");
        return false;
    }
    json_t *e = json_object_get(s, "enum"), *k = json_object_get(s, "const");
    if (k && !json_equal((json_t *)v, k)) {
        snprintf(why, ws, "not the const");
        return false;
    }
    if (e) {
        bool found = false;
        for (size_t i = 0; i < json_array_size(e); i++)
            found |= json_equal((json_t *)v, json_array_get(e, i));
        if (!found) {
            snprintf(why, ws, "not in the enum");
            return false;
        }
    }
    json_t *t = json_object_get(s, "type");
    if (t) {
        bool ok = false;
        for (size_t i = 0; i < (json_is_array(t) ? json_array_size(t) : 1); i++)
            ok |= type_matches(v, json_string_value(json_is_array(t) ? json_array_get(t, i) : t));
        if (!ok) {
            snprintf(why, ws, "not of the schema's type");
            return false;
        }
    }
    json_t *lo = json_object_get(s, "minLength"), *hi = json_object_get(s, "maxLength");
    if (json_is_string(v)) {
        size_t c = code_points(json_string_value(v), json_string_length(v));
        if ((lo && c < (size_t)json_integer_value(lo)) || (hi && c > (size_t)json_integer_value(hi))) {
            snprintf(why, ws, "string of %zu characters outside the lengths", c);
            return false;
        }
    }
    json_t *min = json_object_get(s, "minimum"), *max = json_object_get(s, "maximum");
    if (json_is_number(v) && ((min && json_number_value(v) < json_number_value(min)) ||
                              (max && json_number_value(v) > json_number_value(max)))) {
        snprintf(why, ws, "%g outside [minimum, maximum]", json_number_value(v));
        return false;
    }
    if (json_is_array(v)) {
        json_t *mi = json_object_get(s, "minItems"), *ma = json_object_get(s, "maxItems");
        json_t *items = json_object_get(s, "items");
        if ((mi && json_array_size(v) < (size_t)json_integer_value(mi)) ||
            (ma && json_array_size(v) > (size_t)json_integer_value(ma))) {
            snprintf(why, ws, "%zu items outside [minItems, maxItems]", json_array_size(v));
            return false;
        }
        for (size_t i = 0; items && i < json_array_size(v); i++)
            if (!validate(json_array_get(v, i), items, root, why, ws))
                return false;
    }
    if (json_is_object(v))
        return validate_object(v, s, root, why, ws);
    return true;
}

#endif
