/* The drive model inside the reader: every chunk is timed when it goes to the backend
 * (model.h's arithmetic, one busy_until per file), and a chunk whose data comes back
 * before its release is held until then.  Two heaps by release time: the chunks still
 * with the backend (the first of them, when due, is what the storage is late with) and
 * the chunks held (handed on in release order).  Only the reader's thread gets here. */
#include <assert.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "iouring/reader_internal.h"

/* ---- RATE[,LATENCY] ---- */

struct unit {
    const char *name;
    double scale;
};

static const struct unit rate_units[] = {
    {"", 1},          {"B", 1},
    {"KB", 1e3},      {"MB", 1e6},      {"GB", 1e9},      {"TB", 1e12},
    {"KiB", 0x1p10},  {"MiB", 0x1p20},  {"GiB", 0x1p30},  {"TiB", 0x1p40},
    {NULL, 0},
};
static const struct unit latency_units[] = {
    {"ns", 1e-9}, {"us", 1e-6}, {"ms", 1e-3}, {"s", 1}, {NULL, 0},
};

/* A number and one of units (exactly, case-insensitive) in [text, end); -1 if not. */
static int parse_quantity(const char *text, const char *end, const struct unit *units,
                          double *out)
{
    char *num_end;
    errno = 0;
    double v = strtod(text, &num_end);
    if (num_end == text || num_end > end || errno || !isfinite(v) || v < 0)
        return -1;
    size_t len = (size_t)(end - num_end);
    for (const struct unit *u = units; u->name; u++)
        if (strlen(u->name) == len && !strncasecmp(u->name, num_end, len)) {
            *out = v * u->scale;
            return 0;
        }
    return -1;
}

static int refuse(char *why, size_t why_len, const char *fmt, const char *part, int part_len)
{
    snprintf(why, why_len, fmt, part_len, part);
    return -EINVAL;
}

int k3io_drive_model_parse(const char *text, struct k3io_drive_model *out, char *why,
                           size_t why_len)
{
    const char *comma = strchr(text, ','), *rate_end = comma ? comma : text + strlen(text);
    const char *rate_text_end = rate_end;
    /* "GB/s": the "/s" is the rate's; drop it before matching the unit */
    if (rate_end - text >= 2 && rate_end[-2] == '/' && (rate_end[-1] == 's' || rate_end[-1] == 'S'))
        rate_text_end -= 2;
    struct k3io_drive_model m = {0};
    if (parse_quantity(text, rate_text_end, rate_units, &m.rate) || !(m.rate > 0))
        return refuse(why, why_len, "rate \"%.*s\" is not a positive number of bytes per "
                      "second (e.g. 7GB/s, 500MiB/s)", text, (int)(rate_end - text));
    if (m.rate > 1e15)
        return refuse(why, why_len, "rate \"%.*s\" is above 1 PB/s", text, (int)(rate_end - text));
    if (comma) {
        const char *lat = comma + 1, *lat_end = lat + strlen(lat);
        char *zero_end;
        bool bare_zero = strtod(lat, &zero_end) == 0 && zero_end == lat_end && zero_end > lat;
        if (bare_zero)
            m.latency = 0;
        else if (parse_quantity(lat, lat_end, latency_units, &m.latency))
            return refuse(why, why_len, "latency \"%.*s\" is not a time (e.g. 80us, 1ms)", lat,
                          (int)(lat_end - lat));
        if (m.latency > 10)
            return refuse(why, why_len, "latency \"%.*s\" is above 10 s", lat, (int)(lat_end - lat));
    }
    *out = m;
    return 0;
}

void k3io_drive_model_format(const struct k3io_drive_model *m, char *buf, size_t len)
{
    static const struct unit shown_rates[] = {
        {"TB/s", 1e12}, {"GB/s", 1e9}, {"MB/s", 1e6}, {"KB/s", 1e3}, {"B/s", 1}};
    static const struct unit shown_times[] = {{"s", 1}, {"ms", 1e-3}, {"us", 1e-6}, {"ns", 1e-9}};
    const struct unit *r = &shown_rates[4], *t = &shown_times[3];
    for (int i = 0; i < 5; i++)
        if (m->rate >= shown_rates[i].scale) {
            r = &shown_rates[i];
            break;
        }
    for (int i = 0; i < 4; i++)
        if (m->latency >= shown_times[i].scale) {
            t = &shown_times[i];
            break;
        }
    snprintf(buf, len, "%.4g %s, %.4g %s", m->rate / r->scale, r->name, m->latency / t->scale,
             m->latency > 0 ? t->name : "us");
}

/* ---- a heap of chunks by release time ---- */

struct heap {
    struct k3io_chunk **at; /* [cap]; at[0] releases first */
    unsigned n;
};

static void heap_swap(struct heap *h, unsigned i, unsigned j)
{
    struct k3io_chunk *t = h->at[i];
    h->at[i] = h->at[j];
    h->at[j] = t;
    h->at[i]->heap_at = i;
    h->at[j]->heap_at = j;
}

static void heap_up(struct heap *h, unsigned i)
{
    while (i > 0 && h->at[(i - 1) / 2]->release > h->at[i]->release) {
        heap_swap(h, i, (i - 1) / 2);
        i = (i - 1) / 2;
    }
}

static void heap_down(struct heap *h, unsigned i)
{
    for (;;) {
        unsigned l = 2 * i + 1, r = l + 1, m = i;
        if (l < h->n && h->at[l]->release < h->at[m]->release)
            m = l;
        if (r < h->n && h->at[r]->release < h->at[m]->release)
            m = r;
        if (m == i)
            return;
        heap_swap(h, i, m);
        i = m;
    }
}

static void heap_push(struct heap *h, struct k3io_chunk *c)
{
    c->heap_at = h->n;
    h->at[h->n++] = c;
    heap_up(h, c->heap_at);
}

static void heap_remove(struct heap *h, struct k3io_chunk *c)
{
    unsigned i = c->heap_at;
    assert(i < h->n && h->at[i] == c);
    h->n--;
    if (i == h->n)
        return;
    h->at[i] = h->at[h->n];
    h->at[i]->heap_at = i;
    heap_up(h, i);
    heap_down(h, h->at[i]->heap_at);
}

static struct k3io_chunk *heap_first(const struct heap *h)
{
    return h->n ? h->at[0] : NULL;
}

/* ---- the model's state ---- */

struct k3io_model {
    struct k3io_drive_model m;
    double *busy_until;   /* [n_files] */
    struct heap pending;  /* timed, not yet back from the backend */
    struct heap held;     /* back early, waiting for their release */
    double union_end;     /* the latest release so far (model_busy_seconds) */
    uint64_t handed;      /* chunks handed on to k3io__chunk_result */
};

int k3io__model_create(struct k3io_reader *r, const struct k3io_drive_model *dm)
{
    struct k3io_model *m = calloc(1, sizeof *m);
    if (!m)
        return -ENOMEM;
    r->model = m;
    m->m = *dm;
    m->busy_until = calloc((size_t)r->n_files + 1, sizeof *m->busy_until);
    m->pending.at = calloc(r->queue_depth, sizeof *m->pending.at);
    m->held.at = calloc(r->queue_depth, sizeof *m->held.at);
    return m->busy_until && m->pending.at && m->held.at ? 0 : -ENOMEM;
}

void k3io__model_destroy(struct k3io_reader *r)
{
    struct k3io_model *m = r->model;
    if (!m)
        return;
    free(m->held.at);
    free(m->pending.at);
    free(m->busy_until);
    free(m);
    r->model = NULL;
}

void k3io__model_start(struct k3io_reader *r, struct k3io_chunk *c)
{
    struct k3io_model *m = r->model;
    double now = k3io__now();
    c->started = now;
    c->release = k3io_model_read(&m->m, &m->busy_until[c->file], now, c->len);
    c->held = c->late = false;
    heap_push(&m->pending, c);
    struct k3io_stats *st = &r->stats;
    st->model_reads++;
    st->model_read_seconds += c->release - now;
    /* chunks start in time order, so the union of [started, release] grows at its end */
    if (c->release > m->union_end) {
        st->model_busy_seconds += c->release - (now > m->union_end ? now : m->union_end);
        m->union_end = c->release;
    }
}

bool k3io__model_hold(struct k3io_reader *r, struct k3io_chunk *c, int32_t res)
{
    struct k3io_model *m = r->model;
    heap_remove(&m->pending, c);
    r->stats.storage_read_seconds += c->landed - c->started;
    if (!r->closing && c->release > k3io__now()) {
        c->held = true;
        c->res = res;
        heap_push(&m->held, c);
        return true;
    }
    m->handed++;
    return false;
}

/* Hands on every held chunk whose release is at or before now, in release order.  A
 * retry comes back timed through model_start, its release after now. */
static void release_due(struct k3io_reader *r, double now)
{
    struct k3io_model *m = r->model;
    struct k3io_chunk *c;
    while ((c = heap_first(&m->held)) && c->release <= now) {
        heap_remove(&m->held, c);
        c->held = false;
        m->handed++;
        k3io__chunk_result(r, c, c->res);
    }
}

int k3io__model_reap(struct k3io_reader *r, double until)
{
    struct k3io_model *m = r->model;
    uint64_t before = m->handed;
    for (;;) {
        int rc = r->ops->reap(r, 0); /* what has landed, without blocking */
        if (rc)
            return rc;
        double now = k3io__now();
        release_due(r, now);
        if (m->handed != before || until <= 0 || now >= until)
            return 0;
        assert(m->pending.n + m->held.n > 0);
        struct k3io_chunk *due = heap_first(&m->pending), *held = heap_first(&m->held);
        double next = held && held->release < until ? held->release : until;
        if (due && due->release <= now) {
            /* due and not back: the storage is slower than the model */
            if (!due->late) {
                due->late = true;
                r->stats.late_reads++;
            }
            rc = r->ops->reap(r, next);
            r->stats.late_seconds += k3io__now() - now;
        } else {
            rc = r->ops->reap(r, due && due->release < next ? due->release : next);
        }
        if (rc)
            return rc;
    }
}

void k3io__model_let_go(struct k3io_reader *r)
{
    struct k3io_model *m = r->model;
    struct k3io_chunk *c;
    while ((c = heap_first(&m->held))) {
        heap_remove(&m->held, c);
        c->held = false;
        m->handed++;
        k3io__chunk_result(r, c, c->res);
    }
}
