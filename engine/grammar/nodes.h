/* The compiled form of a grammar: a graph of nodes over symbols (bytes 0..255 and K3's
 * four structural tokens), and the builder the compilers share.
 *
 * Owns: the node kinds and their parameters, adding nodes, literals and literal tries,
 * the checks every compiled grammar passes (each node can finish; no loop through
 * alternatives that consumes nothing), freeing.
 * Does not own: what a node does with a symbol (step.h), JSON Schema (schema.c), the
 * XTML around it (xtml.c).
 * Node ids index g->nodes; children, literals, properties and trie nodes live in shared
 * arrays, addressed by offset, so the graph may have cycles ($ref recursion).
 */
#ifndef K3_GRAMMAR_NODES_H
#define K3_GRAMMAR_NODES_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/grammar/grammar.h"

/* Symbols: a byte, or one of K3's structural tokens. */
enum { SYM_OPEN = 256, SYM_CLOSE, SYM_SEP, SYM_EOM, N_SYMS };

#define NO_NODE UINT32_MAX

/* Bounds the grammars take, as README.md states them. */
#define INT_DIGITS_MAX 18  /* digits of an integer (or a number's integer part): int64 */
#define FRAC_DIGITS_MAX 16 /* digits after a number's point */
#define EXP_DIGITS_MAX 2   /* digits of a number's exponent: doubles never overflow */
#define PROPS_MAX 1024     /* properties of one object schema */

enum node_kind {
    N_LIT,     /* the symbols lit[off .. off+n) */
    N_SEQ,     /* kids[off .. off+n) one after another (n = 0: nothing) */
    N_ALT,     /* one of kids[off .. off+n) (anyOf, type lists, optional parts) */
    N_CHOICE,  /* one literal of the trie rooted at trie node off; a literal may hand on
                * to a node (trie[].cont) */
    N_STRING,  /* a JSON string (flags & F_RAW: raw XTML text, ended by a structural
                * token), lo..hi characters */
    N_NUMBER,  /* a JSON number */
    N_INTEGER, /* a JSON integer in [lo, hi] */
    N_PROPS,   /* declared properties props[off .. off+n) in order: a JSON object, or
                * (flags & F_XTML) a call's argument elements */
    N_MAP,     /* a JSON object of any keys (node off: the key string) to values of kid */
    N_ARRAY,   /* a JSON array of lo..hi items of kid */
    N_REASON,  /* any run of bytes (the think channel) */
};

enum { F_RAW = 1, F_XTML = 1 };

struct node {
    uint8_t kind;
    uint8_t flags;
    uint32_t off, n;
    uint32_t kid;
    int64_t lo, hi;
};

struct prop {
    uint32_t key_off, key_len; /* lit[]: the whole header up to the value */
    uint32_t value;            /* node */
    bool required;
};

/* A literal trie: a node's children are a sibling list; accept: a literal ends here
 * (and hands on to cont, or finishes when cont is NO_NODE). */
struct trie_node {
    uint16_t sym;
    bool accept;
    uint32_t first, next; /* child, sibling: indexes in g->trie, 0 = none */
    uint32_t cont;
};

struct k3_grammar {
    struct node *nodes;
    uint32_t n_nodes, cap_nodes;
    uint16_t *lit; /* symbols of literals and property headers */
    uint32_t n_lit, cap_lit;
    uint32_t *kids;
    uint32_t n_kids, cap_kids;
    struct prop *props;
    uint32_t n_props, cap_props;
    struct trie_node *trie; /* [0] is unused: 0 means none */
    uint32_t n_trie, cap_trie;
    uint32_t root;
    bool oom; /* an allocation failed while building */
};

struct k3_grammar *gb_new(void);
uint32_t gb_node(struct k3_grammar *g, enum node_kind kind);
/* A literal node of n symbols. */
uint32_t gb_lit(struct k3_grammar *g, const uint16_t *syms, uint32_t n);
/* Appends symbols to g->lit (bytes of s, or one symbol); returns the offset of the first. */
uint32_t gb_bytes(struct k3_grammar *g, const char *s, uint32_t n);
uint32_t gb_sym(struct k3_grammar *g, uint16_t sym);
/* A node of the symbols of a template: bytes, with "\x01".."\x04" standing for
 * <|open|>, <|close|>, <|sep|>, <|end_of_msg|>. */
uint32_t gb_markup(struct k3_grammar *g, const char *text);
/* SEQ or ALT of kids[0..n); an ALT or SEQ of one kid is that kid. */
uint32_t gb_list(struct k3_grammar *g, enum node_kind kind, const uint32_t *kids, uint32_t n);
/* An empty literal trie, and a literal of symbols added to it (cont: NO_NODE, or the node
 * that follows this literal). */
uint32_t gb_trie_new(struct k3_grammar *g);
void gb_trie_add(struct k3_grammar *g, uint32_t root, const uint16_t *syms, uint32_t n,
                 uint32_t cont);
/* Room for n more props in a row; returns the offset of the first. */
uint32_t gb_props(struct k3_grammar *g, uint32_t n);

/* Every node can finish (false: which node cannot, in *bad) and no ALT or SEQ reaches
 * itself again before a symbol is consumed.  0 or -1. */
int gb_check(const struct k3_grammar *g, uint32_t *bad);

#endif
