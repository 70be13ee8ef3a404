/* The engine's side of NUMA placement (numa/ does the work, knowing nothing of models).
 *
 * Owns: loading the topology (this machine; or, for tests, a described one,
 * synthetic:STRING or xml:FILE, where binding is a no-op: the CLI's K3_TOPOLOGY), finding
 * each drive's node, making the plan for
 * --threads and --numa, pinning the OpenMP threads and the I/O threads, and the --verbose
 * lines.
 */
#ifndef K3_PLACEMENT_H
#define K3_PLACEMENT_H

#include <stdbool.h>
#include <stdio.h>

#include "engine/base/err.h"
#include "numa/plan.h"
#include "numa/topology.h"

struct k3_placement {
    struct k3numa_topo *topo;
    struct k3numa_plan *plan;
    char why[8][160]; /* why a drive has no node (the first few), for --verbose */
    char **drives;    /* [n_drives] the drive folders as given */
    int n_drives;
};

/* Where the topology comes from; kind K3NUMA_THIS_SYSTEM (zero): this machine. */
struct k3_topology_source {
    enum k3numa_source kind;
    const char *arg; /* the synthetic string or XML file, NULL for this machine */
};
/* text as synthetic:STRING or xml:FILE that hwloc loads: 0, or -1 with err naming flag
 * and text.  out->arg points into text. */
int k3_topology_parse(const char *flag, const char *text, struct k3_topology_source *out,
                      struct k3_err *err);

/* drives: the packed drive folders (or NULL, 0); threads: 0 = one per core; topology:
 * NULL for this machine. */
int k3_placement_init(struct k3_placement *pl, const char *const *drives, int n_drives,
                      int threads, bool numa_off, const struct k3_topology_source *topology,
                      struct k3_err *err);
void k3_placement_print(FILE *f, const struct k3_placement *pl, uint64_t buffer_bytes);
/* The team of the drive folder `path` (as given to init; plan rule 5), whose node's I/O
 * thread reads it; 0 for a path not given. */
int k3_placement_drive_team(const struct k3_placement *pl, const char *path);
/* Pins the calling thread to the PUs of team's threads: the I/O thread of that node.
 * 0 (also when nothing is pinned: --numa off) or -errno. */
int k3_placement_pin_to_team(const struct k3_placement *pl, int team);
void k3_placement_free(struct k3_placement *pl);

#endif
