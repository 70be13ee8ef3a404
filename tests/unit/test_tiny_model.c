/* k3-tiny end to end against tests/ref's fixtures (fixtures/k3-tiny; tests/ref is our own
 * PyTorch implementation of the model, written from the spec): the synthetic checkpoint is
 * the one the fixtures were made from (xxh64 per file), logits agree within 1e-4 of
 * max|logit|, the 32 greedy tokens are identical, and prefill, token-by-token decode and
 * thread counts give the same bytes. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/forward/expert_store.h"
#include "engine/forward/forward.h"
#include "engine/model/model.h"
#include "engine/pack/model_open.h"
#include "engine/stream/stream.h"
#include "engine/forward/sampler.h"
#include "tests/fixture.h"

/* Per-layer summaries: on a logits mismatch, the first layer that differs. */
struct stats_capture {
    float s[128][16][3];
};

static void capture_hook(void *ctx, int pos, int layer, const float *x, int H)
{
    struct stats_capture *c = ctx;
    if (pos >= 128 || layer >= 16)
        return;
    double ss = 0, sum = 0, mx = 0;
    for (int i = 0; i < H; i++) {
        ss += (double)x[i] * x[i];
        sum += x[i];
        mx = fmax(mx, fabs(x[i]));
    }
    c->s[pos][layer][0] = (float)sqrt(ss / H);
    c->s[pos][layer][1] = (float)(sum / H);
    c->s[pos][layer][2] = (float)mx;
}

static void check_layer_stats(const struct stats_capture *cap, const struct fixture *f, int layers)
{
    for (int pos = 0; pos < f->n_prompt; pos++)
        for (int l = 0; l <= layers; l++) {
            json_t *v = json_array_get(json_array_get(f->layer_stats, (size_t)pos), (size_t)l);
            double rms = json_number_value(json_array_get(v, 0));
            if (fabs(cap->s[pos][l][0] - rms) > 1e-3 * rms) {
                CHECK(0, "first divergence: position %d layer %d: rms %.6g, reference %.6g", pos,
                      l, cap->s[pos][l][0], rms);
                return;
            }
        }
}

struct runner {
    struct k3_model m;
    struct k3_stream *stream;
    struct k3_expert_store *store;
};

/* Prompt at once (all rows), then greedy decode; returns rows [n_prompt + n - 1][V]. */
static float *run_model(struct runner *r, const int32_t *prompt, int n_prompt, int n, bool
                        token_by_token, int32_t *out_ids, struct stats_capture *cap)
{
    int V = r->m.cfg.vocab;
    struct k3_forward f;
    struct k3_seq q;
    struct k3_err e = {{0}};
    REQUIRE(k3_forward_init(&f, &r->m, r->store, n_prompt + n, K3_CHUNK, NULL, &e) == 0, "%s", e.msg);
    REQUIRE(k3_seq_init(&q, &r->m.cfg, n_prompt + n, &e) == 0, "%s", e.msg);
    if (cap)
        f.hooks = (struct k3_forward_hooks){.on_layer = capture_hook, .on_layer_ctx = cap};
    float *rows = calloc((size_t)(n_prompt + n) * V, sizeof(float));
    if (token_by_token) {
        for (int i = 0; i < n_prompt; i++)
            REQUIRE(k3_forward_tokens(&f, &q, prompt + i, 1, rows + (size_t)i * V, true, &e) == 0, "%s", e.msg);
    } else {
        REQUIRE(k3_forward_tokens(&f, &q, prompt, n_prompt, rows, true, &e) == 0, "%s", e.msg);
    }
    for (int i = 0; i < n; i++) {
        const float *last = rows + (size_t)(n_prompt + i - 1) * V;
        out_ids[i] = k3_argmax(last, V);
        if (i + 1 < n)
            REQUIRE(k3_forward_tokens(&f, &q, &out_ids[i], 1, rows + (size_t)(n_prompt + i) * V, false, &e) == 0,
                    "%s", e.msg);
    }
    k3_seq_free(&q);
    k3_forward_free(&f);
    return rows;
}

int main(void)
{
    const char *model = tiny_model();

    struct runner r;
    struct k3_err e = {{0}};
    REQUIRE(k3_model_open_checkpoint(&r.m, model, &e) == 0, "%s", e.msg);
    /* The whole trunk resident: bound to the model at open, so no trunk hook is needed. */
    struct k3_stream_opts so = {.ram = K3_RAM_TRUNK, .ctx = 64, .threads = omp_get_max_threads(),
                                .cache = true};
    REQUIRE(k3_stream_open(&r.stream, &r.m, &so, NULL, 0, &e) == 0, "%s", e.msg);
    r.store = k3_stream_experts(r.stream);
    int V = r.m.cfg.vocab;
    struct fixture f;
    fixture_load(&f, "k3-tiny", V);
    fixture_check_checkpoint(&f, model);
    CHECK(f.router_bias_changed > 0, "the fixture has a routing the bias changed");

    static struct stats_capture cap;
    int32_t ids[64], ids_tbt[64], ids_1t[64];
    int n = f.n_greedy;
    omp_set_num_threads(2);
    float *rows = run_model(&r, f.prompt, f.n_prompt, n, false, ids, &cap);
    double rel = fixture_compare_rows(rows, f.prompt_logits, f.n_prompt, V, "prompt logits");
    if (rel > FIXTURE_REL_TOL)
        check_layer_stats(&cap, &f, r.m.cfg.n_layers);
    fixture_compare_rows(rows + (size_t)f.n_prompt * V, f.decode_logits, n - 1, V, "decode logits");
    int same = 0, distinct = 0;
    for (int i = 0; i < n; i++) {
        same += ids[i] == f.greedy[i];
        int seen = 0;
        for (int j = 0; j < i; j++)
            seen |= ids[j] == ids[i];
        distinct += !seen;
    }
    printf("greedy tokens identical to the reference: %d/%d (%d distinct)\n", same, n, distinct);
    CHECK(same == n, "greedy tokens differ from the reference");
    CHECK(distinct >= n / 4, "greedy output nearly one repeated token: %d distinct", distinct);

    /* Prefill then decode against one token at a time, and against one thread: bytes. */
    float *rows_tbt = run_model(&r, f.prompt, f.n_prompt, n, true, ids_tbt, NULL);
    size_t bytes = sizeof(float) * (size_t)(f.n_prompt + n - 1) * V;
    CHECK(!memcmp(rows, rows_tbt, bytes), "prefill and token-by-token logits differ");
    CHECK(!memcmp(ids, ids_tbt, sizeof(int32_t) * n), "prefill and token-by-token ids differ");
    omp_set_num_threads(1);
    float *rows_1t = run_model(&r, f.prompt, f.n_prompt, n, false, ids_1t, NULL);
    CHECK(!memcmp(rows, rows_1t, bytes), "1 and 2 threads give different logits");

    /* Logits of a working model: finite and spread, not flat. */
    for (int i = 0; i < f.n_prompt + n - 1; i++) {
        double sum = 0, ss = 0;
        for (int v = 0; v < V; v++) {
            sum += rows[(size_t)i * V + v];
            ss += (double)rows[(size_t)i * V + v] * rows[(size_t)i * V + v];
        }
        double sd = sqrt(ss / V - (sum / V) * (sum / V));
        CHECK(sd > 0.5, "row %d: logits nearly flat (sd %.3f)", i, sd);
    }
    free(rows);
    free(rows_tbt);
    free(rows_1t);
    fixture_free(&f);
    k3_stream_close(r.stream);
    k3_model_close(&r.m);
    return check_result();
}
