/* serve's connection table: who holds a connection, in which phase, since when.
 *
 * Owns: one entry per open connection (its socket, its phase: receiving a request,
 * answering one, idle between requests; when that phase began), the deadline to receive
 * a request's headers and body (a thread closes, by shutdown(2), the connections past
 * it), room for new clients when the table is full (the longest-idle kept-alive
 * connection is closed; when none is idle, the new connection is marked to be answered
 * 503), and the counts /metrics shows.
 * Invariants: an entry lives from libmicrohttpd's STARTED notice to its CLOSED notice,
 * which comes before the socket is closed, so a shutdown under the table's lock never
 * touches a reused descriptor; `live` counts the entries not already being closed.
 * Does not own: accepting, the per-address limit, the inactivity timeout and closing
 * (libmicrohttpd does those: serve/http.c sets them), HTTP responses (http.c).
 */
#ifndef K3_SERVE_CONNS_H
#define K3_SERVE_CONNS_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/base/err.h"

struct k3_conn_stats {
    int open;                      /* connections held, not being closed */
    uint64_t accepted;
    uint64_t refused_full;         /* answered 503: the table was full */
    uint64_t refused_limit;        /* closed at once by libmicrohttpd: the address's limit or
                                    * the table's last reserve */
    uint64_t timed_out_read;       /* a request's headers and body not in time */
    uint64_t timed_out_idle;       /* idle between requests for the inactivity timeout */
    uint64_t closed_for_room;      /* idle between requests, closed for a new client */
};

struct k3_conns;
struct k3_conn;

/* A table of max connections (0: no bound) whose requests must arrive within
 * read_timeout seconds (0: no deadline); idle_timeout is libmicrohttpd's inactivity
 * timeout, used only to tell its closings apart in the counts. */
int k3_conns_create(struct k3_conns **out, int max, int read_timeout, int idle_timeout,
                    struct k3_err *err);
/* Stops the deadline thread and frees the table (every connection must be closed). */
void k3_conns_destroy(struct k3_conns *t);

/* A new connection on fd: its entry (NULL when out of memory: it goes untracked).  When
 * the table is over max, the longest-idle connection is closed for it; when none is
 * idle the new one is marked over the table. */
struct k3_conn *k3_conns_open(struct k3_conns *t, int fd);
/* The connection is gone (libmicrohttpd closes its socket next). */
void k3_conns_close(struct k3_conns *t, struct k3_conn *c);

/* A request line arrived: the read deadline runs from here on a kept-alive connection
 * (from the accept on a new one). */
void k3_conn_request_line(struct k3_conns *t, struct k3_conn *c);
/* A request's headers are in: false when the connection came over a full table and the
 * table is still full (the caller answers 503 and closes it). */
bool k3_conn_admitted(struct k3_conns *t, struct k3_conn *c);
/* Its body is in: the request is being answered, no deadline. */
void k3_conn_answering(struct k3_conns *t, struct k3_conn *c);
/* Its response went out: idle until the next request line. */
void k3_conn_idle(struct k3_conns *t, struct k3_conn *c);

/* libmicrohttpd closed a new connection at once (over the address's or its own limit). */
void k3_conns_refused_at_accept(struct k3_conns *t);

struct k3_conn_stats k3_conns_stats(struct k3_conns *t);

#endif
