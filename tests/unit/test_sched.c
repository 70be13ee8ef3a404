/* The scheduler keeps each request's bytes: on k3-tiny, four sampled requests run alone,
 * then together (one joining while the others decode, one with a prompt longer than a
 * prefill chunk), and each gives the same text, token count and logits hash.  Also: a
 * full queue refuses, a prompt that fills the context is refused, max_tokens and stop
 * strings end a request with the right finish, a cancelled request frees its slot. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/serve/sched.h"
#include "tests/util.h"

#define N_REQ 4

struct result {
    char *text;
    int tokens;
    uint64_t hash;
    enum k3_finish finish;
};

static const int32_t prompts[N_REQ][12] = {
    {5, 17, 300, 9, 41}, {7, 7, 7}, {1000, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13}, {12, 250}};
static const int prompt_len[N_REQ] = {5, 3, 12, 2};

static struct k3_request *make(int i, int max_tokens)
{
    struct k3_gen_params p = {.max_tokens = max_tokens, .temperature = 0.8f, .top_p = 0.95f,
                              .seed = 100 + (uint64_t)i};
    return k3_request_new(prompts[i], prompt_len[i], &p);
}

/* Reads r to its end; its handler reference is released. */
static struct result drain(struct k3_request *r)
{
    struct result out = {.text = calloc(1, 1)};
    size_t len = 0;
    for (;;) {
        struct k3_req_update u;
        k3_request_wait(r, 1000, &u);
        out.text = realloc(out.text, len + u.len + 1);
        memcpy(out.text + len, u.text, u.len + 1);
        len += u.len;
        free(u.text);
        if (u.finish) {
            out.tokens = u.completion_tokens;
            out.hash = u.logits_hash;
            out.finish = u.finish;
            break;
        }
    }
    k3_request_release(r);
    return out;
}

static int completion_tokens(struct k3_request *r)
{
    pthread_mutex_lock(&r->lock);
    int n = r->completion_tokens;
    pthread_mutex_unlock(&r->lock);
    return n;
}

struct client {
    struct k3_sched *s;
    struct result alone[N_REQ], together[N_REQ];
};

static void *client(void *arg)
{
    struct client *c = arg;
    for (int i = 0; i < N_REQ; i++) {
        struct k3_request *r = make(i, 6);
        REQUIRE(k3_sched_submit(c->s, r) == 0, "submit %d alone", i);
        c->alone[i] = drain(r);
    }
    struct k3_request *r[N_REQ];
    for (int i = 0; i < N_REQ - 1; i++) {
        r[i] = make(i, 6);
        REQUIRE(k3_sched_submit(c->s, r[i]) == 0, "submit %d", i);
    }
    while (completion_tokens(r[0]) < 2) /* the last joins while the others decode */
        usleep(1000);
    r[N_REQ - 1] = make(N_REQ - 1, 6);
    REQUIRE(k3_sched_submit(c->s, r[N_REQ - 1]) == 0, "submit the late one");
    for (int i = 0; i < N_REQ; i++)
        c->together[i] = drain(r[i]);
    k3_sched_stop(c->s);
    return NULL;
}

static void same_bytes_alone_and_together(struct k3_runtime *rt)
{
    struct k3_err e = {{0}};
    struct k3_sched *s;
    struct k3_sched_opts o = {.parallel = 4, .ctx = 24, .prefill_chunk = 4, .queue_max = 8};
    REQUIRE(k3_sched_create(&s, rt, &o, &e) == 0, "%s", e.msg);
    struct client c = {.s = s};
    pthread_t th;
    pthread_create(&th, NULL, client, &c);
    k3_sched_run(s);
    pthread_join(th, NULL);
    for (int i = 0; i < N_REQ; i++) {
        CHECK(c.alone[i].finish == K3_FINISH_LENGTH && c.alone[i].tokens == 6,
              "request %d alone: finish %d after %d tokens", i, c.alone[i].finish, c.alone[i].tokens);
        CHECK(!strcmp(c.alone[i].text, c.together[i].text) && c.alone[i].hash == c.together[i].hash &&
                  c.alone[i].tokens == c.together[i].tokens,
              "request %d: alone \"%s\" (%016llx), together \"%s\" (%016llx)", i, c.alone[i].text,
              (unsigned long long)c.alone[i].hash, c.together[i].text,
              (unsigned long long)c.together[i].hash);
        free(c.alone[i].text);
        free(c.together[i].text);
    }
    struct k3_sched_stats st = k3_sched_stats(s, NULL);
    CHECK(st.requests_done == 2 * N_REQ && st.tokens_generated == 2 * N_REQ * 6,
          "%llu requests, %llu tokens", (unsigned long long)st.requests_done,
          (unsigned long long)st.tokens_generated);
    k3_sched_destroy(s);
}

/* Submissions a stopped or full scheduler refuses (no loop runs here). */
static void refusals(struct k3_runtime *rt)
{
    struct k3_err e = {{0}};
    struct k3_sched *s;
    struct k3_sched_opts o = {.parallel = 1, .ctx = 4, .prefill_chunk = 4, .queue_max = 2};
    REQUIRE(k3_sched_create(&s, rt, &o, &e) == 0, "%s", e.msg);
    struct k3_request *big = k3_request_new(prompts[0], 4, &(struct k3_gen_params){0});
    CHECK(k3_sched_submit(s, big) == -E2BIG, "a prompt that fills the context is refused");
    k3_request_release(big);
    struct k3_request *r[3];
    for (int i = 0; i < 3; i++)
        r[i] = k3_request_new(prompts[1], 3, &(struct k3_gen_params){0});
    CHECK(k3_sched_submit(s, r[0]) == 0 && k3_sched_submit(s, r[1]) == 0, "two fit the queue");
    CHECK(k3_sched_submit(s, r[2]) == -EBUSY, "the third finds the queue full");
    k3_request_release(r[2]);
    k3_sched_stop(s);
    k3_sched_run(s); /* ends the queued two with an error */
    for (int i = 0; i < 2; i++) {
        struct result res = drain(r[i]);
        CHECK(res.finish == K3_FINISH_ERROR, "queued request %d ends with an error at stop", i);
        free(res.text);
    }
    struct k3_request *late = k3_request_new(prompts[1], 3, &(struct k3_gen_params){0});
    CHECK(k3_sched_submit(s, late) == -ESHUTDOWN, "a stopped scheduler refuses");
    k3_request_release(late);
    k3_sched_destroy(s);
}

struct stop_client {
    struct k3_sched *s;
    struct result greedy, cut;
    int cancelled_tokens;
};

static void *stop_client(void *arg)
{
    struct stop_client *c = arg;
    struct k3_gen_params p = {0};
    struct k3_request *r = k3_request_new(prompts[0], 5, &(struct k3_gen_params){.max_tokens = 8});
    k3_sched_submit(c->s, r);
    c->greedy = drain(r);
    /* The same greedy request, stopped at a string its text contains. */
    size_t n = strlen(c->greedy.text);
    if (n >= 4) {
        p.stop[0] = strndup(c->greedy.text + n / 2, 2);
        p.max_tokens = 8;
        r = k3_request_new(prompts[0], 5, &p);
        k3_sched_submit(c->s, r);
        c->cut = drain(r);
    }
    /* A request whose client leaves: its slot frees and it stops early. */
    r = k3_request_new(prompts[1], 3, &(struct k3_gen_params){.max_tokens = 1000});
    k3_sched_submit(c->s, r);
    while (completion_tokens(r) < 1)
        usleep(1000);
    k3_request_cancel(r);
    struct result gone = drain(r);
    c->cancelled_tokens = gone.tokens;
    CHECK(gone.finish == K3_FINISH_ERROR, "a cancelled request ends with an error: %d", gone.finish);
    free(gone.text);
    k3_sched_stop(c->s);
    return NULL;
}

static void stops(struct k3_runtime *rt)
{
    struct k3_err e = {{0}};
    struct k3_sched *s;
    struct k3_sched_opts o = {.parallel = 2, .ctx = 900, .prefill_chunk = 8, .queue_max = 4};
    REQUIRE(k3_sched_create(&s, rt, &o, &e) == 0, "%s", e.msg);
    struct stop_client c = {.s = s};
    pthread_t th;
    pthread_create(&th, NULL, stop_client, &c);
    k3_sched_run(s);
    pthread_join(th, NULL);
    CHECK(c.greedy.finish == K3_FINISH_LENGTH && c.greedy.tokens == 8, "max_tokens 8: %d tokens",
          c.greedy.tokens);
    size_t n = strlen(c.greedy.text);
    if (n >= 4) {
        const char *at = strstr(c.greedy.text, c.cut.text);
        CHECK(c.cut.finish == K3_FINISH_STOP && at == c.greedy.text && strlen(c.cut.text) < n,
              "stop string: \"%s\" of \"%s\"", c.cut.text, c.greedy.text);
    }
    CHECK(c.cancelled_tokens < 1000, "the cancelled request stopped (%d tokens)", c.cancelled_tokens);
    free(c.greedy.text);
    free(c.cut.text);
    k3_sched_destroy(s);
}

int main(void)
{
    struct k3_err e = {{0}};
    struct k3_runtime *rt;
    struct k3_runtime_opts ro = {.model_dir = tiny_model()};
    REQUIRE(k3_runtime_open(&rt, &ro, &e) == 0 &&
                k3_runtime_start(rt, 900, 4, K3_CHUNK, (struct k3_caller_bytes){0}, NULL, &e) == 0,
            "%s", e.msg);
    same_bytes_alone_and_together(rt);
    refusals(rt);
    stops(rt);
    k3_runtime_close(rt, NULL);
    return check_result();
}
