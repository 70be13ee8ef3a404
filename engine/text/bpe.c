/* Byte-pair merge.  See bpe.h. */
#include "engine/text/bpe.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

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
