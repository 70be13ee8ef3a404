/* The placement plan: which OpenMP thread runs on which PU, which node holds each drive's
 * read buffers, which team computes what.
 *
 * Owns: the rules below, as a pure function of (layout, the drives' nodes, thread count,
 * flags): no hwloc, no system calls, the same plan for the same inputs on any machine;
 * the split of a mat-vec's rows over threads and teams; the --verbose line per node.
 * Does not own: finding the layout or drive nodes (topology.h), applying the plan
 * (bind.h), what the threads compute.  Knows nothing of models.
 *
 * The rules:
 *  1. Threads.  threads <= 0 asks for one per usable core.  Any request is capped at the
 *     usable PUs: more would only time-share a PU.
 *  2. Teams.  One per NUMA node that has usable cores, and only nodes with cores get
 *     threads.  Threads are dealt one at a time to the node with the fewest threads per
 *     core so far (ties: the node earlier in the layout), skipping nodes whose PUs are
 *     all taken.  So with fewer threads than such nodes the first nodes get one each and
 *     the rest get no team; with at least as many, every node gets at least one, and
 *     the counts track the core counts (3- and 5-core nodes with 8 threads get 3 and 5).
 *  3. PUs of a team.  The node's cores are ordered to spread over last-level caches: the
 *     first core of each cache (caches in the order of their first core), then the
 *     second core of each, and so on.  The team's k-th thread gets the k-th entry of:
 *     the first PU of every core in that order, then every core's second PU (its SMT
 *     sibling), then the third...  So up to one thread per core nothing shares a core,
 *     and SMT siblings are used only once every core of the node has a thread.  Each
 *     thread is pinned to that one PU and never migrates.
 *  4. Thread numbers.  Teams take consecutive OpenMP thread numbers in layout node order:
 *     team 0 has threads 0..n0-1, team 1 the next n1, and so on.
 *  5. Drives.  A drive belongs to its node's team when that node is known and has a
 *     team; the k-th drive (in drive order) without one goes to team k mod n_teams.
 *     The engine reads a drive from its team's I/O thread and ring, on the team's
 *     node.  Records are striped over all drives, so record buffers are per record,
 *     not per drive: they go round-robin to the teams' nodes (rule 6) and take pieces
 *     from every drive.
 *  6. Experts.  An expert is computed by the team of the node its buffer is on.
 *  7. Rows.  A mat-vec's rows are cut into contiguous ranges: thread t of T gets
 *     [R·t/T, R·(t+1)/T) with the cut points rounded down to a multiple of granule, so
 *     a team's range is the union of its threads' (proportional to its size) and each
 *     row is computed by exactly one thread.  Which thread computes a row never changes
 *     its bytes (engine/kernels/kernels.h), so output is the same for any plan.
 *
 * K3NUMA_PLAN_OFF (--numa off) is one team of the requested threads over the whole
 * machine: node -1, no PU pinning, every drive's buffers with it, memory not bound.
 */
#ifndef K3NUMA_PLAN_H
#define K3NUMA_PLAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "numa/topology.h"

enum {
    K3NUMA_PLAN_OFF = 1u << 0, /* one unpinned team, nothing bound (--numa off) */
};

struct k3numa_team {
    int node;                  /* NUMA node OS index; -1 under K3NUMA_PLAN_OFF */
    int first_thread;          /* OpenMP threads first_thread .. first_thread + n_threads - 1 */
    int n_threads;
    int n_cores;               /* distinct cores its threads are pinned to */
};

struct k3numa_plan {
    bool bind;                 /* pin threads and bind memory (false under K3NUMA_PLAN_OFF) */
    int threads_requested;     /* as asked (<= 0: one per core) */
    int n_threads;             /* as planned (rule 1) */
    int *thread_cpu;           /* [n_threads] PU OS index thread t is pinned to; -1 unpinned */
    int *thread_team;          /* [n_threads] team of thread t */
    int n_teams;
    struct k3numa_team *teams; /* [n_teams] in layout node order */
    int n_nodes;               /* the layout's nodes (one pseudo-node -1 under OFF) */
    int *node_os;              /* [n_nodes] OS index of each node */
    int *node_team;            /* [n_nodes] its team, -1 when it has none */
    int *node_cores;           /* [n_nodes] its usable cores */
    int n_drives;
    int *drive_node;           /* [n_drives] the drive's own node as given (-1 unknown) */
    int *drive_team;           /* [n_drives] team whose node holds the drive's buffers */
    int *buffer_node;          /* [n_drives] node holding the drive's buffers (-1 under OFF) */
};

/* Makes the plan.  drive_nodes[i] is drive i's NUMA node OS index or -1 (unknown; a node
 * not in the layout counts as unknown); n_drives may be 0.  -EINVAL when the layout has
 * no usable core or n_drives < 0; -ENOMEM. */
int k3numa_plan_make(struct k3numa_plan **out, const struct k3numa_layout *l,
                     const int *drive_nodes, int n_drives, int threads, unsigned flags);
void k3numa_plan_free(struct k3numa_plan *p);

/* Asserts every rule above on p as made from layout l (assert(3): a broken rule aborts,
 * naming the condition), as engine/stream/buffer.c's buffer_check does for buffers.
 * k3numa_plan_make checks every plan it makes; tests call it on plans they alter. */
void k3numa_plan_check(const struct k3numa_plan *p, const struct k3numa_layout *l);

/* Rule 7: rows [*begin, *end) of a rows-row mat-vec for OpenMP thread `thread`, or for
 * team `team`.  granule >= 1 (e.g. 16 rows = one 64-byte line of f32 outputs per cut);
 * a thread or team may get an empty range when rows are few. */
void k3numa_plan_thread_rows(const struct k3numa_plan *p, int rows, int granule, int thread,
                             int *begin, int *end);
void k3numa_plan_team_rows(const struct k3numa_plan *p, int rows, int granule, int team,
                           int *begin, int *end);

/* The cut underneath: rows [*begin, *end) of part `part` of `parts` (e.g. thread j of a
 * team of n splitting one expert's rows: part j of n).  Ranges are contiguous, in order,
 * cover [0, rows) exactly, and start on multiples of granule. */
void k3numa_split_rows(int rows, int granule, int part, int parts, int *begin, int *end);

/* The --verbose line for plan node i (0 <= i < n_nodes), without a newline:
 *   "node 0: 64 threads, cpus 0-63, drives 0,1,3*, buffers 4096 MiB"
 *   "node 3: no threads, cpus -, drives -, buffers 0 MiB"
 *   "numa off: 8 threads, cpus not pinned, drives 0,1,2,3, buffers 512 MiB"
 * cpus lists the PUs the node's team is pinned to, compactly; drives lists the drives
 * whose buffers are on the node, '*' marking one placed there by rule 5's round robin
 * (its own node unknown or without a team).  buffer_bytes[i] (the caller's sizes; NULL:
 * all 0) is printed in MiB, rounded up.  Returns what snprintf would (the length wanted),
 * or -EINVAL for i out of range; buf is always terminated when len > 0. */
int k3numa_plan_format_node(const struct k3numa_plan *p, int i, const uint64_t *buffer_bytes,
                            char *buf, size_t len);

/* A list of ints (any order, duplicates allowed) as ascending ranges: "0-63,128-191";
 * "-" when n == 0.  Returns what snprintf would. */
int k3numa_format_list(const int *v, int n, char *buf, size_t len);

#endif
