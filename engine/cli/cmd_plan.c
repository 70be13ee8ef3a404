/* `k3-uring plan`: the memory floor and how a RAM budget is spent, for any config of
 * the family, without its weights (the full K3 included), its trunk as bf16 or Q8_0
 * (--trunk-type), and which of the two is faster on the box described; with --ranks R,
 * s/token for R such boxes sharing the routed experts (mpirun -np R). */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

#include "engine/base/options.h"
#include "engine/cli/cli.h"
#include "engine/cli/model_args.h"
#include "engine/forward/forward.h"
#include "engine/model/config.h"
#include "engine/model/tensors.h"
#include "engine/model/trunk_type.h"
#include "engine/plan/pack_sizes.h"
#include "engine/plan/project.h"
#include "engine/plan/rates.h"
#include "engine/routes/hit_curve.h"
#include "engine/runtime/runtime.h"
#include "engine/serve/prompt_store.h"
#include "engine/serve/sched.h"
#include "engine/stream/budget.h"
#include "engine/stream/stream.h"

/* One decode step of the planned box, printed; returns the pipelined s/token. */
static double print_decode(const struct k3_planned *p, const struct k3_box *box)
{
    const struct k3_rates *r = &box->rates;
    struct k3_projection pr = k3_project_decode(p, box);
    const struct k3_step_bytes *st = &pr.st;
    printf("projection for %d drives x %.2f GB/s, %d cores on %d NUMA nodes (%.0f GB/s memory "
           "each), %.2f / %.2f GB/s per core (MXFP4 / bf16), %.2f core s per GB read:\n",
           box->drives, box->drive_gbps, box->cores, box->nodes, box->mem_gbps, r->mxfp4_core,
           r->bf16_core, r->read_cpu);
    printf("  read per token        %8.2f GB  (experts %.2f, trunk streamed %.2f; cache hits %.1f%%%s)\n",
           st->read / 1e9, st->expert_bytes * (1 - st->hit) / 1e9, st->trunk_read / 1e9,
           100 * st->hit, p->curve.n ? " by the hit curve" : "");
    printf("  I/O floor             %8.3f s/token\n", pr.io);
    printf("  compute               %8.3f s/token  (%.2f GB MXFP4, %.2f GB bf16, %.3f s the read "
           "path's CPU)\n", pr.compute, st->expert_bytes / 1e9, (st->trunk_compute - st->trunk_q8) / 1e9,
           pr.read_cpu);
    if (st->trunk_q8 > 0)
        printf("  trunk as q8_0         %8.2f GB/token of Q8_0 at %.2f GB/s per core (%.1f GFLOP/s "
               "per core over many rows)\n", st->trunk_q8 / 1e9, r->q8_core, r->q8_gflops);
    printf("  pipelined             %8.3f s/token  (the larger: reads and compute overlap)\n",
           pr.pipelined);
    printf("  without prediction    %8.3f s/token  (%.3f s of compute before each layer's "
           "routing is known, the drives idle; then the larger)\n", pr.without_prediction,
           pr.before_routing);
    printf("  synchronous           %8.3f s/token  (reads, then compute)\n", pr.synchronous);
    return pr.pipelined;
}

static void print_prompt(const struct k3_planned *p, const struct k3_box *box, int n)
{
    double read_pass, read_steps;
    double t_pass = k3_project_prompt(p, box, n, p->b->rows, &read_pass);
    double t_steps = k3_project_prompt(p, box, n, K3_CHUNK, &read_steps);
    printf("a prompt of %d tokens (many-row rates %.1f / %.1f GFLOP/s per core, MXFP4 / bf16; "
           "routing uniform):\n", n, box->rates.mxfp4_gflops, box->rates.bf16_gflops);
    printf("  passes of %d rows     %8.2f s  (%.1f GB read, %.3f s a token)\n", p->b->rows,
           t_pass, read_pass / 1e9, t_pass / n);
    printf("  steps of %d rows       %8.2f s  (%.1f GB read, %.3f s a token)\n", K3_CHUNK,
           t_steps, read_steps / 1e9, t_steps / n);
}

static void print_ranks(const struct k3_planned *p, const struct k3_box *box, int R, bool dealt,
                        const struct k3_net *net, double one_box)
{
    const struct k3_config *c = p->c;
    double moe = k3_moe_layer_count(c), k = c->top_k;
    struct k3_ranks_projection rp = k3_project_ranks(p, box, R, dealt, net);
    const struct k3_projection *pr = &rp.one;
    const struct k3_step_bytes *st = &pr->st;
    if (dealt)
        printf("projection for %d such boxes (mpirun -np %d: the trunk and every expert on each, "
               "a layer's choices dealt out by position), linked at %.0f Gb/s with %.1f us per "
               "exchange:\n", R, R, net->gbps, net->us);
    else
        printf("projection for %d such boxes (mpirun -np %d: the trunk on each, expert e on box "
               "e mod %d), linked at %.0f Gb/s with %.1f us per exchange:\n",
               R, R, R, net->gbps, net->us);
    printf("  experts per layer     %8.2f on the busiest box of %d a token routes to (%s; an "
           "even split is %.2f)\n", rp.busiest, c->top_k,
           dealt ? "dealt" : "exact expected maximum over the boxes", k / R);
    printf("  read per token        %8.2f GB on the busiest box  (experts %.2f; cache hits %.1f%% "
           "of its %.0f experts a layer)\n", st->read / 1e9, st->expert_bytes * (1 - st->hit) / 1e9,
           100 * st->hit, rp.owned);
    printf("  between boxes         %8.2f MB/token in all  (%.0f MoE layers x %d outputs of %.0f "
           "B, each to the %d other boxes; %.2f MB sent per box)\n", rp.total_bytes / 1e6, moe,
           c->top_k, rp.output_bytes, R - 1, rp.total_bytes / R / 1e6);
    printf("  I/O floor             %8.3f s/token\n", pr->io);
    printf("  compute               %8.3f s/token  (%.2f GB MXFP4, %.2f GB bf16, %.3f s the read "
           "path's CPU)\n", pr->compute, st->expert_bytes / 1e9,
           (st->trunk_compute - st->trunk_q8) / 1e9, pr->read_cpu);
    printf("  exchange              %8.3f s/token  (%.0f x (%.1f us + %.0f KB on the busiest "
           "box's link))\n", pr->exchange, moe, net->us, rp.link_bytes / 1e3);
    printf("  pipelined             %8.3f s/token  (the larger: reads overlap compute and the "
           "exchange; %.2f x one box's)\n", pr->pipelined, pr->pipelined / one_box);
    printf("  without prediction    %8.3f s/token  (%.3f s of compute before each layer's "
           "routing is known and the exchange, the drives idle; then the larger)\n",
           pr->without_prediction, pr->before_routing);
    printf("  synchronous           %8.3f s/token  (reads, then compute, then the exchange)\n",
           pr->synchronous);
}

/* What a plan is made from, whatever the trunk type. */
struct box_plan {
    const struct k3_config *c;
    const char *config;
    int drives, ctx, seqs, rows, threads, nodes;
    bool predict_ids; /* --predict-from ids: its counts in the floor */
    uint64_t store;            /* serve's beside its sequences: the prompt store, adjusted rows */
    struct k3_hit_rates curve; /* --hit-curve */
};

/* One trunk type's budget and what the projection reads of it. */
struct plan_of {
    struct k3_plan_pack pack; /* freed by the caller */
    struct k3_budget_input in;
    struct k3_budget b;
    struct k3_planned p;
};

/* The budget of trunk type tt at *ram (K3_RAM_FLOOR or K3_RAM_TRUNK: resolved for tt, into
 * *ram); -1 with err when it does not fit. */
static int plan_type(const struct box_plan *bp, enum k3_trunk_type tt, uint64_t *ram,
                     struct plan_of *pl, struct k3_err *err)
{
    *pl = (struct plan_of){0};
    int rc = k3_plan_pack_of(bp->c, bp->config, bp->drives, tt, &pl->pack, err);
    if (!rc) {
        /* the runtime's caller buffers for these sequences, and serve's prompt store */
        uint64_t caller = k3_runtime_caller_bytes(bp->c->vocab, bp->seqs, false).fixed + bp->store;
        pl->in = k3_budget_input_of(bp->c, &pl->pack.pack,
                                    &(struct k3_budget_run){
                                        .ctx = bp->ctx,
                                        .seqs = bp->seqs,
                                        .threads = bp->threads,
                                        .teams = bp->nodes,
                                        .rows = bp->rows,
                                        .prefetch_k = K3_PREFETCH_K_DEFAULT,
                                        .caller_bytes = caller,
                                        .predict_ids = bp->predict_ids,
                                    });
        k3_budget_plan(&pl->in, UINT64_MAX, &pl->b, NULL); /* the floor, whatever the budget */
        if (*ram == K3_RAM_FLOOR)
            *ram = pl->b.floor;
        else if (*ram == K3_RAM_TRUNK)
            *ram = k3_budget_trunk_resident(&pl->in);
        rc = k3_budget_plan(&pl->in, *ram, &pl->b, err);
    }
    pl->p = (struct k3_planned){.c = bp->c, .in = &pl->in, .b = &pl->b,
                                .overlapping = pl->pack.overlapping, .q8 = pl->pack.q8, .tt = tt,
                                .curve = bp->curve};
    return rc;
}

/* Which trunk type is faster on this box at the same budget: the other one planned and
 * projected beside the one shown (t, s/token). */
static void compare_types(const struct box_plan *bp, const struct k3_box *box, enum k3_trunk_type tt,
                          uint64_t ram, double t)
{
    enum k3_trunk_type other = tt == K3_TRUNK_BF16 ? K3_TRUNK_Q8_0 : K3_TRUNK_BF16;
    struct plan_of pl;
    struct k3_err err;
    if (plan_type(bp, other, &ram, &pl, &err)) {
        printf("  trunk type            %s: %.3f s/token; %s does not fit this budget\n",
               k3_trunk_type_name(tt), t, k3_trunk_type_name(other));
        k3_plan_pack_free(&pl.pack);
        return;
    }
    double u = k3_project_decode(&pl.p, box).pipelined, trunk = 0;
    for (int i = 0; i < pl.in.n_segments; i++)
        trunk += (double)pl.in.segment_bytes[i];
    const char *faster = t <= u ? k3_trunk_type_name(tt) : k3_trunk_type_name(other);
    printf("  trunk type            %s %.3f s/token; %s %.3f (its trunk %.2f GB, %.2f resident "
           "in this budget): %s is faster here (pack --trunk-type %s)\n",
           k3_trunk_type_name(tt), t, k3_trunk_type_name(other), u, trunk / 1e9,
           (double)pl.b.resident_bytes / 1e9, faster, faster);
    k3_plan_pack_free(&pl.pack);
}

/* --hit-curve: a curve of the config's experts per layer at most. */
static int load_curve(const char *path, const struct k3_config *c, double **rate, int *n,
                      struct k3_err *err)
{
    if (!(*rate = malloc(sizeof(double) * (size_t)(c->n_experts + 1))))
        return k3_errf(err, "out of memory");
    return k3_hit_curve_read(path, *rate, c->n_experts, n, err) ? k3_err_prefix(err, "--hit-curve")
                                                                : 0;
}

int cmd_plan(int argc, char **argv)
{
    static const struct k3_opt_choice ram_choices[] = {
        {"floor", K3_RAM_FLOOR}, {"trunk", K3_RAM_TRUNK}, {NULL, 0}};
    const char *config = "k3", *calibration = NULL, *trunk_type = "bf16", *curve_path = NULL;
    int ctx = 4096, seqs = 0, drives = 8, threads = 0, cores = 0, nodes = 1, ranks = 1, dealt = 0;
    int rows = K3_BATCH_DEFAULT, prompt = 0, predict_from = K3_PREDICT_MOE_INPUT_NEXT;
    static const struct k3_opt_choice split_choices[] = {{"owner", 0}, {"dealt", 1}, {NULL, 0}};
    float drive_gbps = 7.0f, mem_gbps = 150.0f;
    float net_gbps = 100.0f, net_us = 5.0f; /* 100 Gb Ethernet; an RDMA-like exchange */
    uint64_t ram = K3_RAM_FLOOR, cache_ram = UINT64_MAX;
    const struct k3_opt opts[] = {
        {.name = "config", .short_name = 'c', .type = K3_OPT_STRING, .dst = &config,
         .arg = "NAME|FILE", .help = "k3, k3-bench, k3-slice, k3-dsv2, k3-tiny or a config.json"},
        {.name = "ram", .type = K3_OPT_SIZE, .dst = &ram, .choices = ram_choices, .min = 1,
         .help = "budget to plan; floor: the least that runs, trunk: the whole trunk resident"},
        {.name = "ctx", .type = K3_OPT_INT, .dst = &ctx, .arg = "N",
         .help = "context positions each sequence holds", .min = 1, .max = 1 << 24},
        {.name = "cache-ram", .type = K3_OPT_SIZE, .dst = &cache_ram, .arg = "SIZE",
         .help = "serve's prompt store", .def = "serve's: --parallel states of --ctx; none "
                 "without --parallel"},
        {.name = "parallel", .type = K3_OPT_INT, .dst = &seqs, .arg = "N",
         .help = "sequences held at once (serve --parallel)", .min = 1, .max = K3_CHUNK},
        {.name = "batch-size", .short_name = 'b', .type = K3_OPT_INT, .dst = &rows, .arg = "N",
         .help = "prompt rows one pass may take, at most (run's -b)", .min = 1, .max = 1 << 20},
        {.name = "prompt", .type = K3_OPT_INT, .dst = &prompt, .arg = "N",
         .help = "also project a prompt of N tokens: in passes of the budget's rows, and in "
                 "32-row steps", .min = 0, .max = 1 << 24},
        {.name = "trunk-type", .type = K3_OPT_STRING, .dst = &trunk_type, .arg = "bf16|q8_0",
         .help = "the trunk's large matrices as shipped (bf16) or as Q8_0 (pack --trunk-type); "
                 "the plan also says which is faster for this box"},
        {.name = "drives", .type = K3_OPT_INT, .dst = &drives, .arg = "N",
         .help = "drives the pack stripes over", .min = 1, .max = 256},
        {.name = "drive-gbps", .type = K3_OPT_FLOAT, .dst = &drive_gbps, .arg = "GB/s",
         .help = "read bandwidth of each drive", .min = 0.001, .max = 1000},
        {.name = "cores", .type = K3_OPT_INT, .dst = &cores, .arg = "N",
         .help = "compute cores; 0 = this machine's", .min = 0, .max = 65536},
        {.name = "numa-nodes", .type = K3_OPT_INT, .dst = &nodes, .arg = "N",
         .help = "NUMA nodes (memory bandwidth scales with them)", .min = 1, .max = 64},
        {.name = "mem-gbps", .type = K3_OPT_FLOAT, .dst = &mem_gbps, .arg = "GB/s",
         .help = "memory bandwidth per NUMA node", .min = 1, .max = 10000},
        {.name = "predict-from", .type = K3_OPT_ENUM, .dst = &predict_from,
         .choices = k3_predict_from_choices,
         .help = "run's --predict-from: ids holds co-occurrence counts, counted in the floor"},
        {.name = "hit-curve", .type = K3_OPT_STRING, .dst = &curve_path, .arg = "FILE",
         .help = "the cache's hit rate against its records per layer, measured (replay "
                 "--hit-curve), instead of uniform routing's", .def = "uniform"},
        {.name = "calibration", .type = K3_OPT_STRING, .dst = &calibration, .arg = "FILE",
         .help = "per-core compute rates (JSON): bench/kernels.sh's kernels, or "
                 "bench/slice-project.sh's k3-slice layers at K3's widths; and optionally "
                 "read_cpu_s_per_gb (k3-uring iobench prints it)",
         .def = "built in: engine/plan/calibration.json"},
        {.name = "threads", .short_name = 't', .type = K3_OPT_INT, .dst = &threads, .arg = "N",
         .help = "compute threads; 0 = one per core", .min = 0, .max = 4096},
        {.name = "ranks", .type = K3_OPT_INT, .dst = &ranks, .arg = "R",
         .help = "also project R such boxes sharing the routed experts (mpirun -np R), each "
                 "with the drives and cores above", .min = 1, .max = K3_MAX_RANKS},
        {.name = "split", .type = K3_OPT_ENUM, .dst = &dealt, .choices = split_choices,
         .help = "--ranks: owner: each box holds its share (pack --ranks), expert e on box e "
                 "mod R; dealt: each holds every expert, a layer's choices dealt out evenly"},
        {.name = "net-gbps", .type = K3_OPT_FLOAT, .dst = &net_gbps, .arg = "Gb/s",
         .help = "link between boxes, gigabits per second (--ranks)", .min = 0.001, .max = 100000},
        {.name = "net-us", .type = K3_OPT_FLOAT, .dst = &net_us, .arg = "us",
         .help = "latency of one exchange of expert outputs between boxes (--ranks)", .min = 0,
         .max = 1e6},
    };
    const char *usage = "usage: k3-uring plan [--config k3] [--ram 8G] [--ctx 4096] [--drives 8] "
                        "[--drive-gbps 7] [--cores 128] [--numa-nodes 2] [--ranks R]";
    struct k3_err err = {{0}};
    int rc = k3_opts_parse(opts, K3_OPTS_COUNT(opts), argc, argv, &err);
    if (rc > 0) {
        k3_opts_help(stdout, usage, opts, K3_OPTS_COUNT(opts));
        return 0;
    }
    if (rc) {
        fprintf(stderr, "k3-uring plan: %s\n", err.msg);
        return 2;
    }
    struct k3_box box = {.drives = drives, .drive_gbps = drive_gbps,
                         .cores = cores ? cores : omp_get_num_procs(), .nodes = nodes,
                         .mem_gbps = mem_gbps};
    struct k3_config c;
    if (calibration ? k3_rates_load(calibration, &box.rates, &err)
                    : k3_rates_builtin(&box.rates, &err)) {
        /* the messages open with the file's name */
        fprintf(stderr, "k3-uring plan: %s%s\n", calibration ? "--calibration " : "", err.msg);
        return 1;
    }
    if (k3_config_named(&c, config, &err)) {
        fprintf(stderr, "k3-uring plan: %s\n", err.msg);
        return 1;
    }
    enum k3_trunk_type tt = K3_TRUNK_BF16;
    rc = k3_trunk_type_parse(trunk_type, &tt, &err);
    if (rc) {
        fprintf(stderr, "k3-uring plan: %s\n", err.msg);
        k3_config_free(&c);
        return 2;
    }
    double *curve = NULL;
    int curve_n = 0;
    if (curve_path && load_curve(curve_path, &c, &curve, &curve_n, &err)) {
        fprintf(stderr, "k3-uring plan: %s\n", err.msg);
        free(curve);
        k3_config_free(&c);
        return 1;
    }
    /* --parallel plans serve: its sequences, its prompt store (serve's default
     * --cache-ram unless given) and its adjusted logit rows; without it, run's one
     * sequence. */
    if (cache_ram == UINT64_MAX)
        cache_ram = seqs ? (uint64_t)seqs * k3_prompt_store_entry_bytes(&c, ctx) : 0;
    uint64_t serve_bytes = cache_ram + (seqs ? k3_sched_adjust_bytes(c.vocab, seqs) : 0);
    struct box_plan bp = {.c = &c, .config = config, .drives = drives, .ctx = ctx,
                          .seqs = seqs ? seqs : 1, .store = serve_bytes,
                          .rows = seqs ? k3_sched_rows(rows, seqs) : rows,
                          .threads = threads ? threads : box.cores, .nodes = nodes,
                          .predict_ids = predict_from == K3_PREDICT_IDS,
                          .curve = {curve, curve_n}};
    struct plan_of pl;
    rc = plan_type(&bp, tt, &ram, &pl, &err);
    if (!rc) {
        printf("%s over %d drives, %d threads:\n", config, drives, pl.in.threads);
        k3_budget_print(stdout, &pl.b, &pl.in);
        double one_box = print_decode(&pl.p, &box);
        compare_types(&bp, &box, tt, ram, one_box);
        if (prompt)
            print_prompt(&pl.p, &box, prompt);
        if (ranks > 1)
            print_ranks(&pl.p, &box, ranks, dealt, &(struct k3_net){net_gbps, net_us}, one_box);
    } else {
        fprintf(stderr, "k3-uring plan: %s\n", err.msg);
    }
    k3_plan_pack_free(&pl.pack);
    free(curve);
    k3_config_free(&c);
    return rc ? 1 : 0;
}
