/* Helpers shared by the numa tests: the topologies they load, lists as strings. */
#ifndef K3_TESTS_TEST_NUMA_H
#define K3_TESTS_TEST_NUMA_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "numa/plan.h"
#include "numa/topology.h"
#include "tests/check.h"

/* Dual EPYC 7763 (../shared/io-notes.md §4): core k's PUs are k and k+128. */
#define TOPO_NPS1                                                                       \
    "pack:2 [numa(memory=256GiB)] l3:8(size=32MiB) l2:8(size=512KiB) l1d:1(size=32KiB) " \
    "core:1 pu:2(indexes=2*128:1*2)"
#define TOPO_NPS4                                                                          \
    "pack:2 numa:4(memory=64GiB) l3:2(size=32MiB) l2:8(size=512KiB) l1d:1(size=32KiB) " \
    "core:1 pu:2(indexes=2*128:1*2)"

/* hwloc's environment overrides whatever a test asks for (topology.h). */
static inline void numa_test_env(void)
{
    unsetenv("HWLOC_XMLFILE");
    unsetenv("HWLOC_SYNTHETIC");
    unsetenv("HWLOC_THISSYSTEM");
}

static inline struct k3numa_topo *load_synthetic(const char *desc)
{
    struct k3numa_topo *t;
    int rc = k3numa_topo_load(&t, K3NUMA_SYNTHETIC, desc);
    REQUIRE(rc == 0, "synthetic \"%s\": %d", desc, rc);
    return t;
}

/* A fixture of tests/numa/ (made by tests/numa/make-fixtures.sh). */
static inline struct k3numa_topo *load_fixture(const char *name)
{
    const char *root = getenv("K3_ROOT");
    char path[4096];
    snprintf(path, sizeof path, "%s/tests/numa/%s", root && *root ? root : ".", name);
    struct k3numa_topo *t;
    int rc = k3numa_topo_load(&t, K3NUMA_XML, path);
    REQUIRE(rc == 0, "xml %s: %d", path, rc);
    return t;
}

/* A list as k3numa_format_list prints it, in one of a few rotating static buffers. */
static inline const char *list_str(const int *v, int n)
{
    static char bufs[8][2048];
    static int next;
    char *b = bufs[next++ % 8];
    k3numa_format_list(v, n, b, sizeof bufs[0]);
    return b;
}

/* The PUs of layout node i (all of them, in layout order). */
static inline const char *node_pus(const struct k3numa_layout *l, int i)
{
    const struct k3numa_node *nd = &l->nodes[i];
    int first = nd->n_cores ? l->cores[nd->first_core].first_pu : 0;
    return list_str(l->pus + first, nd->n_pus);
}

/* The PUs team k's threads are pinned to. */
static inline const char *team_cpus(const struct k3numa_plan *p, int k)
{
    return list_str(p->thread_cpu + p->teams[k].first_thread, p->teams[k].n_threads);
}

#endif
