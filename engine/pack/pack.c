#include "engine/pack/pack.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>
#include <xxhash.h>

#include "engine/base/clock.h"
#include "engine/base/files.h"
#include "engine/base/line.h"
#include "engine/kernels/q8_0.h"
#include "engine/model/checkpoint.h"
#include "engine/model/model.h"
#include "engine/pack/pack_format.h"
#include "engine/pack/pack_plan.h"
#include "iouring/file.h"

/* Room for a manifest beyond the data, checked with the free space. */
#define MANIFEST_SLACK (1u << 20)

/* One contiguous run of an object's logical bytes, taken from a checkpoint tensor (its
 * bf16 quantized to Q8_0 when q8). */
struct extent {
    uint64_t at, len;
    const struct k3_ckpt_tensor *t;
    bool q8;
};

struct packer {
    const struct k3_pack_opts *o;
    struct k3_config cfg;
    struct k3_checkpoint *ck;
    struct k3_ckpt_plan plan;
    struct k3_record_layout rec;
    struct k3_pack_plan pp;        /* objects, pieces, replicas, each drive's bytes */
    struct k3_pack_share share;    /* K3_SEC_SHARE of a share pack */
    int n_drives;
    struct k3io_file *files;       /* [n_drives] data files */
    uint8_t *buf;                  /* one piece */
    char *config_text, *tiktoken, *tokconfig;
    size_t config_len, tiktoken_len, tokconfig_len;
    uint64_t total_bytes, done_bytes;
    double start;
};

static void note_plain(void *pk, const char *line)
{
    const struct k3_pack_opts *o = ((const struct packer *)pk)->o;
    o->note(o->ctx, false, line);
}

static void note_warning(void *pk, const char *line)
{
    const struct k3_pack_opts *o = ((const struct packer *)pk)->o;
    o->note(o->ctx, true, line);
}

/* One line to the caller (never printed here). */
__attribute__((format(printf, 3, 4))) static void note(const struct packer *pk, bool warning,
                                                       const char *fmt, ...)
{
    if (!pk->o->note)
        return;
    va_list ap;
    va_start(ap, fmt);
    k3_vline(warning ? note_warning : note_plain, (void *)pk, fmt, ap);
    va_end(ap);
}

static void progress(const struct packer *pk)
{
    if (pk->o->progress)
        pk->o->progress(pk->o->ctx, pk->done_bytes, pk->total_bytes);
}

/* ---- planning ------------------------------------------------------------------- */

/* Bytes of trunk tensor i as the pack stores it. */
static uint64_t tensor_bytes(const struct packer *pk, int i)
{
    const struct k3_st_tensor *t = pk->plan.trunk[i]->t;
    return pk->plan.dtypes[i] == K3_DT_Q8_0 ? k3_dtype_bytes(K3_DT_Q8_0, (int64_t)t->nbytes / 2)
                                             : t->nbytes;
}

/* The extents of object o, in logical order; returns how many (at most cap). */
static int object_extents(const struct packer *pk, uint64_t o, struct extent *ex, int cap)
{
    int n = 0;
    if (o < pk->pp.n_trunk) {
        const struct k3_trunk_layout *t = &pk->plan.layout;
        for (int i = 0; i < pk->plan.n_specs && n < cap; i++)
            if (t->segment[i] == (int)o)
                ex[n++] = (struct extent){t->offset[i], tensor_bytes(pk, i), pk->plan.trunk[i],
                                          pk->plan.dtypes[i] == K3_DT_Q8_0};
        return n;
    }
    const struct k3_pack_object *x = &pk->pp.objects[o];
    const struct k3_expert_loc *loc =
        &pk->plan.experts[(size_t)x->layer * pk->cfg.n_experts + (size_t)x->expert];
    for (int p = 0; p < K3_EXPERT_PARTS; p++)
        ex[n++] = (struct extent){pk->rec.off[p], pk->rec.len[p], loc->part[p], false};
    return n;
}

/* The pack's plan, and the one piece-sized buffer the input streams through. */
static int plan(struct packer *pk, struct k3_err *err)
{
    const struct k3_pack_opts *o = pk->o;
    struct k3_pack_geometry g = {.n_drives = o->n_drives, .chunk = o->chunk,
                                 .whole_records = o->whole_records, .replicas = o->replicas,
                                 .share = o->share};
    if (k3_pack_plan(&pk->pp, &pk->cfg, pk->plan.layout.segment_bytes,
                     pk->plan.layout.n_segments, pk->rec.bytes, &g, err))
        return -1;
    for (uint64_t i = 0; i < pk->pp.n_objects; i++)
        pk->total_bytes += pk->pp.objects[i].bytes;
    uint64_t buf_bytes = pk->pp.trunk_piece > pk->pp.record_piece ? pk->pp.trunk_piece
                                                                    : pk->pp.record_piece;
    pk->buf = k3io_alloc(buf_bytes);
    return pk->buf ? 0 : k3_errf(err, "out of memory");
}

/* ---- the drives ------------------------------------------------------------------ */

/* Everything that can be checked of drive d before writing: a writable folder, given
 * once, with room for its share of the plan. */
static int check_drive(struct packer *pk, int d, struct k3_err *err)
{
    const char *dir = pk->o->drives[d];
    struct stat st;
    if (stat(dir, &st) || !S_ISDIR(st.st_mode))
        return k3_errf(err, "drive %s: %s", dir, errno ? strerror(errno) : "not a folder");
    if (access(dir, W_OK))
        return k3_errf(err, "drive %s: not writable: %s", dir, strerror(errno));
    for (int e = 0; e < d; e++)
        if (!strcmp(pk->o->drives[e], dir))
            return k3_errf(err, "drive %s: given twice", dir);
    struct statvfs vfs;
    if (statvfs(dir, &vfs))
        return k3_errf(err, "drive %s: %s", dir, strerror(errno));
    /* An old data file's space comes back when it is replaced. */
    char path[K3_PATH_MAX];
    uint64_t reusable = 0;
    if (!k3_path_join(path, sizeof path, dir, K3_PACK_DATA_FILE, NULL) && !stat(path, &st))
        reusable = (uint64_t)st.st_blocks * 512;
    uint64_t avail = (uint64_t)vfs.f_bavail * vfs.f_frsize + reusable;
    uint64_t need = pk->pp.data_bytes[d] + MANIFEST_SLACK +
                    pk->pp.n_pieces * sizeof(struct k3_pack_piece);
    /* A filesystem without a size (ramfs reports zero blocks) cannot be checked. */
    if (vfs.f_blocks && avail < need)
        return k3_errf(err, "drive %s: needs %.1f MB, %.1f MB free", dir, need / 1e6,
                       avail / 1e6);
    return 0;
}

/* A share of the routed experts this model can be cut into: every rank owns one or more
 * experts of each layer. */
static int check_share(const struct packer *pk, struct k3_err *err)
{
    struct k3_share sh = pk->o->share;
    if (k3_share_whole(sh))
        return 0;
    if (sh.ranks > K3_MAX_RANKS || sh.rank < 0 || sh.rank >= sh.ranks)
        return k3_errf(err, "rank %d of %d: want 0 <= rank < ranks <= %d", sh.rank, sh.ranks,
                       K3_MAX_RANKS);
    if (sh.ranks > pk->cfg.n_experts)
        return k3_errf(err, "--ranks %d: more ranks than %s's %d experts per layer", sh.ranks,
                       pk->o->checkpoint, pk->cfg.n_experts);
    return 0;
}

static int check_drives(struct packer *pk, struct k3_err *err)
{
    if (pk->o->replicas > 1 && pk->n_drives < 2)
        return k3_errf(err, "--replicas 2 needs at least 2 drives (a copy goes to another drive)");
    if (pk->o->replicas > 1 && !k3_share_whole(pk->o->share))
        return k3_errf(err, "--replicas 2 with --ranks %d: format version 1 has no room for a "
                       "share pack's replica table (pack_format.h)", pk->o->share.ranks);
    for (int d = 0; d < pk->n_drives; d++)
        if (check_drive(pk, d, err))
            return -1;
    return 0;
}

static int sync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_CLOEXEC | O_DIRECTORY);
    if (fd < 0)
        return -errno;
    int rc = fsync(fd) ? -errno : 0;
    close(fd);
    return rc;
}

/* Drive d's data file, created at its full size.  Opened for O_DIRECT to learn whether the
 * drive allows it (the engine reads it that way), then written through the page cache:
 * buffered writes measured faster (bench/pack.sh), and the data is synced before the
 * manifest. */
static int open_data_file(struct packer *pk, int d, struct k3_err *err)
{
    const char *dir = pk->o->drives[d];
    struct k3io_file *f = &pk->files[d];
    char path[K3_PATH_MAX];
    if (k3_path_join(path, sizeof path, dir, K3_PACK_DATA_FILE, err))
        return -1;
    int e = k3io_open(f, path, O_RDWR | O_CREAT | O_TRUNC, true);
    if (e)
        return k3_errf(err, "drive %s: %s: %s", dir, path, strerror(-e));
    if (!f->direct)
        note(pk, true, "drive %s refuses O_DIRECT; the engine will read it through the page "
             "cache", dir);
    else if (fcntl(f->fd, F_SETFL, fcntl(f->fd, F_GETFL) & ~O_DIRECT))
        return k3_errf(err, "drive %s: %s", dir, strerror(errno));
    uint64_t bytes = pk->pp.data_bytes[d];
    if (fallocate(f->fd, 0, 0, (off_t)bytes) && errno != EOPNOTSUPP)
        return k3_errf(err, "drive %s: reserving %.2f GB: %s", dir, bytes / 1e9, strerror(errno));
    if (ftruncate(f->fd, (off_t)bytes))
        return k3_errf(err, "drive %s: %s", dir, strerror(errno));
    return 0;
}

/* Removes any old manifest first (made durable), so that from here until the new
 * manifests land, no drive opens as a model. */
static int open_drives(struct packer *pk, struct k3_err *err)
{
    pk->files = calloc((size_t)pk->n_drives, sizeof *pk->files);
    if (!pk->files)
        return k3_errf(err, "out of memory");
    for (int d = 0; d < pk->n_drives; d++)
        pk->files[d].fd = -1;
    for (int d = 0; d < pk->n_drives; d++) {
        const char *dir = pk->o->drives[d];
        char path[K3_PATH_MAX];
        if (k3_path_join(path, sizeof path, dir, K3_PACK_MANIFEST_FILE, err))
            return -1;
        if (unlink(path) && errno != ENOENT)
            return k3_errf(err, "drive %s: removing the old manifest: %s", dir, strerror(errno));
        int e = sync_dir(dir);
        if (e)
            return k3_errf(err, "drive %s: %s", dir, strerror(-e));
        if (open_data_file(pk, d, err))
            return -1;
    }
    return 0;
}

/* ---- streaming the input ----------------------------------------------------------- */

/* Bytes [at, at+len) of extent e's Q8_0 form into dst: the bf16 blocks covering them
 * read and quantized (in place, into the buffer they were read to). */
static int fill_q8(const struct packer *pk, const struct extent *e, uint64_t at, uint64_t len,
                   uint8_t *dst, struct k3_err *err)
{
    const uint64_t qb = sizeof(struct k3_q8_0_block), bb = 2 * K3_Q8_0_BLOCK;
    uint64_t k0 = at / qb, k1 = (at + len + qb - 1) / qb;
    uint8_t *buf = malloc((size_t)((k1 - k0) * bb));
    if (!buf)
        return k3_errf(err, "out of memory");
    int rc = k3_ckpt_read(pk->ck, e->t, buf, k0 * bb, (k1 - k0) * bb, err);
    if (!rc) {
        k3_q8_0_quantize_bf16((const uint16_t *)buf, (int64_t)(k1 - k0) * K3_Q8_0_BLOCK,
                              (struct k3_q8_0_block *)buf);
        memcpy(dst, buf + (at - k0 * qb), len);
    }
    free(buf);
    return rc;
}

/* Fills dst with logical bytes [at, at+len) of object o; gaps between tensors are zero. */
static int fill(struct packer *pk, uint64_t o, uint64_t at, uint64_t len, uint8_t *dst,
                struct k3_err *err)
{
    struct extent ex[64];
    int n = object_extents(pk, o, ex, 64);
    memset(dst, 0, len);
    for (int i = 0; i < n; i++) {
        uint64_t a = ex[i].at > at ? ex[i].at : at;
        uint64_t b = ex[i].at + ex[i].len < at + len ? ex[i].at + ex[i].len : at + len;
        if (a >= b)
            continue;
        if (ex[i].q8 ? fill_q8(pk, &ex[i], a - ex[i].at, b - a, dst + (a - at), err)
                     : k3_ckpt_read(pk->ck, ex[i].t, dst + (a - at), a - ex[i].at, b - a, err))
            return -1;
    }
    return 0;
}

/* Writes the piece in pk->buf (its checksum taken) to its place and to its replica's. */
static int write_piece(struct packer *pk, uint64_t k, struct k3_err *err)
{
    struct k3_pack_piece *pc = &pk->pp.pieces[k];
    size_t len = (size_t)k3_pack_round_up(pc->bytes, K3_PACK_ALIGN);
    pc->xxh3 = XXH3_64bits(pk->buf, pc->bytes);
    memset(pk->buf + pc->bytes, 0, len - pc->bytes);
    int e = k3io_pwrite_full(&pk->files[pc->drive], pk->buf, len, pc->offset);
    if (e)
        return k3_errf(err, "drive %s: writing %zu bytes at offset %llu: %s",
                       pk->o->drives[pc->drive], len, (unsigned long long)pc->offset, strerror(-e));
    const struct k3_pack_replica *rp = pk->pp.replicas ? &pk->pp.replicas[k] : NULL;
    if (rp && (e = k3io_pwrite_full(&pk->files[rp->drive], pk->buf, len, rp->offset)))
        return k3_errf(err, "drive %s: writing a replica at offset %llu: %s",
                       pk->o->drives[rp->drive], (unsigned long long)rp->offset, strerror(-e));
    return 0;
}

/* A record outside the share: only its checksum, read in record-piece steps (the model's
 * hash covers every record, so every rank's pack names the same model). */
static int hash_absent(struct packer *pk, uint64_t o, XXH3_state_t *st, struct k3_err *err)
{
    struct k3_pack_object *x = &pk->pp.objects[o];
    uint64_t step = pk->pp.record_piece;
    for (uint64_t at = 0; at < x->bytes; at += step) {
        uint64_t len = x->bytes - at < step ? x->bytes - at : step;
        if (fill(pk, o, at, len, pk->buf, err))
            return -1;
        XXH3_64bits_update(st, pk->buf, len);
        pk->done_bytes += len;
        progress(pk);
    }
    x->xxh3 = XXH3_64bits_digest(st);
    return 0;
}

/* Object o, piece by piece, with its checksum over the logical bytes. */
static int write_object(struct packer *pk, uint64_t o, XXH3_state_t *st, struct k3_err *err)
{
    struct k3_pack_object *x = &pk->pp.objects[o];
    XXH3_64bits_reset(st);
    if (!x->n_pieces)
        return hash_absent(pk, o, st, err);
    for (uint32_t j = 0; j < x->n_pieces; j++) {
        uint64_t k = x->first_piece + j;
        uint32_t bytes = pk->pp.pieces[k].bytes;
        if (fill(pk, o, (uint64_t)j * x->piece_bytes, bytes, pk->buf, err))
            return -1;
        XXH3_64bits_update(st, pk->buf, bytes);
        if (write_piece(pk, k, err))
            return -1;
        pk->done_bytes += bytes;
        progress(pk);
    }
    x->xxh3 = XXH3_64bits_digest(st);
    return 0;
}

static int write_objects(struct packer *pk, struct k3_err *err)
{
    XXH3_state_t *st = XXH3_createState();
    if (!st)
        return k3_errf(err, "out of memory");
    int rc = 0;
    for (uint64_t o = 0; !rc && o < pk->pp.n_objects; o++)
        rc = write_object(pk, o, st, err);
    XXH3_freeState(st);
    for (int d = 0; !rc && d < pk->n_drives; d++)
        if (fdatasync(pk->files[d].fd))
            rc = k3_errf(err, "drive %s: sync: %s", pk->o->drives[d], strerror(errno));
    if (!rc) {
        double el = k3_now() - pk->start;
        note(pk, false, "data: %.2f GB in %.1f s (%.0f MB/s)", pk->done_bytes / 1e9, el,
             el > 0 ? pk->done_bytes / 1e6 / el : 0);
    }
    return rc;
}

/* ---- manifests ---------------------------------------------------------------------- */

struct blob {
    uint8_t *data;
    size_t len, cap;
};

/* Appends len bytes; align 8 pads the blob to a multiple of 8 after them. */
static int put(struct blob *b, const void *p, size_t len, size_t align)
{
    size_t need = (b->len + len + align - 1) / align * align;
    if (need > b->cap) {
        size_t cap = b->cap ? b->cap : 1 << 16;
        while (cap < need)
            cap *= 2;
        uint8_t *nd = realloc(b->data, cap);
        if (!nd)
            return -1;
        b->data = nd;
        b->cap = cap;
    }
    if (len)
        memcpy(b->data + b->len, p, len);
    memset(b->data + b->len + len, 0, need - b->len - len);
    b->len = need;
    return 0;
}

/* The tensor table and its names section (names back to back, each with its NUL). */
static int tensor_tables(struct packer *pk, struct blob *tensors, struct blob *names)
{
    for (int i = 0; i < pk->plan.n_specs; i++) {
        const struct k3_st_tensor *t = pk->plan.trunk[i]->t;
        struct k3_pack_tensor pt = {
            .offset = pk->plan.layout.offset[i],
            .bytes = tensor_bytes(pk, i),
            .object = (uint32_t)pk->plan.layout.segment[i],
            .dtype = (uint32_t)pk->plan.dtypes[i],
            .ndim = (uint32_t)t->ndim,
            .name_offset = (uint32_t)names->len,
        };
        for (int d = 0; d < t->ndim && d < 3; d++)
            pt.shape[d] = t->shape[d];
        if (put(names, t->name, strlen(t->name) + 1, 1) || put(tensors, &pt, sizeof pt, 8))
            return -1;
    }
    return 0;
}

/* The hash of the model: its config and every object's checksum. */
static uint64_t model_hash(const struct packer *pk)
{
    XXH64_state_t *st = XXH64_createState();
    XXH64_reset(st, 0);
    XXH64_update(st, pk->config_text, pk->config_len);
    for (uint64_t o = 0; o < pk->pp.n_objects; o++)
        XXH64_update(st, &pk->pp.objects[o].xxh3, sizeof pk->pp.objects[o].xxh3);
    uint64_t h = XXH64_digest(st);
    XXH64_freeState(st);
    return h;
}

struct section_src {
    uint32_t kind;
    const void *p;
    size_t len;
};

/* The manifest's sections in pack_format.h's order (replicas only with 2, the share only
 * in a share pack); returns how many. */
static int sections_of(const struct packer *pk, const struct blob *tensors,
                       const struct blob *names, struct section_src *secs)
{
    const struct k3_pack_plan *pp = &pk->pp;
    int n = 0;
    secs[n++] = (struct section_src){K3_SEC_CONFIG, pk->config_text, pk->config_len};
    secs[n++] = (struct section_src){K3_SEC_TIKTOKEN, pk->tiktoken, pk->tiktoken_len};
    secs[n++] = (struct section_src){K3_SEC_TOKCONFIG, pk->tokconfig, pk->tokconfig_len};
    secs[n++] = (struct section_src){K3_SEC_OBJECTS, pp->objects, pp->n_objects * sizeof *pp->objects};
    secs[n++] = (struct section_src){K3_SEC_PIECES, pp->pieces, pp->n_pieces * sizeof *pp->pieces};
    secs[n++] = (struct section_src){K3_SEC_TENSORS, tensors->data, tensors->len};
    secs[n++] = (struct section_src){K3_SEC_NAMES, names->data, names->len};
    if (pp->replicas)
        secs[n++] = (struct section_src){K3_SEC_REPLICAS, pp->replicas,
                                         pp->n_pieces * sizeof *pp->replicas};
    if (!k3_share_whole(pk->o->share))
        secs[n++] = (struct section_src){K3_SEC_SHARE, &pk->share, sizeof pk->share};
    return n;
}

/* What every drive's header says alike (sections, drive index, sizes and checksums
 * are filled in after). */
static void shared_header(const struct packer *pk, int n_sections, struct k3_pack_header *h)
{
    const struct k3_pack_plan *pp = &pk->pp;
    *h = (struct k3_pack_header){
        .version = pk->o->trunk_type == K3_TRUNK_Q8_0 ? K3_PACK_VERSION_Q8_0 : K3_PACK_VERSION,
        .header_bytes = sizeof *h,
        .drive_count = (uint32_t)pk->n_drives,
        .chunk_bytes = pk->o->whole_records ? 0
                       : pp->n_trunk < pp->n_objects ? pp->record_piece : pp->trunk_piece,
        .n_objects = pp->n_objects,
        .n_pieces = pp->n_pieces,
        .n_tensors = (uint64_t)pk->plan.n_specs,
        .n_trunk_objects = (uint32_t)pp->n_trunk,
        .n_sections = (uint32_t)n_sections,
        .model_xxh64 = model_hash(pk),
    };
    memcpy(h->magic, K3_PACK_MAGIC, sizeof h->magic);
}

/* The manifest body (every section, in order) and the header the drives share;
 * drive_index, data_bytes and manifest_xxh64 are each drive's. */
static int manifest_body(struct packer *pk, struct k3_pack_header *h, struct blob *body,
                         struct k3_err *err)
{
    struct blob tensors = {0}, names = {0};
    struct section_src secs[K3_PACK_MAX_SECTIONS];
    int rc = tensor_tables(pk, &tensors, &names) ? k3_errf(err, "out of memory") : 0;
    int n_secs = sections_of(pk, &tensors, &names, secs);
    shared_header(pk, n_secs, h);
    if (!rc && getrandom(h->pack_id, sizeof h->pack_id, 0) != (ssize_t)sizeof h->pack_id)
        rc = k3_errf(err, "getrandom: %s", strerror(errno));
    XXH64_state_t *st = XXH64_createState();
    XXH64_reset(st, 0);
    for (int i = 0; !rc && i < n_secs; i++) {
        h->sections[i] = (struct k3_pack_section){secs[i].kind, 0, sizeof *h + body->len, secs[i].len};
        XXH64_update(st, secs[i].p, secs[i].len);
        rc = put(body, secs[i].p, secs[i].len, 8) ? k3_errf(err, "out of memory") : 0;
    }
    h->sections_xxh64 = XXH64_digest(st);
    h->manifest_bytes = sizeof *h + body->len;
    XXH64_freeState(st);
    free(tensors.data);
    free(names.data);
    return rc;
}

/* Drive d's manifest: to a temporary name, synced, renamed into place, the folder synced. */
static int write_manifest(struct packer *pk, int d, struct k3_pack_header *h,
                          const struct blob *body, struct k3_err *err)
{
    const char *dir = pk->o->drives[d];
    h->drive_index = (uint32_t)d;
    h->data_bytes = pk->pp.data_bytes[d];
    h->manifest_xxh64 = 0;
    XXH64_state_t *st = XXH64_createState();
    XXH64_reset(st, 0);
    XXH64_update(st, h, sizeof *h);
    XXH64_update(st, body->data, body->len);
    h->manifest_xxh64 = XXH64_digest(st);
    XXH64_freeState(st);
    char tmp[K3_PATH_MAX], final[K3_PATH_MAX];
    if (k3_path_join(tmp, sizeof tmp, dir, K3_PACK_MANIFEST_FILE ".partial", err) ||
        k3_path_join(final, sizeof final, dir, K3_PACK_MANIFEST_FILE, err))
        return -1;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    struct k3io_file f = {.fd = fd};
    int e = fd < 0 ? -errno : k3io_pwrite_full(&f, h, sizeof *h, 0);
    if (!e)
        e = k3io_pwrite_full(&f, body->data, body->len, sizeof *h);
    if (!e && fsync(fd))
        e = -errno;
    if (fd >= 0)
        close(fd);
    if (!e && rename(tmp, final))
        e = -errno;
    if (!e)
        e = sync_dir(dir);
    return e ? k3_errf(err, "drive %s: writing the manifest: %s", dir, strerror(-e)) : 0;
}

static int write_manifests(struct packer *pk, struct k3_err *err)
{
    struct k3_pack_header h;
    struct blob body = {0};
    int rc = manifest_body(pk, &h, &body, err);
    for (int d = 0; !rc && d < pk->n_drives; d++)
        rc = write_manifest(pk, d, &h, &body, err);
    free(body.data);
    return rc;
}

/* ---- the whole job ------------------------------------------------------------------- */

static int read_optional(const char *dir, const char *file, char **text, size_t *len,
                         struct k3_err *err)
{
    char path[K3_PATH_MAX];
    if (k3_path_join(path, sizeof path, dir, file, err))
        return -1;
    if (access(path, F_OK)) {
        *text = NULL;
        *len = 0;
        return 0;
    }
    return k3_read_small_file(path, text, len, err);
}

/* The trunk's tensor bytes as packed, or as shipped. */
static uint64_t trunk_bytes(const struct packer *pk, bool packed)
{
    uint64_t sum = 0;
    for (int i = 0; i < pk->plan.n_specs; i++)
        sum += packed ? tensor_bytes(pk, i) : pk->plan.trunk[i]->t->nbytes;
    return sum;
}

/* The trunk of --trunk-type: with q8_0 the large matrices' dtypes become Q8_0 and the
 * segments are laid out again at their sizes. */
static int trunk_as(struct packer *pk, struct k3_err *err)
{
    struct k3_ckpt_plan *p = &pk->plan;
    if (pk->o->trunk_type == K3_TRUNK_BF16)
        return 0;
    uint64_t *bytes = calloc((size_t)p->n_specs, sizeof *bytes);
    if (!bytes)
        return k3_errf(err, "out of memory");
    for (int i = 0; i < p->n_specs; i++) {
        if (p->dtypes[i] == K3_DT_BF16 && k3_spec_takes_q8_0(&p->specs[i]))
            p->dtypes[i] = K3_DT_Q8_0;
        bytes[i] = tensor_bytes(pk, i);
    }
    k3_trunk_layout_free(&p->layout);
    int rc = k3_trunk_layout_init(&p->layout, &pk->cfg, p->specs, p->n_specs, bytes)
                 ? k3_errf(err, "out of memory") : 0;
    free(bytes);
    return rc;
}

/* The checkpoint: its config, tokenizer files and tensors, planned as the engine lays
 * them out. */
static int open_checkpoint(struct packer *pk, struct k3_err *err)
{
    const char *dir = pk->o->checkpoint;
    char path[K3_PATH_MAX];
    if (k3_path_join(path, sizeof path, dir, "config.json", err) ||
        k3_read_small_file(path, &pk->config_text, &pk->config_len, err) ||
        k3_config_parse(&pk->cfg, path, pk->config_text, pk->config_len, err) ||
        read_optional(dir, "tiktoken.model", &pk->tiktoken, &pk->tiktoken_len, err) ||
        read_optional(dir, "tokenizer_config.json", &pk->tokconfig, &pk->tokconfig_len, err) ||
        k3_ckpt_open(&pk->ck, dir, err))
        return -1;
    /* The input is read once, front to back within each shard: ask for deep readahead. */
    for (int s = 0; s < pk->ck->n_shards; s++)
        posix_fadvise(pk->ck->shards[s].fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    if (k3_ckpt_plan_init(&pk->plan, pk->ck, &pk->cfg, err) || trunk_as(pk, err))
        return -1;
    k3_record_layout_init(&pk->rec, &pk->cfg);
    return 0;
}

static void packer_free(struct packer *pk)
{
    for (int d = 0; pk->files && d < pk->n_drives; d++)
        k3io_close(&pk->files[d]);
    free(pk->files);
    k3_pack_plan_free(&pk->pp);
    free(pk->buf);
    free(pk->config_text);
    free(pk->tiktoken);
    free(pk->tokconfig);
    k3_ckpt_plan_free(&pk->plan);
    k3_ckpt_close(pk->ck);
    k3_config_free(&pk->cfg);
}

int k3_pack(const struct k3_pack_opts *o, struct k3_err *err)
{
    struct packer pk = {.o = o, .n_drives = o->n_drives, .start = k3_now(),
                        .share = {(uint32_t)o->share.rank, (uint32_t)o->share.ranks}};
    int rc = open_checkpoint(&pk, err) || check_share(&pk, err) || plan(&pk, err) ||
                     check_drives(&pk, err)
                 ? -1
                 : 0;
    if (!rc) {
        const struct k3_pack_plan *pp = &pk.pp;
        note(&pk, false, "%llu objects in %llu pieces over %d drives, record %llu B in pieces "
             "of %u B", (unsigned long long)pp->n_objects, (unsigned long long)pp->n_pieces,
             pk.n_drives, (unsigned long long)pk.rec.bytes,
             pp->n_objects > pp->n_trunk ? (uint32_t)pp->record_piece : 0);
        if (o->trunk_type != K3_TRUNK_BF16)
            note(&pk, false, "trunk: %s, %.3f GB (%.3f GB as shipped)",
                 k3_trunk_type_name(o->trunk_type), trunk_bytes(&pk, true) / 1e9,
                 trunk_bytes(&pk, false) / 1e9);
        if (!k3_share_whole(o->share))
            note(&pk, false, "rank %d of %d: the trunk and %d of every layer's %d experts; the "
                 "others' records are read for the model's checksum only", o->share.rank,
                 o->share.ranks, k3_share_experts(o->share, pk.cfg.n_experts), pk.cfg.n_experts);
        rc = open_drives(&pk, err) || write_objects(&pk, err) || write_manifests(&pk, err) ? -1 : 0;
    }
    if (!rc)
        note(&pk, false, "done: %.2f GB in %.1f s", pk.total_bytes / 1e9, k3_now() - pk.start);
    packer_free(&pk);
    return rc;
}
