/* k3_tok_synthesize: the same bytes every run, every rank reachable by BPE from its own
 * bytes, corpus text round-trips, K3's special names, and it is fast.  Runs both sizes
 * the project uses: k3-tiny (n_base 2032, vocab 2048) and k3-bench (163584, 163840). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "engine/base/clock.h"
#include "engine/synth/bpe_train.h"
#include "engine/synth/vocab.h"
#include "engine/text/tokenizer.h"
#include "engine/text/bpe.h"
#include "engine/text/tokenizer_internal.h"
#include "tests/check.h"
#include "tests/util.h"

static const char *root; /* this run's folder */

static char *slurp(const char *dir, const char *name, size_t *len)
{
    char path[700];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    char *buf = read_file(path, len);
    REQUIRE(buf, "cannot read %s", path);
    return buf;
}

static const char *synth(const char *name, int vocab, int n_base, double *seconds)
{
    static char dir[4][600];
    static int k;
    char *d = dir[k++ & 3];
    snprintf(d, 600, "%s/%s", root, name);
    struct k3_err err = {{0}};
    /* CPU seconds: the synthesis runs on one thread, so its bound holds however busy the
     * machine's other processes keep the cores (wall time would not) */
    double t0 = k3_cpu_seconds();
    REQUIRE(!k3_tok_synthesize(d, vocab, n_base, &err), "synthesize %s: %s", name, err.msg);
    if (seconds)
        *seconds = k3_cpu_seconds() - t0;
    return d;
}

static void test_deterministic(const char *a, const char *b, const char *what)
{
    const char *files[] = {"tiktoken.model", "tokenizer_config.json"};
    for (int i = 0; i < 2; i++) {
        size_t la, lb;
        char *x = slurp(a, files[i], &la), *y = slurp(b, files[i], &lb);
        CHECK(la == lb && !memcmp(x, y, la), "%s: %s differs between two runs", what, files[i]);
        free(x);
        free(y);
    }
}

/* The synthetic vocabulary is part of every synthetic checkpoint: its bytes are pinned.
 * A change here means the corpus, a training rule, or PCRE2's Unicode tables changed;
 * if that was meant, update the hashes (and every fixture made from a synthetic model). */
static void test_pinned_bytes(const char *dir, const char *what, uint64_t model, uint64_t config)
{
    const char *files[] = {"tiktoken.model", "tokenizer_config.json"};
    uint64_t want[] = {model, config};
    for (int i = 0; i < 2; i++) {
        size_t n;
        char *text = slurp(dir, files[i], &n);
        uint64_t h = XXH3_64bits(text, n);
        CHECK(h == want[i], "%s %s: XXH3 %016llx, pinned %016llx", what, files[i],
              (unsigned long long)h, (unsigned long long)want[i]);
        free(text);
    }
}

/* Line r of tiktoken.model is rank r; ranks 0..255 are the bytes in byte order. */
static void test_rank_layout(const struct k3_tokenizer *tok, const char *dir, int n_base)
{
    size_t len;
    char *text = slurp(dir, "tiktoken.model", &len);
    size_t lines = 0;
    for (size_t i = 0; i < len; i++)
        lines += text[i] == '\n';
    CHECK(lines == (size_t)n_base, "%zu lines, want n_base %d", lines, n_base);
    free(text);
    for (int b = 0; b < 256; b++) {
        size_t n;
        const uint8_t *p = k3_tok_bytes(tok, b, &n);
        CHECK(p && n == 1 && p[0] == b, "rank %d is not the byte 0x%02x", b, b);
    }
}

/* Tiktoken's merge on the bytes of rank r (without the whole-piece shortcut) gives
 * exactly [r], for every rank: the vocabulary has no dead tokens. */
static void test_every_rank_reachable(const struct k3_tokenizer *tok, int n_base)
{
    const struct k3_bytemap *m = k3_tok_map(tok);
    struct k3_bpe_scratch s = {0};
    int32_t out[256];
    int bad = 0;
    for (int32_t r = 0; r < n_base; r++) {
        size_t n;
        const uint8_t *p = k3_tok_bytes(tok, r, &n);
        REQUIRE(p && n <= 256, "rank %d: %zu bytes", r, n);
        long k = k3_bpe_merge(m, p, n, &s, out);
        if ((k != 1 || out[0] != r) && bad++ < 5)
            CHECK(0, "rank %d (\"%.*s\") merges into %ld tokens, first %d", r, (int)n, p, k, out[0]);
    }
    CHECK(bad == 0, "%d of %d ranks are not reachable", bad, n_base);
    k3_bpe_scratch_free(&s);
}

/* encode then decode gives the corpus back; prints the throughput. */
static void test_corpus_round_trip(const struct k3_tokenizer *tok, const char *what)
{
    const char *text = k3_corpus;
    size_t len = (size_t)(k3_corpus_end - k3_corpus);
    int32_t *ids;
    size_t n, back_len;
    struct k3_err err = {{0}};
    double t0 = k3_now();
    REQUIRE(!k3_tok_encode(tok, text, len, false, &ids, &n, &err), "%s", err.msg);
    double dt = k3_now() - t0;
    char *back;
    REQUIRE(!k3_tok_decode(tok, ids, n, &back, &back_len, &err), "%s", err.msg);
    CHECK(back_len == len && !memcmp(back, text, len), "%s: the corpus does not round-trip", what);
    printf("%s: corpus %zu bytes -> %zu tokens (%.2f bytes/token), encode %.1f MB/s\n", what, len,
           n, (double)len / (double)n, (double)len / dt / 1e6);
    /* And encode(decode(ids)) == ids: the encoding is canonical. */
    int32_t *again;
    size_t n2;
    REQUIRE(!k3_tok_encode(tok, back, back_len, false, &again, &n2, &err), "%s", err.msg);
    CHECK(n2 == n && !memcmp(again, ids, n * sizeof *ids), "%s: encode(decode(ids)) != ids", what);
    free(again);
    free(back);
    free(ids);
}

static void expect_special(const struct k3_tokenizer *tok, const char *name, int32_t id)
{
    CHECK(k3_tok_special(tok, name) == id, "%s is %d, want %d", name, k3_tok_special(tok, name), id);
}

static void test_tiny_specials(const struct k3_tokenizer *tok)
{
    expect_special(tok, "[BOS]", 2032);
    expect_special(tok, "[EOS]", 2033);
    expect_special(tok, "<|end_of_msg|>", 2034);
    expect_special(tok, "<|open|>", 2035);
    expect_special(tok, "<|close|>", 2036);
    expect_special(tok, "<|sep|>", 2037);
    expect_special(tok, "<|reserved_token_2038|>", 2038);
    expect_special(tok, "[EOT]", 2041);
    expect_special(tok, "<|reserved_token_2045|>", 2045);
    expect_special(tok, "[UNK]", 2046);
    expect_special(tok, "[PAD]", 2047);
    expect_special(tok, "<|media_pad|>", -1); /* index 21 does not fit in 16 slots */
}

static void test_bench_specials(const struct k3_tokenizer *tok)
{
    expect_special(tok, "[BOS]", 163584);
    expect_special(tok, "[EOS]", 163585);
    expect_special(tok, "<|end_of_msg|>", 163586);
    expect_special(tok, "<|open|>", 163587);
    expect_special(tok, "<|close|>", 163588);
    expect_special(tok, "<|sep|>", 163589);
    expect_special(tok, "[EOT]", 163593);
    expect_special(tok, "<|media_begin|>", 163602);
    expect_special(tok, "<|media_content|>", 163603);
    expect_special(tok, "<|media_end|>", 163604);
    expect_special(tok, "<|media_pad|>", 163605);
    expect_special(tok, "<|reserved_token_163606|>", 163606);
    expect_special(tok, "[UNK]", 163838);
    expect_special(tok, "[PAD]", 163839);
}

static void test_config_fields(const char *dir)
{
    size_t len;
    char *text = slurp(dir, "tokenizer_config.json", &len);
    static const char *const want[] = {
        "\"bos_token\": \"[BOS]\"", "\"eos_token\": \"[EOS]\"", "\"pad_token\": \"[PAD]\"",
        "\"unk_token\": \"[UNK]\"", "\"tokenizer_class\": \"TikTokenTokenizer\"",
        "\"model_max_length\":", "\"lstrip\": false", "\"normalized\": false",
        "\"rstrip\": false", "\"single_word\": false", "\"special\": true"};
    for (size_t i = 0; i < sizeof want / sizeof *want; i++)
        CHECK(strstr(text, want[i]), "tokenizer_config.json lacks %s", want[i]);
    free(text);
}

/* The small vocabulary is made of word pieces of the corpus. */
static void test_tiny_reads_as_words(const struct k3_tokenizer *tok)
{
    static const char *const words[] = {" the", " License", " software", " of", " and", "ing"};
    const struct k3_bytemap *m = k3_tok_map(tok);
    for (size_t i = 0; i < sizeof words / sizeof *words; i++)
        CHECK(k3_bm_find(m, (const uint8_t *)words[i], strlen(words[i])) >= 0,
              "\"%s\" is not a k3-tiny token", words[i]);
}

static void test_bad_arguments(void)
{
    struct k3_err err = {{0}};
    char dir[600];
    snprintf(dir, sizeof dir, "%s/bad", root);
    CHECK(k3_tok_synthesize(dir, 2048, 100, &err) == -1 && strstr(err.msg, "n_base 100"),
          "n_base < 256: \"%s\"", err.msg);
    CHECK(k3_tok_synthesize(dir, 2033, 2032, &err) == -1 && strstr(err.msg, "vocab_size 2033"),
          "one special slot: \"%s\"", err.msg);
}

int main(void)
{
    root = test_tmp_dir("test_tokenizer_synth");
    double t_tiny, t_bench;
    const char *tiny = synth("tiny1", 2048, 2032, &t_tiny);
    const char *tiny2 = synth("tiny2", 2048, 2032, NULL);
    const char *bench = synth("bench1", 163840, 163584, &t_bench);
    const char *bench2 = synth("bench2", 163840, 163584, NULL);
    printf("synthesize: k3-tiny %.3f s, k3-bench %.3f s of CPU\n", t_tiny, t_bench);
    CHECK(t_tiny < 1.0 * CHECK_SLOWDOWN, "k3-tiny took %.2f s of CPU", t_tiny);
    CHECK(t_bench < 10.0 * CHECK_SLOWDOWN, "k3-bench took %.2f s of CPU", t_bench);
    test_deterministic(tiny, tiny2, "k3-tiny");
    test_deterministic(bench, bench2, "k3-bench");
    test_pinned_bytes(tiny, "k3-tiny", 0xb83d2eb1cfd95892ULL, 0x0183f9edcdfcdb7cULL);
    test_pinned_bytes(bench, "k3-bench", 0x5fe601078e3c2c38ULL, 0xf95de6d2e82838e9ULL);

    struct k3_tokenizer *tok;
    struct k3_err err = {{0}};
    REQUIRE(!k3_tok_load(&tok, tiny, 2048, NULL, false, &err), "%s", err.msg);
    test_rank_layout(tok, tiny, 2032);
    test_every_rank_reachable(tok, 2032);
    test_corpus_round_trip(tok, "k3-tiny");
    test_tiny_specials(tok);
    test_tiny_reads_as_words(tok);
    k3_tok_free(tok);
    test_config_fields(tiny);

    REQUIRE(!k3_tok_load(&tok, bench, 163840, NULL, false, &err), "%s", err.msg);
    test_rank_layout(tok, bench, 163584);
    test_every_rank_reachable(tok, 163584);
    test_corpus_round_trip(tok, "k3-bench");
    test_bench_specials(tok);
    k3_tok_free(tok);

    test_bad_arguments();
    return check_result();
}
