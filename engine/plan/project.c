/* The performance model (project.h). */
#include "engine/plan/project.h"

#include <math.h>
#include <string.h>

#include "engine/forward/forward.h"
#include "engine/model/share.h"
#include "engine/model/tensors.h"
#include "engine/pack/pack_format.h"
#include "engine/routes/hit_curve.h"

/* Seconds to stream `bytes` of weights through the cores, capped by memory bandwidth. */
static double compute_seconds(double bytes, double per_core, const struct k3_box *b)
{
    double rate = b->cores * per_core;
    double mem = b->nodes * b->mem_gbps;
    return bytes / ((rate < mem ? rate : mem) * 1e9);
}

/* Seconds of the read path's CPU for `bytes` read, spread over the cores. */
static double read_cpu_seconds(double bytes, const struct k3_box *b)
{
    return bytes / 1e9 * b->rates.read_cpu / b->cores;
}

/* A box computing `experts` routed experts per MoE layer, of `owned` per layer it holds:
 * its cache (b->cache_records) finds what the curve says for its records per layer, or,
 * without one, the share of the layer's records it holds. */
static struct k3_step_bytes step_of(const struct k3_planned *p, double experts, double owned,
                                    struct k3_hit_rates curve)
{
    const struct k3_config *c = p->c;
    const struct k3_budget_input *in = p->in;
    const struct k3_budget *b = p->b;
    struct k3_record_layout rec;
    k3_record_layout_init(&rec, c);
    double moe = k3_moe_layer_count(c);
    struct k3_step_bytes st = {.expert_bytes = experts * moe * (double)rec.bytes, .trunk_q8 = p->q8};
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

/* Seconds of trunk weights: bf16 bytes and Q8_0 bytes at their rates. */
static double trunk_seconds(double bf16, double q8, const struct k3_box *box)
{
    return compute_seconds(bf16, box->rates.bf16_core, box) +
           compute_seconds(q8, box->rates.q8_core, box);
}

/* A step's seconds: its reads over the drives; its compute, the weights at the per-core
 * rates and the read path's CPU for its reads; the exchange t_net (0 on one box).  Without
 * prediction the drives idle through the compute before each layer's routing is known and
 * through the exchange, then the step takes the larger of the rest of its compute and its
 * reads. */
static struct k3_projection timed(const struct k3_planned *p, const struct k3_step_bytes *st,
                                  const struct k3_box *box, double t_net)
{
    struct k3_projection pr = {.st = *st, .exchange = t_net};
    pr.io = st->read / (box->drives * box->drive_gbps * 1e9);
    pr.read_cpu = read_cpu_seconds(st->read, box);
    pr.compute = compute_seconds(st->expert_bytes, box->rates.mxfp4_core, box) +
                 trunk_seconds(st->trunk_compute - st->trunk_q8, st->trunk_q8, box) + pr.read_cpu;
    pr.pipelined = pr.io > pr.compute + t_net ? pr.io : pr.compute + t_net;
    /* the overlapping matrices (shared experts, latent down) are Q8_0's when the trunk is */
    double over_q8 = p->tt == K3_TRUNK_Q8_0 ? p->overlapping : 0;
    pr.before_routing = trunk_seconds(st->trunk_compute - st->trunk_q8 - (p->overlapping - over_q8),
                                      st->trunk_q8 - over_q8, box);
    double rest = pr.compute - pr.before_routing;
    pr.without_prediction = pr.before_routing + t_net + (pr.io > rest ? pr.io : rest);
    pr.synchronous = pr.io + pr.compute + t_net;
    return pr;
}

struct k3_projection k3_project_decode(const struct k3_planned *p, const struct k3_box *box)
{
    struct k3_step_bytes st = step_of(p, p->c->top_k, p->c->n_experts, p->curve);
    return timed(p, &st, box, 0);
}

/* A prompt of n tokens in passes of `rows`: each MoE layer of a pass reads the union of
 * its rows' experts once (routing uniform: E (1 - (1 - k/E)^rows); real routing repeats
 * more), the trunk's streamed segments once, and computes every row: the weights' flops
 * at the many-row rates (2 per weight per row) and MLA over the cached positions
 * (latent-absorbed: 2 (2 kv_lora + rope) per position and head).  A pass takes the larger
 * of its reads and its compute (they overlap within it). */
double k3_project_prompt(const struct k3_planned *p, const struct k3_box *box, int n, int rows,
                         double *reads)
{
    const struct k3_config *c = p->c;
    const struct k3_rates *r = &box->rates;
    struct k3_step_bytes st = step_of(p, c->top_k, c->n_experts, p->curve);
    struct k3_record_layout rec;
    k3_record_layout_init(&rec, c);
    double E = c->n_experts, k = c->top_k, moe = k3_moe_layer_count(c);
    double record_weights = 3.0 * c->latent * c->moe_inter;
    double mla = 0, per_pos = 2.0 * c->mla_heads * (2.0 * c->kv_lora + c->qk_rope);
    for (int l = 0; l < c->n_layers; l++)
        mla += c->attn[l] == K3_ATTN_MLA;
    double flops_mxfp4 = box->cores * r->mxfp4_gflops * 1e9;
    double flops_bf16 = box->cores * r->bf16_gflops * 1e9;
    double flops_q8 = box->cores * r->q8_gflops * 1e9;
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

/* Exact: the split is multivariate hypergeometric; P(every rank <= t) by a sum over ranks
 * of how many of the draws each takes (each rank's count hypergeometric given the draws
 * left), and E[max] = sum over t < k of P(max > t).  About R k^3 steps: instant at K3's
 * R <= 64, k = 16. */
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

double k3_busiest_experts(int E, int k, int R)
{
    double m = 0;
    for (int t = 0; t < k; t++)
        m += 1 - prob_all_at_most(E, k, R, t);
    return m;
}

struct k3_ranks_projection k3_project_ranks(const struct k3_planned *p, const struct k3_box *box,
                                            int R, bool dealt, const struct k3_net *net)
{
    const struct k3_config *c = p->c;
    double moe = k3_moe_layer_count(c), k = c->top_k;
    struct k3_ranks_projection rp = {0};
    rp.busiest = dealt ? (c->top_k + R - 1) / R : k3_busiest_experts(c->n_experts, c->top_k, R);
    rp.owned = dealt ? c->n_experts /* the largest share */
                     : k3_share_experts((struct k3_share){.rank = 0, .ranks = R}, c->n_experts);
    /* a rank's share of the experts: the curve (of whole layers) does not apply */
    struct k3_step_bytes st = step_of(p, rp.busiest, rp.owned, (struct k3_hit_rates){0});
    /* Each rank sends each of its experts' outputs (latent f32) to every other rank: k
     * outputs per layer, each R - 1 times.  The busiest box's link carries the larger of
     * what it sends (its outputs, R - 1 times) and at most k outputs in. */
    rp.output_bytes = (double)c->latent * 4;
    rp.total_bytes = moe * k * rp.output_bytes * (R - 1);
    rp.link_bytes = (rp.busiest * (R - 1) > k ? rp.busiest * (R - 1) : k) * rp.output_bytes;
    double t_net = moe * (net->us * 1e-6 + rp.link_bytes * 8 / (net->gbps * 1e9));
    rp.one = timed(p, &st, box, t_net);
    return rp;
}
