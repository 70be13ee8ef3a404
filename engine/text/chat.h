/* K3's chat encoding ("XTML"): an OpenAI-style request (messages, tools, tool_choice,
 * response_format, thinking and its effort) rendered as Moonshot's encoding_k3.py
 * build_chat_segments renders it, segment for segment (the specification and its 39
 * golden cases: tests/chat/).
 *
 * Owns: the segments of a prompt and their order (tool declaration, thinking-effort
 * note, the conversation, tool_choice and response_format notes, the generation prompt);
 * tool-result re-ordering by tool_call_id; Python's str() and json.dumps() of request
 * values as the encoder writes them; encoding segments to ids.  Only <|open|>, <|close|>,
 * <|sep|> and <|end_of_msg|> (and an image's placeholder) are special segments, encoded
 * by id; every other segment (tag names, each piece of an attribute, every text) is
 * encoded on its own with specials disabled, so "<|open|>" typed by a user is ordinary
 * text and BPE never merges across a segment boundary.
 * Does not own: parsing the request body or the HTTP errors (engine/serve), what the
 * model writes back.
 *
 * Where it cannot follow the encoder (a JSON value held by jansson, not Python):
 *  - integers beyond int64, reals beyond double and object keys holding \u0000 are
 *    refused by the JSON parser, in the request and inside a tool call's arguments string
 *    (an error, where Python would render them);
 *  - a value the encoder would write with Python's repr() (an object or array used as a
 *    name, a content part's text or reasoning) is an error;
 *  - an arguments string holding NaN/Infinity or a lone surrogate escape (which Python's
 *    json.loads accepts and jansson does not) renders as the raw `json` element;
 *  - messages must be an array (the encoder iterates whatever it is given).
 *
 * Strict mode (the server's checks on top of the encoder): `developer` renders as
 * `system` (as vLLM does); any other unknown role, or a message that is not an object,
 * is an error; a `tool` message with no assistant tool_calls before it is an error;
 * `tools` (top level or on a system message) must be an array of
 * {"function": {"name": NON-EMPTY STRING, "parameters": OBJECT?}}, and once any are
 * declared a history tool call must name a declared function; the effort must be low,
 * high or max even with thinking off.
 */
#ifndef K3_CHAT_H
#define K3_CHAT_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/base/err.h"
#include "engine/text/tokenizer.h"

struct k3_chat_opts {
    bool thinking;                 /* the think channel (K3's default: true) */
    const char *effort;            /* NULL: no note; "low", "high" or "max" (others refused) */
    const json_t *tool_choice;     /* NULL or as sent: only "required" / "none" add a note */
    const json_t *response_format; /* NULL or as sent: json_object / json_schema add a note */
    bool add_generation_prompt;
    bool strict;                   /* the server's checks (above); false: the bare encoder */
};

struct k3_chat_seg {
    char *text; /* [len + 1], NUL-terminated (text may hold NULs from \u0000) */
    size_t len;
    bool special; /* encoded with specials enabled: a marker token, an image */
};

struct k3_chat_segs {
    struct k3_chat_seg *v; /* [n], capacity cap */
    size_t n, cap;
};

/* Where a request is at fault: param is the field ("messages[2].tool_calls[0].function.
 * name", "tools", "reasoning_effort"), message one line that names it. */
struct k3_chat_fault {
    char param[96];
    char message[256];
};

/* Renders messages (an array) with tools (NULL, or as sent) into *out (zeroed by the
 * caller; freed with k3_chat_segs_free, also after an error).  0, or -1 with fault filled
 * (out of memory: param empty). */
int k3_chat_render(const json_t *messages, const json_t *tools, const struct k3_chat_opts *o,
                   struct k3_chat_segs *out, struct k3_chat_fault *fault);

void k3_chat_segs_free(struct k3_chat_segs *s);

/* The rendered prompt: every segment's text in order (malloc'd, NUL-terminated; *len
 * without the NUL), or NULL when out of memory. */
char *k3_chat_segs_join(const struct k3_chat_segs *s, size_t *len);

/* Token ids of the segments: a marker by its special id (a tokenizer without it is an
 * error), every other segment encoded alone (specials disabled unless the segment is
 * special).  *ids is malloc'd. */
int k3_chat_segs_encode(const struct k3_tokenizer *tok, const struct k3_chat_segs *s,
                        int32_t **ids, size_t *n, struct k3_err *err);

/* The render options an OpenAI chat request asks for: reasoning_effort (default "max";
 * "none" turns thinking off), chat_template_kwargs.thinking, tool_choice, response_format,
 * add_generation_prompt (default true).  Strict.  The pointers stay inside req.  0, or -1
 * with fault naming the field. */
int k3_chat_request_opts(const json_t *req, struct k3_chat_opts *o, struct k3_chat_fault *fault);

/* ---- Plain conversations, for callers that hold text rather than JSON --------------- */

struct k3_chat_msg {
    const char *role; /* "system", "developer", "user" or "assistant" */
    const char *text; /* UTF-8, NUL-terminated */
};

/* Token ids of msgs[0..n) rendered strictly, no effort note, then the generation
 * prompt opening a think (thinking) or a response channel.  An unknown role is an error
 * naming it.  *ids is malloc'd. */
int k3_chat_messages(const struct k3_tokenizer *tok, const struct k3_chat_msg *msgs, int n,
                     bool thinking, int32_t **ids, size_t *n_ids, struct k3_err *err);

/* Token ids of a one-turn conversation: system (may be NULL), user, then the generation
 * prompt.  *ids is malloc'd. */
int k3_chat_prompt(const struct k3_tokenizer *tok, const char *system, const char *user,
                   bool thinking, int32_t **ids, size_t *n, struct k3_err *err);

#endif
