/* Expert records straight from checkpoint shards.  The shipped layout does not promise
 * that an expert's six tensors are adjacent, so each record is assembled from its
 * tensors' own offsets.  Reads are O_DIRECT where the filesystem allows: the aligned
 * span covering the tensors (one read when they sit together, as safetensors writers
 * leave them) goes to a bounce buffer, and the parts are copied into record order. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/stream/experts.h"
#include "engine/model/model.h"
#include "engine/kernels/mxfp4.h"
#include "engine/pack/pack_format.h"
#include "iouring/file.h"

struct ckpt_store {
    struct k3_expert_store base;
    const struct k3_model *m;
    struct k3io_file *files; /* [n_shards], O_DIRECT where allowed */
    uint8_t *buffers;        /* [capacity][record bytes] */
    uint8_t *bounce;         /* aligned, bounce_bytes */
    uint64_t bounce_bytes;
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

/* Reads [off, off+len) of a shard through the aligned bounce buffer into dst. */
static int aligned_read(struct ckpt_store *s, int shard, uint64_t off, uint64_t len, uint8_t *dst,
                        struct k3_err *err)
{
    const struct k3_shard *sh = &s->m->ckpt->shards[shard];
    uint64_t a = off / K3IO_ALIGN * K3IO_ALIGN;
    while (len) {
        uint64_t end = k3_pack_round_up(off + len, K3IO_ALIGN);
        uint64_t span = end - a < s->bounce_bytes ? end - a : s->bounce_bytes;
        ssize_t got = k3io_pread_full(&s->files[shard], s->bounce, (size_t)span, a);
        uint64_t usable = got > 0 && (uint64_t)got > off - a ? (uint64_t)got - (off - a) : 0;
        uint64_t take = usable < len ? usable : len;
        if (got < 0 || !take)
            return k3_errf(err, "%s: reading %llu bytes at offset %llu: %s", sh->path,
                           (unsigned long long)len, (unsigned long long)off,
                           got < 0 ? strerror((int)-got) : "unexpected end of file");
        memcpy(dst, s->bounce + (off - a), take);
        dst += take;
        off += take;
        len -= take;
        a = off / K3IO_ALIGN * K3IO_ALIGN;
    }
    return 0;
}

static int read_record(struct ckpt_store *s, const struct k3_expert_loc *loc, uint8_t *buf,
                       struct k3_err *err)
{
    const struct k3_record_layout *r = &s->m->record;
    uint64_t lo = UINT64_MAX, hi = 0;
    int shard = loc->part[0]->shard, together = 1;
    for (int p = 0; p < K3_EXPERT_PARTS; p++) {
        const struct k3_st_tensor *t = loc->part[p]->t;
        lo = t->offset < lo ? t->offset : lo;
        hi = t->offset + t->nbytes > hi ? t->offset + t->nbytes : hi;
        together &= loc->part[p]->shard == shard;
    }
    uint64_t base = lo / K3IO_ALIGN * K3IO_ALIGN, end = k3_pack_round_up(hi, K3IO_ALIGN);
    if (together && end - base <= s->bounce_bytes) {
        /* One aligned read of the span, then the parts into record order. */
        ssize_t got = k3io_pread_full(&s->files[shard], s->bounce, (size_t)(end - base), base);
        if (got < (ssize_t)(hi - base))
            return k3_errf(err, "%s: reading %llu bytes at offset %llu: %s",
                           s->m->ckpt->shards[shard].path, (unsigned long long)(hi - lo),
                           (unsigned long long)lo,
                           got < 0 ? strerror((int)-got) : "unexpected end of file");
        for (int p = 0; p < K3_EXPERT_PARTS; p++)
            memcpy(buf + r->off[p], s->bounce + (loc->part[p]->t->offset - base), r->len[p]);
        return 0;
    }
    for (int p = 0; p < K3_EXPERT_PARTS; p++)
        if (aligned_read(s, loc->part[p]->shard, loc->part[p]->t->offset, r->len[p],
                         buf + r->off[p], err))
            return -1;
    return 0;
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

/* Reads the next record now: always ready, so wait does not matter. */
static int ckpt_next(struct k3_expert_store *base, bool wait, struct k3_landed *out,
                     struct k3_err *err)
{
    (void)wait;
    struct ckpt_store *s = (struct ckpt_store *)base;
    const struct k3_model *m = s->m;
    const struct k3_record_layout *r = &m->record;
    if (s->delivered >= s->n)
        return k3_errf(err, "expert store: next() past the end of the batch");
    int i = s->delivered++;
    uint8_t *buf = s->buffers + (size_t)i * r->bytes;
    double t0 = now_seconds();
    if (read_record(s, &m->plan.experts[(size_t)s->layer * m->cfg.n_experts + s->experts[i]], buf,
                    err))
        return -1;
    base->stats.read_seconds += now_seconds() - t0;
    for (int p = K3_W1_SCALE; p < K3_EXPERT_PARTS; p += 2)
        base->stats.nan_scale_groups += k3_mxfp4_count_nan_scales(buf + r->off[p], r->len[p]);
    base->stats.records++;
    base->stats.bytes += r->bytes;
    *out = (struct k3_landed){.index = i, .record = buf};
    return 0;
}

static void ckpt_close(struct k3_expert_store *base)
{
    struct ckpt_store *s = (struct ckpt_store *)base;
    for (int i = 0; s->files && i < s->m->ckpt->n_shards; i++)
        k3io_close(&s->files[i]);
    free(s->files);
    free(s->bounce);
    free(s->buffers);
    free(s);
}

static const struct k3_expert_store_ops ckpt_ops = {
    .name = "checkpoint",
    .begin = ckpt_begin,
    .next = ckpt_next,
    .close = ckpt_close,
};

int k3_expert_store_checkpoint(struct k3_expert_store **out, const struct k3_model *m,
                               int capacity, struct k3_err *err)
{
    struct ckpt_store *s = calloc(1, sizeof *s);
    if (!s)
        return k3_errf(err, "out of memory");
    s->base.ops = &ckpt_ops;
    s->base.capacity = capacity;
    s->m = m;
    s->bounce_bytes = 2 * k3_pack_round_up(m->record.bytes, K3IO_ALIGN) + 2 * K3IO_ALIGN;
    s->buffers = malloc((size_t)capacity * m->record.bytes + 1);
    s->bounce = k3io_alloc(s->bounce_bytes);
    s->files = calloc((size_t)m->ckpt->n_shards, sizeof *s->files);
    int rc = s->buffers && s->bounce && s->files ? 0 : k3_errf(err, "out of memory");
    for (int i = 0; !rc && i < m->ckpt->n_shards; i++) {
        int e = k3io_open(&s->files[i], m->ckpt->shards[i].path, O_RDONLY, true);
        if (e)
            rc = k3_errf(err, "%s: %s", m->ckpt->shards[i].path, strerror(-e));
        else if (!s->files[i].direct && !s->base.fallback[0])
            snprintf(s->base.fallback, sizeof s->base.fallback,
                     "%s refuses O_DIRECT; reading experts through the page cache",
                     m->ckpt->shards[i].path);
    }
    if (rc) {
        ckpt_close(&s->base);
        return rc;
    }
    *out = &s->base;
    return 0;
}
