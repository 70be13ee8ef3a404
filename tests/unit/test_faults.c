/* Injected read faults never produce a wrong token: 660 short generations under random
 * faults (-EIO, short reads, -EAGAIN, flipped bytes, a drive lost mid-run), on a pack with
 * replicas and one without, each either gives the fault-free logits bytewise or stops
 * with an error naming the drive, what was read and where. */
#include <omp.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "engine/forward/forward.h"
#include "engine/model/model.h"
#include "engine/pack/model_open.h"
#include "engine/pack/pack.h"
#include "engine/base/rng.h"
#include "engine/forward/sampler.h"
#include "engine/stream/stream.h"
#include "tests/util.h"

#define STEPS 3
#define VOCAB 2048

struct outcome {
    int identical, errors, wrong;
};

/* Prompt, then STEPS greedy tokens; the logits of every step into rows. */
static int generate(struct k3_model *m, struct k3_stream *s, float *rows, struct k3_err *err)
{
    struct k3_forward f;
    struct k3_seq q;
    if (k3_forward_init(&f, m, k3_stream_experts(s), 8, K3_CHUNK, NULL, err))
        return -1;
    if (k3_seq_init(&q, &m->cfg, 8, err)) {
        k3_forward_free(&f);
        return -1;
    }
    f.hooks = (struct k3_forward_hooks){.trunk = k3_stream_trunk(s),
                                        .predict = K3_PREDICT_MOE_INPUT_NEXT, .predict_k = 20};
    int32_t tok[3] = {5, 17, 300};
    int rc = k3_forward_tokens(&f, &q, tok, 3, rows, false, err);
    for (int i = 0; !rc && i < STEPS; i++) {
        int32_t next = k3_argmax(rows + (size_t)i * VOCAB, VOCAB);
        rc = k3_forward_tokens(&f, &q, &next, 1, rows + (size_t)(i + 1) * VOCAB, false, err);
    }
    k3_seq_free(&q);
    k3_forward_free(&f);
    return rc;
}

static void run_pack(const char *name, int n_drives, int replicas, uint64_t ram, int runs,
                     struct outcome *out)
{
    char dirs[4][4200];
    const char *drives[4];
    for (int d = 0; d < n_drives; d++) {
        snprintf(dirs[d], sizeof dirs[d], "%s/faults-%s-%d", test_tmp(), name, d);
        mkdir(dirs[d], 0755);
        drives[d] = dirs[d];
    }
    struct k3_err e = {{0}};
    struct k3_pack_opts po = {.checkpoint = tiny_model(), .drives = drives, .n_drives = n_drives,
                              .replicas = replicas};
    REQUIRE(k3_pack(&po, &e) == 0, "pack: %s", e.msg);
    struct k3_model m;
    REQUIRE(k3_model_open_packed(&m, drives, n_drives, (struct k3_share){0}, &e) == 0, "%s", e.msg);
    /* One stream serves every run: the faults are re-armed and the drives' state
     * forgotten before each. */
    struct k3_stream_opts so = {.ram = ram, .ctx = 8, .threads = omp_get_max_threads(),
                                .prefetch_k = 20};
    struct k3_stream *s;
    REQUIRE(k3_stream_open(&s, &m, &so, NULL, 0, &e) == 0, "%s", e.msg);
    static float want[(STEPS + 1) * VOCAB], got[(STEPS + 1) * VOCAB];
    REQUIRE(generate(&m, s, want, &e) == 0, "fault-free: %s", e.msg);
    struct k3_rng r;
    k3_rng_seed(&r, (uint64_t)replicas);
    for (int i = 0; i < runs; i++) {
        char spec[160];
        double p = 0.002 + 0.03 * k3_rng_uniform(&r);
        int len = snprintf(spec, sizeof spec, "eio:%.4f,short:%.4f,eagain:%.4f,corrupt:%.4f", p,
                           2 * p, p, p / 4);
        if (i % 10 == 9) /* now and then a drive goes away mid-run */
            snprintf(spec + len, sizeof spec - (size_t)len, ",drive-loss:%d@%d",
                     (int)(k3_rng_next(&r) % (uint64_t)n_drives), (int)(k3_rng_next(&r) % 400));
        memset(got, 0, sizeof got);
        REQUIRE(k3_stream_set_faults(s, spec, (uint64_t)i + 1, &e) == 0, "%s", e.msg);
        if (generate(&m, s, got, &e)) {
            out->errors++;
            CHECK(strstr(e.msg, "drive ") && strstr(e.msg, "reading ") && strstr(e.msg, "offset"),
                  "%s: the error does not name drive, record and offset: %s", spec, e.msg);
        } else if (!memcmp(got, want, sizeof want)) {
            out->identical++;
        } else {
            out->wrong++;
            CHECK(0, "%s (seed %d): WRONG OUTPUT without an error", spec, i + 1);
        }
    }
    k3_stream_close(s);
    k3_model_close(&m);
    printf("%s: %d generations under faults: %d identical, %d stopped with an error, %d wrong\n",
           name, runs, out->identical, out->errors, out->wrong);
}

int main(void)
{
    /* 660 runs: with replicas and without, the trunk resident (expert reads only), and
     * with replicas at the floor (the trunk streams too, under the same faults); each
     * tenth loses a drive, so 30 drive losses on each pack. */
    struct outcome with = {0}, without = {0}, floor = {0};
    run_pack("replicas", 3, 2, K3_RAM_TRUNK, 300, &with);
    run_pack("single", 2, 1, K3_RAM_TRUNK, 300, &without);
    run_pack("replicas-floor", 3, 2, K3_RAM_FLOOR, 60, &floor);
    with.identical += floor.identical;
    with.errors += floor.errors;
    with.wrong += floor.wrong;
    CHECK(with.wrong == 0 && without.wrong == 0, "wrong outputs");
    /* Replicas must turn most faults into identical output. */
    CHECK(with.identical > with.errors, "with replicas: %d identical, %d errors", with.identical,
          with.errors);
    CHECK(without.errors > 0, "without replicas some faults must stop a run");
    return check_result();
}
