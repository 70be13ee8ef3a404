/* The planner's performance model (engine/plan/project.h) on k3-tiny's default pack:
 * the shared budget builder fills what both `run` and `plan` plan from; a step's I/O is its
 * bytes over the drives, its compute is capped by memory bandwidth; pipelined is the larger
 * of the two, synchronous their sum, without prediction between them; a prompt pass reads
 * each expert of its union once; the busiest of R boxes' expected experts is exact. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/model/share.h"
#include "engine/model/tensors.h"
#include "engine/pack/pack_format.h"
#include "engine/plan/pack_sizes.h"
#include "engine/plan/project.h"
#include "engine/stream/stream.h"
#include "tests/check.h"

static struct k3_config cfg;

static bool near(double a, double b) { return fabs(a - b) <= 1e-9 * fabs(b) + 1e-15; }

struct planned_box {
    struct k3_plan_pack pack;
    struct k3_budget_input in;
    struct k3_budget b;
    struct k3_planned p;
};

/* k3-tiny over 2 drives at `ram` bytes (0: the floor). */
static void plan_at(uint64_t ram, struct planned_box *pb)
{
    struct k3_err err = {{0}};
    REQUIRE(!k3_plan_pack_of(&cfg, "k3-tiny", 2, K3_TRUNK_BF16, &pb->pack, &err), "%s", err.msg);
    pb->in = k3_budget_input_of(&cfg, &pb->pack.pack,
                                &(struct k3_budget_run){.ctx = 64, .seqs = 1, .threads = 2,
                                                        .teams = 1, .rows = 32,
                                                        .prefetch_k = K3_PREFETCH_K_DEFAULT,
                                                        .caller_bytes = 1 << 20});
    k3_budget_plan(&pb->in, UINT64_MAX, &pb->b, NULL);
    REQUIRE(!k3_budget_plan(&pb->in, ram ? ram : pb->b.floor, &pb->b, &err), "%s", err.msg);
    pb->p = (struct k3_planned){.c = &cfg, .in = &pb->in, .b = &pb->b,
                                .overlapping = pb->pack.overlapping, .tt = K3_TRUNK_BF16};
}

static struct k3_box box_of(int drives, double mem_gbps)
{
    struct k3_box box = {.drives = drives, .drive_gbps = 2, .cores = 4, .nodes = 1,
                         .mem_gbps = mem_gbps};
    struct k3_err err = {{0}};
    REQUIRE(!k3_rates_builtin(&box.rates, &err), "%s", err.msg);
    return box;
}

static void test_builder(void)
{
    struct planned_box pb;
    plan_at(0, &pb);
    struct k3_record_layout rec;
    k3_record_layout_init(&rec, &cfg);
    CHECK(pb.in.n_segments == k3_seg_count(&cfg) && pb.in.ctx == 64 && pb.in.threads == 2,
          "%d segments, ctx %d", pb.in.n_segments, pb.in.ctx);
    CHECK(pb.in.record_bytes == k3_pack_round_up(rec.bytes, K3_PACK_ALIGN) &&
              pb.in.inflight_records == cfg.top_k + K3_PREFETCH_K_DEFAULT,
          "records of %llu B, %d in flight", (unsigned long long)pb.in.record_bytes,
          pb.in.inflight_records);
    CHECK(pb.in.embed_buffer_bytes ==
              k3_budget_embed_buffer_bytes(2 * (uint64_t)cfg.hidden, pb.pack.pack.embed_piece_bytes),
          "embedding buffer %llu B", (unsigned long long)pb.in.embed_buffer_bytes);
    /* a pack without records keeps none in flight, whatever the prefetch */
    struct k3_budget_pack none = pb.pack.pack;
    none.record_bytes = 0;
    struct k3_budget_input in = k3_budget_input_of(&cfg, &none, &(struct k3_budget_run){.prefetch_k = 8});
    CHECK(in.inflight_records == 0, "no records, %d in flight", in.inflight_records);
    k3_plan_pack_free(&pb.pack);
}

static void test_decode(void)
{
    struct planned_box pb;
    plan_at(0, &pb);
    struct k3_box one = box_of(1, 1000), two = box_of(2, 1000);
    struct k3_projection a = k3_project_decode(&pb.p, &one), b = k3_project_decode(&pb.p, &two);
    CHECK(a.st.read > 0 && near(a.io, a.st.read / (1 * 2e9)), "I/O %g s for %g B", a.io, a.st.read);
    CHECK(near(b.io, a.io / 2) && near(b.compute, a.compute), "two drives: I/O %g against %g", b.io, a.io);
    CHECK(a.pipelined == (a.io > a.compute ? a.io : a.compute) && near(a.synchronous, a.io + a.compute),
          "pipelined %g, synchronous %g of I/O %g and compute %g", a.pipelined, a.synchronous,
          a.io, a.compute);
    CHECK(a.pipelined <= a.without_prediction && a.without_prediction <= a.synchronous &&
              a.before_routing > 0 && a.before_routing < a.compute,
          "without prediction %g outside [%g, %g] (before routing %g)", a.without_prediction,
          a.pipelined, a.synchronous, a.before_routing);
    /* the floor caches nothing: every routed record of a token is read */
    struct k3_record_layout rec;
    k3_record_layout_init(&rec, &cfg);
    double experts = (double)cfg.top_k * k3_moe_layer_count(&cfg) * (double)rec.bytes;
    CHECK(a.st.hit == 0 && near(a.st.expert_bytes, experts), "hit %g, experts %g B", a.st.hit,
          a.st.expert_bytes);
    /* memory bandwidth caps the cores: 1 GB/s of memory computes the weights at 1 GB/s */
    struct k3_box slow = box_of(1, 1);
    struct k3_projection m = k3_project_decode(&pb.p, &slow);
    CHECK(near(m.compute - m.read_cpu, (m.st.expert_bytes + m.st.trunk_compute) / 1e9),
          "memory-bound compute %g s for %g B", m.compute - m.read_cpu,
          m.st.expert_bytes + m.st.trunk_compute);
    k3_plan_pack_free(&pb.pack);

    /* a budget with room for a cache finds its share of a layer's records under uniform
     * routing */
    plan_at(pb.b.floor * 4, &pb);
    struct k3_projection c = k3_project_decode(&pb.p, &one);
    double share = pb.b.cache_records / k3_moe_layer_count(&cfg) / cfg.n_experts;
    CHECK(pb.b.cache_records > 0 && near(c.st.hit, share > 1 ? 1 : share), "hit %g, share %g",
          c.st.hit, share);
    k3_plan_pack_free(&pb.pack);
}

static void test_prompt(void)
{
    struct planned_box pb;
    plan_at(0, &pb);
    struct k3_box box = box_of(1, 1000);
    double reads_1, reads_n;
    double t1 = k3_project_prompt(&pb.p, &box, 40, 1, &reads_1);
    double tn = k3_project_prompt(&pb.p, &box, 40, 40, &reads_n);
    struct k3_record_layout rec;
    k3_record_layout_init(&rec, &cfg);
    struct k3_projection d = k3_project_decode(&pb.p, &box);
    double per_row = cfg.top_k * k3_moe_layer_count(&cfg) * (double)rec.bytes + d.st.trunk_read;
    CHECK(near(reads_1, 40 * per_row), "one row a pass: %g B, want %g", reads_1, 40 * per_row);
    CHECK(reads_n < reads_1 && tn < t1, "one pass of 40 rows: %g B in %g s; 40 passes: %g B in %g s",
          reads_n, tn, reads_1, t1);
    k3_plan_pack_free(&pb.pack);
}

/* E[max over ranks] by enumerating every k-subset of E experts, rank e mod R. */
static double busiest_by_enumeration(int E, int k, int R)
{
    double sum = 0;
    int n = 0;
    for (unsigned m = 0; m < 1u << E; m++) {
        if (__builtin_popcount(m) != k)
            continue;
        int count[16] = {0}, most = 0;
        for (int e = 0; e < E; e++)
            if (m >> e & 1)
                most = ++count[e % R] > most ? count[e % R] : most;
        sum += most;
        n++;
    }
    return sum / n;
}

static void test_busiest(void)
{
    CHECK(near(k3_busiest_experts(896, 16, 1), 16), "one rank: %g", k3_busiest_experts(896, 16, 1));
    static const int cases[][3] = {{12, 4, 3}, {13, 5, 2}, {10, 6, 4}, {16, 3, 5}};
    for (int i = 0; i < 4; i++) {
        int E = cases[i][0], k = cases[i][1], R = cases[i][2];
        double want = busiest_by_enumeration(E, k, R), got = k3_busiest_experts(E, k, R);
        CHECK(fabs(got - want) < 1e-9, "E %d, k %d, R %d: %.12f, enumerated %.12f", E, k, R, got, want);
    }
}

static void test_ranks(void)
{
    struct planned_box pb;
    plan_at(0, &pb);
    struct k3_box box = box_of(1, 1000);
    struct k3_net net = {.gbps = 10, .us = 5};
    struct k3_ranks_projection r = k3_project_ranks(&pb.p, &box, 2, false, &net);
    const struct k3_projection *o = &r.one;
    CHECK(r.busiest > cfg.top_k / 2.0 && r.busiest < cfg.top_k, "busiest %g of %d", r.busiest, cfg.top_k);
    CHECK(r.owned == k3_share_experts((struct k3_share){.rank = 0, .ranks = 2}, cfg.n_experts),
          "owned %g", r.owned);
    CHECK(o->exchange > 0 && o->pipelined == (o->io > o->compute + o->exchange ? o->io
                                                                               : o->compute + o->exchange) &&
              near(o->synchronous, o->io + o->compute + o->exchange),
          "exchange %g, pipelined %g, synchronous %g", o->exchange, o->pipelined, o->synchronous);
    struct k3_ranks_projection d = k3_project_ranks(&pb.p, &box, 2, true, &net);
    CHECK(d.busiest == (cfg.top_k + 1) / 2 && d.owned == cfg.n_experts, "dealt: busiest %g, owned %g",
          d.busiest, d.owned);
    k3_plan_pack_free(&pb.pack);
}

int main(void)
{
    struct k3_err err = {{0}};
    REQUIRE(!k3_config_named(&cfg, "k3-tiny", &err), "%s", err.msg);
    test_builder();
    test_decode();
    test_prompt();
    test_busiest();
    test_ranks();
    k3_config_free(&cfg);
    return check_result();
}
