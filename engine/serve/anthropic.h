/* Anthropic's Messages API (POST /v1/messages), as llama-server serves it: a request is
 * converted into the OpenAI chat body the rest of serve reads (api.h, api_chat.h), and an
 * answer is written back as an Anthropic message, whole or as server-sent events.
 *
 * Owns: the conversion in (anthropic.c), each refusal a 400 naming the Anthropic field
 * ("messages[1].content[0].type"); the message, the event stream and the error body out
 * (anthropic_out.c).  Pure: no sockets, no threads.
 * Does not own: sampling and chat fields once converted (api.c, api_chat.c check them;
 * k3_anthropic_error_fields renames what their errors name), HTTP (http.c), the markup
 * (text/chat.h).
 *
 * The stream's invariants (asserted at every event): events go message_start, then
 * content blocks one at a time (start, deltas, stop; indexes 0, 1, 2, ... in order),
 * then message_delta and message_stop, or an error event at any point; nothing after
 * either end.
 */
#ifndef K3_SERVE_ANTHROPIC_H
#define K3_SERVE_ANTHROPIC_H

#include <jansson.h>

#include "engine/serve/api.h"

/* ---- in -------------------------------------------------------------------------- */

/* body (a Messages request; not changed) as an OpenAI chat completions body, new: model,
 * max_tokens (required), system as the first message, messages (text, thinking and
 * tool_use blocks as content, reasoning_content and tool_calls; tool_result blocks as
 * tool messages before the rest of their turn), tools, tool_choice and
 * parallel_tool_calls, thinking as chat_template_kwargs.thinking (absent: K3's default,
 * on), temperature, top_p, top_k, stop_sequences as stop, stream; seed and cache_prompt
 * (llama-server's extensions) pass through; metadata is ignored.  Refused where
 * llama-server guesses: image and document blocks, a last assistant message (a prefill
 * to continue), a tool_result naming no tool_use of the turn before, a tool other than a
 * custom one.  A redacted_thinking block is accepted and adds nothing (its data is
 * Anthropic's ciphertext); a tool_result's is_error is checked, not rendered.  NULL with
 * e filled. */
json_t *k3_anthropic_request(json_t *body, struct k3_api_error *e);
/* An error the OpenAI parser gave for a converted body, with the fields it names written
 * as the Anthropic request's (tools[i].function.parameters as tools[i].input_schema, a
 * tool's or tool_choice's function.name as name), in e->param and e->message.  The
 * other fields it checks keep their names (model, max_tokens, temperature, top_p,
 * top_k, stream, seed, chat_template_kwargs; messages only as a whole). */
void k3_anthropic_error_fields(struct k3_api_error *e);

/* ---- out ------------------------------------------------------------------------- */

/* A whole answer as a message: a thinking block (a->reasoning non-empty; signature ""),
 * a text block (a->text non-empty), a tool_use block per call (id "toolu_...", input the
 * arguments as an object); stop_reason end_turn, max_tokens or tool_use (never
 * stop_sequence: an answer does not say whether a stop string or the model ended it);
 * usage with input_tokens the prompt's tokens not resumed from the prompt store and
 * cache_read_input_tokens those that were.  a->id "chatcmpl-X" gives "msg_X".  Malloc'd;
 * NULL when out of memory or a call's arguments are not a JSON object. */
char *k3_anthropic_message_json(const struct k3_api_answer *a);

/* {"type": "error", "error": {"type": T, "message": M}}, T Anthropic's name for
 * e->status (invalid_request_error, authentication_error, not_found_error,
 * overloaded_error, api_error, ...).  Malloc'd; NULL when out of memory. */
char *k3_anthropic_error_json(const struct k3_api_error *e);

enum k3_anthropic_state {
    K3_ANTHROPIC_NEW,      /* nothing sent */
    K3_ANTHROPIC_IDLE,     /* message_start sent, no block open */
    K3_ANTHROPIC_THINKING, /* a thinking block open */
    K3_ANTHROPIC_TEXT,     /* a text block open */
    K3_ANTHROPIC_TOOL_USE, /* a tool_use block open (only inside one update: its input goes whole) */
    K3_ANTHROPIC_ENDED,    /* message_stop or an error sent */
};

/* One streamed answer's events; zeroed, a new stream. */
struct k3_anthropic_stream {
    enum k3_anthropic_state state;
    int blocks; /* content blocks started: the open one is blocks - 1 */
    int calls;  /* tool_use blocks started: the next call's number */
};

/* Each returns its events ("event: NAME\ndata: JSON\n\n" each), malloc'd, maybe "";
 * NULL when out of memory (the stream is then broken: end the response). */

/* message_start: the message with no content, usage as far as known. */
char *k3_anthropic_stream_start(struct k3_anthropic_stream *s, const struct k3_api_answer *a);
/* An update's new reasoning (thinking_delta), text (text_delta) and complete calls (a
 * tool_use block each, its input in one input_json_delta; a->first_call the stream's
 * next call), a block closing as the next kind begins; at a->finish (STOP or LENGTH) the
 * open block's stop, message_delta (stop_reason, usage) and message_stop.  Block ids and
 * usage as the whole message's.  An update that ended in an error: its pieces here with
 * finish NONE, then k3_anthropic_stream_error. */
char *k3_anthropic_stream_update(struct k3_anthropic_stream *s, const struct k3_api_answer *a);
/* An error event (k3_anthropic_error_json's body), which ends the stream. */
char *k3_anthropic_stream_error(struct k3_anthropic_stream *s, const struct k3_api_error *e);

#endif
