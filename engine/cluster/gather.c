/* Every rank's trace in the leader's file: a follower traces into a temporary part (its
 * own process, "k3-uring rank R", with the same tracks), and after the last step sends it
 * to the leader in chunks, which appends it before closing the file.  Timestamps are each
 * rank's microseconds since its trace opened; the ranks open their traces together (after
 * agreeing they started), so the tracks line up to within that moment's skew. */
#include <stdlib.h>

#include "engine/cluster/cluster_internal.h"

#define CHUNK (1u << 20)

static void send_chunk(struct k3_cluster *c, const char *buf, int bytes)
{
    MPI_Request req;
    int leader = 0;
    MPI_Isend(buf, bytes, MPI_BYTE, leader, 0, c->steps, &req);
    cluster_wait(c, 1, &req, &leader, c->o.timeout, "a trace", NULL);
}

/* Rank r's part, chunk by chunk until its empty one. */
static void receive_part(struct k3_cluster *c, int r, char *buf, struct k3_trace *t)
{
    for (;;) {
        MPI_Request req;
        MPI_Status st;
        int n = 0;
        MPI_Irecv(buf, CHUNK, MPI_BYTE, r, 0, c->steps, &req);
        cluster_wait(c, 1, &req, &r, c->o.timeout, "its trace", &st);
        MPI_Get_count(&st, MPI_BYTE, &n);
        if (n <= 0)
            return;
        k3_trace_append(t, buf, (size_t)n);
    }
}

int k3_cluster_gather_trace(struct k3_cluster *c, struct k3_trace *t, struct k3_err *err)
{
    if (!c || !t || c->state != CL_STOPPED)
        return 0;
    char *buf = malloc(CHUNK);
    if (!buf)
        return k3_errf(err, "out of memory for the trace");
    if (c->rank == 0) {
        for (int r = 1; r < c->ranks; r++)
            receive_part(c, r, buf, t);
    } else {
        size_t n;
        while ((n = k3_trace_part_read(t, buf, CHUNK)) > 0)
            send_chunk(c, buf, (int)n);
        send_chunk(c, buf, 0);
    }
    free(buf);
    return 0;
}
