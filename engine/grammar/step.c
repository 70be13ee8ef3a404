/* Stepping the grammar's stacks by one symbol.  See step.h.
 *
 * A frame's node decides what a symbol does: consume it (a new frame replaces this one,
 * or this one is popped when its node is finished), hand it to the frame below because
 * the node is finished without it (numbers, enums that are prefixes of others, raw
 * text), or refuse it.  A node that contains another pushes a frame holding where to
 * go on when the child pops.  That hand-down is unambiguous because in every grammar
 * made here what may follow a node never continues it (a JSON value is followed by , } ]
 * or a structural token; raw text and the think channel by a structural token).
 *
 * Local state per kind (a, b):
 *   LIT      a: symbols matched
 *   SEQ      a: the kid to start next
 *   CHOICE   a: trie node reached
 *   STRING   a: phase | UTF-8 state << 3 | hex digits << 6 | hex value << 8; b: characters
 *   NUMBER   a: phase; b: digits in the current part
 *   INTEGER  a: phase | negative << 2 | digits << 3; b: magnitude
 *   PROPS    a: phase | any taken << 2 | next property << 3; b: candidate | matched << 32
 *   MAP      a: phase
 *   ARRAY    a: phase; b: items
 */
#include "engine/grammar/step.h"

#include <stdlib.h>
#include <string.h>

#define CHUNK (64 * 1024)
#define STEP_GUARD 4096 /* frames visited for one symbol: far above any grammar's need */

/* ================================================================ arena ==== */

static void *arena_alloc(struct arena *a, size_t size)
{
    if (a->n_chunks == 0 || a->used + size > CHUNK) {
        size_t next = a->n_chunks == 0 ? 0 : a->cur + 1;
        if (next == a->n_chunks) {
            char **c = realloc(a->chunk, (a->n_chunks + 1) * sizeof *c);
            char *mem = c ? malloc(CHUNK) : NULL;
            if (c)
                a->chunk = c;
            if (!mem) {
                a->oom = true;
                return NULL;
            }
            a->chunk[a->n_chunks++] = mem;
        }
        a->cur = next;
        a->used = 0;
    }
    void *p = a->chunk[a->cur] + a->used;
    a->used += size;
    return p;
}

void arena_free(struct arena *a)
{
    for (size_t i = 0; i < a->n_chunks; i++)
        free(a->chunk[i]);
    free(a->chunk);
    memset(a, 0, sizeof *a);
}

/* ================================================================ stacks ==== */

struct ctx {
    const struct k3_grammar *g;
    struct arena *ar;
    struct stackset *out;
    int guard;
    bool full; /* an alternative did not fit in out */
};

static const struct frame *mk(struct ctx *c, const struct frame *up, uint32_t node, uint32_t a,
                              uint64_t b)
{
    uint32_t depth = up ? up->depth + 1 : 1;
    if (depth > MAX_DEPTH)
        return NULL;
    struct frame *f = arena_alloc(c->ar, sizeof *f);
    if (f)
        *f = (struct frame){.up = up, .node = node, .depth = depth, .a = a, .b = b};
    return f;
}

enum { P_START, P_NEXT, P_AFTER_SEP, P_KEY };

/* A frame for node at its start. */
static const struct frame *start(struct ctx *c, const struct frame *up, uint32_t node)
{
    const struct node *n = &c->g->nodes[node];
    uint32_t a = 0;
    if (n->kind == N_CHOICE)
        a = n->off;
    else if (n->kind == N_STRING && (n->flags & F_RAW))
        a = S_BODY;
    else if (n->kind == N_PROPS && (n->flags & F_XTML))
        a = P_NEXT;
    return mk(c, up, node, a, 0);
}

static bool same_stack(const struct frame *x, const struct frame *y)
{
    while (x != y) {
        if (!x || !y || x->node != y->node || x->a != y->a || x->b != y->b)
            return false;
        x = x->up;
        y = y->up;
    }
    return true;
}

static void emit(struct ctx *c, const struct frame *top)
{
    struct stackset *out = c->out;
    for (int i = 0; i < out->n; i++)
        if (same_stack(out->top[i], top))
            return;
    if (out->n == MAX_STACKS)
        c->full = true;
    else
        out->top[out->n++] = top;
}

/* Emits a frame just made (NULL: it could not be, the symbol is refused this way). */
static void emit_new(struct ctx *c, const struct frame *f)
{
    if (f)
        emit(c, f);
}

static void step(struct ctx *c, const struct frame *f, uint16_t sym);

/* The node of f is finished without sym: the frame below takes it. */
static void hand_down(struct ctx *c, const struct frame *f, uint16_t sym)
{
    if (f->up)
        step(c, f->up, sym);
}

/* Starts node on top of up and gives it sym. */
static void enter(struct ctx *c, const struct frame *up, uint32_t node, uint16_t sym)
{
    const struct frame *f = start(c, up, node);
    if (f)
        step(c, f, sym);
}

/* ================================================================ kinds ==== */

static void step_lit(struct ctx *c, const struct frame *f, const struct node *n, uint16_t sym)
{
    if (c->g->lit[n->off + f->a] != sym)
        return;
    if (f->a + 1 == n->n)
        emit(c, f->up);
    else
        emit_new(c, mk(c, f->up, f->node, f->a + 1, 0));
}

static void step_seq(struct ctx *c, const struct frame *f, const struct node *n, uint16_t sym)
{
    if (f->a == n->n) { /* an empty sequence */
        hand_down(c, f, sym);
        return;
    }
    uint32_t kid = c->g->kids[n->off + f->a];
    /* The last kid replaces the sequence: nothing to come back to. */
    const struct frame *base = f->a + 1 == n->n ? f->up : mk(c, f->up, f->node, f->a + 1, 0);
    if (base || f->a + 1 == n->n)
        enter(c, base, kid, sym);
}

static void step_choice(struct ctx *c, const struct frame *f, uint16_t sym)
{
    const struct trie_node *t = c->g->trie;
    for (uint32_t k = t[f->a].first; k; k = t[k].next) {
        if (t[k].sym != sym)
            continue;
        if (t[k].accept && t[k].cont != NO_NODE) /* literals with a continuation end the trie */
            emit_new(c, start(c, f->up, t[k].cont));
        else if (t[k].accept && !t[k].first)
            emit(c, f->up);
        else
            emit_new(c, mk(c, f->up, f->node, k, 0));
        return;
    }
    if (t[f->a].accept)
        hand_down(c, f, sym);
}

static uint32_t string_state(uint32_t phase, uint32_t utf8, uint32_t hex_n, uint32_t hex)
{
    return phase | utf8 << 3 | hex_n << 6 | hex << 8;
}

static int hex_digit(uint16_t sym)
{
    if (sym >= '0' && sym <= '9')
        return sym - '0';
    if (sym >= 'a' && sym <= 'f')
        return sym - 'a' + 10;
    if (sym >= 'A' && sym <= 'F')
        return sym - 'A' + 10;
    return -1;
}

/* After \u: four hex digits naming a character other than NUL and the surrogates (a
 * lone surrogate is not valid JSON text; characters past U+FFFF come as UTF-8). */
static enum string_move string_hex(uint32_t *a, uint64_t *chars, uint16_t sym)
{
    int d = hex_digit(sym);
    uint32_t k = (*a >> 6 & 3) + 1, v = (*a >> 8 & 0xFFFF) * 16 + (uint32_t)(d < 0 ? 0 : d);
    if (d < 0 || (k == 2 && v >= 0xD8 && v <= 0xDF) || (k == 4 && v == 0))
        return STR_REFUSE;
    if (k == 4)
        ++*chars;
    *a = k == 4 ? string_state(S_BODY, 0, 0, 0) : string_state(S_HEX, 0, k, v);
    return STR_STAY;
}

enum string_move string_step(const struct node *n, uint32_t *a, uint64_t *chars, uint16_t sym)
{
    uint32_t phase = *a & 7, utf8 = *a >> 3 & 7;
    bool raw = n->flags & F_RAW;
    if (phase == S_OPEN) {
        *a = string_state(S_BODY, 0, 0, 0);
        return sym == '"' ? STR_STAY : STR_REFUSE;
    }
    if (phase == S_ESC) {
        *a = string_state(sym == 'u' ? S_HEX : S_BODY, 0, 0, 0);
        if (sym == 'u')
            return STR_STAY;
        if (sym >= 256 || !sym || !strchr("\"\\/bfnrt", sym))
            return STR_REFUSE;
        ++*chars;
        return STR_STAY;
    }
    if (phase == S_HEX)
        return string_hex(a, chars, sym);
    bool may_end = utf8 == 0 && (int64_t)*chars >= n->lo;
    if (sym >= 256)
        return raw && may_end ? STR_HAND_DOWN : STR_REFUSE;
    if (!raw && sym == '"')
        return may_end ? STR_POP : STR_REFUSE;
    if (!raw && sym == '\\') { /* the escape's character is counted when it is complete */
        *a = string_state(S_ESC, 0, 0, 0);
        return utf8 == 0 && (int64_t)*chars < n->hi ? STR_STAY : STR_REFUSE;
    }
    if (!raw && sym < 0x20)
        return STR_REFUSE;
    uint8_t u = utf8_next((uint8_t)utf8, (uint8_t)sym);
    *chars += utf8_starts_char((uint8_t)sym);
    *a = string_state(S_BODY, u, 0, 0);
    return u != UTF8_BAD && (int64_t)*chars <= n->hi ? STR_STAY : STR_REFUSE;
}

static void step_string(struct ctx *c, const struct frame *f, const struct node *n, uint16_t sym)
{
    uint32_t a = f->a;
    uint64_t chars = f->b;
    switch (string_step(n, &a, &chars, sym)) {
    case STR_STAY:
        emit_new(c, mk(c, f->up, f->node, a, chars));
        break;
    case STR_POP:
        emit(c, f->up);
        break;
    case STR_HAND_DOWN:
        hand_down(c, f, sym);
        break;
    case STR_REFUSE:
        break;
    }
}

/* JSON number phases: start, after '-', integer digits, a lone 0, after '.', fraction
 * digits, after 'e', after the exponent's sign, exponent digits. */
enum { NUM_START, NUM_MINUS, NUM_INT, NUM_ZERO, NUM_DOT, NUM_FRAC, NUM_E, NUM_ESIGN, NUM_EXP };

static void step_number(struct ctx *c, const struct frame *f, uint16_t sym)
{
    bool digit = sym >= '0' && sym <= '9', e = sym == 'e' || sym == 'E';
    uint32_t to = UINT32_MAX;
    uint64_t nd = 1;
    switch (f->a) {
    case NUM_START:
    case NUM_MINUS:
        if (sym == '-' && f->a == NUM_START)
            to = NUM_MINUS;
        else if (digit)
            to = sym == '0' ? NUM_ZERO : NUM_INT;
        break;
    case NUM_INT:
    case NUM_FRAC:
    case NUM_EXP: {
        uint64_t cap = f->a == NUM_INT ? INT_DIGITS_MAX : f->a == NUM_FRAC ? FRAC_DIGITS_MAX
                                                                          : EXP_DIGITS_MAX;
        if (digit && f->b < cap) {
            to = f->a;
            nd = f->b + 1;
            break;
        }
    } /* fall through */
    case NUM_ZERO:
        if (sym == '.' && (f->a == NUM_INT || f->a == NUM_ZERO))
            to = NUM_DOT;
        else if (e && f->a != NUM_EXP)
            to = NUM_E;
        else {
            hand_down(c, f, sym);
            return;
        }
        break;
    case NUM_DOT:
        to = digit ? NUM_FRAC : to;
        break;
    case NUM_E:
        to = digit ? NUM_EXP : sym == '+' || sym == '-' ? NUM_ESIGN : to;
        break;
    case NUM_ESIGN:
        to = digit ? NUM_EXP : to;
        break;
    }
    if (to != UINT32_MAX)
        emit_new(c, mk(c, f->up, f->node, to, nd));
}

/* Whether a magnitude m of nd digits can still grow (by appending digits, at most
 * INT_DIGITS_MAX in all) into one in [lo, hi] (lo >= 1). */
static bool magnitude_reachable(uint64_t m, uint32_t nd, int64_t lo, int64_t hi)
{
    if (hi < lo)
        return false;
    uint64_t p = 1;
    for (uint32_t k = 0; nd + k <= INT_DIGITS_MAX; k++, p *= 10) {
        uint64_t first = m * p, last = first + p - 1; /* < 10^18: no overflow */
        if (first > (uint64_t)hi)
            return false;
        if (last >= (uint64_t)lo)
            return true;
    }
    return false;
}

/* An integer of sign neg and magnitude m (nd digits) can still end in [lo, hi]. */
static bool integer_reachable(const struct node *n, bool neg, uint64_t m, uint32_t nd)
{
    if (neg)
        return magnitude_reachable(m, nd, n->hi < -1 ? -n->hi : 1, -n->lo);
    return magnitude_reachable(m, nd, n->lo > 1 ? n->lo : 1, n->hi);
}

static bool integer_in_range(const struct node *n, bool neg, uint64_t m)
{
    int64_t v = neg ? -(int64_t)m : (int64_t)m;
    return v >= n->lo && v <= n->hi;
}

enum { INT_START, INT_MINUS, INT_DIGITS, INT_ZERO };

static void step_integer(struct ctx *c, const struct frame *f, const struct node *n, uint16_t sym)
{
    uint32_t phase = f->a & 3, nd = f->a >> 3;
    bool neg = f->a >> 2 & 1, digit = sym >= '0' && sym <= '9';
    uint64_t m = f->b, d = (uint64_t)(sym - '0');
    switch (phase) {
    case INT_START:
        if (sym == '-' && n->lo <= -1)
            emit_new(c, mk(c, f->up, f->node, INT_MINUS | 1 << 2, 0));
        else if (sym == '0' && n->lo <= 0 && n->hi >= 0)
            emit_new(c, mk(c, f->up, f->node, INT_ZERO, 0));
        else if (digit && d > 0 && integer_reachable(n, false, d, 1))
            emit_new(c, mk(c, f->up, f->node, INT_DIGITS | 1 << 3, d));
        return;
    case INT_MINUS:
        if (digit && d > 0 && integer_reachable(n, true, d, 1))
            emit_new(c, mk(c, f->up, f->node, INT_DIGITS | 1 << 2 | 1 << 3, d));
        return;
    case INT_DIGITS:
        if (digit && nd < INT_DIGITS_MAX && integer_reachable(n, neg, m * 10 + d, nd + 1)) {
            emit_new(c, mk(c, f->up, f->node, INT_DIGITS | (uint32_t)neg << 2 | (nd + 1) << 3,
                           m * 10 + d));
            return;
        }
        if (integer_in_range(n, neg, m))
            hand_down(c, f, sym);
        return;
    default:
        hand_down(c, f, sym);
    }
}

/* ============================================================ properties ==== */

static uint32_t props_next(const struct frame *f)
{
    return f->a >> 3;
}

/* The last property that may come next: up to and including the first required one. */
static uint32_t props_last(const struct k3_grammar *g, const struct node *n, uint32_t next)
{
    for (uint32_t j = next; j < n->n; j++)
        if (g->props[n->off + j].required)
            return j;
    return n->n - 1;
}

static bool props_may_close(const struct k3_grammar *g, const struct node *n, uint32_t next)
{
    for (uint32_t j = next; j < n->n; j++)
        if (g->props[n->off + j].required)
            return false;
    return true;
}

static uint32_t props_state(uint32_t phase, bool any, uint32_t next)
{
    return phase | (uint32_t)any << 2 | next << 3;
}

/* The key headers of properties next .. last are matched together: the state keeps the
 * first property (cand) whose header begins with what came so far, and pos symbols. */
static void step_key(struct ctx *c, const struct frame *f, const struct node *n, uint16_t sym,
                     uint32_t cand, uint32_t pos)
{
    const struct k3_grammar *g = c->g;
    uint32_t next = props_next(f), last = props_last(g, n, next);
    bool any = f->a >> 2 & 1;
    const struct prop *pc = &g->props[n->off + cand];
    for (uint32_t j = cand; j <= last; j++) {
        const struct prop *p = &g->props[n->off + j];
        if (p->key_len <= pos || g->lit[p->key_off + pos] != sym ||
            memcmp(g->lit + p->key_off, g->lit + pc->key_off, pos * sizeof *g->lit))
            continue;
        if (pos + 1 < p->key_len) {
            emit_new(c, mk(c, f->up, f->node, props_state(P_KEY, any, next),
                           j | (uint64_t)(pos + 1) << 32));
            return;
        }
        const struct frame *base = mk(c, f->up, f->node, props_state(P_NEXT, true, j + 1), 0);
        if (base)
            emit_new(c, start(c, base, p->value));
        return;
    }
}

static void step_props(struct ctx *c, const struct frame *f, const struct node *n, uint16_t sym)
{
    const struct k3_grammar *g = c->g;
    uint32_t phase = f->a & 3, next = props_next(f);
    bool any = f->a >> 2 & 1, xtml = n->flags & F_XTML, more = next < n->n;
    bool may_close = props_may_close(g, n, next);
    switch (phase) {
    case P_START:
        if (sym == '{')
            emit_new(c, mk(c, f->up, f->node, props_state(P_NEXT, false, 0), 0));
        return;
    case P_NEXT:
        if (xtml) {
            if (more)
                step_key(c, f, n, sym, next, 0);
            if (may_close)
                hand_down(c, f, sym);
            return;
        }
        if (sym == '}' && may_close)
            emit(c, f->up);
        else if (any && sym == ',' && more)
            emit_new(c, mk(c, f->up, f->node, props_state(P_AFTER_SEP, any, next), 0));
        else if (!any && more)
            step_key(c, f, n, sym, next, 0);
        return;
    case P_AFTER_SEP:
        step_key(c, f, n, sym, next, 0);
        return;
    default:
        step_key(c, f, n, sym, (uint32_t)f->b, (uint32_t)(f->b >> 32));
    }
}

/* ======================================================== maps, arrays ==== */

enum { M_START, M_AFTER_OPEN, M_AFTER_KEY, M_AFTER_VALUE, M_AFTER_COMMA };

static void step_map(struct ctx *c, const struct frame *f, const struct node *n, uint16_t sym)
{
    const struct frame *base;
    switch (f->a) {
    case M_START:
        if (sym == '{')
            emit_new(c, mk(c, f->up, f->node, M_AFTER_OPEN, 0));
        return;
    case M_AFTER_VALUE:
        if (sym == ',')
            emit_new(c, mk(c, f->up, f->node, M_AFTER_COMMA, 0));
        else if (sym == '}')
            emit(c, f->up);
        return;
    case M_AFTER_OPEN:
    case M_AFTER_COMMA:
        if (sym == '}' && f->a == M_AFTER_OPEN)
            emit(c, f->up);
        else if ((base = mk(c, f->up, f->node, M_AFTER_KEY, 0)))
            enter(c, base, n->off, sym);
        return;
    default: /* M_AFTER_KEY */
        if (sym == ':' && (base = mk(c, f->up, f->node, M_AFTER_VALUE, 0)))
            emit_new(c, start(c, base, n->kid));
    }
}

enum { A_START, A_AFTER_OPEN, A_AFTER_ITEM, A_AFTER_COMMA };

static void step_array(struct ctx *c, const struct frame *f, const struct node *n, uint16_t sym)
{
    uint64_t items = f->b;
    switch (f->a) {
    case A_START:
        if (sym == '[')
            emit_new(c, mk(c, f->up, f->node, A_AFTER_OPEN, 0));
        return;
    case A_AFTER_ITEM:
        if (sym == ',' && (int64_t)items < n->hi)
            emit_new(c, mk(c, f->up, f->node, A_AFTER_COMMA, items));
        else if (sym == ']' && (int64_t)items >= n->lo)
            emit(c, f->up);
        return;
    case A_AFTER_OPEN:
        if (sym == ']' && n->lo == 0)
            emit(c, f->up);
        if (n->hi == 0)
            return;
        /* fall through */
    default: { /* A_AFTER_COMMA, or the first item */
        const struct frame *base = mk(c, f->up, f->node, A_AFTER_ITEM, items + 1);
        if (base)
            enter(c, base, n->kid, sym);
    }
    }
}

/* ================================================================ step ==== */

static void step(struct ctx *c, const struct frame *f, uint16_t sym)
{
    if (++c->guard > STEP_GUARD)
        return;
    const struct node *n = &c->g->nodes[f->node];
    switch (n->kind) {
    case N_LIT:
        step_lit(c, f, n, sym);
        break;
    case N_SEQ:
        step_seq(c, f, n, sym);
        break;
    case N_ALT:
        for (uint32_t i = 0; i < n->n; i++)
            enter(c, f->up, c->g->kids[n->off + i], sym);
        break;
    case N_CHOICE:
        step_choice(c, f, sym);
        break;
    case N_STRING:
        step_string(c, f, n, sym);
        break;
    case N_NUMBER:
        step_number(c, f, sym);
        break;
    case N_INTEGER:
        step_integer(c, f, n, sym);
        break;
    case N_PROPS:
        step_props(c, f, n, sym);
        break;
    case N_MAP:
        step_map(c, f, n, sym);
        break;
    case N_ARRAY:
        step_array(c, f, n, sym);
        break;
    case N_REASON:
        if (sym < 256)
            emit(c, f);
        else
            hand_down(c, f, sym);
        break;
    }
}

int step_set(const struct k3_grammar *g, struct arena *ar, const struct stackset *in,
             uint16_t sym, struct stackset *out)
{
    out->n = 0;
    struct ctx c = {.g = g, .ar = ar, .out = out};
    for (int i = 0; i < in->n; i++) {
        c.guard = 0;
        if (in->top[i])
            step(&c, in->top[i], sym);
    }
    if (c.full)
        out->n = 0;
    return ar->oom ? -1 : 0;
}

int step_start(const struct k3_grammar *g, struct arena *ar, struct stackset *out)
{
    struct ctx c = {.g = g, .ar = ar, .out = out};
    out->n = 0;
    emit_new(&c, start(&c, NULL, g->root));
    return out->n == 1 ? 0 : -1;
}

int step_copy(struct arena *ar, const struct stackset *in, struct stackset *out)
{
    out->n = in->n;
    for (int i = 0; i < in->n; i++) {
        const struct frame *chain[MAX_DEPTH];
        int d = 0;
        for (const struct frame *f = in->top[i]; f; f = f->up)
            chain[d++] = f;
        const struct frame *up = NULL;
        while (d--) {
            struct frame *f = arena_alloc(ar, sizeof *f);
            if (!f)
                return -1;
            *f = *chain[d];
            f->up = up;
            up = f;
        }
        out->top[i] = up;
    }
    return 0;
}

int step_string_body(const struct k3_grammar *g, const struct frame *f, bool *raw,
                     uint8_t *utf8, uint64_t *chars, int64_t *max_chars)
{
    const struct node *n = &g->nodes[f->node];
    if (n->kind != N_STRING || (f->a & 7) != S_BODY)
        return 0;
    *raw = n->flags & F_RAW;
    *utf8 = f->a >> 3 & 7;
    *chars = f->b;
    *max_chars = n->hi;
    return 1;
}
