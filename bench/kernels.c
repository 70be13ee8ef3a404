/* kernels: GB/s of weights the mat-vec kernels consume, per variant and thread count,
 * beside this machine's memory bandwidth measured in the same run (a STREAM-style copy,
 * and a read-only sweep, which is what a mat-vec does to its weights).
 *
 * Weights live in RAM: a matrix smaller than --arena-mib is copied across an arena of
 * that size and the calls cycle through the copies, so every call reads its weights from
 * memory, not from the L3 (kernels.sh prints its size).  Each measurement is one pass over the arena (or one
 * call on a bigger matrix), repeated --reps times with the variants and thread counts
 * interleaved; medians and the min..max spread are reported.  The calls are made as the
 * engine makes them (run_pass).  Beside each MXFP4 case, in turn with it, the same kernel
 * on a few rows held in L1 ("mxfp4 (L1)"): its compute ceiling, the rate with no memory
 * traffic at all.  Shapes: k3-bench (hidden 2048, latent 1024,
 * moe_intermediate 3072, vocab 163840) with its per-token counts, so the per-token
 * compute of one decode token is the sum over its matrices; full K3 (hidden 7168, latent
 * 3584, the 12288-wide KDA projections, lm_head 163840 × 7168).
 *
 * With many tokens per call (a prompt's pass) the products stop waiting on memory, so
 * the set "gflops" reports GFLOP/s (2 flops per weight per token) of the MXFP4 and bf16
 * mat-muls at full K3's expert shapes for --gflops-tokens tokens, against the FMA peak of
 * the same cores measured in turn with them (independent FMA chains in zmm registers, or
 * ymm without AVX-512, on every thread).
 *
 * The set "q8_0" measures the trunk held as Q8_0 (pack --trunk-type q8_0): k3-bench's
 * trunk matrices that Q8_0 takes (engine/model/trunk_type.h) with their per-token counts,
 * whose GB/s per core is the planner's q8_0 rate, and the Q8_0 mat-mul's GFLOP/s at full
 * K3's trunk shapes for --gflops-tokens tokens (with --sets bench,q8_0 the calibration
 * file carries both).
 * Built and driven by bench/kernels.sh.  Usage: kernels [--option value]... (--help). */
#include <errno.h>
#include <math.h>
#include <omp.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <immintrin.h>
#include <jansson.h>

#include "engine/base/clock.h"
#include "engine/base/options.h"
#include "engine/kernels/kernels.h"
#include "engine/kernels/kernels_isa.h"
#include "engine/kernels/mxfp4.h"
#include "engine/kernels/q8_0.h"
#include "numa/teams.h"

/* ---- options ------------------------------------------------------------------------ */

/* The variants in the order they run: the first that runs is the best, the one the goals
 * and the calibration report. */
static const struct k3_opt_choice variant_choices[] = {
    {"all", 15}, {"avx512vnni", 1}, {"avx512", 2}, {"avx2", 4}, {"scalar", 8}, {NULL, 0}};
static const struct k3_opt_choice set_choices[] = {
    {"bench", 1}, {"k3", 2}, {"gflops", 4}, {"q8_0", 8}, {NULL, 0}};

static struct opts {
    unsigned variants, sets; /* bits of variant_choices, set_choices */
    struct k3_opt_ints threads, tokens, gflops_tokens;
    const char *only, *csv, *json; /* NULL: all cases, no CSV, no calibration */
    int reps, arena_mib, copy_mib, lm_head, thp, teams;
    uint64_t seed;
} o = {.variants = 15, .sets = 7, .threads = {2, {1, 2}}, .tokens = {1, {1}},
       .gflops_tokens = {5, {1, 4, 16, 64, 256}}, .reps = 5,
       .arena_mib = 512, .copy_mib = 256, .lm_head = 1, .thp = 1, .teams = 1, .seed = 1};

#define MAX_REPS 64

static const struct k3_opt opt_table[] = {
    {.name = "variants", .type = K3_OPT_SET, .dst = &o.variants, .choices = variant_choices,
     .help = "comma list of kernel variants; all = those this CPU has"},
    {.name = "threads", .type = K3_OPT_INTS, .dst = &o.threads, .arg = "N,..",
     .help = "comma list of OpenMP thread counts", .min = 1, .max = 4096},
    {.name = "sets", .type = K3_OPT_SET, .dst = &o.sets, .choices = set_choices,
     .help = "shape sets: bench (k3-bench), k3 (full K3), gflops (GFLOP/s against the FMA "
             "peak, full K3 expert shapes), q8_0 (the trunk as Q8_0: k3-bench's decode mix and "
             "GFLOP/s at full K3's trunk shapes)"},
    {.name = "tokens", .type = K3_OPT_INTS, .dst = &o.tokens, .arg = "T,..",
     .help = "comma list of tokens per call (T); 1 = decode", .min = 1, .max = 1024},
    {.name = "gflops-tokens", .type = K3_OPT_INTS, .dst = &o.gflops_tokens, .arg = "T,..",
     .help = "set gflops: comma list of tokens per call", .min = 1, .max = 1024},
    {.name = "only", .type = K3_OPT_STRING, .dst = &o.only, .arg = "TEXT",
     .help = "only cases whose name contains this text", .def = "all"},
    {.name = "reps", .type = K3_OPT_INT, .dst = &o.reps, .arg = "N",
     .help = "repetitions of every measurement", .min = 1, .max = MAX_REPS},
    {.name = "arena-mib", .type = K3_OPT_INT, .dst = &o.arena_mib, .arg = "MIB",
     .help = "small matrices are copied across this much RAM", .min = 64, .max = 1 << 20},
    {.name = "copy-mib", .type = K3_OPT_INT, .dst = &o.copy_mib, .arg = "MIB",
     .help = "STREAM copy: size of each of its two arrays", .min = 64, .max = 1 << 20},
    {.name = "lm-head", .type = K3_OPT_INT, .dst = &o.lm_head, .arg = "0|1",
     .help = "1: include full K3's lm_head (2.35 GB) when RAM allows", .min = 0, .max = 1},
    {.name = "thp", .type = K3_OPT_INT, .dst = &o.thp, .arg = "0|1",
     .help = "1: weights on transparent huge pages (as the engine's read areas)", .min = 0,
     .max = 1},
    {.name = "teams", .type = K3_OPT_INT, .dst = &o.teams, .arg = "0|1",
     .help = "1: MXFP4 calls inside a team's work (numa/teams.h), as the engine's expert path; "
             "0: each call its own OpenMP region", .min = 0, .max = 1},
    {.name = "seed", .type = K3_OPT_U64, .dst = &o.seed, .arg = "N",
     .help = "weight and activation generator seed"},
    {.name = "csv", .type = K3_OPT_STRING, .dst = &o.csv, .arg = "FILE",
     .help = "write results to this CSV file", .def = "none"},
    {.name = "json", .type = K3_OPT_STRING, .dst = &o.json, .arg = "FILE",
     .help = "write the planner's calibration (k3-uring plan --calibration) and set gflops's "
             "GFLOP/s here", .def = "none"},
};
#define N_OPTS K3_OPTS_COUNT(opt_table)

/* Whether --sets asks for the shape set named set. */
static bool set_chosen(const char *set)
{
    for (const struct k3_opt_choice *c = set_choices; c->name; c++)
        if (!strcmp(c->name, set))
            return o.sets & c->value;
    return false;
}

/* ---- helpers ------------------------------------------------------------------------ */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

struct stat3 {
    double median, min, max;
};

static struct stat3 stats(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    double med = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
    return (struct stat3){med, v[0], v[n - 1]};
}

static void *big_alloc(size_t bytes)
{
    size_t align = 2u << 20, sz = (bytes + align - 1) / align * align;
    void *p = aligned_alloc(align, sz);
    if (!p) {
        fprintf(stderr, "kernels: cannot allocate %zu bytes\n", bytes);
        exit(1);
    }
    if (o.thp)
        madvise(p, sz, MADV_HUGEPAGE);
    return p;
}

static uint64_t mix(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* bf16 weights of moderate size (|w| in [2^-8, 2)), never subnormal, inf or NaN. */
static void fill_bf16(uint16_t *w, size_t n, uint64_t seed)
{
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        uint64_t r = mix(seed + i);
        w[i] = (uint16_t)(((r >> 8) & 1) << 15 | (uint16_t)(0x3b80 + (r & 0x3ff)));
    }
}

/* MXFP4: random nibbles; scales 2^-12 .. 2^3 (codes 115..130), as real checkpoints have. */
static void fill_mxfp4(uint8_t *p, size_t np, uint8_t *s, size_t ns, uint64_t seed)
{
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < np; i++)
        p[i] = (uint8_t)mix(seed + i);
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < ns; i++)
        s[i] = (uint8_t)(115 + mix(~seed + i) % 16);
}

static void fill_x(float *x, size_t n, uint64_t seed)
{
    for (size_t i = 0; i < n; i++)
        x[i] = (float)((double)(mix(seed + i) >> 11) * 0x1p-53 * 2 - 1);
}

/* ---- memory bandwidth --------------------------------------------------------------- */

/* STREAM copy, c = a: bytes counted as STREAM does (read + write, 16 per element). */
static double stream_copy(double *a, double *c, size_t n)
{
    double t = k3_now();
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++)
        c[i] = a[i];
    return 16.0 * n / (k3_now() - t) / 1e9;
}

/* Sums the 64-bit words of [p, p + bytes) (bytes a multiple of 64) with SSE2, four chains:
 * a read at the memory's pace, not the adds'.  It prefetches as far ahead as the kernels
 * do, or it would be slower than the memory's pace (the hardware prefetchers alone do not
 * keep up with copies of a small matrix). */
static inline __m128i sum_bytes(const uint8_t *p, size_t bytes, __m128i s0)
{
    __m128i s1 = _mm_setzero_si128(), s2 = _mm_setzero_si128(), s3 = _mm_setzero_si128();
    for (size_t i = 0; i < bytes; i += 64) {
        _mm_prefetch((const char *)p + i + K3_PREFETCH_AHEAD, _MM_HINT_T0);
        s0 = _mm_add_epi64(s0, _mm_load_si128((const __m128i *)(p + i)));
        s1 = _mm_add_epi64(s1, _mm_load_si128((const __m128i *)(p + i + 16)));
        s2 = _mm_add_epi64(s2, _mm_load_si128((const __m128i *)(p + i + 32)));
        s3 = _mm_add_epi64(s3, _mm_load_si128((const __m128i *)(p + i + 48)));
    }
    return _mm_add_epi64(_mm_add_epi64(s0, s1), _mm_add_epi64(s2, s3));
}

static volatile uint64_t read_sink;

/* A read-only sweep over [p, p + bytes), split in contiguous halves as the kernels split
 * rows: what a mat-vec does to its weights. */
static double read_sweep(const uint8_t *p, size_t bytes)
{
    size_t lines = bytes / 64;
    uint64_t total = 0;
    double t = k3_now();
#pragma omp parallel reduction(+ : total)
    {
        int id = omp_get_thread_num(), n = omp_get_num_threads();
        size_t a = lines * id / n, b = lines * (id + 1) / n;
        __m128i s = sum_bytes(p + a * 64, (b - a) * 64, _mm_setzero_si128());
        total += (uint64_t)_mm_cvtsi128_si64(s) + (uint64_t)_mm_cvtsi128_si64(_mm_unpackhi_epi64(s, s));
    }
    double gbps = 64.0 * lines / (k3_now() - t) / 1e9;
    read_sink = total;
    return gbps;
}

struct membw {
    struct stat3 copy, read;
};

static void measure_memory(int threads, struct membw *m)
{
    size_t n = (size_t)o.copy_mib << 17; /* doubles per array */
    double *a = big_alloc(n * 8), *c = big_alloc(n * 8);
    memset(a, 1, n * 8);
    memset(c, 2, n * 8);
    omp_set_num_threads(threads);
    double cp[MAX_REPS], rd[MAX_REPS];
    int reps = o.reps;
    stream_copy(a, c, n); /* warm: page faults, thread pool */
    for (int r = 0; r < reps; r++) {
        cp[r] = stream_copy(a, c, n);
        rd[r] = read_sweep((const uint8_t *)a, n * 8);
    }
    m->copy = stats(cp, reps);
    m->read = stats(rd, reps);
    free(a);
    free(c);
}

/* ---- compute ceiling ---------------------------------------------------------------- */

/* A variant's MXFP4 rows with their weights in L1: CEIL_ROWS rows of the case's width (the
 * activations already in block order), every thread calling the row kernel on its own
 * copy for about CEIL_SECONDS.  What the cores compute when the memory costs nothing;
 * measured in turn with the same case from RAM, it says whether the kernel waits on the
 * memory or on itself.  Decode only (T = 1): the activations of more tokens outgrow L1
 * beside the weights (4 x 3072 floats are 48 KiB), and the rows would wait on L2. */
#define CEIL_ROWS 16
#define CEIL_SECONDS 0.05

struct ceiling {
    int cols;
    size_t np, ns, nxb; /* packed bytes, scale bytes, block-ordered activations */
    uint8_t *w;
    float *xb;
};

static void ceiling_prepare(struct ceiling *cl, int cols)
{
    cl->cols = cols;
    cl->np = (size_t)CEIL_ROWS * cols / 2;
    cl->ns = cl->np / (K3_MXFP4_GROUP / 2);
    cl->nxb = k3_mxfp4_block_floats(cols);
    cl->w = malloc(cl->np + cl->ns);
    cl->xb = malloc(sizeof(float) * cl->nxb);
    float *x = malloc(sizeof(float) * cols);
    if (!cl->w || !cl->xb || !x) {
        fprintf(stderr, "kernels: out of memory for the compute ceiling\n");
        exit(1);
    }
    fill_mxfp4(cl->w, cl->np, cl->w + cl->np, cl->ns, (uint64_t)o.seed * 7919);
    fill_x(x, (size_t)cols, (uint64_t)o.seed + 29);
    k3_mxfp4_block_order(x, cols, cl->xb);
    free(x);
}

static void ceiling_free(struct ceiling *cl)
{
    free(cl->w), free(cl->xb);
}

/* GB/s of weights over all threads, calls calls per thread, T = 1. */
static double ceiling_pass(const struct k3_kernel_ops *k, const struct ceiling *cl, int threads,
                           long calls)
{
    double t0 = 0;
    bool short_of_memory = false;
    omp_set_num_threads(threads);
#pragma omp parallel
    {
        uint8_t *mine = malloc(cl->np + cl->ns);
        float *xm = malloc(sizeof(float) * cl->nxb), y[CEIL_ROWS];
        if (mine && xm) {
            memcpy(mine, cl->w, cl->np + cl->ns);
            memcpy(xm, cl->xb, sizeof(float) * cl->nxb);
        } else {
#pragma omp atomic write
            short_of_memory = true;
        }
#pragma omp barrier
#pragma omp master
        t0 = k3_now();
        for (long i = 0; i < calls && mine && xm; i++)
            k->rows_mxfp4(mine, mine + cl->np, CEIL_ROWS, cl->cols, xm, (int)cl->nxb, y, CEIL_ROWS, 1);
        free(mine), free(xm);
    }
    double t1 = k3_now();
    if (short_of_memory) {
        fprintf(stderr, "kernels: out of memory for the compute ceiling\n");
        exit(1);
    }
    return (double)threads * calls * (cl->np + cl->ns) / (t1 - t0) / 1e9;
}

/* Calls per thread that take about CEIL_SECONDS on one thread. */
static long ceiling_calls(const struct k3_kernel_ops *k, const struct ceiling *cl)
{
    double gbps = ceiling_pass(k, cl, 1, 64);
    long calls = (long)(CEIL_SECONDS * gbps * 1e9 / (double)(cl->np + cl->ns));
    return calls > 64 ? calls : 64;
}

/* ---- cases -------------------------------------------------------------------------- */

enum kind { BF16, MXFP4, MXFP4_SITU, MXFP4_UNFUSED, MXFP4_Q8, Q8_0 };
static const char *const kind_name[] = {"bf16", "mxfp4", "mxfp4+situ fused", "mxfp4+situ unfused",
                                        "mxfp4 int8-act", "q8_0"};

struct bcase {
    const char *set, *name;
    enum kind kind;
    int rows, cols;
    int per_token; /* k3-bench: how many of these one decode token multiplies (0: not counted) */
};

/* k3-bench: 5 layers, KDA at 0..2 (P = 16 heads × 128 = 2048), MLA at 3, 4 (q_lora 512,
 * kv_lora 512, 16 heads of 128 + 64 rope, v_head 128), layer 0 dense (8192), layers 1..4
 * MoE (896 experts, top 16, 2 shared of 3072, latent 1024). */
static const struct bcase cases[] = {
    {"bench", "attn 2048x2048 (KDA q,k,v,g,o x3; MLA g,o x2)", BF16, 2048, 2048, 19},
    {"bench", "KDA f_a", BF16, 128, 2048, 3},
    {"bench", "KDA f_b", BF16, 2048, 128, 3},
    {"bench", "KDA b_proj", BF16, 16, 2048, 3},
    {"bench", "dense gate/up", BF16, 8192, 2048, 2},
    {"bench", "dense down", BF16, 2048, 8192, 1},
    {"bench", "MLA q_a", BF16, 512, 2048, 2},
    {"bench", "MLA q_b", BF16, 3072, 512, 2},
    {"bench", "MLA kv_a", BF16, 576, 2048, 2},
    {"bench", "MLA kv_b (16 heads as one)", BF16, 4096, 512, 2},
    {"bench", "router", BF16, 896, 2048, 4},
    {"bench", "latent down", BF16, 1024, 2048, 4},
    {"bench", "latent up", BF16, 2048, 1024, 4},
    {"bench", "shared gate/up", BF16, 6144, 2048, 8},
    {"bench", "shared down", BF16, 2048, 6144, 4},
    {"bench", "expert w1/w3", MXFP4, 3072, 1024, 128},
    {"bench", "expert w2", MXFP4, 1024, 3072, 64},
    {"bench", "expert w1+w3+SiTU fused", MXFP4_SITU, 3072, 1024, 0},
    {"bench", "expert w1+w3+SiTU unfused", MXFP4_UNFUSED, 3072, 1024, 0},
    {"bench", "expert w1/w3 int8 activations (flag)", MXFP4_Q8, 3072, 1024, 0},
    {"bench", "expert w2 int8 activations (flag)", MXFP4_Q8, 1024, 3072, 0},
    {"bench", "lm_head", BF16, 163840, 2048, 1},
    {"k3", "KDA q/k/v/g 12288x7168", BF16, 12288, 7168, 0},
    {"k3", "KDA o_proj 7168x12288", BF16, 7168, 12288, 0},
    {"k3", "shared gate/up", BF16, 6144, 7168, 0},
    {"k3", "shared down", BF16, 7168, 6144, 0},
    {"k3", "latent down", BF16, 3584, 7168, 0},
    {"k3", "latent up", BF16, 7168, 3584, 0},
    {"k3", "router", BF16, 896, 7168, 0},
    {"k3", "expert w1/w3", MXFP4, 3072, 3584, 0},
    {"k3", "expert w2", MXFP4, 3584, 3072, 0},
    {"k3", "lm_head", BF16, 163840, 7168, 0},
    /* k3-bench's trunk as Q8_0 holds it: the matrices of trunk_type.h's rule, with their
     * per-token counts (the others stay bf16, measured above) */
    {"q8_0", "attn 2048x2048 (KDA q,k,v,g,o x3; MLA g,o x2)", Q8_0, 2048, 2048, 19},
    {"q8_0", "dense gate/up", Q8_0, 8192, 2048, 2},
    {"q8_0", "dense down", Q8_0, 2048, 8192, 1},
    {"q8_0", "MLA q_a", Q8_0, 512, 2048, 2},
    {"q8_0", "MLA q_b", Q8_0, 3072, 512, 2},
    {"q8_0", "MLA kv_a", Q8_0, 576, 2048, 2},
    {"q8_0", "latent down", Q8_0, 1024, 2048, 4},
    {"q8_0", "latent up", Q8_0, 2048, 1024, 4},
    {"q8_0", "shared gate/up", Q8_0, 6144, 2048, 8},
    {"q8_0", "shared down", Q8_0, 2048, 6144, 4},
    {"q8_0", "lm_head", Q8_0, 163840, 2048, 1},
};
#define N_CASES (int)(sizeof cases / sizeof cases[0])

static size_t case_bytes(const struct bcase *c)
{
    size_t n = (size_t)c->rows * c->cols;
    switch (c->kind) {
    case BF16: return 2 * n;
    case Q8_0: return k3_q8_0_row_bytes((int64_t)n);
    case MXFP4:
    case MXFP4_Q8: return n / 2 + n / 32;
    default: return 2 * (n / 2 + n / 32);
    }
}

/* One matrix copy inside the arena: where its parts start. */
struct copy {
    const uint8_t *a, *b, *c, *d; /* bf16: a; mxfp4: a packed, b scales; pairs: c, d the second */
};

static struct copy copy_at(const struct bcase *c, const uint8_t *base)
{
    size_t n = (size_t)c->rows * c->cols, np = n / 2, ns = n / 32;
    if (c->kind == BF16 || c->kind == Q8_0)
        return (struct copy){base, NULL, NULL, NULL};
    if (c->kind == MXFP4_Q8)
        return (struct copy){base, base + np, NULL, NULL};
    return (struct copy){base, base + np, base + np + ns, base + 2 * np + ns};
}

static void run_call(const struct bcase *c, struct copy w, const float *X, float *Y, float *U, int T)
{
    switch (c->kind) {
    case BF16:
        k3_matmul_bf16((const uint16_t *)w.a, c->rows, c->cols, X, c->cols, Y, c->rows, T);
        break;
    case MXFP4:
        k3_matmul_mxfp4(w.a, w.b, c->rows, c->cols, X, c->cols, Y, c->rows, T);
        break;
    case Q8_0:
        k3_matmul_q8_0((const struct k3_q8_0_block *)w.a, c->rows, c->cols, X, c->cols, Y,
                       c->rows, T);
        break;
    case MXFP4_Q8: /* quantizes X itself, as the engine's flag would */
        k3_matmul_mxfp4_q8(w.a, w.b, c->rows, c->cols, X, c->cols, Y, c->rows, T);
        break;
    case MXFP4_SITU:
        k3_matmul_mxfp4_situ(w.a, w.b, w.c, w.d, c->rows, c->cols, X, c->cols, Y, c->rows, T,
                             4.0f, 25.0f);
        break;
    case MXFP4_UNFUSED: { /* the fused kernel's baseline: two mat-vecs, then SiTU */
        k3_matmul_mxfp4(w.a, w.b, c->rows, c->cols, X, c->cols, Y, c->rows, T);
        k3_matmul_mxfp4(w.c, w.d, c->rows, c->cols, X, c->cols, U, c->rows, T);
        int member = 0, n_members = 1;
        k3numa_team_self(&member, &n_members);
        if (member == 0) /* in a team, one member; the others wait at the barrier */
            k3_situ_n(Y, Y, U, c->rows * T, 4.0f, 25.0f);
        k3numa_team_barrier();
        break;
    }
    }
}

/* One measurement: a call on every copy of the case's matrix. */
struct pass {
    const struct bcase *c;
    const uint8_t *base;
    size_t stride, n_copies;
    const float *X;
    float *Y, *U;
    int T;
};

static void pass_calls(void *arg, int team)
{
    (void)team;
    const struct pass *p = arg;
    for (size_t k = 0; k < p->n_copies; k++)
        run_call(p->c, copy_at(p->c, p->base + k * p->stride), p->X, p->Y, p->U, p->T);
}

/* The routed experts' mat-vecs run the way the engine's expert path (engine/forward/forward.c)
 * calls them: inside a team's work, where a call splits its rows over the team and ends
 * at the team's barrier.  The trunk's bf16 ones each open an OpenMP region, as there.
 * With --teams 0 every call opens its own region. */
static void run_pass(struct k3numa_teams *teams, const struct pass *p)
{
    if (teams && p->c->kind != BF16)
        k3numa_teams_run(teams, pass_calls, (void *)p);
    else
        pass_calls((void *)p, 0);
}

/* ---- the run ------------------------------------------------------------------------ */

struct result {
    struct stat3 gbps;
    double us; /* median time per call */
};

#define MAX_THREADS K3_OPT_INTS_MAX /* entries of --threads */
#define MAX_TOKENS K3_OPT_INTS_MAX  /* entries of --tokens */

/* What the run measures, as the reports read it.  Indices: case (cases[]), variant (vars),
 * thread count (o.threads), token count (o.tokens). */
static struct {
    const struct k3_kernel_ops *vars[4];
    int n_vars;
    double avail_gb;                       /* RAM available at the start */
    uint8_t *arena;
    struct membw mem[MAX_THREADS];         /* at the start of the run */
    struct membw mem_end[MAX_THREADS];     /* at the end */
    struct result res[N_CASES][4][MAX_THREADS][MAX_TOKENS];
    struct stat3 ceiling[N_CASES][4][MAX_THREADS][MAX_TOKENS]; /* MXFP4 cases, T = 1 */
    /* The same-time reference of a case: a read sweep over the same weight bytes, per
     * thread count (medians over the reps, interleaved with the variants'). */
    struct stat3 case_read[N_CASES][MAX_THREADS];
} run;

static FILE *csv;

/* A row of the CSV; gflops (NULL: not measured, empty fields) the GFLOP/s of section
 * "gflops", peak the FMA peak measured beside them, of_peak the median of each rep's
 * GFLOP/s over that rep's peak and best the fastest rep over the highest peak. */
static void csv_row_gflops(const char *section, const char *name, const char *kind, int rows,
                           int cols, int T, const char *variant, int threads, double bytes,
                           struct stat3 g, double us, double frac, double frac_read,
                           const struct stat3 *gflops, double peak, double of_peak,
                           double best)
{
    if (!csv)
        return;
    fprintf(csv, "%s,\"%s\",%s,%d,%d,%d,%s,%d,%.0f,%.3f,%.3f,%.3f,%.3f,%.4f,%.4f", section, name,
            kind, rows, cols, T, variant, threads, bytes, g.median, g.min, g.max, us, frac,
            frac_read);
    if (gflops)
        fprintf(csv, ",%.2f,%.2f,%.2f,%.2f,%.4f,%.4f\n", gflops->median, gflops->min,
                gflops->max, peak, of_peak, best);
    else
        fprintf(csv, ",,,,,,\n");
}

static void csv_row(const char *section, const char *name, const char *kind, int rows, int cols,
                    int T, const char *variant, int threads, double bytes, struct stat3 g, double us,
                    double frac, double frac_read)
{
    csv_row_gflops(section, name, kind, rows, cols, T, variant, threads, bytes, g, us, frac,
                   frac_read, NULL, 0, 0, 0);
}

/* The variants --variants asks for that this CPU has, best first; how many. */
static int choose_variants(void)
{
    for (const struct k3_opt_choice *v = variant_choices; v->name; v++) {
        if (!strcmp(v->name, "all") || !(o.variants & v->value))
            continue;
        const struct k3_kernel_ops *k = k3_kernels_find(v->name);
        if (!k->supported()) {
            printf("kernels: %s: this CPU lacks it, skipped\n", v->name);
            continue;
        }
        run.vars[run.n_vars++] = k;
    }
    return run.n_vars;
}

/* Every knob with its value, the variants that run and the machine's RAM. */
static void print_setup(void)
{
    long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    run.avail_gb = (double)pages * page / 1e9;
    printf("kernels: every knob (--help for meanings):\n");
    k3_opts_print_values(stdout, opt_table, N_OPTS);
    printf("kernels: auto variant %s; running", k3_kernels_name());
    for (int i = 0; i < run.n_vars; i++)
        printf(" %s", run.vars[i]->name);
    printf("; OpenMP max threads %d; %.1f GB RAM available\n", omp_get_max_threads(), run.avail_gb);
}

static int open_csv(void)
{
    if (!o.csv || !o.csv[0])
        return 0;
    if (!(csv = fopen(o.csv, "w"))) {
        fprintf(stderr, "kernels: %s: %s\n", o.csv, strerror(errno));
        return -1;
    }
    fprintf(csv, "section,name,kind,rows,cols,tokens,variant,threads,bytes,gbps_median,"
                 "gbps_min,gbps_max,us_median,frac_of_copy,frac_of_read,gflops_median,"
                 "gflops_min,gflops_max,peak_gflops,frac_of_peak,best_frac_of_peak\n");
    return 0;
}

/* Measures the memory at every thread count into m and reports it, as "memory" at the
 * start of the run and "memory at the end" (section memory_end) after the cases. */
static void memory_rows(bool at_end, struct membw *m)
{
    for (int ti = 0; ti < o.threads.n; ti++) {
        int threads = o.threads.v[ti];
        measure_memory(threads, &m[ti]);
        printf("memory%s, %d thread(s): STREAM copy %.1f GB/s [%.1f-%.1f], read %.1f GB/s "
               "[%.1f-%.1f]\n",
               at_end ? " at the end" : "", threads, m[ti].copy.median, m[ti].copy.min,
               m[ti].copy.max, m[ti].read.median, m[ti].read.min, m[ti].read.max);
        const char *section = at_end ? "memory_end" : "memory";
        double mib = (double)((size_t)o.copy_mib << 20);
        csv_row(section, "stream copy", "-", 0, 0, 0, "-", threads, 32.0 * mib, m[ti].copy, 0, 1,
                m[ti].copy.median / m[ti].read.median);
        csv_row(section, "read sweep", "-", 0, 0, 0, "-", threads, 8.0 * mib, m[ti].read, 0,
                m[ti].read.median / m[ti].copy.median, 1);
    }
}

/* ---- one case ----------------------------------------------------------------------- */

/* A case's weights for the run: copies across the arena, or the matrix alone when it is
 * bigger; and its activations. */
struct weights {
    uint8_t *base, *own; /* own: the matrix alone, else NULL */
    size_t stride, n_copies;
    float *X, *Y, *U;    /* [max T][cols], [max T][rows], [max T][rows] */
};

/* The most tokens of a list of token counts. */
static int max_tokens(const struct k3_opt_ints *tokens)
{
    int max_T = 1;
    for (int i = 0; i < tokens->n; i++)
        max_T = tokens->v[i] > max_T ? tokens->v[i] : max_T;
    return max_T;
}

/* The weights of case c, activations for up to max_T tokens. */
static int weights_prepare(const struct bcase *c, int max_T, struct weights *w)
{
    size_t bytes = case_bytes(c), arena_bytes = (size_t)o.arena_mib << 20;
    if (c->kind == Q8_0) /* room for the bf16 it is quantized from */
        bytes = 2 * (size_t)c->rows * c->cols;
    *w = (struct weights){.base = run.arena, .stride = (bytes + 4095) / 4096 * 4096};
    w->n_copies = arena_bytes / w->stride;
    if (w->n_copies < 2) {
        w->base = w->own = big_alloc(bytes);
        w->n_copies = 1;
    }
    size_t n_sub = (size_t)c->rows * c->cols;
    for (size_t k = 0; k < w->n_copies; k++) {
        uint8_t *at = w->base + k * w->stride;
        if (c->kind == BF16 || c->kind == Q8_0)
            fill_bf16((uint16_t *)at, n_sub, o.seed * 1000003 + k * n_sub);
        if (c->kind == Q8_0) /* the bf16 quantized in place, as -m DIR --trunk-type q8_0 does */
            k3_q8_0_quantize_bf16((const uint16_t *)at, (int64_t)n_sub, (struct k3_q8_0_block *)at);
        else if (c->kind != BF16)
            for (int half = 0; half < (c->kind == MXFP4 || c->kind == MXFP4_Q8 ? 1 : 2); half++)
                fill_mxfp4(at + half * (n_sub / 2 + n_sub / 32), n_sub / 2,
                           at + half * (n_sub / 2 + n_sub / 32) + n_sub / 2, n_sub / 32,
                           o.seed * 1000003 + (2 * k + half) * n_sub);
    }
    w->X = malloc(sizeof(float) * (size_t)max_T * c->cols);
    w->Y = malloc(sizeof(float) * (size_t)max_T * c->rows);
    w->U = malloc(sizeof(float) * (size_t)max_T * c->rows);
    if (!w->X || !w->Y || !w->U) {
        fprintf(stderr, "kernels: out of memory for activations\n");
        return -1;
    }
    fill_x(w->X, (size_t)max_T * c->cols, o.seed + 17);
    return 0;
}

static void weights_free(struct weights *w)
{
    free(w->X), free(w->Y), free(w->U), free(w->own);
}

/* Every rep's GB/s: [thread count][variant][rep]; rd: the read sweep, cg: the ceiling. */
struct samples {
    double g[MAX_THREADS][4][MAX_REPS], rd[MAX_THREADS][MAX_REPS], cg[MAX_THREADS][4][MAX_REPS];
};

/* The reps of one case at T tokens per call, cl (NULL: none) its compute ceiling.  The
 * thread counts take turns rep by rep, as the variants do: a shared host's pace drifts
 * over minutes (its other tenants), and a scaling taken from measurements minutes apart
 * would measure the drift. */
static int measure_reps(const struct bcase *c, const struct weights *w, int T,
                        const struct ceiling *cl, struct samples *s)
{
    size_t bytes = case_bytes(c);
    struct k3numa_teams *teams[MAX_THREADS] = {NULL};
    struct pass warm = {c, w->base, w->stride, 1, w->X, w->Y, w->U, T},
                every = {c, w->base, w->stride, w->n_copies, w->X, w->Y, w->U, T};
    long ceil_calls[4];
    for (int vi = 0; cl && vi < run.n_vars; vi++)
        ceil_calls[vi] = ceiling_calls(run.vars[vi], cl);
    int rc = 0;
    for (int ti = 0; !rc && ti < o.threads.n; ti++) {
        omp_set_num_threads(o.threads.v[ti]);
        if (o.teams && k3numa_teams_create(&teams[ti], NULL)) {
            fprintf(stderr, "kernels: out of memory for a team\n");
            rc = -1;
            break;
        }
        /* A pass to warm the thread pool (and, with one copy, nothing else). */
        for (int vi = 0; vi < run.n_vars; vi++) {
            k3_kernels_select(run.vars[vi]->name);
            run_pass(teams[ti], &warm);
        }
    }
    for (int r = 0; !rc && r < o.reps; r++)
        for (int ti = 0; ti < o.threads.n; ti++) {
            omp_set_num_threads(o.threads.v[ti]);
            s->rd[ti][r] = read_sweep(w->base, w->n_copies * w->stride);
            for (int vi = 0; vi < run.n_vars; vi++) {
                k3_kernels_select(run.vars[vi]->name);
                double t0 = k3_now();
                run_pass(teams[ti], &every);
                double dt = k3_now() - t0;
                s->g[ti][vi][r] = (double)bytes * w->n_copies / dt / 1e9;
                if (cl)
                    s->cg[ti][vi][r] = ceiling_pass(run.vars[vi], cl, o.threads.v[ti],
                                                    ceil_calls[vi]);
            }
        }
    for (int ti = 0; ti < o.threads.n; ti++)
        k3numa_teams_destroy(teams[ti]);
    return rc;
}

/* The rows of one case at token count xi: the read sweep, each variant, each ceiling;
 * their medians kept in run for the summaries. */
static void report_reps(int ci, int xi, struct samples *s, const struct ceiling *cl)
{
    const struct bcase *c = &cases[ci];
    int T = o.tokens.v[xi];
    size_t bytes = case_bytes(c);
    for (int ti = 0; ti < o.threads.n; ti++) {
        int threads = o.threads.v[ti];
        double copy = run.mem[ti].copy.median;
        struct stat3 rs3 = stats(s->rd[ti], o.reps);
        if (xi == 0)
            run.case_read[ci][ti] = rs3;
        printf("%-48s %-5s %-10s %2s %-10s %3d %10.2f %8.2f [%5.2f-%5.2f] %9s %6.2f %6.2f\n",
               c->name, c->set, "read sweep", "-", "-", threads, bytes / 1e6, rs3.median, rs3.min,
               rs3.max, "", rs3.median / copy, 1.0);
        csv_row("matmul", c->name, "read sweep", c->rows, c->cols, T, "-", threads, (double)bytes,
                rs3, 0, rs3.median / copy, 1);
        for (int vi = 0; vi < run.n_vars; vi++) {
            struct result *rs = &run.res[ci][vi][ti][xi];
            rs->gbps = stats(s->g[ti][vi], o.reps);
            rs->us = bytes / rs->gbps.median / 1e3;
            double frac = rs->gbps.median / copy, frac_read = rs->gbps.median / rs3.median;
            printf("%-48s %-5s %-10.10s %2d %-10s %3d %10.2f %8.2f [%5.2f-%5.2f] %9.1f %6.2f %6.2f\n",
                   c->name, c->set, kind_name[c->kind], T, run.vars[vi]->name, threads,
                   bytes / 1e6, rs->gbps.median, rs->gbps.min, rs->gbps.max, rs->us, frac,
                   frac_read);
            csv_row("matmul", c->name, kind_name[c->kind], c->rows, c->cols, T,
                    run.vars[vi]->name, threads, (double)bytes, rs->gbps, rs->us, frac, frac_read);
        }
        for (int vi = 0; cl && vi < run.n_vars; vi++) {
            struct stat3 cs = stats(s->cg[ti][vi], o.reps);
            run.ceiling[ci][vi][ti][xi] = cs;
            double cbytes = (double)(cl->np + cl->ns);
            printf("%-48s %-5s %-10s %2d %-10s %3d %10.2f %8.2f [%5.2f-%5.2f] %9.2f %6.2f %6.2f\n",
                   c->name, c->set, "mxfp4 (L1)", T, run.vars[vi]->name, threads, cbytes / 1e6,
                   cs.median, cs.min, cs.max, cbytes / cs.median / 1e3, cs.median / copy,
                   cs.median / rs3.median);
            csv_row("matmul", c->name, "mxfp4 weights in L1", CEIL_ROWS, c->cols, T,
                    run.vars[vi]->name, threads, cbytes, cs, cbytes / cs.median / 1e3,
                    cs.median / copy, cs.median / rs3.median);
        }
    }
}

/* One case at every token count; beside each MXFP4 decode case, its compute ceiling. */
static int measure_case(int ci)
{
    static struct samples s;
    const struct bcase *c = &cases[ci];
    struct weights w;
    int rc = weights_prepare(c, max_tokens(&o.tokens), &w);
    for (int xi = 0; !rc && xi < o.tokens.n; xi++) {
        struct ceiling cl;
        bool with_ceiling = c->kind == MXFP4 && o.tokens.v[xi] == 1;
        if (with_ceiling)
            ceiling_prepare(&cl, c->cols);
        rc = measure_reps(c, &w, o.tokens.v[xi], with_ceiling ? &cl : NULL, &s);
        if (!rc)
            report_reps(ci, xi, &s, with_ceiling ? &cl : NULL);
        if (with_ceiling)
            ceiling_free(&cl);
    }
    fflush(stdout);
    weights_free(&w);
    return rc;
}

static int measure_cases(void)
{
    if (!set_chosen("bench") && !set_chosen("k3") && !set_chosen("q8_0"))
        return 0;
    printf("\n%-48s %-5s %-10s %2s %-10s %3s %10s %22s %9s %6s %6s\n", "case", "set", "kind", "T",
           "variant", "thr", "MB/call", "GB/s median [min-max]", "us/call", "x copy", "x read");
    for (int ci = 0; ci < N_CASES; ci++) {
        const struct bcase *c = &cases[ci];
        if (!set_chosen(c->set) || (o.only && !strstr(c->name, o.only)))
            continue;
        if (!strcmp(c->set, "k3") && !strcmp(c->name, "lm_head") &&
            (!o.lm_head || case_bytes(c) * 1.3 > run.avail_gb * 1e9)) {
            printf("%-48s %-5s skipped (--lm-head %d, %.1f GB available)\n", c->name, c->set,
                   o.lm_head, run.avail_gb);
            continue;
        }
        if (measure_case(ci))
            return -1;
    }
    return 0;
}

/* ---- GFLOP/s against the FMA peak ----------------------------------------------------- */

/* Full K3's expert shapes (latent 3584, moe_intermediate 3072; the bf16 mat-mul at the same
 * shapes), every one at each of --gflops-tokens. */
static const struct bcase gcases[] = {
    {"gflops", "K3 expert w1/w3 3072x3584", MXFP4, 3072, 3584, 0},
    {"gflops", "K3 expert w2 3584x3072", MXFP4, 3584, 3072, 0},
    {"gflops", "K3 expert w1+w3+SiTU fused 3072x3584", MXFP4_SITU, 3072, 3584, 0},
    {"gflops", "bf16 3072x3584", BF16, 3072, 3584, 0},
    {"gflops", "bf16 3584x3072", BF16, 3584, 3072, 0},
    {"q8_0", "K3 shared gate/up q8_0 6144x7168", Q8_0, 6144, 7168, 0},
    {"q8_0", "K3 KDA o_proj q8_0 7168x12288", Q8_0, 7168, 12288, 0},
    {"q8_0", "K3 shared gate/up bf16 6144x7168", BF16, 6144, 7168, 0},
};
#define N_GCASES (int)(sizeof gcases / sizeof gcases[0])

/* One measurement takes about this many flops (fewer calls when the arena has fewer
 * copies), and the peak's loop about FMA_PEAK_SECONDS on each thread. */
#define GFLOPS_CALL_FLOPS 4e9
#define FMA_PEAK_SECONDS 0.02
/* The scalar reference takes seconds per call past this many tokens: not measured there;
 * below, it makes a GFLOPS_SCALAR_SHARE of the others' calls (it is ~100x slower). */
#define GFLOPS_SCALAR_MAX_T 4
#define GFLOPS_SCALAR_SHARE 16

static volatile float fma_sink;

/* n rounds of 24 independent FMA chains (4-cycle latency at 2 per cycle needs 8; 24 leave
 * no doubt), zmm: the flops done. */
K3_TARGET_BEGIN("avx512f")
static double fma_chains_zmm(long n)
{
    __m512 a[24], b = _mm512_set1_ps(0.999f), c = _mm512_set1_ps(1e-3f);
    for (int i = 0; i < 24; i++)
        a[i] = _mm512_set1_ps((float)i);
    for (long k = 0; k < n; k++)
#pragma GCC unroll 24
        for (int i = 0; i < 24; i++)
            a[i] = _mm512_fmadd_ps(a[i], b, c);
    __m512 sum = a[0];
    for (int i = 1; i < 24; i++)
        sum = _mm512_add_ps(sum, a[i]);
    fma_sink = _mm512_reduce_add_ps(sum);
    return 24.0 * 16 * 2 * (double)n;
}
K3_TARGET_END

/* The same in ymm (14 chains and the two constants fill the 16 registers), for a CPU
 * without AVX-512. */
K3_TARGET_BEGIN("avx2,fma")
static double fma_chains_ymm(long n)
{
    __m256 a[14], b = _mm256_set1_ps(0.999f), c = _mm256_set1_ps(1e-3f);
    for (int i = 0; i < 14; i++)
        a[i] = _mm256_set1_ps((float)i);
    for (long k = 0; k < n; k++)
#pragma GCC unroll 14
        for (int i = 0; i < 14; i++)
            a[i] = _mm256_fmadd_ps(a[i], b, c);
    float out[8];
    __m256 sum = a[0];
    for (int i = 1; i < 14; i++)
        sum = _mm256_add_ps(sum, a[i]);
    _mm256_storeu_ps(out, sum);
    fma_sink = out[0];
    return 14.0 * 8 * 2 * (double)n;
}
K3_TARGET_END

static struct {
    bool zmm;      /* the peak in zmm (AVX-512), else ymm */
    long rounds;   /* of fma_chains per thread per measurement */
} peak;

static double fma_chains(long n)
{
    return peak.zmm ? fma_chains_zmm(n) : fma_chains_ymm(n);
}

/* The FMA peak of threads threads (GFLOP/s, summed): each thread its own chains, timed on
 * its own. */
static double fma_peak(int threads)
{
    double total = 0;
    omp_set_num_threads(threads);
#pragma omp parallel reduction(+ : total)
    {
        double t0 = k3_now(), flops = fma_chains(peak.rounds);
        total += flops / (k3_now() - t0) / 1e9;
    }
    return total;
}

static void fma_peak_prepare(void)
{
    __builtin_cpu_init();
    peak.zmm = __builtin_cpu_supports("avx512f");
    double t0 = k3_now(), flops = fma_chains(1 << 20), rate = flops / (k3_now() - t0);
    peak.rounds = (long)(FMA_PEAK_SECONDS * rate / (flops / (1 << 20)));
    if (peak.rounds < 1000)
        peak.rounds = 1000;
}

/* The variants of the GFLOP/s table: avx512vnni's f32 and bf16 kernels are avx512's. */
static bool gflops_variant(int vi)
{
    if (strcmp(run.vars[vi]->name, "avx512vnni"))
        return true;
    for (int i = 0; i < run.n_vars; i++)
        if (!strcmp(run.vars[i]->name, "avx512"))
            return false;
    return true;
}

/* The best variant of the GFLOP/s table: the first one it measures (the last if none). */
static int first_gflops_variant(void)
{
    int vi = 0;
    while (vi < run.n_vars - 1 && !gflops_variant(vi))
        vi++;
    return vi;
}

static double call_flops(const struct bcase *c, int T)
{
    return 2.0 * c->rows * c->cols * T * (c->kind == MXFP4_SITU ? 2 : 1);
}

/* Medians kept for the JSON and the goal: [case][token count][variant][thread count]. */
static struct {
    struct stat3 gflops[N_GCASES][K3_OPT_INTS_MAX][4][MAX_THREADS];
    struct stat3 peak[N_GCASES][K3_OPT_INTS_MAX][MAX_THREADS];
    struct stat3 frac[N_GCASES][K3_OPT_INTS_MAX][4][MAX_THREADS]; /* of each rep's peak */
    bool measured[N_GCASES][K3_OPT_INTS_MAX][4];
} gf;

/* Case gi at every token count: per rep, per thread count, the peak and then each variant,
 * in turn (the host's pace drifts). */
static int measure_gflops_case(int gi)
{
    const struct bcase *c = &gcases[gi];
    struct weights w;
    if (weights_prepare(c, max_tokens(&o.gflops_tokens), &w))
        return -1;
    struct k3numa_teams *teams[MAX_THREADS] = {NULL};
    int rc = 0;
    for (int ti = 0; !rc && ti < o.threads.n; ti++) {
        omp_set_num_threads(o.threads.v[ti]);
        if (o.teams && c->kind != BF16 && k3numa_teams_create(&teams[ti], NULL)) {
            fprintf(stderr, "kernels: out of memory for a team\n");
            rc = -1;
        }
    }
    static double g[4][MAX_THREADS][MAX_REPS], pk[MAX_THREADS][MAX_REPS],
        frac[4][MAX_THREADS][MAX_REPS];
    for (int xi = 0; !rc && xi < o.gflops_tokens.n; xi++) {
        int T = o.gflops_tokens.v[xi];
        double flops = call_flops(c, T);
        size_t calls = (size_t)(GFLOPS_CALL_FLOPS / flops);
        calls = calls < 1 ? 1 : calls > w.n_copies ? w.n_copies : calls;
        struct pass warm = {c, w.base, w.stride, 1, w.X, w.Y, w.U, T},
                    every = {c, w.base, w.stride, calls, w.X, w.Y, w.U, T},
                    scalar = {c, w.base, w.stride, (calls + GFLOPS_SCALAR_SHARE - 1) /
                                                       GFLOPS_SCALAR_SHARE,
                              w.X, w.Y, w.U, T};
        bool runs[4];
        for (int vi = 0; vi < run.n_vars; vi++)
            runs[vi] = gflops_variant(vi) &&
                       (strcmp(run.vars[vi]->name, "scalar") || T <= GFLOPS_SCALAR_MAX_T);
        for (int ti = 0; ti < o.threads.n; ti++)
            for (int vi = 0; vi < run.n_vars; vi++)
                if (runs[vi]) { /* warm: the thread pool, the team, the pages of one copy */
                    omp_set_num_threads(o.threads.v[ti]);
                    k3_kernels_select(run.vars[vi]->name);
                    run_pass(teams[ti], &warm);
                }
        for (int r = 0; r < o.reps; r++)
            for (int ti = 0; ti < o.threads.n; ti++) {
                pk[ti][r] = fma_peak(o.threads.v[ti]);
                omp_set_num_threads(o.threads.v[ti]);
                for (int vi = 0; vi < run.n_vars; vi++) {
                    if (!runs[vi])
                        continue;
                    k3_kernels_select(run.vars[vi]->name);
                    const struct pass *p = strcmp(run.vars[vi]->name, "scalar") ? &every : &scalar;
                    double t0 = k3_now();
                    run_pass(teams[ti], p);
                    g[vi][ti][r] = flops * (double)p->n_copies / (k3_now() - t0) / 1e9;
                    frac[vi][ti][r] = g[vi][ti][r] / pk[ti][r];
                }
            }
        for (int ti = 0; ti < o.threads.n; ti++) {
            int threads = o.threads.v[ti];
            struct stat3 p = stats(pk[ti], o.reps);
            gf.peak[gi][xi][ti] = p;
            for (int vi = 0; vi < run.n_vars; vi++) {
                gf.measured[gi][xi][vi] = runs[vi];
                if (!runs[vi])
                    continue;
                struct stat3 q = stats(g[vi][ti], o.reps), f = stats(frac[vi][ti], o.reps);
                gf.gflops[gi][xi][vi][ti] = q;
                gf.frac[gi][xi][vi][ti] = f;
                double bytes = (double)case_bytes(c), us = flops / q.median / 1e3;
                struct stat3 gbps = {bytes / us / 1e3, 0, 0};
                printf("%-38s %-10.10s %4d %-10s %3d %8.1f [%6.1f-%6.1f] %8.1f %7.1f%% "
                       "[%4.1f-%4.1f] %6.1f%%\n", c->name, kind_name[c->kind], T,
                       run.vars[vi]->name, threads, q.median, q.min, q.max, p.median,
                       100 * f.median, 100 * f.min, 100 * f.max, 100 * q.max / p.max);
                csv_row_gflops("gflops", c->name, kind_name[c->kind], c->rows, c->cols, T,
                               run.vars[vi]->name, threads, bytes, gbps, us,
                               gbps.median / run.mem[ti].copy.median, 0, &q, p.median, f.median,
                               q.max / p.max);
            }
        }
        fflush(stdout);
    }
    for (int ti = 0; ti < o.threads.n; ti++)
        k3numa_teams_destroy(teams[ti]);
    weights_free(&w);
    return rc;
}

/* The goal for the many-token kernels: at the most threads and 16 tokens or more,
 * the best variant's MXFP4 and bf16 mat-muls at half the FMA peak or more. */
static void report_gflops_goal(void)
{
    int most = o.threads.n - 1, vi = first_gflops_variant();
    double worst[2] = {1e9, 1e9}, best[2] = {0, 0}, top[2] = {1e9, 1e9};
    for (int gi = 0; gi < N_GCASES; gi++)
        for (int xi = 0; xi < o.gflops_tokens.n; xi++) {
            if (o.gflops_tokens.v[xi] < 16 || !gf.measured[gi][xi][vi] ||
                strcmp(gcases[gi].set, "gflops"))
                continue;
            int k = gcases[gi].kind == BF16;
            double frac = gf.frac[gi][xi][vi][most].median;
            double fastest = gf.gflops[gi][xi][vi][most].max / gf.peak[gi][xi][most].max;
            worst[k] = frac < worst[k] ? frac : worst[k];
            best[k] = frac > best[k] ? frac : best[k];
            top[k] = fastest < top[k] ? fastest : top[k];
        }
    if (best[0] == 0 && best[1] == 0)
        return;
    printf("\ngoal (%s, %d threads, 16 tokens or more): >= 50%% of the FMA peak;",
           run.vars[vi]->name, o.threads.v[most]);
    for (int k = 0; k < 2; k++)
        if (best[k] > 0)
            printf(" %s %.0f-%.0f%% (best reps: %.0f%% or more)", k ? "bf16" : "MXFP4",
                   100 * worst[k], 100 * best[k], 100 * top[k]);
    printf(", the worst and the best case\n");
}

static int measure_gflops(void)
{
    if (!set_chosen("gflops") && !set_chosen("q8_0"))
        return 0;
    fma_peak_prepare();
    printf("\nGFLOP/s (2 flops per weight per token; MXFP4 fused: both matrices) against the "
           "FMA peak measured in turn with them (%s FMA chains, every thread; of peak: the "
           "median over the reps of each one's GFLOP/s over its peak; best: the fastest rep "
           "over the highest peak, what the cores do when the host's other tenants leave them "
           "alone); weights cycle through copies in RAM\n", peak.zmm ? "zmm" : "ymm");
    printf("%-38s %-10s %4s %-10s %3s %8s %15s %8s %8s %11s %7s\n", "case", "kind", "T",
           "variant", "thr", "GFLOP/s", "[min-max]", "peak", "of peak", "[min-max]", "best");
    for (int gi = 0; gi < N_GCASES; gi++)
        if (set_chosen(gcases[gi].set) && (!o.only || strstr(gcases[gi].name, o.only)) &&
            measure_gflops_case(gi))
            return -1;
    report_gflops_goal();
    return 0;
}

/* ---- summaries ---------------------------------------------------------------------- */

/* k3-bench: the mat-muls of one decode token (token count t1, T = 1), from the medians. */
static void report_per_token(int t1)
{
    printf("\nk3-bench, one decode token: the mat-muls' compute (weights in RAM; the reads "
           "from drives not included)\n");
    printf("%-10s %3s %12s %12s %12s %10s %10s\n", "variant", "thr", "trunk ms", "experts ms",
           "total ms", "MB/token", "GB/s");
    for (int vi = 0; vi < run.n_vars; vi++)
        for (int ti = 0; ti < o.threads.n; ti++) {
            const char *variant = run.vars[vi]->name;
            int threads = o.threads.v[ti];
            double trunk = 0, experts = 0, tb = 0, eb = 0;
            for (int ci = 0; ci < N_CASES; ci++) {
                const struct bcase *c = &cases[ci];
                if (strcmp(c->set, "bench") || !c->per_token)
                    continue;
                double us = run.res[ci][vi][ti][t1].us * c->per_token;
                double b = (double)case_bytes(c) * c->per_token;
                if (c->kind == BF16)
                    trunk += us, tb += b;
                else
                    experts += us, eb += b;
            }
            struct stat3 g = {(tb + eb) / (trunk + experts) / 1e3, 0, 0};
            printf("%-10s %3d %12.2f %12.2f %12.2f %10.1f %10.2f\n", variant, threads,
                   trunk / 1e3, experts / 1e3, (trunk + experts) / 1e3, (tb + eb) / 1e6, g.median);
            csv_row("per_token", "k3-bench decode: trunk", "bf16", 0, 0, 1, variant, threads, tb,
                    (struct stat3){tb / trunk / 1e3, 0, 0}, trunk, 0, 0);
            csv_row("per_token", "k3-bench decode: routed experts", "mxfp4", 0, 0, 1, variant,
                    threads, eb, (struct stat3){eb / experts / 1e3, 0, 0}, experts, 0, 0);
            csv_row("per_token", "k3-bench decode: all mat-muls", "-", 0, 0, 1, variant, threads,
                    tb + eb, g, trunk + experts, 0, 0);
        }
}

/* The planner's rates: weight bytes one core turns into results per second, weights in
 * RAM, over k3-bench's per-token mix (MXFP4: the experts; bf16: the trunk; q8_0: the
 * trunk's Q8_0 matrices, set q8_0), into cal[variant][thread count][mxfp4, bf16, q8_0]
 * (0: not measured). */
static void report_planner(int t1, double cal[4][MAX_THREADS][3])
{
    printf("\nplanner rates (k3-bench decode mix, T = 1, weights in RAM; per core = rate / "
           "threads):\n");
    for (int vi = 0; vi < run.n_vars; vi++)
        for (int ti = 0; ti < o.threads.n; ti++) {
            int threads = o.threads.v[ti];
            static const char *const name[3] = {"MXFP4", "bf16", "q8_0"},
                                     *row[3] = {"mxfp4 GB/s per core", "bf16 GB/s per core",
                                                "q8_0 GB/s per core"},
                                     *kind[3] = {"mxfp4", "bf16", "q8_0"};
            double us[3] = {0, 0, 0}, b[3] = {0, 0, 0};
            for (int ci = 0; ci < N_CASES; ci++) {
                const struct bcase *c = &cases[ci];
                if ((strcmp(c->set, "bench") && strcmp(c->set, "q8_0")) || !c->per_token ||
                    (c->kind != MXFP4 && c->kind != BF16 && c->kind != Q8_0) ||
                    !run.res[ci][vi][ti][t1].us)
                    continue;
                int k = c->kind == Q8_0 ? 2 : c->kind == BF16;
                us[k] += run.res[ci][vi][ti][t1].us * c->per_token;
                b[k] += (double)case_bytes(c) * c->per_token;
            }
            for (int k = 0; k < 3; k++) {
                if (!b[k])
                    continue;
                double rate = b[k] / us[k] / 1e3, copy = run.mem[ti].copy.median;
                cal[vi][ti][k] = rate / threads;
                printf("  %-10s %d thread(s): %-5s %6.2f GB/s = %6.2f GB/s per core = %.2f x "
                       "STREAM copy\n",
                       run.vars[vi]->name, threads, name[k], rate, cal[vi][ti][k], rate / copy);
                csv_row("planner", row[k], kind[k], 0, 0, 1, run.vars[vi]->name, threads, b[k],
                        (struct stat3){cal[vi][ti][k], 0, 0}, us[k], rate / copy, 0);
            }
        }
}

/* The index of thread count 1 in --threads, -1 when absent. */
static int one_thread_index(void)
{
    int one = -1;
    for (int ti = 0; ti < o.threads.n; ti++)
        if (o.threads.v[ti] == 1)
            one = ti;
    return one;
}

/* The goals, for the best variant: MXFP4 mat-vec at the most threads against the
 * memory (STREAM copy at the start and at the end of the run; a read sweep of the same
 * expert weights interleaved with the kernel), and the scaling from one thread to the
 * most beside the read sweep's own (a kernel as fast as the memory scales as the memory
 * does).  one_t, most: thread count indices. */
static void report_goals(int t1, int one_t, int most)
{
    double us1 = 0, usn = 0, b = 0, read_us = 0, read1_us = 0, c1_us = 0, cn_us = 0;
    for (int ci = 0; ci < N_CASES; ci++) {
        const struct bcase *c = &cases[ci];
        if (strcmp(c->set, "bench") || c->kind != MXFP4 || !c->per_token)
            continue;
        double token_bytes = (double)case_bytes(c) * c->per_token;
        us1 += run.res[ci][0][one_t][t1].us * c->per_token;
        usn += run.res[ci][0][most][t1].us * c->per_token;
        b += token_bytes;
        read_us += token_bytes / run.case_read[ci][most].median / 1e3;
        read1_us += token_bytes / run.case_read[ci][one_t].median / 1e3;
        c1_us += token_bytes / run.ceiling[ci][0][one_t][t1].median / 1e3;
        cn_us += token_bytes / run.ceiling[ci][0][most][t1].median / 1e3;
    }
    int n = o.threads.v[most];
    double rate = b / usn / 1e3, read = b / read_us / 1e3;
    double copy = run.mem[most].copy.median, copy_end = run.mem_end[most].copy.median;
    printf("\ngoals (%s, k3-bench experts, T = 1, weights in RAM):\n", run.vars[0]->name);
    printf("  MXFP4 mat-vec at %d threads: %.2f GB/s = %.2f x STREAM copy at the start (%.2f "
           "GB/s), %.2f x at the end (%.2f GB/s) (goal >= 0.8) = %.2f x a read sweep of the "
           "same weights (%.2f GB/s)\n",
           n, rate, rate / copy, copy, rate / copy_end, copy_end, rate / read, read);
    printf("  scaling 1 -> %d threads: %.2fx (goal >= 1.8); the read sweep of the same "
           "weights %.2fx\n", n, us1 / usn, read1_us / read_us);
    printf("  compute ceiling (weights in L1): %.2f GB/s at 1 thread, %.2f at %d; from RAM "
           "the kernel reaches %.2f of it at 1 thread and %.2f at %d\n",
           b / c1_us / 1e3, b / cn_us / 1e3, n, c1_us / us1, cn_us / usn, n);
    /* Two bounds no kernel can pass, both set by the host in this run: the cores' own
     * scaling (on a shared host two busy vCPUs may run slower than one), and how much
     * more the memory gives at the most threads than the one-thread kernel already takes. */
    printf("  bounds on the scaling in this run: the cores' own compute scaled %.2fx "
           "(the ceiling); the memory, read at %d threads, gives %.2fx the kernel's "
           "1-thread rate\n",
           c1_us / cn_us, n, us1 / read_us);
    double q1 = 0, qn = 0, qb = 0;
    for (int ci = 0; ci < N_CASES; ci++) {
        const struct bcase *c = &cases[ci];
        if (strcmp(c->set, "bench") || c->kind != MXFP4_Q8 || !run.res[ci][0][most][t1].us)
            continue;
        int w = c->rows == 3072 ? 2 : 1; /* w1 and w3 per w2, as the per-token mix */
        q1 += run.res[ci][0][one_t][t1].us * w;
        qn += run.res[ci][0][most][t1].us * w;
        qb += (double)case_bytes(c) * w;
    }
    if (qb > 0)
        printf("  with int8 activations (K3_MXFP4_ACT=q8, off by default): %.2f GB/s at %d "
               "threads = %.2f x STREAM copy; scaling %.2fx\n",
               qb / qn / 1e3, n, qb / qn / 1e3 / copy, q1 / qn);
}

/* x rounded to `decimals` places, as a JSON number. */
static json_t *rounded(double x, int decimals)
{
    double scale = pow(10, decimals);
    return json_real(round(x * scale) / scale);
}

/* The planner's many-row rates (k3-uring plan reads mxfp4_gflops_per_core and
 * bf16_gflops_per_core for a prompt pass): the best variant's GFLOP/s at one thread and
 * MANY_ROWS_TOKENS tokens, the mean of the MXFP4 (w1/w3, w2) and of the bf16 cases' medians;
 * nothing when the run measured no such figure. */
#define MANY_ROWS_TOKENS 64
static int add_many_row_rates(json_t *root)
{
    int one = one_thread_index(), xi = 0, vi = first_gflops_variant();
    while (xi < o.gflops_tokens.n && o.gflops_tokens.v[xi] != MANY_ROWS_TOKENS)
        xi++;
    if (one < 0 || xi == o.gflops_tokens.n)
        return 0;
    double sum[2] = {0, 0};
    int n[2] = {0, 0};
    for (int gi = 0; gi < N_GCASES; gi++) {
        int k = gcases[gi].kind == BF16 ? 1 : gcases[gi].kind == MXFP4 ? 0 : -1;
        if (k < 0 || strcmp(gcases[gi].set, "gflops") || !gf.measured[gi][xi][vi])
            continue;
        sum[k] += gf.gflops[gi][xi][vi][one].median;
        n[k]++;
    }
    const char *key[2] = {"mxfp4_gflops_per_core", "bf16_gflops_per_core"};
    int rc = 0;
    for (int k = 0; k < 2; k++)
        if (n[k])
            rc |= json_object_set_new(root, key[k], rounded(sum[k] / n[k], 1));
    if (n[0] || n[1]) {
        char source[160];
        snprintf(source, sizeof source, "bench/kernels.sh: %s, one thread, %d tokens, full K3 "
                 "expert shapes, mean of the cases' medians", run.vars[vi]->name, MANY_ROWS_TOKENS);
        rc |= json_object_set_new(root, "gflops_per_core_source", json_string(source));
    }
    return rc;
}

/* Adds set gflops's medians, when measured, to root: "gflops_source" and "gflops", and
 * the many-row rates. */
static int add_gflops(json_t *root)
{
    if (!set_chosen("gflops") && !set_chosen("q8_0"))
        return 0;
    if (add_many_row_rates(root))
        return -1;
    char source[256];
    snprintf(source, sizeof source, "bench/kernels.sh: 2 flops per weight per token, full K3 "
             "expert shapes, medians of %d reps; peak: %s FMA chains on every thread, measured "
             "in turn", o.reps, peak.zmm ? "zmm" : "ymm");
    json_t *list = json_array();
    int rc = json_object_set_new(root, "gflops_source", json_string(source)) |
             json_object_set_new(root, "gflops", list);
    for (int gi = 0; gi < N_GCASES; gi++)
        for (int xi = 0; xi < o.gflops_tokens.n; xi++)
            for (int vi = 0; vi < run.n_vars; vi++)
                for (int ti = 0; gf.measured[gi][xi][vi] && ti < o.threads.n; ti++) {
                    double best = gf.gflops[gi][xi][vi][ti].max / gf.peak[gi][xi][ti].max;
                    rc |= json_array_append_new(list, json_pack(
                        "{s:s, s:s, s:i, s:i, s:i, s:s, s:i, s:o, s:o, s:o, s:o}",
                        "case", gcases[gi].name, "kind", kind_name[gcases[gi].kind],
                        "rows", gcases[gi].rows, "cols", gcases[gi].cols,
                        "tokens", o.gflops_tokens.v[xi], "variant", run.vars[vi]->name,
                        "threads", o.threads.v[ti],
                        "gflops", rounded(gf.gflops[gi][xi][vi][ti].median, 2),
                        "peak_gflops", rounded(gf.peak[gi][xi][ti].median, 2),
                        "frac_of_peak", rounded(gf.frac[gi][xi][vi][ti].median, 4),
                        "best_frac_of_peak", rounded(best, 4)));
                }
    return rc ? -1 : 0;
}

/* root written to o.json (and freed), unless building it failed; what it is, said on
 * stdout. */
static int write_json(json_t *root, int failed, const char *what)
{
    int rc = failed || !root ? -1 : json_dump_file(root, o.json, JSON_INDENT(2) | JSON_REAL_PRECISION(12));
    json_decref(root);
    if (failed || !root)
        fprintf(stderr, "kernels: %s: out of memory building the JSON\n", o.json);
    else if (rc)
        fprintf(stderr, "kernels: %s: %s\n", o.json, strerror(errno));
    else
        printf("kernels: %s: %s\n", what, o.json);
    return rc ? -1 : 0;
}

/* Only set gflops's figures (the run measured no calibration). */
static int write_gflops_only(void)
{
    json_t *root = json_pack("{s:i}", "cores_measured", o.threads.v[o.threads.n - 1]);
    return write_json(root, root && add_gflops(root), "GFLOP/s figures (no calibration in this run)");
}

/* The calibration k3-uring plan --calibration reads: the first (best) variant at one
 * thread (one core alone; the plan caps cores x rate by the memory bandwidth itself). */
static int write_calibration(double cal[4][MAX_THREADS][3], int one)
{
    char source[128];
    snprintf(source, sizeof source, "bench/kernels.sh: k3-bench decode mix, T = 1, one thread, "
             "weights in RAM, medians of %d reps", o.reps);
    json_t *root = json_pack("{s:s, s:s, s:o, s:o}", "source", source,
                             "variant", run.vars[0]->name,
                             "mxfp4_gbps_per_core", rounded(cal[0][one][0], 3),
                             "bf16_gbps_per_core", rounded(cal[0][one][1], 3));
    int bad = !root;
    if (root && cal[0][one][2] > 0)
        bad |= json_object_set_new(root, "q8_0_gbps_per_core", rounded(cal[0][one][2], 3));
    for (int ti = 0; root && ti < o.threads.n; ti++) {
        int threads = o.threads.v[ti];
        char key[32];
        snprintf(key, sizeof key, "threads_%d", threads);
        bad |= json_object_set_new(root, key, json_pack(
            "{s:o, s:o, s:o, s:o}", "mxfp4_gbps", rounded(cal[0][ti][0] * threads, 3),
            "bf16_gbps", rounded(cal[0][ti][1] * threads, 3),
            "stream_copy_gbps", rounded(run.mem[ti].copy.median, 3),
            "read_gbps", rounded(run.mem[ti].read.median, 3)));
    }
    if (root)
        bad |= json_object_set_new(root, "cores_measured",
                                   json_integer(o.threads.v[o.threads.n - 1])) |
               add_gflops(root);
    return write_json(root, bad, "calibration for k3-uring plan --calibration");
}

/* The summaries over k3-bench's decode token, when the run measured all of them. */
static int report_summaries(void)
{
    int t1 = -1;
    for (int i = 0; i < o.tokens.n; i++)
        if (o.tokens.v[i] == 1)
            t1 = i;
    if (set_chosen("q8_0") && !set_chosen("bench") && t1 >= 0) {
        static double cal[4][MAX_THREADS][3];
        report_planner(t1, cal); /* the q8_0 rate alone: a calibration needs set bench too */
    }
    if (set_chosen("bench") && t1 >= 0 && !(o.only && o.only[0])) {
        static double cal[4][MAX_THREADS][3];
        report_per_token(t1);
        report_planner(t1, cal);
        int one = one_thread_index(), most = o.threads.n - 1;
        if (one >= 0 && most != one)
            report_goals(t1, one, most);
        if (o.json && o.json[0] && one >= 0)
            return write_calibration(cal, one);
    }
    if (o.json && o.json[0] && (set_chosen("gflops") || set_chosen("q8_0")))
        return write_gflops_only();
    return 0;
}

/* The MXFP4 kernels' scratch, as the engine plans it: the most tokens of --tokens, the
 * widest case, a slot per thread. */
static void *bind_mxfp4_scratch(void)
{
    int max_T = max_tokens(&o.tokens), max_cols = 1, threads = omp_get_max_threads();
    if (set_chosen("gflops") && max_tokens(&o.gflops_tokens) > max_T)
        max_T = max_tokens(&o.gflops_tokens);
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        max_cols = cases[i].cols > max_cols ? cases[i].cols : max_cols;
    size_t bytes = k3_mxfp4_scratch_bytes(max_T, max_cols, threads);
    void *mem = aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (!mem) {
        fprintf(stderr, "kernels: out of memory for the MXFP4 scratch (%zu bytes)\n", bytes);
        exit(1);
    }
    k3_mxfp4_scratch_bind(mem, max_T, max_cols, threads);
    return mem;
}

int main(int argc, char **argv)
{
    const char *usage = "usage: kernels [options]\n\n"
                        "GB/s of weights the mat-vec kernels consume, per variant and thread "
                        "count, beside the memory's.";
    struct k3_err err = {{0}};
    int rc = k3_opts_parse(opt_table, N_OPTS, argc, argv, &err);
    if (rc > 0) {
        k3_opts_help(stdout, usage, opt_table, N_OPTS);
        return 0;
    }
    if (rc) {
        fprintf(stderr, "kernels: %s\n", err.msg);
        return 2;
    }
    if (!choose_variants()) {
        fprintf(stderr, "kernels: no variant of --variants runs on this CPU\n");
        return 2;
    }
    print_setup();
    if (open_csv())
        return 1;
    memory_rows(false, run.mem);
    run.arena = big_alloc((size_t)o.arena_mib << 20);
    void *scratch = bind_mxfp4_scratch();
    rc = measure_cases();
    if (!rc)
        rc = measure_gflops();
    /* The memory again (the machine is shared, its bandwidth drifts), before the summaries
     * so that the goals can be set against both ends of the run. */
    if (!rc)
        memory_rows(true, run.mem_end);
    if (!rc)
        rc = report_summaries();
    if (csv && fclose(csv) && !rc) {
        fprintf(stderr, "kernels: %s: %s\n", o.csv, strerror(errno));
        rc = -1;
    }
    k3_mxfp4_scratch_unbind(scratch);
    free(scratch);
    free(run.arena);
    return rc ? 1 : 0;
}
