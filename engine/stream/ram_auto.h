/* What this process may use of the machine's memory, for `--ram auto` (the default) and
 * to refuse a `--ram` the machine cannot give.
 *
 * Owns: reading the memory cgroup's limit (v2 memory.max of the process's group and its
 * ancestors; v1 memory.limit_in_bytes and memory.stat's hierarchical_memory_limit), the
 * group found through /proc/self/cgroup, and /proc/meminfo's MemAvailable; the smaller
 * figure wins.  The margin auto leaves, and the rule when neither can be read.
 * Does not own: the budget's arithmetic (budget.h), which ranks share a box
 * (engine/cluster says; the caller divides).
 * Reading never fails: a file that is missing, unreadable or holds garbage is a source
 * that says nothing.
 */
#ifndef K3_RAM_AUTO_H
#define K3_RAM_AUTO_H

#include <stddef.h>
#include <stdint.h>

/* The files read; tests give fixtures. */
struct k3_ram_paths {
    const char *proc_cgroup;  /* /proc/self/cgroup */
    const char *v2_root;      /* /sys/fs/cgroup: cgroup v2's mount */
    const char *v1_root;      /* /sys/fs/cgroup/memory: cgroup v1's memory controller */
    const char *meminfo;      /* /proc/meminfo */
};
extern const struct k3_ram_paths k3_ram_paths_system;

enum k3_ram_source { K3_RAM_UNKNOWN, K3_RAM_CGROUP, K3_RAM_AVAILABLE };

struct k3_ram_machine {
    enum k3_ram_source source;
    uint64_t bytes;           /* what the source gives this process (0: unknown) */
    int box_ranks;            /* processes planning from it (mpirun ranks on this box) */
    char from[352];           /* "cgroup limit 6.00 GiB (memory.limit_in_bytes of /a/b)",
                               * "MemAvailable 22.50 GiB"; "" when unknown */
};

/* The machine's figure through paths, shared by box_ranks (at least 1) processes. */
void k3_ram_machine_read(struct k3_ram_machine *m, const struct k3_ram_paths *paths,
                         int box_ranks);

/* This process's share: bytes / box_ranks. */
uint64_t k3_ram_share(const struct k3_ram_machine *m);

/* What auto leaves of a share for what the budget does not count (ram_auto.c says). */
uint64_t k3_ram_margin(uint64_t share);

/* The share's description: "cgroup limit 6.00 GiB", with " / 2 ranks on this box". */
void k3_ram_describe(const struct k3_ram_machine *m, char *out, size_t len);

#endif
