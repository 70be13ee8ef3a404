/* A chat request as K3 reads it.
 *
 * Owns: the chat fields of an OpenAI body beyond sampling: reasoning_effort and
 * chat_template_kwargs (thinking), tools (and the older functions), tool_choice,
 * parallel_tool_calls, response_format; the prompt they render to (segments and ids, by
 * text/chat.h) and the grammar that keeps a required call or a JSON answer valid
 * (grammar/grammar.h).  Each refusal is a 400 naming its field.
 * Does not own: sampling fields, bodies out (api.c), the markup itself (text/chat.h).
 */
#ifndef K3_SERVE_API_CHAT_H
#define K3_SERVE_API_CHAT_H

#include <stdbool.h>
#include <stdint.h>

#include <jansson.h>

#include "engine/serve/api.h"
#include "engine/text/chat.h"

struct k3_grammar;

struct k3_api_chat {
    bool thinking;              /* the prompt opens a think channel */
    bool keep_calls;            /* tool_choice is not "none" */
    struct k3_chat_segs segs;   /* the rendered prompt */
    int32_t *ids;               /* [n_ids] its token ids (none when rendered without a tokenizer) */
    int n_ids;
    struct k3_grammar *grammar; /* or NULL: the answer is free */
};

/* Reads root's chat fields (root may be changed: `functions` become `tools`) and renders
 * the prompt; ids too when tok is given.  0, or -1 with e filled (c then holds nothing). */
int k3_api_chat_render(const struct k3_tokenizer *tok, json_t *root, struct k3_api_chat *c,
                       struct k3_api_error *e);
void k3_api_chat_free(struct k3_api_chat *c);

#endif
