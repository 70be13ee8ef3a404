/* The placement plan (plan.h): a pure function of layout, drives and thread count. */
#include "numa/plan.h"

#include <assert.h>
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
    k3numa_plan_check(p, l);
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

/* ------------------------------------------------------------------ the rules, asserted */

#ifdef NDEBUG
void k3numa_plan_check(const struct k3numa_plan *p, const struct k3numa_layout *l)
{
    (void)p;
    (void)l;
}
#else

/* Rule 3's order of the cores of a node: core c's key is (its rank among the node's cores
 * sharing its last-level cache, the order of that cache's first core among the node's
 * caches); the keys are distinct, and the spread order is the keys' ascending order. */
static long long spread_key(const struct k3numa_core *cores, int nc, int c)
{
    int rank = 0, group = 0;
    for (int d = 0; d < c; d++)
        rank += cores[d].llc == cores[c].llc;
    for (int d = 0; d < nc; d++) {
        if (cores[d].llc == cores[c].llc)
            break;
        bool first_of_cache = true; /* count each cache once, at its first core */
        for (int e = 0; e < d; e++)
            first_of_cache &= cores[e].llc != cores[d].llc;
        group += first_of_cache;
    }
    return (long long)rank * (nc + 1) + group;
}

/* Rule 3 for team k on layout node nd: its threads' PUs are the first n_threads entries of
 * "the first PU of every core in spread order, then every core's second PU, ...". */
static void check_team_pus(const struct k3numa_plan *p, const struct k3numa_layout *l,
                           const struct k3numa_node *nd, int k, long long *key)
{
    const struct k3numa_team *tm = &p->teams[k];
    const struct k3numa_core *cores = l->cores + nd->first_core;
    int nc = nd->n_cores;
    for (int c = 0; c < nc; c++)
        key[c] = spread_key(cores, nc, c);
    int level = 0, at = 0; /* the SMT level being dealt, and the threads dealt at it */
    for (int j = 0; j < tm->n_threads; j++) {
        int at_level = 0; /* cores with a PU at this level */
        for (int c = 0; c < nc; c++)
            at_level += cores[c].n_pus > level;
        if (at == at_level) { /* every core has had its PU at this level: the next one */
            level++;
            at = 0;
        }
        /* the at-th core in spread order among those with a PU at this level */
        int core = -1;
        for (int c = 0; c < nc && core < 0; c++) {
            if (cores[c].n_pus <= level)
                continue;
            int before = 0;
            for (int d = 0; d < nc; d++)
                before += cores[d].n_pus > level && key[d] < key[c];
            if (before == at)
                core = c;
        }
        assert(core >= 0 && p->thread_cpu[tm->first_thread + j] ==
                                l->pus[cores[core].first_pu + level]);
        at++;
    }
    assert(tm->n_cores == (tm->n_threads < nc ? tm->n_threads : nc));
}

/* Threads per node as dealt (rule 2), from the plan. */
static int dealt(const struct k3numa_plan *p, int i)
{
    return p->node_team[i] >= 0 ? p->teams[p->node_team[i]].n_threads : 0;
}

void k3numa_plan_check(const struct k3numa_plan *p, const struct k3numa_layout *l)
{
    int total_cores = 0, total_pus = 0, max_cores = 1;
    for (int i = 0; i < l->n_nodes; i++) {
        total_cores += l->nodes[i].n_cores;
        total_pus += l->nodes[i].n_pus;
        if (l->nodes[i].n_cores > max_cores)
            max_cores = l->nodes[i].n_cores;
    }
    /* 1. one thread per usable core unless asked, never more than the usable PUs */
    int want = p->threads_requested <= 0 ? total_cores : p->threads_requested;
    assert(p->n_threads == (want < total_pus ? want : total_pus) && p->n_threads >= 1);
    /* 4. teams on consecutive thread numbers, in team order, holding every thread */
    assert(p->n_teams >= 1 && p->n_teams <= p->n_nodes);
    int t = 0;
    for (int k = 0; k < p->n_teams; k++) {
        const struct k3numa_team *tm = &p->teams[k];
        assert(tm->first_thread == t && tm->n_threads >= 1);
        for (int j = 0; j < tm->n_threads; j++)
            assert(p->thread_team[t + j] == k);
        t += tm->n_threads;
    }
    assert(t == p->n_threads);

    if (!p->bind) { /* K3NUMA_PLAN_OFF: one unpinned team over the whole machine */
        assert(p->n_nodes == 1 && p->n_teams == 1 && p->node_os[0] == -1 &&
               p->node_team[0] == 0 && p->node_cores[0] == total_cores);
        assert(p->teams[0].node == -1 &&
               p->teams[0].n_cores == (p->n_threads < total_cores ? p->n_threads : total_cores));
        for (int th = 0; th < p->n_threads; th++)
            assert(p->thread_cpu[th] == -1);
    } else {
        /* 2. a team per node that got threads, only nodes with cores, in layout order */
        assert(p->n_nodes == l->n_nodes);
        int next_team = 0;
        for (int i = 0; i < l->n_nodes; i++) {
            const struct k3numa_node *nd = &l->nodes[i];
            assert(p->node_os[i] == nd->os_index && p->node_cores[i] == nd->n_cores);
            int k = p->node_team[i];
            if (k < 0)
                continue;
            assert(k == next_team && p->teams[k].node == nd->os_index && nd->n_cores > 0 &&
                   p->teams[k].n_threads <= nd->n_pus);
            next_team++;
        }
        assert(next_team == p->n_teams);
        /* ... dealt one at a time to the node with the fewest threads per core (ties: the
         * earlier node), skipping full nodes: when node i took its last thread, node j had
         * room and at most its final count, and was not preferred. */
        for (int i = 0; i < l->n_nodes; i++) {
            if (dealt(p, i) == 0)
                continue;
            for (int j = 0; j < l->n_nodes; j++) {
                const struct k3numa_node *ni = &l->nodes[i], *nj = &l->nodes[j];
                if (j == i || nj->n_cores == 0 || dealt(p, j) >= nj->n_pus)
                    continue;
                long long mine = (long long)(dealt(p, i) - 1) * nj->n_cores,
                          theirs = (long long)dealt(p, j) * ni->n_cores;
                assert(j < i ? mine < theirs : mine <= theirs);
            }
        }
        /* 3. each team's PUs in spread order */
        long long key[max_cores];
        for (int i = 0; i < l->n_nodes; i++)
            if (p->node_team[i] >= 0)
                check_team_pus(p, l, &l->nodes[i], p->node_team[i], key);
    }

    /* 5. a drive with a known node that has a team is that team's; the k-th other one is
     * team k mod n_teams's; its buffers are on its team's node (where rule 6 computes) */
    int spill = 0;
    for (int d = 0; d < p->n_drives; d++) {
        int li = p->bind && p->drive_node[d] >= 0 ? k3numa_layout_node_index(l, p->drive_node[d]) : -1;
        int own = li >= 0 ? p->node_team[li] : -1;
        int team = own >= 0 ? own : spill++ % p->n_teams;
        assert(p->drive_node[d] >= -1 && p->drive_team[d] == team);
        assert(p->buffer_node[d] == p->teams[p->drive_team[d]].node);
    }

    /* 7. threads cut rows into contiguous ranges on granule multiples, covering each row
     * once; a team's range is its threads' union */
    static const int rows_cases[] = {0, 1, 17, 7168, 100003}, granules[] = {1, 16};
    for (int r = 0; r < 5; r++)
        for (int g = 0; g < 2; g++) {
            int rows = rows_cases[r], gr = granules[g], at = 0, b, e;
            for (int th = 0; th < p->n_threads; th++) {
                k3numa_plan_thread_rows(p, rows, gr, th, &b, &e);
                assert(b == at && e >= b && (b % gr == 0 || b == rows));
                at = e;
            }
            assert(at == rows);
            for (int k = 0; k < p->n_teams; k++) {
                const struct k3numa_team *tm = &p->teams[k];
                int tb, te, fb, fe, lb, le;
                k3numa_plan_team_rows(p, rows, gr, k, &tb, &te);
                k3numa_plan_thread_rows(p, rows, gr, tm->first_thread, &fb, &fe);
                k3numa_plan_thread_rows(p, rows, gr, tm->first_thread + tm->n_threads - 1, &lb, &le);
                assert(tb == fb && te == le);
            }
        }
}
#endif

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
