/* numa/plan: which PUs each team gets and where each drive's buffers live, on the dual
 * EPYC 7763 (NPS1, NPS4), a single node, odd core counts, shared and CPU-less nodes.
 * k3numa_plan_check holds on every plan made here (k3numa_plan_make asserts it too), on
 * every thread count over every topology here and the XML fixtures of tests/numa/, and
 * aborts on plans altered to break each rule of plan.h. */
#include <errno.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/unit/test_numa.h"

static struct k3numa_plan *make(const struct k3numa_topo *t, const int *drives, int n_drives,
                                int threads, unsigned flags)
{
    struct k3numa_plan *p;
    int rc = k3numa_plan_make(&p, k3numa_topo_layout(t), drives, n_drives, threads, flags);
    REQUIRE(rc == 0, "plan (%d drives, %d threads): %d", n_drives, threads, rc);
    k3numa_plan_check(p, k3numa_topo_layout(t));
    return p;
}

/* The team on node `node`, -1 if none. */
static int team_on(const struct k3numa_plan *p, int node)
{
    for (int k = 0; k < p->n_teams; k++)
        if (p->teams[k].node == node)
            return k;
    return -1;
}

#define CHECK_CPUS(p, k, want)                                                           \
    CHECK(strcmp(team_cpus(p, k), want) == 0, "team %d (node %d) cpus %s, want %s", k,    \
          (p)->teams[k].node, team_cpus(p, k), want)

#define CHECK_BUFFERS(p, ...)                                                            \
    do {                                                                                 \
        int want_[] = {__VA_ARGS__};                                                     \
        int n_ = (int)(sizeof want_ / sizeof want_[0]);                                  \
        CHECK((p)->n_drives == n_, "%d drives, want %d", (p)->n_drives, n_);              \
        for (int d_ = 0; d_ < n_ && d_ < (p)->n_drives; d_++)                            \
            CHECK((p)->buffer_node[d_] == want_[d_] &&                                   \
                      (p)->teams[(p)->drive_team[d_]].node == want_[d_],                 \
                  "drive %d buffers on node %d (team %d), want node %d", d_,             \
                  (p)->buffer_node[d_], (p)->drive_team[d_], want_[d_]);                 \
    } while (0)

/* Properties every plan has, whatever the rules decide. */
static void check_invariants(const struct k3numa_plan *p, const struct k3numa_layout *l)
{
    int t = 0;
    for (int k = 0; k < p->n_teams; k++) {
        const struct k3numa_team *tm = &p->teams[k];
        CHECK(tm->first_thread == t && tm->n_threads > 0, "team %d starts at %d with %d", k,
              tm->first_thread, tm->n_threads);
        for (int j = 0; j < tm->n_threads; j++)
            CHECK(p->thread_team[t + j] == k, "thread %d in team %d", t + j, k);
        t += tm->n_threads;
        if (p->bind) {
            int li = k3numa_layout_node_index(l, tm->node);
            CHECK(li >= 0 && p->node_team[li] == k, "team %d's node %d", k, tm->node);
            if (k > 0)
                CHECK(k3numa_layout_node_index(l, p->teams[k - 1].node) < li,
                      "teams in layout order");
        }
    }
    CHECK(t == p->n_threads, "teams hold %d threads of %d", t, p->n_threads);
    /* Each PU at most once; each the PU of its team's node. */
    for (int a = 0; p->bind && a < p->n_threads; a++) {
        for (int b = a + 1; b < p->n_threads; b++)
            CHECK(p->thread_cpu[a] != p->thread_cpu[b], "threads %d and %d share PU %d", a, b,
                  p->thread_cpu[a]);
        const struct k3numa_node *nd =
            &l->nodes[k3numa_layout_node_index(l, p->teams[p->thread_team[a]].node)];
        int first = l->cores[nd->first_core].first_pu, found = 0;
        for (int i = first; i < first + nd->n_pus; i++)
            found |= l->pus[i] == p->thread_cpu[a];
        CHECK(found, "thread %d's PU %d is not on its node %d", a, p->thread_cpu[a],
              nd->os_index);
    }
    /* Rows: threads partition [0, rows) in order; a team's range is its threads'. */
    int rows_cases[] = {0, 1, 15, 17, 1000, 7168, 100003};
    int granules[] = {1, 16, 64};
    for (size_t r = 0; r < sizeof rows_cases / sizeof rows_cases[0]; r++)
        for (size_t g = 0; g < sizeof granules / sizeof granules[0]; g++) {
            int rows = rows_cases[r], gr = granules[g], at = 0, b, e;
            for (int th = 0; th < p->n_threads; th++) {
                k3numa_plan_thread_rows(p, rows, gr, th, &b, &e);
                CHECK(b == at && e >= b && (b % gr == 0 || b == rows),
                      "rows %d granule %d thread %d: [%d,%d) after %d", rows, gr, th, b, e, at);
                at = e;
            }
            CHECK(at == rows, "rows %d granule %d end at %d", rows, gr, at);
            for (int k = 0; k < p->n_teams; k++) {
                /* Within a team: its threads' parts of one expert's rows. */
                int n = p->teams[k].n_threads, at_team = 0;
                for (int j = 0; j < n; j++) {
                    k3numa_split_rows(rows, gr, j, n, &b, &e);
                    CHECK(b == at_team && e >= b, "team %d part %d of %d: [%d,%d)", k, j, n, b, e);
                    at_team = e;
                }
                CHECK(at_team == rows, "team %d parts end at %d of %d", k, at_team, rows);
                int tb, te;
                k3numa_plan_team_rows(p, rows, gr, k, &tb, &te);
                k3numa_plan_thread_rows(p, rows, gr, p->teams[k].first_thread, &b, &e);
                CHECK(tb == b, "team %d rows start %d, its first thread's %d", k, tb, b);
                k3numa_plan_thread_rows(
                    p, rows, gr, p->teams[k].first_thread + p->teams[k].n_threads - 1, &b, &e);
                CHECK(te == e, "team %d rows end %d, its last thread's %d", k, te, e);
            }
        }
    for (int d = 0; d < p->n_drives; d++)
        CHECK(p->drive_team[d] >= 0 && p->drive_team[d] < p->n_teams, "drive %d team %d", d,
              p->drive_team[d]);
}

static void nps1(void)
{
    struct k3numa_topo *t = load_synthetic(TOPO_NPS1);
    const struct k3numa_layout *l = k3numa_topo_layout(t);
    int drives[] = {0, 0, 1, 1}; /* as tests/numa/epyc7763-nps1.xml has them */

    /* Default: one thread per core, 64 per node, no SMT sibling. */
    struct k3numa_plan *p = make(t, drives, 4, 0, 0);
    check_invariants(p, l);
    CHECK(p->n_threads == 128 && p->n_teams == 2, "%d threads %d teams", p->n_threads,
          p->n_teams);
    CHECK_CPUS(p, 0, "0-63");
    CHECK_CPUS(p, 1, "64-127");
    /* Spread over the eight L3s of a node before a second core of any. */
    CHECK(p->thread_cpu[0] == 0 && p->thread_cpu[1] == 8 && p->thread_cpu[7] == 56 &&
              p->thread_cpu[8] == 1 && p->thread_cpu[64] == 64 && p->thread_cpu[65] == 72,
          "spread order: %d %d %d %d %d %d", p->thread_cpu[0], p->thread_cpu[1],
          p->thread_cpu[7], p->thread_cpu[8], p->thread_cpu[64], p->thread_cpu[65]);
    CHECK_BUFFERS(p, 0, 0, 1, 1);
    for (int d = 0; d < 4; d++)
        CHECK(p->drive_node[d] == drives[d], "drive %d's own node %d", d, p->drive_node[d]);
    int b, e;
    k3numa_plan_team_rows(p, 7168, 16, 1, &b, &e);
    CHECK(b == 3584 && e == 7168, "team 1 rows [%d,%d)", b, e);
    k3numa_plan_thread_rows(p, 7168, 16, 0, &b, &e);
    CHECK(b == 0 && e == 48, "thread 0 rows [%d,%d): 448 granules over 128 threads", b, e);
    k3numa_plan_free(p);

    /* Every PU: SMT siblings join. */
    p = make(t, drives, 4, 256, 0);
    check_invariants(p, l);
    CHECK_CPUS(p, 0, "0-63,128-191");
    CHECK_CPUS(p, 1, "64-127,192-255");
    k3numa_plan_free(p);

    /* More than the PUs: capped. */
    p = make(t, drives, 4, 300, 0);
    CHECK(p->threads_requested == 300 && p->n_threads == 256, "300 threads -> %d",
          p->n_threads);
    k3numa_plan_free(p);

    /* More threads than cores: siblings of the spread-first cores. */
    p = make(t, drives, 4, 160, 0);
    check_invariants(p, l);
    CHECK(p->teams[0].n_threads == 80 && p->teams[1].n_threads == 80, "80 + 80");
    CHECK_CPUS(p, 0, "0-63,128-129,136-137,144-145,152-153,160-161,168-169,176-177,184-185");
    k3numa_plan_free(p);

    /* Fewer threads than cores: one per L3. */
    p = make(t, drives, 4, 16, 0);
    check_invariants(p, l);
    CHECK_CPUS(p, 0, "0,8,16,24,32,40,48,56");
    CHECK_CPUS(p, 1, "64,72,80,88,96,104,112,120");
    k3numa_plan_free(p);

    /* One thread: one team, on node 0; drive buffers of node 1 come to it. */
    p = make(t, drives, 4, 1, 0);
    check_invariants(p, l);
    CHECK(p->n_teams == 1 && p->teams[0].node == 0 && p->thread_cpu[0] == 0,
          "1 thread: %d teams", p->n_teams);
    CHECK_BUFFERS(p, 0, 0, 0, 0);
    k3numa_plan_free(p);

    /* Drives all on node 1. */
    int on1[] = {1, 1, 1, 1, 1, 1};
    p = make(t, on1, 6, 0, 0);
    CHECK_BUFFERS(p, 1, 1, 1, 1, 1, 1);
    k3numa_plan_free(p);

    /* No drives. */
    p = make(t, NULL, 0, 0, 0);
    check_invariants(p, l);
    CHECK(p->n_drives == 0, "no drives");
    k3numa_plan_free(p);
    k3numa_topo_destroy(t);
}

static void nps4(void)
{
    /* Drive nodes as the XML fixture reports them: the synthetic and the XML topology
     * give the same layout, so the same plan. */
    struct k3numa_topo *x = load_fixture("epyc7763-nps4.xml");
    const char *devs[] = {"nvme0n1", "nvme1n1", "nvme2n1", "nvme3n1", "nvme4n1"};
    int drives[5];
    for (int d = 0; d < 5; d++)
        k3numa_topo_device_node(x, devs[d], &drives[d], NULL, 0);
    CHECK(drives[0] == 1 && drives[1] == 3 && drives[2] == 5 && drives[3] == 7 &&
              drives[4] == -1,
          "fixture drives on %d %d %d %d %d", drives[0], drives[1], drives[2], drives[3],
          drives[4]);
    struct k3numa_topo *t = load_synthetic(TOPO_NPS4);
    const struct k3numa_layout *l = k3numa_topo_layout(t);

    struct k3numa_plan *p = make(t, drives, 5, 0, 0), *px = make(x, drives, 5, 0, 0);
    check_invariants(p, l);
    CHECK(p->n_teams == 8 && p->n_threads == 128, "%d teams %d threads", p->n_teams,
          p->n_threads);
    for (int k = 0; k < 8 && k < p->n_teams; k++) {
        char want[32];
        snprintf(want, sizeof want, "%d-%d", 16 * k, 16 * k + 15);
        CHECK(p->teams[k].node == k && p->teams[k].n_threads == 16, "team %d: node %d, %d",
              k, p->teams[k].node, p->teams[k].n_threads);
        CHECK_CPUS(p, k, want);
    }
    /* nvme4n1 attaches to four nodes: no single locality, the first spill goes to team 0. */
    CHECK_BUFFERS(p, 1, 3, 5, 7, 0);
    CHECK(px->n_threads == p->n_threads && px->n_teams == p->n_teams &&
              memcmp(px->thread_cpu, p->thread_cpu, sizeof(int) * (size_t)p->n_threads) == 0 &&
              memcmp(px->buffer_node, p->buffer_node, sizeof(int) * 5) == 0,
          "XML and synthetic NPS4 plan alike");
    k3numa_plan_free(p);
    k3numa_plan_free(px);

    /* Fewer threads than nodes: the first four nodes get one each; drives of teamless
     * nodes 5 and 7 and the unknown one go round the teams. */
    p = make(t, drives, 5, 4, 0);
    check_invariants(p, l);
    CHECK(p->n_teams == 4, "%d teams", p->n_teams);
    for (int k = 0; k < 4 && k < p->n_teams; k++)
        CHECK(p->teams[k].node == k && p->teams[k].n_threads == 1 &&
                  p->thread_cpu[k] == 16 * k,
              "team %d: node %d cpu %d", k, p->teams[k].node, p->thread_cpu[k]);
    CHECK_BUFFERS(p, 1, 3, 0, 1, 2);
    k3numa_plan_free(p);

    /* 20 threads over 8 equal nodes: 3,3,3,3,2,2,2,2. */
    p = make(t, drives, 5, 20, 0);
    check_invariants(p, l);
    for (int k = 0; k < 8 && k < p->n_teams; k++)
        CHECK(p->teams[k].n_threads == (k < 4 ? 3 : 2), "team %d: %d threads", k,
              p->teams[k].n_threads);
    CHECK_CPUS(p, 0, "0-1,8"); /* two L3s of 8 cores per NPS4 node: 0, 8, then 1 */
    k3numa_plan_free(p);

    /* More threads than cores. */
    p = make(t, drives, 5, 192, 0);
    check_invariants(p, l);
    CHECK_CPUS(p, 5, "80-95,208-211,216-219"); /* siblings of 80, 88, 81, 89, ... */
    k3numa_plan_free(p);
    k3numa_topo_destroy(t);
    k3numa_topo_destroy(x);
}

static void single_node(void)
{
    struct k3numa_topo *t = load_synthetic("pack:1 [numa(memory=16GiB)] l3:1 core:8 pu:2");
    const struct k3numa_layout *l = k3numa_topo_layout(t);
    int drives[] = {0, 0, 0}; /* more drives than nodes */
    struct k3numa_plan *p = make(t, drives, 3, 0, 0);
    check_invariants(p, l);
    CHECK(p->n_teams == 1 && p->n_threads == 8, "%d teams %d threads", p->n_teams,
          p->n_threads);
    CHECK_CPUS(p, 0, "0,2,4,6,8,10,12,14"); /* default numbering: core k has PUs 2k, 2k+1 */
    CHECK_BUFFERS(p, 0, 0, 0);
    k3numa_plan_free(p);

    int unknown[] = {-1, -1, -1, 4}; /* node 4 is not in the layout: unknown */
    p = make(t, unknown, 4, 12, 0);
    check_invariants(p, l);
    CHECK_CPUS(p, 0, "0-8,10,12,14");
    CHECK_BUFFERS(p, 0, 0, 0, 0);
    CHECK(p->drive_node[3] == 4, "drive 3's own node as given");
    k3numa_plan_free(p);
    k3numa_topo_destroy(t);
}

static void odd_cores(void)
{
    struct k3numa_topo *t = load_fixture("odd-3-5.xml");
    const struct k3numa_layout *l = k3numa_topo_layout(t);
    int drives[2];
    k3numa_topo_device_node(t, "nvme0n1", &drives[0], NULL, 0);
    k3numa_topo_device_node(t, "nvme1n1", &drives[1], NULL, 0);
    struct {
        int threads, n0, n1;
        const char *cpus0, *cpus1;
    } cases[] = {
        {0, 3, 5, "0-2", "5-9"},         {8, 3, 5, "0-2", "5-9"},
        {4, 2, 2, "0-1", "5-6"},         {2, 1, 1, "0", "5"},
        {12, 5, 7, "0-2,10-11", "5-9,15-16"}, {16, 6, 10, "0-2,10-12", "5-9,15-19"},
        {99, 6, 10, "0-2,10-12", "5-9,15-19"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        struct k3numa_plan *p = make(t, drives, 2, cases[c].threads, 0);
        check_invariants(p, l);
        CHECK(p->n_teams == 2 && p->teams[0].n_threads == cases[c].n0 &&
                  p->teams[1].n_threads == cases[c].n1,
              "%d threads: %d + %d, want %d + %d", cases[c].threads, p->teams[0].n_threads,
              p->n_teams > 1 ? p->teams[1].n_threads : 0, cases[c].n0, cases[c].n1);
        CHECK_CPUS(p, 0, cases[c].cpus0);
        CHECK_CPUS(p, 1, cases[c].cpus1);
        /* Both drives on node 1: both buffers there, node 0's team gets none. */
        CHECK_BUFFERS(p, 1, 1);
        k3numa_plan_free(p);
    }
    /* Rows in proportion to team sizes: 3 of 8 and 5 of 8. */
    struct k3numa_plan *p = make(t, drives, 2, 8, 0);
    int b, e;
    k3numa_plan_team_rows(p, 800, 1, 0, &b, &e);
    CHECK(b == 0 && e == 300, "team 0 rows [%d,%d)", b, e);
    k3numa_plan_team_rows(p, 800, 1, 1, &b, &e);
    CHECK(b == 300 && e == 800, "team 1 rows [%d,%d)", b, e);
    k3numa_plan_free(p);
    k3numa_topo_destroy(t);
}

/* Two nodes per package sharing a cpuset (DRAM + HBM): cores and teams on the first. */
static void shared_nodes(void)
{
    struct k3numa_topo *t = load_synthetic("pack:2 [numa] [numa] core:2 pu:2");
    const struct k3numa_layout *l = k3numa_topo_layout(t);
    int drives[] = {1, 3, 2};
    struct k3numa_plan *p = make(t, drives, 3, 0, 0);
    check_invariants(p, l);
    CHECK(p->n_teams == 2 && p->teams[0].node == 0 && p->teams[1].node == 2,
          "teams on nodes 0 and 2");
    CHECK(team_on(p, 1) < 0 && team_on(p, 3) < 0, "no team on the memory-only nodes");
    CHECK_BUFFERS(p, 0, 2, 2);
    char line[256];
    k3numa_plan_format_node(p, 1, NULL, line, sizeof line);
    CHECK(strcmp(line, "node 1: no threads, cpus -, drives -, buffers 0 MiB") == 0, "%s",
          line);
    k3numa_plan_format_node(p, 0, NULL, line, sizeof line);
    CHECK(strcmp(line, "node 0: 2 threads, cpus 0,2, drives 0*, buffers 0 MiB") == 0, "%s",
          line);
    k3numa_plan_free(p);
    k3numa_topo_destroy(t);
}

static void numa_off(void)
{
    struct k3numa_topo *t = load_synthetic(TOPO_NPS1);
    const struct k3numa_layout *l = k3numa_topo_layout(t);
    int drives[] = {0, 0, 1, 1};
    struct k3numa_plan *p = make(t, drives, 4, 0, K3NUMA_PLAN_OFF);
    check_invariants(p, l);
    CHECK(!p->bind && p->n_teams == 1 && p->teams[0].node == -1 && p->n_threads == 128 &&
              p->n_nodes == 1,
          "off: bind %d teams %d node %d threads %d", p->bind, p->n_teams, p->teams[0].node,
          p->n_threads);
    for (int i = 0; i < p->n_threads; i++)
        CHECK(p->thread_cpu[i] == -1, "thread %d unpinned", i);
    CHECK_BUFFERS(p, -1, -1, -1, -1);
    uint64_t bytes[] = {1ull << 30};
    char line[256];
    k3numa_plan_format_node(p, 0, bytes, line, sizeof line);
    CHECK(strcmp(line, "numa off: 128 threads, cpus not pinned, drives 0,1,2,3, "
                       "buffers 1024 MiB") == 0,
          "%s", line);
    k3numa_plan_free(p);
    k3numa_topo_destroy(t);
}

static void verbose_lines(void)
{
    struct k3numa_topo *t = load_synthetic(TOPO_NPS1);
    int drives[] = {0, 0, 1, 1};
    struct k3numa_plan *p = make(t, drives, 4, 256, 0);
    uint64_t bytes[] = {2048ull << 20, (2048ull << 20) + 1};
    char line[256];
    const char *want[] = {
        "node 0: 128 threads, cpus 0-63,128-191, drives 0,1, buffers 2048 MiB",
        "node 1: 128 threads, cpus 64-127,192-255, drives 2,3, buffers 2049 MiB",
    };
    for (int i = 0; i < 2; i++) {
        int n = k3numa_plan_format_node(p, i, bytes, line, sizeof line);
        CHECK(strcmp(line, want[i]) == 0 && n == (int)strlen(want[i]), "line %d: %s (%d)", i,
              line, n);
    }
    /* Truncation: snprintf's contract. */
    int n = k3numa_plan_format_node(p, 0, bytes, line, 10);
    CHECK(n == (int)strlen(want[0]) && strcmp(line, "node 0: 1") == 0, "truncated: %s (%d)",
          line, n);
    CHECK(k3numa_plan_format_node(p, 2, bytes, line, sizeof line) == -EINVAL && line[0] == 0,
          "node index out of range");
    k3numa_plan_free(p);
    k3numa_topo_destroy(t);

    t = load_synthetic(TOPO_NPS4);
    int d4[] = {1, 3, 5, 7, -1};
    p = make(t, d4, 5, 4, 0);
    uint64_t b4[8] = {1, 0, 0, 0, 0, 0, 0, 0};
    k3numa_plan_format_node(p, 0, b4, line, sizeof line);
    CHECK(strcmp(line, "node 0: 1 thread, cpus 0, drives 2*, buffers 1 MiB") == 0, "%s", line);
    k3numa_plan_format_node(p, 1, b4, line, sizeof line);
    CHECK(strcmp(line, "node 1: 1 thread, cpus 16, drives 0,3*, buffers 0 MiB") == 0, "%s",
          line);
    k3numa_plan_format_node(p, 5, b4, line, sizeof line);
    CHECK(strcmp(line, "node 5: no threads, cpus -, drives -, buffers 0 MiB") == 0, "%s",
          line);
    k3numa_plan_free(p);
    k3numa_topo_destroy(t);

    int v[] = {5, 3, 4, 9, 1, 4, 130, 128, 129};
    CHECK(strcmp(list_str(v, 9), "1,3-5,9,128-130") == 0, "list %s", list_str(v, 9));
    CHECK(strcmp(list_str(v, 0), "-") == 0, "empty list %s", list_str(v, 0));
    char small[4];
    n = k3numa_format_list(v, 9, small, sizeof small);
    CHECK(n == 15 && strcmp(small, "1,3") == 0, "truncated list %s (%d)", small, n);
}

static void errors_and_purity(void)
{
    struct k3numa_topo *t = load_fixture("epyc7763-nps1.xml");
    const struct k3numa_layout *l = k3numa_topo_layout(t);
    struct k3numa_plan *p = (struct k3numa_plan *)1;
    CHECK(k3numa_plan_make(&p, l, NULL, -1, 0, 0) == -EINVAL && p == NULL, "n_drives < 0");
    CHECK(k3numa_plan_make(&p, l, NULL, 2, 0, 0) == -EINVAL, "drives without nodes");
    struct k3numa_layout empty = *l;
    empty.n_cores = 0;
    CHECK(k3numa_plan_make(&p, &empty, NULL, 0, 0, 0) == -EINVAL, "no cores");

    /* Same inputs, same plan. */
    int drives[] = {1, -1, 0, 1, 0};
    struct k3numa_plan *a = make(t, drives, 5, 100, 0), *b = make(t, drives, 5, 100, 0);
    CHECK(a->n_threads == b->n_threads && a->n_teams == b->n_teams &&
              memcmp(a->thread_cpu, b->thread_cpu, sizeof(int) * (size_t)a->n_threads) == 0 &&
              memcmp(a->thread_team, b->thread_team, sizeof(int) * (size_t)a->n_threads) == 0 &&
              memcmp(a->teams, b->teams, sizeof *a->teams * (size_t)a->n_teams) == 0 &&
              memcmp(a->drive_team, b->drive_team, sizeof(int) * 5) == 0,
          "two plans of the same inputs differ");
    CHECK_BUFFERS(a, 1, 0, 0, 1, 0);
    k3numa_plan_free(a);
    k3numa_plan_free(b);
    k3numa_topo_destroy(t);
}

/* Every thread count from 0 to past the PUs, with the fixture's drives, unknown drives
 * and none, pinned and under --numa off: each plan passes the check (inside make). */
static void sweep(const char *what, struct k3numa_topo *t, const char *const *devs, int n_devs)
{
    const struct k3numa_layout *l = k3numa_topo_layout(t);
    int drives[8], unknown[3] = {-1, -1, 7};
    for (int d = 0; d < n_devs; d++)
        k3numa_topo_device_node(t, devs[d], &drives[d], NULL, 0);
    int plans = 0;
    for (int threads = 0; threads <= l->n_pus + 2; threads++)
        for (unsigned flags = 0; flags <= K3NUMA_PLAN_OFF; flags += K3NUMA_PLAN_OFF) {
            k3numa_plan_free(make(t, drives, n_devs, threads, flags));
            k3numa_plan_free(make(t, unknown, 3, threads, flags));
            k3numa_plan_free(make(t, NULL, 0, threads, flags));
            plans += 3;
        }
    printf("%s: %d plans checked\n", what, plans);
}

static void sweeps(void)
{
    const char *nps[] = {"nvme0n1", "nvme1n1", "nvme2n1", "nvme3n1", "nvme4n1", "nvme5c5n1"};
    const char *odd[] = {"nvme0n1", "nvme1n1"};
    struct {
        const char *fixture, *const *devs;
        int n_devs;
    } xml[] = {{"epyc7763-nps1.xml", nps, 4}, {"epyc7763-nps4.xml", nps, 6}, {"odd-3-5.xml", odd, 2}};
    for (size_t i = 0; i < sizeof xml / sizeof xml[0]; i++) {
        struct k3numa_topo *t = load_fixture(xml[i].fixture);
        sweep(xml[i].fixture, t, xml[i].devs, xml[i].n_devs);
        k3numa_topo_destroy(t);
    }
    const char *synthetic[] = {TOPO_NPS1, TOPO_NPS4, "pack:1 [numa(memory=16GiB)] l3:1 core:8 pu:2",
                               "pack:2 [numa] [numa] core:2 pu:2", "pack:2 [numa] core:1 pu:1",
                               "pack:1 numa:3 l3:2 core:3 pu:1"};
    for (size_t i = 0; i < sizeof synthetic / sizeof synthetic[0]; i++) {
        struct k3numa_topo *t = load_synthetic(synthetic[i]);
        sweep(synthetic[i], t, NULL, 0);
        k3numa_topo_destroy(t);
    }
}

/* ---- plans altered to break one rule each: the check must abort ---- */

static void break_threads(struct k3numa_plan *p) /* rule 1: more than asked */
{
    p->threads_requested = p->n_threads - 1;
}

static void break_dealing(struct k3numa_plan *p) /* rule 2: odd-3-5 with 8 threads as 4 + 4 */
{
    p->teams[0].n_threads = 4;
    p->teams[1].first_thread = 4;
    p->teams[1].n_threads = 4;
    p->teams[1].n_cores = 4;
    p->thread_team[3] = 0;
    int cpus[] = {0, 1, 2, 10, 5, 6, 7, 8}; /* 10: the SMT sibling of node 0's core 0 */
    memcpy(p->thread_cpu, cpus, sizeof cpus);
}

static void break_team_node(struct k3numa_plan *p) /* rule 2: a team on another node */
{
    p->teams[1].node = p->teams[0].node;
}

static void break_spread(struct k3numa_plan *p) /* rule 3: a second core of an L3 first */
{
    int swap = p->thread_cpu[1];
    p->thread_cpu[1] = p->thread_cpu[8];
    p->thread_cpu[8] = swap;
}

static void break_smt(struct k3numa_plan *p) /* rule 3: an SMT sibling before every core */
{
    p->thread_cpu[1] = 128;
}

static void break_numbers(struct k3numa_plan *p) /* rule 4: a thread in the wrong team */
{
    p->thread_team[0] = 1;
}

static void break_drive(struct k3numa_plan *p) /* rule 5: a drive of node 1 to team 0 */
{
    p->drive_team[2] = 0;
    p->buffer_node[2] = p->teams[0].node;
}

static void break_spill(struct k3numa_plan *p) /* rule 5: two spilled drives on one team */
{
    p->drive_team[4] = 1;
    p->buffer_node[4] = p->teams[1].node;
}

static void break_buffers(struct k3numa_plan *p) /* rule 5: buffers off the drive's team */
{
    p->buffer_node[0] = 1;
}

static void break_off(struct k3numa_plan *p) /* --numa off pins nothing */
{
    p->thread_cpu[0] = 0;
}

/* The check aborts on the plan (threads, flags) altered by alter, in a child process. */
static void must_abort(const char *what, const char *topo, const int *drives, int n_drives,
                       int threads, unsigned flags, void (*alter)(struct k3numa_plan *))
{
    struct k3numa_topo *t = strstr(topo, ".xml") ? load_fixture(topo) : load_synthetic(topo);
    struct k3numa_plan *p = make(t, drives, n_drives, threads, flags);
    fflush(NULL);
    pid_t pid = fork();
    REQUIRE(pid >= 0, "fork");
    if (pid == 0) {
        alter(p);
        k3numa_plan_check(p, k3numa_topo_layout(t));
        _exit(0);
    }
    int status;
    REQUIRE(waitpid(pid, &status, 0) == pid, "waitpid");
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT,
          "%s: the check let it pass (status %#x)", what, status);
    printf("%s: %s\n", what, WIFSIGNALED(status) ? "aborted, as it should" : "passed");
    k3numa_plan_free(p);
    k3numa_topo_destroy(t);
}

static void broken_plans(void)
{
#ifdef NDEBUG
    printf("NDEBUG: the check asserts nothing in this build; broken plans not tried\n");
#else
    int nps1[] = {0, 0, 1, 1, -1, -1}, odd[] = {1, 1};
    must_abort("rule 1, threads", TOPO_NPS1, nps1, 6, 16, 0, break_threads);
    must_abort("rule 2, dealing", "odd-3-5.xml", odd, 2, 8, 0, break_dealing);
    must_abort("rule 2, team node", TOPO_NPS1, nps1, 6, 16, 0, break_team_node);
    must_abort("rule 3, spread", TOPO_NPS1, nps1, 6, 16, 0, break_spread);
    must_abort("rule 3, SMT", TOPO_NPS1, nps1, 6, 16, 0, break_smt);
    must_abort("rule 4, numbers", TOPO_NPS1, nps1, 6, 16, 0, break_numbers);
    must_abort("rule 5, drive", TOPO_NPS1, nps1, 6, 16, 0, break_drive);
    must_abort("rule 5, spill", TOPO_NPS1, nps1, 6, 16, 0, break_spill);
    must_abort("rule 5, buffers", TOPO_NPS1, nps1, 6, 16, 0, break_buffers);
    must_abort("numa off", TOPO_NPS1, nps1, 6, 16, K3NUMA_PLAN_OFF, break_off);
#endif
}

int main(void)
{
    numa_test_env();
    nps1();
    nps4();
    single_node();
    odd_cores();
    shared_nodes();
    numa_off();
    verbose_lines();
    errors_and_purity();
    sweeps();
    broken_plans();
    return check_result();
}
