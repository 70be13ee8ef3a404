/* The reference's fixtures (fixtures/NAME, tests/ref/make_fixtures.sh) as the unit tests
 * read them: the prompt and greedy ids, the logits rows, the per-layer summaries, the
 * checkpoint's hashes; and the comparison of an engine's logits with them. */
#ifndef K3_TESTS_FIXTURE_H
#define K3_TESTS_FIXTURE_H

#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <xxhash.h>

#include "tests/util.h"

#define FIXTURE_REL_TOL 1e-4 /* max |Δlogit| ≤ FIXTURE_REL_TOL × max|logit| */
#define FIXTURE_MAX_IDS 64

struct fixture {
    char dir[4096];
    int32_t prompt[FIXTURE_MAX_IDS];
    int n_prompt;
    int32_t greedy[FIXTURE_MAX_IDS];
    int n_greedy;
    float *prompt_logits, *decode_logits; /* [n_prompt][V], [n_greedy-1][V] */
    json_t *layer_stats;                  /* [row][layer][rms, mean, max_abs] */
    int router_bias_changed;
};

static inline int fixture_ids(json_t *arr, int32_t *out)
{
    int n = 0;
    size_t i;
    json_t *v;
    json_array_foreach(arr, i, v) if (n < FIXTURE_MAX_IDS)
        out[n++] = (int32_t)json_integer_value(v);
    return n;
}

/* fixtures/NAME of the committed tree, for a model of vocab tokens. */
static inline void fixture_load(struct fixture *f, const char *name, int vocab)
{
    snprintf(f->dir, sizeof f->dir, "%s/fixtures/%s", test_root(), name);
    char path[4200];
    snprintf(path, sizeof path, "%s/fixture.json", f->dir);
    json_error_t jerr;
    json_t *root = json_load_file(path, 0, &jerr);
    REQUIRE(root, "%s: %s", path, jerr.text);
    f->n_prompt = fixture_ids(json_object_get(root, "prompt_ids"), f->prompt);
    f->n_greedy = fixture_ids(json_object_get(root, "greedy_ids"), f->greedy);
    f->layer_stats = json_incref(json_object_get(root, "layer_stats"));
    f->router_bias_changed = (int)json_integer_value(json_object_get(root, "router_bias_changed"));
    json_decref(root);
    size_t len;
    snprintf(path, sizeof path, "%s/prompt_logits.f32", f->dir);
    f->prompt_logits = read_file(path, &len);
    REQUIRE(f->prompt_logits && len == sizeof(float) * (size_t)f->n_prompt * vocab, "%s", path);
    snprintf(path, sizeof path, "%s/decode_logits.f32", f->dir);
    f->decode_logits = read_file(path, &len);
    REQUIRE(f->decode_logits && len == sizeof(float) * (size_t)(f->n_greedy - 1) * vocab, "%s",
            path);
}

static inline void fixture_free(struct fixture *f)
{
    free(f->prompt_logits);
    free(f->decode_logits);
    json_decref(f->layer_stats);
}

/* Every file of the synth checkpoint in model hashes as the fixture recorded (xxhsum -H1
 * lines). */
static inline void fixture_check_checkpoint(const struct fixture *fx, const char *model)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/checkpoint.xxh64", fx->dir);
    FILE *f = fopen(path, "r");
    REQUIRE(f, "%s missing (make fixtures)", path);
    char hex[32], name[256];
    int files = 0;
    while (fscanf(f, "%31s %255s", hex, name) == 2) {
        char file[4600];
        snprintf(file, sizeof file, "%s/%s", model, name);
        size_t len;
        void *data = read_file(file, &len);
        CHECK(data, "%s missing from the synth output", name);
        if (!data)
            continue;
        char got[32];
        snprintf(got, sizeof got, "%016llx", (unsigned long long)XXH64(data, len, 0));
        CHECK(!strcmp(got, hex), "%s: xxh64 %s, fixtures have %s: synth output changed since "
              "the fixtures were made (run make fixtures)", name, got, hex);
        free(data);
        files++;
    }
    fclose(f);
    CHECK(files >= 5, "checkpoint.xxh64 lists %d files", files);
}

/* got against want over rows x vocab: checked within FIXTURE_REL_TOL of max|want|; prints
 * the measured difference and returns it relative to max|want| (INFINITY: non-finite). */
static inline double fixture_compare_rows(const float *got, const float *want, int rows,
                                          int vocab, const char *what)
{
    double max_abs = 0, max_diff = 0;
    for (size_t i = 0; i < (size_t)rows * vocab; i++) {
        max_abs = fmax(max_abs, fabs(want[i]));
        max_diff = fmax(max_diff, fabs((double)got[i] - want[i]));
        CHECK(isfinite(got[i]), "%s: non-finite logit at %zu", what, i);
        if (!isfinite(got[i]))
            return INFINITY;
    }
    printf("%s: %d rows, max|logit| %.4f, max |dlogit| %.3g = %.3g of max|logit|\n", what, rows,
           max_abs, max_diff, max_diff / max_abs);
    CHECK(max_diff <= FIXTURE_REL_TOL * max_abs, "%s: max |dlogit| %.3g exceeds %.0e x %.3g",
          what, max_diff, FIXTURE_REL_TOL, max_abs);
    return max_diff / max_abs;
}

#endif
