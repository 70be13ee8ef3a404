/* Share packs (pack --ranks 2, pack_format.h): rank 1's pack opens as rank 1 of 2 and
 * holds the trunk and exactly the odd experts' records, byte-equal to a whole pack's,
 * under the same model hash; opened as rank 0 of 2, as 1 of 3 or by one process it is
 * refused in one line naming its manifest and both shares; a whole pack opens as any
 * share; the stream refuses to read a record the pack does not hold (never garbage) and
 * does not prefetch one; a manifest whose share disagrees with its object table, or
 * names a rank outside its ranks, is refused. */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <xxhash.h>

#include "engine/model/model.h"
#include "engine/pack/model_open.h"
#include "engine/pack/pack.h"
#include "engine/pack/packed.h"
#include "engine/stream/stream.h"
#include "tests/util.h"

#define LAYER 1 /* k3-tiny's first MoE layer */

static const struct k3_share RANK1 = {.rank = 1, .ranks = 2};

/* Packs the tiny model's share onto n fresh folders named after tag. */
static void pack(const char *tag, struct k3_share share, int n, char dirs[][4200],
                 const char **drives)
{
    for (int d = 0; d < n; d++) {
        snprintf(dirs[d], sizeof dirs[d], "%s/pack-share-%s-%d", test_tmp(), tag, d);
        mkdir(dirs[d], 0755);
        drives[d] = dirs[d];
    }
    struct k3_pack_opts po = {.checkpoint = tiny_model(), .drives = drives, .n_drives = n,
                              .replicas = 1, .share = share};
    struct k3_err e;
    REQUIRE(k3_pack(&po, &e) == 0, "pack %s: %s", tag, e.msg);
}

/* Opening as `as` is refused with a message holding every needle. */
static void refused(const char *const *drives, int n, struct k3_share as, const char *what,
                    const char *needle1, const char *needle2)
{
    struct k3_packed *p = NULL;
    struct k3_err e = {{0}};
    int rc = k3_packed_open(&p, drives, n, as, &e);
    CHECK(rc == -1 && !p && strstr(e.msg, needle1) && strstr(e.msg, needle2) &&
              !strchr(e.msg, '\n'),
          "%s: rc %d, \"%s\"; want \"%s\" and \"%s\"", what, rc, e.msg, needle1, needle2);
    k3_packed_close(p);
}

/* Rank 1's pack holds the trunk and the odd experts, each byte-equal to the whole
 * pack's, the even ones refused by name. */
static void holds_its_share(const char *const *share, const char *const *whole)
{
    struct k3_packed *s, *w;
    struct k3_err e;
    REQUIRE(k3_packed_open(&s, share, 2, RANK1, &e) == 0, "open as its share: %s", e.msg);
    REQUIRE(k3_packed_open(&w, whole, 1, (struct k3_share){0}, &e) == 0, "whole: %s", e.msg);
    CHECK(s->share.rank == 1 && s->share.ranks == 2, "share %d of %d", s->share.rank,
          s->share.ranks);
    CHECK(s->header.model_xxh64 == w->header.model_xxh64, "the share pack names another model");
    CHECK(s->header.n_objects == w->header.n_objects, "%llu objects, the whole pack %llu",
          (unsigned long long)s->header.n_objects, (unsigned long long)w->header.n_objects);
    int held = 0, absent = 0;
    for (uint64_t o = 0; o < s->header.n_objects; o++) {
        const struct k3_pack_object *x = &s->objects[o];
        bool want = o < s->header.n_trunk_objects || x->expert % 2 == 1;
        CHECK(want == (x->n_pieces > 0) && want == !k3_packed_holds(s, o, &e),
              "object %llu (expert %d): %u pieces", (unsigned long long)o, x->expert, x->n_pieces);
        CHECK(x->xxh3 == w->objects[o].xxh3 && x->bytes == w->objects[o].bytes,
              "object %llu: another checksum or size than the whole pack's", (unsigned long long)o);
        if (!want) {
            absent++;
            CHECK(strstr(e.msg, "is not in this pack: it holds rank 1 of 2's experts"), "%s", e.msg);
            continue;
        }
        held++;
        uint64_t cap = k3_packed_buffer_bytes(w, o);
        uint8_t *a = aligned_alloc(K3_PACK_ALIGN, cap), *b = aligned_alloc(K3_PACK_ALIGN, cap);
        REQUIRE(k3_packed_buffer_bytes(s, o) == cap, "object %llu: buffer size differs",
                (unsigned long long)o);
        REQUIRE(k3_packed_read_prefix(s, o, x->bytes, a, &e) == 0, "%s", e.msg);
        REQUIRE(k3_packed_read_prefix(w, o, x->bytes, b, &e) == 0, "%s", e.msg);
        CHECK(!memcmp(a, b, x->bytes), "object %llu: bytes differ from the whole pack's",
              (unsigned long long)o);
        free(a);
        free(b);
    }
    CHECK(absent > 0 && held > absent, "%d objects held, %d absent", held, absent);
    k3_packed_close(s);
    k3_packed_close(w);
}

/* The stream asked for an even expert says so; asked to prefetch one, reads nothing. */
static void stream_refuses_absent(const char *const *share)
{
    struct k3_model m;
    struct k3_stream *s;
    struct k3_err e;
    REQUIRE(k3_model_open_packed(&m, share, 2, RANK1, &e) == 0, "%s", e.msg);
    struct k3_stream_opts so = {.ram = K3_RAM_TRUNK, .ctx = 8, .threads = omp_get_max_threads(),
                                .prefetch_k = 8};
    REQUIRE(k3_stream_open(&s, &m, &so, NULL, 0, &e) == 0, "%s", e.msg);
    struct k3_expert_store *st = k3_stream_experts(s);
    uint64_t before = k3_stream_stats(s).records_read;
    const int even[2] = {2, 4}, odd[2] = {1, 3};
    CHECK(st->ops->prefetch(st, LAYER, even, 2, &e) == 0, "prefetch: %s", e.msg);
    CHECK(k3_stream_stats(s).records_read == before, "prefetching another rank's experts read "
          "%llu records", (unsigned long long)(k3_stream_stats(s).records_read - before));
    int rc = st->ops->begin(st, LAYER, even, 2, &e);
    CHECK(rc == -1 && strstr(e.msg, "layer 1 expert 2 is not in this pack"), "begin(even): %d %s",
          rc, rc ? e.msg : "");
    REQUIRE(st->ops->begin(st, LAYER, odd, 2, &e) == 0, "begin(odd): %s", e.msg);
    for (int i = 0; i < 2; i++) {
        struct k3_landed got;
        CHECK(st->ops->next(st, true, &got, &e) == 0, "next: %s", e.msg);
    }
    k3_stream_close(s);
    k3_model_close(&m);
}

/* The manifest of drive with its share section rewritten to {rank, ranks} and its
 * checksums recomputed, checked: the result's message, or "" when it passes. */
static const char *check_rewritten(const char *drive, uint32_t rank, uint32_t ranks,
                                   struct k3_err *e)
{
    char path[4300];
    snprintf(path, sizeof path, "%s/%s", drive, K3_PACK_MANIFEST_FILE);
    size_t len;
    uint8_t *m = read_file(path, &len);
    REQUIRE(m, "reading %s", path);
    struct k3_pack_header h;
    memcpy(&h, m, sizeof h);
    XXH64_state_t *st = XXH64_createState();
    XXH64_reset(st, 0);
    for (uint32_t i = 0; i < h.n_sections; i++) {
        if (h.sections[i].kind == K3_SEC_SHARE)
            memcpy(m + h.sections[i].offset, &(struct k3_pack_share){rank, ranks},
                   sizeof(struct k3_pack_share));
        XXH64_update(st, m + h.sections[i].offset, h.sections[i].bytes);
    }
    h.sections_xxh64 = XXH64_digest(st);
    h.manifest_xxh64 = 0;
    memcpy(m, &h, sizeof h);
    h.manifest_xxh64 = XXH64(m, len, 0);
    memcpy(m, &h, sizeof h);
    XXH64_freeState(st);
    e->msg[0] = 0;
    k3_pack_manifest_check(m, len, path, e);
    free(m);
    return e->msg;
}

static void manifest_checks(const char *drive)
{
    struct k3_err e;
    CHECK(!*check_rewritten(drive, 1, 2, &e), "the unchanged share fails: %s", e.msg);
    CHECK(strstr(check_rewritten(drive, 0, 2, &e), "has no pieces, yet the pack's share (rank 0 "
                                                   "of 2) holds it"), "rank 0's share: %s", e.msg);
    CHECK(strstr(check_rewritten(drive, 1, 3, &e), "is outside the pack's share (rank 1 of 3) but "
                                                   "has pieces"), "rank 1 of 3: %s", e.msg);
    CHECK(strstr(check_rewritten(drive, 2, 2, &e), "share section names rank 2 of 2"),
          "rank 2 of 2: %s", e.msg);
    CHECK(strstr(check_rewritten(drive, 0, 1, &e), "share section names rank 0 of 1"),
          "rank 0 of 1: %s", e.msg);
}

int main(void)
{
    char share_dirs[2][4200], whole_dirs[1][4200];
    const char *share[2], *whole[1];
    pack("rank1", RANK1, 2, share_dirs, share);
    pack("whole", (struct k3_share){0}, 1, whole_dirs, whole);

    holds_its_share(share, whole);
    char manifest[4300];
    snprintf(manifest, sizeof manifest, "%s/%s", share[0], K3_PACK_MANIFEST_FILE);
    refused(share, 2, (struct k3_share){.rank = 0, .ranks = 2}, "as rank 0 of 2", manifest,
            "holds rank 1 of 2's experts; this process is rank 0 of 2");
    refused(share, 2, (struct k3_share){.rank = 1, .ranks = 3}, "as rank 1 of 3", "holds rank 1 of 2's experts",
            "this process is rank 1 of 3");
    refused(share, 2, (struct k3_share){0}, "by one process", "holds rank 1 of 2's experts",
            "mpirun -np 2");
    for (int r = 0; r < 3; r++) {
        struct k3_packed *p;
        struct k3_err e;
        CHECK(k3_packed_open(&p, whole, 1, (struct k3_share){.rank = r, .ranks = 3}, &e) == 0,
              "a whole pack refused as rank %d of 3: %s", r, e.msg);
        k3_packed_close(p);
    }
    stream_refuses_absent(share);
    manifest_checks(share[0]);
    return check_result();
}
