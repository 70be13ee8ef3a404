/* Byte-level BPE as tiktoken does it: lowest-rank pair first, leftmost on ties, a whole
 * piece that is a token maps directly; the heap used for long pieces merges in exactly
 * the same order as the min-scan; long pieces stay fast. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "engine/base/clock.h"
#include "engine/text/tokenizer.h"
#include "engine/text/bpe.h"
#include "engine/text/bytemap.h"
#include "tests/check.h"
#include "tests/util.h"

static const char *root; /* this run's folder */

/* Writes a vocabulary of the 256 bytes plus tokens[i] at rank 256 + i; loads it with
 * the given pattern ("(?s).+": the whole text is one piece). */
static struct k3_tokenizer *hand_vocab(const char *name, const char *const *tokens, int n,
                                       const char *pattern)
{
    char dir[700], path[800], e[256];
    snprintf(dir, sizeof dir, "%s/%s", root, name);
    mkdir(dir, 0755);
    snprintf(path, sizeof path, "%s/tiktoken.model", dir);
    FILE *f = fopen(path, "wb");
    REQUIRE(f, "cannot write %s", path);
    for (int b = 0; b < 256; b++) {
        uint8_t c = (uint8_t)b;
        test_b64(&c, 1, e);
        fprintf(f, "%s %d\n", e, b);
    }
    for (int i = 0; i < n; i++) {
        test_b64((const uint8_t *)tokens[i], strlen(tokens[i]), e);
        fprintf(f, "%s %d\n", e, 256 + i);
    }
    fclose(f);
    struct k3_tokenizer *tok;
    struct k3_err err = {{0}};
    REQUIRE(!k3_tok_load(&tok, dir, 0, pattern, true, &err), "load %s: %s", dir, err.msg);
    return tok;
}

static void expect_ids(const struct k3_tokenizer *tok, const char *text, const int32_t *want,
                       size_t n_want)
{
    int32_t *ids;
    size_t n;
    struct k3_err err = {{0}};
    REQUIRE(!k3_tok_encode(tok, text, strlen(text), false, &ids, &n, &err), "%s", err.msg);
    bool same = n == n_want && !memcmp(ids, want, n * sizeof *ids);
    char got[256] = "";
    for (size_t i = 0, o = 0; i < n && o < 200; i++)
        o += (size_t)snprintf(got + o, sizeof got - o, "%s%d", i ? "," : "", ids[i]);
    CHECK(same, "\"%s\" encodes to [%s]", text, got);
    free(ids);
}

#define IDS(...) (const int32_t[]){__VA_ARGS__}, sizeof((const int32_t[]){__VA_ARGS__}) / 4

/* "bc" (256) outranks "ab" (257): "abcd" merges b+c first, and "a"+"bc" = "abc" is no
 * token, so it stays [a, bc, d]; merging left to right would have given [ab, c, d]. */
static void test_lowest_rank_first(void)
{
    static const char *const v[] = {"bc", "ab", "de", "ef"};
    struct k3_tokenizer *tok = hand_vocab("order", v, 4, "(?s).+");
    expect_ids(tok, "abcd", IDS('a', 256, 'd'));
    expect_ids(tok, "def", IDS(258, 'f')); /* de (258) outranks ef (259) */
    k3_tok_free(tok);
}

static void test_rank_decides_not_position(void)
{
    /* "ef" at 256 outranks "de" at 257: in "def" the right pair merges first. */
    static const char *const v[] = {"ef", "de"};
    struct k3_tokenizer *tok = hand_vocab("order2", v, 2, "(?s).+");
    expect_ids(tok, "def", IDS('d', 256));
    expect_ids(tok, "dede", IDS(257, 257));
    k3_tok_free(tok);
}

/* Equal ranks: the leftmost pair merges first ("aaa" -> [aa, a], never [a, aa]), and
 * joins of joins follow ("aaaaa" -> [aa,a,a,a] -> [aa,aa,a] -> [aaaa, a]). */
static void test_leftmost_on_ties(void)
{
    static const char *const v[] = {"aa", "aaaa"};
    struct k3_tokenizer *tok = hand_vocab("ties", v, 2, "(?s).+");
    expect_ids(tok, "aaa", IDS(256, 'a'));
    expect_ids(tok, "aaaaa", IDS(257, 'a'));
    expect_ids(tok, "aaaaaa", IDS(257, 256));
    k3_tok_free(tok);
}

/* A piece that is a token maps to it even when no merge path reaches it. */
static void test_whole_piece_shortcut(void)
{
    static const char *const v[] = {"xyz"};
    struct k3_tokenizer *tok = hand_vocab("whole", v, 1, "(?s).+");
    expect_ids(tok, "xyz", IDS(256));
    expect_ids(tok, "xyzz", IDS('x', 'y', 'z', 'z'));
    k3_tok_free(tok);
}

/* ---- scan == heap == a naive reference, on random vocabularies and texts ---- */

static uint64_t rng = 88172645463325252ULL;
static uint32_t rnd(uint32_t n)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng % n);
}

/* tiktoken's loop written plainly: O(n^3), obviously right. */
static size_t naive_merge(const struct k3_bytemap *m, const uint8_t *p, size_t len, int32_t *out)
{
    size_t start[1024], n = len;
    for (size_t i = 0; i <= len; i++)
        start[i] = i;
    for (;;) {
        int32_t best = -1;
        size_t bi = 0;
        for (size_t i = 0; i + 1 < n; i++) {
            int32_t r = k3_bm_find(m, p + start[i], start[i + 2] - start[i]);
            if (r >= 0 && (best < 0 || r < best)) {
                best = r;
                bi = i;
            }
        }
        if (best < 0)
            break;
        memmove(start + bi + 1, start + bi + 2, (n - bi - 1) * sizeof *start);
        n--;
    }
    for (size_t i = 0; i < n; i++)
        out[i] = k3_bm_find(m, p + start[i], start[i + 1] - start[i]);
    return n;
}

static void test_heap_equals_scan(void)
{
    struct k3_bytemap m;
    REQUIRE(!k3_bm_init(&m, 4096, 4096), "oom");
    for (int b = 0; b < 256; b++) {
        uint8_t c = (uint8_t)b;
        k3_bm_add(&m, &c, 1, b, true);
    }
    /* Ranks 256..1255: random joins of two earlier tokens over the alphabet "abcd". */
    int32_t pool[1300] = {'a', 'b', 'c', 'd'}, n_pool = 4, n_tok = 256;
    uint8_t buf[1024];
    while (n_tok < 1256) {
        size_t la, lb;
        const uint8_t *pa = k3_bm_bytes(&m, pool[rnd((uint32_t)n_pool)], &la);
        const uint8_t *pb = k3_bm_bytes(&m, pool[rnd((uint32_t)n_pool)], &lb);
        if (la + lb > 12)
            continue;
        memcpy(buf, pa, la);
        memcpy(buf + la, pb, lb);
        if (k3_bm_find(&m, buf, la + lb) >= 0)
            continue;
        k3_bm_add(&m, buf, la + lb, n_tok, true);
        pool[n_pool++] = n_tok++;
    }
    struct k3_bpe_scratch s = {0};
    int32_t o1[1024], o2[1024], o3[1024];
    int bad = 0;
    for (int iter = 0; iter < 3000; iter++) {
        size_t len = 1 + rnd(iter < 2500 ? 40 : 600);
        for (size_t i = 0; i < len; i++)
            buf[i] = (uint8_t)("abcd"[rnd(rnd(8) ? 2 : 4)]);
        long n1 = k3_bpe_merge_scan(&m, buf, len, &s, o1);
        long n2 = k3_bpe_merge_heap(&m, buf, len, &s, o2);
        size_t n3 = naive_merge(&m, buf, len, o3);
        if ((n1 != n2 || memcmp(o1, o2, (size_t)n1 * 4) || (size_t)n1 != n3 ||
             memcmp(o1, o3, n3 * 4)) && bad++ < 3)
            CHECK(0, "length %zu: scan %ld tokens, heap %ld, naive %zu", len, n1, n2, n3);
    }
    CHECK(bad == 0, "%d of 3000 random pieces merged differently", bad);
    k3_bpe_scratch_free(&s);
    k3_bm_free(&m);
}

/* ---- long pieces ---------------------------------------------------------- */

/* 100 KB single pieces (a whitespace run, one letter repeated, random letters) encode
 * in well under a second of CPU (this process's, which another tenant's load does not
 * stretch; sanitized builds get CHECK_SLOWDOWN): the heap keeps them O(n log n), where the
 * min-scan would do ~10^10 steps.  Each round-trips. */
static void test_long_pieces_are_fast(void)
{
    static const char *const v[] = {"  ", "    ", "        ", "                ", "aa", "aaaa",
                                    "ab", "ba", "abab", "baba"};
    struct k3_tokenizer *whole = hand_vocab("long", v, 10, "(?s).+");
    struct k3_tokenizer *k3 = hand_vocab("long_k3", v, 10, NULL);
    enum { N = 100000 };
    char *text = malloc(N + 1);
    for (int kind = 0; kind < 4; kind++) {
        for (int i = 0; i < N; i++)
            text[i] = kind == 0 ? ' ' : kind == 1 ? 'a' : kind == 2 ? "ab"[i & 1] : "ab"[rnd(2)];
        text[N] = 0;
        for (int t = 0; t < 2; t++) {
            const struct k3_tokenizer *tok = t ? k3 : whole;
            int32_t *ids;
            size_t n;
            struct k3_err err = {{0}};
            double t0 = k3_cpu_seconds();
            REQUIRE(!k3_tok_encode(tok, text, N, false, &ids, &n, &err), "%s", err.msg);
            double dt = k3_cpu_seconds() - t0;
            CHECK(dt < 1.0 * CHECK_SLOWDOWN, "kind %d, %s pattern: 100 KB took %.2f s of CPU", kind,
                  t ? "K3" : "whole", dt);
            if (kind == 0 && !t)
                CHECK(n == N / 16, "100000 spaces: %zu tokens, want 6250 runs of 16", n);
            char *back;
            size_t bl;
            REQUIRE(!k3_tok_decode(tok, ids, n, &back, &bl, &err), "%s", err.msg);
            CHECK(bl == N && !memcmp(back, text, N), "kind %d does not round-trip", kind);
            free(back);
            free(ids);
        }
    }
    free(text);
    k3_tok_free(whole);
    k3_tok_free(k3);
}

int main(void)
{
    root = test_tmp_dir("test_tokenizer_bpe");
    test_lowest_rank_first();
    test_rank_decides_not_position();
    test_leftmost_on_ties();
    test_whole_piece_shortcut();
    test_heap_equals_scan();
    test_long_pieces_are_fast();
    return check_result();
}
