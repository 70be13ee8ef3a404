/* numa/bind with libgomp (../shared/io-notes.md §6, approach (b)): each OpenMP thread
 * pins itself once and libgomp reuses the pool, so thread t is the same OS thread,
 * still on its PU, in every later region of the same size; after a smaller region the
 * threads libgomp starts anew are re-pinned by k3numa_omp_enter; OMP_PROC_BIND set
 * makes k3numa_omp_bind refuse (-EBUSY). */
#include <errno.h>
#include <omp.h>
#include <sched.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "numa/bind.h"
#include "tests/unit/test_numa.h"

#define MAX_T 64

static int only_cpu(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) != 0 || CPU_COUNT(&set) != 1)
        return -1;
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &set))
            return c;
    return -1;
}

/* One region of the plan's size: each thread's OS thread id and sole PU (-1: several). */
static void observe(int n, long *tid, int *cpu)
{
#pragma omp parallel num_threads(n)
    {
        int id = omp_get_thread_num();
        tid[id] = (long)syscall(SYS_gettid);
        cpu[id] = only_cpu();
    }
}

/* Run by the test itself with OMP_PROC_BIND=true in its environment. */
static int proc_bind_child(void)
{
    struct k3numa_topo *t = load_synthetic("pack:1 [numa] core:2 pu:1");
    struct k3numa_plan *p;
    REQUIRE(k3numa_plan_make(&p, k3numa_topo_layout(t), NULL, 0, 0, 0) == 0, "plan");
    int rc = k3numa_omp_bind(t, p);
    CHECK(rc == -EBUSY, "with OMP_PROC_BIND=true k3numa_omp_bind gave %d", rc);
    k3numa_plan_free(p);
    k3numa_topo_destroy(t);
    return check_result();
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--proc-bind-child") == 0)
        return proc_bind_child();
    numa_test_env();
    if (omp_get_proc_bind() != omp_proc_bind_false)
        SKIP("OMP_PROC_BIND or OMP_PLACES is set in the environment");
    struct k3numa_topo *t;
    REQUIRE(k3numa_topo_load(&t, K3NUMA_THIS_SYSTEM, NULL) == 0, "load this system");
    const struct k3numa_layout *real = k3numa_topo_layout(t);
    if (real->n_pus < 2)
        SKIP("one usable PU: nothing to tell threads apart");

    /* A layout over this machine's usable PUs, one node, one cache, in which thread 0
     * (this thread) must move to the last PU and every other thread runs on one of the
     * others, cycling: at least 4 threads even on 2 PUs, so that a smaller region of
     * 2 or more threads can be tried (a 1-thread region never touches libgomp's pool). */
    int n = real->n_pus < 4 ? 4 : real->n_pus < MAX_T ? real->n_pus : MAX_T;
    struct k3numa_core cores[MAX_T];
    int pus[MAX_T];
    for (int i = 0; i < n; i++) {
        pus[i] = i == 0 ? real->pus[real->n_pus - 1] : real->pus[(i - 1) % (real->n_pus - 1)];
        cores[i] = (struct k3numa_core){.first_pu = i, .n_pus = 1, .llc = 0};
    }
    struct k3numa_node node = {.os_index = real->nodes[0].os_index, .package = 0,
                               .first_core = 0, .n_cores = n, .n_pus = n};
    struct k3numa_layout l = {.n_packages = 1, .n_nodes = 1, .nodes = &node,
                              .n_cores = n, .cores = cores, .n_pus = n, .pus = pus};
    struct k3numa_plan *p;
    REQUIRE(k3numa_plan_make(&p, &l, NULL, 0, 0, 0) == 0, "plan");
    REQUIRE(p->n_threads == n && p->thread_cpu[0] == pus[0], "plan of %d threads", n);

    int rc = k3numa_omp_bind(t, p);
    REQUIRE(rc == 0, "k3numa_omp_bind: %d", rc);
    CHECK(omp_get_max_threads() == n && !omp_get_dynamic(), "default team size %d, dynamic %d",
          omp_get_max_threads(), omp_get_dynamic());
    long tid0[MAX_T], tid[MAX_T];
    int cpu[MAX_T];
    observe(n, tid0, cpu);
    for (int i = 0; i < n; i++)
        CHECK(cpu[i] == p->thread_cpu[i], "after binding thread %d on %d, planned %d", i, cpu[i],
              p->thread_cpu[i]);

    /* The pool is reused: same OS threads, still pinned, region after region, including
     * regions that do not name a size (k3numa_omp_bind set the default). */
    for (int r = 0; r < 50; r++) {
        if (r % 2) {
#pragma omp parallel
            {
                int id = omp_get_thread_num();
                tid[id] = (long)syscall(SYS_gettid);
                cpu[id] = only_cpu();
            }
        } else {
            observe(n, tid, cpu);
        }
        for (int i = 0; i < n; i++)
            CHECK(tid[i] == tid0[i] && cpu[i] == p->thread_cpu[i],
                  "region %d thread %d: tid %ld (first %ld) on %d, planned %d", r, i, tid[i],
                  tid0[i], cpu[i], p->thread_cpu[i]);
    }
    CHECK(k3numa_omp_check(t, p) == 0, "k3numa_omp_check after reuse");

    /* A smaller region, then the full size again. */
    observe(n / 2, tid, cpu);
    observe(n, tid, cpu);
    int renewed = 0, misplaced = 0;
    for (int i = 0; i < n; i++) {
        renewed += tid[i] != tid0[i];
        misplaced += cpu[i] != p->thread_cpu[i];
    }
    fprintf(stderr, "after a %d-thread region: %d of %d threads are new OS threads, %d not on "
                    "their PU (libgomp ends the extra pool threads)\n",
            n / 2, renewed, n, misplaced);
    CHECK(misplaced <= renewed, "a reused thread lost its PU");
    int seen = k3numa_omp_check(t, p);
    CHECK(seen == misplaced, "k3numa_omp_check counts %d misplaced threads, %d are", seen,
          misplaced);
    CHECK(tid[0] == tid0[0], "thread 0 is always the caller");

    /* k3numa_omp_enter at the top of a region re-pins what is new and leaves the rest. */
    int errs = 0;
#pragma omp parallel num_threads(n) reduction(+ : errs)
    errs += k3numa_omp_enter(t, p) != 0;
    CHECK(errs == 0, "k3numa_omp_enter failed in %d threads", errs);
    observe(n, tid0, cpu);
    for (int i = 0; i < n; i++)
        CHECK(cpu[i] == p->thread_cpu[i], "after enter thread %d on %d, planned %d", i, cpu[i],
              p->thread_cpu[i]);
    for (int r = 0; r < 20; r++) {
        observe(n, tid, cpu);
        for (int i = 0; i < n; i++)
            CHECK(tid[i] == tid0[i] && cpu[i] == p->thread_cpu[i],
                  "region %d thread %d: tid %ld (first %ld) on %d", r, i, tid[i], tid0[i],
                  cpu[i]);
    }
    CHECK(k3numa_omp_check(t, p) == 0, "k3numa_omp_check after enter");
    k3numa_plan_free(p);

    /* --numa off: only the team size is set; nothing is pinned. */
    k3numa_bind_thread(t, NULL, 0);
    REQUIRE(k3numa_plan_make(&p, real, NULL, 0, 2, K3NUMA_PLAN_OFF) == 0, "off plan");
    CHECK(k3numa_omp_bind(t, p) == 0 && omp_get_max_threads() == 2, "off: team size %d",
          omp_get_max_threads());
    CHECK(only_cpu() == -1, "off: the caller is not pinned");
    k3numa_plan_free(p);
    k3numa_topo_destroy(t);

    /* OMP_PROC_BIND=true: libgomp would place the threads itself; refused. */
    pid_t pid = fork();
    REQUIRE(pid >= 0, "fork");
    if (pid == 0) {
        setenv("OMP_PROC_BIND", "true", 1);
        execl("/proc/self/exe", argv[0], "--proc-bind-child", (char *)NULL);
        _exit(127);
    }
    int status;
    REQUIRE(waitpid(pid, &status, 0) == pid, "waitpid");
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "OMP_PROC_BIND child: status %d",
          status);
    return check_result();
}
