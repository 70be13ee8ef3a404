/* The grammar mask's cost per token at K3's vocabulary size (163,840 ids): a vocabulary
 * synthesized as k3-bench's is (engine/synth: BPE on the built-in corpus, then word-like
 * joins), or one whose filler ranks are random byte strings heavy in quotes, backslashes,
 * newlines and punctuation (--vocab stress), or a tokenizer folder (--tokenizer DIR, e.g.
 * K3's own).  The matcher is driven to positions of a tools and a response_format grammar
 * by accepting the encoded text before them, and k3_matcher_mask is timed there.
 * usage: bench/grammar [--vocab synth|stress] [--tokenizer DIR] [--reps N] [--csv FILE]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <xxhash.h>

#include "engine/base/clock.h"
#include "engine/base/rng.h"
#include "engine/grammar/grammar.h"
#include "engine/synth/vocab.h"
#include "engine/text/base64.h"
#include "engine/text/tokenizer.h"

#define K3_VOCAB 163840
#define K3_BASE 163584

static void die(const char *what, const char *msg)
{
    fprintf(stderr, "grammar: %s: %s\n", what, msg);
    exit(1);
}

/* Whether text (a base64 token) was seen; remembers it.  set: [1 << 19] hashes. */
static bool seen(uint64_t *set, const char *text)
{
    uint64_t h = XXH3_64bits(text, strlen(text)) | 1;
    size_t i = h & ((1u << 19) - 1);
    while (set[i] && set[i] != h)
        i = (i + 1) & ((1u << 19) - 1);
    bool was = set[i] == h;
    set[i] = h;
    return was;
}

/* Rewrites dir/tiktoken.model: the first 20,000 ranks (the bytes and the corpus's merges)
 * stay; the rest become distinct random strings of 2..14 bytes (about 6 on average, as BPE
 * vocabularies run), a quarter of their bytes punctuation (", \, newline, tab, braces...),
 * the rest letters, digits and spaces: many more tokens that a JSON string cannot take
 * whole than a real vocabulary has. */
static void stress_vocab(const char *dir)
{
    char path[600], line[512];
    snprintf(path, sizeof path, "%s/tiktoken.model", dir);
    FILE *in = fopen(path, "r");
    char **lines = calloc(K3_BASE, sizeof *lines);
    int n = 0;
    while (in && n < K3_BASE && fgets(line, sizeof line, in))
        lines[n++] = strdup(line);
    if (!in || n != K3_BASE)
        die(path, "cannot read the synthesized ranks");
    fclose(in);
    FILE *out = fopen(path, "w");
    uint64_t *set = calloc(1u << 19, sizeof *set);
    if (!out || !set)
        die(path, "cannot write");
    static const char punct[] = "\"\\\n\t{}[]:,.()<>/=-_;'`*#&|!?";
    static const char word[] = "etaoinshrdlucmfwypvbgkjqxzETAOINS0123456789   ";
    struct k3_rng r;
    k3_rng_seed(&r, 42);
    for (int i = 0; i < n; i++) {
        char b64[64];
        if (i < 20000) {
            sscanf(lines[i], "%63s", b64);
            seen(set, b64);
            fputs(lines[i], out);
            continue;
        }
        do {
            uint8_t tok[16];
            int len = 2 + (int)(k3_rng_next(&r) % 5) + (int)(k3_rng_next(&r) % 5) +
                      (int)(k3_rng_next(&r) % 5);
            for (int k = 0; k < len; k++)
                tok[k] = (uint8_t)(k3_rng_next(&r) % 4 == 0
                                       ? punct[k3_rng_next(&r) % (sizeof punct - 1)]
                                       : word[k3_rng_next(&r) % (sizeof word - 1)]);
            b64[k3_b64_encode(tok, (size_t)len, b64)] = 0;
        } while (seen(set, b64));
        fprintf(out, "%s %d\n", b64, i);
    }
    fclose(out);
    for (int i = 0; i < n; i++)
        free(lines[i]);
    free(lines);
    free(set);
}

/* Accepts the tokens of text (structural tokens spelled \1..\4), as a model would. */
static void feed(struct k3_matcher *m, const struct k3_tokenizer *tok, const char *text)
{
    static const char *const names[4] = {"<|open|>", "<|close|>", "<|sep|>", "<|end_of_msg|>"};
    while (*text) {
        if (*text >= 1 && *text <= 4) {
            if (k3_matcher_accept(m, k3_tok_special(tok, names[*text - 1])))
                die("feed", "a structural token is refused");
            text++;
            continue;
        }
        size_t len = 0;
        while (text[len] && (text[len] < 1 || text[len] > 4))
            len++;
        int32_t *ids;
        size_t n;
        struct k3_err err;
        if (k3_tok_encode(tok, text, len, false, &ids, &n, &err))
            die("encode", err.msg);
        for (size_t i = 0; i < n; i++)
            if (k3_matcher_accept(m, ids[i]))
                die("feed: text refused", text);
        free(ids);
        text += len;
    }
}

struct position {
    const char *name, *grammar, *prefix;
};

static const char tools[] =
    "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":"
    "\"object\",\"properties\":{\"city\":{\"type\":\"string\"},\"days\":{\"type\":\"integer\","
    "\"minimum\":1,\"maximum\":14},\"opts\":{\"type\":\"object\",\"properties\":{\"unit\":{\"enum\":"
    "[\"c\",\"f\"]},\"note\":{\"type\":\"string\"}}}},\"required\":[\"city\"]}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"search\",\"parameters\":{\"type\":\"object\","
    "\"properties\":{\"query\":{\"type\":\"string\"}}}}}]";
static const char schema[] =
    "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},\"age\":{\"type\":"
    "\"integer\",\"minimum\":0,\"maximum\":150},\"score\":{\"type\":\"number\"},\"tags\":{\"type\":"
    "\"array\",\"items\":{\"type\":\"string\",\"maxLength\":12}},\"meta\":{\"type\":\"object\"}},"
    "\"required\":[\"name\"]}";

static const struct position positions[] = {
    {"reasoning text (think channel)", "json+think", "Let me think about the"},
    {"JSON string value", "json", "{\"name\":\"Ada Lovel"},
    {"JSON string, maxLength 12, 7 left", "json", "{\"name\":\"A\",\"tags\":[\"abcde"},
    {"JSON integer (minimum/maximum)", "json", "{\"name\":\"A\",\"age\":1"},
    {"JSON number", "json", "{\"name\":\"A\",\"score\":3.1"},
    {"after a value: , or }", "json", "{\"name\":\"A\""},
    {"after , : a property key", "json", "{\"name\":\"A\","},
    {"object start", "json", ""},
    {"any JSON value (free-form object)", "json", "{\"name\":\"A\",\"meta\":{\"k\":"},
    {"XTML raw string argument", "tools", "\2response\3\1tools\3\1call tool=\"get_weather\" "
                                          "index=\"1\"\3\1argument key=\"city\" type=\"string\"\3Par"},
    {"XTML call header (tool name)", "tools", "\2response\3\1tools\3\1call tool=\"get_"},
    {"XTML after an argument", "tools", "\2response\3\1tools\3\1call tool=\"get_weather\" "
                                        "index=\"1\"\3\1argument key=\"city\" type=\"string\"\3Paris"
                                        "\2argument\3"},
};

int main(int argc, char **argv)
{
    const char *vocab = "synth", *dir = NULL, *csv = NULL;
    int reps = 200;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--vocab") && i + 1 < argc)
            vocab = argv[++i];
        else if (!strcmp(argv[i], "--tokenizer") && i + 1 < argc)
            dir = argv[++i];
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--csv") && i + 1 < argc)
            csv = argv[++i];
        else {
            printf("usage: %s [--vocab synth|stress (default synth)] [--tokenizer DIR] "
                   "[--reps N (default 200)] [--csv FILE]\n", argv[0]);
            return strcmp(argv[i], "--help") ? 1 : 0;
        }
    }
    char tmp[] = "/tmp/k3-grammar-bench.XXXXXX";
    struct k3_err err;
    double t0 = k3_now();
    if (!dir) {
        if (!mkdtemp(tmp))
            die(tmp, "mkdtemp failed");
        dir = tmp;
        if (k3_tok_synthesize(dir, K3_VOCAB, K3_BASE, &err))
            die("synthesize", err.msg);
        if (!strcmp(vocab, "stress"))
            stress_vocab(dir);
    } else {
        vocab = dir;
    }
    struct k3_tokenizer *tok;
    struct k3_vocab_trie *trie;
    if (k3_tok_load(&tok, dir, 0, NULL, false, &err))
        die("load", err.msg);
    double t1 = k3_now();
    if (k3_vocab_trie_build(tok, &trie, &err))
        die("trie", err.msg);
    double t2 = k3_now();
    int n = k3_tok_vocab_size(tok), quoted = 0;
    double bytes = 0;
    for (int id = 0; id < n; id++) {
        size_t len;
        const uint8_t *p = k3_tok_bytes(tok, id, &len);
        if (!p || k3_tok_is_special(tok, id))
            continue;
        bytes += (double)len;
        for (size_t k = 0; k < len; k++)
            if (p[k] == '"' || p[k] == '\\' || p[k] < 0x20) {
                quoted++;
                break;
            }
    }
    printf("grammar bench: vocab %s, %d ids, %.2f bytes a token, %d (%.1f%%) with a JSON string "
           "stop (\" \\ or control); load %.2f s, trie %.3f s; reps %d\n", vocab, n, bytes / n,
           quoted, 100.0 * quoted / n, t1 - t0, t2 - t1, reps);
    FILE *out = csv ? fopen(csv, "w") : NULL;
    if (out)
        fprintf(out, "vocab,position,ms_per_mask,allowed\n");
    uint32_t *bits = malloc(sizeof *bits * (size_t)(n + 31) / 32);
    json_t *tj = json_loads(tools, 0, NULL), *sj = json_loads(schema, 0, NULL);
    printf("%-36s %12s %10s\n", "position", "ms/token", "allowed");
    for (size_t i = 0; i < sizeof positions / sizeof *positions; i++) {
        const struct position *p = &positions[i];
        struct k3_grammar *g;
        struct k3_grammar_fault f;
        bool think = strstr(p->grammar, "think") != NULL;
        int rc = !strcmp(p->grammar, "tools") ? k3_grammar_tools(tj, NULL, true, false, &g, &f)
                                              : k3_grammar_json(sj, think, &g, &f);
        if (rc)
            die(f.param, f.message);
        struct k3_matcher *m;
        if (k3_matcher_new(g, tok, &m, &err))
            die("matcher", err.msg);
        feed(m, tok, p->prefix);
        k3_matcher_mask(m, trie, bits); /* warm */
        double s = k3_now();
        for (int r = 0; r < reps; r++)
            k3_matcher_mask(m, trie, bits);
        double ms = (k3_now() - s) * 1e3 / reps;
        int allowed = 0;
        for (int w = 0; w < (n + 31) / 32; w++)
            allowed += __builtin_popcount(bits[w]);
        printf("%-36s %12.4f %10d\n", p->name, ms, allowed);
        if (out)
            fprintf(out, "%s,%s,%.5f,%d\n", vocab, p->name, ms, allowed);
        k3_matcher_free(m);
        k3_grammar_free(g);
    }
    if (out)
        fclose(out);
    json_decref(tj);
    json_decref(sj);
    free(bits);
    k3_vocab_trie_free(trie);
    k3_tok_free(tok);
    if (dir == tmp) {
        char cmd[700];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
        if (system(cmd))
            fprintf(stderr, "grammar: could not remove %s\n", tmp);
    }
    return 0;
}
