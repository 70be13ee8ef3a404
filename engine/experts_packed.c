/* Expert records from packed drives: a record's pieces are read from every drive into
 * one buffer in logical order, each piece verified against its checksum. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "engine/experts.h"
#include "engine/model.h"
#include "engine/mxfp4.h"
#include "engine/packed.h"

struct packed_store {
    struct k3_expert_store base;
    const struct k3_model *m;
    uint8_t *buffers; /* [capacity][stride] */
    uint64_t stride;
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

static int packed_begin(struct k3_expert_store *base, int layer, const int *experts, int n,
                        struct k3_err *err)
{
    struct packed_store *s = (struct packed_store *)base;
    if (n > base->capacity)
        return k3_errf(err, "expert batch of %d exceeds the store's %d buffers", n,
                       base->capacity);
    s->layer = layer;
    s->experts = experts;
    s->n = n;
    s->delivered = 0;
    return 0;
}

static int packed_next(struct k3_expert_store *base, int *index, const uint8_t **record,
                       struct k3_err *err)
{
    struct packed_store *s = (struct packed_store *)base;
    const struct k3_model *m = s->m;
    if (s->delivered >= s->n)
        return k3_errf(err, "expert store: next() past the end of the batch");
    int i = s->delivered++;
    uint8_t *buf = s->buffers + (size_t)i * s->stride;
    double t0 = now_seconds();
    if (k3_packed_read_object(m->packed, k3_model_record_object(m, s->layer, s->experts[i]), buf,
                              err))
        return -1;
    base->stats.read_seconds += now_seconds() - t0;
    const struct k3_record_layout *r = &m->record;
    for (int p = K3_W1_SCALE; p < K3_EXPERT_PARTS; p += 2)
        base->stats.nan_scale_groups += k3_mxfp4_count_nan_scales(buf + r->off[p], r->len[p]);
    base->stats.records++;
    base->stats.bytes += r->bytes;
    *index = i;
    *record = buf;
    return 0;
}

static void packed_close(struct k3_expert_store *base)
{
    struct packed_store *s = (struct packed_store *)base;
    free(s->buffers);
    free(s);
}

static const struct k3_expert_store_ops packed_ops = {
    .name = "packed-pread",
    .begin = packed_begin,
    .next = packed_next,
    .close = packed_close,
};

int k3_expert_store_packed(struct k3_expert_store **out, const struct k3_model *m, int capacity,
                           struct k3_err *err)
{
    struct packed_store *s = calloc(1, sizeof *s);
    if (!s)
        return k3_errf(err, "out of memory");
    /* Every record has the same size and piece layout: the first one's buffer size serves. */
    if (m->packed->header.n_objects > m->packed->header.n_trunk_objects)
        s->stride = k3_packed_buffer_bytes(m->packed, m->packed->header.n_trunk_objects);
    s->buffers = k3io_alloc((size_t)capacity * s->stride);
    if (!s->buffers) {
        free(s);
        return k3_errf(err, "out of memory for %d expert buffers", capacity);
    }
    for (int d = 0; d < m->packed->n_drives && !s->base.fallback[0]; d++)
        if (!m->packed->drives[d].data.direct)
            snprintf(s->base.fallback, sizeof s->base.fallback,
                     "drive %s refuses O_DIRECT; reading it through the page cache",
                     m->packed->drives[d].path);
    s->base.ops = &packed_ops;
    s->base.capacity = capacity;
    s->m = m;
    *out = &s->base;
    return 0;
}
