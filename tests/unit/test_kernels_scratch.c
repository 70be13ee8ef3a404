/* The MXFP4 kernels' scratch (mxfp4.h): a call stays inside the bytes the caller planned,
 * callers at once each get their own slot (also inside a team's work, as the engine calls
 * them), and a call the scratch was not bound for stops at an assert.  That the kernels
 * need no memory of their own: test_kernels_q8.c. */
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "numa/teams.h"
#include "tests/unit/test_kernels.h"

/* An expert's w1, w3 (rows × cols) and T tokens of input. */
struct expert {
    int rows, cols, T;
    uint8_t *p1, *s1, *p3, *s3;
    float *X;
};

static struct expert expert_new(int rows, int cols, int T, uint64_t seed)
{
    struct k3_rng r;
    k3_rng_seed(&r, seed);
    size_t np = (size_t)rows * cols / 2, ns = (size_t)rows * cols / 32;
    struct expert e = {rows, cols, T, xmalloc(np), xmalloc(ns), xmalloc(np), xmalloc(ns),
                       xmalloc(sizeof(float) * (size_t)T * cols)};
    fill_mxfp4(e.p1, np, e.s1, ns, &r, 0);
    fill_mxfp4(e.p3, np, e.s3, ns, &r, 0);
    fill_x(e.X, (size_t)T * cols, &r, 0);
    return e;
}

static void expert_free(struct expert *e)
{
    free(e->p1), free(e->s1), free(e->p3), free(e->s3), free(e->X);
}

/* The fused w1 + w3 + SiTU by the scalar references, int8 activations or f32. */
static void expert_want(const struct expert *e, bool q8, float *want)
{
    size_t n = (size_t)e->T * e->rows;
    float *u = xmalloc(sizeof *u * n);
    if (q8) {
        void *mem = xmalloc(k3_q8_bytes(e->cols, e->T));
        struct k3_q8 xq;
        k3_q8_quantize(&xq, mem, e->X, e->cols, e->cols, e->T);
        k3_rows_mxfp4_q8_scalar(e->p1, e->s1, e->rows, &xq, want, e->rows);
        k3_rows_mxfp4_q8_scalar(e->p3, e->s3, e->rows, &xq, u, e->rows);
        free(mem);
    } else {
        reference_mxfp4(e->p1, e->s1, e->rows, e->cols, e->X, e->cols, want, e->rows, e->T);
        reference_mxfp4(e->p3, e->s3, e->rows, e->cols, e->X, e->cols, u, e->rows, e->T);
    }
    for (size_t i = 0; i < n; i++)
        want[i] = k3_situ(want[i], u[i], 4.0f, 25.0f);
    free(u);
}

static void expert_run(const struct expert *e, float *Y)
{
    k3_matmul_mxfp4_situ(e->p1, e->s1, e->p3, e->s3, e->rows, e->cols, e->X, e->cols, Y, e->rows,
                         e->T, 4.0f, 25.0f);
}

/* A call of the largest shape bound, either activation type, writes inside the planned
 * bytes and nowhere past them. */
static void test_call_fits(void)
{
    enum { T = 7, COLS = 2080, ROWS = 9, GUARD = 4096 };
    size_t bytes = k3_mxfp4_scratch_bytes(T, COLS, 1);
    unsigned char *mem = aligned_alloc(64, (bytes + GUARD + 63) / 64 * 64);
    REQUIRE(mem, "scratch");
    memset(mem, 0xA5, bytes + GUARD);
    k3_mxfp4_scratch_bind(mem, T, COLS, 1);
    struct expert e = expert_new(ROWS, COLS, T, 3);
    float got[T * ROWS];
    k3_matmul_mxfp4(e.p1, e.s1, ROWS, COLS, e.X, COLS, got, ROWS, T);
    k3_matmul_mxfp4_q8(e.p1, e.s1, ROWS, COLS, e.X, COLS, got, ROWS, T);
    size_t used = 0, past = 0;
    for (size_t i = 0; i < bytes; i++)
        used += mem[i] != 0xA5;
    for (size_t i = bytes; i < bytes + GUARD; i++)
        past += mem[i] != 0xA5;
    CHECK(used > (size_t)T * COLS, "the calls used the bound scratch (%zu bytes changed)", used);
    CHECK(past == 0, "%zu bytes written past the %zu planned", past, bytes);
    CHECK(k3_mxfp4_scratch_bytes(T, COLS, 3) == 3 * bytes, "a slot per caller");
    k3_mxfp4_scratch_unbind(mem);
    expert_free(&e);
    free(mem);
}

/* Two threads in the kernels at once, each with its own input: the bytes of one alone. */
static void test_concurrent_callers(void)
{
    struct expert e[2] = {expert_new(300, 1024, 3, 5), expert_new(300, 1024, 3, 6)};
    size_t n = 3 * 300;
    float *want[2] = {xmalloc(sizeof(float) * n), xmalloc(sizeof(float) * n)};
    float *got[2] = {xmalloc(sizeof(float) * n), xmalloc(sizeof(float) * n)};
    expert_want(&e[0], false, want[0]);
    expert_want(&e[1], false, want[1]);
    bind_mxfp4_scratch(3, 1024, 2);
    int wrong = 0;
#pragma omp parallel num_threads(2) reduction(+ : wrong)
    for (int rep = 0; rep < 200; rep++) {
        int i = omp_get_thread_num() % 2;
        expert_run(&e[i], got[i]);
        wrong += first_diff(want[i], got[i], n) >= 0;
    }
    CHECK(wrong == 0, "%d of 400 concurrent calls differ from the reference", wrong);
    for (int i = 0; i < 2; i++)
        expert_free(&e[i]), free(want[i]), free(got[i]);
}

/* As the engine calls them: every member of a team calls, the rows split over the team. */
struct team_job {
    const struct expert *e;
    float *Y;
    int calls;
};

static void team_work(void *arg, int team)
{
    struct team_job *j = arg;
    for (int c = 0; c < j->calls; c++)
        expert_run(j->e, j->Y);
}

static void test_team_callers(void)
{
    struct k3numa_teams *teams;
    REQUIRE(k3numa_teams_create(&teams, NULL) == 0, "one team");
    struct expert e = expert_new(256, 1024, 4, 8);
    size_t n = 4 * 256;
    float *want = xmalloc(sizeof *want * n), *got = xmalloc(sizeof *got * n);
    expert_want(&e, false, want);
    bind_mxfp4_scratch(4, 1024, omp_get_max_threads());
    struct team_job j = {&e, got, 20};
    k3numa_teams_run(teams, team_work, &j);
    CHECK(first_diff(want, got, n) < 0, "inside a team of %d: the reference's bytes",
          omp_get_max_threads());
    expert_free(&e), free(want), free(got);
    k3numa_teams_destroy(teams);
}

/* A call of T tokens of cols inputs in a child process, with the scratch unbound first
 * when unbind: true when it stopped at an assert (SIGABRT). */
static bool aborts(int T, int cols, const void *unbind)
{
    fflush(NULL);
    pid_t pid = fork();
    REQUIRE(pid >= 0, "fork");
    if (pid == 0) {
        if (!freopen("/dev/null", "w", stderr)) /* the assert's message, expected */
            _exit(2);
        struct expert e = expert_new(8, cols, T, 9);
        float *Y = xmalloc(sizeof *Y * 8 * T);
        k3_mxfp4_scratch_unbind(unbind);
        k3_matmul_mxfp4(e.p1, e.s1, 8, cols, e.X, cols, Y, 8, T);
        _exit(0);
    }
    int status;
    REQUIRE(waitpid(pid, &status, 0) == pid, "waitpid");
    return WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT;
}

static void test_unplanned_calls_stop(void)
{
    void *mem = bind_mxfp4_scratch(4, 1024, 1);
    CHECK(!aborts(4, 1024, NULL), "the bound shape runs");
    CHECK(aborts(5, 1024, NULL), "one token more than bound stops at an assert");
    CHECK(aborts(4, 1056, NULL), "one group of inputs more than bound stops at an assert");
    CHECK(aborts(1, 32, mem), "a call with nothing bound stops at an assert");
}

int main(void)
{
    test_call_fits();
    test_concurrent_callers();
    test_team_callers();
    test_unplanned_calls_stop();
    return check_result();
}
