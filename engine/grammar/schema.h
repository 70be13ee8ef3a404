/* JSON Schema into grammar nodes: the subset README.md lists, every other keyword refused
 * with its path.
 *
 * Owns: reading one schema (types, properties, required, enum, const, items, anyOf,
 * $ref into $defs / definitions, lengths, integer bounds), the node of any JSON value,
 * the literal forms of enum values, and the fault paths.
 * Does not own: the XTML around arguments and calls, or the response channel (xtml.c).
 * A value is compiled into one node per JSON type it may take, so that an XTML argument
 * can name its type; at the top of an argument a string is raw text, below it JSON.
 */
#ifndef K3_GRAMMAR_SCHEMA_H
#define K3_GRAMMAR_SCHEMA_H

#include <jansson.h>
#include <stdbool.h>

#include "engine/grammar/nodes.h"

enum json_type { T_STRING, T_NUMBER, T_BOOLEAN, T_NULL, T_OBJECT, T_ARRAY, T_MIXED, N_TYPES };
#define MAX_BRANCHES 32 /* alternatives of one type in one value */

/* The nodes of a value by the type they produce (T_MIXED: any, from a $ref in JSON). */
struct typed {
    uint32_t n[N_TYPES];
    uint32_t node[N_TYPES][MAX_BRANCHES];
};

/* What every schema of one grammar shares. */
struct grammar_build {
    struct k3_grammar *g;
    struct k3_grammar_fault *f;
    uint32_t any;      /* any JSON value, NO_NODE until first needed */
    uint32_t any_key;  /* a JSON string (the keys of free-form objects) */
};

struct def_memo {
    const json_t *schema;
    uint32_t node;
};

/* One schema document: $ref resolves against root. */
struct schema_ctx {
    struct grammar_build *b;
    const json_t *root;
    struct def_memo *defs;
    int n_defs, cap_defs;
    int depth;       /* nesting of the schema being read */
    char root_path[256]; /* the request field that holds the schema */
    char path[512];  /* where in the request, for faults */
};

/* Fills f with the current path (plus "." key when key is non-NULL) and message; -1. */
__attribute__((format(printf, 3, 4))) int schema_fault(struct schema_ctx *c, const char *key,
                                                       const char *fmt, ...);
/* Appends ".key" (or text as given when key starts with '[') to the path; returns the
 * length to restore. */
size_t path_push(struct schema_ctx *c, const char *key);
void path_pop(struct schema_ctx *c, size_t len);

/* The value schema may take.  raw: strings as raw XTML text (the top of an argument). */
int schema_value(struct schema_ctx *c, const json_t *schema, bool raw, struct typed *out);
/* The same as one JSON node. */
int schema_json(struct schema_ctx *c, const json_t *schema, uint32_t *node);
/* The declared properties of an object schema: each header is its key's JSON text
 * between '"' and '":' (JSON), or an argument element's header (xtml).  Refuses a
 * "required" that names an undeclared property. */
int schema_props(struct schema_ctx *c, const json_t *schema, bool xtml, uint32_t *node);
/* Every keyword of schema is one of allowed (a NULL-ended list) or an annotation. */
int schema_keywords(struct schema_ctx *c, const json_t *schema, const char *const *allowed);
/* The node of any JSON value, and of any JSON object. */
uint32_t any_value(struct grammar_build *b);
uint32_t any_object(struct grammar_build *b);
/* An argument's value after `type="`: each type name of t, then `"<|sep|>`, the value
 * and `<|close|>argument<|sep|>` (xtml.c). */
uint32_t xtml_typed_value(struct k3_grammar *g, const struct typed *t);
/* ALT of all of t's nodes. */
uint32_t typed_alt(struct k3_grammar *g, const struct typed *t);

#endif
