/* The grammars of a whole output: tool calls in XTML, or a JSON value in the response
 * channel, after the think channel when thinking is on.  See grammar.h and README.md.
 *
 * Markup templates below spell <|open|>, <|close|>, <|sep|>, <|end_of_msg|> as
 * \1, \2, \3, \4 (gb_markup).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/grammar/schema.h"

static const char *const xtml_type_names[T_MIXED] = {"string", "number", "boolean", "null",
                                                     "object", "array"};

__attribute__((format(printf, 3, 4))) static int fault(struct k3_grammar_fault *f,
                                                       const char *param, const char *fmt, ...)
{
    snprintf(f->param, sizeof f->param, "%s", param);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(f->message, sizeof f->message, fmt, ap);
    va_end(ap);
    return -1;
}

uint32_t xtml_typed_value(struct k3_grammar *g, const struct typed *t)
{
    uint32_t root = gb_trie_new(g), id = gb_node(g, N_CHOICE);
    uint32_t end = gb_markup(g, "\2argument\3");
    for (int k = 0; k < T_MIXED; k++) {
        if (!t->n[k])
            continue;
        uint32_t value = gb_list(g, N_ALT, t->node[k], t->n[k]);
        uint32_t seq[2] = {value, end};
        uint32_t body = gb_list(g, N_SEQ, seq, 2);
        uint16_t syms[16];
        uint32_t n = 0;
        for (const char *p = xtml_type_names[k]; *p; p++)
            syms[n++] = (uint8_t)*p;
        syms[n++] = '"';
        syms[n++] = SYM_SEP;
        gb_trie_add(g, root, syms, n, body);
    }
    if (!g->oom)
        g->nodes[id].off = root;
    return id;
}

/* The think channel and its close, when thinking is on; then the node rest. */
static uint32_t after_thinking(struct k3_grammar *g, bool thinking, uint32_t rest)
{
    if (!thinking)
        return rest;
    uint32_t reason = gb_node(g, N_REASON);
    uint32_t seq[3] = {reason, gb_markup(g, "\2think\3\1response\3"), rest};
    return gb_list(g, N_SEQ, seq, 3);
}

/* The graph so far passes gb_check; param: the part just added, to blame. */
static int check(struct k3_grammar *g, struct k3_grammar_fault *f, const char *param)
{
    uint32_t bad;
    if (g->oom)
        return fault(f, param, "out of memory compiling the grammar");
    if (gb_check(g, &bad))
        return fault(f, param, "admits no finite value, or loops through $ref or anyOf "
                     "without producing anything");
    return 0;
}

/* ================================================================ tools ==== */

struct tool {
    const char *name;
    uint32_t body; /* the arguments and <|close|>call<|sep|> */
};

/* The arguments a function's parameters (an object schema, or none) declare. */
static int tool_args(struct grammar_build *b, const json_t *params, const char *path,
                     uint32_t *args)
{
    static const char *const allowed[] = {"type", "properties", "required",
                                          "additionalProperties", NULL};
    struct schema_ctx c = {.b = b, .root = params};
    snprintf(c.root_path, sizeof c.root_path, "%s", path);
    snprintf(c.path, sizeof c.path, "%s", path);
    json_t *type = json_object_get(params, "type");
    json_t *extra = json_object_get(params, "additionalProperties");
    uint32_t unused;
    int rc;
    if (!json_is_object(params))
        rc = schema_fault(&c, NULL, "must be a JSON Schema object");
    else if (type && !(json_is_string(type) && !strcmp(json_string_value(type), "object")))
        rc = schema_fault(&c, "type", "must be \"object\"");
    else if (schema_keywords(&c, params, allowed))
        rc = -1;
    else if (extra && !json_is_boolean(extra) && /* read for its keywords: only declared */
             (path_push(&c, "additionalProperties"), schema_json(&c, extra, &unused)))
        rc = -1; /* properties are generated, which any such schema allows */
    else
        rc = schema_props(&c, params, true, args);
    free(c.defs);
    return rc;
}

static int read_tool(struct grammar_build *b, const json_t *tool, size_t i, struct tool *out)
{
    char path[80];
    json_t *type = json_object_get(tool, "type"), *fn = json_object_get(tool, "function");
    json_t *name = json_object_get(fn, "name"), *params = json_object_get(fn, "parameters");
    snprintf(path, sizeof path, "tools[%zu]", i);
    if (!json_is_object(tool))
        return fault(b->f, path, "must be an object");
    if (!json_is_string(type) || strcmp(json_string_value(type), "function"))
        return fault(b->f, strcat(path, ".type"), "must be \"function\"");
    if (!json_is_object(fn))
        return fault(b->f, strcat(path, ".function"), "must be an object");
    strcat(path, ".function");
    if (!json_is_string(name) || !json_string_length(name) ||
        strlen(json_string_value(name)) != json_string_length(name))
        return fault(b->f, strcat(path, ".name"), "must be a non-empty string");
    out->name = json_string_value(name);
    strcat(path, ".parameters");
    uint32_t args = gb_list(b->g, N_SEQ, NULL, 0); /* no parameters: no arguments */
    if (params && tool_args(b, params, path, &args))
        return -1;
    uint32_t seq[2] = {args, gb_markup(b->g, "\2call\3")};
    out->body = gb_list(b->g, N_SEQ, seq, 2);
    return check(b->g, b->f, path);
}

/* <|open|>call tool="NAME" index="k"<|sep|> for each tool, then its body; then up to
 * max - k more calls. */
static uint32_t calls(struct k3_grammar *g, const struct tool *tools, size_t n, int k, int max)
{
    uint32_t root = gb_trie_new(g), choice = gb_node(g, N_CHOICE);
    for (size_t i = 0; i < n; i++) {
        if (!tools[i].name)
            continue;
        uint32_t off = g->n_lit;
        for (const char *p = tools[i].name; *p; p++)
            if (*p == '&')
                gb_bytes(g, "&amp;", 5);
            else if (*p == '"')
                gb_bytes(g, "&quot;", 6);
            else
                gb_sym(g, (uint8_t)*p);
        char idx[32];
        int len = snprintf(idx, sizeof idx, "\" index=\"%d\"", k);
        gb_bytes(g, idx, (uint32_t)len);
        gb_sym(g, SYM_SEP);
        if (!g->oom)
            gb_trie_add(g, root, g->lit + off, g->n_lit - off, tools[i].body);
    }
    if (!g->oom)
        g->nodes[choice].off = root;
    uint32_t seq[3] = {gb_markup(g, "\1call tool=\""), choice, 0};
    if (k == max)
        return gb_list(g, N_SEQ, seq, 2);
    uint32_t alt[2] = {calls(g, tools, n, k + 1, max), gb_list(g, N_SEQ, NULL, 0)};
    seq[2] = gb_list(g, N_ALT, alt, 2);
    return gb_list(g, N_SEQ, seq, 3);
}

static int duplicate_name(const struct tool *tools, size_t n, struct k3_grammar_fault *f)
{
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < i; j++)
            if (!strcmp(tools[i].name, tools[j].name)) {
                char param[64];
                snprintf(param, sizeof param, "tools[%zu].function.name", i);
                return fault(f, param, "\"%s\" is declared twice", tools[i].name);
            }
    return 0;
}

/* Keeps only the tool named only (when set); 0, or -1 when none has that name. */
static int choose(struct tool *tools, size_t n, const char *only, struct k3_grammar_fault *f)
{
    if (!only)
        return 0;
    bool found = false;
    for (size_t i = 0; i < n; i++) {
        if (strcmp(tools[i].name, only))
            tools[i].name = NULL;
        else
            found = true;
    }
    return found ? 0 : fault(f, "tool_choice.function.name", "\"%s\" names no declared function",
                             only);
}

static int build_tools(struct grammar_build *b, const json_t *tools, const char *only,
                       bool parallel, bool thinking)
{
    struct k3_grammar *g = b->g;
    size_t n = json_array_size(tools);
    if (!json_is_array(tools) || n == 0)
        return fault(b->f, "tools", "must be a non-empty array of functions");
    struct tool *list = calloc(n, sizeof *list);
    if (!list)
        return fault(b->f, "tools", "out of memory");
    int rc = 0;
    for (size_t i = 0; i < n && !rc; i++)
        rc = read_tool(b, json_array_get(tools, i), i, &list[i]);
    if (!rc)
        rc = duplicate_name(list, n, b->f) || choose(list, n, only, b->f);
    if (!rc) {
        uint32_t seq[3] = {gb_markup(g, "\2response\3\1tools\3"),
                           calls(g, list, n, 1, parallel ? K3_GRAMMAR_MAX_CALLS : 1),
                           gb_markup(g, "\2tools\3\2message\3\4")};
        g->root = after_thinking(g, thinking, gb_list(g, N_SEQ, seq, 3));
        rc = check(g, b->f, "tools");
    }
    free(list);
    return rc;
}

/* ============================================================= entries ==== */

static int finish(struct grammar_build *b, int rc, struct k3_grammar **out)
{
    if (rc || b->g->oom) {
        if (!rc)
            fault(b->f, b->f->param[0] ? b->f->param : "tools", "out of memory compiling the grammar");
        k3_grammar_free(b->g);
        return -1;
    }
    *out = b->g;
    return 0;
}

int k3_grammar_tools(const json_t *tools, const char *only_name, bool parallel, bool thinking,
                     struct k3_grammar **out, struct k3_grammar_fault *f)
{
    memset(f, 0, sizeof *f);
    struct grammar_build b = {.g = gb_new(), .f = f, .any = NO_NODE};
    if (!b.g)
        return fault(f, "tools", "out of memory compiling the grammar");
    return finish(&b, build_tools(&b, tools, only_name, parallel, thinking), out);
}

int k3_grammar_json(const json_t *schema, bool thinking, struct k3_grammar **out,
                    struct k3_grammar_fault *f)
{
    static const char path[] = "response_format.json_schema.schema";
    memset(f, 0, sizeof *f);
    struct grammar_build b = {.g = gb_new(), .f = f, .any = NO_NODE};
    if (!b.g)
        return fault(f, "response_format", "out of memory compiling the grammar");
    struct schema_ctx c = {.b = &b, .root = schema};
    snprintf(c.root_path, sizeof c.root_path, "%s", path);
    snprintf(c.path, sizeof c.path, "%s", path);
    uint32_t value;
    int rc = 0;
    if (schema)
        rc = schema_json(&c, schema, &value);
    else
        value = any_object(&b);
    free(c.defs);
    if (!rc) {
        uint32_t seq[2] = {value, gb_markup(b.g, "\2response\3\2message\3\4")};
        b.g->root = after_thinking(b.g, thinking, gb_list(b.g, N_SEQ, seq, 2));
        rc = check(b.g, f, schema ? path : "response_format");
    }
    return finish(&b, rc, out);
}
