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

/* One message element; an assistant's text sits in a response element, as the model
 * writes it after the generation prompt. */
static int message(struct ids *out, const struct k3_tokenizer *tok, const struct k3_chat_msg *m,
                   struct k3_err *err)
{
    bool assistant = !strcmp(m->role, "assistant");
    if (!assistant && strcmp(m->role, "system") && strcmp(m->role, "user"))
        return k3_errf(err, "role \"%.32s\" is not system, user or assistant", m->role);
    char open[96];
    snprintf(open, sizeof open, "<|open|>message role=\"%s\"<|sep|>%s", m->role,
             assistant ? "<|open|>response<|sep|>" : "");
    return append(out, tok, open, true, err) || append(out, tok, m->text, false, err) ||
           append(out, tok,
                  assistant ? "<|close|>response<|sep|><|close|>message<|sep|><|end_of_msg|>"
                            : "<|close|>message<|sep|><|end_of_msg|>",
                  true, err);
}

int k3_chat_messages(const struct k3_tokenizer *tok, const struct k3_chat_msg *msgs, int n,
                     bool thinking, int32_t **ids, size_t *n_ids, struct k3_err *err)
{
    const char *needed[] = {"<|open|>", "<|close|>", "<|sep|>", "<|end_of_msg|>"};
    for (size_t i = 0; i < sizeof needed / sizeof *needed; i++)
        if (k3_tok_special(tok, needed[i]) < 0)
            return k3_errf(err, "the tokenizer has no %s special token", needed[i]);
    struct ids out = {0};
    int rc = 0;
    for (int i = 0; !rc && i < n; i++)
        rc = message(&out, tok, &msgs[i], err);
    if (!rc)
        rc = append(&out, tok,
                    thinking ? "<|open|>message role=\"assistant\"<|sep|><|open|>think<|sep|>"
                             : "<|open|>message role=\"assistant\"<|sep|><|open|>response<|sep|>",
                    true, err);
    if (rc) {
        free(out.v);
        return -1;
    }
    *ids = out.v;
    *n_ids = out.n;
    return 0;
}

int k3_chat_prompt(const struct k3_tokenizer *tok, const char *system, const char *user,
                   bool thinking, int32_t **ids, size_t *n, struct k3_err *err)
{
    struct k3_chat_msg msgs[2] = {{"system", system}, {"user", user}};
    int first = system ? 0 : 1;
    if (k3_chat_messages(tok, msgs + first, 2 - first, thinking, ids, n, err))
        return k3_err_prefix(err, "--chat");
    return 0;
}
