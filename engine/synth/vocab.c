/* A synthetic model's vocabulary files: tiktoken.model from the ranks bpe_train.c
 * learns on the embedded corpus, tokenizer_config.json with the special slots named as
 * K3 names them.  See vocab.h. */
#include "engine/synth/vocab.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "engine/synth/bpe_train.h"
#include "engine/text/base64.h"
#include "engine/text/utf8.h"

const char *k3_special_name(int32_t id, int n_base, int vocab_size, char *buf, size_t size)
{
    int i = id - n_base, n_slots = vocab_size - n_base;
    const char *name = NULL;
    if (i == n_slots - 2)
        name = "[UNK]";
    else if (i == n_slots - 1)
        name = "[PAD]";
    else
        switch (i) {
        case 0: name = "[BOS]"; break;
        case 1: name = "[EOS]"; break;
        case 2: name = "<|end_of_msg|>"; break;
        case 3: name = "<|open|>"; break;
        case 4: name = "<|close|>"; break;
        case 5: name = "<|sep|>"; break;
        case 9: name = "[EOT]"; break;
        case 18: name = "<|media_begin|>"; break;
        case 19: name = "<|media_content|>"; break;
        case 20: name = "<|media_end|>"; break;
        case 21: name = "<|media_pad|>"; break;
        default: break;
        }
    if (name)
        snprintf(buf, size, "%s", name);
    else
        snprintf(buf, size, "<|reserved_token_%d|>", (int)id);
    return buf;
}

static int write_ranks(const char *path, const uint8_t *tokens, const uint32_t *off, int n_base,
                       struct k3_err *err)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return k3_errf(err, "%s: %s", path, strerror(errno));
    char *line = NULL;
    size_t line_cap = 0;
    int rc = 0;
    for (int32_t id = 0; id < n_base && !rc; id++) {
        size_t n = off[id + 1] - off[id], need = K3_B64_LEN(n) + 16;
        if (need > line_cap) {
            free(line);
            line_cap = 2 * need;
            line = malloc(line_cap);
            if (!line) {
                rc = k3_errf(err, "%s: out of memory", path);
                break;
            }
        }
        size_t o = k3_b64_encode(tokens + off[id], n, line);
        o += (size_t)snprintf(line + o, line_cap - o, " %d\n", (int)id);
        if (fwrite(line, 1, o, f) != o)
            rc = k3_errf(err, "%s: write failed: %s", path, strerror(errno));
    }
    free(line);
    if (fclose(f) && !rc)
        rc = k3_errf(err, "%s: write failed: %s", path, strerror(errno));
    return rc;
}

static int write_config(const char *path, int n_base, int vocab_size, struct k3_err *err)
{
    json_t *root = json_object(), *dec = json_object();
    char name[64], key[16];
    for (int32_t id = n_base; id < vocab_size; id++) {
        json_t *e = json_object();
        json_object_set_new(e, "content", json_string(k3_special_name(id, n_base, vocab_size,
                                                                      name, sizeof name)));
        json_object_set_new(e, "lstrip", json_false());
        json_object_set_new(e, "normalized", json_false());
        json_object_set_new(e, "rstrip", json_false());
        json_object_set_new(e, "single_word", json_false());
        json_object_set_new(e, "special", json_true());
        snprintf(key, sizeof key, "%d", (int)id);
        json_object_set_new(dec, key, e);
    }
    json_object_set_new(root, "added_tokens_decoder", dec);
    json_object_set_new(root, "bos_token", json_string("[BOS]"));
    json_object_set_new(root, "clean_up_tokenization_spaces", json_false());
    json_object_set_new(root, "eos_token", json_string("[EOS]"));
    json_object_set_new(root, "model_max_length", json_integer(1048576));
    json_object_set_new(root, "pad_token", json_string("[PAD]"));
    json_object_set_new(root, "tokenizer_class", json_string("TikTokenTokenizer"));
    json_object_set_new(root, "unk_token", json_string("[UNK]"));
    char *text = json_dumps(root, JSON_INDENT(2));
    json_decref(root);
    if (!text)
        return k3_errf(err, "%s: out of memory", path);
    int rc = 0;
    FILE *f = fopen(path, "wb");
    if (!f)
        rc = k3_errf(err, "%s: %s", path, strerror(errno));
    else {
        size_t n = strlen(text);
        if (fwrite(text, 1, n, f) != n || fputc('\n', f) == EOF)
            rc = k3_errf(err, "%s: write failed: %s", path, strerror(errno));
        if (fclose(f) && !rc)
            rc = k3_errf(err, "%s: write failed: %s", path, strerror(errno));
    }
    free(text);
    return rc;
}

int k3_tok_synthesize(const char *dir, int vocab_size, int n_base, struct k3_err *err)
{
    if (n_base < 256)
        return k3_errf(err, "synthesize: n_base %d < 256 (the single bytes)", n_base);
    if (vocab_size < n_base + 2)
        return k3_errf(err, "synthesize: vocab_size %d leaves fewer than 2 special slots after "
                       "n_base %d ([UNK] and [PAD] need them)", vocab_size, n_base);
    if (mkdir(dir, 0755) && errno != EEXIST)
        return k3_errf(err, "%s: %s", dir, strerror(errno));
    const uint8_t *corpus = (const uint8_t *)k3_corpus;
    size_t len = (size_t)(k3_corpus_end - k3_corpus);
    size_t bad = k3_utf8_invalid_at(corpus, len);
    if (bad != len)
        return k3_errf(err, "synthesize: embedded corpus: invalid UTF-8 at byte %zu", bad);
    uint8_t *tokens;
    uint32_t *off;
    if (k3_bpe_learn(corpus, len, n_base, &tokens, &off, NULL, err))
        return -1;
    char path[4096];
    snprintf(path, sizeof path, "%s/tiktoken.model", dir);
    int rc = write_ranks(path, tokens, off, n_base, err);
    free(tokens);
    free(off);
    if (rc)
        return -1;
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    return write_config(path, n_base, vocab_size, err);
}
