/* One generation's position in a grammar: accepting tokens, and the mask of the tokens
 * allowed next.  See grammar.h.
 *
 * The mask walks the vocabulary trie depth-first, stepping the position by each byte and
 * skipping the subtree of any prefix the grammar refuses.  Two positions skip the walk
 * for nearly every token: the think channel (every text token) and the body of a string
 * (every token that continues valid UTF-8 and, in JSON, holds no quote, backslash or
 * control byte: a precomputed mask, then a walk over the few tokens that do).  Each of
 * the position's stacks is an alternative, so each takes its own shortcut and the masks
 * are joined.
 */
#include <stdlib.h>
#include <string.h>

#include "engine/grammar/step.h"
#include "engine/grammar/vocab_trie.h"

struct string_level {
    bool in; /* still in the string: a, b are its frame's state (else level[] holds it) */
    uint32_t a;
    uint64_t b;
};

struct k3_matcher {
    const struct k3_grammar *g;
    const struct k3_tokenizer *tok;
    int32_t special[4]; /* ids of <|open|>, <|close|>, <|sep|>, <|end_of_msg|> */
    struct stackset now;
    struct arena held[2]; /* now lives in held[which] */
    int which;
    struct arena scratch; /* steps not yet taken: a token's bytes, the mask's walk */
    struct stackset *level; /* [n_level] the walk's position after each prefix length */
    struct arena_mark *mark;
    struct string_level *str; /* [n_level] the walk's string state, while still in it */
    uint32_t n_level;
    bool broken; /* memory ran out: nothing is allowed any more */
};

int k3_matcher_new(const struct k3_grammar *g, const struct k3_tokenizer *tok,
                   struct k3_matcher **out, struct k3_err *err)
{
    static const char *const names[4] = {"<|open|>", "<|close|>", "<|sep|>", "<|end_of_msg|>"};
    struct k3_matcher *m = calloc(1, sizeof *m);
    if (!m)
        return k3_errf(err, "out of memory for a grammar matcher");
    m->g = g;
    m->tok = tok;
    for (int i = 0; i < 4; i++)
        if ((m->special[i] = k3_tok_special(tok, names[i])) < 0) {
            k3_matcher_free(m);
            return k3_errf(err, "grammar matcher: the tokenizer has no %s token", names[i]);
        }
    if (step_start(g, &m->held[0], &m->now)) {
        k3_matcher_free(m);
        return k3_errf(err, "out of memory for a grammar matcher");
    }
    *out = m;
    return 0;
}

void k3_matcher_free(struct k3_matcher *m)
{
    if (!m)
        return;
    arena_free(&m->held[0]);
    arena_free(&m->held[1]);
    arena_free(&m->scratch);
    free(m->level);
    free(m->mark);
    free(m->str);
    free(m);
}

bool k3_matcher_done(const struct k3_matcher *m)
{
    for (int i = 0; i < m->now.n; i++)
        if (!m->now.top[i])
            return true;
    return false;
}

/* The symbol of a structural token, or -1. */
static int special_sym(const int32_t *special, int32_t id)
{
    for (int i = 0; i < 4; i++)
        if (special[i] == id)
            return SYM_OPEN + i;
    return -1;
}

/* The position after token id, in m->scratch (NULL: id is not allowed). */
static const struct stackset *after_token(struct k3_matcher *m, int32_t id,
                                          struct stackset sets[2])
{
    uint16_t one = 0;
    const uint8_t *bytes = NULL;
    size_t len = 1;
    int sym = special_sym(m->special, id);
    if (m->broken)
        return NULL;
    if (sym >= 0)
        one = (uint16_t)sym;
    else if (k3_tok_is_special(m->tok, id) || !(bytes = k3_tok_bytes(m->tok, id, &len)) || !len)
        return NULL;
    arena_reset(&m->scratch, (struct arena_mark){0, 0});
    const struct stackset *cur = &m->now;
    for (size_t i = 0; i < len && cur->n; i++) {
        struct stackset *next = &sets[i & 1];
        if (step_set(m->g, &m->scratch, cur, bytes ? bytes[i] : one, next)) {
            m->broken = true;
            return NULL;
        }
        cur = next;
    }
    return cur->n ? cur : NULL;
}

bool k3_matcher_allows(struct k3_matcher *m, int32_t id)
{
    struct stackset sets[2];
    return after_token(m, id, sets) != NULL;
}

int k3_matcher_accept(struct k3_matcher *m, int32_t id)
{
    struct stackset sets[2];
    const struct stackset *after = after_token(m, id, sets);
    if (!after)
        return -1;
    struct arena *to = &m->held[!m->which];
    arena_reset(to, (struct arena_mark){0, 0});
    if (step_copy(to, after, &m->now)) {
        m->broken = true;
        return -1;
    }
    m->which = !m->which;
    return 0;
}

/* ================================================================= mask ==== */

static void or_words(uint32_t *dst, const uint32_t *src, int words)
{
    for (int w = 0; w < words; w++)
        dst[w] |= src[w];
}

/* dst |= the tokens of src that start at most room characters. */
static void or_short(uint32_t *dst, const uint32_t *src, const struct k3_vocab_trie *t,
                     uint64_t room)
{
    if (room >= t->max_chars) {
        or_words(dst, src, t->words);
        return;
    }
    const uint32_t *fit = t->short_of[room < SHORT_CHARS ? room : SHORT_CHARS - 1];
    for (int w = 0; w < t->words; w++)
        dst[w] |= src[w] & fit[w];
    for (uint32_t i = 0; room >= SHORT_CHARS && i < t->n_long; i++) {
        int32_t id = t->long_ids[i];
        if (t->chars[id] <= room && (src[id >> 5] >> (id & 31) & 1))
            dst[id >> 5] |= 1u << (id & 31);
    }
}

static bool ensure_levels(struct k3_matcher *m, uint32_t depth)
{
    if (depth + 1 <= m->n_level)
        return true;
    struct stackset *l = realloc(m->level, (depth + 1) * sizeof *l);
    if (l)
        m->level = l;
    struct arena_mark *k = l ? realloc(m->mark, (depth + 1) * sizeof *k) : NULL;
    if (k)
        m->mark = k;
    struct string_level *s = k ? realloc(m->str, (depth + 1) * sizeof *s) : NULL;
    if (s)
        m->str = s;
    if (!l || !k || !s)
        return false;
    m->n_level = depth + 1;
    return true;
}

/* Sets the bit of every token of trie tr that the position from takes whole. */
static int walk(struct k3_matcher *m, const struct flat_trie *tr, const struct stackset *from,
                uint32_t *bits)
{
    if (!ensure_levels(m, tr->max_depth))
        return -1;
    struct arena *ar = &m->scratch;
    m->level[0] = *from;
    m->mark[0] = arena_mark(ar);
    for (uint32_t i = 0; i < tr->n;) {
        uint32_t d = tr->depth[i];
        arena_reset(ar, m->mark[d - 1]);
        if (step_set(m->g, ar, &m->level[d - 1], tr->byte[i], &m->level[d]))
            return -1;
        if (!m->level[d].n) {
            i = tr->next[i];
            continue;
        }
        if (tr->token[i] >= 0)
            bits[tr->token[i] >> 5] |= 1u << (tr->token[i] & 31);
        m->mark[d] = arena_mark(ar);
        i++;
    }
    return 0;
}

/* walk() for one stack whose top is a JSON string: while a prefix stays in the string its
 * state is stepped inline (no frames); once the string closes, the walk goes on from the
 * frame below as walk() does. */
static int walk_string(struct k3_matcher *m, const struct flat_trie *tr, const struct frame *top,
                       uint32_t *bits)
{
    if (!ensure_levels(m, tr->max_depth))
        return -1;
    struct arena *ar = &m->scratch;
    const struct node *n = &m->g->nodes[top->node];
    m->str[0] = (struct string_level){true, top->a, top->b};
    m->mark[0] = arena_mark(ar);
    for (uint32_t i = 0; i < tr->n;) {
        uint32_t d = tr->depth[i];
        const struct string_level *up = &m->str[d - 1];
        struct string_level *here = &m->str[d];
        bool ok;
        if (up->in) {
            *here = *up;
            enum string_move move = string_step(n, &here->a, &here->b, tr->byte[i]);
            ok = move == STR_STAY || move == STR_POP;
            if (move == STR_POP) { /* the quote: the frame below goes on */
                here->in = false;
                m->level[d] = (struct stackset){.n = 1, .top = {top->up}};
            }
        } else {
            arena_reset(ar, m->mark[d - 1]);
            if (step_set(m->g, ar, &m->level[d - 1], tr->byte[i], &m->level[d]))
                return -1;
            here->in = false;
            ok = m->level[d].n > 0;
        }
        if (!ok) {
            i = tr->next[i];
            continue;
        }
        if (tr->token[i] >= 0)
            bits[tr->token[i] >> 5] |= 1u << (tr->token[i] & 31);
        m->mark[d] = arena_mark(ar);
        i++;
    }
    return 0;
}

/* The shortcut for a stack whose top is a string's body or the think channel: 1 when
 * taken (its tokens are in bits), 0 when the stack needs the whole walk. */
static int shortcut(struct k3_matcher *m, const struct k3_vocab_trie *t, const struct frame *top,
                    uint32_t *bits)
{
    if (m->g->nodes[top->node].kind == N_REASON) {
        or_words(bits, t->text, t->words);
        return 1;
    }
    bool raw;
    uint8_t utf8;
    uint64_t chars;
    int64_t max;
    if (!step_string_body(m->g, top, &raw, &utf8, &chars, &max))
        return 0;
    uint64_t room = (uint64_t)max - chars;
    if (raw) {
        or_short(bits, t->raw[utf8], t, room);
        return 1;
    }
    or_short(bits, t->json[utf8], t, room);
    return walk_string(m, &t->stops, top, bits) ? -1 : 1;
}

void k3_matcher_mask(struct k3_matcher *m, const struct k3_vocab_trie *t, uint32_t *bits)
{
    memset(bits, 0, (size_t)t->words * sizeof *bits);
    if (m->broken)
        return;
    arena_reset(&m->scratch, (struct arena_mark){0, 0});
    struct stackset rest = {0};
    for (int i = 0; i < m->now.n; i++) {
        const struct frame *top = m->now.top[i];
        int r = top ? shortcut(m, t, top, bits) : 1;
        if (r < 0)
            goto broken;
        if (!r)
            rest.top[rest.n++] = top;
    }
    if (rest.n && walk(m, &t->all, &rest, bits))
        goto broken;
    for (int i = 0; i < 4; i++) {
        struct stackset after;
        arena_reset(&m->scratch, (struct arena_mark){0, 0});
        if (step_set(m->g, &m->scratch, &m->now, (uint16_t)(SYM_OPEN + i), &after))
            goto broken;
        if (after.n)
            bits[t->special[i] >> 5] |= 1u << (t->special[i] & 31);
    }
    return;
broken:
    m->broken = true;
    memset(bits, 0, (size_t)t->words * sizeof *bits);
}
