/* The server-sent events of one streamed answer (a request with "stream": true): what each
 * of the request's updates adds, as OpenAI's chunks ("data: {...}", then the final chunk,
 * the usage chunk when asked and "data: [DONE]") or as Anthropic's events (anthropic.h).
 *
 * Owns: the answer the chunks are made from, the events' bytes until the HTTP side hands
 * them on, and the error event of a request that failed.  Does not own: the connection,
 * waiting on the request or a client that leaves (http.c), the chunks' JSON (api.h,
 * anthropic.h).
 */
#ifndef K3_SERVE_SSE_H
#define K3_SERVE_SSE_H

#include <stdbool.h>
#include <stddef.h>

#include "engine/serve/anthropic.h"
#include "engine/serve/api.h"
#include "engine/serve/request.h"

struct k3_sse {
    struct k3_api_answer a;                /* what the events have said so far */
    bool include_usage;                    /* OpenAI's usage chunk before [DONE] */
    struct k3_anthropic_stream *anthropic; /* Anthropic's events, or NULL: OpenAI's chunks */
    char *out;                             /* [cap] the events made by the last call */
    size_t len, cap;
    bool ended;                            /* the last event is in out */
    char error[256];                       /* the failed request's message, or "" */
};

/* An answer's events: a's id and its other strings must outlive s.  -1 when out of
 * memory; k3_sse_free frees s either way. */
int k3_sse_init(struct k3_sse *s, struct k3_api_answer a, bool include_usage, bool anthropic);
/* The first event, sent at once so the client sees the headers and knows it was
 * accepted before the first token: OpenAI's chunk with the role, or Anthropic's
 * message_start.  out then holds it alone; -1 when out of memory. */
int k3_sse_first(struct k3_sse *s);
/* The events of update u, or an error event when the request failed; out then holds
 * them alone (what it held before was handed on), and ended says whether the answer is
 * over.  -1 when out of memory. */
int k3_sse_update(struct k3_sse *s, const struct k3_req_update *u);
void k3_sse_free(struct k3_sse *s);

#endif
