#include "engine/stream/budget.h"

#include <string.h>

#include "engine/forward/forward.h"

static const double GIB = 1073741824.0;

static uint64_t fixed_part(const struct k3_budget_input *in, struct k3_budget *b)
{
    b->runtime = K3_RUNTIME_BYTES;
    b->state = k3_seq_state_bytes(in->cfg, in->ctx);
    b->scratch = k3_forward_scratch_bytes(in->cfg, in->ctx, in->threads, in->teams);
    b->vectors = in->vector_bytes;
    b->manifest = in->manifest_bytes;
    b->logits = in->logits_bytes;
    b->expert_inflight = (uint64_t)in->inflight_records * in->record_bytes;
    b->embed_rows = 2 * in->piece_bytes;
    return b->runtime + b->state + b->scratch + b->vectors + b->manifest + b->logits +
           b->expert_inflight + b->embed_rows;
}

/* Largest segment not resident (the embedding is read by rows, never streamed whole). */
static uint64_t largest_streamed(const struct k3_budget_input *in, const bool *resident)
{
    uint64_t m = 0;
    for (int s = 1; s < in->n_segments; s++)
        if (!resident[s] && in->segment_bytes[s] > m)
            m = in->segment_bytes[s];
    return m;
}

/* Resident order: the largest layer and output segments first, the embedding last. */
static int next_candidate(const struct k3_budget_input *in, const bool *resident)
{
    int best = -1;
    for (int s = 1; s < in->n_segments; s++)
        if (!resident[s] && (best < 0 || in->segment_bytes[s] > in->segment_bytes[best]))
            best = s;
    return best >= 0 ? best : resident[0] ? -1 : 0;
}

static uint64_t cost(const struct k3_budget_input *in, const bool *resident, uint64_t fixed)
{
    uint64_t c = fixed + 2 * largest_streamed(in, resident);
    for (int s = 0; s < in->n_segments; s++)
        if (resident[s])
            c += in->segment_bytes[s];
    return c;
}

uint64_t k3_budget_trunk_resident(const struct k3_budget_input *in)
{
    struct k3_budget b;
    memset(&b, 0, sizeof b);
    uint64_t c = fixed_part(in, &b);
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
    uint64_t fixed = fixed_part(in, b);
    /* The floor: with the k largest segments resident the cost is their sum plus two slots
     * of the next largest; the cheapest k is the floor (for K3 it is k = 0, but a model
     * with one huge segment is cheaper with that one resident). */
    bool trial[K3_MAX_LAYERS + 2] = {0};
    b->floor = cost(in, trial, fixed);
    int best_k = 0;
    for (int k = 1;; k++) {
        int s = next_candidate(in, trial);
        if (s <= 0)
            break;
        trial[s] = true;
        uint64_t c = cost(in, trial, fixed);
        if (c < b->floor) {
            b->floor = c;
            best_k = k;
        }
    }
    for (int k = 0; k < best_k; k++)
        b->resident[next_candidate(in, b->resident)] = true;
    if (budget < b->floor)
        return k3_errf(err,
                       "--ram %.2f GiB is below the floor of %.2f GiB at %d context (session "
                       "state %.2f, expert buffers %.2f, trunk %.2f, the rest %.2f GiB)",
                       budget / GIB, b->floor / GIB, in->ctx, b->state / GIB,
                       b->expert_inflight / GIB, (b->floor - fixed) / GIB,
                       (fixed - b->state - b->expert_inflight) / GIB);
    /* Above the floor: more segments resident while the plan still fits. */
    for (;;) {
        int s = next_candidate(in, b->resident);
        if (s < 0)
            break;
        b->resident[s] = true;
        if (cost(in, b->resident, fixed) > budget) {
            b->resident[s] = false;
            break;
        }
    }
    b->stream_slot_bytes = largest_streamed(in, b->resident);
    for (int s = 0; s < in->n_segments; s++)
        if (b->resident[s])
            b->resident_bytes += in->segment_bytes[s];
    uint64_t spent = cost(in, b->resident, fixed);
    b->cache_records = in->record_bytes ? (int)((budget - spent) / in->record_bytes) : 0;
    b->cache_bytes = (uint64_t)b->cache_records * in->record_bytes;
    return 0;
}

void k3_budget_print(FILE *f, const struct k3_budget *b, const struct k3_budget_input *in)
{
    int resident = 0, streamed = 0;
    for (int s = 1; s < in->n_segments; s++)
        resident += b->resident[s], streamed += !b->resident[s];
    const double G = GIB;
    fprintf(f, "budget %.2f GiB = %llu B (floor %.2f GiB = %llu B at %d context):\n",
            b->budget / G, (unsigned long long)b->budget, b->floor / G,
            (unsigned long long)b->floor, in->ctx);
    fprintf(f, "  session state         %8.3f GiB (KDA state, conv rings, MLA cache)\n",
            b->state / G);
    fprintf(f, "  runtime + scratch     %8.3f GiB\n", (b->runtime + b->scratch) / G);
    fprintf(f, "  small tensors         %8.3f GiB\n", (b->vectors + b->manifest) / G);
    fprintf(f, "  expert buffers        %8.3f GiB (%d in flight)\n", b->expert_inflight / G,
            in->inflight_records);
    fprintf(f, "  trunk resident        %8.3f GiB (%d of %d layer/output segments%s)\n",
            b->resident_bytes / G, resident, in->n_segments - 1,
            b->resident[0] ? ", and the embedding" : "; embedding rows read on demand");
    fprintf(f, "  trunk stream slots    %8.3f GiB (2 x %.3f GiB for %d streamed segments)\n",
            2 * b->stream_slot_bytes / G, b->stream_slot_bytes / G, streamed);
    fprintf(f, "  expert cache          %8.3f GiB (%d records)\n", b->cache_bytes / G,
            b->cache_records);
}
