/* Byte-level BPE training for synthetic vocabularies (k3_bpe_learn).
 *
 * The rules, all frozen (they define every synthetic tiktoken.model):
 *  1. The corpus is k3_corpus (engine/synth/corpus/), pre-tokenized with
 *     K3_PRETOKENIZE_PATTERN_PCRE2.  Merges never cross pieces.  Equal pieces are
 *     counted once with their multiplicity.
 *  2. Ranks 0..255 are the single bytes in byte order.
 *  3. Each step takes the adjacent pair (a, b) with the largest count (occurrences in
 *     the current segmentation, times piece multiplicity); ties go to the smaller rank
 *     a, then the smaller rank b.  Its occurrences are merged left to right.
 *  4. The join gets the next rank only if it stays reachable: tiktoken's encoder, run
 *     on its bytes with the ranks so far, must end in exactly two tokens (which the
 *     new rank then joins).  By induction every rank r then encodes to [r] from its
 *     own bytes, and adding r changes no earlier encoding.  A pair failing this is
 *     never merged.  A join whose bytes already are a token (reached by another
 *     split) is merged into that token and takes no rank.
 *  5. When no pair is left (k3-bench's 163584 ranks need more than the corpus has),
 *     the remaining ranks are word-like joins head + tail: heads are the tokens of
 *     two or more bytes made of letters with at most one leading space, tails those
 *     made of lowercase letters (and marks), both in rank order.  Candidates run over the diagonals
 *     i + j = 0, 1, 2, ... of (head i, tail j), i ascending, and are taken when the
 *     join is new, at most 32 bytes, one whole K3 pre-token piece, and reachable as in
 *     rule 4.  (Should that ever run dry, any two tokens are joined the same way.)
 */
#include "engine/synth/bpe_train.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "engine/text/bpe.h"
#include "engine/text/bytemap.h"
#include "engine/text/pretok.h"
#include "engine/text/tokenizer.h"
#include "engine/text/utf8.h"

/* ============================================================ pair table ==== */

struct pair {
    int32_t a, b;
    int64_t count;
    uint32_t *pos; /* [npos] symbol positions where the pair may start (may be stale) */
    uint32_t npos, cap;
    uint32_t stamp; /* last merge step that touched it */
    bool banned;
};

struct heap_ent {
    int64_t count;
    int32_t a, b;
};

struct trainer {
    /* symbols of all unique pieces, one linked list per piece */
    int32_t *sym;  /* [n_sym] token id, -1: merged away */
    int32_t *nxt, *prv; /* [n_sym] neighbours in the piece, -1 at the ends */
    uint32_t *word; /* [n_sym] piece of the symbol */
    int64_t *wcount; /* [n_words] multiplicity of each piece */
    size_t n_sym, n_words;
    size_t cap_sym, cap_words;

    struct pair *pairs; /* [n_pairs] */
    size_t n_pairs, cap_pairs;
    int32_t *ptab; /* [pmask + 1] pair index, -1 empty */
    size_t pmask;

    struct heap_ent *heap; /* [n_heap] */
    size_t n_heap, cap_heap;

    uint32_t *touched; /* pair indices changed in this step */
    size_t n_touched, cap_touched;
    uint32_t step;
    bool oom;
};

static inline uint64_t mix64(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return x;
}

static inline uint64_t pair_key(int32_t a, int32_t b)
{
    return (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
}

static int64_t pair_find(const struct trainer *t, int32_t a, int32_t b)
{
    if (!t->ptab)
        return -1;
    for (size_t i = mix64(pair_key(a, b)) & t->pmask;; i = (i + 1) & t->pmask) {
        int32_t p = t->ptab[i];
        if (p < 0)
            return -1;
        if (t->pairs[p].a == a && t->pairs[p].b == b)
            return p;
    }
}

static int64_t pair_get(struct trainer *t, int32_t a, int32_t b)
{
    int64_t p = pair_find(t, a, b);
    if (p >= 0)
        return p;
    if (t->n_pairs == t->cap_pairs) {
        size_t cap = t->cap_pairs ? 2 * t->cap_pairs : 1 << 16;
        struct pair *np = realloc(t->pairs, cap * sizeof *np);
        if (!np)
            return -1;
        t->pairs = np;
        t->cap_pairs = cap;
    }
    if (2 * (t->n_pairs + 1) > t->pmask + 1) {
        size_t cap = t->pmask ? 2 * (t->pmask + 1) : 1 << 17;
        int32_t *tab = malloc(cap * sizeof *tab);
        if (!tab)
            return -1;
        for (size_t i = 0; i < cap; i++)
            tab[i] = -1;
        for (size_t k = 0; k < t->n_pairs; k++) {
            size_t i = mix64(pair_key(t->pairs[k].a, t->pairs[k].b)) & (cap - 1);
            while (tab[i] >= 0)
                i = (i + 1) & (cap - 1);
            tab[i] = (int32_t)k;
        }
        free(t->ptab);
        t->ptab = tab;
        t->pmask = cap - 1;
    }
    p = (int64_t)t->n_pairs++;
    t->pairs[p] = (struct pair){.a = a, .b = b};
    size_t i = mix64(pair_key(a, b)) & t->pmask;
    while (t->ptab[i] >= 0)
        i = (i + 1) & t->pmask;
    t->ptab[i] = (int32_t)p;
    return p;
}

/* Adds delta to the count of (a, b); a positive delta also records position pos. */
static void pair_add(struct trainer *t, int32_t a, int32_t b, int64_t delta, uint32_t pos)
{
    int64_t p = pair_get(t, a, b);
    if (p < 0) {
        t->oom = true;
        return;
    }
    struct pair *pr = &t->pairs[p];
    pr->count += delta;
    if (delta > 0) {
        if (pr->npos == pr->cap) {
            uint32_t cap = pr->cap ? 2 * pr->cap : 4;
            uint32_t *np = realloc(pr->pos, cap * sizeof *np);
            if (!np) {
                t->oom = true;
                return;
            }
            pr->pos = np;
            pr->cap = cap;
        }
        pr->pos[pr->npos++] = pos;
    }
    if (pr->stamp != t->step) {
        pr->stamp = t->step;
        if (t->n_touched == t->cap_touched) {
            size_t cap = t->cap_touched ? 2 * t->cap_touched : 1024;
            uint32_t *nt = realloc(t->touched, cap * sizeof *nt);
            if (!nt) {
                t->oom = true;
                return;
            }
            t->touched = nt;
            t->cap_touched = cap;
        }
        t->touched[t->n_touched++] = (uint32_t)p;
    }
}

/* Max-heap on count; ties: smaller a, then smaller b (rule 3). */
static inline bool ent_before(const struct heap_ent *x, const struct heap_ent *y)
{
    if (x->count != y->count)
        return x->count > y->count;
    if (x->a != y->a)
        return x->a < y->a;
    return x->b < y->b;
}

static int heap_push_ent(struct trainer *t, struct heap_ent e)
{
    if (t->n_heap == t->cap_heap) {
        size_t cap = t->cap_heap ? 2 * t->cap_heap : 1 << 16;
        struct heap_ent *nh = realloc(t->heap, cap * sizeof *nh);
        if (!nh)
            return -1;
        t->heap = nh;
        t->cap_heap = cap;
    }
    size_t i = t->n_heap++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!ent_before(&e, &t->heap[p]))
            break;
        t->heap[i] = t->heap[p];
        i = p;
    }
    t->heap[i] = e;
    return 0;
}

static struct heap_ent heap_pop_ent(struct trainer *t)
{
    struct heap_ent top = t->heap[0], e = t->heap[--t->n_heap];
    size_t i = 0, n = t->n_heap;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n)
            break;
        if (c + 1 < n && ent_before(&t->heap[c + 1], &t->heap[c]))
            c++;
        if (!ent_before(&t->heap[c], &e))
            break;
        t->heap[i] = t->heap[c];
        i = c;
    }
    if (n)
        t->heap[i] = e;
    return top;
}

static void trainer_free(struct trainer *t)
{
    free(t->sym);
    free(t->nxt);
    free(t->prv);
    free(t->word);
    free(t->wcount);
    for (size_t i = 0; i < t->n_pairs; i++)
        free(t->pairs[i].pos);
    free(t->pairs);
    free(t->ptab);
    free(t->heap);
    free(t->touched);
}

static int cmp_u32(const void *x, const void *y)
{
    uint32_t a = *(const uint32_t *)x, b = *(const uint32_t *)y;
    return (a > b) - (a < b);
}

/* ============================================================ corpus pieces = */

/* Appends a piece not seen before, p[0..n): multiplicity 1, its bytes as symbols; seen
 * maps its bytes to its index. */
static int add_piece(struct trainer *t, struct k3_bytemap *seen, const uint8_t *p, size_t n)
{
    if (t->n_words == t->cap_words) {
        size_t cap = t->cap_words ? 2 * t->cap_words : 1 << 14;
        int64_t *nw = realloc(t->wcount, cap * sizeof *nw);
        if (!nw)
            return -1;
        t->wcount = nw;
        t->cap_words = cap;
    }
    if (t->n_sym + n > t->cap_sym) {
        size_t cap = t->cap_sym ? t->cap_sym : 1 << 16;
        while (t->n_sym + n > cap)
            cap *= 2;
        int32_t *ns = realloc(t->sym, cap * sizeof *ns);
        if (!ns)
            return -1;
        t->sym = ns;
        t->cap_sym = cap;
    }
    if (k3_bm_add(seen, p, n, (int32_t)t->n_words, true))
        return -1;
    t->wcount[t->n_words++] = 1;
    for (size_t k = 0; k < n; k++)
        t->sym[t->n_sym++] = p[k];
    return 0;
}

/* Links each piece's symbols into a list (nxt, prv) and notes their piece (word).
 * Symbols were appended piece by piece, in piece order. */
static int link_symbols(struct trainer *t, const struct k3_bytemap *seen)
{
    t->nxt = malloc((t->n_sym + 1) * sizeof *t->nxt);
    t->prv = malloc((t->n_sym + 1) * sizeof *t->prv);
    t->word = malloc((t->n_sym + 1) * sizeof *t->word);
    if (!t->nxt || !t->prv || !t->word)
        return -1;
    size_t s = 0;
    for (size_t w = 0; w < t->n_words; w++) {
        size_t n;
        k3_bm_bytes(seen, (int32_t)w, &n);
        for (size_t k = 0; k < n; k++) {
            t->word[s + k] = (uint32_t)w;
            t->prv[s + k] = k ? (int32_t)(s + k - 1) : -1;
            t->nxt[s + k] = k + 1 < n ? (int32_t)(s + k + 1) : -1;
        }
        s += n;
    }
    return 0;
}

/* Rule 1: the distinct pieces of text with their multiplicity, as symbol lists. */
static int collect_pieces(struct trainer *t, const struct k3_pretok *pre, const uint8_t *text,
                          size_t len, struct k3_bpe_stats *st, struct k3_err *err)
{
    struct k3_bytemap seen; /* piece bytes -> piece index */
    if (k3_bm_init(&seen, (int32_t)(len + 16), 1 << 14))
        return k3_errf(err, "synthesize: out of memory");
    struct k3_pretok_iter it;
    if (k3_pretok_iter_init(&it, pre, text, len, err)) {
        k3_bm_free(&seen);
        return -1;
    }
    int rc;
    size_t a, b;
    while ((rc = k3_pretok_next(&it, &a, &b, err)) == 1) {
        st->pieces++;
        int32_t w = k3_bm_find(&seen, text + a, b - a);
        if (w >= 0)
            t->wcount[w]++;
        else if (add_piece(t, &seen, text + a, b - a)) {
            rc = k3_errf(err, "synthesize: out of memory");
            break;
        }
    }
    k3_pretok_iter_free(&it);
    if (!rc && link_symbols(t, &seen))
        rc = k3_errf(err, "synthesize: out of memory");
    st->unique_pieces = t->n_words;
    k3_bm_free(&seen);
    return rc;
}

/* ============================================================ learning ====== */

/* Does tiktoken's encoder, run on p[0..n) with the ranks in vocab, end in 2 tokens? */
static bool joins_in_two(const struct k3_bytemap *vocab, const uint8_t *p, size_t n,
                         struct k3_bpe_scratch *s, int32_t *tmp)
{
    return k3_bpe_merge(vocab, p, n, s, tmp) == 2;
}

static int add_token(struct k3_bytemap *vocab, const uint8_t *p, size_t n, int32_t id,
                     struct k3_err *err)
{
    if (k3_bm_add(vocab, p, n, id, true))
        return k3_errf(err, "synthesize: out of memory");
    return 0;
}

/* One merge step of (a, b) into token id tok at every live occurrence. */
static void apply_merge(struct trainer *t, uint32_t pi, int32_t tok)
{
    int32_t a = t->pairs[pi].a, b = t->pairs[pi].b;
    uint32_t *list = t->pairs[pi].pos, n = t->pairs[pi].npos;
    t->pairs[pi].pos = NULL;
    t->pairs[pi].npos = t->pairs[pi].cap = 0;
    qsort(list, n, sizeof *list, cmp_u32);
    for (uint32_t k = 0; k < n; k++) {
        uint32_t i = list[k];
        if (k && list[k - 1] == i)
            continue;
        int32_t j = t->nxt[i];
        if (t->sym[i] != a || j < 0 || t->sym[j] != b)
            continue;
        int64_t c = t->wcount[t->word[i]];
        int32_t l = t->prv[i], r = t->nxt[j];
        if (l >= 0) {
            pair_add(t, t->sym[l], a, -c, 0);
            pair_add(t, t->sym[l], tok, c, (uint32_t)l);
        }
        if (r >= 0) {
            pair_add(t, b, t->sym[r], -c, 0);
            pair_add(t, tok, t->sym[r], c, i);
        }
        pair_add(t, a, b, -c, 0);
        t->sym[i] = tok;
        t->sym[j] = -1;
        t->nxt[i] = r;
        if (r >= 0)
            t->prv[r] = (int32_t)i;
    }
    free(list);
}

/* Room for one join's bytes and for the encoder's ids over them. */
struct join {
    uint8_t *bytes; /* [cap] */
    int32_t *ids;   /* [cap] */
    size_t cap;
};

static void join_free(struct join *j)
{
    free(j->bytes);
    free(j->ids);
    memset(j, 0, sizeof *j);
}

/* j->bytes = the bytes of token a then token b; *n their count.  -1: out of memory. */
static int join_tokens(struct join *j, const struct k3_bytemap *vocab, int32_t a, int32_t b,
                       size_t *n)
{
    size_t la, lb;
    const uint8_t *pa = k3_bm_bytes(vocab, a, &la);
    const uint8_t *pb = k3_bm_bytes(vocab, b, &lb);
    if (la + lb > j->cap) {
        join_free(j);
        j->cap = 2 * (la + lb);
        j->bytes = malloc(j->cap);
        j->ids = malloc(j->cap * sizeof *j->ids);
        if (!j->bytes || !j->ids) {
            join_free(j);
            return -1;
        }
    }
    memcpy(j->bytes, pa, la);
    memcpy(j->bytes + la, pb, lb);
    *n = la + lb;
    return 0;
}

/* Rule 2: ranks 0..255 are the single bytes. */
static int add_single_bytes(struct k3_bytemap *vocab, struct k3_err *err)
{
    for (int c = 0; c < 256; c++) {
        uint8_t byte = (uint8_t)c;
        if (add_token(vocab, &byte, 1, c, err))
            return -1;
    }
    return 0;
}

/* Counts every adjacent pair of the corpus (times its piece's multiplicity) and puts
 * each on the heap. */
static int count_pairs(struct trainer *t, struct k3_err *err)
{
    t->step = 1;
    for (size_t i = 0; i < t->n_sym; i++)
        if (t->nxt[i] >= 0)
            pair_add(t, t->sym[i], t->sym[t->nxt[i]], t->wcount[t->word[i]], (uint32_t)i);
    for (size_t p = 0; p < t->n_pairs; p++)
        if (heap_push_ent(t, (struct heap_ent){t->pairs[p].count, t->pairs[p].a, t->pairs[p].b}))
            t->oom = true;
    return t->oom ? k3_errf(err, "synthesize: out of memory") : 0;
}

/* Puts the pairs the last merge changed back on the heap with their new counts. */
static int reheap_touched(struct trainer *t, struct k3_err *err)
{
    for (size_t k = 0; k < t->n_touched; k++) {
        const struct pair *p = &t->pairs[t->touched[k]];
        if (p->count > 0 && !p->banned &&
            heap_push_ent(t, (struct heap_ent){p->count, p->a, p->b}))
            t->oom = true;
    }
    return t->oom ? k3_errf(err, "synthesize: out of memory") : 0;
}

/* Rule 4 for pair pi, the most frequent: merged into a new rank when the join stays
 * reachable, into the token of the same bytes when there is one, else banned. */
static int merge_pair(struct trainer *t, struct k3_bytemap *vocab, uint32_t pi, int32_t *n_tok,
                      struct join *j, struct k3_bpe_scratch *s, struct k3_bpe_stats *st,
                      struct k3_err *err)
{
    size_t n;
    if (join_tokens(j, vocab, t->pairs[pi].a, t->pairs[pi].b, &n))
        return k3_errf(err, "synthesize: out of memory");
    int32_t tok = k3_bm_find(vocab, j->bytes, n);
    if (tok < 0) {
        if (!joins_in_two(vocab, j->bytes, n, s, j->ids)) {
            t->pairs[pi].banned = true;
            st->skipped_pairs++;
            return 0;
        }
        tok = (*n_tok)++;
        if (add_token(vocab, j->bytes, n, tok, err))
            return -1;
        st->learned++;
    } else
        st->reused_merges++;
    t->step++;
    t->n_touched = 0;
    apply_merge(t, pi, tok);
    return reheap_touched(t, err);
}

/* Rules 3 and 4: the most frequent pair first, until n_base ranks or no pair is left. */
static int learn_from_corpus(struct trainer *t, struct k3_bytemap *vocab, int32_t *n_tok,
                             int n_base, struct k3_bpe_scratch *s, struct k3_bpe_stats *st,
                             struct k3_err *err)
{
    struct join j = {0};
    int rc = 0;
    while (!rc && *n_tok < n_base && t->n_heap) {
        struct heap_ent e = heap_pop_ent(t);
        int64_t pi = pair_find(t, e.a, e.b);
        /* Entries go stale when a merge changes a count: the current one is re-pushed. */
        if (pi < 0 || t->pairs[pi].banned || t->pairs[pi].count != e.count || e.count <= 0)
            continue;
        rc = merge_pair(t, vocab, (uint32_t)pi, n_tok, &j, s, st, err);
    }
    join_free(&j);
    return rc;
}

/* ============================================================ filling ======= */

/* Rule 5's state: candidates are tried one by one until n_base ranks. */
struct filler {
    struct k3_bytemap *vocab;
    int32_t *n_tok;
    int n_base;
    const struct k3_pretok *pre;
    pcre2_match_data *md;
    struct k3_bpe_scratch *s;
    struct k3_bpe_stats *st;
    struct k3_err *err;
};

enum { MAX_JOIN = 32 };

/* Is p[0..n) the first piece K3's pre-tokenizer cuts from itself, whole? */
static bool one_piece(const struct filler *f, const uint8_t *p, size_t n)
{
    int m = pcre2_match(f->pre->code, p, n, 0, PCRE2_NO_UTF_CHECK, f->md, NULL);
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(f->md);
    return m > 0 && ov[0] == 0 && ov[1] == n;
}

/* Takes the join a + b as the next rank when it is new, at most MAX_JOIN bytes, (with
 * whole_piece) one pre-token piece, and reachable. */
static int try_join(struct filler *f, int32_t a, int32_t b, bool whole_piece)
{
    size_t la, lb;
    const uint8_t *pa = k3_bm_bytes(f->vocab, a, &la);
    const uint8_t *pb = k3_bm_bytes(f->vocab, b, &lb);
    if (la + lb > MAX_JOIN)
        return 0;
    uint8_t buf[2 * MAX_JOIN];
    int32_t ids[2 * MAX_JOIN];
    memcpy(buf, pa, la);
    memcpy(buf + la, pb, lb);
    size_t n = la + lb;
    if (k3_bm_find(f->vocab, buf, n) >= 0 || (whole_piece && !one_piece(f, buf, n)) ||
        !joins_in_two(f->vocab, buf, n, f->s, ids))
        return 0;
    if (add_token(f->vocab, buf, n, *f->n_tok, f->err))
        return -1;
    ++*f->n_tok;
    f->st->filled++;
    return 0;
}

/* Tries (L[i], R[j]) over the diagonals i + j = 0, 1, 2, ..., i ascending. */
static int fill_diagonals(struct filler *f, const int32_t *L, size_t nl, const int32_t *R,
                          size_t nr, bool whole_piece)
{
    for (size_t d = 0; nl && nr && d + 1 < nl + nr && *f->n_tok < f->n_base; d++) {
        size_t i0 = d + 1 > nr ? d + 1 - nr : 0;
        for (size_t i = i0; i <= d && i < nl && *f->n_tok < f->n_base; i++)
            if (try_join(f, L[i], R[d - i], whole_piece))
                return -1;
    }
    return 0;
}

/* The tokens so far of two or more bytes of valid UTF-8 that pattern matches (whole:
 * the patterns are anchored), in rank order. */
static int tokens_matching(const struct filler *f, const char *pattern, int32_t **ids,
                           size_t *n)
{
    struct k3_pretok re;
    if (k3_pretok_init(&re, pattern, f->err))
        return -1;
    *n = 0;
    *ids = malloc((size_t)*f->n_tok * sizeof **ids);
    for (int32_t id = 0; *ids && id < *f->n_tok; id++) {
        size_t len;
        const uint8_t *p = k3_bm_bytes(f->vocab, id, &len);
        if (len >= 2 && k3_utf8_invalid_at(p, len) == len &&
            pcre2_match(re.code, p, len, 0, PCRE2_NO_UTF_CHECK, f->md, NULL) > 0)
            (*ids)[(*n)++] = id;
    }
    k3_pretok_free(&re);
    return *ids ? 0 : k3_errf(f->err, "synthesize: out of memory");
}

/* Pass 0: head + tail, one whole piece (word-like tokens).  Pass 1, should that run
 * dry: any two tokens so far. */
static int fill_passes(struct filler *f)
{
    int32_t *heads = NULL, *tails = NULL;
    size_t nh, nt;
    int rc = tokens_matching(f, "^ ?[\\p{L}\\p{M}]+\\z", &heads, &nh);
    if (!rc)
        rc = tokens_matching(f, "^[\\p{Ll}\\p{M}]+\\z", &tails, &nt);
    if (!rc)
        rc = fill_diagonals(f, heads, nh, tails, nt, true);
    free(heads);
    free(tails);
    if (rc || *f->n_tok >= f->n_base)
        return rc;
    size_t n_all = (size_t)*f->n_tok;
    int32_t *all = malloc(n_all * sizeof *all);
    if (!all)
        return k3_errf(f->err, "synthesize: out of memory");
    for (size_t id = 0; id < n_all; id++)
        all[id] = (int32_t)id;
    rc = fill_diagonals(f, all, n_all, all, n_all, false);
    free(all);
    return rc;
}

/* Rule 5: word-like joins once the corpus has no pairs left. */
static int fill_ranks(struct k3_bytemap *vocab, int32_t *n_tok, int n_base,
                      const struct k3_pretok *pre, struct k3_bpe_scratch *s,
                      struct k3_bpe_stats *st, struct k3_err *err)
{
    struct filler f = {vocab, n_tok, n_base, pre, pcre2_match_data_create(1, NULL), s, st, err};
    int rc = f.md ? fill_passes(&f) : k3_errf(err, "synthesize: out of memory");
    pcre2_match_data_free(f.md);
    if (!rc && *n_tok < n_base)
        rc = k3_errf(err, "synthesize: only %d distinct reachable tokens, n_base is %d", *n_tok,
                     n_base);
    return rc;
}

/* ============================================================ the result ==== */

/* The ranks as k3_bpe_learn returns them: an arena and [n_base + 1] offsets. */
static int export_ranks(const struct k3_bytemap *vocab, int n_base, uint8_t **tokens_out,
                        uint32_t **off_out, struct k3_err *err)
{
    uint32_t *off = malloc(((size_t)n_base + 1) * sizeof *off);
    uint8_t *tokens = malloc(vocab->arena_len ? vocab->arena_len : 1);
    if (!off || !tokens) {
        free(off);
        free(tokens);
        return k3_errf(err, "synthesize: out of memory");
    }
    size_t o = 0;
    for (int32_t id = 0; id < n_base; id++) {
        size_t n;
        const uint8_t *p = k3_bm_bytes(vocab, id, &n);
        off[id] = (uint32_t)o;
        memcpy(tokens + o, p, n);
        o += n;
    }
    off[n_base] = (uint32_t)o;
    *tokens_out = tokens;
    *off_out = off;
    return 0;
}

int k3_bpe_learn(const uint8_t *text, size_t len, int n_base, uint8_t **tokens_out,
                 uint32_t **off_out, struct k3_bpe_stats *stats, struct k3_err *err)
{
    struct k3_bpe_stats st = {.corpus_bytes = len};
    *tokens_out = NULL;
    *off_out = NULL;
    if (n_base < 256)
        return k3_errf(err, "synthesize: n_base %d < 256 (the single bytes)", n_base);
    struct trainer t = {0};
    struct k3_pretok pre = {0};
    struct k3_bytemap vocab = {0};
    struct k3_bpe_scratch s = {0};
    if (k3_pretok_init(&pre, K3_PRETOKENIZE_PATTERN_PCRE2, err))
        return -1;
    int32_t n_tok = 256;
    int rc = k3_bm_init(&vocab, n_base, (size_t)n_base) ? k3_errf(err, "synthesize: out of memory")
                                                         : add_single_bytes(&vocab, err);
    if (!rc)
        rc = collect_pieces(&t, &pre, text, len, &st, err);
    if (!rc)
        rc = count_pairs(&t, err);
    if (!rc)
        rc = learn_from_corpus(&t, &vocab, &n_tok, n_base, &s, &st, err);
    if (!rc && n_tok < n_base)
        rc = fill_ranks(&vocab, &n_tok, n_base, &pre, &s, &st, err);
    if (!rc)
        rc = export_ranks(&vocab, n_base, tokens_out, off_out, err);
    if (stats)
        *stats = st;
    trainer_free(&t);
    k3_bm_free(&vocab);
    k3_bpe_scratch_free(&s);
    k3_pretok_free(&pre);
    return rc;
}
