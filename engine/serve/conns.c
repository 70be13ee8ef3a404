#include "engine/serve/conns.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "engine/base/clock.h"

/* libmicrohttpd's inactivity timeout closes a connection this close to its mark, seen
 * from here (its clock starts at the last byte, ours a moment later). */
#define TIMEOUT_SLACK 0.5

enum phase { RECEIVING, ANSWERING, IDLE };
enum shut { NOT_SHUT, SHUT_DEADLINE, SHUT_FOR_ROOM };

struct k3_conn {
    struct k3_conn *prev, *next;
    int fd;
    enum phase phase;
    double since;        /* when the phase began (monotonic seconds) */
    enum shut shut;      /* shut down by the table; closing */
    bool over;           /* came in over a full table */
};

struct k3_conns {
    int max, read_timeout, idle_timeout;
    pthread_mutex_t lock;
    pthread_cond_t wake;      /* the deadline thread: stop */
    pthread_t reaper;
    bool has_reaper, stop;
    struct k3_conn *head;
    struct k3_conn_stats st;  /* st.open: entries not shut */
};

/* Under the lock: the client's socket shut both ways, so libmicrohttpd's thread for it
 * reads the end and closes it. */
static void shut(struct k3_conns *t, struct k3_conn *c, enum shut why)
{
    shutdown(c->fd, SHUT_RDWR);
    c->shut = why;
    t->st.open--;
}

static void *reap(void *arg)
{
    struct k3_conns *t = arg;
    pthread_mutex_lock(&t->lock);
    while (!t->stop) {
        double at = k3_now(), next = at + t->read_timeout;
        for (struct k3_conn *c = t->head; c; c = c->next) {
            if (c->shut || c->phase != RECEIVING)
                continue;
            double deadline = c->since + t->read_timeout;
            if (deadline <= at)
                shut(t, c, SHUT_DEADLINE);
            else if (deadline < next)
                next = deadline;
        }
        struct timespec until = {.tv_sec = (time_t)next,
                                 .tv_nsec = (long)((next - (double)(time_t)next) * 1e9)};
        pthread_cond_timedwait(&t->wake, &t->lock, &until);
    }
    pthread_mutex_unlock(&t->lock);
    return NULL;
}

int k3_conns_create(struct k3_conns **out, int max, int read_timeout, int idle_timeout,
                    struct k3_err *err)
{
    struct k3_conns *t = calloc(1, sizeof *t);
    if (!t)
        return k3_errf(err, "out of memory");
    t->max = max;
    t->read_timeout = read_timeout;
    t->idle_timeout = idle_timeout;
    pthread_mutex_init(&t->lock, NULL);
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&t->wake, &attr);
    pthread_condattr_destroy(&attr);
    int rc = read_timeout > 0 ? pthread_create(&t->reaper, NULL, reap, t) : 0;
    if (rc) {
        k3_conns_destroy(t);
        return k3_errf(err, "cannot start the read-deadline thread: %s", strerror(rc));
    }
    t->has_reaper = read_timeout > 0;
    *out = t;
    return 0;
}

void k3_conns_destroy(struct k3_conns *t)
{
    if (!t)
        return;
    if (t->has_reaper) {
        pthread_mutex_lock(&t->lock);
        t->stop = true;
        pthread_cond_signal(&t->wake);
        pthread_mutex_unlock(&t->lock);
        pthread_join(t->reaper, NULL);
    }
    while (t->head) { /* none after libmicrohttpd stopped; kept honest if not */
        struct k3_conn *c = t->head;
        t->head = c->next;
        free(c);
    }
    pthread_mutex_destroy(&t->lock);
    pthread_cond_destroy(&t->wake);
    free(t);
}

/* Under the lock: the longest-idle connection closed, if there is one. */
static bool close_idle(struct k3_conns *t)
{
    struct k3_conn *oldest = NULL;
    for (struct k3_conn *c = t->head; c; c = c->next)
        if (!c->shut && c->phase == IDLE && (!oldest || c->since < oldest->since))
            oldest = c;
    if (oldest)
        shut(t, oldest, SHUT_FOR_ROOM);
    return oldest != NULL;
}

static bool full(const struct k3_conns *t)
{
    return t->max && t->st.open > t->max;
}

struct k3_conn *k3_conns_open(struct k3_conns *t, int fd)
{
    struct k3_conn *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->fd = fd;
    c->phase = RECEIVING;
    c->since = k3_now();
    pthread_mutex_lock(&t->lock);
    c->next = t->head;
    if (t->head)
        t->head->prev = c;
    t->head = c;
    t->st.accepted++;
    t->st.open++;
    if (full(t))
        close_idle(t);
    c->over = full(t);
    pthread_mutex_unlock(&t->lock);
    return c;
}

void k3_conns_close(struct k3_conns *t, struct k3_conn *c)
{
    double age = k3_now() - c->since;
    pthread_mutex_lock(&t->lock);
    if (c->prev)
        c->prev->next = c->next;
    else
        t->head = c->next;
    if (c->next)
        c->next->prev = c->prev;
    bool inactive = t->idle_timeout && age + TIMEOUT_SLACK >= t->idle_timeout;
    if (c->shut == SHUT_DEADLINE || (!c->shut && c->phase == RECEIVING && inactive))
        t->st.timed_out_read++;
    else if (c->shut == SHUT_FOR_ROOM)
        t->st.closed_for_room++;
    else if (!c->shut && c->phase == IDLE && inactive)
        t->st.timed_out_idle++;
    if (!c->shut)
        t->st.open--;
    pthread_mutex_unlock(&t->lock);
    free(c);
}

static void set_phase(struct k3_conns *t, struct k3_conn *c, enum phase to)
{
    pthread_mutex_lock(&t->lock);
    c->since = k3_now();
    c->phase = to;
    pthread_mutex_unlock(&t->lock);
}

void k3_conn_request_line(struct k3_conns *t, struct k3_conn *c)
{
    pthread_mutex_lock(&t->lock);
    if (c->phase == IDLE) { /* kept alive: a new request's deadline */
        c->phase = RECEIVING;
        c->since = k3_now();
    }
    pthread_mutex_unlock(&t->lock);
}

bool k3_conn_admitted(struct k3_conns *t, struct k3_conn *c)
{
    pthread_mutex_lock(&t->lock);
    if (c->over && full(t))
        close_idle(t);
    bool refused = c->over && full(t);
    c->over = refused;
    t->st.refused_full += refused;
    pthread_mutex_unlock(&t->lock);
    return !refused;
}

void k3_conn_answering(struct k3_conns *t, struct k3_conn *c)
{
    set_phase(t, c, ANSWERING);
}

void k3_conn_idle(struct k3_conns *t, struct k3_conn *c)
{
    set_phase(t, c, IDLE);
}

void k3_conns_refused_at_accept(struct k3_conns *t)
{
    pthread_mutex_lock(&t->lock);
    t->st.refused_limit++;
    pthread_mutex_unlock(&t->lock);
}

struct k3_conn_stats k3_conns_stats(struct k3_conns *t)
{
    pthread_mutex_lock(&t->lock);
    struct k3_conn_stats st = t->st;
    pthread_mutex_unlock(&t->lock);
    return st;
}
