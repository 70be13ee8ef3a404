/* A server serves on after a read fails on every copy: on a pack without replicas, under
 * injected corruption, requests one after another each end either with the fault-free
 * text and logits hash or with the read's error, and requests after a failed one still
 * succeed (the read path forgets the failure rather than failing every later step). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "engine/pack/pack.h"
#include "engine/serve/sched.h"
#include "tests/util.h"

#define REQUESTS 16

struct client {
    struct k3_sched *s;
    struct k3_runtime *rt;
    char want[256];
    uint64_t want_hash;
    int ok, errors, ok_after_error, wrong;
};

static enum k3_finish run_one(struct k3_sched *s, char *text, size_t cap, uint64_t *hash)
{
    static const int32_t prompt[] = {5, 17, 300};
    struct k3_request *r = k3_request_new(prompt, 3, &(struct k3_gen_params){.max_tokens = 2});
    REQUIRE(r && k3_sched_submit(s, r) == 0, "submit");
    size_t len = 0;
    struct k3_req_update u;
    for (;;) {
        k3_request_wait(r, 1000, &u);
        if (len + u.len < cap) {
            memcpy(text + len, u.text, u.len);
            len += u.len;
        }
        free(u.text);
        if (u.finish)
            break;
    }
    text[len] = 0;
    *hash = u.logits_hash;
    k3_request_release(r);
    return u.finish;
}

static void *reference(void *arg)
{
    struct client *c = arg;
    REQUIRE(run_one(c->s, c->want, sizeof c->want, &c->want_hash) == K3_FINISH_LENGTH,
            "the fault-free request");
    k3_sched_stop(c->s);
    return NULL;
}

static void *client(void *arg)
{
    struct client *c = arg;
    for (int i = 0; i < REQUESTS; i++) {
        char text[256];
        uint64_t hash;
        enum k3_finish f = run_one(c->s, text, sizeof text, &hash);
        if (f == K3_FINISH_ERROR) {
            c->errors++;
        } else if (!strcmp(text, c->want) && hash == c->want_hash) {
            c->ok++;
            c->ok_after_error += c->errors > 0;
        } else {
            c->wrong++;
        }
    }
    k3_sched_stop(c->s);
    return NULL;
}

/* A scheduler runs on this thread (which owns the read path) while fn submits. */
static struct k3_runtime *open_runtime(const struct k3_runtime_opts *ro)
{
    struct k3_err e = {{0}};
    struct k3_runtime *rt;
    REQUIRE(k3_runtime_open(&rt, ro, &e) == 0 &&
                k3_runtime_start(rt, 16, K3_CHUNK, K3_CHUNK, (struct k3_caller_bytes){0}, NULL,
                                 &e) == 0,
            "%s", e.msg);
    return rt;
}

static void serve(struct k3_runtime *rt, struct client *c, void *(*fn)(void *))
{
    struct k3_err e = {{0}};
    struct k3_sched_opts so = {.parallel = 1, .ctx = 16, .prefill_chunk = 8, .queue_max = 2};
    REQUIRE(k3_sched_create(&c->s, rt, &so, &e) == 0, "%s", e.msg);
    pthread_t th;
    pthread_create(&th, NULL, fn, c);
    k3_sched_run(c->s);
    pthread_join(th, NULL);
    k3_sched_destroy(c->s);
}

int main(void)
{
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/sched-faults", test_tmp());
    mkdir(dir, 0755);
    const char *drives[] = {dir};
    struct k3_err e = {{0}};
    struct k3_pack_opts po = {.checkpoint = tiny_model(), .drives = drives, .n_drives = 1,
                              .replicas = 1};
    REQUIRE(k3_pack(&po, &e) == 0, "pack: %s", e.msg);
    struct k3_runtime_opts ro = {.drives = dir, .ram = K3_RAM_FLOOR, .no_cache = true,
                                 .prefetch_k = 20, .read.prefetch_depth = 2};
    struct client c = {.rt = open_runtime(&ro)};
    serve(c.rt, &c, reference);
    k3_runtime_close(c.rt, NULL);
    /* Every piece read is corrupt with this probability; a 2-token request reads a few
     * thousand pieces (the trunk streams at the floor), so about half of them fail. */
    ro.faults = "corrupt:0.0002";
    ro.fault_seed = 7;
    c.rt = open_runtime(&ro);
    serve(c.rt, &c, client);
    printf("%d requests under corruption: %d the fault-free answer (%d after an error), %d "
           "errors, %d wrong\n", REQUESTS, c.ok, c.ok_after_error, c.errors, c.wrong);
    CHECK(c.wrong == 0, "%d wrong answers", c.wrong);
    CHECK(c.errors > 0, "no request met a fault: the test proves nothing");
    CHECK(c.ok_after_error > 0, "no request succeeded after the first error");
    k3_runtime_close(c.rt, NULL);
    return check_result();
}
