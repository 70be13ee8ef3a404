/* Tokenizer: loading tiktoken.model + tokenizer_config.json, PCRE2 pre-tokenizing,
 * byte-level BPE encode, decode, and the UTF-8 output stream.  See tokenizer.h. */
#include "engine/text/tokenizer.h"
#include "engine/base/files.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "engine/text/tokenizer_internal.h"

/* The most tokens a vocabulary sized from its own files may have (as config.json bounds
 * vocab_size). */
#define K3_TOK_MAX_VOCAB (1 << 24)

/* ============================================================ patterns ====== */

/* K3's pat_str exactly as tokenization_kimi.py ships it (k3-model.md §5). */
const char K3_PRETOKENIZE_PATTERN[] =
    "[\\p{Han}]+"
    "|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}&&[^\\p{Han}]]*"
    "[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}&&[^\\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    "|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}&&[^\\p{Han}]]+"
    "[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}&&[^\\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    "|\\p{N}{1,3}"
    "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*"
    "|\\s*[\\r\\n]+"
    "|\\s+(?!\\S)"
    "|\\s+";

#define WS K3_WS_CHARS
#define UPPER_NOHAN K3_CLASS_UPPER_NOHAN
#define LOWER_NOHAN K3_CLASS_LOWER_NOHAN
#define CONTRACTION "(?i:'s|'t|'re|'ve|'m|'ll|'d)?"

const char K3_PRETOKENIZE_PATTERN_PCRE2[] =
    "\\p{sc:Han}+"
    "|[^\\r\\n\\p{L}\\p{N}]?" UPPER_NOHAN "*" LOWER_NOHAN "+" CONTRACTION
    "|[^\\r\\n\\p{L}\\p{N}]?" UPPER_NOHAN "+" LOWER_NOHAN "*" CONTRACTION
    "|\\p{N}{1,3}"
    "| ?[^" WS "\\p{L}\\p{N}]+[\\r\\n]*"
    "|[" WS "]*[\\r\\n]+"
    "|[" WS "]+(?![^" WS "])"
    "|[" WS "]+";

/* tiktoken_ext/openai_public.py: cl100k_base
 * '(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+ */
const char K3_CL100K_PATTERN_PCRE2[] =
    "'(?i:[sdmt]|ll|ve|re)"
    "|[^\\r\\n\\p{L}\\p{N}]?+\\p{L}+"
    "|\\p{N}{1,3}"
    "| ?[^" WS "\\p{L}\\p{N}]++[\\r\\n]*"
    "|[" WS "]*[\\r\\n]"
    "|[" WS "]+(?![^" WS "])"
    "|[" WS "]+";

/* tiktoken_ext/openai_public.py: o200k_base */
const char K3_O200K_PATTERN_PCRE2[] =
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+" CONTRACTION
    "|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*" CONTRACTION
    "|\\p{N}{1,3}"
    "| ?[^" WS "\\p{L}\\p{N}]+[\\r\\n/]*"
    "|[" WS "]*[\\r\\n]+"
    "|[" WS "]+(?![^" WS "])"
    "|[" WS "]+";

const char *k3_tok_named_pattern(const char *name)
{
    if (!strcmp(name, "k3"))
        return K3_PRETOKENIZE_PATTERN_PCRE2;
    if (!strcmp(name, "cl100k") || !strcmp(name, "cl100k_base"))
        return K3_CL100K_PATTERN_PCRE2;
    if (!strcmp(name, "o200k") || !strcmp(name, "o200k_base"))
        return K3_O200K_PATTERN_PCRE2;
    return NULL;
}

/* ============================================================ UTF-8 ========= */

/* Length of the well-formed sequence at s[0..n), or 0 when it is ill-formed or cut. */
static size_t utf8_seq(const uint8_t *s, size_t n)
{
    uint8_t c = s[0];
    if (c < 0x80)
        return 1;
    size_t need;
    uint8_t lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF)
        need = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        need = 3;
        if (c == 0xE0)
            lo = 0xA0;
        else if (c == 0xED)
            hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 4;
        if (c == 0xF0)
            lo = 0x90;
        else if (c == 0xF4)
            hi = 0x8F;
    } else
        return 0;
    if (n < need || s[1] < lo || s[1] > hi)
        return 0;
    for (size_t i = 2; i < need; i++)
        if ((s[i] & 0xC0) != 0x80)
            return 0;
    return need;
}

size_t k3_utf8_invalid_at(const uint8_t *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        if (s[i] < 0x80) {
            i++;
            continue;
        }
        size_t k = utf8_seq(s + i, n - i);
        if (!k)
            return i;
        i += k;
    }
    return n;
}

/* ============================================================ token table === */

int k3_bm_init(struct k3_bytemap *m, int32_t id_cap, size_t expect)
{
    memset(m, 0, sizeof *m);
    size_t cap = 64;
    while (cap < 2 * expect + 2)
        cap *= 2;
    m->slots = malloc(cap * sizeof *m->slots);
    m->off = malloc((size_t)(id_cap > 0 ? id_cap : 1) * sizeof *m->off);
    m->len = malloc((size_t)(id_cap > 0 ? id_cap : 1) * sizeof *m->len);
    m->arena_cap = expect * 8 + 64;
    m->arena = malloc(m->arena_cap);
    if (!m->slots || !m->off || !m->len || !m->arena) {
        k3_bm_free(m);
        return -1;
    }
    for (size_t i = 0; i < cap; i++)
        m->slots[i].id = -1;
    memset(m->len, 0xFF, (size_t)(id_cap > 0 ? id_cap : 1) * sizeof *m->len);
    m->mask = cap - 1;
    m->id_cap = id_cap;
    return 0;
}

void k3_bm_free(struct k3_bytemap *m)
{
    free(m->arena);
    free(m->off);
    free(m->len);
    free(m->slots);
    memset(m, 0, sizeof *m);
}

int32_t k3_bm_find(const struct k3_bytemap *m, const uint8_t *p, size_t n)
{
    uint64_t h = XXH3_64bits(p, n);
    uint32_t tag = (uint32_t)(h >> 32);
    for (size_t i = (size_t)h & m->mask;; i = (i + 1) & m->mask) {
        const struct k3_bm_slot *sl = &m->slots[i];
        if (sl->id < 0)
            return -1;
        if (sl->tag == tag && m->len[sl->id] == n && !memcmp(m->arena + m->off[sl->id], p, n))
            return sl->id;
    }
}

static void bm_insert_slot(struct k3_bm_slot *slots, size_t mask, uint64_t h, int32_t id)
{
    size_t i = (size_t)h & mask;
    while (slots[i].id >= 0)
        i = (i + 1) & mask;
    slots[i].tag = (uint32_t)(h >> 32);
    slots[i].id = id;
}

int k3_bm_add(struct k3_bytemap *m, const uint8_t *p, size_t n, int32_t id, bool indexed)
{
    if (m->arena_len + n > m->arena_cap) {
        size_t cap = m->arena_cap * 2;
        while (cap < m->arena_len + n)
            cap *= 2;
        uint8_t *a = realloc(m->arena, cap);
        if (!a)
            return -1;
        m->arena = a;
        m->arena_cap = cap;
    }
    if (indexed && 2 * (m->n_indexed + 1) > m->mask + 1) {
        size_t cap = 2 * (m->mask + 1);
        struct k3_bm_slot *slots = malloc(cap * sizeof *slots);
        if (!slots)
            return -1;
        for (size_t i = 0; i < cap; i++)
            slots[i].id = -1;
        for (size_t i = 0; i <= m->mask; i++) {
            int32_t old = m->slots[i].id;
            if (old >= 0)
                bm_insert_slot(slots, cap - 1, XXH3_64bits(m->arena + m->off[old], m->len[old]),
                               old);
        }
        free(m->slots);
        m->slots = slots;
        m->mask = cap - 1;
    }
    memcpy(m->arena + m->arena_len, p, n);
    m->off[id] = (uint32_t)m->arena_len;
    m->len[id] = (uint32_t)n;
    m->arena_len += n;
    if (indexed) {
        bm_insert_slot(m->slots, m->mask, XXH3_64bits(p, n), id);
        m->n_indexed++;
    }
    return 0;
}

/* ============================================================ BPE =========== */

void k3_bpe_scratch_free(struct k3_bpe_scratch *s)
{
    free(s->bound);
    free(s->rank);
    free(s->next);
    free(s->prev);
    free(s->heap);
    memset(s, 0, sizeof *s);
}

static int scratch_reserve(struct k3_bpe_scratch *s, size_t len, bool heap)
{
    if (len <= s->cap && (!heap || s->heap))
        return 0;
    size_t cap = s->cap > len ? s->cap : len + len / 2 + 16;
    uint32_t *b = realloc(s->bound, (cap + 1) * sizeof *b);
    if (b)
        s->bound = b;
    uint32_t *r = realloc(s->rank, (cap + 1) * sizeof *r);
    if (r)
        s->rank = r;
    if (!b || !r)
        return -1;
    if (heap || s->heap) {
        uint32_t *nx = realloc(s->next, (cap + 1) * sizeof *nx);
        if (nx)
            s->next = nx;
        uint32_t *pv = realloc(s->prev, (cap + 1) * sizeof *pv);
        if (pv)
            s->prev = pv;
        uint64_t *h = realloc(s->heap, (2 * cap + 1) * sizeof *h);
        if (h)
            s->heap = h;
        if (!nx || !pv || !h)
            return -1;
    }
    s->cap = cap;
    return 0;
}

static inline uint32_t rank_of(const struct k3_bytemap *m, const uint8_t *p, size_t n)
{
    int32_t id = k3_bm_find(m, p, n);
    return id < 0 ? K3_NO_RANK : (uint32_t)id;
}

/* tiktoken's _byte_pair_merge: parts are [bound[i], bound[i+1]); rank[i] is the rank of
 * parts i and i+1 joined.  Each step merges the leftmost lowest rank: O(len) a step. */
long k3_bpe_merge_scan(const struct k3_bytemap *m, const uint8_t *piece, size_t len,
                       struct k3_bpe_scratch *s, int32_t *out)
{
    if (scratch_reserve(s, len, false))
        return -1;
    uint32_t *b = s->bound, *r = s->rank;
    size_t n = len; /* parts */
    for (size_t i = 0; i <= len; i++)
        b[i] = (uint32_t)i;
    for (size_t i = 0; i + 1 < n; i++)
        r[i] = rank_of(m, piece + i, 2);
    for (;;) {
        uint32_t best = K3_NO_RANK;
        size_t bi = 0;
        for (size_t i = 0; i + 1 < n; i++)
            if (r[i] < best) {
                best = r[i];
                bi = i;
            }
        if (best == K3_NO_RANK)
            break;
        /* Part bi absorbs part bi+1: drop bound bi+1 and rank bi+1. */
        memmove(b + bi + 1, b + bi + 2, (n - bi - 1) * sizeof *b);
        if (n >= bi + 3)
            memmove(r + bi + 1, r + bi + 2, (n - bi - 3) * sizeof *r);
        n--;
        if (bi + 1 < n)
            r[bi] = rank_of(m, piece + b[bi], b[bi + 2] - b[bi]);
        if (bi > 0)
            r[bi - 1] = rank_of(m, piece + b[bi - 1], b[bi + 1] - b[bi - 1]);
    }
    for (size_t i = 0; i < n; i++) {
        int32_t id = k3_bm_find(m, piece + b[i], b[i + 1] - b[i]);
        if (id < 0)
            return -2;
        out[i] = id;
    }
    return (long)n;
}

static void heap_push(uint64_t *h, size_t *n, uint64_t v)
{
    size_t i = (*n)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (h[p] <= v)
            break;
        h[i] = h[p];
        i = p;
    }
    h[i] = v;
}

static uint64_t heap_pop(uint64_t *h, size_t *n)
{
    uint64_t top = h[0], v = h[--*n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n)
            break;
        if (c + 1 < *n && h[c + 1] < h[c])
            c++;
        if (v <= h[c])
            break;
        h[i] = h[c];
        i = c;
    }
    h[i] = v;
    return top;
}

/* The same merge order with a linked list of parts (indexed by their start offset)
 * and a heap of (rank, start): the lowest rank, then the leftmost start, is exactly
 * tiktoken's choice.  Stale heap entries (dead part or changed rank) are skipped;
 * a rank names one byte string, so an entry whose rank still matches is current. */
long k3_bpe_merge_heap(const struct k3_bytemap *m, const uint8_t *piece, size_t len,
                       struct k3_bpe_scratch *s, int32_t *out)
{
    if (len > UINT32_MAX - 1 || scratch_reserve(s, len, true))
        return -1;
    uint32_t *nx = s->next, *pv = s->prev, *r = s->rank;
    uint64_t *h = s->heap;
    size_t hn = 0;
    const uint32_t END = (uint32_t)len, DEAD = UINT32_MAX;
    for (uint32_t i = 0; i < len; i++) {
        nx[i] = i + 1;
        pv[i] = i ? i - 1 : DEAD;
        r[i] = i + 1 < len ? rank_of(m, piece + i, 2) : K3_NO_RANK;
        if (r[i] != K3_NO_RANK)
            heap_push(h, &hn, (uint64_t)r[i] << 32 | i);
    }
    while (hn) {
        uint64_t e = heap_pop(h, &hn);
        uint32_t i = (uint32_t)e, rk = (uint32_t)(e >> 32);
        if (nx[i] == DEAD || r[i] != rk)
            continue;
        uint32_t j = nx[i]; /* absorbed */
        nx[i] = nx[j];
        if (nx[j] != END)
            pv[nx[j]] = i;
        nx[j] = DEAD;
        r[i] = nx[i] != END ? rank_of(m, piece + i, (nx[nx[i]] == END ? END : nx[nx[i]]) - i)
                            : K3_NO_RANK;
        if (r[i] != K3_NO_RANK)
            heap_push(h, &hn, (uint64_t)r[i] << 32 | i);
        if (pv[i] != DEAD) {
            uint32_t p = pv[i];
            r[p] = rank_of(m, piece + p, nx[i] - p);
            if (r[p] != K3_NO_RANK)
                heap_push(h, &hn, (uint64_t)r[p] << 32 | p);
        }
    }
    long n = 0;
    for (uint32_t i = 0; i != END; i = nx[i]) {
        int32_t id = k3_bm_find(m, piece + i, nx[i] - i);
        if (id < 0)
            return -2;
        out[n++] = id;
    }
    return n;
}

long k3_bpe_merge(const struct k3_bytemap *m, const uint8_t *piece, size_t len,
                  struct k3_bpe_scratch *s, int32_t *out)
{
    if (len == 0)
        return 0;
    if (len < K3_BPE_HEAP_MIN)
        return k3_bpe_merge_scan(m, piece, len, s, out);
    return k3_bpe_merge_heap(m, piece, len, s, out);
}

/* ============================================================ pre-tokenizer = */

int k3_pretok_init(struct k3_pretok *p, const char *pattern, struct k3_err *err)
{
    int ec;
    PCRE2_SIZE eo;
    p->jit = false;
    p->code = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP,
                            &ec, &eo, NULL);
    if (!p->code) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(ec, msg, sizeof msg);
        return k3_errf(err, "pattern: %s at offset %zu of \"%.60s%s\"", (char *)msg, (size_t)eo,
                       pattern, strlen(pattern) > 60 ? "..." : "");
    }
    p->jit = pcre2_jit_compile(p->code, PCRE2_JIT_COMPLETE) == 0;
    return 0;
}

void k3_pretok_free(struct k3_pretok *p)
{
    pcre2_code_free(p->code);
    p->code = NULL;
}

int k3_pretok_iter_init(struct k3_pretok_iter *it, const struct k3_pretok *p,
                        const uint8_t *s, size_t len, struct k3_err *err)
{
    memset(it, 0, sizeof *it);
    it->p = p;
    it->s = s;
    it->len = len;
    it->md = pcre2_match_data_create(1, NULL);
    if (!it->md)
        return k3_errf(err, "pre-tokenizer: out of memory");
    return 0;
}

void k3_pretok_iter_free(struct k3_pretok_iter *it)
{
    pcre2_match_data_free(it->md);
    pcre2_match_context_free(it->mc);
    pcre2_jit_stack_free(it->stack);
    memset(it, 0, sizeof *it);
}

/* JIT matching runs on a 32 KiB machine stack by default; patterns that backtrack
 * through long runs can need more, so a failed match retries with a larger stack. */
static int grow_jit_stack(struct k3_pretok_iter *it)
{
    size_t size = it->stack_size ? it->stack_size * 8 : 1 << 20;
    if (size > (size_t)256 << 20)
        return -1;
    if (!it->mc && !(it->mc = pcre2_match_context_create(NULL)))
        return -1;
    pcre2_jit_stack_free(it->stack);
    it->stack = pcre2_jit_stack_create(32 << 10, size, NULL);
    if (!it->stack)
        return -1;
    it->stack_size = size;
    pcre2_jit_stack_assign(it->mc, NULL, it->stack);
    return 0;
}

int k3_pretok_next(struct k3_pretok_iter *it, size_t *start, size_t *end, struct k3_err *err)
{
    while (it->pos < it->len) {
        int rc;
        for (;;) {
            if (it->p->jit)
                rc = pcre2_jit_match(it->p->code, it->s, it->len, it->pos, 0, it->md, it->mc);
            else
                rc = pcre2_match(it->p->code, it->s, it->len, it->pos, PCRE2_NO_UTF_CHECK,
                                 it->md, it->mc);
            if (rc != PCRE2_ERROR_JIT_STACKLIMIT || grow_jit_stack(it))
                break;
        }
        if (rc == PCRE2_ERROR_NOMATCH) {
            it->pos = it->len;
            return 0;
        }
        if (rc < 0) {
            PCRE2_UCHAR msg[160];
            pcre2_get_error_message(rc, msg, sizeof msg);
            return k3_errf(err, "pre-tokenizer: match failed at byte %zu: %s", it->pos,
                           (char *)msg);
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(it->md);
        if (ov[1] == ov[0]) { /* empty match (user patterns): step one character */
            size_t k = utf8_seq(it->s + ov[0], it->len - ov[0]);
            it->pos = ov[0] + (k ? k : 1);
            continue;
        }
        *start = ov[0];
        *end = ov[1];
        it->pos = ov[1];
        return 1;
    }
    return 0;
}

/* ============================================================ loading ======= */

struct special {
    const uint8_t *bytes; /* content, in the token table's arena */
    size_t len;
    int32_t id;
};

struct k3_tokenizer {
    int vocab_size;
    struct k3_bytemap map; /* base ranks (indexed) and specials (decode only) */
    struct k3_pretok pretok;
    struct special *specials; /* [n_specials] longest first, then by bytes */
    int n_specials;
    uint8_t special_first[256]; /* 1: some special starts with this byte */
    uint8_t *is_special;        /* [vocab_size] */
};


static int8_t b64_value(uint8_t c)
{
    if (c >= 'A' && c <= 'Z')
        return (int8_t)(c - 'A');
    if (c >= 'a' && c <= 'z')
        return (int8_t)(c - 'a' + 26);
    if (c >= '0' && c <= '9')
        return (int8_t)(c - '0' + 52);
    if (c == '+')
        return 62;
    if (c == '/')
        return 63;
    return -1;
}

/* Strict standard base64 with padding; returns the decoded length or -1. */
static long b64_decode(const uint8_t *s, size_t n, uint8_t *out)
{
    if (n == 0 || n % 4)
        return -1;
    long o = 0;
    for (size_t i = 0; i < n; i += 4) {
        int8_t v[4];
        int pad = 0;
        for (int k = 0; k < 4; k++) {
            if (s[i + k] == '=' && i + 4 == n && k >= 2) {
                v[k] = 0;
                pad++;
            } else {
                if (pad)
                    return -1;
                v[k] = b64_value(s[i + k]);
                if (v[k] < 0)
                    return -1;
            }
        }
        uint32_t w = (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 | (uint32_t)v[2] << 6 | (uint32_t)v[3];
        out[o++] = (uint8_t)(w >> 16);
        if (pad < 2)
            out[o++] = (uint8_t)(w >> 8);
        if (pad < 1)
            out[o++] = (uint8_t)w;
        if ((pad == 1 && (w & 0xFF)) || (pad == 2 && (w & 0xFFFF)))
            return -1; /* non-canonical trailing bits */
    }
    return o;
}

struct rank_line {
    uint32_t off, len; /* decoded bytes in a scratch buffer */
    int32_t rank;
    uint32_t line;
};

/* min_ids: with vocab_size <= 0, the vocabulary is max(largest rank + 1, min_ids). */
/* Parses tiktoken.model text (path names it in messages). */
static int load_ranks(struct k3_tokenizer *tok, const char *path, const uint8_t *data, size_t n,
                      int vocab_size, int min_ids, struct k3_err *err)
{
    uint8_t *bytes = malloc(n * 3 / 4 + 4); /* decoded tokens, back to back */
    size_t n_lines = 1;
    for (size_t i = 0; i < n; i++)
        n_lines += data[i] == '\n';
    struct rank_line *rl = malloc(n_lines * sizeof *rl);
    int rc = -1;
    size_t nr = 0, nb = 0;
    int32_t max_rank = -1;
    if (!bytes || !rl) {
        k3_errf(err, "%s: out of memory", path);
        goto out;
    }
    uint32_t line = 0;
    for (size_t p = 0; p < n;) {
        size_t e = p;
        while (e < n && data[e] != '\n')
            e++;
        line++;
        size_t le = e, next = e + 1;
        /* Surrounding blanks and a CR are tolerated, as tiktoken's line.split() does. */
        while (le > p && (data[le - 1] == '\r' || data[le - 1] == ' ' || data[le - 1] == '\t'))
            le--;
        while (p < le && (data[p] == ' ' || data[p] == '\t'))
            p++;
        size_t q = p;
        while (q < le && data[q] != ' ' && data[q] != '\t')
            q++;
        if (le == p) { /* blank line */
            p = next;
            continue;
        }
        size_t t = q;
        while (t < le && (data[t] == ' ' || data[t] == '\t'))
            t++;
        if (q == p || t == q || t == le) {
            /* the line itself, at most 40 bytes: the text need not be NUL-terminated */
            k3_errf(err, "%s:%u: expected \"<base64> <rank>\", got \"%.*s\"", path, line,
                    (int)(le - p > 40 ? 40 : le - p), (const char *)data + p);
            goto out;
        }
        long dl = b64_decode(data + p, q - p, bytes + nb);
        if (dl <= 0) {
            k3_errf(err, "%s:%u: bad base64 token \"%.*s\"", path, line,
                    (int)(q - p > 40 ? 40 : q - p), (const char *)data + p);
            goto out;
        }
        long long rank = 0;
        for (size_t k = t; k < le; k++) {
            if (data[k] < '0' || data[k] > '9' || rank > INT32_MAX) {
                k3_errf(err, "%s:%u: bad rank \"%.*s\"", path, line,
                        (int)(le - t > 20 ? 20 : le - t), (const char *)data + t);
                goto out;
            }
            rank = rank * 10 + (data[k] - '0');
        }
        if (rank > INT32_MAX - 1) {
            k3_errf(err, "%s:%u: rank %lld too large", path, line, rank);
            goto out;
        }
        if (vocab_size > 0 && rank >= vocab_size) {
            k3_errf(err, "%s:%u: rank %lld >= vocab_size %d", path, line, rank, vocab_size);
            goto out;
        }
        rl[nr++] = (struct rank_line){(uint32_t)nb, (uint32_t)dl, (int32_t)rank, line};
        nb += (size_t)dl;
        if (rank > max_rank)
            max_rank = (int32_t)rank;
        p = next;
    }
    if (nr == 0) {
        k3_errf(err, "%s: no tokens", path);
        goto out;
    }
    tok->vocab_size = vocab_size > 0 ? vocab_size : max_rank + 1 > min_ids ? max_rank + 1 : min_ids;
    if (tok->vocab_size > K3_TOK_MAX_VOCAB) { /* sized from the files: bound what they may ask */
        k3_errf(err, "%s: ids up to %d: more than %d tokens", path, tok->vocab_size - 1,
                K3_TOK_MAX_VOCAB);
        goto out;
    }
    if (k3_bm_init(&tok->map, tok->vocab_size, nr)) {
        k3_errf(err, "%s: out of memory", path);
        goto out;
    }
    for (size_t i = 0; i < nr; i++) {
        const struct rank_line *r = &rl[i];
        size_t dummy;
        if (k3_bm_bytes(&tok->map, r->rank, &dummy)) {
            uint32_t first = 0;
            for (size_t k = 0; k < i; k++)
                if (rl[k].rank == r->rank) {
                    first = rl[k].line;
                    break;
                }
            k3_errf(err, "%s:%u: duplicate rank %d (first on line %u)", path, r->line, r->rank,
                    first);
            goto out;
        }
        int32_t other = k3_bm_find(&tok->map, bytes + r->off, r->len);
        if (other >= 0) {
            uint32_t first = 0;
            for (size_t k = 0; k < i; k++)
                if (rl[k].rank == other)
                    first = rl[k].line;
            k3_errf(err, "%s:%u: duplicate token: rank %d has the same bytes as rank %d (line %u)",
                    path, r->line, r->rank, other, first);
            goto out;
        }
        if (k3_bm_add(&tok->map, bytes + r->off, r->len, r->rank, true)) {
            k3_errf(err, "%s: out of memory", path);
            goto out;
        }
    }
    for (int b = 0; b < 256; b++) {
        uint8_t c = (uint8_t)b;
        if (k3_bm_find(&tok->map, &c, 1) < 0) {
            k3_errf(err, "%s: the single byte 0x%02x has no rank (byte-level BPE needs all 256)",
                    path, b);
            goto out;
        }
    }
    rc = 0;
out:
    free(bytes);
    free(rl);
    return rc;
}

static int special_cmp(const void *a, const void *b)
{
    const struct special *x = a, *y = b;
    if (x->len != y->len)
        return x->len > y->len ? -1 : 1;
    return memcmp(x->bytes, y->bytes, x->len);
}

static json_t *read_config(const char *path, const char *text, size_t len, int *min_ids,
                           struct k3_err *err)
{
    json_error_t je;
    json_t *root = json_loadb(text, len, 0, &je);
    if (!root) {
        k3_errf(err, "%s:%d: %s", path, je.line, je.text);
        return NULL;
    }
    json_t *dec = json_object_get(root, "added_tokens_decoder");
    if (!json_is_object(dec)) {
        k3_errf(err, "%s: added_tokens_decoder: missing or not an object", path);
        json_decref(root);
        return NULL;
    }
    const char *key;
    json_t *val;
    *min_ids = 0;
    json_object_foreach(dec, key, val) {
        long id = strtol(key, NULL, 10);
        if (id >= *min_ids && id < INT32_MAX)
            *min_ids = (int)id + 1;
    }
    return root;
}

static int load_specials(struct k3_tokenizer *tok, const char *path, json_t *root,
                         struct k3_err *err)
{
    int rc = -1;
    json_t *dec = json_object_get(root, "added_tokens_decoder");
    size_t n = json_object_size(dec);
    tok->specials = calloc(n ? n : 1, sizeof *tok->specials);
    if (!tok->specials) {
        k3_errf(err, "%s: out of memory", path);
        goto out;
    }
    const char *key;
    json_t *val;
    json_object_foreach(dec, key, val) {
        char *endp;
        errno = 0;
        long id = strtol(key, &endp, 10);
        if (*key < '0' || *key > '9' || *endp || errno || id < 0 || id >= tok->vocab_size) {
            k3_errf(err, "%s: added_tokens_decoder: id \"%s\" is not an integer in [0, %d)",
                    path, key, tok->vocab_size);
            goto out;
        }
        json_t *content = json_object_get(val, "content");
        if (!json_is_string(content) || json_string_length(content) == 0) {
            k3_errf(err, "%s: added_tokens_decoder.%s.content: missing or not a non-empty string",
                    path, key);
            goto out;
        }
        const uint8_t *c = (const uint8_t *)json_string_value(content);
        size_t cl = json_string_length(content);
        if (k3_utf8_invalid_at(c, cl) != cl || memchr(c, 0, cl)) {
            k3_errf(err, "%s: added_tokens_decoder.%s.content: not valid UTF-8 text", path, key);
            goto out;
        }
        size_t dummy;
        if (k3_bm_bytes(&tok->map, (int32_t)id, &dummy)) {
            k3_errf(err, "%s: added_tokens_decoder: id %ld is already %s", path, id,
                    tok->is_special[id] ? "another special token" : "a rank in tiktoken.model");
            goto out;
        }
        for (int i = 0; i < tok->n_specials; i++) {
            size_t l;
            const uint8_t *other = k3_bm_bytes(&tok->map, tok->specials[i].id, &l);
            if (l == cl && !memcmp(other, c, cl)) {
                k3_errf(err, "%s: added_tokens_decoder: \"%s\" is both id %d and id %ld", path,
                        (const char *)c, tok->specials[i].id, id);
                goto out;
            }
        }
        if (k3_bm_add(&tok->map, c, cl, (int32_t)id, false)) {
            k3_errf(err, "%s: out of memory", path);
            goto out;
        }
        tok->is_special[id] = 1;
        tok->specials[tok->n_specials++] = (struct special){NULL, cl, (int32_t)id};
    }
    /* The arena may have moved while adding: point into it only now. */
    for (int i = 0; i < tok->n_specials; i++) {
        size_t l;
        tok->specials[i].bytes = k3_bm_bytes(&tok->map, tok->specials[i].id, &l);
        tok->special_first[tok->specials[i].bytes[0]] = 1;
    }
    qsort(tok->specials, (size_t)tok->n_specials, sizeof *tok->specials, special_cmp);
    rc = 0;
out:
    return rc;
}

int k3_tok_load_mem(struct k3_tokenizer **out, const char *name, const uint8_t *tiktoken,
                    size_t tiktoken_len, const char *tokconfig, size_t tokconfig_len,
                    int vocab_size, const char *pattern, struct k3_err *err)
{
    *out = NULL;
    char cfg_name[4096], ranks_name[4096];
    snprintf(cfg_name, sizeof cfg_name, "%s/tokenizer_config.json", name);
    snprintf(ranks_name, sizeof ranks_name, "%s/tiktoken.model", name);
    json_t *cfg = NULL;
    int min_ids = 0;
    if (tokconfig && !(cfg = read_config(cfg_name, tokconfig, tokconfig_len, &min_ids, err)))
        return -1;
    struct k3_tokenizer *tok = calloc(1, sizeof *tok);
    if (!tok) {
        json_decref(cfg);
        return k3_errf(err, "tokenizer: out of memory");
    }
    if (load_ranks(tok, ranks_name, tiktoken, tiktoken_len, vocab_size, min_ids, err))
        goto fail;
    tok->is_special = calloc((size_t)tok->vocab_size, 1);
    if (!tok->is_special) {
        k3_errf(err, "tokenizer: out of memory");
        goto fail;
    }
    if (cfg && load_specials(tok, cfg_name, cfg, err))
        goto fail;
    if (k3_pretok_init(&tok->pretok, pattern ? pattern : K3_PRETOKENIZE_PATTERN_PCRE2, err))
        goto fail;
    json_decref(cfg);
    *out = tok;
    return 0;
fail:
    json_decref(cfg);
    k3_tok_free(tok);
    return -1;
}

int k3_tok_load(struct k3_tokenizer **out, const char *dir, int vocab_size,
                const char *pattern, bool no_specials, struct k3_err *err)
{
    *out = NULL;
    char path[4096];
    uint8_t *ranks = NULL, *cfg = NULL;
    size_t ranks_len = 0, cfg_len = 0;
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    int rc = no_specials ? 0 : k3_read_small_file(path, (char **)&cfg, &cfg_len, err);
    snprintf(path, sizeof path, "%s/tiktoken.model", dir);
    if (!rc)
        rc = k3_read_small_file(path, (char **)&ranks, &ranks_len, err);
    if (!rc)
        rc = k3_tok_load_mem(out, dir, ranks, ranks_len, (const char *)cfg, cfg_len, vocab_size,
                             pattern, err);
    free(ranks);
    free(cfg);
    return rc;
}

void k3_tok_free(struct k3_tokenizer *tok)
{
    if (!tok)
        return;
    k3_bm_free(&tok->map);
    k3_pretok_free(&tok->pretok);
    free(tok->specials);
    free(tok->is_special);
    free(tok);
}

/* ============================================================ encode ======== */

struct id_vec {
    int32_t *v;
    size_t n, cap;
};

static int vec_reserve(struct id_vec *v, size_t extra)
{
    if (v->n + extra <= v->cap)
        return 0;
    size_t cap = v->cap ? v->cap : 64;
    while (cap < v->n + extra)
        cap *= 2;
    int32_t *nv = realloc(v->v, cap * sizeof *nv);
    if (!nv)
        return -1;
    v->v = nv;
    v->cap = cap;
    return 0;
}

/* Pre-tokenizes text[0..len) (no specials) and appends the BPE ids of every piece. */
static int encode_ordinary(const struct k3_tokenizer *tok, const uint8_t *text, size_t len,
                           size_t base, struct id_vec *ids, struct k3_bpe_scratch *s,
                           struct k3_err *err)
{
    struct k3_pretok_iter it;
    if (k3_pretok_iter_init(&it, &tok->pretok, text, len, err))
        return -1;
    int rc = 0;
    size_t a, b;
    while ((rc = k3_pretok_next(&it, &a, &b, err)) == 1) {
        if (vec_reserve(ids, b - a)) {
            rc = k3_errf(err, "encode: out of memory");
            break;
        }
        int32_t whole = k3_bm_find(&tok->map, text + a, b - a);
        if (whole >= 0) {
            ids->v[ids->n++] = whole;
            continue;
        }
        long k = k3_bpe_merge(&tok->map, text + a, b - a, s, ids->v + ids->n);
        if (k < 0) {
            rc = k3_errf(err, "encode: %s at byte %zu", k == -1 ? "out of memory"
                         : "a byte has no rank", base + a);
            break;
        }
        ids->n += (size_t)k;
    }
    k3_pretok_iter_free(&it);
    return rc < 0 ? -1 : 0;
}

int k3_tok_encode(const struct k3_tokenizer *tok, const char *text, size_t len,
                  bool allow_special, int32_t **ids_out, size_t *n_out, struct k3_err *err)
{
    *ids_out = NULL;
    *n_out = 0;
    const uint8_t *t = (const uint8_t *)text;
    size_t bad = k3_utf8_invalid_at(t, len);
    if (bad != len)
        return k3_errf(err, "encode: invalid UTF-8 at byte offset %zu (0x%02x)", bad, t[bad]);
    struct id_vec ids = {0};
    struct k3_bpe_scratch s = {0};
    if (vec_reserve(&ids, len / 4 + 16)) {
        k3_errf(err, "encode: out of memory");
        goto fail;
    }
    size_t seg = 0;
    if (allow_special && tok->n_specials) {
        for (size_t i = 0; i < len; i++) {
            if (!tok->special_first[t[i]])
                continue;
            const struct special *hit = NULL;
            for (int k = 0; k < tok->n_specials; k++) {
                const struct special *sp = &tok->specials[k];
                if (sp->len <= len - i && sp->bytes[0] == t[i] && !memcmp(sp->bytes, t + i, sp->len)) {
                    hit = sp;
                    break;
                }
            }
            if (!hit)
                continue;
            if (encode_ordinary(tok, t + seg, i - seg, seg, &ids, &s, err))
                goto fail;
            if (vec_reserve(&ids, 1)) {
                k3_errf(err, "encode: out of memory");
                goto fail;
            }
            ids.v[ids.n++] = hit->id;
            i += hit->len - 1;
            seg = i + 1;
        }
    }
    if (encode_ordinary(tok, t + seg, len - seg, seg, &ids, &s, err))
        goto fail;
    k3_bpe_scratch_free(&s);
    *ids_out = ids.v;
    *n_out = ids.n;
    return 0;
fail:
    k3_bpe_scratch_free(&s);
    free(ids.v);
    return -1;
}

/* ============================================================ decode ======== */

const struct k3_bytemap *k3_tok_map(const struct k3_tokenizer *tok)
{
    return &tok->map;
}

const uint8_t *k3_tok_bytes(const struct k3_tokenizer *tok, int32_t id, size_t *len)
{
    return k3_bm_bytes(&tok->map, id, len);
}

int k3_tok_decode(const struct k3_tokenizer *tok, const int32_t *ids, size_t n_ids,
                  char **text, size_t *len, struct k3_err *err)
{
    *text = NULL;
    *len = 0;
    size_t total = 0, l;
    for (size_t i = 0; i < n_ids; i++) {
        if (!k3_bm_bytes(&tok->map, ids[i], &l))
            return k3_errf(err, "decode: id %d (position %zu) is not a token of this vocabulary "
                           "(size %d)", ids[i], i, tok->vocab_size);
        total += l;
    }
    char *out = malloc(total + 1);
    if (!out)
        return k3_errf(err, "decode: out of memory");
    size_t o = 0;
    for (size_t i = 0; i < n_ids; i++) {
        const uint8_t *b = k3_bm_bytes(&tok->map, ids[i], &l);
        memcpy(out + o, b, l);
        o += l;
    }
    out[o] = 0;
    *text = out;
    *len = o;
    return 0;
}

int32_t k3_tok_special(const struct k3_tokenizer *tok, const char *content)
{
    size_t n = strlen(content);
    for (int i = 0; i < tok->n_specials; i++)
        if (tok->specials[i].len == n && !memcmp(tok->specials[i].bytes, content, n))
            return tok->specials[i].id;
    return -1;
}

bool k3_tok_is_special(const struct k3_tokenizer *tok, int32_t id)
{
    return id >= 0 && id < tok->vocab_size && tok->is_special[id];
}

int k3_tok_vocab_size(const struct k3_tokenizer *tok)
{
    return tok->vocab_size;
}

/* ============================================================ UTF-8 stream == */

static size_t put_fffd(char *out)
{
    out[0] = (char)0xEF;
    out[1] = (char)0xBF;
    out[2] = (char)0xBD;
    return 3;
}

/* How many bytes of s[0..n) (n >= 1, s[0] a lead byte) form a well-formed prefix of a
 * character, and the full length that character needs (0 when s[0] is no lead). */
static size_t utf8_prefix(const uint8_t *s, size_t n, size_t *need)
{
    uint8_t c = s[0];
    uint8_t lo = 0x80, hi = 0xBF;
    if (c < 0x80) {
        *need = 1;
        return 1;
    }
    if (c >= 0xC2 && c <= 0xDF)
        *need = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        *need = 3;
        lo = c == 0xE0 ? 0xA0 : 0x80;
        hi = c == 0xED ? 0x9F : 0xBF;
    } else if (c >= 0xF0 && c <= 0xF4) {
        *need = 4;
        lo = c == 0xF0 ? 0x90 : 0x80;
        hi = c == 0xF4 ? 0x8F : 0xBF;
    } else {
        *need = 0;
        return 0;
    }
    size_t k = 1;
    if (k < n && k < *need) {
        if (s[1] < lo || s[1] > hi)
            return 1;
        k = 2;
        while (k < n && k < *need && (s[k] & 0xC0) == 0x80)
            k++;
    }
    return k;
}

size_t k3_utf8_push(struct k3_utf8_stream *st, const uint8_t *bytes, size_t len, char *out)
{
    size_t o = 0, i = 0;
    /* Finish the held-back character first, byte by byte. */
    while (st->n_pending && i < len) {
        st->pending[st->n_pending++] = bytes[i];
        size_t need, k = utf8_prefix(st->pending, (size_t)st->n_pending, &need);
        if (k == (size_t)st->n_pending) { /* still a well-formed prefix */
            i++;
            if (k == need) {
                memcpy(out + o, st->pending, k);
                o += k;
                st->n_pending = 0;
            }
            continue;
        }
        /* bytes[i] does not continue it: U+FFFD for the prefix, then rescan bytes[i]. */
        o += put_fffd(out + o);
        st->n_pending = 0;
    }
    while (i < len) {
        if (bytes[i] < 0x80) {
            out[o++] = (char)bytes[i++];
            continue;
        }
        size_t need, k = utf8_prefix(bytes + i, len - i, &need);
        if (need == 0) {
            o += put_fffd(out + o);
            i++;
        } else if (k == need) {
            memcpy(out + o, bytes + i, k);
            o += k;
            i += k;
        } else if (i + k == len) { /* a well-formed prefix cut by the end: hold it */
            memcpy(st->pending, bytes + i, k);
            st->n_pending = (int)k;
            i += k;
        } else {
            o += put_fffd(out + o);
            i += k;
        }
    }
    return o;
}

size_t k3_utf8_flush(struct k3_utf8_stream *st, char *out)
{
    if (!st->n_pending)
        return 0;
    st->n_pending = 0;
    return put_fffd(out);
}
