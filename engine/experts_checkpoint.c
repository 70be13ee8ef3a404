/* Expert records straight from checkpoint shards: each expert's six tensors are read
 * with pread at their own offsets (the shipped layout does not promise they are
 * adjacent) into one record buffer, in record order. */
#include <stdlib.h>
#include <time.h>

#include "engine/experts.h"
#include "engine/model.h"
#include "engine/mxfp4.h"

struct ckpt_store {
    struct k3_expert_store base;
    const struct k3_model *m;
    uint8_t *buffers; /* [capacity][record bytes] */
    int layer;
    const int *experts;
    int n, delivered;
};

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int ckpt_begin(struct k3_expert_store *base, int layer, const int *experts, int n,
                      struct k3_err *err)
{
    struct ckpt_store *s = (struct ckpt_store *)base;
    if (n > base->capacity)
        return k3_errf(err, "expert batch of %d exceeds the store's %d buffers", n,
                       base->capacity);
    s->layer = layer;
    s->experts = experts;
    s->n = n;
    s->delivered = 0;
    return 0;
}

static int ckpt_next(struct k3_expert_store *base, int *index, const uint8_t **record,
                     struct k3_err *err)
{
    struct ckpt_store *s = (struct ckpt_store *)base;
    const struct k3_model *m = s->m;
    const struct k3_record_layout *r = &m->record;
    if (s->delivered >= s->n)
        return k3_errf(err, "expert store: next() past the end of the batch");
    int i = s->delivered++;
    uint8_t *buf = s->buffers + (size_t)i * r->bytes;
    const struct k3_expert_loc *loc =
        &m->experts[(size_t)s->layer * m->cfg.n_experts + s->experts[i]];
    double t0 = now_seconds();
    for (int p = 0; p < K3_EXPERT_PARTS; p++)
        if (k3_ckpt_read(m->ckpt, loc->part[p], buf + r->off[p], 0, r->len[p], err))
            return -1;
    base->stats.read_seconds += now_seconds() - t0;
    for (int p = K3_W1_SCALE; p < K3_EXPERT_PARTS; p += 2)
        base->stats.nan_scale_groups += k3_mxfp4_count_nan_scales(buf + r->off[p], r->len[p]);
    base->stats.records++;
    base->stats.bytes += r->bytes;
    *index = i;
    *record = buf;
    return 0;
}

static void ckpt_close(struct k3_expert_store *base)
{
    struct ckpt_store *s = (struct ckpt_store *)base;
    free(s->buffers);
    free(s);
}

static const struct k3_expert_store_ops ckpt_ops = {
    .name = "checkpoint-pread",
    .begin = ckpt_begin,
    .next = ckpt_next,
    .close = ckpt_close,
};

int k3_expert_store_checkpoint(struct k3_expert_store **out, const struct k3_model *m,
                               int capacity, struct k3_err *err)
{
    struct ckpt_store *s = calloc(1, sizeof *s);
    if (s)
        s->buffers = malloc((size_t)capacity * m->record.bytes);
    if (!s || !s->buffers) {
        free(s);
        return k3_errf(err, "out of memory for %d expert buffers", capacity);
    }
    s->base.ops = &ckpt_ops;
    s->base.capacity = capacity;
    s->m = m;
    *out = &s->base;
    return 0;
}
