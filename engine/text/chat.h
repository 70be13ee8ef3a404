/* K3's chat markup (k3-model.md §5, "XTML"): a conversation of system, user and
 * assistant messages, then the assistant's generation prompt, with or without the
 * thinking block.
 *
 * Owns: the markup.  Only <|open|>, <|close|>, <|sep|> and <|end_of_msg|> are special
 * tokens; the markup between them ("message role=\"user\"", tag names) is plain text.
 * Message text is encoded with specials disallowed, so "<|open|>" typed by a user is
 * ordinary text, never markup.
 */
#ifndef K3_CHAT_H
#define K3_CHAT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/base/err.h"
#include "engine/text/tokenizer.h"

struct k3_chat_msg {
    const char *role; /* "system", "user" or "assistant" */
    const char *text; /* UTF-8, NUL-terminated */
};

/* Token ids of msgs[0..n) in order, each in its message element (an assistant's text in
 * a response element inside it), then the assistant prompt opening a think block
 * (thinking) or the response directly.  An unknown role is an error naming it.  *ids is
 * malloc'd. */
int k3_chat_messages(const struct k3_tokenizer *tok, const struct k3_chat_msg *msgs, int n,
                     bool thinking, int32_t **ids, size_t *n_ids, struct k3_err *err);

/* Token ids of a one-turn conversation: system (may be NULL), user, then the assistant
 * prompt opening a think block (thinking) or the response directly.  *ids is malloc'd. */
int k3_chat_prompt(const struct k3_tokenizer *tok, const char *system, const char *user,
                   bool thinking, int32_t **ids, size_t *n, struct k3_err *err);

#endif
