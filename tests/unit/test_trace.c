/* --trace: the file is valid trace-event JSON whose compute spans nest (token > layer >
 * attention / MoE), whose reads sit on their drive's track with every begin matched by an
 * end, whose routed experts sit on the track of the team that computed them (two teams
 * here, on a synthetic two-node topology), one at a time per team and inside their
 * layer's MoE span, and whose order is causal: no expert computes before every read of
 * its record that started earlier has landed; and a step that fails inside a layer
 * leaves no span open. */
#include <jansson.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "engine/forward/forward.h"
#include "engine/model/model.h"
#include "engine/pack/model_open.h"
#include "engine/pack/pack.h"
#include "engine/stream/placement.h"
#include "engine/stream/stream.h"
#include "engine/base/trace.h"
#include "tests/util.h"

#define N_DRIVES 2
#define N_TEAMS 2
#define TID_TEAM0 10

/* A traced run's parts, closed in reverse. */
static void close_run(struct k3_trace *t, struct k3_seq *q, struct k3_forward *f,
                      struct k3_stream *s, struct k3_model *m)
{
    struct k3_err e = {{0}};
    REQUIRE(k3_trace_close(t, &e) == 0, "%s", e.msg);
    k3_seq_free(q);
    k3_forward_free(f);
    k3_stream_close(s);
    k3_model_close(m);
}

static void make_trace(const char *path)
{
    char dirs[N_DRIVES][4200];
    const char *drives[N_DRIVES];
    for (int d = 0; d < N_DRIVES; d++) {
        snprintf(dirs[d], sizeof dirs[d], "%s/trace-d%d", test_tmp(), d);
        mkdir(dirs[d], 0755);
        drives[d] = dirs[d];
    }
    struct k3_err e = {{0}};
    struct k3_pack_opts po = {.checkpoint = tiny_model(), .drives = drives, .n_drives = N_DRIVES};
    REQUIRE(k3_pack(&po, &e) == 0, "pack: %s", e.msg);
    struct k3_model m;
    REQUIRE(k3_model_open_packed(&m, drives, N_DRIVES, (struct k3_share){0}, &e) == 0, "%s", e.msg);
    struct k3_trace *t;
    REQUIRE(k3_trace_open(&t, path, N_DRIVES, -1, &e) == 0, "%s", e.msg);
    /* Two single-core nodes: two teams of one thread (binding is a no-op there). */
    const struct k3_topology_source two = {K3NUMA_SYNTHETIC, "pack:2 [numa] core:1 pu:1"};
    struct k3_placement pl;
    REQUIRE(k3_placement_init(&pl, drives, N_DRIVES, 0, false, &two, &e) == 0, "%s", e.msg);
    REQUIRE(pl.plan->n_teams == N_TEAMS, "%d teams planned", pl.plan->n_teams);
    struct k3_stream_opts so = {.ram = K3_RAM_FLOOR, .ctx = 16, .threads = omp_get_max_threads(),
                                .prefetch_k = 24, .trace = t, .place = &pl};
    struct k3_stream *s;
    REQUIRE(k3_stream_open(&s, &m, &so, NULL, 0, &e) == 0, "%s", e.msg);
    struct k3_forward f;
    struct k3_seq q;
    REQUIRE(k3_forward_init(&f, &m, k3_stream_experts(s), 16, K3_CHUNK, pl.plan, &e) == 0, "%s", e.msg);
    REQUIRE(k3_seq_init(&q, &m.cfg, 16, &e) == 0, "%s", e.msg);
    f.hooks = (struct k3_forward_hooks){.trunk = k3_stream_trunk(s), .trace = t,
                                        .predict = K3_PREDICT_MOE_INPUT_NEXT, .predict_k = 24};
    static float logits[2048];
    int32_t prompt[3] = {5, 17, 300};
    k3_trace_begin(t, "prompt", NULL);
    REQUIRE(k3_forward_tokens(&f, &q, prompt, 3, logits, false, &e) == 0, "%s", e.msg);
    k3_trace_end(t);
    for (int i = 0; i < 4; i++) {
        int32_t next = 7 + i;
        k3_trace_begin(t, "token", NULL);
        REQUIRE(k3_forward_tokens(&f, &q, &next, 1, logits, false, &e) == 0, "%s", e.msg);
        k3_trace_end(t);
    }
    close_run(t, &q, &f, s, &m);
    k3_placement_free(&pl);
}

/* A step that fails inside a layer's MoE (every expert read fails; the trunk is resident),
 * then a good one: every span the failed step opened is closed, so the good step's 13
 * layers nest directly under its token span, not under a dangling one. */
static void failed_step_then_good(void)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/trace-failed.json", test_tmp());
    const char *drives[N_DRIVES];
    char dirs[N_DRIVES][4200];
    for (int d = 0; d < N_DRIVES; d++) {
        snprintf(dirs[d], sizeof dirs[d], "%s/trace-d%d", test_tmp(), d);
        drives[d] = dirs[d];
    }
    struct k3_err e = {{0}};
    struct k3_model m;
    REQUIRE(k3_model_open_packed(&m, drives, N_DRIVES, (struct k3_share){0}, &e) == 0, "%s", e.msg);
    struct k3_trace *t;
    REQUIRE(k3_trace_open(&t, path, N_DRIVES, -1, &e) == 0, "%s", e.msg);
    struct k3_stream_opts so = {.ram = K3_RAM_TRUNK, .ctx = 16, .threads = omp_get_max_threads(),
                                .trace = t};
    struct k3_stream *s;
    REQUIRE(k3_stream_open(&s, &m, &so, NULL, 0, &e) == 0, "%s", e.msg);
    struct k3_forward f;
    struct k3_seq q;
    REQUIRE(k3_forward_init(&f, &m, k3_stream_experts(s), 16, K3_CHUNK, NULL, &e) == 0, "%s", e.msg);
    REQUIRE(k3_seq_init(&q, &m.cfg, 16, &e) == 0, "%s", e.msg);
    f.hooks = (struct k3_forward_hooks){.trunk = k3_stream_trunk(s), .trace = t};
    static float logits[2048];
    int32_t token = 5;
    REQUIRE(k3_stream_set_faults(s, "eio:1", 1, &e) == 0, "%s", e.msg);
    k3_trace_begin(t, "token", NULL);
    CHECK(k3_forward_tokens(&f, &q, &token, 1, logits, false, &e) < 0 && strstr(e.msg, "layer 1"),
          "every expert read failing: want layer 1 to fail, got '%s'", e.msg);
    k3_trace_end(t);
    REQUIRE(k3_stream_set_faults(s, NULL, 1, &e) == 0, "%s", e.msg);
    k3_stream_recover(s);
    k3_trace_begin(t, "token", NULL);
    REQUIRE(k3_forward_tokens(&f, &q, &token, 1, logits, false, &e) == 0, "%s", e.msg);
    k3_trace_end(t);
    close_run(t, &q, &f, s, &m);

    json_error_t jerr;
    json_t *root = json_load_file(path, 0, &jerr);
    REQUIRE(root, "%s is not JSON: line %d: %s", path, jerr.line, jerr.text);
    const char *stack[64];
    int depth = 0, tokens = 0, good_layers = 0;
    size_t i;
    json_t *ev;
    json_array_foreach(json_object_get(root, "traceEvents"), i, ev) {
        const char *ph = json_string_value(json_object_get(ev, "ph"));
        if (!strcmp(ph, "B")) {
            const char *name = json_string_value(json_object_get(ev, "name"));
            REQUIRE(depth < 64, "spans nest deeper than 64");
            tokens += !strcmp(name, "token");
            good_layers += tokens == 2 && !strcmp(name, "layer") && depth == 1 &&
                           !strcmp(stack[0], "token");
            stack[depth++] = name;
        } else if (!strcmp(ph, "E")) {
            REQUIRE(depth > 0, "an end without a begin");
            depth--;
        }
    }
    CHECK(depth == 0 && tokens == 2, "%d spans left open, %d token spans", depth, tokens);
    CHECK(good_layers == 13, "%d of the good step's 13 layers nest under its token span",
          good_layers);
    json_decref(root);
}

/* Reads of one record: begin and end times, by name ("layer 3 expert 17"). */
struct read {
    char name[48];
    double begin, end;
};

/* A layer's MoE span on the compute track. */
struct moe {
    int layer;
    double begin, end;
};

int main(void)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/trace.json", test_tmp());
    make_trace(path);
    json_error_t jerr;
    json_t *root = json_load_file(path, 0, &jerr);
    REQUIRE(root, "%s is not JSON: line %d: %s", path, jerr.line, jerr.text);
    json_t *events = json_object_get(root, "traceEvents");
    REQUIRE(json_is_array(events), "no traceEvents array");

    static struct read reads[200000];
    int n_reads = 0, counters = 0;
    /* Pass 1: reads (b/e pairs by id) and counters. */
    size_t i;
    json_t *ev;
    json_array_foreach(events, i, ev) {
        const char *ph = json_string_value(json_object_get(ev, "ph"));
        REQUIRE(ph, "event %zu has no ph", i);
        if (!strcmp(ph, "C"))
            counters++;
        if (strcmp(ph, "b") && strcmp(ph, "e"))
            continue;
        int tid = (int)json_integer_value(json_object_get(ev, "tid"));
        CHECK(tid >= 100 && tid < 100 + N_DRIVES, "read on track %d, not a drive's", tid);
        int id = (int)json_integer_value(json_object_get(ev, "id"));
        REQUIRE(id > 0 && id < 200000, "read id %d", id);
        double ts = json_number_value(json_object_get(ev, "ts"));
        if (!strcmp(ph, "b")) {
            snprintf(reads[id].name, sizeof reads[id].name, "%s",
                     json_string_value(json_object_get(ev, "name")));
            reads[id].begin = ts;
            reads[id].end = -1;
            n_reads = id > n_reads ? id : n_reads;
        } else {
            CHECK(reads[id].name[0], "read %d ends without a begin", id);
            CHECK(ts >= reads[id].begin, "read %d ends before it begins", id);
            reads[id].end = ts;
        }
    }
    for (int r = 1; r <= n_reads; r++)
        CHECK(reads[r].end >= 0, "read %d (%s) never ends", r, reads[r].name);
    CHECK(n_reads > 100 && counters > 100, "%d reads, %d counter events", n_reads, counters);

    /* Pass 2: compute spans nest; where each layer's MoE ran. */
    const char *stack[64];
    double stack_ts[64];
    int stack_layer[64];
    static struct moe moes[4096];
    int depth = 0, n_moes = 0, layers_in_tokens = 0;
    json_array_foreach(events, i, ev) {
        const char *ph = json_string_value(json_object_get(ev, "ph"));
        double ts = json_number_value(json_object_get(ev, "ts"));
        if (!strcmp(ph, "B")) {
            const char *name = json_string_value(json_object_get(ev, "name"));
            REQUIRE(depth < 64, "spans nest deeper than 64");
            CHECK((int)json_integer_value(json_object_get(ev, "tid")) == 1,
                  "%s on track %d, not the compute track", name,
                  (int)json_integer_value(json_object_get(ev, "tid")));
            if (!strcmp(name, "layer") && depth > 0 && !strcmp(stack[depth - 1], "token"))
                layers_in_tokens++;
            stack_layer[depth] = depth ? stack_layer[depth - 1] : -1;
            if (!strcmp(name, "layer"))
                stack_layer[depth] = (int)json_integer_value(
                    json_object_get(json_object_get(ev, "args"), "layer"));
            stack_ts[depth] = ts;
            stack[depth++] = name;
        } else if (!strcmp(ph, "E")) {
            REQUIRE(depth > 0, "an end without a begin at %.1f", ts);
            depth--;
            CHECK(ts >= stack_ts[depth], "%s ends before it begins", stack[depth]);
            if (!strcmp(stack[depth], "MoE") && n_moes < 4096)
                moes[n_moes++] = (struct moe){stack_layer[depth], stack_ts[depth], ts};
        }
    }
    CHECK(depth == 0, "%d spans left open", depth);
    CHECK(layers_in_tokens == 4 * 13, "%d layer spans inside the 4 tokens, want 52", layers_in_tokens);

    /* Pass 3: experts, on their team's track, one at a time per team, inside their
     * layer's MoE span, and each after its record's reads. */
    int experts = 0, per_team[N_TEAMS] = {0};
    double team_free[N_TEAMS] = {0};
    json_array_foreach(events, i, ev) {
        const char *ph = json_string_value(json_object_get(ev, "ph"));
        if (strcmp(ph, "X"))
            continue;
        const char *name = json_string_value(json_object_get(ev, "name"));
        int team = (int)json_integer_value(json_object_get(ev, "tid")) - TID_TEAM0;
        double ts = json_number_value(json_object_get(ev, "ts"));
        double end = ts + json_number_value(json_object_get(ev, "dur"));
        REQUIRE(!strcmp(name, "expert"), "a complete span \"%s\" that is not an expert", name);
        REQUIRE(team >= 0 && team < N_TEAMS, "an expert on track %d, not a team's", team + TID_TEAM0);
        json_t *args = json_object_get(ev, "args");
        int layer = (int)json_integer_value(json_object_get(args, "layer"));
        char rec[48];
        snprintf(rec, sizeof rec, "layer %d expert %d", layer,
                 (int)json_integer_value(json_object_get(args, "expert")));
        /* Written after each round, so in order per team; timestamps are rounded to 0.1. */
        CHECK(ts + 0.11 >= team_free[team], "team %d starts %s at %.1f before its last ended at %.1f",
              team, rec, ts, team_free[team]);
        team_free[team] = end;
        int inside = 0;
        for (int k = 0; k < n_moes; k++)
            inside |= moes[k].layer == layer && moes[k].begin <= ts + 0.11 && end <= moes[k].end + 0.11;
        CHECK(inside, "%s (%.1f-%.1f) outside every MoE span of its layer", rec, ts, end);
        int seen = 0;
        for (int r = 1; r <= n_reads; r++)
            if (!strcmp(reads[r].name, rec) && reads[r].begin <= ts) {
                seen++;
                CHECK(reads[r].end <= ts, "%s computed at %.1f before its read landed at %.1f", rec,
                      ts, reads[r].end);
            }
        CHECK(seen > 0, "%s computed at %.1f with no read before", rec, ts);
        per_team[team]++;
        experts++;
    }
    CHECK(experts > 100, "only %d expert spans", experts);
    for (int k = 0; k < N_TEAMS; k++)
        CHECK(per_team[k] > experts / 4, "team %d computed %d of %d experts", k, per_team[k], experts);
    printf("%d reads, %d expert spans (teams: %d, %d), %d counters: nested and causal\n", n_reads,
           experts, per_team[0], per_team[1], counters);
    json_decref(root);
    failed_step_then_good();
    return check_result();
}
