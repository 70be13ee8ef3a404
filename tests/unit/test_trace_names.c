/* --trace: names are JSON-escaped.  A span, a team span, a read, a storage read and a
 * counter named with a quote, a backslash and control characters give a file that parses
 * (jansson) and gives each name back as written; a name too long for the trace is cut
 * between characters, still valid JSON (UTF-8 included), and comes back as a prefix. */
#include <jansson.h>
#include <string.h>

#include "engine/base/trace.h"
#include "tests/util.h"

static const char *const names[] = {
    "say \"hi\"", "C:\\drive\\", "tab\there\nnewline", "\x01\x1f end", "plain",
};
#define N_NAMES (int)(sizeof names / sizeof names[0])

int main(void)
{
    char path[4200];
    mkdir(test_tmp(), 0755);
    snprintf(path, sizeof path, "%s/trace-names.json", test_tmp());
    struct k3_err e = {{0}};
    struct k3_trace *t;
    REQUIRE(k3_trace_open(&t, path, 1, -1, &e) == 0, "%s", e.msg);
    for (int i = 0; i < N_NAMES; i++) {
        k3_trace_begin(t, names[i], "\"i\": 1");
        k3_trace_team_span(t, 0, 0, names[i], NULL, 1, 2);
        k3_trace_read(t, 0, 1, 2, 4096, names[i]);
        k3_trace_storage_read(t, 0, 1, 2, 4096, names[i]);
        k3_trace_counter(t, names[i], i);
        k3_trace_end(t);
    }
    static char long_name[1024];
    for (int k = 0; k < 150; k++)
        strcat(long_name, "\xc3\xa9\\"); /* é and a backslash: 3 bytes, 4 quoted */
    k3_trace_counter(t, long_name, 1);
    REQUIRE(k3_trace_close(t, &e) == 0, "%s", e.msg);

    json_error_t jerr;
    json_t *root = json_load_file(path, 0, &jerr);
    REQUIRE(root, "%s is not JSON: line %d: %s", path, jerr.line, jerr.text);
    json_t *events = json_object_get(root, "traceEvents");
    REQUIRE(json_is_array(events), "no traceEvents array");
    int seen[N_NAMES] = {0}, cut = 0;
    size_t i;
    json_t *ev;
    json_array_foreach(events, i, ev) {
        const char *name = json_string_value(json_object_get(ev, "name"));
        for (int k = 0; name && k < N_NAMES; k++)
            seen[k] += !strcmp(name, names[k]);
        if (name && strlen(name) > 100) {
            cut++;
            /* whole characters: jansson refuses a file that is not UTF-8 */
            CHECK(strlen(name) < strlen(long_name) && !strncmp(name, long_name, strlen(name)),
                  "the long name came back as %zu bytes, not a prefix", strlen(name));
        }
    }
    CHECK(cut == 1, "%d long names", cut);
    /* B, X, b, e, b, e, C: seven events each ("E" has no name) */
    for (int k = 0; k < N_NAMES; k++)
        CHECK(seen[k] == 7, "name %d (\"%s\") came back %d times, want 7", k, names[k], seen[k]);
    json_decref(root);
    return check_result();
}
