/* Reading a routes v1 trace (routes.h): gzip'd or plain text (zlib reads both). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "engine/routes/routes.h"

/* A token line holds L x K ids of up to 3 digits and 4 fields more: the longest trace
 * (48 x 8) fits well. */
#define LINE_MAX_BYTES (1 << 16)

struct reader {
    gzFile gz;
    const char *path;
    long line;
    char buf[LINE_MAX_BYTES];
    size_t cap_tokens;  /* of phase/ids */
    size_t cap_requests; /* of start */
    int last_req, next_pos;
};

static int line_err(struct reader *rd, struct k3_err *err, const char *what)
{
    return k3_errf(err, "%s:%ld: %s", rd->path, rd->line, what);
}

/* The next line without its newline into rd->buf; 1 at the end of the file. */
static int next_line(struct reader *rd, struct k3_err *err)
{
    if (!gzgets(rd->gz, rd->buf, sizeof rd->buf)) {
        int zerr = 0;
        const char *msg = gzerror(rd->gz, &zerr);
        if (zerr != Z_OK && zerr != Z_BUF_ERROR)
            return k3_errf(err, "%s: %s", rd->path, msg);
        return gzeof(rd->gz) ? 1 : k3_errf(err, "%s: %s", rd->path, msg);
    }
    rd->line++;
    size_t n = strlen(rd->buf);
    if (n && rd->buf[n - 1] == '\n')
        rd->buf[--n] = 0;
    else if (n == sizeof rd->buf - 1)
        return line_err(rd, err, "line too long");
    if (n && rd->buf[n - 1] == '\r')
        rd->buf[--n] = 0;
    return 0;
}

/* "# key value" header lines: the model's name and the three numbers of its shape. */
static int header_line(struct k3_routes *r, struct reader *rd, struct k3_err *err)
{
    const char *s = rd->buf + 1;
    while (*s == ' ')
        s++;
    int *num = !strncmp(s, "experts ", 8) ? &r->experts : !strncmp(s, "top_k ", 6) ? &r->top_k
             : !strncmp(s, "layers ", 7) ? &r->layers : NULL;
    if (!strncmp(s, "model ", 6)) {
        snprintf(r->model, sizeof r->model, "%s", s + 6);
    } else if (num) {
        char *end;
        long v = strtol(strchr(s, ' ') + 1, &end, 10);
        if (*num || v < 1 || v > 65535 || (*end && *end != ' '))
            return line_err(rd, err, "a bad or repeated shape line (experts, top_k or layers)");
        *num = (int)v;
    }
    return 0;
}

static int check_header(const struct k3_routes *r, struct reader *rd, struct k3_err *err)
{
    if (!r->experts || !r->top_k || !r->layers)
        return k3_errf(err, "%s: the header misses \"# experts\", \"# top_k\" or \"# layers\" "
                            "before line %ld", rd->path, rd->line);
    if (r->top_k > r->experts || r->top_k > K3_MAX_TOPK ||
        (long)r->layers * r->top_k > LINE_MAX_BYTES / 2)
        return k3_errf(err, "%s: top_k %d with %d experts", rd->path, r->top_k, r->experts);
    return 0;
}

static int parse_int(char **s, long *v)
{
    char *end;
    errno = 0;
    *v = strtol(*s, &end, 10);
    if (end == *s || errno || (*end && *end != ' ' && *end != '\t'))
        return -1;
    *s = end;
    return 0;
}

static int grow(struct k3_routes *r, struct reader *rd, int64_t need, struct k3_err *err)
{
    if ((size_t)need <= rd->cap_tokens)
        return 0;
    size_t cap = rd->cap_tokens ? rd->cap_tokens * 2 : 4096;
    size_t per = (size_t)r->layers * (size_t)r->top_k;
    char *phase = realloc(r->phase, cap);
    if (phase)
        r->phase = phase;
    uint16_t *ids = phase ? realloc(r->ids, cap * per * sizeof *ids) : NULL;
    if (!ids)
        return k3_errf(err, "%s: out of memory at line %ld", rd->path, rd->line);
    r->ids = ids;
    rd->cap_tokens = cap;
    return 0;
}

/* A kept request begins at token `at`: start[] holds it and the running end after it. */
static int begin_request(struct k3_routes *r, struct reader *rd, int64_t at, struct k3_err *err)
{
    if ((size_t)r->n_requests + 2 > rd->cap_requests) {
        size_t cap = rd->cap_requests ? rd->cap_requests * 2 : 64;
        int64_t *st = realloc(r->start, sizeof *st * cap);
        if (!st)
            return k3_errf(err, "%s: out of memory at line %ld", rd->path, rd->line);
        r->start = st;
        rd->cap_requests = cap;
    }
    r->start[r->n_requests] = r->start[r->n_requests + 1] = at;
    r->n_requests++;
    return 0;
}

/* Checks the request numbering (REQ from 0 without gaps, POS from 0 by one); *keep:
 * whether the token is one of the requests asked for. */
static int token_order(struct k3_routes *r, struct reader *rd, long req, long pos, int first,
                       int last, bool *keep, struct k3_err *err)
{
    bool same = req == rd->last_req;
    if (!(same || req == rd->last_req + 1) || pos != (same ? rd->next_pos : 0))
        return line_err(rd, err, same || req == rd->last_req + 1
                                     ? "positions must run 0, 1, 2, .. within a request"
                                     : "requests must be numbered 0, 1, 2, .. in file order");
    rd->last_req = (int)req;
    rd->next_pos = (int)pos + 1;
    *keep = req >= first && (last < 0 || req <= last);
    if (*keep && !same && begin_request(r, rd, r->n_requests ? r->start[r->n_requests] : 0, err))
        return -1;
    return 0;
}

static int token_line(struct k3_routes *r, struct reader *rd, int first, int last,
                      struct k3_err *err)
{
    char *s = rd->buf;
    long req, pos, v;
    if (parse_int(&s, &req) || parse_int(&s, &pos) || req < 0 || pos < 0 || req > 1 << 30)
        return line_err(rd, err, "want REQ POS PHASE and the ids");
    while (*s == ' ' || *s == '\t')
        s++;
    char phase = *s;
    if ((phase != 'p' && phase != 'd') || (s[1] != ' ' && s[1] != '\t'))
        return line_err(rd, err, "the phase must be p or d");
    s++;
    bool keep;
    if (token_order(r, rd, req, pos, first, last, &keep, err))
        return -1;
    int64_t t = keep ? r->start[r->n_requests] : 0;
    if (keep && grow(r, rd, t + 1, err))
        return -1;
    int K = r->top_k, n = r->layers * K;
    uint16_t row[LINE_MAX_BYTES / 2];
    for (int i = 0; i < n; i++) {
        if (parse_int(&s, &v))
            return k3_errf(err, "%s:%ld: want %d ids (%d layers x top_k %d), the %s", rd->path,
                           rd->line, n, r->layers, K, *s ? "field after the phase is bad" : "line ends early");
        if (v < 0 || v >= r->experts)
            return k3_errf(err, "%s:%ld: expert id %ld is outside [0, %d)", rd->path, rd->line, v,
                           r->experts);
        for (int j = i - i % K; j < i; j++)
            if (row[j] == v)
                return k3_errf(err, "%s:%ld: layer %d repeats expert %ld", rd->path, rd->line,
                               i / K, v);
        row[i] = (uint16_t)v;
    }
    while (*s == ' ' || *s == '\t')
        s++;
    if (*s)
        return k3_errf(err, "%s:%ld: more than %d ids (%d layers x top_k %d)", rd->path, rd->line,
                       n, r->layers, K);
    if (keep) {
        r->phase[t] = phase;
        memcpy(r->ids + (size_t)t * n, row, sizeof row[0] * (size_t)n);
        r->start[r->n_requests] = t + 1;
    }
    return 0;
}

static int read_all(struct k3_routes *r, struct reader *rd, int first, int last,
                    struct k3_err *err)
{
    bool in_header = true;
    int rc;
    while ((rc = next_line(rd, err)) == 0) {
        if (rd->line == 1 && strcmp(rd->buf, "# routes v1"))
            return line_err(rd, err, "not a routes v1 trace (want \"# routes v1\" first)");
        if (!rd->buf[0])
            continue;
        if (rd->buf[0] == '#') {
            if (!in_header)
                continue;
            if (header_line(r, rd, err))
                return -1;
            continue;
        }
        if (in_header && check_header(r, rd, err))
            return -1;
        in_header = false;
        if (token_line(r, rd, first, last, err))
            return -1;
    }
    if (rc < 0)
        return -1;
    if (rd->line == 0)
        return k3_errf(err, "%s: empty", rd->path);
    if (in_header && check_header(r, rd, err))
        return -1;
    if (r->n_requests == 0 || (last >= 0 && rd->last_req < last))
        return k3_errf(err, "%s: requests %d-%d asked for; the file holds %d (0-%d)", rd->path,
                       first, last < 0 ? rd->last_req : last, rd->last_req + 1, rd->last_req);
    return 0;
}

int k3_routes_load(struct k3_routes *r, const char *path, int first, int last,
                   struct k3_err *err)
{
    memset(r, 0, sizeof *r);
    r->first = first;
    struct reader *rd = calloc(1, sizeof *rd);
    if (!rd)
        return k3_errf(err, "out of memory");
    rd->path = path;
    rd->last_req = -1;
    rd->gz = gzopen(path, "rb");
    int rc = rd->gz ? 0 : k3_errf(err, "%s: %s", path, strerror(errno ? errno : ENOMEM));
    if (!rc) {
        gzbuffer(rd->gz, 1 << 17);
        rc = read_all(r, rd, first, last, err);
        gzclose(rd->gz);
    }
    free(rd);
    if (rc)
        k3_routes_free(r);
    return rc;
}

void k3_routes_free(struct k3_routes *r)
{
    free(r->start);
    free(r->phase);
    free(r->ids);
    memset(r, 0, sizeof *r);
}

/* A request number's digits at *s (up to nine), or -1 when none start there. */
static long request_number(const char **s)
{
    long v = 0;
    int n = 0;
    for (; **s >= '0' && **s <= '9' && n < 9; ++*s, n++)
        v = v * 10 + (**s - '0');
    return n ? v : -1;
}

int k3_routes_parse_range(const char *text, int *first, int *last, struct k3_err *err)
{
    const char *s = text;
    long a = request_number(&s), b = a;
    if (a >= 0 && *s == '-') {
        s++;
        b = *s ? request_number(&s) : -1;
    }
    if (a < 0 || *s || (b >= 0 && b < a) || (b < 0 && s[-1] != '-'))
        return k3_errf(err, "--routes-requests: \"%s\" is not A-B, A- or A (request numbers "
                            "from 0, A <= B)", text);
    *first = (int)a;
    *last = (int)b;
    return 0;
}

int k3_routes_fit(const struct k3_routes *r, const struct k3_config *c, struct k3_err *err)
{
    int moe = k3_moe_layer_count(c);
    if (r->experts == c->n_experts && r->top_k == c->top_k && r->layers == moe)
        return 0;
    return k3_errf(err, "the trace%s%s has %d experts, top_k %d, %d MoE layers; the model has "
                        "%d experts, top_k %d, %d MoE layers",
                   r->model[0] ? " of " : "", r->model, r->experts, r->top_k, r->layers,
                   c->n_experts, c->top_k, moe);
}
