/* numa/bind: thread pinning and binding parts of an area to nodes, for real on this
 * machine (checked with sched_getaffinity and hwloc_get_area_memlocation /
 * get_area_membind), as a no-op on a synthetic topology; and the whole plan applied here,
 * with one team. */
#include <errno.h>
#include <hwloc.h>
#include <omp.h>
#include <sched.h>
#include <stdint.h>
#include <sys/mman.h>

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

/* Fresh anonymous memory, as the read area is: no page faulted in yet. */
static void *fresh(size_t len)
{
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    REQUIRE(p != MAP_FAILED, "mmap %zu bytes", len);
    return p;
}

/* The nodes (OS indexes) holding the faulted-in pages of [p, p+len), into nodes[0..max);
 * returns how many. */
static int nodes_of(const struct k3numa_topo *t, const void *p, size_t len, int *nodes, int max)
{
    hwloc_bitmap_t set = hwloc_bitmap_alloc();
    int n = 0;
    unsigned i;
    if (hwloc_get_area_memlocation(k3numa_topo_hwloc(t), p, len, set, HWLOC_MEMBIND_BYNODESET) == 0)
        hwloc_bitmap_foreach_begin(i, set)
        {
            if (n < max)
                nodes[n] = (int)i;
            n++;
        }
    hwloc_bitmap_foreach_end();
    hwloc_bitmap_free(set);
    return n;
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

    /* Parts of an area bound or interleaved: accepted, and the memory is as it was. */
    char *a = fresh(4 * MiB);
    memset(a, 0xab, 4 * MiB);
    CHECK(k3numa_range_bind(t, a, 2 * MiB, 1) == 0, "bind on synthetic node 1");
    CHECK(k3numa_range_interleave(t, a + 2 * MiB, 2 * MiB, (int[]){0, 1}, 2) == 0,
          "interleave on synthetic nodes 0 and 1");
    CHECK(a[0] == (char)0xab && a[4 * MiB - 1] == (char)0xab, "synthetic binding changed memory");
    munmap(a, 4 * MiB);
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

/* Binds fresh memory to node and faults it in: where it lands and the policy it has. */
static void check_bound(const struct k3numa_topo *t, size_t len, int node, const char *what)
{
    char *a = fresh(len);
    int rc = k3numa_range_bind(t, a, len, node);
    if (rc == -EPERM || rc == -ENOSYS)
        SKIP("mbind refused here (%s): memory cannot be bound", strerror(-rc));
    REQUIRE(rc == 0, "%s: binding to node %d: %d", what, node, rc);
    memset(a, 1, len);
    int nodes[8];
    int nn = nodes_of(t, a, len, nodes, 8);
    CHECK(nn == 1 && nodes[0] == node, "%s: memlocation %d nodes, first %d; want %d", what, nn,
          nn > 0 ? nodes[0] : -1, node);
    CHECK(bound_to(t, a, len, node), "%s: policy is not BIND to node %d", what, node);
    munmap(a, len);
}

static void real_memory(struct k3numa_topo *t)
{
    const struct k3numa_layout *l = k3numa_topo_layout(t);
    for (int i = 0; i < l->n_nodes; i++) {
        if (l->nodes[i].memory_bytes && l->nodes[i].memory_bytes < 64 * MiB)
            continue;
        check_bound(t, 4 * MiB, l->nodes[i].os_index, "4 MiB");
        check_bound(t, 4096, l->nodes[i].os_index, "one page");
    }

    /* Parts of one area placed separately, as the stream places its read area: the first
     * half interleaved over the nodes (here the same node twice), the second bound. */
    int node = l->nodes[0].os_index, twice[2] = {node, node};
    char *a = fresh(4 * MiB);
    CHECK(k3numa_range_interleave(t, a, 2 * MiB, twice, 2) == 0, "interleave the first half");
    CHECK(k3numa_range_bind(t, a + 2 * MiB, 2 * MiB, node) == 0, "bind the second half");
    hwloc_bitmap_t set = hwloc_bitmap_alloc();
    hwloc_membind_policy_t pol;
    int rc = hwloc_get_area_membind(k3numa_topo_hwloc(t), a, 2 * MiB, set, &pol,
                                    HWLOC_MEMBIND_BYNODESET);
    CHECK(rc == 0 && pol == HWLOC_MEMBIND_INTERLEAVE && hwloc_bitmap_isset(set, (unsigned)node),
          "first half: rc %d policy %d", rc, (int)pol);
    hwloc_bitmap_free(set);
    CHECK(bound_to(t, a + 2 * MiB, 2 * MiB, node), "second half not bound");
    memset(a, 1, 4 * MiB);
    int nodes[8];
    int nn = nodes_of(t, a, 4 * MiB, nodes, 8);
    CHECK(nn == 1 && nodes[0] == node, "split area on %d nodes, first %d", nn, nn > 0 ? nodes[0] : -1);
    /* Node -1 (--numa off) and an empty range leave memory alone. */
    CHECK(k3numa_range_bind(t, a, 4096, -1) == 0 && k3numa_range_bind(t, a, 0, node) == 0,
          "no node, no bytes");
    munmap(a, 4 * MiB);
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

    for (int d = 0; d < 2; d++)
        check_bound(t, 2 * MiB, p->buffer_node[d], "a drive's read buffers");
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
