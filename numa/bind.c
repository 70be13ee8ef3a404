/* Thread pinning, node-bound memory, OpenMP binding (bind.h). */
#include "numa/bind.h"

#include <errno.h>
#include <hwloc.h>
#include <omp.h>
#include <stdint.h>

/* The PU this OS thread was last pinned to by this module, -1 when unknown. */
static _Thread_local int pinned_cpu = -1;

static int set_thread_binding(const struct k3numa_topo *t, const int *cpus, int n)
{
    hwloc_topology_t h = k3numa_topo_hwloc(t);
    hwloc_bitmap_t set = hwloc_bitmap_alloc();
    if (!set)
        return -ENOMEM;
    int rc = 0;
    if (n == 0) {
        const struct k3numa_layout *l = k3numa_topo_layout(t);
        for (int i = 0; i < l->n_pus; i++)
            hwloc_bitmap_set(set, (unsigned)l->pus[i]);
    } else {
        for (int i = 0; i < n; i++) {
            if (cpus[i] < 0) {
                rc = -EINVAL;
                goto out;
            }
            hwloc_bitmap_set(set, (unsigned)cpus[i]);
        }
        if (!hwloc_bitmap_isincluded(set, hwloc_topology_get_complete_cpuset(h))) {
            rc = -EINVAL;
            goto out;
        }
    }
    if (hwloc_set_cpubind(h, set, HWLOC_CPUBIND_THREAD) < 0)
        rc = errno ? -errno : -EINVAL;
out:
    hwloc_bitmap_free(set);
    return rc;
}

int k3numa_bind_thread(const struct k3numa_topo *t, const int *cpus, int n)
{
    if (n < 0 || (n > 0 && !cpus))
        return -EINVAL;
    int rc = set_thread_binding(t, cpus, n);
    pinned_cpu = rc == 0 && n == 1 ? cpus[0] : -1;
    return rc;
}

static int bitmap_to_list(hwloc_const_bitmap_t set, int *v, int max)
{
    int n = 0;
    unsigned i;
    hwloc_bitmap_foreach_begin(i, set)
    {
        if (n < max)
            v[n] = (int)i;
        n++;
    }
    hwloc_bitmap_foreach_end();
    return n;
}

int k3numa_thread_cpus(const struct k3numa_topo *t, int *cpus, int max)
{
    hwloc_bitmap_t set = hwloc_bitmap_alloc();
    if (!set)
        return -ENOMEM;
    int rc;
    if (hwloc_get_cpubind(k3numa_topo_hwloc(t), set, HWLOC_CPUBIND_THREAD) < 0)
        rc = errno ? -errno : -EINVAL;
    else
        rc = bitmap_to_list(set, cpus, max);
    hwloc_bitmap_free(set);
    return rc;
}

/* ------------------------------------------------------------------ memory */

int k3numa_range_bind(const struct k3numa_topo *t, void *p, size_t len, int node)
{
    if (node < 0 || !len)
        return 0;
    hwloc_bitmap_t set = hwloc_bitmap_alloc();
    if (!set)
        return -ENOMEM;
    hwloc_bitmap_only(set, (unsigned)node);
    /* Page-aligned inward: a page shared with a neighbour range stays where it is. */
    uintptr_t a = ((uintptr_t)p + 4095) & ~(uintptr_t)4095, b = ((uintptr_t)p + len) & ~(uintptr_t)4095;
    int rc = 0;
    if (b > a && hwloc_set_area_membind(k3numa_topo_hwloc(t), (void *)a, b - a, set,
                                        HWLOC_MEMBIND_BIND,
                                        HWLOC_MEMBIND_MIGRATE | HWLOC_MEMBIND_BYNODESET) < 0)
        rc = errno ? -errno : -ENOSYS;
    hwloc_bitmap_free(set);
    return rc;
}

int k3numa_range_interleave(const struct k3numa_topo *t, void *p, size_t len, const int *nodes,
                            int n)
{
    if (n <= 0 || !len)
        return 0;
    if (n == 1)
        return k3numa_range_bind(t, p, len, nodes[0]);
    hwloc_bitmap_t set = hwloc_bitmap_alloc();
    if (!set)
        return -ENOMEM;
    for (int i = 0; i < n; i++)
        if (nodes[i] >= 0)
            hwloc_bitmap_set(set, (unsigned)nodes[i]);
    uintptr_t a = ((uintptr_t)p + 4095) & ~(uintptr_t)4095, b = ((uintptr_t)p + len) & ~(uintptr_t)4095;
    int rc = 0;
    if (!hwloc_bitmap_iszero(set) && b > a &&
        hwloc_set_area_membind(k3numa_topo_hwloc(t), (void *)a, b - a, set,
                               HWLOC_MEMBIND_INTERLEAVE,
                               HWLOC_MEMBIND_MIGRATE | HWLOC_MEMBIND_BYNODESET) < 0)
        rc = errno ? -errno : -ENOSYS;
    hwloc_bitmap_free(set);
    return rc;
}

/* ------------------------------------------------------------------ OpenMP */

int k3numa_omp_enter(const struct k3numa_topo *t, const struct k3numa_plan *p)
{
    int id = omp_get_thread_num();
    if (!p->bind || id >= p->n_threads)
        return 0;
    int cpu = p->thread_cpu[id];
    if (cpu < 0 || pinned_cpu == cpu)
        return 0;
    int rc = set_thread_binding(t, &cpu, 1);
    pinned_cpu = rc == 0 ? cpu : -1;
    return rc;
}

int k3numa_omp_bind(const struct k3numa_topo *t, const struct k3numa_plan *p)
{
    if (p->bind && omp_get_proc_bind() != omp_proc_bind_false)
        return -EBUSY;
    omp_set_dynamic(0);
    omp_set_num_threads(p->n_threads);
    if (!p->bind)
        return 0;
    int err = 0;
#pragma omp parallel num_threads(p->n_threads)
    {
        int rc = omp_get_num_threads() == p->n_threads ? 0 : -EAGAIN;
        if (rc == 0) {
            pinned_cpu = -1; /* pin for certain, whatever happened to this thread before */
            rc = k3numa_omp_enter(t, p);
        }
        if (rc < 0) {
#pragma omp critical(k3numa_omp_bind)
            if (err == 0)
                err = rc;
        }
    }
    return err;
}

int k3numa_omp_check(const struct k3numa_topo *t, const struct k3numa_plan *p)
{
    if (!p->bind || !k3numa_topo_is_real(t))
        return 0;
    int wrong = 0;
#pragma omp parallel num_threads(p->n_threads) reduction(+ : wrong)
    {
        int id = omp_get_thread_num(), cpus[2];
        int n = k3numa_thread_cpus(t, cpus, 2);
        if (id >= p->n_threads || n != 1 || cpus[0] != p->thread_cpu[id])
            wrong++;
    }
    return wrong;
}
