#include "engine/stream/placement.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "numa/bind.h"

int k3_topology_parse(const char *flag, const char *text, struct k3_topology_source *out,
                      struct k3_err *err)
{
    struct k3_topology_source got = {K3NUMA_THIS_SYSTEM, NULL};
    if (!strncmp(text, "synthetic:", 10))
        got = (struct k3_topology_source){K3NUMA_SYNTHETIC, text + 10};
    else if (!strncmp(text, "xml:", 4))
        got = (struct k3_topology_source){K3NUMA_XML, text + 4};
    if (!got.arg || !got.arg[0])
        return k3_errf(err, "%s=%s: want synthetic:STRING or xml:FILE", flag, text);
    struct k3numa_topo *t;
    int e = k3numa_topo_load(&t, got.kind, got.arg);
    if (e)
        return k3_errf(err, "%s=%s: hwloc cannot load it (%s)", flag, text, strerror(-e));
    k3numa_topo_destroy(t);
    *out = got;
    return 0;
}

int k3_placement_init(struct k3_placement *pl, const char *const *drives, int n_drives,
                      int threads, bool numa_off, const struct k3_topology_source *topology,
                      struct k3_err *err)
{
    memset(pl, 0, sizeof *pl);
    int e = topology ? k3numa_topo_load(&pl->topo, topology->kind, topology->arg)
                     : k3numa_topo_load(&pl->topo, K3NUMA_THIS_SYSTEM, NULL);
    if (e)
        return k3_errf(err, "loading the machine's topology (hwloc): %s", strerror(-e));
    int *nodes = calloc((size_t)n_drives + 1, sizeof *nodes);
    pl->drives = calloc((size_t)n_drives + 1, sizeof *pl->drives);
    if (!nodes || !pl->drives) {
        free(nodes);
        return k3_errf(err, "out of memory");
    }
    for (int d = 0; d < n_drives; d++)
        if (!(pl->drives[pl->n_drives++] = strdup(drives[d]))) {
            free(nodes);
            return k3_errf(err, "out of memory");
        }
    for (int d = 0; d < n_drives; d++) {
        char why[160] = "";
        if (k3numa_topo_path_node(pl->topo, drives[d], &nodes[d], why, sizeof why) || nodes[d] < 0)
            nodes[d] = -1;
        if (d < 8)
            snprintf(pl->why[d], sizeof pl->why[d], "%s", why);
    }
    e = k3numa_plan_make(&pl->plan, k3numa_topo_layout(pl->topo), nodes, n_drives, threads,
                         numa_off ? K3NUMA_PLAN_OFF : 0);
    free(nodes);
    if (e)
        return k3_errf(err, "planning threads: %s", strerror(-e));
    e = k3numa_omp_bind(pl->topo, pl->plan);
    if (e == -EBUSY)
        return k3_errf(err, "--numa auto pins threads itself: unset OMP_PROC_BIND and OMP_PLACES "
                            "(or use --numa off)");
    if (e)
        return k3_errf(err, "pinning threads: %s", strerror(-e));
    return 0;
}

void k3_placement_print(FILE *f, const struct k3_placement *pl, uint64_t buffer_bytes)
{
    const struct k3numa_plan *p = pl->plan;
    uint64_t *per_node = calloc((size_t)p->n_nodes + 1, sizeof *per_node);
    /* Buffers spread over the teams' nodes in proportion to their threads. */
    for (int i = 0; per_node && i < p->n_nodes; i++)
        if (p->node_team[i] >= 0)
            per_node[i] = buffer_bytes * (uint64_t)p->teams[p->node_team[i]].n_threads /
                          (uint64_t)p->n_threads;
    for (int i = 0; i < p->n_nodes; i++) {
        char line[512];
        k3numa_plan_format_node(p, i, per_node, line, sizeof line);
        fprintf(f, "k3-uring: %s\n", line);
    }
    for (int d = 0; d < p->n_drives && d < 8; d++)
        if (p->drive_node[d] < 0 && pl->why[d][0])
            fprintf(f, "k3-uring: drive %d has no NUMA node: %s\n", d, pl->why[d]);
    free(per_node);
}

int k3_placement_drive_team(const struct k3_placement *pl, const char *path)
{
    for (int d = 0; d < pl->n_drives && d < pl->plan->n_drives; d++)
        if (!strcmp(pl->drives[d], path))
            return pl->plan->drive_team[d];
    return 0;
}

int k3_placement_pin_to_team(const struct k3_placement *pl, int team)
{
    const struct k3numa_plan *p = pl->plan;
    if (!p->bind || team < 0 || team >= p->n_teams)
        return 0;
    const struct k3numa_team *t = &p->teams[team];
    return k3numa_bind_thread(pl->topo, p->thread_cpu + t->first_thread, t->n_threads);
}

void k3_placement_free(struct k3_placement *pl)
{
    for (int d = 0; d < pl->n_drives; d++)
        free(pl->drives[d]);
    free(pl->drives);
    k3numa_plan_free(pl->plan);
    k3numa_topo_destroy(pl->topo);
    memset(pl, 0, sizeof *pl);
}
