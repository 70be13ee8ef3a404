/* Applying a plan: pinning threads, node-bound memory, and reading back what was set.
 *
 * Owns: hwloc's binding calls (hwloc_set_cpubind per thread, hwloc_set_area_membind to
 * bind or interleave parts of an area already allocated), the OpenMP thread binding, and
 * the query that checks a thread's (hwloc_get_cpubind).
 * Does not own: deciding where (plan.h), what runs or what the memory holds.  Knows
 * nothing of models.
 *
 * OpenMP (../shared/io-notes.md §6, approach (b)): libgomp must not bind threads itself
 * (OMP_PROC_BIND unset or false, no OMP_PLACES); each OpenMP thread pins itself once, in
 * a first parallel region (k3numa_omp_bind).  libgomp then reuses its pool: OpenMP
 * thread t stays the same OS thread, pinned, in every later region of the same size.
 * A smaller region (of 2 or more threads: a 1-thread region leaves the pool alone) ends
 * the extra pool threads, and the next larger region starts new ones that inherit
 * thread 0's pinning (checked: tests/unit/test_numa_omp.c).  So either every region
 * runs plan->n_threads threads (the default once k3numa_omp_bind has run) or fewer
 * only where 1, or each compute region calls k3numa_omp_enter first, which re-pins a new
 * thread and costs one thread-local compare otherwise.
 *
 * On a synthetic or XML topology hwloc's binding calls succeed and do nothing
 * (k3numa_topo_is_real is false); queries then report every PU and node.
 * Functions return 0 (or a count) and -errno on failure; none prints.
 */
#ifndef K3NUMA_BIND_H
#define K3NUMA_BIND_H

#include <stdbool.h>
#include <stddef.h>

#include "numa/plan.h"
#include "numa/topology.h"

/* Pins the calling thread to the PUs cpus[0..n) (OS indexes); n == 0 unpins it: every
 * usable PU of the layout (the affinity the process started with).  -EINVAL for a PU
 * not in the topology; hwloc's -errno. */
int k3numa_bind_thread(const struct k3numa_topo *t, const int *cpus, int n);

/* The PUs the calling thread may run on, ascending, into cpus[0..max); returns how many
 * there are (possibly more than max), or -errno. */
int k3numa_thread_cpus(const struct k3numa_topo *t, int *cpus, int max);

/* Binds (and migrates) the whole pages inside [p, p + len) to node (OS index; -1: leave
 * them): for parts of one area that belong on different nodes, e.g. one registered read
 * area whose buffers serve several teams.  On a topology that is not this machine it is
 * a no-op.  -errno when the kernel refuses. */
int k3numa_range_bind(const struct k3numa_topo *t, void *p, size_t len, int node);

/* As k3numa_range_bind, with the pages spread round-robin over nodes[0..n) (OS indexes;
 * -1 entries skipped): for memory every team reads in turn, e.g. a trunk stream slot
 * whose layout changes from layer to layer. */
int k3numa_range_interleave(const struct k3numa_topo *t, void *p, size_t len, const int *nodes,
                            int n);

/* Pins OpenMP thread t to plan->thread_cpu[t] for every t: one parallel region of
 * plan->n_threads threads, each pinning itself; also turns dynamic teams off and makes
 * plan->n_threads the default team size.  Call once at start-up from the thread that
 * will start the compute regions (it becomes thread 0, pinned to thread_cpu[0]), before
 * any other parallel region of a different size.  Under K3NUMA_PLAN_OFF only the team
 * size is set.  -EBUSY when libgomp binds threads itself (OMP_PROC_BIND or OMP_PLACES
 * set: unset them, or set OMP_PROC_BIND=false); -EAGAIN when OpenMP gave fewer threads
 * than planned (OMP_THREAD_LIMIT); or the first binding's -errno. */
int k3numa_omp_bind(const struct k3numa_topo *t, const struct k3numa_plan *p);

/* Inside a parallel region: pins the calling OpenMP thread to its planned PU unless it
 * already is (one thread-local compare).  Threads numbered beyond the plan are left
 * alone.  0 or the binding's -errno. */
int k3numa_omp_enter(const struct k3numa_topo *t, const struct k3numa_plan *p);

/* Runs a parallel region of plan->n_threads threads and counts those whose binding
 * (k3numa_thread_cpus) is not exactly their planned PU; 0 when all are pinned as
 * planned.  Always 0 under K3NUMA_PLAN_OFF and on a topology that is not this machine
 * (nothing was really bound).  For --verbose and tests. */
int k3numa_omp_check(const struct k3numa_topo *t, const struct k3numa_plan *p);

#endif
