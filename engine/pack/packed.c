#include "engine/pack/packed.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "engine/base/files.h"

/* XXH64 of a manifest as if its manifest_xxh64 field were zero. */
static uint64_t manifest_hash(const uint8_t *m, uint64_t len)
{
    struct k3_pack_header h;
    memcpy(&h, m, sizeof h);
    h.manifest_xxh64 = 0;
    XXH64_state_t *st = XXH64_createState();
    XXH64_reset(st, 0);
    XXH64_update(st, &h, sizeof h);
    XXH64_update(st, m + sizeof h, len - sizeof h);
    uint64_t v = XXH64_digest(st);
    XXH64_freeState(st);
    return v;
}

static const struct k3_pack_section *section(const struct k3_pack_header *h, uint32_t kind)
{
    for (uint32_t i = 0; i < h->n_sections && i < K3_PACK_MAX_SECTIONS; i++)
        if (h->sections[i].kind == kind)
            return &h->sections[i];
    return NULL;
}

/* Section s holds exactly count entries of size bytes (by division: count * size could
 * wrap around for a count from a damaged header). */
static bool holds(const struct k3_pack_section *s, uint64_t count, size_t size)
{
    return s->bytes % size == 0 && s->bytes / size == count;
}

/* The share K3_SEC_SHARE names (sec NULL: the whole model), as it stands. */
static struct k3_pack_share share_section(const uint8_t *m, const struct k3_pack_section *sec)
{
    struct k3_pack_share ps = {.rank = 0, .ranks = 1};
    if (sec)
        memcpy(&ps, m + sec->offset, sizeof ps);
    return ps;
}

/* The share a manifest's K3_SEC_SHARE names (whole without one); -1 when it is not one
 * struct naming a rank of 2..K3_MAX_RANKS. */
static int manifest_share(const uint8_t *m, const struct k3_pack_header *h, struct k3_share *share,
                          const char *file, struct k3_err *err)
{
    const struct k3_pack_section *sec = section(h, K3_SEC_SHARE);
    *share = (struct k3_share){.rank = 0, .ranks = 1};
    if (sec && sec->bytes != sizeof(struct k3_pack_share))
        return k3_errf(err, "%s: share section is %llu bytes, want %zu", file,
                       (unsigned long long)sec->bytes, sizeof(struct k3_pack_share));
    struct k3_pack_share ps = share_section(m, sec);
    if (sec && (ps.ranks < 2 || ps.ranks > K3_MAX_RANKS || ps.rank >= ps.ranks))
        return k3_errf(err, "%s: share section names rank %u of %u (want rank < ranks, 2 <= "
                       "ranks <= %d)", file, ps.rank, ps.ranks, K3_MAX_RANKS);
    *share = (struct k3_share){.rank = (int)ps.rank, .ranks = (int)ps.ranks};
    return 0;
}

/* Every object's piece range, and each piece's size, drive and place; in a share pack,
 * pieces exactly for the records of its share (and every trunk segment). */
static int check_objects(const struct k3_pack_header *h, const struct k3_pack_object *objects,
                         const struct k3_pack_piece *pieces, struct k3_share share,
                         const char *file, struct k3_err *err)
{
    for (uint64_t o = 0; o < h->n_objects; o++) {
        const struct k3_pack_object *x = &objects[o];
        if (o >= h->n_trunk_objects && !k3_share_owns(share, x->expert)) {
            if (x->n_pieces || x->piece_bytes || x->first_piece > h->n_pieces)
                return k3_errf(err, "%s: object %llu (expert %d) is outside the pack's share "
                               "(rank %d of %d) but has pieces", file, (unsigned long long)o,
                               x->expert, share.rank, share.ranks);
            continue;
        }
        if (!x->n_pieces && o >= h->n_trunk_objects && !k3_share_whole(share))
            return k3_errf(err, "%s: object %llu (expert %d) has no pieces, yet the pack's share "
                           "(rank %d of %d) holds it", file, (unsigned long long)o, x->expert,
                           share.rank, share.ranks);
        if (!x->piece_bytes || x->piece_bytes % K3_PACK_ALIGN || !x->n_pieces ||
            x->first_piece > h->n_pieces || x->n_pieces > h->n_pieces - x->first_piece ||
            (x->bytes + x->piece_bytes - 1) / x->piece_bytes != x->n_pieces)
            return k3_errf(err, "%s: object %llu: bad piece range", file, (unsigned long long)o);
        uint64_t sum = 0;
        for (uint32_t j = 0; j < x->n_pieces; j++) {
            const struct k3_pack_piece *p = &pieces[x->first_piece + j];
            uint32_t want = j + 1 < x->n_pieces ? x->piece_bytes
                                                : (uint32_t)(x->bytes - sum);
            if (p->bytes != want || p->drive >= h->drive_count || p->offset % K3_PACK_ALIGN ||
                (p->drive == h->drive_index &&
                 p->offset + k3_pack_round_up(p->bytes, K3_PACK_ALIGN) > h->data_bytes))
                return k3_errf(err, "%s: object %llu piece %u: bad size, drive or offset", file,
                               (unsigned long long)o, j);
            sum += p->bytes;
        }
    }
    return 0;
}

/* The replica table, when there is one: a drive and place for every piece. */
static int check_replicas(const uint8_t *m, const struct k3_pack_header *h,
                          const struct k3_pack_piece *pieces, const char *file, struct k3_err *err)
{
    const struct k3_pack_section *rep = section(h, K3_SEC_REPLICAS);
    if (!rep)
        return 0;
    if (!holds(rep, h->n_pieces, sizeof(struct k3_pack_replica)))
        return k3_errf(err, "%s: replica table size disagrees with the piece count", file);
    for (uint64_t i = 0; i < h->n_pieces; i++) {
        const struct k3_pack_replica *r = (const void *)(m + rep->offset + i * sizeof *r);
        if (r->drive >= h->drive_count || r->offset % K3_PACK_ALIGN ||
            (r->drive == h->drive_index &&
             r->offset + k3_pack_round_up(pieces[i].bytes, K3_PACK_ALIGN) > h->data_bytes))
            return k3_errf(err, "%s: replica of piece %llu: bad drive or offset", file,
                           (unsigned long long)i);
    }
    return 0;
}

/* Every tensor inside its trunk segment, with a name. */
static int check_tensors(const struct k3_pack_header *h, const struct k3_pack_object *objects,
                         const struct k3_pack_tensor *tensors, uint64_t names_bytes,
                         const char *file, struct k3_err *err)
{
    for (uint64_t i = 0; i < h->n_tensors; i++) {
        const struct k3_pack_tensor *t = &tensors[i];
        if (t->object >= h->n_trunk_objects || t->offset > objects[t->object].bytes ||
            t->bytes > objects[t->object].bytes - t->offset || t->name_offset >= names_bytes ||
            t->ndim > 3)
            return k3_errf(err, "%s: tensor %llu: out of bounds", file, (unsigned long long)i);
    }
    return 0;
}

static int check_tables(const uint8_t *m, const struct k3_pack_header *h, const char *file,
                        struct k3_err *err)
{
    const struct k3_pack_section *obj = section(h, K3_SEC_OBJECTS),
                                 *pcs = section(h, K3_SEC_PIECES),
                                 *ten = section(h, K3_SEC_TENSORS), *nam = section(h, K3_SEC_NAMES);
    if (!obj || !pcs || !ten || !nam || !section(h, K3_SEC_CONFIG))
        return k3_errf(err, "%s: a required section is missing", file);
    if (!holds(obj, h->n_objects, sizeof(struct k3_pack_object)) ||
        !holds(pcs, h->n_pieces, sizeof(struct k3_pack_piece)) ||
        !holds(ten, h->n_tensors, sizeof(struct k3_pack_tensor)) ||
        h->n_trunk_objects > h->n_objects || (nam->bytes && m[nam->offset + nam->bytes - 1]))
        return k3_errf(err, "%s: table sizes disagree with the header counts", file);
    const struct k3_pack_object *objects = (const void *)(m + obj->offset);
    const struct k3_pack_piece *pieces = (const void *)(m + pcs->offset);
    const struct k3_pack_tensor *tensors = (const void *)(m + ten->offset);
    struct k3_share share;
    if (manifest_share(m, h, &share, file, err) ||
        check_objects(h, objects, pieces, share, file, err) ||
        check_replicas(m, h, pieces, file, err))
        return -1;
    return check_tensors(h, objects, tensors, nam->bytes, file, err);
}

int k3_pack_manifest_check(const uint8_t *m, uint64_t len, const char *file, struct k3_err *err)
{
    struct k3_pack_header h;
    if (len < sizeof h)
        return k3_errf(err, "%s: %llu bytes, too short for a manifest", file,
                       (unsigned long long)len);
    memcpy(&h, m, sizeof h);
    if (memcmp(h.magic, K3_PACK_MAGIC, sizeof h.magic))
        return k3_errf(err, "%s: not a k3-uring manifest", file);
    if (h.version != K3_PACK_VERSION && h.version != K3_PACK_VERSION_Q8_0)
        return k3_errf(err, "%s: format version %u; this build reads versions %u and %u (pack "
                       "again)", file, h.version, K3_PACK_VERSION, K3_PACK_VERSION_Q8_0);
    if (h.header_bytes != sizeof h || h.manifest_bytes != len)
        return k3_errf(err, "%s: manifest is %llu bytes, its header says %llu (truncated?)", file,
                       (unsigned long long)len, (unsigned long long)h.manifest_bytes);
    if (manifest_hash(m, len) != h.manifest_xxh64)
        return k3_errf(err, "%s: manifest checksum mismatch (damaged)", file);
    if (!h.drive_count || h.drive_index >= h.drive_count || h.n_sections > K3_PACK_MAX_SECTIONS)
        return k3_errf(err, "%s: bad drive index %u of %u", file, h.drive_index, h.drive_count);
    XXH64_state_t *st = XXH64_createState();
    XXH64_reset(st, 0);
    for (uint32_t i = 0; i < h.n_sections; i++) {
        const struct k3_pack_section *s = &h.sections[i];
        if (s->offset < sizeof h || s->offset > len || s->bytes > len - s->offset ||
            s->offset % 8) {
            XXH64_freeState(st);
            return k3_errf(err, "%s: section %u out of bounds", file, i);
        }
        XXH64_update(st, m + s->offset, s->bytes);
    }
    uint64_t sections = XXH64_digest(st);
    XXH64_freeState(st);
    if (sections != h.sections_xxh64)
        return k3_errf(err, "%s: section checksum mismatch (damaged)", file);
    return check_tables(m, &h, file, err);
}

static int read_manifest(const char *drive, uint8_t **out, uint64_t *len, struct k3_err *err)
{
    char path[K3_PATH_MAX];
    if (k3_path_join(path, sizeof path, drive, K3_PACK_MANIFEST_FILE, err))
        return -1;
    char *text;
    size_t n;
    if (k3_read_small_file(path, &text, &n, err)) {
        if (strstr(err->msg, "No such file"))
            k3_errf(err, "drive %s: no %s (not a packed drive, or its pack did not finish)",
                    drive, K3_PACK_MANIFEST_FILE);
        return -1;
    }
    *out = (uint8_t *)text;
    *len = n;
    return k3_pack_manifest_check(*out, n, path, err);
}

static void hex_id(char *buf, const uint8_t id[16])
{
    for (int i = 0; i < 8; i++)
        sprintf(buf + 2 * i, "%02x", id[i]);
}

/* The drives given are not the pack's count: say which indices are missing or extra. */
static int count_mismatch(const struct k3_pack_header *headers, const char *const *paths, int n,
                          struct k3_err *err)
{
    uint32_t count = headers[0].drive_count;
    char missing[256] = "";
    size_t at = 0;
    for (uint32_t d = 0; d < count && at + 16 < sizeof missing; d++) {
        int seen = 0;
        for (int i = 0; i < n; i++)
            seen |= headers[i].drive_index == d;
        if (!seen)
            at += (size_t)snprintf(missing + at, sizeof missing - at, "%s%u", at ? ", " : "", d);
    }
    if (at)
        return k3_errf(err, "drive %s: the pack has %u drives, %d given; missing drive %s", paths[0],
                       count, n, missing);
    return k3_errf(err, "drive %s: the pack has %u drives, %d given", paths[0], count, n);
}

/* Reads and checks every drive's manifest, keeping its header; keeps drive 0's bytes
 * (every drive holds the same tables) and drops the others' at once, so opening N drives
 * does not hold N manifests. */
static int read_manifests(const char *const *paths, int n, struct k3_pack_header *headers,
                          uint8_t **manifest0, struct k3_err *err)
{
    for (int i = 0; i < n; i++) {
        uint8_t *m = NULL;
        uint64_t len;
        if (read_manifest(paths[i], &m, &len, err)) {
            free(m);
            return -1;
        }
        memcpy(&headers[i], m, sizeof headers[i]);
        if (headers[i].drive_index == 0 && !*manifest0)
            *manifest0 = m;
        else
            free(m);
    }
    return 0;
}

/* The drives must be exactly one pack's: same id, every index once, the count it says. */
static int check_one_pack(const struct k3_pack_header *headers, const char *const *paths, int n,
                          struct k3_err *err)
{
    const struct k3_pack_header *h0 = &headers[0];
    for (int i = 0; i < n; i++) {
        const struct k3_pack_header *h = &headers[i];
        if (memcmp(h->pack_id, h0->pack_id, sizeof h->pack_id)) {
            char a[20], b[20];
            hex_id(a, h->pack_id);
            hex_id(b, h0->pack_id);
            return h->model_xxh64 == h0->model_xxh64
                       ? k3_errf(err, "drive %s: from another pack of this model (pack %s, drive "
                                 "%s is pack %s); pack all drives together", paths[i], a, paths[0], b)
                       : k3_errf(err, "drive %s: holds another model than drive %s", paths[i],
                                 paths[0]);
        }
        if ((int)h->drive_count != n)
            return count_mismatch(headers, paths, n, err);
        if (h->sections_xxh64 != h0->sections_xxh64)
            return k3_errf(err, "drive %s: manifest tables differ from drive %s", paths[i], paths[0]);
        for (int j = 0; j < i; j++)
            if (headers[j].drive_index == h->drive_index)
                return k3_errf(err, "drives %s and %s: both are drive %u of the pack", paths[j],
                               paths[i], h->drive_index);
    }
    return 0;
}

/* Opens drive i's data file into its slot by drive index; it must be as long as its
 * manifest says. */
static int open_data_file(struct k3_packed *p, const struct k3_pack_header *h, const char *dir,
                          struct k3_err *err)
{
    struct k3_pack_drive *d = &p->drives[h->drive_index];
    char path[K3_PATH_MAX];
    if (!(d->path = strdup(dir)))
        return k3_errf(err, "out of memory");
    if (k3_path_join(path, sizeof path, dir, K3_PACK_DATA_FILE, err))
        return -1;
    int e = k3io_open(&d->data, path, O_RDONLY, true);
    if (e)
        return k3_errf(err, "drive %s: %s: %s", dir, path, strerror(-e));
    if (d->data.size < h->data_bytes)
        return k3_errf(err, "drive %s: %s is %llu bytes, the manifest says %llu (truncated)", dir,
                       path, (unsigned long long)d->data.size, (unsigned long long)h->data_bytes);
    return 0;
}

/* Points the tables and the checkpoint files at drive 0's manifest (checked already). */
static void map_sections(struct k3_packed *p)
{
    const uint8_t *m = p->manifest;
    const struct k3_pack_header *h = &p->header;
    p->objects = (const void *)(m + section(h, K3_SEC_OBJECTS)->offset);
    p->pieces = (const void *)(m + section(h, K3_SEC_PIECES)->offset);
    p->tensors = (const void *)(m + section(h, K3_SEC_TENSORS)->offset);
    p->names = (const char *)m + section(h, K3_SEC_NAMES)->offset;
    p->names_bytes = section(h, K3_SEC_NAMES)->bytes;
    p->config = (const char *)m + section(h, K3_SEC_CONFIG)->offset;
    p->config_len = section(h, K3_SEC_CONFIG)->bytes;
    const struct k3_pack_section *rep = section(h, K3_SEC_REPLICAS);
    p->replicas = rep ? (const void *)(m + rep->offset) : NULL;
    struct k3_pack_share ps = share_section(m, section(h, K3_SEC_SHARE)); /* checked */
    p->share = (struct k3_share){.rank = (int)ps.rank, .ranks = (int)ps.ranks};
    const struct k3_pack_section *tk = section(h, K3_SEC_TIKTOKEN), *tc = section(h, K3_SEC_TOKCONFIG);
    if (tk && tc) {
        p->tiktoken = (const char *)m + tk->offset;
        p->tiktoken_len = tk->bytes;
        p->tokconfig = (const char *)m + tc->offset;
        p->tokconfig_len = tc->bytes;
    }
}

/* A share pack opens only as its own share; a whole pack as any (a rank reads its share
 * of it). */
static int check_share(const struct k3_packed *p, struct k3_share want, struct k3_err *err)
{
    struct k3_share has = p->share;
    if (k3_share_whole(has) || (has.rank == want.rank && has.ranks == want.ranks))
        return 0;
    char path[K3_PATH_MAX];
    if (k3_path_join(path, sizeof path, p->drives[0].path, K3_PACK_MANIFEST_FILE, err))
        return -1;
    if (k3_share_whole(want))
        return k3_errf(err, "%s holds rank %d of %d's experts; this process runs the whole "
                       "model (run the %d ranks with mpirun -np %d, each on its own drives)",
                       path, has.rank, has.ranks, has.ranks, has.ranks);
    return k3_errf(err, "%s holds rank %d of %d's experts; this process is rank %d of %d", path,
                   has.rank, has.ranks, want.rank, want.ranks);
}

/* The pack, its drives' headers in paths order in *headers ([n], the caller frees). */
static int open_drives(struct k3_packed *p, const char *const *paths, int n,
                       struct k3_pack_header *headers, struct k3_err *err)
{
    if (read_manifests(paths, n, headers, &p->manifest, err) ||
        check_one_pack(headers, paths, n, err))
        return -1;
    for (int i = 0; i < n; i++)
        if (open_data_file(p, &headers[i], paths[i], err))
            return -1;
    for (int i = 0; i < n; i++)
        if (headers[i].drive_index == 0)
            p->header = headers[i];
    map_sections(p);
    return 0;
}

int k3_packed_open(struct k3_packed **out, const char *const *paths, int n, struct k3_share share,
                   struct k3_err *err)
{
    *out = NULL;
    if (n <= 0)
        return k3_errf(err, "no drives given");
    struct k3_packed *p = calloc(1, sizeof *p);
    struct k3_pack_header *headers = calloc((size_t)n, sizeof *headers);
    struct k3_pack_drive *drives = calloc((size_t)n, sizeof *drives);
    if (!p || !headers || !drives) {
        free(p);
        free(headers);
        free(drives);
        return k3_errf(err, "out of memory opening %d drives", n);
    }
    p->n_drives = n;
    p->drives = drives;
    for (int i = 0; i < n; i++)
        p->drives[i].data.fd = -1;
    int rc = open_drives(p, paths, n, headers, err) || check_share(p, share, err) ? -1 : 0;
    free(headers);
    if (rc) {
        k3_packed_close(p);
        return rc;
    }
    *out = p;
    return 0;
}

void k3_packed_close(struct k3_packed *p)
{
    if (!p)
        return;
    for (int i = 0; p->drives && i < p->n_drives; i++) {
        k3io_close(&p->drives[i].data);
        free(p->drives[i].path);
    }
    free(p->drives);
    free(p->manifest);
    free(p->checkpoint);
    free(p);
}

uint64_t k3_packed_buffer_bytes(const struct k3_packed *p, uint64_t o)
{
    const struct k3_pack_object *x = &p->objects[o];
    if (!x->n_pieces)
        return 0;
    const struct k3_pack_piece *last = &p->pieces[x->first_piece + x->n_pieces - 1];
    return k3_packed_piece_at(p, x, x->n_pieces - 1) + k3_pack_round_up(last->bytes, K3_PACK_ALIGN);
}

uint32_t k3_packed_piece_of(const struct k3_packed *p, const struct k3_pack_object *x, uint64_t at)
{
    if (!p->piece_at)
        return (uint32_t)(at / x->piece_bytes);
    uint32_t lo = 0, hi = x->n_pieces; /* the last piece starting at or before at */
    while (hi - lo > 1) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (k3_packed_piece_at(p, x, mid) <= at)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

int k3_packed_holds(const struct k3_packed *p, uint64_t o, struct k3_err *err)
{
    if (p->objects[o].n_pieces)
        return 0;
    char what[64];
    k3_packed_describe(p, o, what, sizeof what);
    return k3_errf(err, "drive %s: %s is not in this pack: it holds rank %d of %d's experts "
                   "(expert e with e mod %d = %d)", p->drives[0].path, what, p->share.rank,
                   p->share.ranks, p->share.ranks, p->share.rank);
}

void k3_packed_describe(const struct k3_packed *p, uint64_t o, char *buf, size_t len)
{
    const struct k3_pack_object *x = &p->objects[o];
    if (x->expert >= 0)
        snprintf(buf, len, "layer %d expert %d", x->layer, x->expert);
    else if (x->layer < 0)
        snprintf(buf, len, "the embedding");
    else if (o + 1 == p->header.n_trunk_objects)
        snprintf(buf, len, "the output tensors");
    else
        snprintf(buf, len, "the trunk of layer %d", x->layer);
}

int k3_packed_verify_piece(const struct k3_packed *p, uint64_t o, uint64_t piece,
                           const uint8_t *dst, struct k3_err *err)
{
    const struct k3_pack_piece *pc = &p->pieces[piece];
    if (XXH3_64bits(dst, pc->bytes) == pc->xxh3)
        return 0;
    char what[64];
    k3_packed_describe(p, o, what, sizeof what);
    return k3_errf(err, "drive %s: reading %s (%u bytes at offset %llu): checksum mismatch",
                   p->drives[pc->drive].path, what, pc->bytes, (unsigned long long)pc->offset);
}

/* Reads piece k (of object o) into dst from its place, or from its replica; 0 when the
 * bytes are there and check out. */
static int read_piece(const struct k3_packed *p, uint64_t o, uint64_t k, bool replica,
                      uint8_t *dst, struct k3_err *err)
{
    const struct k3_pack_piece *pc = &p->pieces[k];
    uint32_t drive = replica ? p->replicas[k].drive : pc->drive;
    uint64_t offset = replica ? p->replicas[k].offset : pc->offset;
    const struct k3_pack_drive *d = &p->drives[drive];
    size_t len = (size_t)k3_pack_round_up(pc->bytes, K3_PACK_ALIGN);
    ssize_t got = k3io_pread_full(&d->data, dst, len, offset);
    if (got < (ssize_t)pc->bytes) {
        char what[64];
        k3_packed_describe(p, o, what, sizeof what);
        return k3_errf(err, "drive %s: reading %s (%u bytes at offset %llu): %s", d->path, what,
                       pc->bytes, (unsigned long long)offset,
                       got < 0 ? strerror((int)-got) : "short read (truncated data file)");
    }
    return k3_packed_verify_piece(p, o, k, dst, err);
}

int k3_packed_read_prefix(const struct k3_packed *p, uint64_t o, uint64_t bytes, uint8_t *dst,
                          struct k3_err *err)
{
    const struct k3_pack_object *x = &p->objects[o];
    uint32_t pieces = (uint32_t)((bytes + x->piece_bytes - 1) / x->piece_bytes);
    for (uint32_t j = 0; j < x->n_pieces && j < pieces; j++) {
        uint8_t *at = dst + (uint64_t)j * x->piece_bytes;
        uint64_t k = x->first_piece + j;
        if (read_piece(p, o, k, false, at, err) &&
            (!p->replicas || read_piece(p, o, k, true, at, err)))
            return -1;
    }
    return 0;
}
