/* numa/bind: thread pinning and node-bound memory, for real on this machine (checked with
 * sched_getaffinity and hwloc_get_area_memlocation / get_area_membind), as a no-op on a
 * synthetic topology; and the whole plan applied here, with one team. */
#include <errno.h>
#include <hwloc.h>
#include <omp.h>
#include <sched.h>
#include <stdint.h>

#include "numa/bind.h"
#include "tests/unit/test_numa.h"

#define MiB ((size_t)1 << 20)

static int affinity(int *cpus, int max)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) != 0)
        return -1;
    int n = 0;
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &set)) {
            if (n < max)
                cpus[n] = c;
            n++;
        }
    return n;
}

static bool all_zero(const void *p, size_t len)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < len; i++)
        if (b[i])
            return false;
    return true;
}

/* What the kernel says the policy of [p, p+len) is: BIND to exactly `node`? */
static bool bound_to(const struct k3numa_topo *t, const void *p, size_t len, int node)
{
    hwloc_bitmap_t set = hwloc_bitmap_alloc();
    hwloc_membind_policy_t pol;
    int rc = hwloc_get_area_membind(k3numa_topo_hwloc(t), p, len, set, &pol,
                                    HWLOC_MEMBIND_BYNODESET);
    bool ok = rc == 0 && pol == HWLOC_MEMBIND_BIND && hwloc_bitmap_weight(set) == 1 &&
              hwloc_bitmap_isset(set, (unsigned)node);
    if (!ok)
        fprintf(stderr, "  area %p: rc %d policy %d, %d nodes\n", p, rc, (int)pol,
                hwloc_bitmap_weight(set));
    hwloc_bitmap_free(set);
    return ok;
}

/* A synthetic topology: the calls succeed and change nothing. */
static void synthetic(void)
{
    struct k3numa_topo *t = load_synthetic(TOPO_NPS1);
    int before[512], after[512];
    int nb = affinity(before, 512);
    CHECK(k3numa_bind_thread(t, (int[]){200}, 1) == 0, "binding on a synthetic topology");
    int na = affinity(after, 512);
    CHECK(na == nb && memcmp(before, after, sizeof(int) * (size_t)(na < 512 ? na : 512)) == 0,
          "a synthetic binding changed the affinity");
    CHECK(k3numa_bind_thread(t, (int[]){256}, 1) == -EINVAL, "PU 256 is not in the topology");
    CHECK(k3numa_bind_thread(t, (int[]){-1}, 1) == -EINVAL, "PU -1");

    struct k3numa_area a;
    CHECK(k3numa_area_alloc(t, &a, 5 * MiB + 1, 1) == 0, "area on synthetic node 1");
    CHECK(a.p && (uintptr_t)a.p % (2 * MiB) == 0 && a.len == 6 * MiB && a.node == 1 &&
              a.bound && all_zero(a.p, a.len),
          "synthetic area: %p len %zu node %d bound %d", a.p, a.len, a.node, a.bound);
    memset(a.p, 0xab, a.len); /* ASan: all of it is ours */
    k3numa_area_free(t, &a);
    CHECK(a.p == NULL && a.raw == NULL, "freed area cleared");
    CHECK(k3numa_area_alloc(t, &a, 100, 0) == 0 && (uintptr_t)a.p % 4096 == 0 &&
              a.len == 4096,
          "small synthetic area: %p len %zu", a.p, a.len);
    k3numa_area_free(t, &a);
    CHECK(k3numa_area_alloc(t, &a, 4096, 2) == -EINVAL && a.p == NULL,
          "node 2 is not in the topology");
    k3numa_topo_destroy(t);
}

static void real_thread(struct k3numa_topo *t)
{
    const struct k3numa_layout *l = k3numa_topo_layout(t);
    int start[1024];
    int ns = affinity(start, 1024);
    int pu = l->pus[l->n_pus - 1];
    int rc = k3numa_bind_thread(t, &pu, 1);
    REQUIRE(rc == 0, "bind to PU %d: %d", pu, rc);
    int now[1024], cpus[1024];
    int n = affinity(now, 1024);
    CHECK(n == 1 && now[0] == pu, "sched_getaffinity: %d PUs, first %d; want only %d", n,
          now[0], pu);
    n = k3numa_thread_cpus(t, cpus, 1024);
    CHECK(n == 1 && cpus[0] == pu, "hwloc_get_cpubind: %d PUs, first %d", n, cpus[0]);
    /* Unpinned: back to the usable PUs, the affinity the process started with. */
    CHECK(k3numa_bind_thread(t, NULL, 0) == 0, "unbind");
    n = affinity(now, 1024);
    CHECK(n == ns && memcmp(now, start, sizeof(int) * (size_t)(n < 1024 ? n : 1024)) == 0,
          "after unbinding %d PUs, at start %d", n, ns);
}

static void real_memory(struct k3numa_topo *t)
{
    const struct k3numa_layout *l = k3numa_topo_layout(t);
    for (int i = 0; i < l->n_nodes; i++) {
        int node = l->nodes[i].os_index;
        if (l->nodes[i].memory_bytes && l->nodes[i].memory_bytes < 64 * MiB)
            continue;
        struct k3numa_area a;
        int rc = k3numa_area_alloc(t, &a, 4 * MiB, node);
        REQUIRE(rc == 0, "4 MiB on node %d: %d", node, rc);
        if (!a.bound)
            SKIP("mbind refused here (%s): memory cannot be bound", strerror(-a.bind_err));
        CHECK((uintptr_t)a.p % (2 * MiB) == 0 && a.len == 4 * MiB, "area %p len %zu", a.p,
              a.len);
        CHECK(all_zero(a.p, a.len), "area not zeroed");
        int nodes[8];
        int nn = k3numa_area_nodes(t, a.p, a.len, nodes, 8);
        CHECK(nn == 1 && nodes[0] == node, "memlocation: %d nodes, first %d; want %d", nn,
              nn > 0 ? nodes[0] : -1, node);
        CHECK(bound_to(t, a.p, a.len, node), "policy of the area is not BIND to node %d",
              node);
        k3numa_area_free(t, &a);

        rc = k3numa_area_alloc(t, &a, 100, node);
        CHECK(rc == 0 && a.bound && (uintptr_t)a.p % 4096 == 0 && a.len == 4096,
              "small area: rc %d %p len %zu", rc, a.p, a.len);
        if (rc == 0) {
            nn = k3numa_area_nodes(t, a.p, a.len, nodes, 8);
            CHECK(nn == 1 && nodes[0] == node, "small area on %d nodes", nn);
            CHECK(bound_to(t, a.p, a.len, node), "small area policy");
            k3numa_area_free(t, &a);
        }
    }
    struct k3numa_area a;
    int rc = k3numa_area_alloc(t, &a, 3 * MiB, -1);
    CHECK(rc == 0 && !a.bound && a.bind_err == 0 && a.node == -1 &&
              (uintptr_t)a.p % (2 * MiB) == 0,
          "unbound area: rc %d bound %d", rc, a.bound);
    if (rc == 0)
        k3numa_area_free(t, &a);

    /* Parts of one area placed separately, as the stream places its read area: the first
     * half interleaved over the nodes (here the same node twice), the second bound. */
    int node = l->nodes[0].os_index, twice[2] = {node, node};
    rc = k3numa_area_alloc(t, &a, 4 * MiB, -1);
    REQUIRE(rc == 0, "4 MiB unbound: %d", rc);
    CHECK(k3numa_range_interleave(t, a.p, 2 * MiB, twice, 2) == 0, "interleave the first half");
    CHECK(k3numa_range_bind(t, (char *)a.p + 2 * MiB, 2 * MiB, node) == 0, "bind the second half");
    hwloc_bitmap_t set = hwloc_bitmap_alloc();
    hwloc_membind_policy_t pol;
    rc = hwloc_get_area_membind(k3numa_topo_hwloc(t), a.p, 2 * MiB, set, &pol,
                                HWLOC_MEMBIND_BYNODESET);
    CHECK(rc == 0 && pol == HWLOC_MEMBIND_INTERLEAVE && hwloc_bitmap_isset(set, (unsigned)node),
          "first half: rc %d policy %d", rc, (int)pol);
    hwloc_bitmap_free(set);
    CHECK(bound_to(t, (char *)a.p + 2 * MiB, 2 * MiB, node), "second half not bound");
    memset(a.p, 1, a.len);
    int nodes[8];
    int nn = k3numa_area_nodes(t, a.p, a.len, nodes, 8);
    CHECK(nn == 1 && nodes[0] == node, "split area on %d nodes, first %d", nn, nn > 0 ? nodes[0] : -1);
    k3numa_area_free(t, &a);
    CHECK(k3numa_area_alloc(t, &a, 4096, 4096) == -EINVAL, "node 4096 is not here");
}

/* The whole plan on this machine, as the engine will apply it: drive nodes from the
 * repository's folder, one thread per core, every thread pinned and checked, read
 * buffers on each drive's buffer node. */
static void real_plan(struct k3numa_topo *t)
{
    const struct k3numa_layout *l = k3numa_topo_layout(t);
    const char *root = getenv("K3_ROOT");
    root = root && *root ? root : ".";
    int drives[2];
    char why[256];
    REQUIRE(k3numa_topo_path_node(t, root, &drives[0], why, sizeof why) == 0, "path node");
    REQUIRE(k3numa_topo_path_node(t, "/dev/shm", &drives[1], NULL, 0) == 0, "path node");
    struct k3numa_plan *p;
    REQUIRE(k3numa_plan_make(&p, l, drives, 2, 0, 0) == 0, "plan");
    int with_cores = 0;
    for (int i = 0; i < l->n_nodes; i++)
        with_cores += l->nodes[i].n_cores > 0;
    CHECK(p->n_teams == with_cores && p->n_threads == l->n_cores, "%d teams %d threads",
          p->n_teams, p->n_threads);
    for (int i = 0; i < p->n_nodes; i++) {
        char line[512];
        k3numa_plan_format_node(p, i, NULL, line, sizeof line);
        fprintf(stderr, "%s\n", line);
    }

    int rc = k3numa_omp_bind(t, p);
    if (rc == -EBUSY)
        SKIP("OMP_PROC_BIND or OMP_PLACES is set: libgomp binds its threads itself");
    REQUIRE(rc == 0, "k3numa_omp_bind: %d", rc);
    CHECK(k3numa_omp_check(t, p) == 0, "threads not on their planned PUs");
    int wrong = 0;
#pragma omp parallel reduction(+ : wrong)
    {
        int id = omp_get_thread_num(), cpus[4];
        int n = affinity(cpus, 4);
        if (omp_get_num_threads() != p->n_threads || n != 1 || cpus[0] != p->thread_cpu[id]) {
#pragma omp critical
            fprintf(stderr, "  thread %d of %d: %d PUs, first %d; planned %d\n", id,
                    omp_get_num_threads(), n, cpus[0], p->thread_cpu[id]);
            wrong++;
        }
    }
    CHECK(wrong == 0, "%d threads with another affinity than planned", wrong);

    for (int d = 0; d < 2; d++) {
        struct k3numa_area a;
        rc = k3numa_area_alloc(t, &a, 2 * MiB, p->buffer_node[d]);
        REQUIRE(rc == 0, "buffers of drive %d on node %d: %d", d, p->buffer_node[d], rc);
        int nodes[8];
        int nn = k3numa_area_nodes(t, a.p, a.len, nodes, 8);
        CHECK(a.bound && nn == 1 && nodes[0] == p->buffer_node[d],
              "drive %d buffers: bound %d, on %d nodes, first %d; want %d", d, a.bound, nn,
              nn > 0 ? nodes[0] : -1, p->buffer_node[d]);
        CHECK(bound_to(t, a.p, a.len, p->buffer_node[d]), "drive %d buffers policy", d);
        k3numa_area_free(t, &a);
    }
    k3numa_plan_free(p);
}

int main(void)
{
    numa_test_env();
    synthetic();
    struct k3numa_topo *t;
    int rc = k3numa_topo_load(&t, K3NUMA_THIS_SYSTEM, NULL);
    REQUIRE(rc == 0, "load this system: %d", rc);
    REQUIRE(k3numa_topo_is_real(t), "this system is real");
    real_thread(t);
    real_memory(t);
    real_plan(t);
    k3numa_topo_destroy(t);
    return check_result();
}
