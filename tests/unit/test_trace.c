/* --trace: the file is valid trace-event JSON whose compute spans nest (token > layer >
 * attention / MoE > expert), whose reads sit on their drive's track with every begin
 * matched by an end, and whose order is causal: no expert computes before every read of
 * its record that started earlier has landed. */
#include <jansson.h>
#include <omp.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "engine/forward.h"
#include "engine/model.h"
#include "engine/pack.h"
#include "engine/stream.h"
#include "engine/trace.h"
#include "tests/util.h"

#define N_DRIVES 2

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
    REQUIRE(k3_model_open_packed(&m, drives, N_DRIVES, &e) == 0, "%s", e.msg);
    struct k3_trace *t;
    REQUIRE(k3_trace_open(&t, path, N_DRIVES, &e) == 0, "%s", e.msg);
    struct k3_stream_opts so = {.ram = K3_RAM_FLOOR, .ctx = 16, .threads = omp_get_max_threads(),
                                .prefetch_k = 24, .trace = t};
    struct k3_stream *s;
    REQUIRE(k3_stream_open(&s, &m, &so, NULL, 0, &e) == 0, "%s", e.msg);
    struct k3_session ss;
    REQUIRE(k3_session_init(&ss, &m, k3_stream_experts(s), 16, &e) == 0, "%s", e.msg);
    ss.trunk = k3_stream_trunk(s);
    ss.trace = t;
    ss.predict = K3_PREDICT_MOE_INPUT_NEXT;
    ss.predict_k = 24;
    static float logits[2048];
    int32_t prompt[3] = {5, 17, 300};
    k3_trace_begin(t, "prompt", NULL);
    REQUIRE(k3_forward(&ss, prompt, 3, logits, false, &e) == 0, "%s", e.msg);
    k3_trace_end(t);
    for (int i = 0; i < 4; i++) {
        int32_t next = 7 + i;
        k3_trace_begin(t, "token", NULL);
        REQUIRE(k3_forward(&ss, &next, 1, logits, false, &e) == 0, "%s", e.msg);
        k3_trace_end(t);
    }
    REQUIRE(k3_trace_close(t, &e) == 0, "%s", e.msg);
    k3_session_free(&ss);
    k3_stream_close(s);
    k3_model_close(&m);
}

/* Reads of one record: begin and end times, by name ("layer 3 expert 17"). */
struct read {
    char name[48];
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

    /* Pass 2: compute spans nest, and each expert starts after its record's reads. */
    const char *stack[64];
    double stack_ts[64];
    int depth = 0, experts = 0, layers_in_tokens = 0;
    json_array_foreach(events, i, ev) {
        const char *ph = json_string_value(json_object_get(ev, "ph"));
        double ts = json_number_value(json_object_get(ev, "ts"));
        if (!strcmp(ph, "B")) {
            const char *name = json_string_value(json_object_get(ev, "name"));
            REQUIRE(depth < 64, "spans nest deeper than 64");
            if (!strcmp(name, "layer") && depth > 0 && !strcmp(stack[depth - 1], "token"))
                layers_in_tokens++;
            if (!strcmp(name, "expert")) {
                CHECK(depth >= 2 && !strcmp(stack[depth - 1], "MoE") &&
                          !strcmp(stack[depth - 2], "layer"),
                      "an expert span outside layer > MoE");
                json_t *args = json_object_get(ev, "args");
                char rec[48];
                snprintf(rec, sizeof rec, "layer %d expert %d",
                         (int)json_integer_value(json_object_get(args, "layer")),
                         (int)json_integer_value(json_object_get(args, "expert")));
                int seen = 0;
                for (int r = 1; r <= n_reads; r++)
                    if (!strcmp(reads[r].name, rec) && reads[r].begin <= ts) {
                        seen++;
                        CHECK(reads[r].end <= ts, "%s computed at %.1f before its read landed at %.1f",
                              rec, ts, reads[r].end);
                    }
                CHECK(seen > 0, "%s computed at %.1f with no read before", rec, ts);
                experts++;
            }
            stack_ts[depth] = ts;
            stack[depth++] = name;
        } else if (!strcmp(ph, "E")) {
            REQUIRE(depth > 0, "an end without a begin at %.1f", ts);
            depth--;
            CHECK(ts >= stack_ts[depth], "%s ends before it begins", stack[depth]);
        }
    }
    CHECK(depth == 0, "%d spans left open", depth);
    CHECK(experts > 100, "only %d expert spans", experts);
    CHECK(layers_in_tokens == 4 * 13, "%d layer spans inside the 4 tokens, want 52", layers_in_tokens);
    printf("%d reads, %d expert spans, %d counters: nested and causal\n", n_reads, experts, counters);
    json_decref(root);
    return check_result();
}
