/* A checkpoint folder seen as a pack (engine/pack/ckpt_view.h) hands the read path the
 * checkpoint's own bytes: every trunk tensor where the model's layout says, every expert
 * record assembled into the record layout (k3-tiny's shards keep w1, w2, w3 in name
 * order at offsets that are not 4 KiB-aligned, so a record lands in three spans and is
 * moved).  A shard cut short after the folder opened fails the read with one line
 * naming the shard. */
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/model/model.h"
#include "engine/pack/model_open.h"
#include "engine/pack/packed.h"
#include "engine/stream/stream.h"
#include "tests/util.h"

/* The checkpoint's bytes of tensor t. */
static uint8_t *tensor_bytes(const struct k3_checkpoint *ck, const struct k3_ckpt_tensor *t)
{
    uint8_t *b = malloc(t->t->nbytes + 1);
    struct k3_err e;
    REQUIRE(b && k3_ckpt_read(ck, t, b, 0, t->t->nbytes, &e) == 0, "%s", e.msg);
    return b;
}

static void trunk_as_stored(const struct k3_model *m, const struct k3_checkpoint *ck,
                            const struct k3_ckpt_plan *cp)
{
    int bad = 0;
    for (int i = 0; i < cp->n_specs; i++) {
        uint8_t *want = tensor_bytes(ck, cp->trunk[i]);
        const uint8_t *got = m->segment_base[m->plan.layout.segment[i]] + m->plan.layout.offset[i];
        bad += memcmp(want, got, cp->trunk[i]->t->nbytes) != 0;
        free(want);
    }
    CHECK(!bad, "%d of %d trunk tensors differ from the checkpoint's bytes", bad, cp->n_specs);
}

static int check_record(const struct k3_model *m, const struct k3_checkpoint *ck,
                        const struct k3_expert_loc *loc, const uint8_t *record)
{
    int bad = 0;
    for (int p = 0; p < K3_EXPERT_PARTS; p++) {
        uint8_t *want = tensor_bytes(ck, loc->part[p]);
        bad += memcmp(want, record + m->record.off[p], m->record.len[p]) != 0;
        free(want);
    }
    return bad;
}

static void records_as_stored(const struct k3_model *m, struct k3_expert_store *st,
                              const struct k3_checkpoint *ck, const struct k3_ckpt_plan *cp)
{
    const struct k3_config *c = &m->cfg;
    int experts[K3_MAX_TOPK], bad = 0, n_records = 0, moved = 0;
    struct k3_err e;
    for (int l = 0; l < c->n_layers; l++) {
        if (!k3_layer_is_moe(c, l))
            continue;
        for (int e0 = 0; e0 < c->n_experts; e0 += st->capacity) {
            int n = c->n_experts - e0 < st->capacity ? c->n_experts - e0 : st->capacity;
            for (int i = 0; i < n; i++)
                experts[i] = e0 + i;
            REQUIRE(st->ops->begin(st, l, experts, n, &e) == 0, "%s", e.msg);
            for (int k = 0; k < n; k++) {
                struct k3_landed got;
                REQUIRE(st->ops->next(st, true, &got, &e) == 0, "%s", e.msg);
                int ex = experts[got.index];
                bad += check_record(m, ck, &cp->experts[(size_t)l * c->n_experts + ex], got.record) != 0;
                uint64_t o = k3_model_record_object(m, l, ex);
                moved += m->packed->first_move[o + 1] > m->packed->first_move[o];
                n_records++;
            }
        }
    }
    CHECK(!bad, "%d of %d records differ from the checkpoint's tensors", bad, n_records);
    CHECK(moved > 0, "no record needed moving: the assembly went untested");
    printf("%d records as stored (%d assembled by moves)\n", n_records, moved);
}

/* Shard `file` of dir cut short after the model opened (its header passed): the first
 * read past the cut fails, with one line naming the shard. */
static void truncated_after_open(struct k3_model *m, const char *dir, const char *file)
{
    char path[8192];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    REQUIRE(truncate(path, 300000) == 0, "truncate %s", path);
    struct k3_stream *s;
    struct k3_stream_opts so = {.ram = K3_RAM_TRUNK, .ctx = 8, .threads = omp_get_max_threads(),
                                .cache = true};
    struct k3_err e = {{0}};
    CHECK(k3_stream_open(&s, m, &so, NULL, 0, &e) == -1, "a truncated shard was read");
    CHECK(strstr(e.msg, path) && strstr(e.msg, "shard truncated") && !strchr(e.msg, '\n'),
          "error does not name the shard in one line: %s", e.msg);
    printf("truncated: %s\n", e.msg);
}

int main(void)
{
    char dir[2048], cmd[16384];
    snprintf(dir, sizeof dir, "%s/ckpt-view", test_tmp());
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && cp -r '%s' '%s'", dir, tiny_model(), dir);
    REQUIRE(system(cmd) == 0, "%s", cmd);
    struct k3_model m;
    struct k3_checkpoint *ck;
    struct k3_ckpt_plan cp;
    struct k3_err e = {{0}};
    REQUIRE(k3_model_open_checkpoint(&m, dir, &e) == 0, "%s", e.msg);
    REQUIRE(k3_ckpt_open(&ck, dir, &e) == 0 && k3_ckpt_plan_init(&cp, ck, &m.cfg, &e) == 0, "%s",
            e.msg);
    struct k3_stream *s;
    struct k3_stream_opts so = {.ram = K3_RAM_TRUNK, .ctx = 8, .threads = omp_get_max_threads(),
                                .cache = true};
    REQUIRE(k3_stream_open(&s, &m, &so, NULL, 0, &e) == 0, "%s", e.msg);
    trunk_as_stored(&m, ck, &cp);
    records_as_stored(&m, k3_stream_experts(s), ck, &cp);
    k3_stream_close(s);
    truncated_after_open(&m, dir, "model-00002-of-00003.safetensors");
    k3_ckpt_plan_free(&cp);
    k3_ckpt_close(ck);
    k3_model_close(&m);
    return check_result();
}
