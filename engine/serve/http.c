#include "engine/serve/http.h"

#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>
#include <microhttpd.h>

#include "engine/base/clock.h"
#include "engine/base/line.h"
#include "engine/serve/anthropic.h"
#include "engine/serve/conns.h"
#include "engine/serve/metrics.h"
#include "engine/serve/sse.h"

#define WAIT_MS 50            /* between looks at a waiting client's socket */
#define DISCARD_FACTOR 16     /* a body this many times the limit is cut off, not read */
/* Connections held past --max-connections, to answer 503 on (past these libmicrohttpd
 * closes new ones at once): a quarter more, and a few for a small table. */
#define RESERVE(max) ((max) / 4 + 16)

struct k3_http {
    struct MHD_Daemon *d;
    struct k3_http_opts o;
    struct k3_sched *sched;
    struct k3_conns *conns;
    time_t started;
    uint32_t salt;            /* in response ids, so two runs do not repeat them */

    pthread_mutex_t lock;
    pthread_cond_t idle;
    int open;                 /* requests whose response is not finished */
    uint64_t ids;
    char mhd_error[256];      /* libmicrohttpd's last message (start-up failures) */
};

enum route_kind {
    ROUTE_HEALTH, ROUTE_MODELS, ROUTE_METRICS, ROUTE_CHAT, ROUTE_COMPLETION, ROUTE_TEMPLATE,
    ROUTE_MESSAGES
};

static const struct route {
    const char *path, *method;
    enum route_kind kind;
    bool open;                /* served without the API key (as llama-server does) */
} routes[] = {
    {"/health", "GET", ROUTE_HEALTH, true},
    {"/v1/models", "GET", ROUTE_MODELS, true},
    {"/metrics", "GET", ROUTE_METRICS, false},
    {"/v1/chat/completions", "POST", ROUTE_CHAT, false},
    {"/v1/completions", "POST", ROUTE_COMPLETION, false},
    {"/apply-template", "POST", ROUTE_TEMPLATE, false},
    {"/v1/messages", "POST", ROUTE_MESSAGES, false},
};

/* One HTTP request from its headers to its completion. */
struct exchange {
    struct k3_http *h;
    const struct route *route;
    char line[160];           /* "POST /v1/completions", for the log */
    double started;
    char *body;               /* [cap] */
    size_t len, cap, discarded;
    bool too_big;
    bool anthropic;           /* answered in Anthropic's shapes (/v1/messages) */
};

/* A streamed response: server-sent events (sse.h) made from the request's updates. */
struct stream {
    struct k3_http *h;
    struct k3_request *r;
    struct k3_sse sse;
    char id[48], line[160];
    int fd;                   /* the client's socket */
    double started;
    size_t at;                /* sse.out[0..at) is handed to libmicrohttpd */
    bool client_left;
};

/* The line as the caller's log gets it: a client's text never moves the terminal. */
static void log_clean(void *arg, const char *line)
{
    const struct k3_http *h = arg;
    char clean[K3_LINE_MAX];
    size_t n = 0;
    for (; line[n] && n < sizeof clean - 1; n++)
        clean[n] = (unsigned char)line[n] < 0x20 || line[n] == 0x7f ? '?' : line[n];
    clean[n] = 0;
    h->o.log(h->o.log_ctx, clean);
}

__attribute__((format(printf, 2, 3))) static void log_line(struct k3_http *h, const char *fmt, ...)
{
    if (!h->o.log)
        return;
    va_list ap;
    va_start(ap, fmt);
    k3_vline(log_clean, h, fmt, ap);
    va_end(ap);
}

/* ---- responses ------------------------------------------------------------------- */

/* Queues body (taken; NULL: out of memory) with status and an optional extra header. */
static enum MHD_Result send_body(struct MHD_Connection *c, unsigned status, char *body,
                                 const char *type, const char *header, const char *value)
{
    static char oom[] = "{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\","
                        "\"param\":null,\"code\":null}}";
    struct MHD_Response *resp =
        body ? MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE)
             : MHD_create_response_from_buffer(strlen(oom), oom, MHD_RESPMEM_PERSISTENT);
    if (!resp) {
        free(body);
        return MHD_NO;
    }
    if (!body) {
        status = MHD_HTTP_INTERNAL_SERVER_ERROR;
        type = "application/json";
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    if (header)
        MHD_add_response_header(resp, header, value);
    enum MHD_Result rc = MHD_queue_response(c, status, resp);
    MHD_destroy_response(resp);
    return rc;
}

static enum MHD_Result send_error(struct exchange *x, struct MHD_Connection *c,
                                  const struct k3_api_error *e)
{
    log_line(x->h, "%s %d %s", x->line, e->status, e->message);
    const char *header = NULL, *value = NULL;
    if (e->status == MHD_HTTP_SERVICE_UNAVAILABLE)
        header = MHD_HTTP_HEADER_RETRY_AFTER, value = "1";
    else if (e->status == MHD_HTTP_METHOD_NOT_ALLOWED)
        header = MHD_HTTP_HEADER_ALLOW, value = x->route->method;
    else if (e->status == MHD_HTTP_UNAUTHORIZED)
        header = MHD_HTTP_HEADER_WWW_AUTHENTICATE, value = "Bearer";
    return send_body(c, (unsigned)e->status,
                     x->anthropic ? k3_anthropic_error_json(e) : k3_api_error_json(e),
                     "application/json", header, value);
}

__attribute__((format(printf, 6, 7))) static enum MHD_Result
refuse(struct exchange *x, struct MHD_Connection *c, int status, const char *type,
       const char *code, const char *fmt, ...)
{
    struct k3_api_error e = {.status = status, .type = type, .code = code};
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e.message, sizeof e.message, fmt, ap);
    va_end(ap);
    return send_error(x, c, &e);
}

/* A client that came over a full connection table: 503, and its connection closed so
 * that the table shrinks. */
static enum MHD_Result refuse_full(struct exchange *x, struct MHD_Connection *c)
{
    struct k3_api_error e;
    k3_api_errorf(&e, 503, "unavailable_error", NULL, "the server holds its maximum of %d "
                  "connections; retry later", x->h->o.max_connections);
    log_line(x->h, "%s 503 %s", x->line, e.message);
    char *body = k3_api_error_json(&e);
    struct MHD_Response *resp = body ? MHD_create_response_from_buffer(strlen(body), body,
                                                                      MHD_RESPMEM_MUST_FREE)
                                     : NULL;
    if (!resp) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
    MHD_add_response_header(resp, MHD_HTTP_HEADER_RETRY_AFTER, "1");
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
    enum MHD_Result rc = MHD_queue_response(c, MHD_HTTP_SERVICE_UNAVAILABLE, resp);
    MHD_destroy_response(resp);
    return rc;
}

/* ---- waiting on a request -------------------------------------------------------- */

static int client_fd(struct MHD_Connection *c)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    return ci ? ci->connect_fd : -1;
}

/* The client hung up (a request is fully read before we wait, so nothing else closes
 * the socket's read side). */
static bool client_gone(int fd)
{
    struct pollfd p = {.fd = fd, .events = POLLRDHUP};
    return fd >= 0 && poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL));
}

/* Waits for r's next update, looking at the client's socket at each update and between
 * waits (tokens that come faster than WAIT_MS must not hide a client gone); -1 (r
 * cancelled) when the client went away. */
static int next_update(struct k3_request *r, int fd, struct k3_req_update *u)
{
    for (;;) {
        bool waiting = k3_request_wait(r, WAIT_MS, u);
        if (client_gone(fd)) {
            free(u->text);
            k3_request_cancel(r);
            return -1;
        }
        if (!waiting)
            return 0;
        free(u->text);
    }
}

static void new_id(struct k3_http *h, enum k3_api_kind kind, char *id, size_t cap)
{
    pthread_mutex_lock(&h->lock);
    unsigned long long n = ++h->ids;
    pthread_mutex_unlock(&h->lock);
    snprintf(id, cap, "%s-%08x%012llx", kind == K3_API_CHAT ? "chatcmpl" : "cmpl", h->salt, n);
}

static void log_done(struct k3_http *h, const char *line, bool streamed, const struct k3_req_update *u,
                     double took, const char *error)
{
    const char *reason = k3_api_finish_reason(u->finish);
    log_line(h, "%s %s, %d prompt + %d generated tokens, %s, %.3f s, first token %.3f s%s%s", line,
             streamed ? "200 stream" : "200", u->prompt_tokens, u->completion_tokens,
             reason ? reason : "error", took, u->first_token_at, error[0] ? ": " : "", error);
}

/* ---- streaming ------------------------------------------------------------------- */

static ssize_t read_stream(void *cls, uint64_t pos, char *buf, size_t max)
{
    struct stream *st = cls;
    while (st->at == st->sse.len) {
        if (st->sse.ended)
            return MHD_CONTENT_READER_END_OF_STREAM;
        st->at = 0;
        struct k3_req_update u;
        if (next_update(st->r, st->fd, &u)) {
            st->client_left = true;
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
        int rc = k3_sse_update(&st->sse, &u);
        k3_req_update_free(&u);
        if (rc) {
            k3_request_cancel(st->r);
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
    }
    size_t n = st->sse.len - st->at < max ? st->sse.len - st->at : max;
    memcpy(buf, st->sse.out + st->at, n);
    st->at += n;
    return (ssize_t)n;
}

/* The response is gone (sent, or the connection dropped): the request too. */
static void free_stream(void *cls)
{
    struct stream *st = cls;
    struct k3_req_update u;
    k3_request_cancel(st->r); /* a no-op once it ended */
    k3_request_wait(st->r, 0, &u);
    k3_req_update_free(&u);
    log_done(st->h, st->line, true, &u, k3_now() - st->started,
             st->client_left || !st->sse.ended ? "the client went away" : st->sse.error);
    k3_request_release(st->r);
    k3_sse_free(&st->sse);
    free(st);
}

static enum MHD_Result respond_stream(struct exchange *x, struct MHD_Connection *c,
                                      struct k3_request *r, const struct k3_api_request *req)
{
    struct stream *st = calloc(1, sizeof *st);
    if (!st) {
        k3_request_cancel(r);
        k3_request_release(r);
        return send_body(c, 500, NULL, NULL, NULL, NULL);
    }
    *st = (struct stream){.h = x->h, .r = r, .fd = client_fd(c), .started = x->started};
    new_id(x->h, req->kind, st->id, sizeof st->id);
    snprintf(st->line, sizeof st->line, "%s", x->line);
    struct k3_api_answer a = {.kind = req->kind, .id = st->id, .created = time(NULL),
                              .model = x->h->o.model.id, .text = "",
                              .with_hash = req->logits_hash};
    if (k3_sse_init(&st->sse, a, req->include_usage, x->anthropic)) {
        free_stream(st);
        return send_body(c, 500, NULL, NULL, NULL, NULL);
    }
    if (req->kind == K3_API_CHAT && k3_sse_first(&st->sse)) {
        free_stream(st);
        return send_body(c, 500, NULL, NULL, NULL, NULL);
    }
    struct MHD_Response *resp =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, read_stream, st, free_stream);
    if (!resp) {
        free_stream(st);
        return MHD_NO;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    enum MHD_Result rc = MHD_queue_response(c, MHD_HTTP_OK, resp);
    MHD_destroy_response(resp);
    return rc;
}

/* ---- one body -------------------------------------------------------------------- */

/* A whole answer, gathered from the request's updates. */
struct whole {
    char *text, *reasoning;
    size_t len, reasoning_len;
    struct k3_tool_call *calls;
    int n_calls;
};

static bool append(char **to, size_t *len, const char *from, size_t n)
{
    char *grown = realloc(*to, *len + n + 1);
    if (!grown)
        return false;
    memcpy(grown + *len, from, n);
    *len += n;
    grown[*len] = 0;
    *to = grown;
    return true;
}

/* Takes u's new text, reasoning and calls into w; false when out of memory. */
static bool gather(struct whole *w, struct k3_req_update *u)
{
    bool ok = append(&w->text, &w->len, u->text ? u->text : "", u->len) &&
              (!u->reasoning_len || append(&w->reasoning, &w->reasoning_len, u->reasoning,
                                           u->reasoning_len));
    if (ok && u->n_calls) {
        struct k3_tool_call *calls =
            realloc(w->calls, sizeof *calls * (size_t)(w->n_calls + u->n_calls));
        ok = calls != NULL;
        if (ok) {
            w->calls = calls;
            memcpy(w->calls + w->n_calls, u->calls, sizeof *calls * (size_t)u->n_calls);
            w->n_calls += u->n_calls;
            u->n_calls = 0; /* the strings are w's now */
        }
    }
    k3_req_update_free(u);
    return ok;
}

static void whole_free(struct whole *w)
{
    free(w->text);
    free(w->reasoning);
    k3_tool_calls_free(w->calls, w->n_calls);
}

static enum MHD_Result respond_whole(struct exchange *x, struct MHD_Connection *c,
                                     struct k3_request *r, const struct k3_api_request *req)
{
    int fd = client_fd(c);
    struct whole w = {0};
    struct k3_req_update u;
    for (;;) {
        if (next_update(r, fd, &u)) {
            k3_request_release(r);
            whole_free(&w);
            log_line(x->h, "%s: the client went away", x->line);
            return MHD_NO;
        }
        enum k3_finish finish = u.finish;
        if (!gather(&w, &u)) {
            k3_request_cancel(r);
            k3_request_release(r);
            whole_free(&w);
            return send_body(c, 500, NULL, NULL, NULL, NULL);
        }
        if (finish)
            break;
    }
    k3_request_release(r);
    if (u.finish == K3_FINISH_ERROR) {
        whole_free(&w);
        struct k3_api_error e;
        bool leaving = strstr(u.error, "shutting down") != NULL;
        k3_api_errorf(&e, leaving ? 503 : 500, leaving ? "unavailable_error" : "server_error", NULL,
                      "%s", u.error);
        return send_error(x, c, &e);
    }
    char id[48];
    new_id(x->h, req->kind, id, sizeof id);
    struct k3_api_answer a = {.kind = req->kind, .id = id, .created = time(NULL),
                              .model = x->h->o.model.id, .text = w.text ? w.text : "",
                              .text_len = w.len,
                              .reasoning = req->thinking ? (w.reasoning ? w.reasoning : "") : NULL,
                              .reasoning_len = w.reasoning_len,
                              .calls = w.calls, .n_calls = w.n_calls, .calls_total = w.n_calls,
                              .finish = u.finish,
                              .prompt_tokens = u.prompt_tokens,
                              .completion_tokens = u.completion_tokens,
                              .cached_tokens = u.cached_tokens,
                              .with_hash = req->logits_hash, .logits_hash = u.logits_hash};
    char *json = x->anthropic ? k3_anthropic_message_json(&a) : k3_api_response_json(&a);
    whole_free(&w);
    log_done(x->h, x->line, false, &u, k3_now() - x->started, "");
    return send_body(c, MHD_HTTP_OK, json, "application/json", NULL, NULL);
}

/* A chat's answer is split into K3's channels, and kept inside its grammar if it has one. */
static int chat_answer(struct k3_http *h, struct k3_request *r, struct k3_api_request *req,
                       struct k3_err *err)
{
    const struct k3_tokenizer *tok = h->o.model.tok;
    if (req->kind != K3_API_CHAT)
        return 0;
    if (k3_request_split_chat(r, tok, req->thinking, req->keep_calls, err))
        return -1;
    struct k3_grammar *g = req->grammar;
    req->grammar = NULL; /* the request's now */
    return g ? k3_request_constrain(r, g, tok, err) : 0;
}

/* Generates the answer to body (an OpenAI body of this kind), whole or streamed. */
static enum MHD_Result generate(struct exchange *x, struct MHD_Connection *c, enum k3_api_kind kind,
                                const char *body, size_t len)
{
    struct k3_http *h = x->h;
    struct k3_api_request req;
    struct k3_api_error e;
    if (k3_api_parse(&h->o.model, kind, body, len, &req, &e)) {
        if (x->anthropic)
            k3_anthropic_error_fields(&e);
        return send_error(x, c, &e);
    }
    struct k3_request *r = k3_request_new(req.prompt, req.n_prompt, &req.p);
    if (!r) {
        k3_api_request_free(&req);
        return send_body(c, 500, NULL, NULL, NULL, NULL);
    }
    memset(req.p.stop, 0, sizeof req.p.stop); /* the request owns them now */
    struct k3_err err;
    if (chat_answer(h, r, &req, &err)) {
        k3_request_release(r);
        k3_api_request_free(&req);
        return refuse(x, c, 500, "server_error", NULL, "%s", err.msg);
    }
    int rc = k3_sched_submit(h->sched, r);
    if (rc) {
        k3_request_release(r);
        k3_api_request_free(&req);
        if (rc == -EBUSY)
            return refuse(x, c, 503, "unavailable_error", NULL,
                          "the server is busy: its queue of waiting requests is full; retry later");
        if (rc == -ESHUTDOWN)
            return refuse(x, c, 503, "unavailable_error", NULL, "the server is shutting down");
        return refuse(x, c, 400, "invalid_request_error", "context_length_exceeded",
                      "the prompt does not fit the context");
    }
    enum MHD_Result out = req.stream ? respond_stream(x, c, r, &req) : respond_whole(x, c, r, &req);
    k3_api_request_free(&req);
    return out;
}

/* Anthropic's /v1/messages: its body as the OpenAI chat body it stands for, answered in
 * Anthropic's shapes. */
static enum MHD_Result messages(struct exchange *x, struct MHD_Connection *c)
{
    struct k3_api_error e;
    json_error_t je;
    json_t *body = json_loadb(x->body ? x->body : "", x->len, 0, &je);
    json_t *oai = body ? k3_anthropic_request(body, &e) : NULL;
    json_decref(body);
    if (!body)
        k3_api_errorf(&e, 400, "invalid_request_error", NULL, "the body is not valid JSON: %s "
                      "(byte %d)", je.text, je.position);
    char *text = oai ? json_dumps(oai, JSON_COMPACT) : NULL;
    json_decref(oai);
    if (oai && !text)
        k3_api_errorf(&e, 500, "server_error", NULL, "out of memory");
    if (!text)
        return send_error(x, c, &e);
    enum MHD_Result rc = generate(x, c, K3_API_CHAT, text, strlen(text));
    free(text);
    return rc;
}

/* llama-server's /apply-template: the prompt a chat body renders to, not generated from. */
static enum MHD_Result apply_template(struct exchange *x, struct MHD_Connection *c)
{
    struct k3_api_error e;
    char *json = k3_api_apply_template(&x->h->o.model, x->body ? x->body : "", x->len, &e);
    if (!json)
        return send_error(x, c, &e);
    log_line(x->h, "%s 200", x->line);
    return send_body(c, MHD_HTTP_OK, json, "application/json", NULL, NULL);
}

/* ---- routing --------------------------------------------------------------------- */

static bool authorized(const struct k3_http *h, struct MHD_Connection *c)
{
    const char *key = h->o.api_key;
    if (!key)
        return true;
    /* Bearer, as OpenAI's clients send it, or x-api-key, as Anthropic's */
    const char *auth = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
                                                   MHD_HTTP_HEADER_AUTHORIZATION);
    if (auth && !strncmp(auth, "Bearer ", 7))
        auth += 7;
    else if (!(auth = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "x-api-key")))
        return false;
    size_t n = strlen(key), m = strlen(auth);
    unsigned char diff = n != m;
    for (size_t i = 0; i < n; i++) /* the same time however much of the key matches */
        diff |= (unsigned char)(key[i] ^ (i < m ? auth[i] : 0));
    return !diff;
}

static const struct route *find_route(const char *url)
{
    for (size_t i = 0; i < sizeof routes / sizeof *routes; i++)
        if (!strcmp(url, routes[i].path))
            return &routes[i];
    return NULL;
}

/* The first call, with the headers: refusals that need no body. */
static enum MHD_Result on_headers(struct exchange *x, struct MHD_Connection *c, const char *url,
                                  const char *method)
{
    struct k3_http *h = x->h;
    x->route = find_route(url);
    x->anthropic = x->route && x->route->kind == ROUTE_MESSAGES;
    if (!x->route)
        return refuse(x, c, 404, "invalid_request_error", NULL, "no such path: %s", x->line);
    bool get = !strcmp(x->route->method, "GET");
    if (strcmp(method, x->route->method) && !(get && !strcmp(method, "HEAD")))
        return refuse(x, c, 405, "invalid_request_error", NULL, "%s takes %s, not %.32s",
                      x->route->path, x->route->method, method);
    if (!x->route->open && !authorized(h, c))
        return refuse(x, c, 401, "invalid_request_error", "invalid_api_key",
                      "a valid API key is needed: Authorization: Bearer KEY");
    const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (cl && strtoull(cl, NULL, 10) > h->o.max_body)
        return refuse(x, c, 413, "invalid_request_error", NULL,
                      "the body is %.24s bytes; this server takes at most %zu", cl, h->o.max_body);
    return MHD_YES;
}

/* A piece of the body; beyond the limit it is dropped (and the answer will be 413), and
 * far beyond it the connection is closed. */
static enum MHD_Result on_upload(struct exchange *x, const char *data, size_t *size)
{
    size_t n = *size, max = x->h->o.max_body;
    *size = 0;
    if (x->too_big || n > max - x->len) {
        x->too_big = true;
        x->discarded += n;
        return x->discarded / DISCARD_FACTOR > max ? MHD_NO : MHD_YES;
    }
    if (x->len + n + 1 > x->cap) {
        size_t cap = x->cap ? x->cap : 4096;
        while (cap < x->len + n + 1)
            cap *= 2;
        char *body = realloc(x->body, cap);
        if (!body)
            return MHD_NO;
        x->body = body;
        x->cap = cap;
    }
    memcpy(x->body + x->len, data, n);
    x->len += n;
    return MHD_YES;
}

static struct k3_conn *conn_of(struct MHD_Connection *c)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

static enum MHD_Result on_body(struct exchange *x, struct MHD_Connection *c)
{
    struct k3_http *h = x->h;
    struct k3_conn *conn = conn_of(c);
    if (conn)
        k3_conn_answering(h->conns, conn);
    if (x->too_big)
        return refuse(x, c, 413, "invalid_request_error", NULL,
                      "the body is over this server's limit of %zu bytes", h->o.max_body);
    switch (x->route->kind) {
    case ROUTE_HEALTH:
        return send_body(c, MHD_HTTP_OK, strdup("{\"status\":\"ok\"}"), "application/json",
                         NULL, NULL);
    case ROUTE_MODELS:
        log_line(h, "%s 200", x->line);
        return send_body(c, MHD_HTTP_OK, k3_api_models_json(h->o.model.id, h->started),
                         "application/json", NULL, NULL);
    case ROUTE_METRICS: {
        uint64_t *layer_experts = calloc((size_t)h->o.n_layers, sizeof(uint64_t));
        if (!layer_experts)
            return refuse(x, c, 500, "server_error", NULL, "out of memory");
        struct k3_sched_stats st = k3_sched_stats(h->sched, layer_experts);
        char *text = k3_metrics_text(&st, layer_experts, h->o.n_layers);
        free(layer_experts);
        struct k3_conn_stats cs = k3_conns_stats(h->conns);
        text = k3_metrics_append_conns(text, &cs);
        return send_body(c, MHD_HTTP_OK, text,
                         "text/plain; version=0.0.4; charset=utf-8", NULL, NULL);
    }
    case ROUTE_CHAT:
        return generate(x, c, K3_API_CHAT, x->body ? x->body : "", x->len);
    case ROUTE_COMPLETION:
        return generate(x, c, K3_API_COMPLETION, x->body ? x->body : "", x->len);
    case ROUTE_MESSAGES:
        return messages(x, c);
    case ROUTE_TEMPLATE:
        return apply_template(x, c);
    }
    return MHD_NO;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *upload,
                                  size_t *upload_size, void **con_cls)
{
    struct k3_http *h = cls;
    struct exchange *x = *con_cls;
    if (!x) {
        if (!(x = calloc(1, sizeof *x)))
            return MHD_NO;
        x->h = h;
        x->started = k3_now();
        snprintf(x->line, sizeof x->line, "%.16s %.120s", method, url);
        for (char *at = x->line; *at; at++) /* the client's bytes, safe to print and quote */
            if (*at < 0x20 || *at > 0x7e)
                *at = '?';
        *con_cls = x;
        pthread_mutex_lock(&h->lock);
        h->open++;
        pthread_mutex_unlock(&h->lock);
        struct k3_conn *conn = conn_of(c);
        if (conn && !k3_conn_admitted(h->conns, conn))
            return refuse_full(x, c);
        return on_headers(x, c, url, method);
    }
    if (*upload_size)
        return on_upload(x, upload, upload_size);
    return on_body(x, c);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    struct k3_http *h = cls;
    struct exchange *x = *con_cls;
    struct k3_conn *conn = conn_of(c);
    if (conn)
        k3_conn_idle(h->conns, conn);
    if (!x)
        return;
    free(x->body);
    free(x);
    *con_cls = NULL;
    pthread_mutex_lock(&h->lock);
    if (!--h->open)
        pthread_cond_broadcast(&h->idle);
    pthread_mutex_unlock(&h->lock);
}

/* The connection table follows libmicrohttpd's connections from start to close. */
static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode toe)
{
    struct k3_http *h = cls;
    if (toe == MHD_CONNECTION_NOTIFY_STARTED)
        *socket_context = k3_conns_open(h->conns, client_fd(c));
    else if (*socket_context)
        k3_conns_close(h->conns, *socket_context);
}

/* A request line arrived (its headers have not): libmicrohttpd's first word of it. */
static void *on_request_line(void *cls, const char *uri, struct MHD_Connection *c)
{
    struct k3_http *h = cls;
    struct k3_conn *conn = conn_of(c);
    (void)uri;
    if (conn)
        k3_conn_request_line(h->conns, conn);
    return NULL;
}

static void on_mhd_log(void *cls, const char *fmt, va_list ap)
{
    struct k3_http *h = cls;
    char msg[sizeof h->mhd_error];
    vsnprintf(msg, sizeof msg, fmt, ap);
    msg[strcspn(msg, "\n")] = 0;
    /* libmicrohttpd's only word of a connection it closed at accept (over the address's
     * limit or its own) */
    if (h->conns && strstr(msg, "reached connection limit"))
        k3_conns_refused_at_accept(h->conns);
    pthread_mutex_lock(&h->lock);
    memcpy(h->mhd_error, msg, sizeof msg);
    pthread_mutex_unlock(&h->lock);
}

/* ---- the daemon ------------------------------------------------------------------ */

static int resolve(const struct k3_http_opts *o, struct sockaddr_storage *sa, struct k3_err *err)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE}, *res;
    char port[16];
    snprintf(port, sizeof port, "%d", o->port);
    int rc = getaddrinfo(o->host, port, &hints, &res);
    if (rc)
        return k3_errf(err, "--host %s: %s", o->host, gai_strerror(rc));
    memcpy(sa, res->ai_addr, res->ai_addrlen);
    freeaddrinfo(res);
    return 0;
}

int k3_http_start(struct k3_http **out, const struct k3_http_opts *o, struct k3_sched *sched,
                  struct k3_err *err)
{
    struct sockaddr_storage sa = {0};
    if (resolve(o, &sa, err))
        return -1;
    struct k3_http *h = calloc(1, sizeof *h);
    if (!h)
        return k3_errf(err, "out of memory");
    h->o = *o;
    h->sched = sched;
    h->started = time(NULL);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    h->salt = (uint32_t)(ts.tv_nsec ^ ts.tv_sec ^ getpid());
    pthread_mutex_init(&h->lock, NULL);
    pthread_cond_init(&h->idle, NULL);
    if (k3_conns_create(&h->conns, o->max_connections, o->read_timeout, o->timeout, err)) {
        pthread_mutex_destroy(&h->lock);
        pthread_cond_destroy(&h->idle);
        free(h);
        return -1;
    }
    /* The connection threads inherit this mask: the signals that stop the server go to
     * the caller's threads, and a dead client's socket never raises SIGPIPE. */
    sigset_t block, old;
    sigemptyset(&block);
    sigaddset(&block, SIGINT);
    sigaddset(&block, SIGTERM);
    sigaddset(&block, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &block, &old);
    unsigned flags = MHD_USE_AUTO | MHD_USE_INTERNAL_POLLING_THREAD |
                     MHD_USE_THREAD_PER_CONNECTION | MHD_USE_ITC | MHD_USE_ERROR_LOG |
                     (sa.ss_family == AF_INET6 ? MHD_USE_IPv6 : 0);
    h->d = MHD_start_daemon(flags, (uint16_t)o->port, NULL, NULL, on_request, h,
                            MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa,
                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)o->timeout,
                            MHD_OPTION_CONNECTION_LIMIT,
                            (unsigned)(o->max_connections + RESERVE(o->max_connections)),
                            MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)o->max_per_address,
                            MHD_OPTION_NOTIFY_CONNECTION, on_connection, h,
                            MHD_OPTION_URI_LOG_CALLBACK, on_request_line, h,
                            MHD_OPTION_NOTIFY_COMPLETED, on_completed, h,
                            MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, h, MHD_OPTION_END);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (!h->d) {
        k3_errf(err, "cannot listen on %s port %d: %s", o->host, o->port,
                h->mhd_error[0] ? h->mhd_error : "libmicrohttpd would not start");
        k3_conns_destroy(h->conns);
        pthread_mutex_destroy(&h->lock);
        pthread_cond_destroy(&h->idle);
        free(h);
        return -1;
    }
    *out = h;
    return 0;
}

int k3_http_port(const struct k3_http *h)
{
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(h->d, MHD_DAEMON_INFO_BIND_PORT);
    return di ? di->port : h->o.port;
}

void k3_http_stop(struct k3_http *h, int grace_ms)
{
    if (!h)
        return;
    MHD_socket listen = MHD_quiesce_daemon(h->d); /* closed once the threads are gone */
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += grace_ms / 1000;
    until.tv_nsec += (long)(grace_ms % 1000) * 1000000;
    if (until.tv_nsec >= 1000000000) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000;
    }
    pthread_mutex_lock(&h->lock);
    int rc = 0;
    while (h->open && rc != ETIMEDOUT)
        rc = pthread_cond_timedwait(&h->idle, &h->lock, &until);
    pthread_mutex_unlock(&h->lock);
    MHD_stop_daemon(h->d);
    if (listen != MHD_INVALID_SOCKET)
        close(listen);
    k3_conns_destroy(h->conns);
    pthread_mutex_destroy(&h->lock);
    pthread_cond_destroy(&h->idle);
    free(h);
}
