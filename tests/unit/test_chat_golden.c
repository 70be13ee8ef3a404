/* k3_chat_render against encoding_k3.py's build_chat_segments: every case of
 * tests/chat/golden.json (provenance in tests/chat/README.md) renders to the exact prompt
 * and the exact segments (text and special flag), not strict; its ids (k3-tiny's
 * tokenizer) are the golden segments encoded one by one (markers by id, the rest with
 * specials disabled), so a marker typed in a message never becomes a marker id. */
#include <stdlib.h>
#include <string.h>

#include "engine/text/chat.h"
#include "tests/util.h"

static const char *const MARKERS[] = {"<|open|>", "<|close|>", "<|sep|>", "<|end_of_msg|>"};

static void options(const json_t *c, struct k3_chat_opts *o)
{
    const json_t *opt = json_object_get(c, "options");
    *o = (struct k3_chat_opts){
        .thinking = json_is_true(json_object_get(opt, "thinking")),
        .effort = json_string_value(json_object_get(opt, "effort")),
        .tool_choice = json_object_get(opt, "tool_choice"),
        .response_format = json_object_get(opt, "response_format"),
        .add_generation_prompt = json_is_true(json_object_get(opt, "add_generation_prompt")),
    };
}

/* Whether segs are exactly the golden [text, special] pairs; says where they differ. */
static bool same_segments(const char *name, const struct k3_chat_segs *segs, const json_t *want)
{
    bool same = segs->n == json_array_size(want);
    for (size_t i = 0; i < segs->n && i < json_array_size(want); i++) {
        const json_t *w = json_array_get(want, i), *text = json_array_get(w, 0);
        const struct k3_chat_seg *s = &segs->v[i];
        if (s->len == json_string_length(text) && !memcmp(s->text, json_string_value(text), s->len) &&
            s->special == json_is_true(json_array_get(w, 1)))
            continue;
        CHECK(0, "%s: segment %zu is [\"%s\", %d], want [\"%s\", %d]", name, i, s->text,
              s->special, json_string_value(text), json_is_true(json_array_get(w, 1)));
        return false;
    }
    CHECK(same, "%s: %zu segments, want %zu", name, segs->n, json_array_size(want));
    return same;
}

/* The golden segments encoded one at a time, as the reference tokenizer does; *markers
 * counts the marker segments of each kind. */
static int32_t *reference_ids(const struct k3_tokenizer *tok, const json_t *want, size_t *n,
                              int markers[4])
{
    int32_t *all = NULL;
    *n = 0;
    for (size_t i = 0; i < json_array_size(want); i++) {
        const json_t *w = json_array_get(want, i);
        const char *text = json_string_value(json_array_get(w, 0));
        bool special = json_is_true(json_array_get(w, 1));
        int32_t *ids;
        size_t k;
        struct k3_err e;
        REQUIRE(k3_tok_encode(tok, text, json_string_length(json_array_get(w, 0)), special, &ids,
                              &k, &e) == 0, "%s", e.msg);
        for (int m = 0; m < 4; m++)
            if (special && !strcmp(text, MARKERS[m])) {
                REQUIRE(k == 1 && ids[0] == k3_tok_special(tok, MARKERS[m]), "%s is one id", text);
                markers[m]++;
            }
        REQUIRE((all = realloc(all, (*n + k + 1) * sizeof *all)), "out of memory");
        memcpy(all + *n, ids, k * sizeof *ids);
        *n += k;
        free(ids);
    }
    return all;
}

static void check_ids(const struct k3_tokenizer *tok, const char *name,
                      const struct k3_chat_segs *segs, const json_t *want)
{
    int markers[4] = {0};
    size_t n_want, n;
    int32_t *expect = reference_ids(tok, want, &n_want, markers), *ids;
    struct k3_err e;
    REQUIRE(k3_chat_segs_encode(tok, segs, &ids, &n, &e) == 0, "%s: %s", name, e.msg);
    CHECK(n == n_want && !memcmp(ids, expect, n * sizeof *ids), "%s: %zu ids differ from the "
          "%zu of the golden segments encoded one by one", name, n, n_want);
    for (int m = 0; m < 4; m++) {
        int count = 0;
        for (size_t i = 0; i < n; i++)
            count += ids[i] == k3_tok_special(tok, MARKERS[m]);
        CHECK(count == markers[m], "%s: %d %s ids, but %d marker segments (text made one?)",
              name, count, MARKERS[m], markers[m]);
    }
    free(ids);
    free(expect);
}

/* Renders one case; true when the prompt and the segments are the golden ones. */
static bool run_case(const struct k3_tokenizer *tok, const json_t *c)
{
    const char *name = json_string_value(json_object_get(c, "name"));
    struct k3_chat_opts o;
    options(c, &o);
    struct k3_chat_segs segs = {0};
    struct k3_chat_fault fault;
    if (k3_chat_render(json_object_get(c, "messages"), json_object_get(c, "tools"), &o, &segs,
                       &fault)) {
        CHECK(0, "%s: %s (%s)", name, fault.message, fault.param);
        k3_chat_segs_free(&segs);
        return false;
    }
    size_t len;
    char *text = k3_chat_segs_join(&segs, &len);
    const json_t *expected = json_object_get(c, "expected");
    bool ok = len == json_string_length(expected) && !memcmp(text, json_string_value(expected), len);
    CHECK(ok, "%s: rendered\n%s\nwant\n%s", name, text, json_string_value(expected));
    ok &= same_segments(name, &segs, json_object_get(c, "expected_segments"));
    check_ids(tok, name, &segs, json_object_get(c, "expected_segments"));
    free(text);
    k3_chat_segs_free(&segs);
    return ok;
}

int main(void)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/tests/chat/golden.json", test_root());
    json_error_t je;
    json_t *golden = json_load_file(path, 0, &je);
    REQUIRE(golden, "%s:%d: %s", path, je.line, je.text);
    struct k3_tokenizer *tok;
    struct k3_err e;
    REQUIRE(k3_tok_load(&tok, tiny_model(), 2048, NULL, false, &e) == 0, "%s", e.msg);

    const json_t *cases = json_object_get(golden, "cases");
    size_t passed = 0;
    for (size_t i = 0; i < json_array_size(cases); i++) {
        bool ok = run_case(tok, json_array_get(cases, i));
        printf("%s %s\n", ok ? "pass" : "FAIL",
               json_string_value(json_object_get(json_array_get(cases, i), "name")));
        passed += ok;
    }
    printf("golden: %zu of %zu cases render exactly\n", passed, json_array_size(cases));
    CHECK(json_array_size(cases) == 39, "%zu golden cases, want 39", json_array_size(cases));
    k3_tok_free(tok);
    json_decref(golden);
    return check_result();
}
