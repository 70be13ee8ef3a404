/* Teams of a plan running at once (teams.h). */
#include "numa/teams.h"

#include <assert.h>
#include <errno.h>
#include <omp.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>

/* A counting barrier that flips a generation number; one cache line per team so that
 * teams on different nodes never share a line. */
struct barrier {
    _Alignas(64) atomic_uint arrived;
    atomic_uint generation;
    int n;
};

struct k3numa_teams {
    int n_teams;
    int n_threads;           /* the region's size: every team's threads */
    int *first, *size, *node; /* [n_teams] */
    int *thread_team;        /* [n_threads] */
    struct barrier *bar;     /* [n_teams] */
};

/* The calling thread's team inside k3numa_teams_run; bar NULL elsewhere. */
struct team_self {
    struct barrier *bar;
    int member, n;
};
static _Thread_local struct team_self self;
static _Thread_local bool alone; /* k3numa_team_alone */

int k3numa_teams_create(struct k3numa_teams **out, const struct k3numa_plan *p)
{
    *out = NULL;
    if (p && (p->n_teams < 1 || p->n_threads < 1))
        return -EINVAL;
    struct k3numa_teams *t = calloc(1, sizeof *t);
    if (!t)
        return -ENOMEM;
    t->n_teams = p ? p->n_teams : 1;
    t->n_threads = p ? p->n_threads : omp_get_max_threads();
    t->first = calloc((size_t)t->n_teams, sizeof *t->first);
    t->size = calloc((size_t)t->n_teams, sizeof *t->size);
    t->node = calloc((size_t)t->n_teams, sizeof *t->node);
    t->thread_team = calloc((size_t)t->n_threads, sizeof *t->thread_team);
    t->bar = aligned_alloc(64, sizeof *t->bar * (size_t)t->n_teams);
    if (!t->first || !t->size || !t->node || !t->thread_team || !t->bar) {
        k3numa_teams_destroy(t);
        return -ENOMEM;
    }
    for (int i = 0; i < t->n_teams; i++) {
        t->first[i] = p ? p->teams[i].first_thread : 0;
        t->size[i] = p ? p->teams[i].n_threads : t->n_threads;
        t->node[i] = p ? p->teams[i].node : -1;
        for (int k = 0; k < t->size[i]; k++)
            t->thread_team[t->first[i] + k] = i;
        atomic_init(&t->bar[i].arrived, 0);
        atomic_init(&t->bar[i].generation, 0);
        t->bar[i].n = t->size[i];
    }
    *out = t;
    return 0;
}

void k3numa_teams_destroy(struct k3numa_teams *t)
{
    if (!t)
        return;
    free(t->first);
    free(t->size);
    free(t->node);
    free(t->thread_team);
    free(t->bar);
    free(t);
}

int k3numa_teams_count(const struct k3numa_teams *t) { return t->n_teams; }

int k3numa_teams_node(const struct k3numa_teams *t, int team)
{
    return team >= 0 && team < t->n_teams ? t->node[team] : -1;
}

/* Spins briefly (a team's threads arrive within microseconds of each other when each
 * has its own core), then yields, so that more threads than cores still progress. */
static void barrier_wait(struct barrier *b)
{
    unsigned gen = atomic_load_explicit(&b->generation, memory_order_acquire);
    if (atomic_fetch_add_explicit(&b->arrived, 1, memory_order_acq_rel) + 1 == (unsigned)b->n) {
        atomic_store_explicit(&b->arrived, 0, memory_order_relaxed);
        atomic_fetch_add_explicit(&b->generation, 1, memory_order_release);
        return;
    }
    for (unsigned spins = 0; atomic_load_explicit(&b->generation, memory_order_acquire) == gen;
         spins++) {
        if (spins < 4096)
            __builtin_ia32_pause();
        else
            sched_yield();
    }
}

void k3numa_teams_run(struct k3numa_teams *t, void (*fn)(void *arg, int team), void *arg)
{
    if (!omp_in_parallel() && t->n_threads > 1) {
        bool short_of_threads = false;
#pragma omp parallel num_threads(t->n_threads)
        {
            if (omp_get_num_threads() != t->n_threads) {
                if (omp_get_thread_num() == 0)
                    short_of_threads = true;
            } else {
                int id = omp_get_thread_num(), team = t->thread_team[id];
                self.bar = &t->bar[team];
                self.member = id - t->first[team];
                self.n = t->size[team];
                fn(arg, team);
                self.bar = NULL;
            }
        }
        if (!short_of_threads)
            return;
    }
    struct team_self outer = self;
    struct barrier solo = {.n = 1}; /* each team as a team of one: the caller */
    for (int team = 0; team < t->n_teams; team++) {
        self = (struct team_self){.bar = &solo, .member = 0, .n = 1};
        fn(arg, team);
    }
    self = outer;
}

bool k3numa_team_self(int *member, int *n_members)
{
    if (!self.bar)
        return false;
    *member = alone ? 0 : self.member;
    *n_members = alone ? 1 : self.n;
    return true;
}

void k3numa_team_barrier(void)
{
    if (self.bar && self.n > 1 && !alone)
        barrier_wait(self.bar);
}

void k3numa_team_alone(bool on)
{
    assert(self.bar && alone != on); /* inside a team's work, switched on then off */
    alone = on;
}
