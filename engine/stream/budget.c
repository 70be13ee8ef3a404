#include "engine/stream/budget.h"

#include <string.h>

#include "engine/forward/forward.h"
#include "engine/forward/predict_ids.h"
#include "engine/model/tensors.h"
#include "engine/stream/verify.h"

static const double GIB = 1073741824.0;

/* "4096 context", or "4096 context x 8 sequences" when several are held. */
static const char *context_text(const struct k3_budget_input *in, char *buf, size_t len)
{
    int n = snprintf(buf, len, "%d context", in->ctx);
    if (in->seqs > 1 && n > 0 && (size_t)n < len)
        snprintf(buf + n, len - (size_t)n, " x %d sequences", in->seqs);
    return buf;
}

struct k3_budget_input k3_budget_input_of(const struct k3_config *c, const struct k3_budget_pack *p,
                                          const struct k3_budget_run *r)
{
    return (struct k3_budget_input){
        .cfg = c,
        .ctx = r->ctx,
        .seqs = r->seqs,
        .threads = r->threads,
        .teams = r->teams,
        .n_segments = p->n_segments,
        .segment_bytes = p->segment_bytes,
        .vector_bytes = p->vector_bytes,
        .record_bytes = p->record_bytes,
        .embed_buffer_bytes = k3_budget_embed_buffer_bytes(2 * (uint64_t)c->hidden,
                                                           p->embed_piece_bytes),
        .manifest_bytes = p->manifest_bytes,
        .caller_bytes = r->caller_bytes,
        .caller_row_bytes = r->caller_row_bytes,
        .rows = r->rows,
        .inflight_records = p->record_bytes ? c->top_k + r->prefetch_k : 0,
        .predict_ids = r->predict_ids,
    };
}

uint64_t k3_budget_vector_bytes(const struct k3_tensor_spec *specs, int n)
{
    uint64_t vectors = 0;
    for (int i = 0; i < n; i++) {
        if (specs[i].kind == K3_T_MATRIX)
            continue;
        uint64_t numel = 1;
        for (int d = 0; d < specs[i].ndim; d++)
            numel *= (uint64_t)specs[i].shape[d];
        vectors += 4 * numel;
    }
    return vectors;
}

static int rows_wanted(const struct k3_budget_input *in)
{
    return in->rows > 0 ? in->rows : K3_CHUNK;
}

/* The part that does not depend on the trunk's plan, with a pass of `rows` rows. */
static uint64_t fixed_part(const struct k3_budget_input *in, int rows, struct k3_budget *b)
{
    b->rows = rows;
    b->runtime = K3_RUNTIME_BYTES;
    b->state = (uint64_t)(in->seqs > 1 ? in->seqs : 1) * k3_seq_state_bytes(in->cfg, in->ctx);
    b->scratch = k3_forward_scratch_bytes(in->cfg, in->ctx, rows, in->threads, in->teams);
    b->vectors = in->vector_bytes;
    b->manifest = in->manifest_bytes;
    b->caller = in->caller_bytes + (uint64_t)rows * in->caller_row_bytes;
    b->expert_inflight = (uint64_t)in->inflight_records * in->record_bytes;
    b->verify = k3_verify_scratch_bytes();
    b->embed_buffer = in->embed_buffer_bytes;
    b->predictor = in->predict_ids ? k3_id_predictor_bytes(k3_moe_layer_count(in->cfg),
                                                           in->cfg->n_experts, in->cfg->top_k, rows)
                                   : 0;
    return b->runtime + b->state + b->scratch + b->vectors + b->manifest + b->caller +
           b->expert_inflight + b->verify + b->embed_buffer + b->predictor;
}

/* Largest layer or output segment not resident: the size of each stream slot (the
 * embedding is read by rows into its own buffer, never streamed whole). */
static uint64_t largest_streamed(const struct k3_budget_input *in, const bool *resident)
{
    uint64_t m = 0;
    for (int s = K3_SEG_EMBED + 1; s < in->n_segments; s++)
        if (!resident[s] && in->segment_bytes[s] > m)
            m = in->segment_bytes[s];
    return m;
}

/* What the trunk takes with these segments resident: them, and two stream slots. */
static uint64_t trunk_cost(const struct k3_budget_input *in, const bool *resident)
{
    uint64_t c = 2 * largest_streamed(in, resident);
    for (int s = 0; s < in->n_segments; s++)
        if (resident[s])
            c += in->segment_bytes[s];
    return c;
}

/* Resident layer and output bytes: each one a byte not read per token. */
static uint64_t layer_bytes(const struct k3_budget_input *in, const bool *resident)
{
    uint64_t r = 0;
    for (int s = K3_SEG_EMBED + 1; s < in->n_segments; s++)
        if (resident[s])
            r += in->segment_bytes[s];
    return r;
}

/* The layer and output segments, largest first (ties in segment order). */
static void by_size(const struct k3_budget_input *in, int *order)
{
    int n = 0;
    for (int s = K3_SEG_EMBED + 1; s < in->n_segments; s++) {
        int at = n++;
        while (at > 0 && in->segment_bytes[order[at - 1]] < in->segment_bytes[s]) {
            order[at] = order[at - 1];
            at--;
        }
        order[at] = s;
    }
}

/* The plan whose slots are m: every layer or output segment larger than m resident. */
static void larger_than(const struct k3_budget_input *in, uint64_t m, bool *resident)
{
    memset(resident, 0, sizeof(bool) * (size_t)in->n_segments);
    for (int s = K3_SEG_EMBED + 1; s < in->n_segments; s++)
        resident[s] = in->segment_bytes[s] > m;
}

/* Makes streamed segments resident, largest first, each that still fits in room.  One
 * pass is enough: once a segment is passed over it streams, its slot stays, and every
 * later addition only costs more. */
static void fill(const struct k3_budget_input *in, const int *order, uint64_t room,
                 bool *resident)
{
    for (int i = 0; i < in->n_segments - 1; i++) {
        int s = order[i];
        if (resident[s])
            continue;
        resident[s] = true;
        if (trunk_cost(in, resident) > room)
            resident[s] = false;
    }
}

/* The slot size candidate c stands for: 0 (nothing streamed), or segment c's size. */
static uint64_t candidate_slot(const struct k3_budget_input *in, int c)
{
    return c == K3_SEG_EMBED ? 0 : in->segment_bytes[c];
}

/* The cheapest trunk: over every slot size, only the larger segments resident. */
static uint64_t floor_trunk(const struct k3_budget_input *in, bool *resident)
{
    bool trial[K3_MAX_LAYERS + 2];
    uint64_t best = UINT64_MAX;
    larger_than(in, 0, resident);
    for (int c = K3_SEG_EMBED; c < in->n_segments; c++) {
        larger_than(in, candidate_slot(in, c), trial);
        uint64_t cost = trunk_cost(in, trial);
        if (cost < best) {
            best = cost;
            memcpy(resident, trial, sizeof(bool) * (size_t)in->n_segments);
        }
    }
    return best;
}

/* The most resident layer and output bytes within room (the header's rule; candidate 0
 * is slot size 0: every segment resident), then the embedding if it still fits.  room
 * is at least the floor's trunk. */
static void plan_trunk(const struct k3_budget_input *in, uint64_t room, bool *resident)
{
    int order[K3_MAX_LAYERS + 2];
    bool trial[K3_MAX_LAYERS + 2];
    by_size(in, order);
    floor_trunk(in, resident);
    fill(in, order, room, resident);
    for (int c = K3_SEG_EMBED; c < in->n_segments; c++) {
        larger_than(in, candidate_slot(in, c), trial);
        if (trunk_cost(in, trial) > room)
            continue;
        fill(in, order, room, trial);
        uint64_t got = layer_bytes(in, trial), have = layer_bytes(in, resident);
        if (got > have || (got == have && trunk_cost(in, trial) < trunk_cost(in, resident)))
            memcpy(resident, trial, sizeof(bool) * (size_t)in->n_segments);
    }
    resident[K3_SEG_EMBED] = true;
    if (trunk_cost(in, resident) > room)
        resident[K3_SEG_EMBED] = false;
}

/* The most rows, from the floor's up to -b, whose fixed part fits in room (bisection:
 * the fixed part grows with the rows). */
static int pass_rows(const struct k3_budget_input *in, uint64_t room, int floor_rows)
{
    struct k3_budget trial;
    int lo = floor_rows, hi = rows_wanted(in);
    while (lo < hi) {
        int mid = lo + (hi - lo + 1) / 2;
        if (fixed_part(in, mid, &trial) <= room)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

uint64_t k3_budget_trunk_resident(const struct k3_budget_input *in)
{
    struct k3_budget b;
    memset(&b, 0, sizeof b);
    uint64_t c = fixed_part(in, rows_wanted(in), &b);
    for (int s = 0; s < in->n_segments; s++)
        c += in->segment_bytes[s];
    return c;
}

int k3_budget_plan(const struct k3_budget_input *in, uint64_t budget, struct k3_budget *b,
                   struct k3_err *err)
{
    memset(b, 0, sizeof *b);
    b->budget = budget;
    b->n_segments = in->n_segments;
    int want = rows_wanted(in);
    b->floor_rows = want < K3_CHUNK ? want : K3_CHUNK;
    uint64_t fixed = fixed_part(in, b->floor_rows, b);
    uint64_t trunk_floor = floor_trunk(in, b->resident);
    b->floor = fixed + trunk_floor;
    char ctx[64];
    if (budget < b->floor)
        return k3_errf(err,
                       "--ram %.2f GiB is below the floor of %.2f GiB at %s (session "
                       "state %.2f, expert buffers %.2f, trunk %.2f, the rest %.2f GiB)",
                       budget / GIB, b->floor / GIB, context_text(in, ctx, sizeof ctx),
                       b->state / GIB,
                       b->expert_inflight / GIB, (b->floor - fixed) / GIB,
                       (fixed - b->state - b->expert_inflight) / GIB);
    fixed = fixed_part(in, pass_rows(in, budget - trunk_floor, b->floor_rows), b);
    plan_trunk(in, budget - fixed, b->resident);
    b->stream_slot_bytes = largest_streamed(in, b->resident);
    for (int s = 0; s < in->n_segments; s++)
        if (b->resident[s])
            b->resident_bytes += in->segment_bytes[s];
    uint64_t spent = fixed + trunk_cost(in, b->resident);
    /* Never more slots than the model has records: a budget past the whole model buys
     * nothing, and each miss looks over the slots. */
    uint64_t records = (uint64_t)k3_moe_layer_count(in->cfg) * (uint64_t)in->cfg->n_experts;
    uint64_t fit = in->record_bytes ? (budget - spent) / in->record_bytes : 0;
    b->cache_records = (int)(fit < records ? fit : records);
    b->cache_bytes = (uint64_t)b->cache_records * in->record_bytes;
    return 0;
}

void k3_budget_print(FILE *f, const struct k3_budget *b, const struct k3_budget_input *in)
{
    int resident = 0, streamed = 0;
    for (int s = K3_SEG_EMBED + 1; s < in->n_segments; s++)
        resident += b->resident[s], streamed += !b->resident[s];
    const double G = GIB;
    char ctx[64];
    fprintf(f, "budget %.2f GiB = %llu B (floor %.2f GiB = %llu B at %s):\n",
            b->budget / G, (unsigned long long)b->budget, b->floor / G,
            (unsigned long long)b->floor, context_text(in, ctx, sizeof ctx));
    fprintf(f, "  session state         %8.3f GiB (KDA state, conv rings, MLA cache)\n",
            b->state / G);
    fprintf(f, "  runtime + scratch     %8.3f GiB (prompt passes of %d rows)\n",
            (b->runtime + b->scratch + b->verify) / G, b->rows);
    fprintf(f, "  small tensors         %8.3f GiB\n", (b->vectors + b->manifest) / G);
    fprintf(f, "  expert buffers        %8.3f GiB (%d in flight)\n", b->expert_inflight / G,
            in->inflight_records);
    if (b->predictor)
        fprintf(f, "  id predictor          %8.3f GiB (--predict-from ids: co-occurrence counts)\n",
                b->predictor / G);
    fprintf(f, "  trunk resident        %8.3f GiB (%d of %d layer/output segments%s)\n",
            b->resident_bytes / G, resident, in->n_segments - 1,
            b->resident[K3_SEG_EMBED] ? ", and the embedding" : "; embedding rows read on demand");
    fprintf(f, "  trunk stream slots    %8.3f GiB (2 x %.3f GiB for %d streamed segments)\n",
            2 * b->stream_slot_bytes / G, b->stream_slot_bytes / G, streamed);
    fprintf(f, "  expert cache          %8.3f GiB (%d records)\n", b->cache_bytes / G,
            b->cache_records);
}
