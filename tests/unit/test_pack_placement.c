/* Placement of expert records on the drives.  Each record is cut into equal pieces, one
 * share per drive, rounded up to 4 KiB; so over any set of records a drive serves at
 * most its fair share plus 4 KiB of rounding per record.  For K3 and k3-bench records
 * (MBs) that is within one piece of the fair share, checked over many random routings
 * on the placement rule; real k3-tiny packs (19.6 KB records, where the rounding is
 * most of a piece) are checked against the rounding bound from their piece tables. */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "engine/model/config.h"
#include "engine/pack/pack.h"
#include "engine/pack/pack_format.h"
#include "engine/pack/packed.h"
#include "engine/base/rng.h"
#include "engine/model/tensors.h"
#include "tests/util.h"

#define ROUTINGS 2000
#define TOP_K 16

/* The rule alone: records of B bytes at object indices base + e over N drives. */
static void check_rule(uint64_t B, uint32_t N, uint64_t chunk, int n_experts, const char *what)
{
    uint64_t piece = k3_pack_record_piece_bytes(B, chunk, N);
    uint32_t m = (uint32_t)((B + piece - 1) / piece);
    CHECK(m % N == 0, "%s: %u pieces per record on %u drives is not a multiple", what, m, N);
    struct k3_rng r;
    k3_rng_seed(&r, N * 1000 + chunk);
    uint64_t worst = 0;
    for (int t = 0; t < ROUTINGS; t++) {
        int ex[TOP_K];
        k3_rng_distinct(&r, n_experts, TOP_K, ex);
        uint64_t load[64] = {0};
        for (int i = 0; i < TOP_K; i++) {
            uint64_t object = 95 + (uint64_t)ex[i]; /* any object index: the rule rotates */
            for (uint32_t j = 0; j < m; j++)
                load[k3_pack_piece_drive(object, j, N)] +=
                    j + 1 < m ? piece : B - (uint64_t)j * piece;
        }
        for (uint32_t d = 0; d < N; d++)
            worst = load[d] > worst ? load[d] : worst;
    }
    uint64_t fair = TOP_K * B / N;
    printf("%s, %u drives: %u pieces of %llu B; worst drive %llu B vs fair %llu B (+%.2f%%)\n",
           what, N, m, (unsigned long long)piece, (unsigned long long)worst,
           (unsigned long long)fair, 100.0 * (double)(worst - fair) / (double)fair);
    CHECK(worst <= fair + piece, "%s, %u drives: a drive serves %llu B, fair %llu + piece %llu",
          what, N, (unsigned long long)worst, (unsigned long long)fair, (unsigned long long)piece);
}

/* A real pack: per-drive bytes from the manifest's piece table. */
static void check_pack(const char *model, int N)
{
    char root[4096], dirs[8][4200];
    const char *drives[8];
    snprintf(root, sizeof root, "%s/placement-%d", test_tmp(), N);
    mkdir(root, 0755);
    for (int d = 0; d < N; d++) {
        snprintf(dirs[d], sizeof dirs[d], "%s/d%d", root, d);
        mkdir(dirs[d], 0755);
        drives[d] = dirs[d];
    }
    struct k3_pack_opts o = {.checkpoint = model, .drives = drives, .n_drives = N};
    struct k3_err e = {{0}};
    REQUIRE(k3_pack(&o, &e) == 0, "pack: %s", e.msg);
    struct k3_packed *p;
    REQUIRE(k3_packed_open(&p, drives, N, (struct k3_share){0}, &e) == 0, "open: %s", e.msg);
    uint64_t first = p->header.n_trunk_objects, E = 64;
    uint64_t layers = (p->header.n_objects - first) / E;
    struct k3_rng r;
    k3_rng_seed(&r, (uint64_t)N);
    for (int t = 0; t < ROUTINGS; t++) {
        uint64_t layer = (uint64_t)t % layers;
        int ex[TOP_K];
        k3_rng_distinct(&r, (int)E, TOP_K, ex);
        uint64_t load[8] = {0}, bytes = 0;
        for (int i = 0; i < TOP_K; i++) {
            const struct k3_pack_object *x = &p->objects[first + layer * E + (uint64_t)ex[i]];
            bytes += x->bytes;
            for (uint32_t j = 0; j < x->n_pieces; j++)
                load[p->pieces[x->first_piece + j].drive] += p->pieces[x->first_piece + j].bytes;
        }
        for (int d = 0; d < N; d++)
            CHECK(load[d] <= bytes / (uint64_t)N + TOP_K * K3_PACK_ALIGN,
                  "tiny on %d drives: drive %d serves %llu of %llu B", N, d,
                  (unsigned long long)load[d], (unsigned long long)bytes);
    }
    k3_packed_close(p);
}

int main(void)
{
    struct k3_config c;
    struct k3_err e;
    struct k3_record_layout rec;
    const char *names[] = {"k3", "k3-bench"};
    for (int i = 0; i < 2; i++) {
        REQUIRE(k3_config_named(&c, names[i], &e) == 0, "%s", e.msg);
        k3_record_layout_init(&rec, &c);
        const uint32_t drive_counts[] = {1, 2, 3, 4, 8, 16};
        for (size_t k = 0; k < sizeof drive_counts / sizeof *drive_counts; k++) {
            uint32_t N = drive_counts[k];
            check_rule(rec.bytes, N, (rec.bytes + N - 1) / N, c.n_experts, names[i]);
            check_rule(rec.bytes, N, 1 << 20, c.n_experts, names[i]);
        }
        k3_config_free(&c);
    }
    const char *model = tiny_model();
    for (int N = 1; N <= 4; N++)
        check_pack(model, N);
    return check_result();
}
