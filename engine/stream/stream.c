/* Opening a stream: the budget plan, the area's layout, NUMA placement of the buffers,
 * the reader, the resident segments; and closing, faults, the accessors of stream.h. */
#include "engine/stream/stream.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/model/tensors.h"
#include "engine/stream/placement.h"
#include "engine/stream/ram_auto.h"
#include "engine/stream/stream_internal.h"
#include "engine/stream/verify.h"
#include "numa/bind.h"

/* What the budget sees of this packed model and these options. */
static int budget_input(struct k3_stream *s, struct k3_err *err)
{
    const struct k3_packed *p = s->p;
    const struct k3_config *c = &s->m->cfg;
    s->trunk.n_segments = s->m->plan.layout.n_segments;
    s->trunk.segment_bytes = calloc((size_t)s->trunk.n_segments, sizeof *s->trunk.segment_bytes);
    if (!s->trunk.segment_bytes)
        return k3_errf(err, "out of memory");
    for (int i = 0; i < s->trunk.n_segments; i++)
        s->trunk.segment_bytes[i] = k3_packed_buffer_bytes(p, (uint64_t)i);
    /* One stride for every record slot: a checkpoint's records land in spans of
     * slightly different sizes (ckpt_view.h); a pack's are all alike. */
    s->experts.record_stride = 0;
    for (uint64_t o = p->header.n_trunk_objects; o < p->header.n_objects; o++) {
        uint64_t b = k3_packed_buffer_bytes(p, o);
        s->experts.record_stride = b > s->experts.record_stride ? b : s->experts.record_stride;
    }
    for (int i = 0; i < s->m->plan.n_specs; i++)
        if (s->m->plan.layout.segment[i] == K3_SEG_EMBED)
            s->trunk.embed_at = s->m->plan.layout.offset[i];
    s->in = k3_budget_input_of(
        c,
        &(struct k3_budget_pack){
            .n_segments = s->trunk.n_segments,
            .segment_bytes = s->trunk.segment_bytes,
            .vector_bytes = k3_budget_vector_bytes(s->m->plan.specs, s->m->plan.n_specs),
            .record_bytes = s->experts.record_stride,
            .embed_piece_bytes = p->objects[K3_SEG_EMBED].piece_bytes,
            .manifest_bytes = p->header.manifest_bytes,
        },
        &(struct k3_budget_run){
            .ctx = s->o.ctx,
            .seqs = s->o.seqs,
            .threads = s->o.threads,
            .teams = s->experts.n_teams,
            .rows = s->o.rows,
            .prefetch_k = s->o.prefetch_k,
            .caller_bytes = s->o.caller_bytes,
            .caller_row_bytes = s->o.caller_row_bytes,
            .predict_ids = s->o.predict_ids,
        });
    s->trunk.embed_capacity = s->in.embed_buffer_bytes;
    return 0;
}

static const double GIB = 1073741824.0;

/* --ram auto: this process's share of the machine less the margin; where the machine's
 * memory could not be read, the floor (the least that runs). */
static uint64_t auto_ram(const struct k3_stream *s, uint64_t floor, char *origin, size_t len,
                         bool *unknown)
{
    const struct k3_ram_machine *m = s->o.machine;
    *unknown = !m || m->source == K3_RAM_UNKNOWN;
    if (*unknown) {
        snprintf(origin, len, "--ram auto: neither the memory cgroup nor /proc/meminfo could "
                 "be read; planning the floor, %.2f GiB", floor / GIB);
        return floor;
    }
    char from[400];
    k3_ram_describe(m, from, sizeof from);
    uint64_t share = k3_ram_share(m), margin = k3_ram_margin(share);
    uint64_t ram = share > margin ? share - margin : 0;
    snprintf(origin, len, "--ram auto: %.2f GiB = %s less %.2f GiB margin", ram / GIB, from,
             margin / GIB);
    return ram;
}

/* A budget asked for (a size, trunk or floor): refused above what this process may use,
 * which would end in the kernel's OOM killer, not a message. */
static int check_asked(const struct k3_stream *s, uint64_t ram, char *origin, size_t len,
                       struct k3_err *err)
{
    const struct k3_ram_machine *m = s->o.machine;
    char asked[64], from[400] = "unknown";
    if (s->o.ram == K3_RAM_TRUNK || s->o.ram == K3_RAM_FLOOR)
        snprintf(asked, sizeof asked, "--ram %s (%.2f GiB)",
                 s->o.ram == K3_RAM_TRUNK ? "trunk" : "floor", ram / GIB);
    else
        snprintf(asked, sizeof asked, "--ram %.2f GiB", ram / GIB);
    if (m && m->source != K3_RAM_UNKNOWN)
        k3_ram_describe(m, from, sizeof from);
    if (m && m->source != K3_RAM_UNKNOWN && ram > k3_ram_share(m))
        return k3_errf(err, "%s is more than this process may use: %s", asked, from);
    snprintf(origin, len, "%s as asked (this process may use: %s)", asked, from);
    return 0;
}

/* The budget for --ram (a size or a preset), and the record slots it allows. */
static int plan_budget(struct k3_stream *s, struct k3_err *err)
{
    if (budget_input(s, err))
        return -1;
    uint64_t ram = s->o.ram;
    char origin[sizeof s->budget.origin];
    bool unknown = false;
    k3_budget_plan(&s->in, UINT64_MAX, &s->budget, NULL);
    uint64_t floor = s->budget.floor;
    if (ram == K3_RAM_AUTO)
        ram = auto_ram(s, floor, origin, sizeof origin, &unknown);
    else if (ram == K3_RAM_TRUNK || ram == K3_RAM_FLOOR)
        ram = ram == K3_RAM_TRUNK ? k3_budget_trunk_resident(&s->in) : floor;
    if (s->o.ram != K3_RAM_AUTO && check_asked(s, ram, origin, sizeof origin, err))
        return -1;
    if (k3_budget_plan(&s->in, ram, &s->budget, err))
        return s->o.ram == K3_RAM_AUTO ? k3_err_prefix(err, "%s", origin) : -1;
    memcpy(s->budget.origin, origin, sizeof origin);
    s->budget.origin_unknown = unknown;
    s->experts.n_records = s->in.inflight_records + (s->o.cache ? s->budget.cache_records : 0);
    if (s->experts.n_records > (int)MAX_OWNER_INDEX)
        s->experts.n_records = (int)MAX_OWNER_INDEX; /* a read's tag holds the slot in 21 bits */
    return 0;
}

/* The expert store's tables: record slots, the batch, the cache's policy and index. */
static int alloc_expert_tables(struct stream_experts *x, const struct k3_config *c,
                               enum k3_cache_policy_kind policy)
{
    int moe_layers = k3_moe_layer_count(c);
    size_t keys = (size_t)moe_layers * (size_t)c->n_experts;
    x->records = calloc((size_t)x->n_records + 1, sizeof *x->records);
    x->batch = calloc((size_t)c->n_experts + 1, sizeof *x->batch);
    x->team_load = calloc((size_t)x->n_teams, sizeof *x->team_load);
    if (k3_cache_policy_init(&x->policy, policy, moe_layers, c->n_experts, 0, NULL))
        return -1;
    x->layer_held = calloc((size_t)moe_layers + 1, sizeof *x->layer_held);
    x->slot_layer = calloc((size_t)x->n_records + 1, sizeof *x->slot_layer);
    x->slot_hint = malloc((keys + 1) * sizeof *x->slot_hint);
    for (size_t i = 0; x->slot_hint && i < keys; i++)
        x->slot_hint[i] = -1;
    x->held_aside = malloc(((size_t)x->n_records + 1) * sizeof *x->held_aside);
    int per_heap = x->n_records / moe_layers / x->n_teams + 1;
    if (held_init(&x->held, x->n_records, moe_layers, x->n_teams, per_heap, NULL))
        return -1;
    return x->records && x->batch && x->team_load && x->layer_held && x->slot_layer &&
                   x->slot_hint && x->held_aside
               ? 0
               : -1;
}

/* The bookkeeping beside the area: buffer tables, batch state, counters, scratch. */
static int alloc_tables(struct k3_stream *s)
{
    s->trunk.resident = calloc((size_t)s->trunk.n_segments, sizeof *s->trunk.resident);
    s->layer_stats = calloc((size_t)s->m->cfg.n_layers + 1, sizeof *s->layer_stats);
    s->reads.dropped =
        calloc(s->experts.record_stride / K3_PACK_ALIGN + 1, sizeof *s->reads.dropped);
    s->reads.verify_jobs = malloc(k3_verify_scratch_bytes());
    if (alloc_expert_tables(&s->experts, &s->m->cfg, s->o.cache_policy))
        return -1;
    return s->trunk.resident && s->layer_stats && s->reads.dropped && s->reads.verify_jobs
               ? 0
               : -1;
}

static struct buffer free_buffer(uint8_t *base, enum owner kind, uint32_t index)
{
    return (struct buffer){.base = base, .kind = kind, .index = index, .state = BUF_FREE,
                           .object = -1, .predicted = -1};
}

/* One area, in order: resident segments, the two stream slots, the embedding-row
 * buffer, the record slots. */
static int layout_area(struct k3_stream *s, struct k3_err *err)
{
    uint64_t total = 0;
    for (int i = 0; i < s->trunk.n_segments; i++)
        if (s->budget.resident[i])
            total += s->trunk.segment_bytes[i];
    total += 2 * s->budget.stream_slot_bytes + s->trunk.embed_capacity +
             (uint64_t)s->experts.n_records * s->experts.record_stride;
    s->reads.area_bytes = (size_t)total;
    /* Reserved, not touched: pages are taken as reads first reach them (iouring's
     * piece-by-piece registration), so a large budget's cache costs nothing until it
     * fills. */
    s->reads.area = k3io_reserve(s->reads.area_bytes);
    if (!s->reads.area || alloc_tables(s))
        return k3_errf(err, "out of memory for the read area (%.2f GiB)", total / 1073741824.0);
    uint8_t *at = s->reads.area;
    for (int i = 0; i < s->trunk.n_segments; i++) {
        uint8_t *base = s->budget.resident[i] ? at : NULL;
        s->trunk.resident[i] = free_buffer(base, OWN_SEGMENT, (uint32_t)i);
        at += s->budget.resident[i] ? s->trunk.segment_bytes[i] : 0;
    }
    for (int k = 0; k < 2; k++) {
        s->trunk.slots[k] = free_buffer(at, OWN_SLOT, (uint32_t)k);
        at += s->budget.stream_slot_bytes;
    }
    s->trunk.embed = free_buffer(at, OWN_EMBED, 0);
    at += s->trunk.embed_capacity;
    for (int i = 0; i < s->experts.n_records; i++) {
        s->experts.records[i] = free_buffer(at, OWN_RECORD, (uint32_t)i);
        at += s->experts.record_stride;
    }
    return 0;
}

/* NUMA (numa/plan.h rules 6 and 7): record slot i goes to the node of team i mod n_teams,
 * the team that computes what lands there.  A trunk mat-vec gives team k the rows its
 * threads take (kernels_isa.h: thread t of T computes rows [R·t/T, R·(t+1)/T)), so in a
 * resident segment each matrix's rows go to the node of the team that computes them, the
 * rest of the segment interleaved over the teams' nodes.  The two stream slots hold a
 * different layer's layout each time: interleaved.  One area is registered with the ring;
 * its parts are bound per node.  A refused binding leaves memory where it is. */
static void place_rows(struct k3_stream *s, uint8_t *base, int seg)
{
    const struct k3_placement *pl = s->o.place;
    const struct k3numa_plan *p = pl->plan;
    const struct k3_ckpt_plan *cp = &s->m->plan;
    for (int i = 0; i < cp->n_specs; i++) {
        const struct k3_tensor_spec *t = &cp->specs[i];
        if (t->kind != K3_T_MATRIX || t->ndim != 2 || cp->layout.segment[i] != seg)
            continue;
        uint64_t row_bytes = k3_dtype_bytes(k3_model_held_dtype(s->m, i), t->shape[1]);
        for (int k = 0; k < p->n_teams; k++) {
            int r0, r1;
            k3numa_plan_team_rows(p, (int)t->shape[0], 1, k, &r0, &r1);
            k3numa_range_bind(pl->topo, base + cp->layout.offset[i] + (uint64_t)r0 * row_bytes,
                              (uint64_t)(r1 - r0) * row_bytes, p->teams[k].node);
        }
    }
}

static void place_buffers(struct k3_stream *s)
{
    const struct k3_placement *pl = s->o.place;
    if (!pl || !pl->plan->bind || pl->plan->n_teams < 2)
        return;
    const struct k3numa_plan *p = pl->plan;
    int nodes[64], n_nodes = 0;
    for (int k = 0; k < p->n_teams && n_nodes < 64; k++)
        nodes[n_nodes++] = p->teams[k].node;
    for (int i = 0; i < s->experts.n_records; i++)
        k3numa_range_bind(pl->topo, s->experts.records[i].base, s->experts.record_stride,
                          p->teams[slot_team(s, i)].node);
    const struct stream_trunk *t = &s->trunk;
    for (int i = 0; i < 2; i++)
        k3numa_range_interleave(pl->topo, t->slots[i].base, s->budget.stream_slot_bytes, nodes,
                                n_nodes);
    for (int i = 0; i < t->n_segments; i++)
        if (t->resident[i].base) {
            k3numa_range_interleave(pl->topo, t->resident[i].base, t->segment_bytes[i], nodes,
                                    n_nodes);
            place_rows(s, s->trunk.resident[i].base, i);
        }
}

/* An I/O thread of the reader starts: it runs on its team's node (plan.h rule 5). */
static void pin_io_thread(void *ctx, int team)
{
    const struct k3_stream *s = ctx;
    k3_placement_pin_to_team(s->o.place, team);
}

/* The drives' files, the team reading each, their failure counts. */
static int drive_tables(struct k3_stream *s, struct k3_err *err)
{
    int n = s->p->n_drives;
    s->reads.fds = calloc((size_t)n, sizeof *s->reads.fds);
    s->reads.drive_team = calloc((size_t)n, sizeof *s->reads.drive_team);
    s->reads.drive_failures = calloc((size_t)n, sizeof *s->reads.drive_failures);
    s->reads.drive_lost = calloc((size_t)n, sizeof *s->reads.drive_lost);
    if (!s->reads.fds || !s->reads.drive_team || !s->reads.drive_failures || !s->reads.drive_lost)
        return k3_errf(err, "out of memory");
    for (int d = 0; d < n; d++) {
        s->reads.fds[d] = s->p->drives[d].data.fd;
        s->reads.drive_team[d] =
            s->o.place ? k3_placement_drive_team(s->o.place, s->p->drives[d].path) : 0;
    }
    return 0;
}

static const char *backend_name(enum k3io_backend b)
{
    return b == K3IO_URING ? "uring" : b == K3IO_PREAD ? "pread" : "auto";
}

static int open_reader(struct k3_stream *s, char *note, size_t note_len, struct k3_err *err)
{
    if (drive_tables(s, err))
        return -1;
    struct k3io_config rc = {
        .backend = s->o.read.backend,
        .fds = s->reads.fds,
        .n_files = s->p->n_drives,
        .area = s->reads.area,
        .area_bytes = s->reads.area_bytes,
        .queue_depth = (unsigned)s->o.read.queue_depth,
        .max_io_bytes = (uint32_t)s->o.read.read_size,
        .background_depth = (unsigned)(s->o.read.prefetch_depth * s->p->n_drives),
        /* several nodes: an I/O thread and ring per node, reading its drives */
        .io_threads = s->experts.n_teams > 1 ? s->experts.n_teams : 0,
        .file_thread = s->reads.drive_team,
        .thread_start = pin_io_thread,
        .thread_ctx = s,
        .model = s->o.read.drive_model,
    };
    int e = k3io_reader_create(&s->reads.r, &rc, note, note_len);
    if (e)
        return k3_errf(err, "--io %s: cannot set up the reader: %s",
                       backend_name(s->o.read.backend), strerror(-e));
    return 0;
}

/* Reads every resident segment (all at once), then binds each as it checks out; they
 * stay pinned for the stream's life. */
static int load_resident(struct k3_stream *s, struct k3_err *err)
{
    for (int i = 0; i < s->trunk.n_segments; i++)
        if (s->trunk.resident[i].base && read_object(s, &s->trunk.resident[i], (uint64_t)i, err))
            return -1;
    for (int i = 0; i < s->trunk.n_segments; i++) {
        struct buffer *b = &s->trunk.resident[i];
        if (!b->base)
            continue;
        if (wait_ready(s, b, err))
            return -1;
        buffer_pin(b);
        k3_model_bind_segment(s->m, i, b->base);
    }
    return 0;
}

/* The records a batch keeps in flight: the slots the floor plans for them (a token's
 * experts and a prediction's), whatever the cache adds. */
static int batch_capacity(const struct k3_stream *s)
{
    return s->in.inflight_records;
}

int k3_stream_open(struct k3_stream **out, struct k3_model *m, const struct k3_stream_opts *o,
                   char *note, size_t note_len, struct k3_err *err)
{
    *out = NULL;
    if (!m->packed)
        return k3_errf(err, "the read path serves packed drives or a checkpoint folder");
    struct k3_stream *s = calloc(1, sizeof *s);
    if (!s)
        return k3_errf(err, "out of memory");
    s->m = m;
    s->p = m->packed;
    s->o = *o;
    s->trunk.bound_slot = -1;
    s->experts.n_teams = o->place ? o->place->plan->n_teams : 1;
    int rc = plan_budget(s, err);
    if (!rc)
        rc = layout_area(s, err);
    if (!rc) {
        place_buffers(s);
        rc = open_reader(s, note, note_len, err);
    }
    if (!rc && o->faults)
        rc = k3_stream_set_faults(s, o->faults, o->fault_seed, err);
    if (!rc)
        rc = load_resident(s, err);
    if (rc) {
        k3_stream_close(s);
        return rc;
    }
    s->experts.store.ops = &stream_store_ops;
    s->experts.store.capacity = batch_capacity(s);
    s->trunk.source = (struct k3_trunk_source){
        .segment = trunk_segment, .ahead = trunk_ahead, .embed = trunk_embed, .ctx = s};
    *out = s;
    return 0;
}

/* Waits until no read is in flight (a prefetch nobody used, or a failed run's reads),
 * without looking at what landed. */
static void reap_all(struct k3_stream *s)
{
    struct k3io_done done[64];
    while (k3io_pending(s->reads.r) > 0 && k3io_wait(s->reads.r, done, 64, 1) > 0)
        ;
    s->reads.inflight = 0;
}

void k3_stream_close(struct k3_stream *s)
{
    if (!s)
        return;
    if (s->reads.r) {
        reap_all(s); /* nothing may land once the area is gone */
        k3io_reader_destroy(s->reads.r);
    }
    k3_faults_free(s->reads.faults);
    free(s->reads.drive_failures);
    free(s->reads.drive_lost);
    free(s->reads.fds);
    k3io_release(s->reads.area, s->reads.area_bytes);
    free(s->trunk.resident);
    free(s->experts.records);
    free(s->experts.batch);
    free(s->reads.drive_team);
    free(s->experts.team_load);
    free(s->experts.layer_held);
    free(s->experts.slot_hint);
    free(s->experts.slot_layer);
    free(s->experts.held_aside);
    held_free(&s->experts.held);
    free(s->layer_stats);
    free(s->reads.dropped);
    free(s->reads.verify_jobs);
    k3_cache_policy_free(&s->experts.policy);
    free(s->trunk.segment_bytes);
    free(s);
}

const struct k3_budget *k3_stream_budget(const struct k3_stream *s,
                                         const struct k3_budget_input **in)
{
    if (in)
        *in = &s->in;
    return &s->budget;
}

struct k3_expert_store *k3_stream_experts(struct k3_stream *s) { return &s->experts.store; }
const struct k3_trunk_source *k3_stream_trunk(struct k3_stream *s) { return &s->trunk.source; }
struct k3_stream_stats k3_stream_stats(const struct k3_stream *s)
{
    struct k3_stream_stats st = s->stats;
    struct k3io_stats io = k3io_stats(s->reads.r);
    st.syscalls = io.syscalls;
    st.area_taken_bytes = io.area_taken_bytes;
    st.area_take_seconds = io.area_take_seconds;
    st.area_ahead_bytes = io.area_ahead_bytes;
    st.area_ahead_seconds = io.area_ahead_seconds;
    return st;
}
const struct k3_layer_stats *k3_stream_layer_stats(const struct k3_stream *s)
{
    return s->layer_stats;
}
const char *k3_stream_backend(const struct k3_stream *s) { return k3io_backend_name(s->reads.r); }
struct k3io_stats k3_stream_io_stats(const struct k3_stream *s) { return k3io_stats(s->reads.r); }

/* Back to a clean state after a failed run: reads still in flight land (and are
 * dropped), and every buffer but the resident segments is emptied. */
static void reset(struct k3_stream *s)
{
    reap_all(s);
    for (int k = 0; k < 2; k++)
        buffer_empty(&s->trunk.slots[k]);
    s->trunk.bound_slot = -1;
    buffer_empty(&s->trunk.embed);
    for (int i = 0; i < s->experts.n_records; i++)
        buffer_empty(&s->experts.records[i]);
    cache_reset(s);
    s->experts.batch_n = s->experts.delivered = s->experts.queued = s->experts.reading = 0;
    s->reads.failed = false;
}

void k3_stream_recover(struct k3_stream *s) { reset(s); }

int k3_stream_set_faults(struct k3_stream *s, const char *spec, uint64_t seed, struct k3_err *err)
{
    struct k3_faults *f = NULL;
    if (spec && k3_faults_parse(&f, spec, seed, err))
        return -1;
    if (f && s->p->checkpoint && k3_faults_corrupt(f)) {
        k3_faults_free(f);
        return k3_errf(err, "K3_FAULTS corrupt: %s has no checksums to catch it (pack it)",
                       s->p->checkpoint);
    }
    reset(s);
    k3_faults_free(s->reads.faults);
    s->reads.faults = f;
    k3io_set_fault(s->reads.r, f ? inject : NULL, f ? s : NULL);
    k3io_set_refusal(s->reads.r, f ? refuse : NULL, f ? s : NULL);
    for (int d = 0; d < s->p->n_drives; d++) {
        s->reads.drive_failures[d] = 0;
        s->reads.drive_lost[d] = false;
    }
    return 0;
}

int k3_stream_wait_reads(struct k3_stream *s, struct k3_err *err)
{
    while (s->reads.inflight > 0)
        if (pump(s, 1, err))
            return -1;
    return 0;
}

bool k3_stream_faults(const struct k3_stream *s, struct k3_fault_counts *counts)
{
    if (s->reads.faults)
        *counts = k3_faults_counts(s->reads.faults);
    return s->reads.faults != NULL;
}
