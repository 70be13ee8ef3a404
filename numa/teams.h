/* Running work on every team of a plan at once: one OpenMP region of all the planned
 * threads, each thread told its team and its place in it, and a barrier per team.
 *
 * Owns: that region, the team barriers, and the calling thread's team context, which the
 * row split of the kernels reads (engine/kernels/kernels_isa.h, k3_rows_parallel): a mat-vec
 * called inside a team's work splits its rows over that team's threads only and returns
 * once all of them are done.  So each team computes its own work (plan.h rule 6) on its
 * own cores while the other teams compute theirs.
 * Does not own: the plan (plan.h), the pinning (bind.h: the region has plan->n_threads
 * threads, so libgomp's pool keeps every thread on its planned PU), what is computed.
 * Knows nothing of models.
 */
#ifndef K3NUMA_TEAMS_H
#define K3NUMA_TEAMS_H

#include <stdbool.h>

#include "numa/plan.h"

struct k3numa_teams;

/* Teams of plan p, or with p NULL one team of omp_get_max_threads() threads.
 * -EINVAL (a plan without teams), -ENOMEM. */
int k3numa_teams_create(struct k3numa_teams **out, const struct k3numa_plan *p);
void k3numa_teams_destroy(struct k3numa_teams *t);

int k3numa_teams_count(const struct k3numa_teams *t);
/* Team i's NUMA node OS index, -1 when none (one unplanned team, --numa off). */
int k3numa_teams_node(const struct k3numa_teams *t, int team);

/* Calls fn(arg, team) on every thread of every team, concurrently, and returns when all
 * have returned.  Inside fn, k3numa_team_self tells a thread its place and
 * k3numa_team_barrier waits for its team; every thread of a team must make the same
 * sequence of barrier and kernel calls (a kernel called by one member alone waits for the
 * others forever).  When OpenMP gives fewer threads than planned,
 * or when called inside a parallel region, each team's work runs on the calling thread
 * alone, one team after the other (same results: nothing depends on the split). */
void k3numa_teams_run(struct k3numa_teams *t, void (*fn)(void *arg, int team), void *arg);

/* Inside k3numa_teams_run: true, with the caller's member number in its team and the
 * team's size.  Elsewhere false. */
bool k3numa_team_self(int *member, int *n_members);

/* Inside k3numa_teams_run: returns once every thread of the caller's team has called it
 * (the same number of times).  A no-op elsewhere, in a team of one, and alone. */
void k3numa_team_barrier(void);

/* Inside k3numa_teams_run, between k3numa_team_alone(true) and (false): the calling
 * thread works by itself, a team of one to k3numa_team_self (so the kernels it calls keep
 * every row) and to k3numa_team_barrier (which returns at once).  Its teammates' barriers
 * do not count it meanwhile: they go on with their own work, not waiting for it. */
void k3numa_team_alone(bool alone);

#endif
