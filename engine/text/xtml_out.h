/* The model's answer: K3's XTML output (shared/chat/README.md §13-§15) parsed by
 * token id, as the tokens stream, into reasoning text, content text and tool calls.
 *
 * Owns: the output grammar
 *   REASONING <|close|>think<|sep|> <|open|>response<|sep|> TEXT <|close|>response<|sep|>
 *   [<|open|>tools<|sep|> (<|open|>call tool="N" index="i"<|sep|>
 *      (<|open|>argument key="K" type="T"<|sep|>V<|close|>argument<|sep|>)*
 *    <|close|>call<|sep|>)+ <|close|>tools<|sep|>] <|close|>message<|sep|> <|end_of_msg|>
 * and turning each call's arguments into a JSON object string.
 * Does not own: the prompt (chat.h), stopping generation at <|end_of_msg|> (the caller),
 * call ids, tool_choice, OpenAI's response shapes (the serve layer).
 *
 * Invariants:
 *  - Structure comes only from the ids of <|open|>, <|close|>, <|sep|> and
 *    <|end_of_msg|>.  Text that spells them (a string argument quoting "<|sep|>") is
 *    text, as it is on the prompt side where such text never encodes to a special id.
 *  - Every text piece emitted is valid UTF-8: a character split across tokens is held
 *    back until it completes; bytes that cannot form one come out as U+FFFD.
 *  - Every call's arguments string parses as a JSON object (jansson with JSON_ALLOW_NUL:
 *    a string value may hold \u0000, and JSON_DECODE_INT_AS_REAL: integers are kept as
 *    written, however long); a call that cannot give one is dropped and counted.
 *    tests/fuzz/fuzz_xtml_out.c holds the parser to this.
 *
 * Where the grammar leaves room (follows [WARP]'s id-based parser unless stated):
 *  - Text outside any channel (after <|close|>think<|sep|> or <|close|>response<|sep|>,
 *    before <|close|>message<|sep|>) is content, as in [WARP]; vLLM takes the text
 *    before the tools block as content too.  Text inside tools or a call but outside an
 *    argument is dropped.  After <|close|>message<|sep|> or <|end_of_msg|> all is ignored.
 *  - Thinking off (the prompt opened the response): nothing is reasoning; a think
 *    element's text is content, as vLLM streams every delta as content then.
 *  - Opening a channel (think, response, tools) or a call closes whatever channel was
 *    open; a call still open is dropped (a call whose close does not come before the
 *    next opener is dropped, as [SHARD] does).  A call outside a tools block is accepted.
 *  - Arguments: type "string" or no type: the raw text as a JSON string; any other type
 *    (number, boolean, null, object, array, or one not in the list): the text if it
 *    parses as JSON (jansson, any value, large integers allowed), compacted (whitespace
 *    outside strings removed, numbers kept as written), else the raw text as a string
 *    (vLLM's rule).  Keys in the order written; a repeated key is kept as written.
 *  - <|open|>json type="object"<|sep|>RAW<|close|>json<|sep|> as the whole call body
 *    (the encoder's form for arguments that were not JSON, §6.4): RAW, compacted, when
 *    it parses as an object; otherwise the call is dropped as malformed (vLLM would
 *    give "{}", which could run a tool with none of the arguments the model meant).
 *  - Malformed calls (no tool name, an argument without a key, an argument or json
 *    element left open, json mixed with arguments) are dropped and counted.
 *  - Attribute values: &quot; -> " then &amp; -> & (§2.1); `key="value"` pairs are
 *    found anywhere in the tag as vLLM's (\w+)="([^"]*)" finds them.  The `index`
 *    attribute is ignored: calls are numbered 0, 1, ... as they are emitted.
 */
#ifndef K3_XTML_OUT_H
#define K3_XTML_OUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/base/err.h"
#include "engine/text/tokenizer.h"

struct k3_xtml_out;

enum k3_xtml_event_kind { K3_XTML_REASONING, K3_XTML_CONTENT, K3_XTML_TOOL_CALL };

/* Valid only during the emit callback. */
struct k3_xtml_event {
    enum k3_xtml_event_kind kind;
    const char *text;      /* REASONING / CONTENT: a piece of valid UTF-8 (not NUL-terminated) */
    size_t len;
    int call_index;        /* TOOL_CALL: 0, 1, ... in order within the message */
    const char *name;      /* TOOL_CALL: the function name, non-empty UTF-8 without NUL */
    const char *arguments; /* TOOL_CALL: a compact JSON object, NUL-terminated */
};

typedef void k3_xtml_emit_fn(const struct k3_xtml_event *ev, void *ctx);

/* How the message ended (k3_xtml_out_finish). */
struct k3_xtml_end {
    bool call_dropped;   /* a call was still open when the message or generation ended */
    bool message_closed; /* <|close|>message<|sep|> came */
    int calls;           /* calls emitted */
    int calls_malformed; /* calls dropped for bad markup (see above), not counting the open one */
};

/* A parser for one generated message.  thinking: the prompt left a think channel open
 * (text is reasoning until <|close|>think<|sep|>); else a response channel.  The
 * tokenizer must outlive the parser and name the four specials (an error names the
 * missing one). */
int k3_xtml_out_new(const struct k3_tokenizer *tok, bool thinking, struct k3_xtml_out **out,
                    struct k3_err *err);

/* Feeds one generated id (any id: one that is not a token is skipped); calls emit for
 * every event it completes, zero or more.  Returns 0, or -1 when out of memory (the
 * parser is then spent: later calls return -1 too). */
int k3_xtml_out_feed(struct k3_xtml_out *p, int32_t id, k3_xtml_emit_fn *emit, void *ctx);

/* End of generation: emits the text still held back (U+FFFD for a cut character) and
 * fills *end.  A call left open is dropped.  Feed nothing after it. */
void k3_xtml_out_finish(struct k3_xtml_out *p, k3_xtml_emit_fn *emit, void *ctx,
                        struct k3_xtml_end *end);

void k3_xtml_out_free(struct k3_xtml_out *p);

/* The whole answer at once (non-streaming): pass k3_xtml_collect as emit and a zeroed
 * result as ctx. */
struct k3_xtml_call {
    char *name, *arguments;
};
struct k3_xtml_result {
    char *reasoning;            /* NUL-terminated; NULL when the model wrote none */
    size_t reasoning_len;
    char *content;              /* NUL-terminated; NULL when the model wrote none */
    size_t content_len;
    struct k3_xtml_call *calls; /* [n_calls] in order */
    int n_calls;
    bool oom;                   /* an allocation failed: the result is incomplete */
};
k3_xtml_emit_fn k3_xtml_collect;
void k3_xtml_result_free(struct k3_xtml_result *r);

#endif
