/* Group-limited routing end to end: k3-tiny with 8 expert groups of which the router keeps
 * 2 (tests/configs/k3-tiny-grouped.json, use_grouped_topk false) against tests/ref's
 * fixtures (fixtures/k3-tiny-grouped; tests/ref is our own PyTorch implementation, from
 * the spec), run as `run` does, with prediction off and on (the predictor's router asks
 * for --prefetch-k 24 experts where a grouped router can choose 16), with the whole trunk
 * resident and streamed.  Logits within 1e-4 of max|logit|, the greedy tokens identical,
 * and the same bytes in every setting.  The dropped groups' experts are masked with -inf,
 * as Moonshot's gate does: zeroing them instead (DeepSeek-V3) moves these logits by 0.18
 * of max|logit|. */
#include <dirent.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/forward/sampler.h"
#include "engine/runtime/runtime.h"
#include "tests/fixture.h"

#define NAME "k3-tiny-grouped"

/* A flat folder (a synth checkpoint) and its files, if there. */
static void remove_flat(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
            char path[4400];
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            unlink(path);
        }
    closedir(d);
    rmdir(dir);
}

/* The fixture's checkpoint: synth of its config, seed 1, made afresh by this build (half a
 * second), so that no folder an older synth left fails the hashes. */
static const char *grouped_model(void)
{
    static char dir[4096];
    snprintf(dir, sizeof dir, "%s/%s-seed1", test_tmp(), NAME);
    remove_flat(dir);
    mkdir(test_tmp(), 0755);
    char config[4200];
    snprintf(config, sizeof config, "%s/tests/configs/%s.json", test_root(), NAME);
    struct k3_config c;
    struct k3_err err;
    REQUIRE(k3_config_load(&c, config, &err) == 0, "%s", err.msg);
    REQUIRE(c.n_group == 8 && c.topk_group == 2, "%s: %d groups, %d kept", config, c.n_group,
            c.topk_group);
    REQUIRE(k3_synth(&c, 1, dir, NULL, &err) == 0, "%s", err.msg);
    k3_config_free(&c);
    return dir;
}

struct setting {
    const char *name;
    enum k3_predict_from predict;
    uint64_t ram;
};

/* The prompt at once, then n greedy tokens one at a time, as `run` computes them; returns
 * rows [n_prompt + n - 1][V] and the tokens in ids. */
static float *generate(const char *model, const struct setting *s, const struct fixture *fx,
                       int32_t *ids)
{
    struct k3_runtime *rt;
    struct k3_err e = {{0}};
    struct k3_runtime_opts o = {.model_dir = model, .ram = s->ram, .predict = s->predict,
                                .prefetch_k = K3_PREFETCH_K_DEFAULT, .read.prefetch_depth = 2};
    int n_prompt = fx->n_prompt, n = fx->n_greedy, ctx = n_prompt + n;
    REQUIRE(k3_runtime_open(&rt, &o, &e) == 0, "%s: %s", s->name, e.msg);
    REQUIRE(k3_runtime_start(rt, ctx, 1, K3_CHUNK, (struct k3_caller_bytes){0}, NULL, &e) == 0,
            "%s: %s", s->name, e.msg);
    int V = k3_runtime_config(rt)->vocab;
    struct k3_seq q;
    REQUIRE(k3_seq_init(&q, k3_runtime_config(rt), ctx, &e) == 0, "%s", e.msg);
    float *rows = calloc((size_t)ctx * V, sizeof(float));
    REQUIRE(rows, "out of memory");
    REQUIRE(k3_runtime_tokens(rt, &q, fx->prompt, n_prompt, rows, true, &e) == 0, "%s: %s",
            s->name, e.msg);
    for (int i = 0; i < n; i++) {
        ids[i] = k3_argmax(rows + (size_t)(n_prompt + i - 1) * V, V);
        if (i + 1 < n)
            REQUIRE(k3_runtime_tokens(rt, &q, &ids[i], 1, rows + (size_t)(n_prompt + i) * V,
                                      false, &e) == 0,
                    "%s: %s", s->name, e.msg);
    }
    k3_seq_free(&q);
    REQUIRE(k3_runtime_close(rt, &e) == 0, "%s", e.msg);
    return rows;
}

int main(void)
{
    const char *model = grouped_model();
    struct k3_config c;
    struct k3_err e = {{0}};
    char config[4200];
    snprintf(config, sizeof config, "%s/config.json", model);
    REQUIRE(k3_config_load(&c, config, &e) == 0, "%s", e.msg);
    int V = c.vocab;
    CHECK(k3_route_grouped(&c) && k3_route_choosable(&c) == 16 &&
              k3_route_choosable(&c) < K3_PREFETCH_K_DEFAULT,
          "the variant groups, with fewer choosable experts than --prefetch-k asks for");
    k3_config_free(&c);
    struct fixture fx;
    fixture_load(&fx, NAME, V);
    fixture_check_checkpoint(&fx, model);
    CHECK(fx.router_bias_changed > 0, "the fixture has a routing the bias changed");

    const struct setting settings[] = {
        {"prediction off, trunk resident", K3_PREDICT_OFF, K3_RAM_TRUNK},
        {"prediction on, trunk resident", K3_PREDICT_MOE_INPUT_NEXT, K3_RAM_TRUNK},
        {"prediction on, trunk streamed", K3_PREDICT_MOE_INPUT_NEXT, K3_RAM_FLOOR},
    };
    int n_set = (int)(sizeof settings / sizeof settings[0]), n = fx.n_greedy;
    size_t bytes = sizeof(float) * (size_t)(fx.n_prompt + n - 1) * V;
    float *first = NULL;
    int32_t first_ids[FIXTURE_MAX_IDS];
    omp_set_num_threads(2);
    for (int i = 0; i < n_set; i++) {
        int32_t ids[FIXTURE_MAX_IDS];
        float *rows = generate(model, &settings[i], &fx, ids);
        printf("%s:\n", settings[i].name);
        fixture_compare_rows(rows, fx.prompt_logits, fx.n_prompt, V, "  prompt logits");
        fixture_compare_rows(rows + (size_t)fx.n_prompt * V, fx.decode_logits, n - 1, V,
                             "  decode logits");
        int same = 0;
        for (int t = 0; t < n; t++)
            same += ids[t] == fx.greedy[t];
        printf("  greedy tokens identical to the reference: %d/%d\n", same, n);
        CHECK(same == n, "%s: greedy tokens differ from the reference", settings[i].name);
        if (!first) {
            first = rows;
            memcpy(first_ids, ids, sizeof(int32_t) * (size_t)n);
            continue;
        }
        CHECK(!memcmp(rows, first, bytes), "%s: logits differ from %s", settings[i].name,
              settings[0].name);
        CHECK(!memcmp(ids, first_ids, sizeof(int32_t) * (size_t)n), "%s: tokens differ from %s",
              settings[i].name, settings[0].name);
        free(rows);
    }
    free(first);
    fixture_free(&fx);
    return check_result();
}
