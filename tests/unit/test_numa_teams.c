/* numa/teams: every team of a plan runs at once, each thread in its own team at its own
 * place; a team's barrier holds exactly its own threads; a mat-vec called inside a team's
 * work splits its rows over that team and gives the same bytes as one called outside;
 * the fallback (run inside a parallel region) computes the same; a member working alone
 * (k3numa_team_alone) is a team of one, computes the same bytes with every row its own,
 * and its team's barriers afterwards still hold all of it; and outside teams the
 * kernels cut rows over threads exactly as the plan's rule 7 says (the stream places
 * resident trunk rows by it). */
#include <omp.h>
#include <stdatomic.h>
#include <stdint.h>

#include "engine/kernels/kernels.h"
#include "engine/kernels/kernels_isa.h"
#include "numa/teams.h"
#include "tests/unit/test_numa.h"

#define MAX_T 16
#define ROUNDS 2000
#define ROWS 301
#define COLS 256

struct seen {
    int team[MAX_T], member[MAX_T], n_members[MAX_T];
    atomic_int arrived[MAX_T]; /* per team, this round */
    atomic_int early;          /* threads that passed a barrier before their team arrived */
};

static void who(void *arg, int team)
{
    struct seen *s = arg;
    int id = omp_get_thread_num(), member = -1, n = 0;
    CHECK(k3numa_team_self(&member, &n), "thread %d: no team inside the run", id);
    s->team[id] = team;
    s->member[id] = member;
    s->n_members[id] = n;
    /* Each round every member arrives, then waits; all n must have arrived by then. */
    for (int r = 0; r < ROUNDS; r++) {
        atomic_fetch_add(&s->arrived[team], 1);
        k3numa_team_barrier();
        if (atomic_load(&s->arrived[team]) < (r + 1) * n)
            atomic_fetch_add(&s->early, 1);
        k3numa_team_barrier();
    }
}

static void check_places(const char *topo, int threads)
{
    struct k3numa_topo *t = load_synthetic(topo);
    struct k3numa_plan *p;
    REQUIRE(k3numa_plan_make(&p, k3numa_topo_layout(t), NULL, 0, threads, 0) == 0, "plan");
    REQUIRE(p->n_threads <= MAX_T, "%d threads", p->n_threads);
    struct k3numa_teams *teams;
    REQUIRE(k3numa_teams_create(&teams, p) == 0, "teams");
    CHECK(k3numa_teams_count(teams) == p->n_teams, "%d teams, plan has %d",
          k3numa_teams_count(teams), p->n_teams);
    static struct seen s;
    memset(&s, 0, sizeof s);
    for (int i = 0; i < MAX_T; i++)
        s.team[i] = -1;
    k3numa_teams_run(teams, who, &s);
    for (int id = 0; id < p->n_threads; id++) {
        int want = p->thread_team[id];
        const struct k3numa_team *tm = &p->teams[want];
        CHECK(s.team[id] == want && s.member[id] == id - tm->first_thread &&
                  s.n_members[id] == tm->n_threads,
              "%s: thread %d ran as member %d of %d in team %d, planned %d of %d in team %d", topo,
              id, s.member[id], s.n_members[id], s.team[id], id - tm->first_thread, tm->n_threads,
              want);
    }
    for (int k = 0; k < p->n_teams; k++)
        CHECK(atomic_load(&s.arrived[k]) == ROUNDS * p->teams[k].n_threads,
              "%s: team %d: %d arrivals", topo, k, atomic_load(&s.arrived[k]));
    CHECK(atomic_load(&s.early) == 0, "%s: %d passed a barrier before their team", topo,
          atomic_load(&s.early));
    int member, n;
    CHECK(!k3numa_team_self(&member, &n), "a team context left outside the run");
    printf("%s, %d threads: %d teams, places and barriers as planned\n", topo, p->n_threads,
           p->n_teams);
    k3numa_teams_destroy(teams);
    k3numa_plan_free(p);
    k3numa_topo_destroy(t);
}

/* Each team multiplies its own matrix; out[team] must equal the product outside. */
struct matvec {
    const uint16_t *W[MAX_T];
    const float *x;
    float *out[MAX_T];
};

static void team_matvec(void *arg, int team)
{
    struct matvec *mv = arg;
    k3_matmul_bf16(mv->W[team], ROWS, COLS, mv->x, COLS, mv->out[team], ROWS, 1);
}

/* Every member alone multiplies its team's matrix into its own row of alone_out, then the
 * team together into mv->out. */
static float alone_out[MAX_T][ROWS];
static atomic_int alone_wrong_self;

static void alone_then_team(void *arg, int team)
{
    struct matvec *mv = arg;
    int id = omp_get_thread_num(), member = -1, n = 0;
    k3numa_team_alone(true);
    if (!k3numa_team_self(&member, &n) || member != 0 || n != 1)
        atomic_fetch_add(&alone_wrong_self, 1);
    k3numa_team_barrier(); /* returns at once: no teammate counts on it */
    k3_matmul_bf16(mv->W[team], ROWS, COLS, mv->x, COLS, alone_out[id], ROWS, 1);
    k3numa_team_alone(false);
    k3_matmul_bf16(mv->W[team], ROWS, COLS, mv->x, COLS, mv->out[team], ROWS, 1);
}

static void run_in_parallel(struct k3numa_teams *teams, struct matvec *mv)
{
#pragma omp parallel num_threads(2)
    {
#pragma omp single
        k3numa_teams_run(teams, team_matvec, mv);
    }
}

static void check_matvec(const char *topo, int threads)
{
    struct k3numa_topo *t = load_synthetic(topo);
    struct k3numa_plan *p;
    REQUIRE(k3numa_plan_make(&p, k3numa_topo_layout(t), NULL, 0, threads, 0) == 0, "plan");
    struct k3numa_teams *teams;
    REQUIRE(k3numa_teams_create(&teams, p) == 0, "teams");
    static uint16_t W[MAX_T][ROWS * COLS];
    static float x[COLS], want[MAX_T][ROWS], got[MAX_T][ROWS];
    uint32_t seed = 12345;
    for (int i = 0; i < COLS; i++) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = (float)(int)(seed >> 20) / 1024.0f - 2.0f;
    }
    struct matvec mv = {.x = x};
    for (int k = 0; k < p->n_teams; k++) {
        for (int i = 0; i < ROWS * COLS; i++) {
            seed = seed * 1664525u + 1013904223u;
            W[k][i] = k3_f32_to_bf16((float)(int)(seed >> 16) / 16384.0f - 2.0f);
        }
        mv.W[k] = W[k];
        mv.out[k] = got[k];
        k3_matmul_bf16(W[k], ROWS, COLS, x, COLS, want[k], ROWS, 1);
    }
    k3numa_teams_run(teams, team_matvec, &mv);
    for (int k = 0; k < p->n_teams; k++)
        CHECK(!memcmp(want[k], got[k], sizeof want[k]), "%s: team %d's mat-vec differs", topo, k);
    memset(got, 0, sizeof got);
    run_in_parallel(teams, &mv);
    for (int k = 0; k < p->n_teams; k++)
        CHECK(!memcmp(want[k], got[k], sizeof want[k]),
              "%s: team %d's mat-vec differs when run inside a parallel region", topo, k);
    memset(got, 0, sizeof got);
    k3numa_teams_run(teams, alone_then_team, &mv);
    CHECK(atomic_load(&alone_wrong_self) == 0, "%s: %d members alone saw a team of more than one",
          topo, atomic_load(&alone_wrong_self));
    for (int id = 0; id < p->n_threads; id++)
        CHECK(!memcmp(want[p->thread_team[id]], alone_out[id], sizeof alone_out[id]),
              "%s: thread %d's mat-vec alone differs", topo, id);
    for (int k = 0; k < p->n_teams; k++)
        CHECK(!memcmp(want[k], got[k], sizeof want[k]),
              "%s: team %d's mat-vec after its members worked alone differs", topo, k);
    printf("%s: %d teams' mat-vecs identical to one outside, alone or together\n", topo,
           p->n_teams);
    k3numa_teams_destroy(teams);
    k3numa_plan_free(p);
    k3numa_topo_destroy(t);
}

static int cut_begin[MAX_T], cut_rows[MAX_T];

static void record_cut(void *arg, int r0, int nrows)
{
    (void)arg;
    cut_begin[omp_get_thread_num()] = r0;
    cut_rows[omp_get_thread_num()] = nrows;
}

static void check_rule7(const char *topo, int threads, int rows)
{
    struct k3numa_topo *t = load_synthetic(topo);
    struct k3numa_plan *p;
    REQUIRE(k3numa_plan_make(&p, k3numa_topo_layout(t), NULL, 0, threads, 0) == 0, "plan");
    omp_set_num_threads(p->n_threads);
    for (int i = 0; i < MAX_T; i++)
        cut_begin[i] = cut_rows[i] = -1;
    k3_rows_parallel(rows, 1, 1L << 30, NULL, record_cut);
    for (int id = 0; id < p->n_threads; id++) {
        int r0, r1;
        k3numa_plan_thread_rows(p, rows, 1, id, &r0, &r1);
        if (r1 > r0)
            CHECK(cut_begin[id] == r0 && cut_rows[id] == r1 - r0,
                  "%s, %d rows: thread %d computed [%d, +%d), rule 7 says [%d, %d)", topo, rows,
                  id, cut_begin[id], cut_rows[id], r0, r1);
        else
            CHECK(cut_rows[id] == -1, "%s: thread %d got rows from an empty range", topo, id);
    }
    k3numa_plan_free(p);
    k3numa_topo_destroy(t);
}

int main(void)
{
    numa_test_env();
    omp_set_dynamic(0);
    /* More threads than this machine's cores: the barrier must yield, not just spin. */
    check_places("pack:2 [numa] core:2 pu:1", 0);
    check_places("pack:2 numa:2 core:1 pu:2", 0);
    check_places("[numa] core:3 pu:1", 0);
    check_places("pack:2 [numa] core:3 pu:1", 5);
    check_matvec("pack:2 [numa] core:2 pu:1", 0);
    check_matvec("pack:2 [numa] core:3 pu:1", 5);
    check_rule7("pack:2 [numa] core:3 pu:1", 5, 7168);
    check_rule7("pack:2 [numa] core:3 pu:1", 5, 3);
    check_rule7("pack:2 numa:2 core:1 pu:2", 0, 129280);
    printf("kernels cut rows as rule 7\n");

    struct k3numa_teams *one;
    REQUIRE(k3numa_teams_create(&one, NULL) == 0, "default teams");
    CHECK(k3numa_teams_count(one) == 1 && k3numa_teams_node(one, 0) == -1,
          "no plan: %d teams, node %d", k3numa_teams_count(one), k3numa_teams_node(one, 0));
    k3numa_teams_destroy(one);
    return check_result();
}
