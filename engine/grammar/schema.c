/* JSON Schema into grammar nodes.  See schema.h and README.md for the subset. */
#include "engine/grammar/schema.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define SCHEMA_DEPTH_MAX 32 /* nested schemas (and $ref hops) one value may go through */
#define INT_LIMIT 999999999999999999LL /* the largest magnitude of INT_DIGITS_MAX digits */

static const char *const type_names[N_TYPES] = {"string", "number", "boolean", "null",
                                                "object", "array", "mixed"};

/* ================================================================ faults ==== */

int schema_fault(struct schema_ctx *c, const char *key, const char *fmt, ...)
{
    struct k3_grammar_fault *f = c->b->f;
    char param[sizeof c->path + 64];
    snprintf(param, sizeof param, "%s%s%.63s", c->path, key ? "." : "", key ? key : "");
    size_t n = strlen(param) < sizeof f->param - 1 ? strlen(param) : sizeof f->param - 1;
    memcpy(f->param, param, n); /* a long path keeps its start */
    f->param[n] = 0;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(f->message, sizeof f->message, fmt, ap);
    va_end(ap);
    return -1;
}

size_t path_push(struct schema_ctx *c, const char *key)
{
    size_t len = strlen(c->path);
    snprintf(c->path + len, sizeof c->path - len, "%s%s", key[0] == '[' ? "" : ".", key);
    return len;
}

void path_pop(struct schema_ctx *c, size_t len)
{
    c->path[len] = 0;
}

/* ============================================================== keywords ==== */

static const char *const annotations[] = {"description", "title", "default", "examples",
                                          "$schema", "strict", "$comment", "$defs",
                                          "definitions", NULL};

static bool listed(const char *const *list, const char *key)
{
    for (; *list; list++)
        if (!strcmp(*list, key))
            return true;
    return false;
}

int schema_keywords(struct schema_ctx *c, const json_t *schema, const char *const *allowed)
{
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)schema, key, v) {
        if (!listed(annotations, key) && !listed(allowed, key))
            return schema_fault(c, key, "unsupported JSON Schema keyword \"%s\"", key);
    }
    return 0;
}

static const char *const value_keywords[] = {
    "type", "properties", "required", "enum", "const", "items", "additionalProperties", "$ref",
    "anyOf", "maxLength", "minLength", "maxItems", "minItems", "minimum", "maximum", NULL};

/* A keyword's value as a count (a non-negative integer): 1 when present, 0 absent. */
static int count_keyword(struct schema_ctx *c, const json_t *schema, const char *key,
                         int64_t *out)
{
    json_t *v = json_object_get(schema, key);
    if (!v)
        return 0;
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return schema_fault(c, key, "must be a non-negative integer");
    *out = json_integer_value(v);
    return 1;
}

/* min..max of a pair of count keywords (defaults 0 and unbounded). */
static int count_range(struct schema_ctx *c, const json_t *schema, const char *min_key,
                       const char *max_key, int64_t *lo, int64_t *hi)
{
    *lo = 0;
    *hi = INT64_MAX;
    if (count_keyword(c, schema, min_key, lo) < 0 || count_keyword(c, schema, max_key, hi) < 0)
        return -1;
    if (*lo > *hi)
        return schema_fault(c, min_key, "%s %lld is above %s %lld", min_key, (long long)*lo,
                            max_key, (long long)*hi);
    return 0;
}

/* ================================================================ types ==== */

static int type_of_name(const char *name)
{
    if (!strcmp(name, "integer"))
        return T_NUMBER;
    for (int t = 0; t < T_MIXED; t++)
        if (!strcmp(name, type_names[t]))
            return t;
    return -1;
}

/* The types "type" allows (bit per json_type; integer: *integer set and T_NUMBER), or
 * 0 when there is no "type". */
static int declared_types(struct schema_ctx *c, const json_t *schema, unsigned *types,
                          bool *integer, bool *number)
{
    json_t *t = json_object_get(schema, "type");
    *types = 0;
    *integer = *number = false;
    if (!t)
        return 0;
    size_t n = json_is_array(t) ? json_array_size(t) : 1;
    if ((!json_is_string(t) && !json_is_array(t)) || n == 0)
        return schema_fault(c, "type", "must be a type name or a non-empty list of them");
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_is_array(t) ? json_array_get(t, i) : t;
        int k = json_is_string(e) ? type_of_name(json_string_value(e)) : -1;
        if (k < 0)
            return schema_fault(c, "type", "%s is not a JSON Schema type",
                                json_is_string(e) ? json_string_value(e) : "a non-string");
        *types |= 1u << k;
        if (k == T_NUMBER && !strcmp(json_string_value(e), "integer"))
            *integer = true;
        else if (k == T_NUMBER)
            *number = true;
    }
    return 0;
}

/* Without "type": the one type the keywords used imply, or every type when none does. */
static int implied_types(struct schema_ctx *c, const json_t *schema, unsigned *types,
                         bool *integer)
{
    static const struct {
        const char *key;
        int type;
    } family[] = {{"properties", T_OBJECT}, {"required", T_OBJECT},
                  {"additionalProperties", T_OBJECT}, {"items", T_ARRAY}, {"minItems", T_ARRAY},
                  {"maxItems", T_ARRAY}, {"minLength", T_STRING}, {"maxLength", T_STRING},
                  {"minimum", T_NUMBER}, {"maximum", T_NUMBER}};
    unsigned seen = 0;
    for (size_t i = 0; i < sizeof family / sizeof *family; i++)
        if (json_object_get(schema, family[i].key))
            seen |= 1u << family[i].type;
    if (seen & (seen - 1))
        return schema_fault(c, "type", "missing, and the keywords given belong to several types");
    *types = seen ? seen : (1u << T_MIXED) - 1;
    *integer = seen == 1u << T_NUMBER; /* bounds are only supported on integers */
    return 0;
}

/* ================================================================ nodes ==== */

static void add(struct typed *t, int type, uint32_t node, bool *full)
{
    if (t->n[type] == MAX_BRANCHES)
        *full = true;
    else
        t->node[type][t->n[type]++] = node;
}

uint32_t typed_alt(struct k3_grammar *g, const struct typed *t)
{
    uint32_t all[N_TYPES * MAX_BRANCHES], n = 0;
    for (int k = 0; k < N_TYPES; k++)
        for (uint32_t i = 0; i < t->n[k]; i++)
            all[n++] = t->node[k][i];
    return gb_list(g, N_ALT, all, n);
}

static uint32_t string_node(struct k3_grammar *g, bool raw, int64_t lo, int64_t hi)
{
    uint32_t id = gb_node(g, N_STRING);
    if (!g->oom) {
        g->nodes[id].flags = raw ? F_RAW : 0;
        g->nodes[id].lo = lo;
        g->nodes[id].hi = hi;
    }
    return id;
}

static uint32_t words_node(struct k3_grammar *g, const char *const *words)
{
    uint32_t root = gb_trie_new(g), id = gb_node(g, N_CHOICE);
    for (; *words; words++) {
        uint16_t syms[8];
        uint32_t n = (uint32_t)strlen(*words);
        for (uint32_t i = 0; i < n; i++)
            syms[i] = (uint8_t)(*words)[i];
        gb_trie_add(g, root, syms, n, NO_NODE);
    }
    if (!g->oom)
        g->nodes[id].off = root;
    return id;
}

static uint32_t booleans(struct k3_grammar *g)
{
    static const char *const words[] = {"true", "false", NULL};
    return words_node(g, words);
}

static uint32_t null_node(struct k3_grammar *g)
{
    static const char *const words[] = {"null", NULL};
    return words_node(g, words);
}

static uint32_t map_node(struct grammar_build *b, uint32_t value)
{
    uint32_t id = gb_node(b->g, N_MAP);
    if (!b->g->oom) {
        b->g->nodes[id].off = b->any_key;
        b->g->nodes[id].kid = value;
    }
    return id;
}

static uint32_t array_node(struct k3_grammar *g, uint32_t items, int64_t lo, int64_t hi)
{
    uint32_t id = gb_node(g, N_ARRAY);
    if (!g->oom) {
        g->nodes[id].kid = items;
        g->nodes[id].lo = lo;
        g->nodes[id].hi = hi;
    }
    return id;
}

/* The value of any type at the top of an argument, or (raw false) as JSON. */
static void any_typed(struct grammar_build *b, bool raw, struct typed *out)
{
    struct k3_grammar *g = b->g;
    uint32_t any = any_value(b);
    bool full = false;
    add(out, T_STRING, string_node(g, raw, 0, INT64_MAX), &full);
    add(out, T_NUMBER, gb_node(g, N_NUMBER), &full);
    add(out, T_BOOLEAN, booleans(g), &full);
    add(out, T_NULL, null_node(g), &full);
    add(out, T_OBJECT, map_node(b, any), &full);
    add(out, T_ARRAY, array_node(g, any, 0, INT64_MAX), &full);
}

uint32_t any_value(struct grammar_build *b)
{
    struct k3_grammar *g = b->g;
    if (b->any != NO_NODE)
        return b->any;
    b->any_key = string_node(g, false, 0, INT64_MAX);
    uint32_t map = map_node(b, NO_NODE), arr = array_node(g, NO_NODE, 0, INT64_MAX);
    uint32_t kids[] = {map, arr, b->any_key, gb_node(g, N_NUMBER), booleans(g), null_node(g)};
    b->any = gb_list(g, N_ALT, kids, 6);
    if (!g->oom)
        g->nodes[map].kid = g->nodes[arr].kid = b->any;
    return b->any;
}

uint32_t any_object(struct grammar_build *b)
{
    return map_node(b, any_value(b));
}

/* ================================================================= enum ==== */

static int value_type(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_STRING:
        return T_STRING;
    case JSON_INTEGER:
    case JSON_REAL:
        return T_NUMBER;
    case JSON_TRUE:
    case JSON_FALSE:
        return T_BOOLEAN;
    case JSON_NULL:
        return T_NULL;
    case JSON_OBJECT:
        return T_OBJECT;
    default:
        return T_ARRAY;
    }
}

/* v as compact JSON, reals in the fewest digits that read back the same. */
static char *compact_json(const json_t *v)
{
    for (int digits = 15; digits <= 17; digits++) {
        char *s = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY | JSON_REAL_PRECISION(digits));
        json_t *back = s ? json_loads(s, JSON_DECODE_ANY, NULL) : NULL;
        bool same = back && json_equal(back, (json_t *)v);
        json_decref(back);
        if (same || digits == 17 || !s)
            return s;
        free(s);
    }
    return NULL;
}

/* Adds v's literal to the trie of its type (made on first use). */
static int enum_literal(struct schema_ctx *c, const json_t *v, bool raw, uint32_t *tries)
{
    struct k3_grammar *g = c->b->g;
    int t = value_type(v);
    bool raw_text = raw && t == T_STRING;
    char *text = raw_text ? NULL : compact_json(v);
    const char *p = raw_text ? json_string_value(v) : text;
    size_t len = raw_text ? json_string_length(v) : text ? strlen(text) : 0;
    uint16_t *syms = p ? malloc((len + 1) * sizeof *syms) : NULL;
    if (!syms) {
        free(text);
        return schema_fault(c, "enum", "out of memory");
    }
    for (size_t i = 0; i < len; i++)
        syms[i] = (uint8_t)p[i];
    if (tries[t] == NO_NODE)
        tries[t] = gb_trie_new(g);
    gb_trie_add(g, tries[t], syms, (uint32_t)len, NO_NODE);
    free(syms);
    free(text);
    return 0;
}

/* enum or const: a choice of literals per type, only the values types allows. */
static int schema_enum(struct schema_ctx *c, const json_t *schema, unsigned types, bool integer,
                       bool number, bool raw, struct typed *out)
{
    static const char *const allowed[] = {"enum", "const", "type", NULL};
    if (schema_keywords(c, schema, allowed))
        return -1;
    json_t *e = json_object_get(schema, "enum"), *k = json_object_get(schema, "const");
    if (e && k)
        return schema_fault(c, "const", "const beside enum is not supported");
    if (e && (!json_is_array(e) || json_array_size(e) == 0))
        return schema_fault(c, "enum", "must be a non-empty array");
    uint32_t tries[N_TYPES];
    for (int t = 0; t < N_TYPES; t++)
        tries[t] = NO_NODE;
    size_t n = e ? json_array_size(e) : 1;
    for (size_t i = 0; i < n; i++) {
        json_t *v = e ? json_array_get(e, i) : k;
        int t = value_type(v);
        bool fits = types & 1u << t;
        if (t == T_NUMBER && integer && !number) /* an integer schema takes whole numbers */
            fits = json_is_integer(v);
        if (fits && enum_literal(c, v, raw, tries))
            return -1;
    }
    bool full = false, any = false;
    for (int t = 0; t < T_MIXED; t++) {
        if (tries[t] == NO_NODE)
            continue;
        uint32_t id = gb_node(c->b->g, N_CHOICE);
        if (!c->b->g->oom)
            c->b->g->nodes[id].off = tries[t];
        add(out, t, id, &full);
        any = true;
    }
    if (!any)
        return schema_fault(c, e ? "enum" : "const", "no value has the schema's type");
    return 0;
}

/* ================================================================= refs ==== */

/* The definition "#/$defs/NAME" (or "#/definitions/NAME", or "#": the root) names;
 * where: its path below the root ("" for the root). */
static const json_t *resolve(struct schema_ctx *c, const char *ref, char *where, size_t size)
{
    static const char *const bags[] = {"$defs", "definitions"};
    where[0] = 0;
    if (!strcmp(ref, "#"))
        return c->root;
    for (int i = 0; i < 2; i++) {
        size_t n = strlen(bags[i]);
        if (strncmp(ref, "#/", 2) || strncmp(ref + 2, bags[i], n) || ref[2 + n] != '/')
            continue;
        char name[256];
        size_t k = 0;
        for (const char *p = ref + 3 + n; *p; p++) { /* JSON Pointer escapes */
            if (*p == '/' || k + 1 == sizeof name)
                return NULL;
            if (p[0] == '~' && (p[1] == '0' || p[1] == '1'))
                name[k++] = *++p == '0' ? '~' : '/';
            else
                name[k++] = *p;
        }
        name[k] = 0;
        snprintf(where, size, ".%s.%s", bags[i], name);
        return json_object_get(json_object_get(c->root, bags[i]), name);
    }
    return NULL;
}

/* A definition's node, made once: it exists before its body is read, so that the body
 * may refer back to it (recursion); a loop that never consumes a symbol is refused
 * later (gb_check). */
static int definition(struct schema_ctx *c, const json_t *target, const char *where,
                      uint32_t *node)
{
    for (int i = 0; i < c->n_defs; i++)
        if (c->defs[i].schema == target) {
            *node = c->defs[i].node;
            return 0;
        }
    if (c->n_defs == c->cap_defs) {
        int cap = c->cap_defs ? 2 * c->cap_defs : 8;
        struct def_memo *d = realloc(c->defs, (size_t)cap * sizeof *d);
        if (!d)
            return schema_fault(c, "$ref", "out of memory");
        c->defs = d;
        c->cap_defs = cap;
    }
    struct k3_grammar *g = c->b->g;
    uint32_t id = gb_list(g, N_ALT, NULL, 0);
    c->defs[c->n_defs++] = (struct def_memo){target, id};
    char saved[sizeof c->path];
    memcpy(saved, c->path, sizeof saved);
    snprintf(c->path, sizeof c->path, "%s%.255s", c->root_path, where); /* fits: 255 + 255 */
    uint32_t body;
    int rc = schema_json(c, target, &body);
    memcpy(c->path, saved, sizeof saved);
    if (rc)
        return -1;
    if (!g->oom)
        g->nodes[id] = g->nodes[body];
    *node = id;
    return 0;
}

static int schema_ref(struct schema_ctx *c, const json_t *schema, bool raw, struct typed *out)
{
    static const char *const allowed[] = {"$ref", NULL};
    if (schema_keywords(c, schema, allowed))
        return -1;
    json_t *r = json_object_get(schema, "$ref");
    char where[300];
    const json_t *target = json_is_string(r) ? resolve(c, json_string_value(r), where, sizeof where)
                                             : NULL;
    if (!target)
        return schema_fault(c, "$ref", "must name \"#\", \"#/$defs/NAME\" or "
                            "\"#/definitions/NAME\" of this schema");
    if (raw) /* the top of an argument is typed, so it is read again, not shared */
        return schema_value(c, target, raw, out);
    uint32_t node = NO_NODE;
    if (definition(c, target, where, &node))
        return -1;
    bool full = false;
    add(out, T_MIXED, node, &full);
    return 0;
}

/* ================================================================ anyOf ==== */

static int schema_any_of(struct schema_ctx *c, const json_t *schema, bool raw, struct typed *out)
{
    static const char *const allowed[] = {"anyOf", NULL};
    if (schema_keywords(c, schema, allowed))
        return -1;
    json_t *list = json_object_get(schema, "anyOf");
    if (!json_is_array(list) || json_array_size(list) == 0)
        return schema_fault(c, "anyOf", "must be a non-empty array of schemas");
    for (size_t i = 0; i < json_array_size(list); i++) {
        char key[40];
        snprintf(key, sizeof key, "anyOf[%zu]", i);
        size_t len = path_push(c, key);
        struct typed one = {.n = {0}};
        int rc = schema_value(c, json_array_get(list, i), raw, &one);
        path_pop(c, len);
        if (rc)
            return -1;
        bool full = false;
        for (int t = 0; t < N_TYPES; t++)
            for (uint32_t k = 0; k < one.n[t]; k++)
                add(out, t, one.node[t][k], &full);
        if (full)
            return schema_fault(c, "anyOf", "more than %d alternatives of one type",
                                MAX_BRANCHES);
    }
    return 0;
}

/* ============================================================== objects ==== */

/* " key" with & and " escaped, as XTML attribute values are. */
static void attr_escaped(struct k3_grammar *g, const char *s)
{
    for (; *s; s++)
        if (*s == '&')
            gb_bytes(g, "&amp;", 5);
        else if (*s == '"')
            gb_bytes(g, "&quot;", 6);
        else
            gb_sym(g, (uint8_t)*s);
}

/* The header of property key: "KEY": in JSON, the argument element's start in XTML. */
static int prop_header(struct schema_ctx *c, const char *key, bool xtml, struct prop *p)
{
    struct k3_grammar *g = c->b->g;
    p->key_off = g->n_lit;
    if (xtml) {
        gb_sym(g, SYM_OPEN);
        gb_bytes(g, "argument key=\"", 14);
        attr_escaped(g, key);
        gb_bytes(g, "\" type=\"", 8);
    } else {
        json_t *k = json_string(key);
        char *text = k ? json_dumps(k, JSON_ENCODE_ANY) : NULL;
        json_decref(k);
        if (!text)
            return schema_fault(c, "properties", "out of memory");
        gb_bytes(g, text, (uint32_t)strlen(text));
        gb_sym(g, ':');
        free(text);
    }
    p->key_len = g->n_lit - p->key_off;
    return 0;
}

static int prop_value(struct schema_ctx *c, const json_t *schema, bool xtml, uint32_t *node)
{
    if (!xtml)
        return schema_json(c, schema, node);
    struct typed t = {.n = {0}};
    if (schema_value(c, schema, true, &t))
        return -1;
    *node = xtml_typed_value(c->b->g, &t);
    return 0;
}

static int check_required(struct schema_ctx *c, const json_t *props, const json_t *required)
{
    if (required && !json_is_array(required))
        return schema_fault(c, "required", "must be an array of property names");
    for (size_t i = 0; i < json_array_size(required); i++) {
        json_t *r = json_array_get(required, i);
        if (!json_is_string(r))
            return schema_fault(c, "required", "must be an array of property names");
        if (!json_object_get(props, json_string_value(r)))
            return schema_fault(c, "required", "names \"%s\", which properties does not declare",
                                json_string_value(r));
    }
    return 0;
}

static bool is_required(const json_t *required, const char *key)
{
    for (size_t i = 0; i < json_array_size(required); i++)
        if (!strcmp(json_string_value(json_array_get(required, i)), key))
            return true;
    return false;
}

int schema_props(struct schema_ctx *c, const json_t *schema, bool xtml, uint32_t *node)
{
    struct k3_grammar *g = c->b->g;
    json_t *props = json_object_get(schema, "properties");
    json_t *required = json_object_get(schema, "required");
    if (props && !json_is_object(props))
        return schema_fault(c, "properties", "must be an object of schemas");
    if (check_required(c, props, required))
        return -1;
    size_t n = json_object_size(props);
    if (n > PROPS_MAX)
        return schema_fault(c, "properties", "more than %d properties", PROPS_MAX);
    uint32_t off = gb_props(g, (uint32_t)n), i = 0;
    const char *key;
    json_t *v;
    json_object_foreach(props, key, v) {
        struct prop p = {.required = is_required(required, key)};
        size_t len = path_push(c, "properties");
        path_push(c, key);
        int rc = prop_header(c, key, xtml, &p) || prop_value(c, v, xtml, &p.value);
        path_pop(c, len);
        if (rc)
            return -1;
        if (!g->oom)
            g->props[off + i] = p;
        i++;
    }
    *node = gb_node(g, N_PROPS);
    if (!g->oom) {
        g->nodes[*node].flags = xtml ? F_XTML : 0;
        g->nodes[*node].off = off;
        g->nodes[*node].n = (uint32_t)n;
    }
    return 0;
}

/* An object: its declared properties, or any keys when it declares none. */
static int schema_object(struct schema_ctx *c, const json_t *schema, uint32_t *node)
{
    json_t *extra = json_object_get(schema, "additionalProperties");
    uint32_t extra_node = NO_NODE;
    if (extra && !json_is_boolean(extra)) {
        size_t len = path_push(c, "additionalProperties");
        int rc = schema_json(c, extra, &extra_node);
        path_pop(c, len);
        if (rc)
            return -1;
    }
    if (json_object_get(schema, "properties"))
        return schema_props(c, schema, false, node);
    if (json_object_get(schema, "required"))
        return schema_fault(c, "required", "needs properties that declare the names");
    if (json_is_false(extra)) {
        *node = gb_markup(c->b->g, "{}");
        return 0;
    }
    *node = map_node(c->b, extra_node != NO_NODE ? extra_node : any_value(c->b));
    return 0;
}

static int schema_array(struct schema_ctx *c, const json_t *schema, uint32_t *node)
{
    int64_t lo, hi;
    if (count_range(c, schema, "minItems", "maxItems", &lo, &hi))
        return -1;
    json_t *items = json_object_get(schema, "items");
    uint32_t kid;
    if (json_is_false(items)) {
        if (lo > 0)
            return schema_fault(c, "minItems", "items is false, so the array must be empty");
        hi = 0;
        kid = any_value(c->b);
    } else if (!items || json_is_true(items)) {
        kid = any_value(c->b);
    } else {
        size_t len = path_push(c, "items");
        int rc = schema_json(c, items, &kid);
        path_pop(c, len);
        if (rc)
            return -1;
    }
    *node = array_node(c->b->g, kid, lo, hi);
    return 0;
}

/* A bound of an integer: an integer as it is, a real rounded inwards (up for the
 * minimum), kept within INT_DIGITS_MAX digits (one past: no integer fits). */
static int integer_bound(struct schema_ctx *c, const json_t *schema, const char *key, bool up,
                         int64_t *bound)
{
    json_t *v = json_object_get(schema, key);
    if (!v)
        return 0;
    if (!json_is_number(v))
        return schema_fault(c, key, "must be a number");
    if (json_is_integer(v)) {
        json_int_t i = json_integer_value(v);
        *bound = i > INT_LIMIT ? INT_LIMIT + 1 : i < -INT_LIMIT ? -INT_LIMIT - 1 : i;
    } else {
        double d = up ? ceil(json_real_value(v)) : floor(json_real_value(v));
        *bound = d > (double)INT_LIMIT ? INT_LIMIT + 1 : d < -(double)INT_LIMIT ? -INT_LIMIT - 1
                                                                                : (int64_t)d;
    }
    return 0;
}

static int schema_integer(struct schema_ctx *c, const json_t *schema, uint32_t *node)
{
    int64_t lo = -INT_LIMIT, hi = INT_LIMIT, min = lo, max = hi;
    if (integer_bound(c, schema, "minimum", true, &min) ||
        integer_bound(c, schema, "maximum", false, &max))
        return -1;
    lo = min > lo ? min : lo;
    hi = max < hi ? max : hi;
    if (lo > hi)
        return schema_fault(c, "minimum", "no integer of at most %d digits lies in [minimum, "
                            "maximum]", INT_DIGITS_MAX);
    *node = gb_node(c->b->g, N_INTEGER);
    if (!c->b->g->oom) {
        c->b->g->nodes[*node].lo = lo;
        c->b->g->nodes[*node].hi = hi;
    }
    return 0;
}

/* ================================================================ value ==== */

/* The node of one type t of a schema whose other keywords were checked. */
static int typed_node(struct schema_ctx *c, const json_t *schema, int t, bool integer, bool raw,
                      uint32_t *node)
{
    struct k3_grammar *g = c->b->g;
    int64_t lo, hi;
    switch (t) {
    case T_STRING:
        if (count_range(c, schema, "minLength", "maxLength", &lo, &hi))
            return -1;
        *node = string_node(g, raw, lo, hi);
        return 0;
    case T_NUMBER:
        if (integer)
            return schema_integer(c, schema, node);
        *node = gb_node(g, N_NUMBER);
        return 0;
    case T_BOOLEAN:
        *node = booleans(g);
        return 0;
    case T_NULL:
        *node = null_node(g);
        return 0;
    case T_OBJECT:
        return schema_object(c, schema, node);
    default:
        return schema_array(c, schema, node);
    }
}

static int schema_typed(struct schema_ctx *c, const json_t *schema, bool raw, struct typed *out)
{
    unsigned types;
    bool integer, number;
    if (schema_keywords(c, schema, value_keywords) ||
        declared_types(c, schema, &types, &integer, &number))
        return -1;
    if (json_object_get(schema, "enum") || json_object_get(schema, "const"))
        return schema_enum(c, schema, types ? types : (1u << T_MIXED) - 1, integer, number, raw,
                           out);
    if (!types && implied_types(c, schema, &types, &integer))
        return -1;
    bool bounds = json_object_get(schema, "minimum") || json_object_get(schema, "maximum");
    if (bounds && (number || !integer))
        return schema_fault(c, json_object_get(schema, "minimum") ? "minimum" : "maximum",
                            "bounds are supported on type integer only");
    if (integer && number) /* an integer is a number: number alone says it */
        integer = false;
    bool full = false;
    for (int t = 0; t < T_MIXED; t++) {
        uint32_t node;
        if (!(types & 1u << t))
            continue;
        if (typed_node(c, schema, t, integer, raw, &node))
            return -1;
        add(out, t, node, &full);
    }
    return 0;
}

int schema_value(struct schema_ctx *c, const json_t *schema, bool raw, struct typed *out)
{
    if (json_is_true(schema)) {
        any_typed(c->b, raw, out);
        return 0;
    }
    if (json_is_false(schema))
        return schema_fault(c, NULL, "the schema false admits no value");
    if (!json_is_object(schema))
        return schema_fault(c, NULL, "a schema must be an object");
    if (++c->depth > SCHEMA_DEPTH_MAX) {
        c->depth--;
        return schema_fault(c, NULL, "schemas nested (or $ref followed) deeper than %d",
                            SCHEMA_DEPTH_MAX);
    }
    int rc;
    if (json_object_get(schema, "$ref"))
        rc = schema_ref(c, schema, raw, out);
    else if (json_object_get(schema, "anyOf"))
        rc = schema_any_of(c, schema, raw, out);
    else
        rc = schema_typed(c, schema, raw, out);
    c->depth--;
    if (!rc && c->b->g->oom)
        rc = schema_fault(c, NULL, "out of memory compiling the schema");
    return rc;
}

int schema_json(struct schema_ctx *c, const json_t *schema, uint32_t *node)
{
    struct typed t = {.n = {0}};
    if (schema_value(c, schema, false, &t))
        return -1;
    *node = typed_alt(c->b->g, &t);
    return 0;
}
