/* The HTTP side of `serve`: libmicrohttpd, a thread per connection.
 *
 * Owns: the daemon (listening, the connection limits and timeouts, a full table answered
 * 503 (serve/conns.h keeps the table), stopping: no new
 * connections, then the open responses finish, then the threads end), routing (the
 * OpenAI paths, /health, /metrics; 404 and 405 otherwise), request bodies up to a stated
 * size (413 beyond), the API key (401), error responses as OpenAI JSON, handing requests
 * to the scheduler (503 with Retry-After when its queue is full) and waiting on them:
 * one JSON body, or server-sent events (sse.h) as text arrives.  While a handler waits
 * it polls its client's socket, so a client that hangs up has its request cancelled (its
 * sequence freed at the next step).
 * Does not own: the bodies' JSON (api.h), the events' bytes (sse.h), decoding (sched.h),
 * printing (the caller's log callback gets one line per request).
 */
#ifndef K3_SERVE_HTTP_H
#define K3_SERVE_HTTP_H

#include <stddef.h>

#include "engine/base/err.h"
#include "engine/serve/api.h"
#include "engine/serve/sched.h"

struct k3_http_opts {
    const char *host;          /* a name or address to listen on */
    int port;                  /* 0: any free port (k3_http_port tells which) */
    const char *api_key;       /* NULL: no key needed */
    int timeout;               /* seconds a connection may sit idle (between requests, or a
                                * client not reading its answer); 0: no limit */
    int read_timeout;          /* seconds a request's headers and body have to arrive; 0: no
                                * limit */
    size_t max_body;           /* bytes a request body may have */
    int max_connections;       /* served at once; past it idle ones close, then 503 */
    int max_per_address;       /* connections from one address; past it closed; 0: no limit */
    struct k3_api_model model; /* what requests are checked against */
    int n_layers;              /* the model's, for /metrics */
    /* One line per request (not /health or /metrics), from the thread that served it;
     * NULL: none. */
    void (*log)(void *ctx, const char *line);
    void *log_ctx;
};

struct k3_http;

/* Listens and serves; requests go to sched.  The strings in o must outlive the server. */
int k3_http_start(struct k3_http **out, const struct k3_http_opts *o, struct k3_sched *sched,
                  struct k3_err *err);
int k3_http_port(const struct k3_http *h);
/* Stops accepting, waits up to grace_ms for the responses in progress to be sent, then
 * closes every connection and frees the server. */
void k3_http_stop(struct k3_http *h, int grace_ms);

#endif
