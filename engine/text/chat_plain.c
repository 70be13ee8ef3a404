/* Conversations of plain text (a role and a NUL-terminated text per message) through the
 * renderer: `run --chat` and callers that hold no JSON. */
#include <stdlib.h>
#include <string.h>

#include "engine/text/chat.h"
#include "engine/text/utf8.h"

/* msgs as a JSON messages array; -1 with err naming the message at fault. */
static int to_json(const struct k3_chat_msg *msgs, int n, json_t **out, struct k3_err *err)
{
    json_t *list = json_array();
    for (int i = 0; list && i < n; i++) {
        size_t len = strlen(msgs[i].text);
        size_t bad = k3_utf8_invalid_at((const uint8_t *)msgs[i].text, len);
        if (bad < len) {
            json_decref(list);
            return k3_errf(err, "message %d: invalid UTF-8 at byte offset %zu", i, bad);
        }
        json_t *m = json_pack("{s:s, s:s%}", "role", msgs[i].role, "content", msgs[i].text, len);
        if (!m || json_array_append_new(list, m)) {
            json_decref(list);
            list = NULL;
        }
    }
    if (!list)
        return k3_errf(err, "out of memory");
    *out = list;
    return 0;
}

int k3_chat_messages(const struct k3_tokenizer *tok, const struct k3_chat_msg *msgs, int n,
                     bool thinking, int32_t **ids, size_t *n_ids, struct k3_err *err)
{
    json_t *list = NULL;
    if (to_json(msgs, n, &list, err))
        return -1;
    struct k3_chat_opts o = {.thinking = thinking, .add_generation_prompt = true, .strict = true};
    struct k3_chat_segs segs = {0};
    struct k3_chat_fault fault;
    int rc = k3_chat_render(list, NULL, &o, &segs, &fault);
    if (rc)
        k3_errf(err, "%s", fault.message);
    else
        rc = k3_chat_segs_encode(tok, &segs, ids, n_ids, err);
    k3_chat_segs_free(&segs);
    json_decref(list);
    return rc;
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
