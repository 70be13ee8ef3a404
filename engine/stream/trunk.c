/* The trunk source (forward.h) of a stream: segments bound to the model as layers need
 * them, and embedding rows read on demand.  Resident segments were bound at open; a
 * streamed one is read into one of two slots while the other computes, so the next
 * streamed segment is already landing when its layer starts. */
#include "engine/kernels/kernels.h"
#include "engine/model/tensors.h"
#include "engine/stream/stream_internal.h"

/* The streamed segment after seg, in the order a token uses them (layers, then output,
 * then the next token's first layer); -1 when every layer segment is resident. */
static int next_streamed(const struct k3_stream *s, int seg)
{
    int first = k3_seg_layer(0), n = s->trunk.n_segments - first;
    for (int k = 1; k < s->trunk.n_segments; k++) {
        int c = first + (seg - first + k) % n;
        if (!s->trunk.resident[c].base)
            return c;
    }
    return -1;
}

/* A buffer about to be reused: reads still landing in it must finish first. */
static int drain(struct k3_stream *s, struct buffer *b, struct k3_err *err)
{
    return b->state == BUF_PENDING || b->state == BUF_LANDED ? wait_ready(s, b, err) : 0;
}

/* The segment bound before is done with (its layer finished): its slot may be reused. */
static void unbind(struct k3_stream *s)
{
    if (s->trunk.bound_slot >= 0 && s->trunk.slots[s->trunk.bound_slot].pins)
        buffer_unpin(&s->trunk.slots[s->trunk.bound_slot]);
}

/* The slot holding seg, landed or landing; else seg starts reading into the slot of the
 * segment just finished (the first use, or the output was skipped). */
static int slot_of(struct k3_stream *s, int seg, struct k3_err *err)
{
    for (int k = 0; k < 2; k++)
        if (s->trunk.slots[k].object == seg)
            return k;
    int slot = s->trunk.bound_slot >= 0 ? s->trunk.bound_slot : 0;
    struct buffer *b = &s->trunk.slots[slot];
    if (drain(s, b, err) || read_object(s, b, (uint64_t)seg, err))
        return -1;
    return slot;
}

/* Reads the next streamed segment into the slot not in use, while seg computes. */
static int read_ahead(struct k3_stream *s, int seg, int slot, struct k3_err *err)
{
    int next = next_streamed(s, seg);
    struct buffer *other = &s->trunk.slots[1 - slot];
    if (s->o.sync || next < 0 || next == seg || other->object == next)
        return 0;
    return drain(s, other, err) || read_object(s, other, (uint64_t)next, err) ? -1 : 0;
}

int trunk_segment(void *ctx, int seg, struct k3_err *err)
{
    struct k3_stream *s = ctx;
    tick(s);
    s->cur_layer = seg - k3_seg_layer(0); /* the output counts as layer n_layers */
    unbind(s);
    if (s->trunk.resident[seg].base)
        return 0; /* bound at open */
    int slot = slot_of(s, seg, err);
    if (slot < 0 || wait_ready(s, &s->trunk.slots[slot], err))
        return -1;
    k3_model_bind_segment(s->m, seg, s->trunk.slots[slot].base);
    s->trunk.bound_slot = slot;
    buffer_pin(&s->trunk.slots[slot]);
    return read_ahead(s, seg, slot, err);
}

/* Segment seg's matrices bound before its layer starts, for a look at them (the next
 * layer's router, to predict its experts), the segment in use kept: resident, or landed
 * in the slot reading ahead (waited for).  1 when it could only come into the slot in
 * use (no read ahead: --sync), and nothing is bound. */
int trunk_ahead(void *ctx, int seg, struct k3_err *err)
{
    struct k3_stream *s = ctx;
    struct stream_trunk *t = &s->trunk;
    if (t->resident[seg].base)
        return 0;
    int slot = t->slots[0].object == seg ? 0 : t->slots[1].object == seg ? 1 : -1;
    if (slot < 0) { /* the layer in use is resident: read into the slot it left */
        slot = t->bound_slot >= 0 ? t->bound_slot : 0;
        if (t->slots[slot].pins)
            return 1;
        if (drain(s, &t->slots[slot], err) || read_object(s, &t->slots[slot], (uint64_t)seg, err))
            return -1;
    }
    if (wait_ready(s, &t->slots[slot], err))
        return -1;
    k3_model_bind_segment(s->m, seg, t->slots[slot].base);
    return 0;
}

/* Reads the pieces holding embedding row `at` (byte offset in the segment) into the
 * embedding buffer; returns where the row starts, or NULL. */
static const uint8_t *read_row(struct k3_stream *s, uint64_t at, uint64_t row,
                               struct k3_err *err)
{
    const struct k3_pack_object *x = &s->p->objects[K3_SEG_EMBED];
    uint32_t j0 = k3_packed_piece_of(s->p, x, at), j1 = k3_packed_piece_of(s->p, x, at + row - 1);
    struct buffer *b = &s->trunk.embed;
    buffer_claim(b, K3_SEG_EMBED, j0, j1 - j0 + 1);
    b->submitted = k3_trace_now(s->o.trace);
    if (read_pieces(s, b, j0, b->count, 0, err) || wait_ready(s, b, err))
        return NULL;
    return b->base + (at - k3_packed_piece_at(s->p, x, j0));
}

int trunk_embed(void *ctx, const int32_t *tokens, int T, float *out, struct k3_err *err)
{
    struct k3_stream *s = ctx;
    const struct k3_config *c = &s->m->cfg;
    uint64_t row = (uint64_t)c->hidden * 2;
    const struct buffer *resident = &s->trunk.resident[K3_SEG_EMBED];
    for (int t = 0; t < T; t++) {
        uint64_t at = s->trunk.embed_at + (uint64_t)tokens[t] * row; /* the segment's only tensor */
        const uint8_t *src = resident->base ? resident->base + at : read_row(s, at, row, err);
        if (!src)
            return -1;
        const uint16_t *v = (const uint16_t *)src;
        for (int i = 0; i < c->hidden; i++)
            out[(size_t)t * c->hidden + i] = k3_bf16_to_f32(v[i]);
    }
    return 0;
}
