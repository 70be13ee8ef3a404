/* The prompt cache's file (engine/forward/seq_file.h) on k3-tiny's shapes: a saved state
 * loads back bit for bit when its ids are a prefix of the prompt (equal too), and is read
 * past (still checked) when they are not; another model's file, another version, a state longer than the
 * context, every truncation and flipped bytes all over the file are refused with the file
 * named; a save that fails at any write (RLIMIT_FSIZE) leaves the previous file whole and
 * no temporary file behind. */
#include <signal.h>
#include <stdbool.h>
#include <sys/resource.h>

#include "engine/forward/seq_file.h"
#include "engine/base/rng.h"
#include "tests/util.h"

#define CTX 24
#define POS 9

static struct k3_config cfg;
static char dir[K3_PATH_MAX / 2], path[K3_PATH_MAX];
static const struct k3_seq_file_model model = {.id = 0x1234567890abcdefull, .pack_xxh64 = 0};
static int32_t ids[CTX];
static float *logits, *got_logits;

static void fill(float *p, size_t n, struct k3_rng *r)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (float)k3_rng_normal(r);
}

/* A sequence at POS with every state float drawn at random. */
static void random_seq(struct k3_seq *q)
{
    struct k3_err e;
    REQUIRE(k3_seq_init(q, &cfg, CTX, &e) == 0, "%s", e.msg);
    struct k3_rng r;
    k3_rng_seed(&r, 7);
    size_t kda = (size_t)cfg.kda_heads * cfg.kda_head_dim * cfg.kda_head_dim;
    size_t conv = 3 * (size_t)k3_kda_width(&cfg) * (cfg.conv_kernel - 1);
    size_t row = (size_t)(cfg.kv_lora + cfg.qk_rope);
    for (int l = 0; l < cfg.n_layers; l++) {
        if (cfg.attn[l] == K3_ATTN_KDA) {
            fill(q->kda_state[l], kda, &r);
            fill(q->conv_ring[l], conv, &r);
        } else {
            fill(q->mla_cache[l], POS * row, &r);
        }
    }
    q->pos = POS;
}

/* a and b hold the same state up to pos (and the same pos). */
static bool same_state(const struct k3_seq *a, const struct k3_seq *b)
{
    size_t kda = (size_t)cfg.kda_heads * cfg.kda_head_dim * cfg.kda_head_dim;
    size_t conv = 3 * (size_t)k3_kda_width(&cfg) * (cfg.conv_kernel - 1);
    size_t row = (size_t)(cfg.kv_lora + cfg.qk_rope);
    bool same = a->pos == b->pos;
    for (int l = 0; same && l < cfg.n_layers; l++)
        same = cfg.attn[l] == K3_ATTN_KDA
                   ? !memcmp(a->kda_state[l], b->kda_state[l], kda * sizeof(float)) &&
                         !memcmp(a->conv_ring[l], b->conv_ring[l], conv * sizeof(float))
                   : !memcmp(a->mla_cache[l], b->mla_cache[l], (size_t)a->pos * row * sizeof(float));
    return same;
}

static void save(const struct k3_seq *q, const struct k3_seq_file_model *m)
{
    struct k3_seq_writer w;
    struct k3_err e;
    REQUIRE(k3_seq_writer_begin(&w, path, &e) == 0, "%s", e.msg);
    REQUIRE(k3_seq_writer_save(&w, &cfg, m, q, ids, logits, &e) == 0, "%s", e.msg);
    REQUIRE(k3_seq_writer_end(&w, false, &e) == 0, "%s", e.msg);
}

/* Loads path into a fresh sequence for prompt ids[0, n); returns the call's result, and
 * what was found in *found, the message in e. */
static int load(const struct k3_seq_file_model *m, int n, enum k3_seq_file_found *found,
                struct k3_seq *q, struct k3_err *e)
{
    int saved;
    e->msg[0] = 0;
    return k3_seq_file_load(path, &cfg, m, q, ids, n, got_logits, found, &saved, e);
}

/* The load is refused with one message naming the file and containing needle. */
static void refused(const char *what, const char *needle)
{
    struct k3_seq q;
    struct k3_err e;
    enum k3_seq_file_found found;
    REQUIRE(k3_seq_init(&q, &cfg, CTX, &e) == 0, "%s", e.msg);
    int rc = load(&model, CTX, &found, &q, &e);
    CHECK(rc == -1, "%s: loaded (found %d)", what, (int)found);
    CHECK(rc == 0 || (strstr(e.msg, path) == e.msg && strstr(e.msg, needle)),
          "%s: message \"%s\" wants \"%s\"", what, e.msg, needle);
    CHECK(q.pos == 0, "%s: the sequence is at %d after a refusal", what, q.pos);
    k3_seq_free(&q);
}

static void put_file(const uint8_t *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    REQUIRE(f && fwrite(data, 1, len, f) == len && fclose(f) == 0, "writing %s", path);
}

static void round_trip(const struct k3_seq *saved)
{
    struct k3_err e;
    enum k3_seq_file_found found;
    for (int n = POS - 1; n <= CTX; n++) { /* shorter, equal, longer prompts */
        struct k3_seq q;
        REQUIRE(k3_seq_init(&q, &cfg, CTX, &e) == 0, "%s", e.msg);
        memset(got_logits, 0, sizeof(float) * (size_t)cfg.vocab);
        REQUIRE(load(&model, n, &found, &q, &e) == 0, "%s", e.msg);
        if (n < POS) {
            CHECK(found == K3_SEQ_FILE_OTHER_PROMPT && q.pos == 0, "prompt of %d: found %d at %d",
                  n, (int)found, q.pos);
        } else {
            CHECK(found == K3_SEQ_FILE_RESUMED, "prompt of %d: found %d", n, (int)found);
            CHECK(same_state(saved, &q), "prompt of %d: the state differs", n);
            CHECK(!memcmp(logits, got_logits, sizeof(float) * (size_t)cfg.vocab),
                  "prompt of %d: the logits row differs", n);
        }
        k3_seq_free(&q);
    }
    /* A prompt that differs inside the saved ids: not a prefix, nothing loaded. */
    struct k3_seq q;
    REQUIRE(k3_seq_init(&q, &cfg, CTX, &e) == 0, "%s", e.msg);
    ids[3] ^= 1;
    REQUIRE(load(&model, CTX, &found, &q, &e) == 0, "%s", e.msg);
    ids[3] ^= 1;
    CHECK(found == K3_SEQ_FILE_OTHER_PROMPT && q.pos == 0, "another prompt: found %d at %d",
          (int)found, q.pos);
    float sum = 0;
    for (int i = 0; i < cfg.kda_heads * cfg.kda_head_dim * cfg.kda_head_dim; i++)
        sum += q.kda_state[0][i] * q.kda_state[0][i];
    CHECK(sum == 0, "another prompt: the KDA state was left loaded");
    k3_seq_free(&q);
}

static void models(const struct k3_seq *saved)
{
    struct k3_err e;
    enum k3_seq_file_found found;
    struct k3_seq_file_model other = {.id = 0x1111222233334444ull};
    struct k3_seq q;
    REQUIRE(k3_seq_init(&q, &cfg, CTX, &e) == 0, "%s", e.msg);
    CHECK(load(&other, CTX, &found, &q, &e) == -1 &&
              strstr(e.msg, "saved for model 1234567890abcdef, this is 1111222233334444"),
          "another model: \"%s\"", e.msg);
    /* A pack hash is compared only when both sides have one. */
    struct k3_seq_file_model packed = {.id = model.id, .pack_xxh64 = 99};
    CHECK(load(&packed, CTX, &found, &q, &e) == 0 && found == K3_SEQ_FILE_RESUMED,
          "saved from a checkpoint, read through a pack: %s", e.msg);
    k3_seq_reset(&q, &cfg);
    save(saved, &packed);
    packed.pack_xxh64 = 98;
    CHECK(load(&packed, CTX, &found, &q, &e) == -1 && strstr(e.msg, "other weights"),
          "another pack of the same small tensors: \"%s\"", e.msg);
    CHECK(load(&model, CTX, &found, &q, &e) == 0 && found == K3_SEQ_FILE_RESUMED,
          "saved from a pack, read through a checkpoint: %s", e.msg);
    k3_seq_free(&q);
    save(saved, &model);
    /* A context too short for the saved state: refused when the state would be loaded;
     * a prompt that fits the context is not its extension, so that one is only read past. */
    struct k3_seq small;
    REQUIRE(k3_seq_init(&small, &cfg, POS - 1, &e) == 0, "%s", e.msg);
    CHECK(load(&model, CTX, &found, &small, &e) == -1 &&
              strstr(e.msg, "its prompt of 9 tokens is longer than the context (8 positions)"),
          "short context: \"%s\"", e.msg);
    CHECK(load(&model, POS - 1, &found, &small, &e) == 0 && found == K3_SEQ_FILE_OTHER_PROMPT,
          "short context, short prompt: \"%s\", found %d", e.msg, (int)found);
    k3_seq_free(&small);
}

static void damage(void)
{
    size_t len;
    uint8_t *good = read_file(path, &len);
    REQUIRE(good && len == k3_seq_file_bytes(&cfg, POS), "the file is %zu bytes", len);
    uint8_t *bad = malloc(len);
    REQUIRE(bad, "out of memory");
    /* Every truncation in the header and the ids, then a sample, then the last bytes. */
    size_t head = sizeof(struct k3_seq_file_header) + POS * sizeof(int32_t);
    for (size_t cut = 0; cut < len; cut += cut < head || cut + 64 >= len ? 1
                                             : cut + 64 + 4093 < len ? 4093 : len - 64 - cut) {
        put_file(good, cut);
        char what[64];
        snprintf(what, sizeof what, "cut at %zu of %zu", cut, len);
        refused(what, cut < 8 ? "not a k3-uring prompt cache" : "truncated");
    }
    /* A flipped bit in every byte of the header, ids, the first logits, the end of each
     * layer's state and the checksum, and in a sample of the rest. */
    int flips = 0;
    for (size_t at = 0; at < len; at++) {
        bool edge = at < head + 64 || at + 64 >= len || at % 1021 == 0;
        if (!edge)
            continue;
        memcpy(bad, good, len);
        bad[at] ^= (uint8_t)(1u << (at % 8));
        put_file(bad, len);
        char what[64];
        snprintf(what, sizeof what, "bit %zu of byte %zu", at % 8, at);
        refused(what, at < 8 ? "not a k3-uring prompt cache" : at < 12 ? "format version"
                      : at >= 24 && at < 32 ? "saved for model" : "damaged");
        flips++;
    }
    printf("%d single-bit flips and every truncation refused\n", flips);
    put_file(good, len);
    free(bad);
    free(good);
}

/* A save that fails at its n-th byte (the file size limit) leaves the previous file. */
static void failed_saves(const struct k3_seq *saved)
{
    size_t len;
    uint8_t *good = read_file(path, &len);
    REQUIRE(good, "reading %s", path);
    struct k3_seq other;
    struct k3_err e;
    REQUIRE(k3_seq_init(&other, &cfg, CTX, &e) == 0, "%s", e.msg);
    other.pos = POS + 2;
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit was;
    getrlimit(RLIMIT_FSIZE, &was);
    size_t limits[] = {0, 1, 80, 100, 4096, len - 8, len + 8, k3_seq_file_bytes(&cfg, POS + 2) - 1};
    for (size_t i = 0; i < sizeof limits / sizeof *limits; i++) {
        struct k3_seq_writer w;
        REQUIRE(k3_seq_writer_begin(&w, path, &e) == 0, "%s", e.msg);
        struct rlimit lim = {.rlim_cur = limits[i], .rlim_max = was.rlim_max};
        REQUIRE(setrlimit(RLIMIT_FSIZE, &lim) == 0, "setrlimit");
        int rc = k3_seq_writer_save(&w, &cfg, &model, &other, ids, logits, &e);
        setrlimit(RLIMIT_FSIZE, &was);
        CHECK(rc == -1 && strstr(e.msg, w.tmp) && strstr(e.msg, "File too large"),
              "limit %zu: save gave %d \"%s\"", limits[i], rc, e.msg);
        k3_seq_writer_end(&w, rc != 0, &e);
        CHECK(access(w.tmp, F_OK) != 0, "limit %zu: %s left behind", limits[i], w.tmp);
        size_t now_len;
        uint8_t *now = read_file(path, &now_len);
        CHECK(now && now_len == len && !memcmp(now, good, len), "limit %zu: %s changed",
              limits[i], path);
        free(now);
    }
    /* Begun and ended without a save: nothing changes, nothing is left. */
    struct k3_seq_writer w;
    REQUIRE(k3_seq_writer_begin(&w, path, &e) == 0, "%s", e.msg);
    CHECK(k3_seq_writer_end(&w, false, &e) == 0 && access(w.tmp, F_OK) != 0, "no save: %s",
          w.tmp);
    /* A folder that is not there: refused at begin, naming the file. */
    char nowhere[K3_PATH_MAX];
    snprintf(nowhere, sizeof nowhere, "%s/no-such-folder/cache", dir);
    CHECK(k3_seq_writer_begin(&w, nowhere, &e) == -1 && strstr(e.msg, nowhere) == e.msg &&
              strstr(e.msg, "No such file or directory"),
          "missing folder: \"%s\"", e.msg);
    k3_seq_writer_end(&w, true, &e);
    (void)saved;
    k3_seq_free(&other);
    free(good);
}

int main(void)
{
    struct k3_err e;
    REQUIRE(k3_config_named(&cfg, "k3-tiny", &e) == 0, "%s", e.msg);
    snprintf(dir, sizeof dir, "%s/seq-file", test_tmp());
    REQUIRE(k3_mkdir_parents(dir, &e) == 0, "%s", e.msg);
    snprintf(path, sizeof path, "%s/state", dir);
    unlink(path);
    logits = malloc(sizeof(float) * (size_t)cfg.vocab);
    got_logits = malloc(sizeof(float) * (size_t)cfg.vocab);
    REQUIRE(logits && got_logits, "out of memory");
    struct k3_rng r;
    k3_rng_seed(&r, 3);
    fill(logits, (size_t)cfg.vocab, &r);
    for (int i = 0; i < CTX; i++)
        ids[i] = (int32_t)(k3_rng_next(&r) % (uint64_t)cfg.vocab);

    struct k3_seq q, none;
    enum k3_seq_file_found found;
    REQUIRE(k3_seq_init(&none, &cfg, CTX, &e) == 0, "%s", e.msg);
    CHECK(load(&model, CTX, &found, &none, &e) == 0 && found == K3_SEQ_FILE_NONE,
          "no file: %s, found %d", e.msg, (int)found);
    k3_seq_free(&none);

    random_seq(&q);
    save(&q, &model);
    round_trip(&q);
    models(&q);
    damage();
    failed_saves(&q);
    k3_seq_free(&q);
    free(logits);
    free(got_logits);
    k3_config_free(&cfg);
    return check_result();
}
