/* A sequence's logits do not depend on the rows it shares a step with: k3-tiny decodes
 * four sequences alone, then together (one row each per step, a sequence joining with a
 * prompt chunk mid-way, another leaving early), and every logit row is the same bytes.
 * Also: a step whose sequence rows are not adjacent, or that overflows a sequence's
 * context, is refused without running. */
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "engine/forward/forward.h"
#include "engine/forward/sampler.h"
#include "engine/model/model.h"
#include "engine/pack/model_open.h"
#include "engine/stream/stream.h"
#include "tests/util.h"

#define N_SEQ 4
#define N_GEN 6
#define MAX_PROMPT 5
#define CTX 16

static const int32_t prompts[N_SEQ][MAX_PROMPT] = {
    {5, 17, 300, 9, 41}, {7, 7, 7}, {1000, 3}, {12, 250, 251, 252, 90}};
static const int prompt_len[N_SEQ] = {5, 3, 2, 5};

struct run {
    float *logits;      /* [N_SEQ][N_GEN][V]: the rows that chose each generated token */
    int32_t ids[N_SEQ][N_GEN];
};

static float *row_of(struct run *r, int V, int s, int i)
{
    return r->logits + ((size_t)s * N_GEN + (size_t)i) * V;
}

/* Each sequence alone: prompt, then greedy tokens one at a time. */
static void alone(struct k3_forward *f, const struct k3_config *c, struct run *r)
{
    struct k3_err e = {{0}};
    for (int s = 0; s < N_SEQ; s++) {
        struct k3_seq q;
        REQUIRE(k3_seq_init(&q, c, CTX, &e) == 0, "%s", e.msg);
        REQUIRE(k3_forward_tokens(f, &q, prompts[s], prompt_len[s], row_of(r, c->vocab, s, 0),
                                  false, &e) == 0, "%s", e.msg);
        for (int i = 0; i + 1 < N_GEN; i++) {
            r->ids[s][i] = k3_argmax(row_of(r, c->vocab, s, i), c->vocab);
            REQUIRE(k3_forward_tokens(f, &q, &r->ids[s][i], 1, row_of(r, c->vocab, s, i + 1),
                                      false, &e) == 0, "%s", e.msg);
        }
        r->ids[s][N_GEN - 1] = k3_argmax(row_of(r, c->vocab, s, N_GEN - 1), c->vocab);
        k3_seq_free(&q);
    }
}

/* Together: sequence 0 and 1 start with their prompts in one step; then every step
 * decodes one row of each running sequence, and sequence 2 joins with its whole prompt
 * in the step after the first, sequence 3 two steps later. */
static void together(struct k3_forward *f, const struct k3_config *c, struct run *r)
{
    struct k3_err e = {{0}};
    struct k3_seq q[N_SEQ];
    int done[N_SEQ] = {0}; /* logit rows received */
    int joins_at[N_SEQ] = {0, 0, 1, 3};
    for (int s = 0; s < N_SEQ; s++)
        REQUIRE(k3_seq_init(&q[s], c, CTX, &e) == 0, "%s", e.msg);
    for (int step = 0;; step++) {
        int32_t tokens[K3_CHUNK];
        struct k3_seq *seqs[K3_CHUNK];
        bool want[K3_CHUNK];
        int owner[N_SEQ], n = 0, n_out = 0;
        for (int s = 0; s < N_SEQ; s++) {
            if (step < joins_at[s] || done[s] == N_GEN)
                continue;
            const int32_t *src = done[s] ? &r->ids[s][done[s] - 1] : prompts[s];
            int rows = done[s] ? 1 : prompt_len[s];
            for (int t = 0; t < rows; t++) {
                tokens[n] = src[t];
                seqs[n] = &q[s];
                want[n] = t == rows - 1;
                n++;
            }
            owner[n_out++] = s;
        }
        if (!n)
            break;
        float *logits = malloc(sizeof(float) * (size_t)n_out * c->vocab);
        struct k3_step st = {.n = n, .tokens = tokens, .seq = seqs, .want_logits = want,
                             .logits = logits};
        REQUIRE(k3_forward_step(f, &st, &e) == 0, "step %d: %s", step, e.msg);
        for (int j = 0; j < n_out; j++) {
            int s = owner[j];
            memcpy(row_of(r, c->vocab, s, done[s]), logits + (size_t)j * c->vocab,
                   sizeof(float) * c->vocab);
            r->ids[s][done[s]] = k3_argmax(logits + (size_t)j * c->vocab, c->vocab);
            done[s]++;
        }
        free(logits);
    }
    for (int s = 0; s < N_SEQ; s++)
        k3_seq_free(&q[s]);
}

static void refuses_bad_steps(struct k3_forward *f, const struct k3_config *c)
{
    struct k3_err e = {{0}};
    struct k3_seq a, b;
    REQUIRE(k3_seq_init(&a, c, 2, &e) == 0 && k3_seq_init(&b, c, 2, &e) == 0, "%s", e.msg);
    int32_t tokens[3] = {1, 2, 3};
    struct k3_seq *apart[3] = {&a, &b, &a};
    struct k3_step st = {.n = 3, .tokens = tokens, .seq = apart};
    CHECK(k3_forward_step(f, &st, &e) == -1 && strstr(e.msg, "not adjacent") && a.pos == 0,
          "rows of a sequence apart: %s", e.msg);
    struct k3_seq *three[3] = {&a, &a, &a};
    st.seq = three;
    CHECK(k3_forward_step(f, &st, &e) == -1 && strstr(e.msg, "context full") && a.pos == 0,
          "three rows into a context of 2: %s", e.msg);
    k3_seq_free(&a);
    k3_seq_free(&b);
}

int main(void)
{
    struct k3_model m;
    struct k3_stream *stream;
    struct k3_err e = {{0}};
    REQUIRE(k3_model_open_checkpoint(&m, tiny_model(), &e) == 0, "%s", e.msg);
    /* The whole trunk resident: bound to the model at open, so no trunk hook is needed. */
    struct k3_stream_opts so = {.ram = K3_RAM_TRUNK, .ctx = CTX, .seqs = N_SEQ,
                                .threads = omp_get_max_threads(), .cache = true};
    REQUIRE(k3_stream_open(&stream, &m, &so, NULL, 0, &e) == 0, "%s", e.msg);
    struct k3_expert_store *store = k3_stream_experts(stream);
    struct k3_forward f;
    REQUIRE(k3_forward_init(&f, &m, store, CTX, K3_CHUNK, NULL, &e) == 0, "%s", e.msg);
    int V = m.cfg.vocab;
    struct run solo = {.logits = calloc((size_t)N_SEQ * N_GEN * V, sizeof(float))};
    struct run batched = {.logits = calloc((size_t)N_SEQ * N_GEN * V, sizeof(float))};
    alone(&f, &m.cfg, &solo);
    together(&f, &m.cfg, &batched);
    for (int s = 0; s < N_SEQ; s++)
        for (int i = 0; i < N_GEN; i++)
            CHECK(!memcmp(row_of(&solo, V, s, i), row_of(&batched, V, s, i), sizeof(float) * V),
                  "sequence %d, token %d: logits differ alone and batched", s, i);
    CHECK(!memcmp(solo.ids, batched.ids, sizeof solo.ids), "greedy tokens differ");
    refuses_bad_steps(&f, &m.cfg);
    free(solo.logits);
    free(batched.logits);
    k3_forward_free(&f);
    k3_stream_close(stream);
    k3_model_close(&m);
    return check_result();
}
