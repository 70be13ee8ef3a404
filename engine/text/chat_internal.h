/* The chat renderer's pieces, shared by the files behind chat.h: Python's view of JSON
 * values (chat_py.c), the segment list (chat_segs.c), and the render state that chat.c
 * and chat_calls.c write through.
 * Owns: the interfaces between those files.  Does not own: the renderer's public
 * interface (chat.h). */
#ifndef K3_CHAT_INTERNAL_H
#define K3_CHAT_INTERNAL_H

#include "engine/text/chat.h"

/* ---- chat_py.c: JSON values as encoding_k3.py's Python sees them ------------------- */

/* A growing byte buffer; an allocation that fails sets oom and drops the bytes. */
struct k3_chat_buf {
    char *p; /* [len], NUL-terminated when len > 0 */
    size_t len, cap;
    bool oom;
};
void k3_chat_buf_put(struct k3_chat_buf *b, const void *s, size_t n);
void k3_chat_buf_free(struct k3_chat_buf *b);

/* Python's bool(v): null, false, 0, 0.0, "", [] and {} are false. */
bool k3_py_truthy(const json_t *v);

/* True when s[0..n) (valid UTF-8) is empty after Python's str.strip(). */
bool k3_py_blank(const char *s, size_t n);

/* Appends Python's str(v) of a JSON scalar ("True", "None", 1.0, 1e-07); -1 (nothing
 * appended) for an object or array, whose repr() is not reproduced. */
int k3_py_str(struct k3_chat_buf *b, const json_t *v);

/* Appends json.dumps(v, ensure_ascii=False): separators ", " / ": " and keys in order
 * (sorted_compact false), or "," / ":" with every object's keys sorted (true). */
void k3_py_json(struct k3_chat_buf *b, const json_t *v, bool sorted_compact);

/* repr(x) of a finite double: the shortest digits that read back as x, "1.0", "1e-07",
 * "1e+16".  Returns the length written to out (at most 31 bytes, NUL-terminated). */
size_t k3_py_float_repr(double x, char out[32]);

/* ---- chat_segs.c: appending segments ------------------------------------------------ */

/* Appends text[0..len) as a segment unless it is empty (the encoder drops empty ones);
 * -1 when out of memory. */
int k3_chat_segs_push(struct k3_chat_segs *s, const char *text, size_t len, bool special);

/* ---- the render state (chat.c, chat_calls.c) --------------------------------------- */

struct k3_chat_attr {
    const char *key;
    const char *value; /* [len], before escaping */
    size_t len;
};

struct k3_chat_render {
    const struct k3_chat_opts *o;
    struct k3_chat_segs *out;
    struct k3_chat_fault *fault;
    const json_t *tools;    /* the top-level tools, as sent */
    const json_t *messages; /* as sent: every tools list on a message counts (strict) */
    bool oom;               /* an append failed: the render ends in an error */
};

/* Appends segments; a failed allocation sets r->oom. */
void k3_chat_text(struct k3_chat_render *r, const char *text, size_t len);
void k3_chat_open(struct k3_chat_render *r, const char *tag, const struct k3_chat_attr *attrs,
                  int n_attrs);
void k3_chat_close(struct k3_chat_render *r, const char *tag);
void k3_chat_end_of_msg(struct k3_chat_render *r);

/* Fills r->fault (param, then a printf message) and returns -1. */
__attribute__((format(printf, 3, 4))) int k3_chat_fail(struct k3_chat_render *r,
                                                       const char *param, const char *fmt, ...);

/* ---- chat_calls.c: tool calls and their results ------------------------------------ */

/* A message in the order it renders: tool results re-ordered by tool_call_id (§7.3). */
struct k3_chat_view {
    const json_t *m;
    size_t at;          /* its index in messages, for the fault's param */
    const json_t *tool; /* the matched call's function name, overriding tool/name; or NULL */
};

/* The messages in rendering order (*views malloc'd, n = json_array_size(messages)). */
int k3_chat_order_results(struct k3_chat_render *r, struct k3_chat_view **views);

/* Checks every message's tool_calls arguments as the encoder's normalisation pass does
 * (a string that parses to a non-object, a value of another type: errors). */
int k3_chat_check_arguments(struct k3_chat_render *r);

/* The tools channel of an assistant message (view at) whose tool_calls are truthy. */
int k3_chat_render_calls(struct k3_chat_render *r, const json_t *calls, size_t at);

/* A tool call's function object (its "function", or the call itself without one), or
 * NULL when that is not an object. */
const json_t *k3_chat_call_function(const json_t *call);

#endif
