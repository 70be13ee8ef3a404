/* The placement plan (plan.h): a pure function of layout, drives and thread count. */
#include "numa/plan.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void k3numa_plan_free(struct k3numa_plan *p)
{
    if (!p)
        return;
    free(p->thread_cpu);
    free(p->thread_team);
    free(p->teams);
    free(p->node_os);
    free(p->node_team);
    free(p->node_cores);
    free(p->drive_node);
    free(p->drive_team);
    free(p->buffer_node);
    free(p);
}

/* Rule 2: threads dealt to the node with the fewest threads per core. */
static void deal_threads(const struct k3numa_layout *l, int T, int *assigned)
{
    for (int i = 0; i < l->n_nodes; i++)
        assigned[i] = 0;
    for (int t = 0; t < T; t++) {
        int best = -1;
        for (int i = 0; i < l->n_nodes; i++) {
            const struct k3numa_node *nd = &l->nodes[i];
            if (nd->n_cores == 0 || assigned[i] >= nd->n_pus)
                continue;
            /* assigned[i]/cores[i] < assigned[best]/cores[best], in integers */
            if (best < 0 || (long long)assigned[i] * l->nodes[best].n_cores <
                                (long long)assigned[best] * nd->n_cores)
                best = i;
        }
        assigned[best]++; /* T <= usable PUs, so some node has room */
    }
}

/* Rule 3: the node's PUs in the order its team's threads take them.  order and seq have
 * room for the node's cores and PUs. */
static int team_pus(const struct k3numa_layout *l, const struct k3numa_node *nd, int *order,
                    int *rank, int *group, int *seq)
{
    const struct k3numa_core *cores = l->cores + nd->first_core;
    int nc = nd->n_cores, max_smt = 0, n_groups = 0;
    for (int c = 0; c < nc; c++) {
        rank[c] = 0;
        group[c] = -1;
        for (int d = 0; d < c; d++) {
            if (cores[d].llc != cores[c].llc)
                continue;
            if (group[c] < 0)
                group[c] = group[d];
            rank[c]++;
        }
        if (group[c] < 0)
            group[c] = n_groups++;
        if (cores[c].n_pus > max_smt)
            max_smt = cores[c].n_pus;
    }
    /* Sort by (rank within its cache, cache order); insertion sort keeps it stable. */
    for (int c = 0; c < nc; c++) {
        int j = c;
        while (j > 0 && (rank[order[j - 1]] > rank[c] ||
                         (rank[order[j - 1]] == rank[c] && group[order[j - 1]] > group[c]))) {
            order[j] = order[j - 1];
            j--;
        }
        order[j] = c;
    }
    int n = 0;
    for (int s = 0; s < max_smt; s++)
        for (int k = 0; k < nc; k++) {
            const struct k3numa_core *co = &cores[order[k]];
            if (s < co->n_pus)
                seq[n++] = l->pus[co->first_pu + s];
        }
    return n;
}

int k3numa_plan_make(struct k3numa_plan **out, const struct k3numa_layout *l,
                     const int *drive_nodes, int n_drives, int threads, unsigned flags)
{
    *out = NULL;
    if (n_drives < 0 || (n_drives > 0 && !drive_nodes) || l->n_cores <= 0)
        return -EINVAL;
    int total_cores = 0, total_pus = 0;
    for (int i = 0; i < l->n_nodes; i++) {
        total_cores += l->nodes[i].n_cores;
        total_pus += l->nodes[i].n_pus;
    }
    if (total_cores <= 0)
        return -EINVAL;
    int T = threads <= 0 ? total_cores : threads;
    if (T > total_pus)
        T = total_pus;
    bool off = flags & K3NUMA_PLAN_OFF;

    struct k3numa_plan *p = calloc(1, sizeof *p);
    int n_nodes = off ? 1 : l->n_nodes;
    int *assigned = calloc((size_t)l->n_nodes, sizeof *assigned);
    int *order = malloc(sizeof(int) * (size_t)l->n_cores * 3);
    int *seq = malloc(sizeof(int) * (size_t)l->n_pus);
    if (!p || !assigned || !order || !seq)
        goto nomem;
    p->bind = !off;
    p->threads_requested = threads;
    p->n_threads = T;
    p->n_nodes = n_nodes;
    p->n_drives = n_drives;
    p->thread_cpu = malloc(sizeof(int) * (size_t)T);
    p->thread_team = malloc(sizeof(int) * (size_t)T);
    p->teams = calloc((size_t)n_nodes, sizeof *p->teams);
    p->node_os = malloc(sizeof(int) * (size_t)n_nodes);
    p->node_team = malloc(sizeof(int) * (size_t)n_nodes);
    p->node_cores = malloc(sizeof(int) * (size_t)n_nodes);
    p->drive_node = malloc(sizeof(int) * (size_t)(n_drives + 1));
    p->drive_team = malloc(sizeof(int) * (size_t)(n_drives + 1));
    p->buffer_node = malloc(sizeof(int) * (size_t)(n_drives + 1));
    if (!p->thread_cpu || !p->thread_team || !p->teams || !p->node_os || !p->node_team ||
        !p->node_cores || !p->drive_node || !p->drive_team || !p->buffer_node)
        goto nomem;

    if (off) {
        p->n_teams = 1;
        p->teams[0] = (struct k3numa_team){.node = -1, .first_thread = 0, .n_threads = T,
                                           .n_cores = T < total_cores ? T : total_cores};
        p->node_os[0] = -1;
        p->node_team[0] = 0;
        p->node_cores[0] = total_cores;
        for (int t = 0; t < T; t++) {
            p->thread_cpu[t] = -1;
            p->thread_team[t] = 0;
        }
    } else {
        deal_threads(l, T, assigned);
        int t = 0;
        for (int i = 0; i < l->n_nodes; i++) {
            const struct k3numa_node *nd = &l->nodes[i];
            p->node_os[i] = nd->os_index;
            p->node_cores[i] = nd->n_cores;
            p->node_team[i] = -1;
            if (assigned[i] == 0)
                continue;
            int *rank = order + l->n_cores, *group = rank + l->n_cores;
            team_pus(l, nd, order, rank, group, seq);
            int k = p->n_teams++;
            p->node_team[i] = k;
            p->teams[k] = (struct k3numa_team){
                .node = nd->os_index, .first_thread = t, .n_threads = assigned[i],
                .n_cores = assigned[i] < nd->n_cores ? assigned[i] : nd->n_cores};
            for (int j = 0; j < assigned[i]; j++, t++) {
                p->thread_cpu[t] = seq[j];
                p->thread_team[t] = k;
            }
        }
    }

    /* Rule 5. */
    int spill = 0;
    for (int d = 0; d < n_drives; d++) {
        int node = drive_nodes[d] >= 0 ? drive_nodes[d] : -1;
        int li = off || node < 0 ? -1 : k3numa_layout_node_index(l, node);
        int team = li >= 0 ? p->node_team[li] : -1;
        if (team < 0)
            team = spill++ % p->n_teams;
        p->drive_node[d] = node;
        p->drive_team[d] = team;
        p->buffer_node[d] = p->teams[team].node;
    }

    free(assigned);
    free(order);
    free(seq);
    *out = p;
    return 0;
nomem:
    free(assigned);
    free(order);
    free(seq);
    k3numa_plan_free(p);
    return -ENOMEM;
}

/* Cut point k of `parts` over rows rows in whole granules (the last one may be short). */
static int cut(int rows, int granule, int k, int parts)
{
    if (granule < 1)
        granule = 1;
    long long g = ((long long)rows + granule - 1) / granule;
    long long at = g * k / parts * granule;
    return at < rows ? (int)at : rows;
}

void k3numa_split_rows(int rows, int granule, int part, int parts, int *begin, int *end)
{
    if (parts < 1)
        parts = 1;
    *begin = cut(rows, granule, part, parts);
    *end = cut(rows, granule, part + 1, parts);
}

void k3numa_plan_thread_rows(const struct k3numa_plan *p, int rows, int granule, int thread,
                             int *begin, int *end)
{
    *begin = cut(rows, granule, thread, p->n_threads);
    *end = cut(rows, granule, thread + 1, p->n_threads);
}

void k3numa_plan_team_rows(const struct k3numa_plan *p, int rows, int granule, int team,
                           int *begin, int *end)
{
    const struct k3numa_team *tm = &p->teams[team];
    *begin = cut(rows, granule, tm->first_thread, p->n_threads);
    *end = cut(rows, granule, tm->first_thread + tm->n_threads, p->n_threads);
}

/* ------------------------------------------------------------------ formatting */

struct out {
    char *buf;
    size_t len;
    int n; /* characters wanted so far */
};

static void put(struct out *o, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    size_t at = (size_t)o->n < o->len ? (size_t)o->n : o->len;
    int w = vsnprintf(o->buf ? o->buf + at : NULL, o->buf ? o->len - at : 0, fmt, ap);
    va_end(ap);
    if (w > 0)
        o->n += w;
}

static void put_list(struct out *o, const int *v, int n)
{
    if (n == 0) {
        put(o, "-");
        return;
    }
    /* Ascending without sorting a copy: the smallest value above the last one printed. */
    long long last = (long long)INT_MIN - 1;
    bool first = true;
    for (;;) {
        long long lo = 0;
        bool found = false;
        for (int i = 0; i < n; i++)
            if (v[i] > last && (!found || v[i] < lo)) {
                lo = v[i];
                found = true;
            }
        if (!found)
            break;
        long long hi = lo;
        for (bool grew = true; grew;) {
            grew = false;
            for (int i = 0; i < n; i++)
                if (v[i] == hi + 1) {
                    hi++;
                    grew = true;
                }
        }
        put(o, hi > lo ? "%s%lld-%lld" : "%s%lld", first ? "" : ",", lo, hi);
        first = false;
        last = hi;
    }
}

int k3numa_format_list(const int *v, int n, char *buf, size_t len)
{
    struct out o = {buf, len, 0};
    if (buf && len)
        buf[0] = 0;
    put_list(&o, v, n);
    return o.n;
}

int k3numa_plan_format_node(const struct k3numa_plan *p, int i, const uint64_t *buffer_bytes,
                            char *buf, size_t len)
{
    if (buf && len)
        buf[0] = 0;
    if (i < 0 || i >= p->n_nodes)
        return -EINVAL;
    struct out o = {buf, len, 0};
    int k = p->node_team[i];
    const struct k3numa_team *tm = k >= 0 ? &p->teams[k] : NULL;
    if (p->bind)
        put(&o, "node %d: ", p->node_os[i]);
    else
        put(&o, "numa off: ");
    if (tm)
        put(&o, "%d thread%s, cpus ", tm->n_threads, tm->n_threads == 1 ? "" : "s");
    else
        put(&o, "no threads, cpus ");
    if (!p->bind)
        put(&o, "not pinned");
    else
        put_list(&o, tm ? p->thread_cpu + tm->first_thread : NULL, tm ? tm->n_threads : 0);
    put(&o, ", drives ");
    int shown = 0;
    for (int d = 0; d < p->n_drives; d++) {
        if (k < 0 || p->drive_team[d] != k)
            continue;
        bool spilled = p->bind && p->drive_node[d] != p->node_os[i];
        put(&o, "%s%d%s", shown++ ? "," : "", d, spilled ? "*" : "");
    }
    if (!shown)
        put(&o, "-");
    uint64_t bytes = buffer_bytes ? buffer_bytes[i] : 0;
    put(&o, ", buffers %llu MiB", (unsigned long long)((bytes + (1u << 20) - 1) >> 20));
    return o.n;
}
