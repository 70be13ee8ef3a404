/* The model's math pieces on hand-made inputs: SiTU (through the fused mat-muls the
 * engine calls), the bounded KDA gate, the delta rule, AttnRes mixing (with an aliased
 * output) and the router. */
#include <math.h>
#include <string.h>

#include "engine/forward/layers.h"
#include "engine/kernels/kernels.h"
#include "engine/kernels/mxfp4.h"
#include "engine/base/rng.h"
#include "tests/check.h"

static int near(double a, double b, double tol) { return fabs(a - b) <= tol * (1 + fabs(b)); }

static struct k3_config base_config(void)
{
    struct k3_config c = {0};
    c.situ_beta = 4.0f;
    c.situ_linear_beta = 25.0f;
    c.rms_eps = 1e-5f;
    c.n_experts = 8;
    c.top_k = 3;
    c.n_group = c.topk_group = 1;
    c.renormalize = true;
    c.routed_scale = 1.0f;
    return c;
}

static double sig(double z) { return 1 / (1 + exp(-z)); }

/* SiTU(g, u) of the config's betas as the engine computes it: the fused gate/up mat-muls
 * of a dense or shared MLP (bf16) and of an expert (MXFP4), with one-hot weights so the
 * gate row reads g and the up row u exactly. */
static float situ_bf16(float g, float u, const struct k3_config *c)
{
    const uint16_t gate[2] = {k3_f32_to_bf16(1.0f), 0}, up[2] = {0, k3_f32_to_bf16(1.0f)};
    float x[2] = {g, u}, y;
    k3_matmul_bf16_situ(gate, up, 1, 2, x, 2, &y, 1, 1, c->situ_beta, c->situ_linear_beta);
    return y;
}

static float situ_mxfp4(float g, float u, const struct k3_config *c)
{
    /* Nibble 2 is E2M1 1.0, scale 127 is 2^0: the gate row is 1 at column 0, up at 1. */
    uint8_t gate[16] = {0x02}, up[16] = {0x20}, scale[1] = {127};
    float x[32] = {g, u}, y;
    k3_matmul_mxfp4_situ(gate, scale, up, scale, 1, 32, x, 32, &y, 1, 1, c->situ_beta,
                         c->situ_linear_beta);
    return y;
}

static void test_situ(void)
{
    static _Alignas(64) unsigned char scratch[4096];
    REQUIRE(k3_mxfp4_scratch_bytes(1, 32, 1) <= sizeof scratch, "MXFP4 scratch");
    k3_mxfp4_scratch_bind(scratch, 1, 32, 1);
    struct k3_config c = base_config();
    float (*const paths[2])(float, float, const struct k3_config *) = {situ_bf16, situ_mxfp4};
    const char *names[2] = {"bf16", "MXFP4"};
    const double gs[] = {-3, -0.5, 0, 0.7, 2, 9, 40}, us[] = {-60, -1, 0, 0.3, 5, 30, 100};
    for (int p = 0; p < 2; p++) {
        for (size_t i = 0; i < 7; i++)
            for (size_t j = 0; j < 7; j++) {
                double g = gs[i], u = us[j];
                double want = 4 * tanh(g / 4) * sig(g) * 25 * tanh(u / 25);
                float y = paths[p]((float)g, (float)u, &c);
                CHECK(near(y, want, 1e-6), "%s SiTU(%g, %g) = %g, want %g", names[p], g, u, y,
                      want);
            }
        /* Both caps hold: |SiTU| < β₁·β₂ = 100 even for huge inputs. */
        float y = paths[p](1e6f, 1e6f, &c);
        CHECK(y <= 100.0f && y > 99.0f, "%s capped at 100: %g", names[p], y);
        /* σ sees the uncapped gate: at g = -8, 4·tanh(-2)·σ(-8), not σ of the capped value. */
        y = paths[p](-8.0f, 25.0f, &c);
        CHECK(near(y, 4 * tanh(-2.0) * sig(-8) * 25 * tanh(1.0), 1e-6), "%s uncapped sigmoid: %g",
              names[p], y);
    }
    k3_mxfp4_scratch_unbind(scratch);
}

static void test_bounded_gate(void)
{
    const float lb = -5.0f;
    for (float u = -20; u <= 20; u += 0.5f)
        for (float a = 0; a < 3; a += 0.7f) {
            float g = k3_kda_gate(u, a, lb);
            /* (lb, 0) in exact arithmetic; f32 saturates to the ends for large |u|. */
            CHECK(g <= 0 && g >= lb, "gate(%g, %g) = %g not in [-5, 0]", u, a, g);
            if (fabs(exp(a) * u) <= 10)
                CHECK(g < 0 && g > lb, "gate(%g, %g) = %g not in (-5, 0)", u, a, g);
            CHECK(near(g, lb * sig(exp(a) * u), 1e-6), "gate formula at u=%g a=%g", u, a);
        }
    /* Not Kimi-Linear's -exp(A)·softplus(u): at u = 0 the bounded gate is lb/2. */
    CHECK(near(k3_kda_gate(0, 1.3f, lb), -2.5, 1e-7), "gate(0) = lb/2");
}

/* The delta rule against a literal double-precision transcription of k3-model.md §3.4.6. */
static void test_delta_rule(void)
{
    enum { D = 8 };
    struct k3_rng r;
    k3_rng_seed(&r, 3);
    float S[D * D], alpha[D], k[D], v[D], q[D], o[D];
    double Sd[D][D];
    for (int i = 0; i < D * D; i++)
        Sd[i / D][i % D] = S[i] = (float)k3_rng_normal(&r);
    for (int step = 0; step < 5; step++) {
        for (int i = 0; i < D; i++) {
            alpha[i] = (float)(0.3 + 0.7 * k3_rng_uniform(&r));
            k[i] = (float)k3_rng_normal(&r);
            v[i] = (float)k3_rng_normal(&r);
            q[i] = (float)k3_rng_normal(&r);
        }
        float beta = 0.6f;
        k3_kda_head_step(S, alpha, k, v, q, beta, o, D);
        double rr[D], od[D];
        for (int i = 0; i < D; i++)
            for (int j = 0; j < D; j++)
                Sd[i][j] *= alpha[i]; /* row i (key index) decays by alpha_i */
        for (int j = 0; j < D; j++) {
            double sk = 0;
            for (int i = 0; i < D; i++)
                sk += Sd[i][j] * k[i];
            rr[j] = v[j] - sk; /* read from the decayed state */
        }
        for (int i = 0; i < D; i++)
            for (int j = 0; j < D; j++)
                Sd[i][j] += beta * k[i] * rr[j];
        for (int j = 0; j < D; j++) {
            od[j] = 0;
            for (int i = 0; i < D; i++)
                od[j] += Sd[i][j] * q[i]; /* read from the updated state */
            CHECK(near(o[j], od[j], 1e-5), "step %d o[%d] = %g, want %g", step, j, o[j], od[j]);
        }
        for (int i = 0; i < D * D; i++)
            CHECK(near(S[i], Sd[i / D][i % D], 1e-5), "step %d S[%d]", step, i);
    }
}

static void test_attn_res_mix(void)
{
    enum { H = 6 };
    float c0[H] = {1, -2, 3, 0.5f, 0, 4}, c1[H] = {-1, 1, 1, 2, -3, 0.25f},
          c2[H] = {0.1f, 0.2f, -0.3f, 5, 1, -1}, key[H] = {0.3f, -0.2f, 0.5f, 1, -1, 0.25f};
    const float *cands[3] = {c0, c1, c2};
    double s[3], mx = -1e30, sum = 0;
    for (int j = 0; j < 3; j++) {
        double ss = 0, dot = 0;
        for (int d = 0; d < H; d++)
            ss += (double)cands[j][d] * cands[j][d];
        double inv = 1 / sqrt(ss / H + 1e-5);
        for (int d = 0; d < H; d++)
            dot += cands[j][d] * inv * key[d]; /* N(c_j)·(norm ⊙ proj) */
        s[j] = dot;
        mx = fmax(mx, dot);
    }
    for (int j = 0; j < 3; j++)
        sum += s[j] = exp(s[j] - mx);
    double want[H];
    for (int d = 0; d < H; d++) {
        want[d] = 0;
        for (int j = 0; j < 3; j++)
            want[d] += s[j] / sum * cands[j][d]; /* raw candidates are mixed */
    }
    float out[H];
    k3_attn_res_mix(out, cands, 3, key, H, 1e-5f);
    for (int d = 0; d < H; d++)
        CHECK(near(out[d], want[d], 1e-6), "mix[%d] = %g, want %g", d, out[d], want[d]);
    /* The output may be the last candidate itself (p ← Mix(B ∪ {p})). */
    float p[H];
    memcpy(p, c2, sizeof p);
    const float *aliased[3] = {c0, c1, p};
    k3_attn_res_mix(p, aliased, 3, key, H, 1e-5f);
    CHECK(!memcmp(p, out, sizeof p), "aliased output equals the separate one bytewise");
    /* One candidate mixes to itself. */
    const float *one[1] = {c1};
    k3_attn_res_mix(out, one, 1, key, H, 1e-5f);
    CHECK(!memcmp(out, c1, sizeof out), "a single candidate is returned unchanged");
}

static void test_router(void)
{
    struct k3_config c = base_config();
    float logits[8] = {0.5f, 2.0f, 2.0f, -1.0f, 2.0f, 0.1f, 0.0f, 1.0f};
    float bias[8] = {0};
    float key[8], w[3];
    int idx[3];
    k3_route(&c, logits, bias, idx, w, key);
    /* Three-way tie at 2.0: the lower indices win, in ascending order. */
    CHECK(idx[0] == 1 && idx[1] == 2 && idx[2] == 4, "ties: got %d %d %d", idx[0], idx[1], idx[2]);
    CHECK(near(w[0] + w[1] + w[2], 1.0, 1e-6), "renormalized: sum %g", w[0] + w[1] + w[2]);

    /* The bias changes the selected set but not the weights: expert 7 (score σ(1)) is
     * pushed above the 2.0 ties; its weight is still σ(1) before renormalizing. */
    bias[7] = 0.5f;
    bias[1] = -0.5f;
    k3_route(&c, logits, bias, idx, w, key);
    CHECK(idx[0] == 7 && idx[1] == 2 && idx[2] == 4, "bias reorders: got %d %d %d", idx[0],
          idx[1], idx[2]);
    double s7 = sig(1), s2 = sig(2), total = s7 + 2 * s2;
    CHECK(near(w[0], s7 / total, 1e-6), "weight of 7 is its unbiased score: %g vs %g", w[0],
          s7 / total);
    CHECK(near(w[1], s2 / total, 1e-6), "weight of 2: %g", w[1]);

    /* Without renormalization the weights are the scaled sigmoid scores. */
    c.renormalize = false;
    c.routed_scale = 2.5f;
    k3_route(&c, logits, bias, idx, w, key);
    CHECK(near(w[0], 2.5 * s7, 1e-6), "scaled, unnormalized: %g", w[0]);

    /* Grouped top-k: two groups of four; group 1 {4..7} holds the two best keys. */
    c = base_config();
    c.n_group = 2;
    c.topk_group = 1;
    c.top_k = 2;
    float gl[8] = {1.9f, 0, 0, 0, 1.0f, 1.5f, 1.2f, 1.4f}, gb[8] = {0};
    k3_route(&c, gl, gb, idx, w, key);
    CHECK(idx[0] == 5 && idx[1] == 7, "grouped: got %d %d (expert 0 is in a dropped group)",
          idx[0], idx[1]);
}

/* Moonshot's gate masks the dropped groups with -inf: an expert of a kept group is chosen
 * even when its key (sigmoid plus bias) is negative, never one of a dropped group. */
static void test_router_dropped_groups(void)
{
    struct k3_config c = base_config();
    c.n_group = 2;
    c.topk_group = 1;
    c.top_k = 4;
    /* Keys σ(l) + b.  Group {0..3} has the best two keys (0.95, 0.88), so group {4..7}
     * (0.5 each) is dropped; expert 1's key is σ(-2) - 0.5 = -0.38 < 0. */
    float logits[8] = {3.0f, -2.0f, 2.0f, 1.5f, 0, 0, 0, 0};
    float bias[8] = {0, -0.5f, 0, 0, 0, 0, 0, 0};
    float key[8], w[4];
    int idx[4];
    CHECK(k3_route_grouped(&c) && k3_route_choosable(&c) == 4, "1 group of 4 kept: %d choosable",
          k3_route_choosable(&c));
    k3_route(&c, logits, bias, idx, w, key);
    CHECK(idx[0] == 0 && idx[1] == 2 && idx[2] == 3 && idx[3] == 1,
          "the kept group only, the negative key last: got %d %d %d %d", idx[0], idx[1], idx[2],
          idx[3]);
    /* As many groups kept as there are: no grouping (Moonshot's n_group > topk_group). */
    c.topk_group = 2;
    CHECK(!k3_route_grouped(&c) && k3_route_choosable(&c) == 8, "2 of 2 groups kept: not grouped");
    k3_route(&c, logits, bias, idx, w, key);
    CHECK(idx[0] == 0 && idx[1] == 2 && idx[2] == 3 && idx[3] == 4, "plain top-4: got %d %d %d %d",
          idx[0], idx[1], idx[2], idx[3]);
}

/* At top-1 the gate does not renormalize: the weight is the scaled sigmoid score, also when
 * weighing a replayed choice. */
static void test_router_top1(void)
{
    struct k3_config c = base_config();
    c.top_k = 1;
    c.routed_scale = 2.0f;
    float logits[8] = {0.5f, -1.0f, 0, 0, 0, 0, 0, 0}, bias[8] = {0};
    float key[8], w[1];
    int idx[1];
    k3_route(&c, logits, bias, idx, w, key);
    CHECK(idx[0] == 0 && near(w[0], 2.0 * sig(0.5), 1e-6), "top-1: expert %d weight %g, want %g",
          idx[0], w[0], 2.0 * sig(0.5));
    int replayed = 1;
    k3_route_weigh(&c, logits, &replayed, 1, w);
    CHECK(near(w[0], 2.0 * sig(-1.0), 1e-6), "top-1 replayed: weight %g, want %g", w[0],
          2.0 * sig(-1.0));
}

int main(void)
{
    test_situ();
    test_bounded_gate();
    test_delta_rule();
    test_attn_res_mix();
    test_router();
    test_router_dropped_groups();
    test_router_top1();
    return check_result();
}
