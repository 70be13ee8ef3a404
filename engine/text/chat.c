#include "engine/text/chat.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct ids {
    int32_t *v;
    size_t n, cap;
};

static int append(struct ids *out, const struct k3_tokenizer *tok, const char *text,
                  bool markup, struct k3_err *err)
{
    int32_t *ids;
    size_t n;
    if (k3_tok_encode(tok, text, strlen(text), markup, &ids, &n, err))
        return -1;
    if (out->n + n > out->cap) {
        size_t cap = out->cap ? out->cap : 64;
        while (cap < out->n + n)
            cap *= 2;
        int32_t *v = realloc(out->v, cap * sizeof *v);
        if (!v) {
            free(ids);
            return k3_errf(err, "out of memory");
        }
        out->v = v;
        out->cap = cap;
    }
    memcpy(out->v + out->n, ids, n * sizeof *ids);
    out->n += n;
    free(ids);
    return 0;
}

static int message(struct ids *out, const struct k3_tokenizer *tok, const char *role,
                   const char *text, struct k3_err *err)
{
    char open[64];
    snprintf(open, sizeof open, "<|open|>message role=\"%s\"<|sep|>", role);
    return append(out, tok, open, true, err) || append(out, tok, text, false, err) ||
           append(out, tok, "<|close|>message<|sep|><|end_of_msg|>", true, err);
}

int k3_chat_prompt(const struct k3_tokenizer *tok, const char *system, const char *user,
                   bool thinking, int32_t **ids, size_t *n, struct k3_err *err)
{
    const char *needed[] = {"<|open|>", "<|close|>", "<|sep|>", "<|end_of_msg|>"};
    for (size_t i = 0; i < sizeof needed / sizeof *needed; i++)
        if (k3_tok_special(tok, needed[i]) < 0)
            return k3_errf(err, "--chat: the tokenizer has no %s special token", needed[i]);
    struct ids out = {0};
    int rc = (system && message(&out, tok, "system", system, err)) ||
             message(&out, tok, "user", user, err) ||
             append(&out, tok,
                    thinking ? "<|open|>message role=\"assistant\"<|sep|><|open|>think<|sep|>"
                             : "<|open|>message role=\"assistant\"<|sep|><|open|>response<|sep|>",
                    true, err);
    if (rc) {
        free(out.v);
        return -1;
    }
    *ids = out.v;
    *n = out.n;
    return 0;
}
