/* The machine as placement sees it: packages, NUMA nodes, their cores and PUs, and the
 * NUMA node each drive's block device attaches to.
 *
 * Owns: loading an hwloc topology (this machine, a synthetic string or an XML file) with
 * the I/O filter set before the load so that block devices appear; the layout, a plain
 * snapshot of nodes, cores and PUs that the plan (plan.h) is computed from; mapping a
 * drive folder to its whole-disk block device and that device to a NUMA node.
 * Does not own: deciding anything (plan.h), binding threads or memory (bind.h).  Knows
 * nothing of models.
 *
 * Invariants of the layout: every core belongs to exactly one node, the first NUMA node
 * (hwloc logical order) whose cpuset holds it; cores are grouped by node, nodes in hwloc
 * logical order, cores and the PUs of a core in logical order.  Only usable PUs appear:
 * on this machine, those of the affinity the process had when the topology was loaded
 * (taskset, numactl --physcpubind, a cgroup cpuset); elsewhere, all.  A node without
 * usable cores (memory-only, or outside the affinity) stays in the layout with none.
 *
 * hwloc's own environment variables win over the source asked for: HWLOC_XMLFILE or
 * HWLOC_SYNTHETIC make every load read that topology, and binding on anything but this
 * machine is a silent no-op (HWLOC_THISSYSTEM=1 makes it real).  k3numa_topo_is_real
 * says which case holds.
 * Functions return 0 (or a count) and -errno on failure; none prints.
 */
#ifndef K3NUMA_TOPOLOGY_H
#define K3NUMA_TOPOLOGY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum k3numa_source {
    K3NUMA_THIS_SYSTEM, /* arg unused (NULL) */
    K3NUMA_SYNTHETIC,   /* arg: an hwloc synthetic string, e.g. "pack:2 [numa] core:4 pu:2" */
    K3NUMA_XML,         /* arg: path of an hwloc XML export (lstopo --of xml) */
};

struct k3numa_core {
    int first_pu, n_pus;     /* its PUs: pus[first_pu .. first_pu + n_pus) */
    int llc;                 /* id of its outermost cache (equal ids share it), -1 none */
};

struct k3numa_node {
    int os_index;            /* the NUMA node number Linux and numactl use */
    int package;             /* logical index of its package, -1 unknown */
    uint64_t memory_bytes;   /* local memory, 0 unknown */
    int first_core, n_cores; /* its cores: cores[first_core .. first_core + n_cores) */
    int n_pus;               /* PUs of those cores */
};

struct k3numa_layout {
    int n_packages;
    int n_nodes;
    struct k3numa_node *nodes;  /* [n_nodes] */
    int n_cores;
    struct k3numa_core *cores;  /* [n_cores], grouped by node */
    int n_pus;
    int *pus;                   /* [n_pus] PU OS indexes (what sched_setaffinity takes) */
};

struct k3numa_topo;
struct hwloc_topology;

/* Loads a topology.  -EINVAL for a synthetic string or XML file hwloc refuses (or a NULL
 * arg), -ENOMEM, -ENODEV when it has no PU. */
int k3numa_topo_load(struct k3numa_topo **out, enum k3numa_source src, const char *arg);
void k3numa_topo_destroy(struct k3numa_topo *t);

/* The layout, valid until k3numa_topo_destroy. */
const struct k3numa_layout *k3numa_topo_layout(const struct k3numa_topo *t);

/* True when the topology is this machine's, so binding really happens. */
bool k3numa_topo_is_real(const struct k3numa_topo *t);

/* The hwloc topology underneath, for bind.c and tests (include <hwloc.h> to use it). */
struct hwloc_topology *k3numa_topo_hwloc(const struct k3numa_topo *t);

/* Index into layout->nodes of the node with this OS index, or -1. */
int k3numa_layout_node_index(const struct k3numa_layout *l, int os_index);

/* Where a block device attaches.  dev is a device name ("nvme0n1") or "MAJOR:MINOR"
 * ("259:0"), matched against the topology's block OS devices (name or LinuxDeviceID).
 * *node receives the NUMA node OS index, or -1 ("no locality").  The rules:
 *  - a device in the topology has the node of its nearest non-I/O ancestor, when that
 *    ancestor covers exactly one node (not, e.g., a whole package under NPS4);
 *  - a device hwloc does not list, made of devices it does, has their node when they all
 *    share one: an NVMe multipath head (nvme0n1 under /sys/devices/virtual/nvme-subsystem,
 *    the default with nvme_core.multipath=Y; hwloc skips virtual devices and lists its
 *    per-controller paths nvme0c0n1... instead), and a dm or md device (its slaves/, a
 *    partition counting as its disk).  Read from sysfs, so only on this machine's
 *    topology or one given a sysfs root with k3numa_topo_set_sysfs;
 *  - anything else has none: loop devices, stacks over several nodes or over devices
 *    without locality, any topology without I/O objects.
 * why (may be NULL) receives a short reason when -1: "nvme4n1 attaches to nodes 4-7",
 * "loop0 not in the topology", "md0 spans nodes 1 and 3".  Tests use it to say "drive i
 * is nvme2n1" against XML fixtures.  Returns 0. */
int k3numa_topo_device_node(const struct k3numa_topo *t, const char *dev, int *node,
                            char *why, size_t why_len);

/* Tests: read sysfs under root (a fake tree: dev/block/M:m, class/block/NAME/...) instead
 * of /sys, for this topology's drive lookups; NULL restores /sys.  0 or -ENOMEM. */
int k3numa_topo_set_sysfs(struct k3numa_topo *t, const char *root);

/* The whole-disk block device holding path: stat → st_dev (st_rdev when path is itself
 * a block device) → /sys/dev/block/M:m, a partition mapped to its parent disk.  name
 * receives e.g. "nvme0n1" and *major, *minor its numbers.  -ENODEV when path is on no
 * block device (tmpfs, overlay, NFS: st_dev has no /sys/dev/block entry); stat's -errno. */
int k3numa_whole_disk(const char *path, char *name, size_t name_len, unsigned *major,
                      unsigned *minor);

/* Where a drive folder's device attaches: k3numa_whole_disk, then
 * k3numa_topo_device_node.  *node is -1 when there is no locality, with the reason in why
 * ("not on a block device", "loop3 not in the topology", ...).  Returns 0, or the -errno
 * of stat (the path does not exist or cannot be reached). */
int k3numa_topo_path_node(const struct k3numa_topo *t, const char *path, int *node, char *why,
                          size_t why_len);

#endif
