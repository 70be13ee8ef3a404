/* Building a grammar's node graph, and the checks it must pass.  See nodes.h. */
#include "engine/grammar/nodes.h"

#include <stdlib.h>
#include <string.h>

/* Grows *p (of *cap elements of size) to hold need; false (and g->oom) when it cannot. */
static bool grow(struct k3_grammar *g, void **p, uint32_t *cap, uint32_t need, size_t size)
{
    if (need <= *cap)
        return true;
    uint32_t n = *cap ? *cap : 16;
    while (n < need)
        n *= 2;
    void *q = realloc(*p, (size_t)n * size);
    if (!q) {
        g->oom = true;
        return false;
    }
    *p = q;
    *cap = n;
    return true;
}

struct k3_grammar *gb_new(void)
{
    struct k3_grammar *g = calloc(1, sizeof *g);
    if (g && (gb_trie_new(g), g->oom)) { /* trie[0] stands for "none" */
        k3_grammar_free(g);
        return NULL;
    }
    return g;
}

void k3_grammar_free(struct k3_grammar *g)
{
    if (!g)
        return;
    free(g->nodes);
    free(g->lit);
    free(g->kids);
    free(g->props);
    free(g->trie);
    free(g);
}

uint32_t gb_node(struct k3_grammar *g, enum node_kind kind)
{
    if (!grow(g, (void **)&g->nodes, &g->cap_nodes, g->n_nodes + 1, sizeof *g->nodes))
        return 0;
    g->nodes[g->n_nodes] = (struct node){.kind = kind, .kid = NO_NODE};
    return g->n_nodes++;
}

uint32_t gb_sym(struct k3_grammar *g, uint16_t sym)
{
    if (!grow(g, (void **)&g->lit, &g->cap_lit, g->n_lit + 1, sizeof *g->lit))
        return 0;
    g->lit[g->n_lit] = sym;
    return g->n_lit++;
}

uint32_t gb_bytes(struct k3_grammar *g, const char *s, uint32_t n)
{
    uint32_t off = g->n_lit;
    for (uint32_t i = 0; i < n; i++)
        gb_sym(g, (uint8_t)s[i]);
    return off;
}

uint32_t gb_lit(struct k3_grammar *g, const uint16_t *syms, uint32_t n)
{
    uint32_t off = g->n_lit;
    for (uint32_t i = 0; i < n; i++)
        gb_sym(g, syms[i]);
    uint32_t id = gb_node(g, N_LIT);
    if (!g->oom) {
        g->nodes[id].off = off;
        g->nodes[id].n = n;
    }
    return id;
}

uint32_t gb_markup(struct k3_grammar *g, const char *text)
{
    uint32_t off = g->n_lit, n = (uint32_t)strlen(text);
    for (uint32_t i = 0; i < n; i++) {
        uint8_t c = (uint8_t)text[i];
        gb_sym(g, c >= 1 && c <= 4 ? (uint16_t)(SYM_OPEN + c - 1) : c);
    }
    uint32_t id = gb_node(g, N_LIT);
    if (!g->oom) {
        g->nodes[id].off = off;
        g->nodes[id].n = n;
    }
    return id;
}

uint32_t gb_list(struct k3_grammar *g, enum node_kind kind, const uint32_t *kids, uint32_t n)
{
    if (n == 1)
        return kids[0];
    if (!grow(g, (void **)&g->kids, &g->cap_kids, g->n_kids + n, sizeof *g->kids))
        return 0;
    uint32_t off = g->n_kids;
    if (n)
        memcpy(g->kids + off, kids, n * sizeof *kids);
    g->n_kids += n;
    uint32_t id = gb_node(g, kind);
    if (!g->oom) {
        g->nodes[id].off = off;
        g->nodes[id].n = n;
    }
    return id;
}

uint32_t gb_props(struct k3_grammar *g, uint32_t n)
{
    if (!grow(g, (void **)&g->props, &g->cap_props, g->n_props + n, sizeof *g->props))
        return 0;
    uint32_t off = g->n_props;
    if (n)
        memset(g->props + off, 0, n * sizeof *g->props);
    g->n_props += n;
    return off;
}

static uint32_t trie_node(struct k3_grammar *g, uint16_t sym)
{
    if (!grow(g, (void **)&g->trie, &g->cap_trie, g->n_trie + 1, sizeof *g->trie))
        return 0;
    g->trie[g->n_trie] = (struct trie_node){.sym = sym, .cont = NO_NODE};
    return g->n_trie++;
}

uint32_t gb_trie_new(struct k3_grammar *g)
{
    return trie_node(g, 0);
}

void gb_trie_add(struct k3_grammar *g, uint32_t root, const uint16_t *syms, uint32_t n,
                 uint32_t cont)
{
    uint32_t at = root;
    for (uint32_t i = 0; i < n && !g->oom; i++) {
        uint32_t c = g->trie[at].first, last = 0;
        while (c && g->trie[c].sym != syms[i]) {
            last = c;
            c = g->trie[c].next;
        }
        if (!c) {
            c = trie_node(g, syms[i]);
            if (g->oom)
                return;
            if (last)
                g->trie[last].next = c;
            else
                g->trie[at].first = c;
        }
        at = c;
    }
    if (!g->oom) {
        g->trie[at].accept = true;
        g->trie[at].cont = cont;
    }
}

/* ================================================================ checks ==== */

/* Whether a literal of the trie below t can end: one that finishes here, or one whose
 * continuation can finish. */
static bool trie_can_end(const struct k3_grammar *g, uint32_t t, const bool *ok)
{
    for (uint32_t c = g->trie[t].first; c; c = g->trie[c].next) {
        const struct trie_node *n = &g->trie[c];
        if (n->accept && (n->cont == NO_NODE || ok[n->cont]))
            return true;
        if (trie_can_end(g, c, ok))
            return true;
    }
    return false;
}

static bool can_end(const struct k3_grammar *g, const struct node *n, const bool *ok)
{
    switch (n->kind) {
    case N_SEQ:
        for (uint32_t i = 0; i < n->n; i++)
            if (!ok[g->kids[n->off + i]])
                return false;
        return true;
    case N_ALT:
        for (uint32_t i = 0; i < n->n; i++)
            if (ok[g->kids[n->off + i]])
                return true;
        return false;
    case N_CHOICE:
        return trie_can_end(g, n->off, ok);
    case N_PROPS:
        for (uint32_t i = 0; i < n->n; i++)
            if (g->props[n->off + i].required && !ok[g->props[n->off + i].value])
                return false;
        return true;
    case N_ARRAY:
        return n->lo == 0 || ok[n->kid];
    default: /* literals, strings, numbers, maps, the think channel */
        return true;
    }
}

static bool nullable(const struct k3_grammar *g, const struct node *n, const bool *null)
{
    switch (n->kind) {
    case N_SEQ:
        for (uint32_t i = 0; i < n->n; i++)
            if (!null[g->kids[n->off + i]])
                return false;
        return true;
    case N_ALT:
        for (uint32_t i = 0; i < n->n; i++)
            if (null[g->kids[n->off + i]])
                return true;
        return false;
    case N_PROPS:
        if (!(n->flags & F_XTML))
            return false;
        for (uint32_t i = 0; i < n->n; i++)
            if (g->props[n->off + i].required)
                return false;
        return true;
    case N_STRING:
        return (n->flags & F_RAW) && n->lo == 0;
    case N_REASON:
        return true;
    default:
        return false;
    }
}

/* Least fixed point of rule over all nodes. */
static void fixpoint(const struct k3_grammar *g, bool *set,
                     bool (*rule)(const struct k3_grammar *, const struct node *, const bool *))
{
    memset(set, 0, g->n_nodes);
    for (bool changed = true; changed;) {
        changed = false;
        for (uint32_t i = 0; i < g->n_nodes; i++)
            if (!set[i] && rule(g, &g->nodes[i], set))
                set[i] = changed = true;
    }
}

/* Depth-first over the nodes a node enters before consuming anything (an ALT's kids, a
 * SEQ's kids up to its first that cannot be empty): a node met again on the path is a
 * loop that a step would follow forever.  color: 0 new, 1 on the path, 2 done. */
static bool loops(const struct k3_grammar *g, uint32_t id, const bool *null, uint8_t *color)
{
    if (color[id] == 1)
        return true;
    if (color[id] == 2)
        return false;
    color[id] = 1;
    const struct node *n = &g->nodes[id];
    if (n->kind == N_ALT || n->kind == N_SEQ)
        for (uint32_t i = 0; i < n->n; i++) {
            uint32_t k = g->kids[n->off + i];
            if (loops(g, k, null, color))
                return true;
            if (n->kind == N_SEQ && !null[k])
                break;
        }
    color[id] = 2;
    return false;
}

int gb_check(const struct k3_grammar *g, uint32_t *bad)
{
    bool *set = malloc(g->n_nodes);
    uint8_t *color = calloc(g->n_nodes, 1);
    int rc = 0;
    if (!set || !color) {
        *bad = NO_NODE;
        rc = -1;
        goto out;
    }
    fixpoint(g, set, nullable);
    for (uint32_t i = 0; i < g->n_nodes && !rc; i++)
        if (loops(g, i, set, color)) {
            *bad = i;
            rc = -1;
        }
    if (rc)
        goto out;
    fixpoint(g, set, can_end);
    for (uint32_t i = 0; i < g->n_nodes && !rc; i++)
        if (!set[i]) {
            *bad = i;
            rc = -1;
        }
out:
    free(set);
    free(color);
    return rc;
}
