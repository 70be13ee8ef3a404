/* `k3-uring plan`: the memory floor and how a RAM budget is spent, for any config of
 * the family, without its weights (the full K3 included), its trunk as bf16 or Q8_0
 * (--trunk-type), and which of the two is faster on the box described; with --ranks R,
 * s/token for R such boxes sharing the routed experts (mpirun -np R). */
#include <jansson.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "engine/base/files.h"
#include "engine/runtime/runtime.h"
#include "engine/serve/prompt_store.h"
#include "engine/serve/sched.h"
#include "engine/stream/budget.h"
#include "engine/cli/cli.h"
#include "engine/cli/model_args.h"
#include "engine/model/config.h"
#include "engine/routes/hit_curve.h"
#include "engine/model/config_presets.h"
#include "engine/model/share.h"
#include "engine/forward/forward.h"
#include "engine/base/options.h"
#include "engine/pack/pack_format.h"
#include "engine/pack/pack_plan.h"
#include "engine/model/tensors.h"
#include "engine/model/trunk_type.h"
#include "engine/stream/stream.h"

/* Bytes of the file dir/name, 0 when there is none. */
static uint64_t file_bytes(const char *dir, const char *name)
{
    char path[K3_PATH_MAX];
    struct stat st;
    if (k3_path_join(path, sizeof path, dir, name, NULL) || stat(path, &st))
        return 0;
    return (uint64_t)st.st_size;
}

/* The manifest's sections besides the tables: the config as pack stores it (the file's
 * bytes, or a preset's text), and, for a config.json inside a checkpoint folder, that
 * folder's tokenizer files. */
static void checkpoint_sections(const char *config, const struct k3_tensor_spec *specs, int n,
                                struct k3_pack_sections *sec)
{
    *sec = (struct k3_pack_sections){.n_tensors = (uint64_t)n};
    for (int i = 0; i < n; i++)
        sec->names += strlen(specs[i].name) + 1;
    if (k3_config_preset(config)) {
        sec->config = strlen(k3_config_preset(config));
        return;
    }
    char dir[K3_PATH_MAX];
    snprintf(dir, sizeof dir, "%s", config);
    char *slash = strrchr(dir, '/');
    if (slash)
        *slash = 0;
    else
        snprintf(dir, sizeof dir, ".");
    sec->config = file_bytes(dir, slash ? slash + 1 : config);
    sec->tiktoken = file_bytes(dir, "tiktoken.model");
    sec->tokconfig = file_bytes(dir, "tokenizer_config.json");
}

/* Each spec's bytes as synth stores it, its large matrices as trunk type tt holds them
 * ([n], malloc'd; NULL when out of memory); in *vectors the small tensors' bytes as the
 * model keeps them (f32), in *q8 the Q8_0 matrices' bytes. */
static uint64_t *spec_bytes(const struct k3_tensor_spec *specs, int n, enum k3_trunk_type tt,
                            uint64_t *vectors, double *q8)
{
    uint64_t *bytes = calloc((size_t)n, sizeof *bytes);
    *vectors = 0;
    *q8 = 0;
    for (int i = 0; bytes && i < n; i++) {
        int64_t numel = 1;
        for (int d = 0; d < specs[i].ndim; d++)
            numel *= specs[i].shape[d];
        enum k3_dtype dt = k3_spec_trunk_dtype(&specs[i], tt);
        bytes[i] = k3_dtype_bytes(dt, numel);
        if (specs[i].kind != K3_T_MATRIX)
            *vectors += (uint64_t)numel * 4;
        if (dt == K3_DT_Q8_0)
            *q8 += (double)bytes[i];
    }
    return bytes;
}

/* Trunk weight bytes a decode step computes while its layer's reads are in flight: each
 * MoE layer's latent down projection and shared experts, which forward/moe.c runs between
 * the router and the routed experts.  The rest of the trunk (layer 0, attention, routers,
 * the latent up projection, the output head) runs with no read of that layer
 * outstanding: the drives idle through it unless a prediction has them reading ahead. */
static double overlapping_trunk_bytes(const struct k3_tensor_spec *specs, int n,
                                      const uint64_t *bytes)
{
    double sum = 0;
    for (int i = 0; i < n; i++)
        switch (specs[i].slot) {
        case K3_SLOT_SHARED_GATE: case K3_SLOT_SHARED_UP: case K3_SLOT_SHARED_DOWN:
        case K3_SLOT_LATENT_DOWN:
            sum += (double)bytes[i];
            break;
        default:
            break;
        }
    return sum;
}

/* What a default pack of cfg (`config` names it) over n_drives with trunk type tt would
 * hold, as the budget sees it: the same quantities the runtime gives it for that pack
 * (stream.c), and the default run's records in flight; in *overlapping,
 * overlapping_trunk_bytes, and in *q8 the trunk's Q8_0 bytes. */
static int budget_input(const struct k3_config *c, const char *config, int n_drives, int ctx,
                        int seqs, uint64_t store, int rows, int threads, int teams,
                        enum k3_trunk_type tt, struct k3_budget_input *in,
                        uint64_t **segments, double *overlapping, double *q8, struct k3_err *err)
{
    struct k3_tensor_spec *specs;
    int n;
    if (k3_trunk_specs(c, &specs, &n))
        return k3_errf(err, "out of memory");
    uint64_t vectors, *bytes = spec_bytes(specs, n, tt, &vectors, q8);
    struct k3_trunk_layout t = {0};
    struct k3_pack_plan pp = {0};
    struct k3_record_layout rec;
    k3_record_layout_init(&rec, c);
    struct k3_pack_geometry g = {.n_drives = n_drives, .replicas = 1};
    int rc = bytes && !k3_trunk_layout_init(&t, c, specs, n, bytes) ? 0
                                                                     : k3_errf(err, "out of memory");
    if (!rc)
        rc = k3_pack_plan(&pp, c, t.segment_bytes, t.n_segments, rec.bytes, &g, err);
    if (!rc && !(*segments = calloc((size_t)t.n_segments, sizeof **segments)))
        rc = k3_errf(err, "out of memory");
    for (int s = 0; !rc && s < t.n_segments; s++)
        (*segments)[s] = k3_pack_round_up(t.segment_bytes[s], K3_PACK_ALIGN);
    if (!rc) {
        struct k3_pack_sections sec;
        checkpoint_sections(config, specs, n, &sec);
        *overlapping = overlapping_trunk_bytes(specs, n, bytes);
        *in = (struct k3_budget_input){
            .cfg = c,
            .ctx = ctx,
            .seqs = seqs,
            .threads = threads,
            .teams = teams,
            .n_segments = t.n_segments,
            .segment_bytes = *segments,
            .vector_bytes = vectors,
            .record_bytes = k3_pack_round_up(rec.bytes, K3_PACK_ALIGN),
            .embed_buffer_bytes = k3_budget_embed_buffer_bytes(2 * (uint64_t)c->hidden,
                                                               pp.trunk_piece),
            .manifest_bytes = k3_pack_manifest_bytes(&pp, &sec),
            .caller_bytes = k3_runtime_caller_bytes(c->vocab, seqs, false).fixed + store,
            .rows = rows,
            .inflight_records = c->top_k + K3_PREFETCH_K_DEFAULT,
        };
    }
    k3_pack_plan_free(&pp);
    k3_trunk_layout_free(&t);
    free(bytes);
    free(specs);
    return rc;
}

/* Compute rates per core, GB/s of weights consumed, when no --calibration FILE gives them:
 * mxfp4_gbps_per_core and bf16_gbps_per_core of bench/results/kernels-20261130-055547.json
 * (bench/kernels.sh's calibration: one thread, weights in RAM; the machine is in the
 * results' README entry).  A calibration file gives another machine's, or the rates
 * bench/slice-project.sh derives from k3-slice's measured layers (every piece of a K3
 * token at K3's widths, not only the mat-vecs). */
#define DEFAULT_MXFP4_GBPS_PER_CORE 9.86
#define DEFAULT_BF16_GBPS_PER_CORE 28.5
/* Q8_0 (the trunk's large matrices as --trunk-type q8_0 holds them): its rates as
 * fractions of bf16's measured beside them in one run, so that a calibration file without
 * q8_0's own keys (q8_0_gbps_per_core, q8_0_gflops_per_core) scales its bf16 rates by
 * them.  bench/kernels.sh --sets bench,q8_0 --only "shared gate/up" (one thread,
 * bench/results/kernels-20261202-051952.csv): one row, 2.17 GB/s of Q8_0 weights against
 * 3.68 of bf16 (0.59 per byte, 1.1x per weight); many rows, of the FMA peak measured in
 * turn, 47% and 53% against bf16's 65% and 55% at 16 and 64 tokens (0.84). */
#define Q8_0_GBPS_OF_BF16 0.59
#define Q8_0_GFLOPS_OF_BF16 0.84
/* The read path's own CPU, one core's seconds per GB read: submissions, completions and
 * the checksums, which run over the compute threads.  `k3-uring iobench` measures it;
 * this is read_cpu_s_per_gb of bench/results/slice-project-20261201-204352.json (io_uring;
 * about half of it the checksums).  A calibration file may give its own. */
#define DEFAULT_READ_CPU_S_PER_GB 0.42

struct box {
    int drives;
    double drive_gbps;   /* per drive */
    int cores, nodes;
    double mem_gbps;     /* per NUMA node */
    double mxfp4_core, bf16_core, q8_core;       /* GB/s of weights per core, one row (decode) */
    double mxfp4_gflops, bf16_gflops, q8_gflops; /* GFLOP/s per core over many rows (a
                                                  * prompt pass) */
    double read_cpu;     /* core seconds per GB read */
};

static int load_calibration(const char *path, struct box *b, struct k3_err *err)
{
    json_error_t jerr;
    json_t *root = json_load_file(path, 0, &jerr);
    if (!root)
        return k3_errf(err, "--calibration %s: %s", path, jerr.text);
    json_t *m = json_object_get(root, "mxfp4_gbps_per_core"), *bf = json_object_get(root, "bf16_gbps_per_core");
    int rc = json_is_number(m) && json_is_number(bf) && json_number_value(m) > 0 && json_number_value(bf) > 0
                 ? 0
                 : k3_errf(err, "--calibration %s: needs positive mxfp4_gbps_per_core and "
                                "bf16_gbps_per_core", path);
    const char *many[4] = {"mxfp4_gflops_per_core", "bf16_gflops_per_core",
                           "q8_0_gflops_per_core", "q8_0_gbps_per_core"};
    double *many_dst[4] = {&b->mxfp4_gflops, &b->bf16_gflops, &b->q8_gflops, &b->q8_core};
    for (int i = 0; !rc && i < 4; i++) {
        json_t *v = json_object_get(root, many[i]);
        if (v && !(json_is_number(v) && json_number_value(v) > 0))
            rc = k3_errf(err, "--calibration %s: %s must be a positive number", path, many[i]);
        else if (v)
            *many_dst[i] = json_number_value(v);
    }
    json_t *cpu = json_object_get(root, "read_cpu_s_per_gb");
    if (!rc && cpu && !(json_is_number(cpu) && json_number_value(cpu) >= 0))
        rc = k3_errf(err, "--calibration %s: read_cpu_s_per_gb must be a number >= 0", path);
    if (!rc) {
        b->mxfp4_core = json_number_value(m);
        b->bf16_core = json_number_value(bf);
        if (cpu)
            b->read_cpu = json_number_value(cpu);
    }
    json_decref(root);
    return rc;
}

/* Without a many-row measurement (calibration keys mxfp4_gflops_per_core,
 * bf16_gflops_per_core), a prompt pass is taken to run at the one-row rates: 2 flops per
 * weight, MXFP4 at 17 bytes per 32 weights, bf16 at 2 bytes.  Q8_0's, unless given, are
 * bf16's scaled as measured beside them. */
static void many_row_rates(struct box *b)
{
    if (!b->mxfp4_gflops)
        b->mxfp4_gflops = b->mxfp4_core * 2 * 32 / 17;
    if (!b->bf16_gflops)
        b->bf16_gflops = b->bf16_core;
    if (!b->q8_core)
        b->q8_core = b->bf16_core * Q8_0_GBPS_OF_BF16;
    if (!b->q8_gflops)
        b->q8_gflops = b->bf16_gflops * Q8_0_GFLOPS_OF_BF16;
}

/* Seconds to stream `bytes` of weights through the cores, capped by memory bandwidth. */
static double compute_seconds(double bytes, double per_core, const struct box *b)
{
    double rate = b->cores * per_core;
    double mem = b->nodes * b->mem_gbps;
    return bytes / ((rate < mem ? rate : mem) * 1e9);
}

/* Seconds of the read path's CPU for `bytes` read, spread over the cores. */
static double read_cpu_seconds(double bytes, const struct box *b)
{
    return bytes / 1e9 * b->read_cpu / b->cores;
}

/* Bytes of weights a decode step computes and reads on one box. */
struct step {
    double expert_bytes;     /* routed experts computed (MXFP4) */
    double trunk_compute;    /* trunk weights computed, the embedding aside */
    double trunk_q8;         /* of which Q8_0 (the rest bf16) */
    double trunk_read;       /* trunk segments streamed */
    double read;             /* bytes read off the drives */
    double hit;              /* fraction of records found in the cache */
};

/* A measured hit curve (replay --hit-curve: hit rate against cache records per layer),
 * or none (n 0): routing uniform over a layer's experts, as synthetic weights route. */
struct curve {
    const double *rate; /* [n + 1] */
    int n;
};

/* A box computing `experts` routed experts per MoE layer, of `owned` per layer it holds:
 * its cache (b->cache_records) finds what the curve says for its records per layer, or,
 * without one, the share of the layer's records it holds. */
static struct step step_of(const struct k3_config *c, const struct k3_budget_input *in,
                           const struct k3_budget *b, double q8, double experts, double owned,
                           struct curve curve)
{
    struct k3_record_layout rec;
    k3_record_layout_init(&rec, c);
    double moe = k3_moe_layer_count(c);
    struct step st = {.expert_bytes = experts * moe * (double)rec.bytes, .trunk_q8 = q8};
    double per_layer = b->cache_records / moe;
    st.hit = curve.n ? k3_hit_curve_at(curve.rate, curve.n, per_layer) : per_layer / owned;
    st.hit = st.hit > 1 ? 1 : st.hit;
    for (int s = 1; s < in->n_segments; s++) { /* the embedding: one row per token */
        st.trunk_compute += (double)in->segment_bytes[s];
        if (!b->resident[s])
            st.trunk_read += (double)in->segment_bytes[s];
    }
    /* an embedding row: at most its buffer's pieces */
    st.read = st.expert_bytes * (1 - st.hit) + st.trunk_read +
              (b->resident[K3_SEG_EMBED] ? 0 : (double)in->embed_buffer_bytes);
    return st;
}

/* Seconds of a step's reads over the box's drives, and of its compute: the weights at the
 * per-core rates and the read path's CPU for its reads. */
static double step_io(const struct step *st, const struct box *box)
{
    return st->read / (box->drives * box->drive_gbps * 1e9);
}

/* Seconds of trunk weights: bf16 bytes and Q8_0 bytes at their rates. */
static double trunk_seconds(double bf16, double q8, const struct box *box)
{
    return compute_seconds(bf16, box->bf16_core, box) + compute_seconds(q8, box->q8_core, box);
}

static double step_compute(const struct step *st, const struct box *box)
{
    return compute_seconds(st->expert_bytes, box->mxfp4_core, box) +
           trunk_seconds(st->trunk_compute - st->trunk_q8, st->trunk_q8, box) +
           read_cpu_seconds(st->read, box);
}

/* What is planned: the config, its budget and what the budget was planned from, and the
 * trunk bytes computed while a layer's reads are in flight (overlapping_trunk_bytes). */
struct planned {
    const struct k3_config *c;
    const struct k3_budget_input *in;
    const struct k3_budget *b;
    double overlapping;
    double q8;               /* the trunk's Q8_0 bytes (0 for bf16) */
    enum k3_trunk_type tt;
    struct curve curve;      /* --hit-curve */
};

/* s/token of a step without prediction: the drives idle through the compute before each
 * layer's routing is known (*before) and through the exchange between boxes (t_net, 0 on
 * one box), then the step takes the larger of the rest of its compute and its reads. */
static double without_prediction(const struct planned *p, const struct step *st,
                                 const struct box *box, double t_c, double t_io, double t_net,
                                 double *before)
{
    /* the overlapping matrices (shared experts, latent down) are Q8_0's when the trunk is */
    double over_q8 = p->tt == K3_TRUNK_Q8_0 ? p->overlapping : 0;
    *before = trunk_seconds(st->trunk_compute - st->trunk_q8 - (p->overlapping - over_q8),
                            st->trunk_q8 - over_q8, box);
    double rest = t_c - *before;
    return *before + t_net + (t_io > rest ? t_io : rest);
}

/* s/token of one decode step on the box, as the pipelined engine would run it; returns
 * the pipelined s/token. */
static double project(const struct planned *p, const struct box *box, bool print)
{
    const struct k3_config *c = p->c;
    struct step st = step_of(c, p->in, p->b, p->q8, c->top_k, c->n_experts, p->curve);
    double expert_bytes = st.expert_bytes, trunk_compute = st.trunk_compute, read = st.read,
           hit = st.hit, trunk_read = st.trunk_read;
    double t_io = step_io(&st, box), t_c = step_compute(&st, box), t = t_io > t_c ? t_io : t_c;
    double before_routing, t_np = without_prediction(p, &st, box, t_c, t_io, 0, &before_routing);
    if (!print)
        return t;
    printf("projection for %d drives x %.2f GB/s, %d cores on %d NUMA nodes (%.0f GB/s memory "
           "each), %.2f / %.2f GB/s per core (MXFP4 / bf16), %.2f core s per GB read:\n",
           box->drives, box->drive_gbps, box->cores, box->nodes, box->mem_gbps, box->mxfp4_core,
           box->bf16_core, box->read_cpu);
    printf("  read per token        %8.2f GB  (experts %.2f, trunk streamed %.2f; cache hits %.1f%%%s)\n",
           read / 1e9, expert_bytes * (1 - hit) / 1e9, trunk_read / 1e9, 100 * hit,
           p->curve.n ? " by the hit curve" : "");
    printf("  I/O floor             %8.3f s/token\n", t_io);
    printf("  compute               %8.3f s/token  (%.2f GB MXFP4, %.2f GB bf16, %.3f s the read "
           "path's CPU)\n", t_c, expert_bytes / 1e9, (trunk_compute - st.trunk_q8) / 1e9,
           read_cpu_seconds(read, box));
    if (st.trunk_q8 > 0)
        printf("  trunk as q8_0         %8.2f GB/token of Q8_0 at %.2f GB/s per core (%.1f GFLOP/s "
               "per core over many rows)\n", st.trunk_q8 / 1e9, box->q8_core, box->q8_gflops);
    printf("  pipelined             %8.3f s/token  (the larger: reads and compute overlap)\n", t);
    printf("  without prediction    %8.3f s/token  (%.3f s of compute before each layer's "
           "routing is known, the drives idle; then the larger)\n", t_np, before_routing);
    printf("  synchronous           %8.3f s/token  (reads, then compute)\n", t_io + t_c);
    return t;
}

/* A prompt of n tokens in passes of `rows`: each MoE layer of a pass reads the union of
 * its rows' experts once (routing uniform: E (1 - (1 - k/E)^rows); real routing repeats
 * more), the trunk's streamed segments once, and computes every row: the weights' flops
 * at the many-row rates (2 per weight per row) and MLA over the cached positions
 * (latent-absorbed: 2 (2 kv_lora + rope) per position and head).  A pass takes the larger
 * of its reads and its compute (they overlap within it).  Fills *reads (bytes). */
static double prompt_seconds(const struct planned *p, const struct box *box, int n, int rows,
                             double *reads)
{
    const struct k3_config *c = p->c;
    struct step st = step_of(c, p->in, p->b, p->q8, c->top_k, c->n_experts, p->curve);
    struct k3_record_layout rec;
    k3_record_layout_init(&rec, c);
    double E = c->n_experts, k = c->top_k, moe = k3_moe_layer_count(c);
    double record_weights = 3.0 * c->latent * c->moe_inter;
    double mla = 0, per_pos = 2.0 * c->mla_heads * (2.0 * c->kv_lora + c->qk_rope);
    for (int l = 0; l < c->n_layers; l++)
        mla += c->attn[l] == K3_ATTN_MLA;
    double flops_mxfp4 = box->cores * box->mxfp4_gflops * 1e9;
    double flops_bf16 = box->cores * box->bf16_gflops * 1e9;
    double flops_q8 = box->cores * box->q8_gflops * 1e9;
    double trunk_flops_s = 2 * (st.trunk_compute - st.trunk_q8) / 2 / flops_bf16 +
                           2 * st.trunk_q8 * 32 / 34 / flops_q8; /* per row */
    double t = 0;
    *reads = 0;
    for (int at = 0; at < n; at += rows) {
        int T = n - at < rows ? n - at : rows;
        double unions = E * (1 - pow(1 - k / E, T));
        double read = unions * moe * (double)rec.bytes + st.trunk_read;
        double attn = mla * per_pos * ((double)T * at + (double)T * (T + 1) / 2);
        double compute = 2 * T * k * moe * record_weights / flops_mxfp4 +
                         T * trunk_flops_s + attn / flops_bf16 +
                         read_cpu_seconds(read, box);
        double io = read / (box->drives * box->drive_gbps * 1e9);
        t += io > compute ? io : compute;
        *reads += read;
    }
    return t;
}

static void project_prompt(const struct planned *p, const struct box *box, int n)
{
    double read_pass, read_steps;
    double t_pass = prompt_seconds(p, box, n, p->b->rows, &read_pass);
    double t_steps = prompt_seconds(p, box, n, K3_CHUNK, &read_steps);
    printf("a prompt of %d tokens (many-row rates %.1f / %.1f GFLOP/s per core, MXFP4 / bf16; "
           "routing uniform):\n", n, box->mxfp4_gflops, box->bf16_gflops);
    printf("  passes of %d rows     %8.2f s  (%.1f GB read, %.3f s a token)\n", p->b->rows,
           t_pass, read_pass / 1e9, t_pass / n);
    printf("  steps of %d rows       %8.2f s  (%.1f GB read, %.3f s a token)\n", K3_CHUNK,
           t_steps, read_steps / 1e9, t_steps / n);
}

/* Expected experts per MoE layer on the busiest of R ranks: a token's k distinct experts
 * drawn uniformly from E, rank r owning k3_share_experts of them (e mod R).  Exact: the
 * split is multivariate hypergeometric; P(every rank <= t) by a sum over ranks of how many
 * of the draws each takes (each rank's count hypergeometric given the draws left), and
 * E[max] = sum over t < k of P(max > t).  About R k^3 steps: instant at K3's R <= 64,
 * k = 16. */
static double log_choose(double n, double j) { return lgamma(n + 1) - lgamma(j + 1) - lgamma(n - j + 1); }

static double prob_all_at_most(int E, int k, int R, int t)
{
    double f[K3_MAX_TOPK + 1] = {1}, g[K3_MAX_TOPK + 1]; /* f[s]: s drawn by the ranks so far */
    int pool = E;
    for (int r = 0; r < R; r++) {
        int own = k3_share_experts((struct k3_share){.rank = r, .ranks = R}, E);
        for (int s = 0; s <= k; s++)
            g[s] = 0;
        for (int s = 0; s <= k; s++) {
            int left = k - s;
            for (int j = 0; f[s] > 0 && j <= t && j <= own && j <= left; j++)
                if (left - j <= pool - own)
                    g[s + j] += f[s] * exp(log_choose(own, j) + log_choose(pool - own, left - j) -
                                           log_choose(pool, left));
        }
        memcpy(f, g, sizeof f);
        pool -= own;
    }
    return f[k];
}

static double busiest_experts(int E, int k, int R)
{
    double m = 0;
    for (int t = 0; t < k; t++)
        m += 1 - prob_all_at_most(E, k, R, t);
    return m;
}

/* The link between boxes: bandwidth (Gb/s, bits) and the latency of one exchange. */
struct net {
    double gbps, us;
};

/* R boxes like `box`, each holding the trunk and its share of the experts (or, dealt,
 * every expert: a layer's choices dealt out by position, share.h), exchanging the routed
 * experts' outputs after every MoE layer (every rank sums all k in routing order). */
static void project_ranks(const struct planned *p, const struct box *box, int R, bool dealt,
                          const struct net *net, double one_box)
{
    const struct k3_config *c = p->c;
    double moe = k3_moe_layer_count(c), k = c->top_k;
    double busiest = dealt ? (c->top_k + R - 1) / R : busiest_experts(c->n_experts, c->top_k, R);
    double owned = dealt ? c->n_experts /* the largest share */
                         : k3_share_experts((struct k3_share){.rank = 0, .ranks = R}, c->n_experts);
    /* a rank's share of the experts: the curve (of whole layers) does not apply */
    struct step st = step_of(c, p->in, p->b, p->q8, busiest, owned, (struct curve){0});
    double t_io = step_io(&st, box), t_c = step_compute(&st, box);
    /* Each rank sends each of its experts' outputs (latent f32) to every other rank: k
     * outputs per layer, each R - 1 times.  The busiest box's link carries the larger of
     * what it sends (its outputs, R - 1 times) and at most k outputs in. */
    double output = (double)c->latent * 4, total = moe * k * output * (R - 1);
    double link = (busiest * (R - 1) > k ? busiest * (R - 1) : k) * output;
    double t_net = moe * (net->us * 1e-6 + link * 8 / (net->gbps * 1e9));
    double t = t_io > t_c + t_net ? t_io : t_c + t_net;
    double before_routing, t_np = without_prediction(p, &st, box, t_c, t_io, t_net, &before_routing);
    if (dealt)
        printf("projection for %d such boxes (mpirun -np %d: the trunk and every expert on each, "
               "a layer's choices dealt out by position), linked at %.0f Gb/s with %.1f us per "
               "exchange:\n", R, R, net->gbps, net->us);
    else
        printf("projection for %d such boxes (mpirun -np %d: the trunk on each, expert e on box "
               "e mod %d), linked at %.0f Gb/s with %.1f us per exchange:\n",
               R, R, R, net->gbps, net->us);
    printf("  experts per layer     %8.2f on the busiest box of %d a token routes to (%s; an "
           "even split is %.2f)\n", busiest, c->top_k,
           dealt ? "dealt" : "exact expected maximum over the boxes", k / R);
    printf("  read per token        %8.2f GB on the busiest box  (experts %.2f; cache hits %.1f%% "
           "of its %.0f experts a layer)\n", st.read / 1e9, st.expert_bytes * (1 - st.hit) / 1e9,
           100 * st.hit, owned);
    printf("  between boxes         %8.2f MB/token in all  (%.0f MoE layers x %d outputs of %.0f "
           "B, each to the %d other boxes; %.2f MB sent per box)\n", total / 1e6, moe, c->top_k,
           output, R - 1, total / R / 1e6);
    printf("  I/O floor             %8.3f s/token\n", t_io);
    printf("  compute               %8.3f s/token  (%.2f GB MXFP4, %.2f GB bf16, %.3f s the read "
           "path's CPU)\n", t_c, st.expert_bytes / 1e9, (st.trunk_compute - st.trunk_q8) / 1e9,
           read_cpu_seconds(st.read, box));
    printf("  exchange              %8.3f s/token  (%.0f x (%.1f us + %.0f KB on the busiest "
           "box's link))\n", t_net, moe, net->us, link / 1e3);
    printf("  pipelined             %8.3f s/token  (the larger: reads overlap compute and the "
           "exchange; %.2f x one box's)\n", t, t / one_box);
    printf("  without prediction    %8.3f s/token  (%.3f s of compute before each layer's "
           "routing is known and the exchange, the drives idle; then the larger)\n", t_np,
           before_routing);
    printf("  synchronous           %8.3f s/token  (reads, then compute, then the exchange)\n",
           t_io + t_c + t_net);
}

/* What a plan is made from, whatever the trunk type. */
struct box_plan {
    const struct k3_config *c;
    const char *config;
    int drives, ctx, seqs, rows, threads, nodes;
    bool predict_ids; /* --predict-from ids: its counts in the floor */
    uint64_t store;     /* serve's beside its sequences: the prompt store, adjusted rows */
    struct curve curve; /* --hit-curve */
};

/* One trunk type's budget and what project() reads of it. */
struct plan_of {
    struct k3_budget_input in;
    struct k3_budget b;
    uint64_t *segments; /* freed by the caller */
    struct planned p;
};

/* The budget of trunk type tt at *ram (K3_RAM_FLOOR or K3_RAM_TRUNK: resolved for tt, into
 * *ram); -1 with err when it does not fit. */
static int plan_type(const struct box_plan *bp, enum k3_trunk_type tt, uint64_t *ram,
                     struct plan_of *pl, struct k3_err *err)
{
    *pl = (struct plan_of){0};
    double overlapping = 0, q8 = 0;
    int rc = budget_input(bp->c, bp->config, bp->drives, bp->ctx, bp->seqs, bp->store, bp->rows,
                          bp->threads, bp->nodes, tt, &pl->in, &pl->segments, &overlapping, &q8,
                          err);
    pl->in.predict_ids = bp->predict_ids;
    if (!rc) {
        k3_budget_plan(&pl->in, UINT64_MAX, &pl->b, NULL); /* the floor, whatever the budget */
        if (*ram == K3_RAM_FLOOR)
            *ram = pl->b.floor;
        else if (*ram == K3_RAM_TRUNK)
            *ram = k3_budget_trunk_resident(&pl->in);
        rc = k3_budget_plan(&pl->in, *ram, &pl->b, err);
    }
    pl->p = (struct planned){.c = bp->c, .in = &pl->in, .b = &pl->b, .overlapping = overlapping,
                             .q8 = q8, .tt = tt, .curve = bp->curve};
    return rc;
}

/* Which trunk type is faster on this box at the same budget: the other one planned and
 * projected beside the one shown (t, s/token). */
static void compare_types(const struct box_plan *bp, const struct box *box, enum k3_trunk_type tt,
                          uint64_t ram, double t)
{
    enum k3_trunk_type other = tt == K3_TRUNK_BF16 ? K3_TRUNK_Q8_0 : K3_TRUNK_BF16;
    struct plan_of pl;
    struct k3_err err;
    if (plan_type(bp, other, &ram, &pl, &err)) {
        printf("  trunk type            %s: %.3f s/token; %s does not fit this budget\n",
               k3_trunk_type_name(tt), t, k3_trunk_type_name(other));
        free(pl.segments);
        return;
    }
    double u = project(&pl.p, box, false), trunk = 0;
    for (int i = 0; i < pl.in.n_segments; i++)
        trunk += (double)pl.in.segment_bytes[i];
    const char *faster = t <= u ? k3_trunk_type_name(tt) : k3_trunk_type_name(other);
    printf("  trunk type            %s %.3f s/token; %s %.3f (its trunk %.2f GB, %.2f resident "
           "in this budget): %s is faster here (pack --trunk-type %s)\n",
           k3_trunk_type_name(tt), t, k3_trunk_type_name(other), u, trunk / 1e9,
           (double)pl.b.resident_bytes / 1e9, faster, faster);
    free(pl.segments);
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
         .def = "built in"},
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
    struct box box = {.drives = drives, .drive_gbps = drive_gbps,
                      .cores = cores ? cores : omp_get_num_procs(), .nodes = nodes,
                      .mem_gbps = mem_gbps, .mxfp4_core = DEFAULT_MXFP4_GBPS_PER_CORE,
                      .bf16_core = DEFAULT_BF16_GBPS_PER_CORE,
                      .read_cpu = DEFAULT_READ_CPU_S_PER_GB};
    struct k3_config c;
    if (calibration && load_calibration(calibration, &box, &err)) {
        fprintf(stderr, "k3-uring plan: %s\n", err.msg);
        return 1;
    }
    many_row_rates(&box);
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
                          .seqs = seqs ? seqs : 1, .store = serve_bytes, .rows = rows,
                          .threads = threads ? threads : box.cores, .nodes = nodes,
                          .predict_ids = predict_from == K3_PREDICT_IDS, .curve = {curve, curve_n}};
    struct plan_of pl;
    rc = plan_type(&bp, tt, &ram, &pl, &err);
    if (!rc) {
        printf("%s over %d drives, %d threads:\n", config, drives, pl.in.threads);
        k3_budget_print(stdout, &pl.b, &pl.in);
        double one_box = project(&pl.p, &box, true);
        compare_types(&bp, &box, tt, ram, one_box);
        if (prompt)
            project_prompt(&pl.p, &box, prompt);
        if (ranks > 1)
            project_ranks(&pl.p, &box, ranks, dealt, &(struct net){net_gbps, net_us}, one_box);
    } else {
        fprintf(stderr, "k3-uring plan: %s\n", err.msg);
    }
    free(pl.segments);
    free(curve);
    k3_config_free(&c);
    return rc ? 1 : 0;
}
